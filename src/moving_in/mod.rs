//! Moving in from the original servers: `pigeonhole import-intray FILE.sqlite3` and
//! `import-tickler FILE.sqlite3` read an Intray or Tickler server's SQLite database into a
//! data directory that no server is running on (docs/moving-in.md).
//!
//! Everything is read and checked first ([`sqlite`] reads, [`intray`] and [`tickler`] map
//! old rows to domain values with [`values`]); only then is the store opened and every
//! account written in one batch, whose receipt is awaited (flushed and synced) before the
//! command answers. A file that is not such a database, or any row that does not read, is
//! one error line and nothing is written. The file is data from outside: [`sqlite`] opens it
//! read-only, refuses views and triggers, and bounds each value and the time spent.

pub mod intray;
pub mod sqlite;
pub mod tickler;
pub mod values;

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
pub fn run(origin: Origin, args: &MoveInArgs) -> Result<Report, String> {
    let data_dir = match &args.data_dir {
        Some(d) => d.clone(),
        None => crate::config::default_data_dir()?,
    };
    let db = sqlite::OldDatabase::open(&args.file, origin.what())?;
    let mut notes = Notes::default();
    let fail = |e: String| format!("{}: {e}; nothing was written", args.file.display());
    let written = match origin {
        Origin::Intray => {
            let accounts = intray::read(&db, &mut notes).map_err(fail)?;
            let store = open_store(&data_dir)?;
            let items = accounts.iter().map(|a| a.items.len()).collect::<Vec<_>>();
            let names = accounts.iter().map(|a| a.account.username.clone()).collect();
            let arrivals = finish(&store, store.inbox.move_in(&accounts))?;
            (arrivals, names, items)
        }
        Origin::Tickler => {
            let accounts = tickler::read(&db, &mut notes).map_err(fail)?;
            let store = open_store(&data_dir)?;
            let items = accounts.iter().map(|a| a.scheduled.len() + a.triggered.len()).collect();
            let names = accounts.iter().map(|a| a.account.username.clone()).collect();
            let arrivals = finish(&store, store.scheduler.move_in(&accounts))?;
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
        return Err(format!("{}; nothing was written", conflicts.join("; ")));
    }
    Ok(report)
}

/// Opens the data directory's store; a running server holds its lock.
fn open_store(dir: &Path) -> Result<std::sync::Arc<Store>, String> {
    crate::datadir::prepare(dir)?;
    Store::open(dir).map_err(|e| match e {
        StoreError::Locked(_) => format!(
            "the data directory {} is in use by a running pigeonhole server: stop it first, then move in",
            dir.display()
        ),
        e => format!("cannot open the data directory {}: {e}", dir.display()),
    })
}

/// Waits until the batch is on disk and flushes the store before it is closed.
fn finish(
    store: &Store,
    queued: crate::store::Result<crate::store::moving_in::MoveIn>,
) -> Result<Vec<Arrival>, String> {
    let fail = |e: StoreError| format!("could not write to the data directory: {e}");
    let receipt = queued.map_err(fail)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let arrivals = runtime.block_on(receipt.durable()).map_err(fail)?;
    store.flush().map_err(fail)?;
    Ok(arrivals)
}
