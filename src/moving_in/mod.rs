//! Moving in from the original servers: `pigeonhole import-intray FILE.sqlite3` and
//! `import-tickler FILE.sqlite3` read an Intray or Tickler server's SQLite database into a
//! data directory that no server is running on (docs/moving-in.md).
//!
//! `import-intray` reads the file in two passes ([`sqlite`] streams rows, [`intray`] maps
//! them to domain values with [`values`]): the first decodes every row and keeps only the
//! accounts and their keys, then checks them and every item uuid against the store; the
//! second reads the items again and writes them in bounded batches through the store's
//! import journal, all or nothing (a run cut short is undone when the store is next
//! opened). `import-tickler` does the same, its triggered items read beside the outcomes of
//! their deliveries (each table sorted by the item's uuid by SQLite). A file that is
//! not such a database, or any row that does not read, is one error line and nothing is
//! written. The file is data from outside: [`sqlite`] opens it read-only, refuses views and
//! triggers, and bounds each value and the time spent.

mod error;
pub mod intray;
pub mod sqlite;
pub mod tickler;
pub mod values;

pub use error::{FileError, MoveInError};

use crate::config::MoveInArgs;
use crate::domain::scheduler::schedule::{self, Zone};
use crate::store::moving_in::{SchedulerItem, Target};
use crate::store::{Arrival, StoreError, WaitDurable};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use uuid::Uuid;

/// Which server a database comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Intray,
    Tickler,
}

impl Origin {
    fn what(self) -> &'static str {
        match self {
            Origin::Intray => "an Intray database",
            Origin::Tickler => "a Tickler database",
        }
    }
}

/// What a run left behind, besides the accounts.
#[derive(Debug, Default)]
pub struct Notes {
    /// Which of the originals' layouts the file has (docs/moving-in.md).
    pub layout: String,
    /// Rows whose account (or trigger) is not in the file.
    pub orphans: usize,
    /// Access-key permissions the old server had and this one has not (dropped; a name the
    /// originals never had is an error instead).
    pub unknown_permissions: Vec<String>,
    /// Deliveries of triggered items that had not finished (not sent again).
    pub unfinished_deliveries: usize,
}

/// What moved in.
#[derive(Debug)]
pub struct Report {
    pub origin: Origin,
    pub moved: Vec<String>,
    pub already_here: Vec<String>,
    pub items: usize,
    pub notes: Notes,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let service = match self.origin {
            Origin::Intray => "inbox",
            Origin::Tickler => "scheduler",
        };
        write!(
            f,
            "moved in {} {service} account(s) with {} item(s)",
            self.moved.len(),
            self.items
        )?;
        if !self.moved.is_empty() {
            write!(f, ": {}", self.moved.join(", "))?;
        }
        if !self.notes.layout.is_empty() {
            write!(f, "\nthe file has the layout of {}", self.notes.layout)?;
        }
        if !self.already_here.is_empty() {
            write!(f, "\nalready here, skipped: {}", self.already_here.join(", "))?;
        }
        if self.notes.orphans > 0 {
            write!(
                f,
                "\nleft out {} row(s) of accounts or triggers that the file does not have",
                self.notes.orphans
            )?;
        }
        if !self.notes.unknown_permissions.is_empty() {
            write!(
                f,
                "\ndropped access-key permissions unknown here: {}",
                self.notes.unknown_permissions.join(", ")
            )?;
        }
        if self.notes.unfinished_deliveries > 0 {
            write!(
                f,
                "\n{} unfinished delivery(ies) of triggered items are not sent again",
                self.notes.unfinished_deliveries
            )?;
        }
        Ok(())
    }
}

/// Runs `import-intray` / `import-tickler`; the error is one line, and then nothing was
/// written.
pub fn run(origin: Origin, args: &MoveInArgs) -> Result<Report, MoveInError> {
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => crate::config::default_data_dir().map_err(|e| MoveInError::DataDir(e.to_string()))?,
    };
    let db = sqlite::OldDatabase::open(&args.file, origin.what()).map_err(MoveInError::Unopenable)?;
    let notes = Notes::default();
    match origin {
        Origin::Intray => move_in_intray(&db, &data_dir, notes),
        Origin::Tickler => move_in_tickler(&db, &data_dir, notes),
    }
    .map_err(|e| e.at(&args.file))
}

/// Why moving in failed, before the file's path is added: the file (a row that does not
/// read), a conflict, the store, or the data directory.
#[derive(Debug)]
enum Failure {
    File(FileError),
    /// The conflicts with the accounts here.
    Conflict(Vec<String>),
    Store(StoreError),
    /// The data directory could not be opened, or the runtime not started.
    Open(MoveInError),
}

