//! Persistence of the domain; the only module that knows its engines. Two layers:
//!
//! * the seam, engine-neutral: [`api`], one async trait per concern (accounts, inbox items,
//!   scheduled items, triggers, the delivery and e-mail queues, payment events,
//!   administration), in domain operations (add an item, sync, the items due up to an
//!   instant, …), each one transaction; the words they answer in ([`inbox`], [`scheduler`],
//!   [`Registration`], …); the [`Written`] receipt; the throttles' trait ([`throttles`]); the
//!   stream of records that moves a database between engines ([`copy`]). [`Store`] holds one
//!   `Arc<dyn …>` per concern; callers see nothing else;
//! * the engines, each implementing the traits and importing nothing of the other: `sled`
//!   (the default: the data directory's database, with its format, backup and moving in)
//!   and [`postgres`].
//!
//! This file assembles the store: it is the one module of the neutral layer that names an
//! engine (opening each, and what only sled has: [`mod@format`], [`moving_in`], [`restore`]).
//!
//! Every write answers a [`Written`] receipt whose result is had only once the write is on
//! disk (sled: after a `flush()` and its syncs that concurrent writers share; an engine that
//! commits before it answers: at once; see `written.rs`).

pub mod api;
pub mod copy;
pub mod inbox;
pub mod postgres;
pub mod scheduler;
mod sled;
#[cfg(test)]
pub(crate) mod suite;
pub mod throttles;
pub mod undecodable;
mod written;

// what only the sled engine has: its format, moving in, the backup file, its ends of a copy
pub use self::sled::accounts::Arrival;
pub use self::sled::backup::{restore, verify};
pub use self::sled::copy::{SledSource, SledTarget};
pub use self::sled::{format, moving_in};
pub(crate) use api::own_id;
pub use api::{
    Accounts, Administration, BackupSummary, ClaimedWork, Coordination, CycleStats, Deliveries, Emails, EngineCounters,
    HistogramSnapshot, InboxItems, Listed, OnceWork, PageSize, PaymentEvents, PoolStats, Registration, ScheduledItems,
    SchemaVersions, Triggers, WaitDurable, WriterStats,
};
pub use written::Written;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// An engine's own error, kept whole as the source of a [`StoreError`].
pub type EngineError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug)]
pub enum StoreError {
    /// The storage engine failed: its own error, boxed (no engine type leaves the store).
    Engine(EngineError),
    /// The database cannot be reached right now (a PostgreSQL server that is down,
    /// restarting or refusing connections, or no pooled connection in time): the engine's
    /// error, boxed. It passes: the next request may succeed without a restart.
    Unreachable(EngineError),
    Codec(String),
    Io(std::io::Error),
    Locked(PathBuf),
    NotDurable,
    /// The store takes no writes (a write cycle failed: disk full, I/O error) until a
    /// restart; the write was not queued and no read sees it. Reads go on. The reason.
    Unavailable(String),
    /// A stored record that this version cannot decode (written by a newer version, or
    /// damaged): its kind and key (see [`undecodable`]).
    Undecodable(Box<Undecodable>),
    /// The engine does not do this; the text says what to use instead (a PostgreSQL
    /// database is backed up with `pg_dump`, docs/backup.md).
    Unsupported(String),
    /// The database was written in a format newer than this version reads ([`mod@format`]).
    NewerFormat {
        dir: PathBuf,
        found: u32,
    },
}

