//! Moving in from the original servers: `pigeonhole import-intray FILE.sqlite3` and
//! `import-tickler FILE.sqlite3` read an Intray or Tickler server's SQLite database into a
//! data directory that no server is running on (docs/moving-in.md).
//!
//! `import-intray` reads the file in two passes ([`sqlite`] streams rows, [`intray`] maps
//! them to domain values with [`values`]): the first decodes every row and keeps only the
//! accounts and their keys, then checks them and every item uuid against the store; the
//! second reads the items again and writes them in bounded batches through the store's
//! import journal, all or nothing (a run cut short is undone when the store is next
//! opened). `import-tickler` reads everything first, then writes the same way. A file that is
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
use crate::store::{Arrival, Store, StoreError};
use std::path::Path;

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
    let mut notes = Notes::default();
    let fail = |error: FileError| MoveInError::File {
        file: args.file.clone(),
        error,
    };
    let written = match origin {
        Origin::Intray => return move_in_intray(&db, &data_dir, notes).map_err(|e| e.at(&args.file)),
        Origin::Tickler => {
            let accounts = tickler::read(&db, &mut notes).map_err(fail)?;
            let store = open_store(&data_dir)?;
            let items = accounts.iter().map(|a| a.scheduled.len() + a.triggered.len()).collect();
            let names = accounts.iter().map(|a| a.account.username.clone()).collect();
            let arrivals = move_in_tickler(&store, &accounts)?;
            (arrivals, names, items)
        }
    };
    let (arrivals, names, items): (Vec<Arrival>, Vec<String>, Vec<usize>) = written;
    let mut report = Report {
        origin,
        moved: Vec::new(),
        already_here: Vec::new(),
        items: 0,
        notes,
    };
    let mut conflicts = Vec::new();
    for ((arrival, name), n) in arrivals.into_iter().zip(names).zip(items) {
        match arrival {
            Arrival::Moved => {
                report.moved.push(name);
                report.items += n;
            }
            Arrival::AlreadyHere => report.already_here.push(name),
            Arrival::Conflict(why) => conflicts.push(why),
        }
    }
    if !conflicts.is_empty() {
        return Err(MoveInError::Conflicts(conflicts));
    }
    Ok(report)
}

/// Why moving in from Intray failed, before the file's path is added: the file (a row that
/// does not read), a conflict, the store, or the data directory.
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

/// `import-intray` in two passes over the file (docs/moving-in.md): the first reads and
/// decodes every row and keeps only the accounts and their keys, then (with the store open)
/// checks the accounts and every item uuid against the store row by row; the second reads
/// the items again and writes them in bounded batches, all or nothing.
fn move_in_intray(db: &sqlite::OldDatabase, data_dir: &Path, mut notes: Notes) -> Result<Report, Failure> {
    let checked = intray::check(db, &mut notes)?;
    let store = open_store(data_dir).map_err(Failure::Open)?;
    let (arrivals, conflict) = store
        .sled()?
        .inbox
        .move_in_arrivals(checked.accounts.iter().map(|a| &a.account))?;
    let mut conflicts: Vec<String> = arrivals
        .iter()
        .filter_map(|a| match a {
            Arrival::Conflict(why) => Some(why.clone()),
            _ => None,
        })
        .collect();
    let moving: std::collections::HashSet<uuid::Uuid> = checked
        .accounts
        .iter()
        .zip(&arrivals)
        .filter(|(_, a)| **a == Arrival::Moved)
        .map(|(a, _)| a.account.id)
        .collect();
    if !conflict {
        intray::each_item_id(db, |owner, id| {
            if moving.contains(&owner) && store.sled()?.inbox.item_id_taken(id)? {
                conflicts.push(format!("the uuid {id} of an item or trigger is in use already"));
                return Err(Failure::Conflict(std::mem::take(&mut conflicts)));
            }
            Ok(())
        })?;
    }
    if !conflicts.is_empty() {
        return Err(Failure::Conflict(conflicts));
    }
    let mut report = Report {
        origin: Origin::Intray,
        moved: Vec::new(),
        already_here: Vec::new(),
        items: 0,
        notes,
    };
    let mut accounts = Vec::new();
    for (arriving, arrival) in checked.accounts.into_iter().zip(&arrivals) {
        match arrival {
            Arrival::Moved => {
                report.moved.push(arriving.account.username.clone());
                accounts.push(arriving);
            }
            _ => report.already_here.push(arriving.account.username),
        }
    }
    if accounts.is_empty() {
        return Ok(report);
    }
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
        batches.set(batches.get() + 1);
        if stop_after == Some(batches.get()) {
            eprintln!("test: {} batches on disk, waiting to be killed", batches.get());
            loop {
                std::thread::park();
            }
        }
        Ok(())
    };
    let layout = checked.layout;
    let counts = store.sled()?.inbox.move_in_streamed(
        &accounts,
        |sink| {
            intray::each_item(db, layout, |owner, item| {
                if moving.contains(&owner) {
                    sink(owner, item)?;
                }
                Ok::<(), Failure>(())
            })
        },
        &wait,
    )?;
    store.admin.flush()?;
    report.items = counts.iter().sum::<u64>() as usize;
    Ok(report)
}

/// Opens the data directory's store; a running server holds its lock.
fn open_store(dir: &Path) -> Result<std::sync::Arc<Store>, MoveInError> {
    crate::datadir::prepare(dir).map_err(MoveInError::DataDir)?;
    Store::open(dir).map_err(|e| {
        MoveInError::DataDir(match e {
            StoreError::Locked(_) => format!(
                "the data directory {} is in use by a running pigeonhole server: stop it first, then move in",
                dir.display()
            ),
            e => format!("cannot open the data directory {}: {e}", dir.display()),
        })
    })
}

/// Writes the Tickler accounts in bounded batches, each on disk before the next, and
/// flushes the store before it is closed.
fn move_in_tickler(
    store: &Store,
    accounts: &[crate::store::moving_in::SchedulerArrival],
) -> Result<Vec<Arrival>, MoveInError> {
    let fail = |error: StoreError| MoveInError::Write {
        error,
        says_nothing_kept: false,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(MoveInError::Runtime)?;
    let wait = |w: crate::store::Written<()>| runtime.block_on(w.durable());
    let arrivals = store
        .sled()
        .map_err(fail)?
        .scheduler
        .move_in(accounts, &wait)
        .map_err(fail)?;
    store.admin.flush().map_err(fail)?;
    Ok(arrivals)
}