impl From<FileError> for Failure {
    fn from(e: FileError) -> Failure {
        Failure::File(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

impl Failure {
    /// The command's error, for the file `file`.
    fn at(self, file: &Path) -> MoveInError {
        match self {
            Failure::File(error) => MoveInError::File {
                file: file.to_owned(),
                error,
            },
            Failure::Conflict(all) => MoveInError::Conflicts(all),
            Failure::Store(error) => MoveInError::Write {
                error,
                says_nothing_kept: true,
            },
            Failure::Open(e) => e,
        }
    }
}

/// After how many batches on disk a test run stops (and waits to be killed), to show that
/// a run cut short leaves nothing (tests/moving_in/moving_in_bounds.rs); unset in real use.
const STOP_AFTER_BATCHES: &str = "PIGEONHOLE_TEST_MOVE_IN_STOP_AFTER_BATCHES";

/// The accounts of `accounts` that move in (those here already are named in the report and
/// left out), once none of them is a conflict (`arrivals`, `conflict`: the store's answer)
/// and no uuid of their items is taken: `each_id` hands on each (owner, uuid) of the file's
/// items, one row at a time, and `taken` says whether a uuid is in use (here, or by
/// another record of the file).
fn moving<A>(
    accounts: Vec<A>,
    account: impl Fn(&A) -> &crate::domain::account::Account,
    (arrivals, conflict): (Vec<Arrival>, bool),
    each_id: impl FnOnce(&mut dyn FnMut(Uuid, Uuid) -> Result<(), Failure>) -> Result<(), Failure>,
    taken: impl Fn(Uuid) -> Result<bool, StoreError>,
    report: &mut Report,
) -> Result<Vec<A>, Failure> {
    let conflicts: Vec<String> = arrivals
        .iter()
        .filter_map(|a| match a {
            Arrival::Conflict(why) => Some(why.clone()),
            _ => None,
        })
        .collect();
    if conflict || !conflicts.is_empty() {
        return Err(Failure::Conflict(conflicts));
    }
    let ids: HashSet<Uuid> = accounts
        .iter()
        .zip(&arrivals)
        .filter(|(_, a)| **a == Arrival::Moved)
        .map(|(a, _)| account(a).id)
        .collect();
    each_id(&mut |owner, id| match ids.contains(&owner) && taken(id)? {
        true => Err(Failure::Conflict(vec![format!(
            "the uuid {id} of an item or trigger is in use already"
        )])),
        false => Ok(()),
    })?;
    let mut out = Vec::new();
    for (arriving, arrival) in accounts.into_iter().zip(&arrivals) {
        match arrival {
            Arrival::Moved => {
                report.moved.push(account(&arriving).username.clone());
                out.push(arriving);
            }
            _ => report.already_here.push(account(&arriving).username.clone()),
        }
    }
    Ok(out)
}

/// Runs `write` with the wait for each batch to be on disk (which, in a test run asked to,
/// stops after [`STOP_AFTER_BATCHES`] batches and waits to be killed).
fn writing<T>(write: impl FnOnce(WaitDurable<'_>) -> Result<T, Failure>) -> Result<T, Failure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Open(MoveInError::Runtime(e)))?;
    let stop_after = std::env::var(STOP_AFTER_BATCHES)
        .ok()
        .and_then(|n| n.parse::<usize>().ok());
    let batches = std::cell::Cell::new(0usize);
    let wait = |w: crate::store::Written<()>| {
        runtime.block_on(w.durable())?;
        // what the batch freed goes back to the kernel: glibc keeps freed heap otherwise,
        // and the peak would grow with the pages sled freed (docs/moving-in.md)
        crate::memory::release_free_memory();
        batches.set(batches.get() + 1);
        if stop_after == Some(batches.get()) {
            eprintln!("test: {} batches on disk, waiting to be killed", batches.get());
            loop {
                std::thread::park();
            }
        }
        Ok(())
    };
    write(&wait)
}

fn new_report(origin: Origin, notes: Notes) -> Report {
    Report {
        origin,
        moved: Vec::new(),
        already_here: Vec::new(),
        items: 0,
        notes,
    }
}

/// `import-intray` in two passes over the file (docs/moving-in.md): the first reads and
/// decodes every row and keeps only the accounts and their keys, then (with the store open)
/// checks the accounts and every item uuid against the store row by row; the second reads
/// the items again and writes them in bounded batches, all or nothing.
fn move_in_intray(db: &sqlite::OldDatabase, data_dir: &Path, mut notes: Notes) -> Result<Report, Failure> {
    let checked = intray::check(db, &mut notes)?;
    let mut target = open_target(data_dir)?;
    let mut report = new_report(Origin::Intray, notes);
    let inbox = &target.store()?.sled()?.inbox;
    let arrivals = inbox.move_in_arrivals(checked.accounts.iter().map(|a| &a.account))?;
    let accounts = moving(
        checked.accounts,
        |a| &a.account,
        arrivals,
        |each| intray::each_item_id(db, each),
        |id| inbox.item_id_taken(id),
        &mut report,
    )?;
    if accounts.is_empty() {
        return Ok(report);
    }
    let ids: HashSet<Uuid> = accounts.iter().map(|a| a.account.id).collect();
    let layout = checked.layout;
    let counts = writing(|wait| {
        crate::store::moving_in::move_in_inbox(
            &mut target,
            &accounts,
            |sink| {
                intray::each_item(db, layout, |owner, item| match ids.contains(&owner) {
                    true => Ok::<(), Failure>(sink(owner, item)?),
                    false => Ok(()),
                })
            },
            wait,
        )
    })?;
    report.items = counts.iter().sum::<u64>() as usize;
    Ok(report)
}

/// `import-tickler` in two passes over the file, as `import-intray`: the first reads and
/// decodes every row and keeps only the accounts with their settings and triggers, then
/// checks them and every item uuid against the store; the second reads the items again
/// (the triggered ones beside the outcomes of their deliveries) and writes them in bounded
/// batches, all or nothing.
fn move_in_tickler(db: &sqlite::OldDatabase, data_dir: &Path, mut notes: Notes) -> Result<Report, Failure> {
    let checked = tickler::check(db, &mut notes)?;
    let mut target = open_target(data_dir)?;
    let mut report = new_report(Origin::Tickler, notes);
    let scheduler = &target.store()?.sled()?.scheduler;
    let arrivals = scheduler.move_in_arrivals(checked.accounts.iter().map(|a| &a.account))?;
    let accounts = moving(
        checked.accounts.clone(),
        |a| &a.account,
        arrivals,
        |each| {
            for a in &checked.accounts {
                for t in &a.triggers {
                    each(a.account.id, t.id)?;
                }
            }
            tickler::each_item_id(db, |owner, id| match checked.trigger_created.contains_key(&id) {
                true => Err(Failure::File(FileError::Other(format!(
                    "the uuid {id} is an item's and a trigger's in the file"
                )))),
                false => each(owner, id),
            })
        },
        |id| scheduler.id_taken(id),
        &mut report,
    )?;
    if accounts.is_empty() {
        return Ok(report);
    }
    let zones: HashMap<Uuid, Zone> = accounts
        .iter()
        .map(|a| (a.account.id, Zone::of(&a.settings.clone().unwrap_or_default())))
        .collect();
    let counts = writing(|wait| {
        crate::store::moving_in::move_in_scheduler(
            &mut target,
            &accounts,
            |sink| {
                tickler::each_scheduled(db, checked.layout, |item| match zones.get(&item.owner) {
                    Some(zone) => {
                        let due = schedule::due(&item.tickle, zone);
                        Ok::<(), Failure>(sink(SchedulerItem::Scheduled(item, due))?)
                    }
                    None => Ok(()),
                })?;
                tickler::each_triggered(db, &checked, |item| match zones.contains_key(&item.owner) {
                    true => Ok::<(), Failure>(sink(SchedulerItem::Triggered(item))?),
                    false => Ok(()),
                })?;
                Ok(())
            },
            wait,
        )
    })?;
    report.items = counts.iter().map(|(s, t)| s + t).sum::<u64>() as usize;
    Ok(report)
}

/// Opens the data directory's store for a move-in; a running server holds its lock.
fn open_target(dir: &Path) -> Result<Target, Failure> {
    crate::datadir::prepare(dir).map_err(|e| Failure::Open(MoveInError::DataDir(e)))?;
    Target::open(dir)
        .map(|t| t.after_closing(crate::memory::release_free_memory))
        .map_err(|e| {
            Failure::Open(MoveInError::DataDir(match e {
                StoreError::Locked(_) => format!(
                    "the data directory {} is in use by a running pigeonhole server: stop it first, then move in",
                    dir.display()
                ),
                e => format!("cannot open the data directory {}: {e}", dir.display()),
            }))
        })
}