/// A record that could not be decoded: which kind (`"account"`, `"inbox item"`, …), under
/// which key of its tree, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undecodable {
    pub kind: &'static str,
    pub key: Vec<u8>,
    pub reason: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Engine(e) | StoreError::Unreachable(e) => write!(f, "database error: {e}"),
            StoreError::Codec(e) => write!(f, "corrupt record: {e}"),
            StoreError::Io(e) => write!(f, "i/o error: {e}"),
            StoreError::Locked(p) => write!(
                f,
                "the data directory {} is in use by another pigeonhole process",
                p.display()
            ),
            StoreError::NotDurable => write!(f, "the database could not be flushed to disk"),
            StoreError::Unavailable(why) => write!(f, "the database takes no writes: {why}"),
            StoreError::Unsupported(what) => write!(f, "{what}"),
            StoreError::Undecodable(u) => write!(
                f,
                "undecodable {} record (key {}): {}",
                u.kind,
                hex::encode(&u.key),
                u.reason
            ),
            StoreError::NewerFormat { dir, found } => write!(
                f,
                "the database in {} has format {found}, written by a newer version of Pigeonhole; this \
                 version ({}) reads formats up to {}. Nothing was changed: run the newer version, or \
                 restore a backup made by this one into an empty data directory",
                dir.display(),
                env!("CARGO_PKG_VERSION"),
                format::CURRENT
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Engine(e) | StoreError::Unreachable(e) => Some(e.as_ref()),
            StoreError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Locks `m`, also when a thread panicked while holding it: every lock of the store guards
/// either nothing (account stripes, registrations: the data lives in sled, and batches are
/// atomic) or queued batches and the overlay, which each critical section leaves whole
/// (it only pushes, takes or removes entire entries).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The open database: both services' data behind the traits of [`api`], and what the engine
/// keeps besides (sled: the data-directory lock and the group commit).
pub struct Store {
    pub inbox: Inbox,
    pub scheduler: Scheduler,
    /// The engine: health, flush, statistics, backup.
    pub admin: Arc<dyn Administration>,
    /// Login, registration and e-mail counts: this process's memory on sled (it alone
    /// opens the database), the database's on PostgreSQL ([`throttles`]).
    pub throttles: Arc<dyn throttles::Throttles>,
    /// What several processes on one database settle through it: who does the work that
    /// runs once, wake-ups of the others' workers ([`api::Coordination`]).
    pub coordination: Arc<dyn Coordination>,
    /// The records requests met that could not be decoded (the health check's count).
    undecodable: Arc<undecodable::UndecodableRecords>,
    /// The sled engine's own parts (`None` on another engine).
    sled: Option<self::sled::Parts>,
}

/// The inbox service's data: its accounts and (through `Deref`) its items.
pub struct Inbox {
    pub accounts: Arc<dyn Accounts>,
    pub items: Arc<dyn InboxItems>,
}

impl std::ops::Deref for Inbox {
    type Target = dyn InboxItems;
    fn deref(&self) -> &Self::Target {
        &*self.items
    }
}

/// The scheduler service's data: its accounts, (through `Deref`) its items, its triggers,
/// queues and payment events.
pub struct Scheduler {
    pub accounts: Arc<dyn Accounts>,
    pub items: Arc<dyn ScheduledItems>,
    pub triggers: Arc<dyn Triggers>,
    pub deliveries: Arc<dyn Deliveries>,
    pub emails: Arc<dyn Emails>,
    pub payments: Arc<dyn PaymentEvents>,
}

impl std::ops::Deref for Scheduler {
    type Target = dyn ScheduledItems;
    fn deref(&self) -> &Self::Target {
        &*self.items
    }
}

/// Creates `dir` if needed and takes the exclusive lock on it that every user of its
/// database holds (a server, a restore, moving in): `StoreError::Locked` when another has it.
/// The lock lasts as long as the returned file is open. A server on a shared database
/// takes it too: each process keeps its local files (the outbox) in a directory of its own.
pub fn lock_dir(dir: &Path) -> Result<File> {
    // errors name the file (a read-only or full file system, a wrong owner)
    let named = |path: &Path, e: std::io::Error| {
        StoreError::Io(std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    };
    std::fs::create_dir_all(dir).map_err(|e| named(dir, e))?;
    let path = dir.join("pigeonhole.lock");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| named(&path, e))?;
    // A lock this process just released can still be held for a moment by a child process
    // that another thread forked before it closed its file: flock(2) locks belong to the
    // open file, which fork shares until the child's exec closes it. So a taken lock is
    // tried again for up to a second before the directory is reported in use (a test that
    // reopened a store while another test spawned a program met this).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match lock.try_lock() {
            Ok(()) => return Ok(lock),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::Locked(dir.into())),
            Err(std::fs::TryLockError::Error(e)) => return Err(named(&path, e)),
        }
    }
}

impl Store {
    /// Opens (creating if needed) the sled database in the data directory `dir`, holding an
    /// exclusive lock on the directory for as long as the store lives. A database of an
    /// older format is migrated first, after a backup next to it; a newer one is
    /// [`StoreError::NewerFormat`], before anything is written ([`mod@format`]).
    pub fn open(dir: &Path) -> Result<Arc<Store>> {
        self::sled::open(dir, lock_dir(dir)?)
    }

    /// The records met at run time that could not be decoded (logged once each, counted
    /// for the health check).
    pub fn undecodable(&self) -> &Arc<undecodable::UndecodableRecords> {
        &self.undecodable
    }

    /// A store of another engine over the traits' implementations (the PostgreSQL store
    /// makes it, [`postgres::open`]).
    pub(crate) fn of_engine(
        inbox: Inbox,
        scheduler: Scheduler,
        admin: Arc<dyn Administration>,
        throttles: Arc<dyn throttles::Throttles>,
        coordination: Arc<dyn Coordination>,
    ) -> Store {
        Store {
            inbox,
            scheduler,
            admin,
            throttles,
            coordination,
            undecodable: Arc::default(),
            sled: None,
        }
    }

    /// Whether the engine is sled (in the data directory, opened by this process alone).
    pub fn is_sled(&self) -> bool {
        self.sled.is_some()
    }

    /// The sled engine's own parts, for the operations only it has (moving in from Intray
    /// and Tickler, its format migrations): [`StoreError::Unsupported`] on another engine.
    pub(crate) fn sled(&self) -> Result<&self::sled::Parts> {
        self.sled.as_ref().ok_or_else(|| {
            StoreError::Unsupported(
                "this needs a sled data directory: move in to one, then copy it to PostgreSQL with \
                 `pigeonhole migrate-store`"
                    .into(),
            )
        })
    }

    /// Writes everything queued to disk, in the calling thread (migrations, sled tests).
    pub(crate) fn flush(&self) -> Result<()> {
        self.admin.flush()
    }

    /// What the group commit did so far (sled tests).
    #[cfg(test)]
    fn writer_stats(&self) -> WriterStats {
        self.admin.writer_stats()
    }
}
