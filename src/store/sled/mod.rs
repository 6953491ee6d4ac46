//! The sled engine behind the traits of [`super::api`] (the zero-configuration default):
//!
//! * the per-service stores of domain operations, which implement the traits: [`accounts`]
//!   ([`super::api::Accounts`]), [`inbox`] ([`super::api::InboxItems`]), [`scheduler`] (one
//!   file per job; the scheduler's traits in `scheduler/traits.rs`) and `admin.rs`
//!   ([`super::api::Administration`]). They build atomic batches of keys ([`keys`]) and
//!   records ([`records`]: private, versioned record types, the only things encoded) and
//!   serialise the read-check-write sequences of one account with striped locks
//!   ([`Stripes`]);
//! * the engine: opening the data directory's database ([`open`]: its format, [`mod@format`],
//!   checked and migrated first), one writer thread with group commit and an in-memory
//!   overlay of queued writes and a write-ahead journal ([`writer`], [`wal`]), values over
//!   4 KiB in chunks ([`chunks`]), the `fsync`s after each flush of sled ([`stable`]); imports in journalled batches ([`imports`]),
//!   moving in ([`moving_in`]) and the backup file ([`backup`]).

pub(crate) mod accounts;
pub(crate) mod backup;
pub(crate) mod chunks;
pub(crate) mod copy;
pub mod format;
pub(crate) mod imports;
pub(crate) mod in_key_order;
pub mod inbox;
pub(crate) mod keys;
pub mod moving_in;
pub(crate) mod records;
pub mod scheduler;
pub(crate) mod stable;
pub(crate) mod wal;
pub(crate) mod writer;

// what the engine's files name as `super::…` (the store's shared types)
#[allow(unused_imports)]
use super::*;

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

impl From<::sled::Error> for StoreError {
    fn from(e: ::sled::Error) -> Self {
        StoreError::Engine(Box::new(e))
    }
}

/// The answer of a sled operation called through its trait from a test without a runtime:
/// every sled operation answers at its first poll (it never waits; a write answers a
/// receipt, which is what is awaited).
#[cfg(test)]
pub(crate) fn ready<F: std::future::Future>(operation: F) -> F::Output {
    futures_util::FutureExt::now_or_never(operation).expect("a sled operation answers at its first poll")
}

/// Serialises the writes of one account (and registrations of one username): a striped set
/// of locks, so that read-check-write sequences of an account are atomic while different
/// accounts proceed in parallel. Only this process opens the database (see the lock file),
/// so an in-process lock is enough.
pub(crate) struct Stripes {
    locks: Vec<Mutex<()>>,
}

impl Stripes {
    fn new(n: usize) -> Stripes {
        Stripes {
            locks: (0..n).map(|_| Mutex::new(())).collect(),
        }
    }

    pub(crate) fn lock(&self, id: &[u8]) -> MutexGuard<'_, ()> {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in id {
            h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        let i = (h % self.locks.len() as u64) as usize;
        lock(&self.locks[i])
    }
}

/// The capacity of sled's page cache. sled counts a page at its size on disk; decoded in
/// memory it takes about two and a half times that, so 8 MiB of cache held about 22 MiB once
/// a burst of writes had filled it. 2 MiB keeps the pages that writes to one account touch
/// (its newest items, its count) and those of the random id index that fit; measured, the
/// server's CPU per write was the same as with 8 MiB (docs/performance.md).
const SLED_CACHE: u64 = 2 * 1024 * 1024;

/// sled and the writer over the services' trees, in the order of [`backup`]'s tree names.
pub(crate) struct Engine {
    writer: writer::Writer,
    recovered: bool,
}

impl Engine {
    /// `settle`: undo or drop what imports a stop interrupted left (always, but when a
    /// move-in reopens the database it is writing: see [`open_during_move_in`]).
    fn open(db_dir: &Path, settle: bool) -> Result<Engine> {
        // no background flush of sled's own: the journal makes each write durable, and sled
        // writes its files at the writer's checkpoints only, which sync them before the
        // journal is emptied (a background flush could write between that sync and the
        // emptying)
        let db = ::sled::Config::new()
            .path(db_dir)
            .cache_capacity(SLED_CACHE)
            .flush_every_ms(None)
            .open()?;
        let writer = writer::Writer::start(
            db.clone(),
            vec![db.open_tree("inbox")?, db.open_tree("scheduler")?],
            db_dir,
        )?;
        // imports a stop interrupted are undone before anything reads the trees
        let trees = if settle { ["inbox", "scheduler"].as_slice() } else { &[] };
        for (index, name) in trees.iter().enumerate() {
            let settled = imports::settle(&writer.tree(index), &|_| writer.flush_now())?;
            if settled.undone > 0 {
                tracing::warn!(
                    "an account import that was interrupted was undone in the {name} tree: {} keys are as before it",
                    settled.undone
                );
            }
            if settled.dropped > 0 {
                tracing::info!(
                    "the journal of a complete import was dropped in the {name} tree ({} entries)",
                    settled.dropped
                );
            }
        }
        Ok(Engine {
            writer,
            recovered: db.was_recovered(),
        })
    }
}

/// What only the sled engine has: its service stores (for its own operations: migrations
/// of its format, moving in, its tests), the group commit and the data-directory lock.
pub(crate) struct Parts {
    pub(crate) inbox: Arc<self::sled::inbox::InboxStore>,
    pub(crate) scheduler: Arc<self::sled::scheduler::SchedulerStore>,
    writer: Arc<writer::Writer>,
    _lock: File,
}

/// The coordination of a store that one process alone opens (sled, under the directory's
/// lock): it does every work itself, and there is no other process to wake.
struct Alone;

#[async_trait::async_trait]
impl Coordination for Alone {
    async fn leads(&self, _work: OnceWork) -> bool {
        true
    }

    fn announce(&self, _worker: &'static str) {}

    async fn release(&self) {}

    /// One process holds everything: nothing to renew.
    async fn renew_claims(&self) {}

    /// No other process: nothing is claimed elsewhere.
    async fn claims_elsewhere_end(&self, _work: ClaimedWork) -> Option<std::time::Duration> {
        None
    }
}

/// Waits until no sled database of this process holds the database directory `db` (sled
/// locks its `db` file; a database this process dropped a moment ago may still be closing in
/// sled's own threads: seen on a loaded machine, where a copy reopening its database every
/// 32 MiB found the lock still held). Another process holding it is [`StoreError::Locked`]
/// once the wait is over.
fn wait_until_closed(db: &Path) -> Result<()> {
    let file = match File::open(db.join("db")) {
        Ok(file) => file,
        // no database yet
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::Io(e)),
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match file.try_lock() {
            // released at once: the probe only looked
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::Locked(db.into())),
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::Io(e)),
        }
    }
}

/// Opens (creating if needed) the sled database of the data directory `dir` under the
/// directory's lock taken already (`lock`, from [`lock_dir`], or a clone of it: a tool that
/// opens the database several times keeps the lock between two openings by holding the
/// original). A database of an older format is migrated first, after a backup next to it; a
/// newer one is [`StoreError::NewerFormat`], before anything is written ([`mod@format`]).
pub(crate) fn open(dir: &Path, lock: File) -> Result<Arc<Store>> {
    open_settling(dir, lock, true)
}

/// [`open`] without settling the import journals: only for a move-in that closes and opens
/// again the database it is writing (to bound sled's memory, [`imports::Batches::reopening`]),
/// under the directory's lock it has held since it first opened it (settled then). Its own
/// journal is then the only one, and settling would undo it.
pub(crate) fn open_during_move_in(dir: &Path, lock: File) -> Result<Arc<Store>> {
    open_settling(dir, lock, false)
}

fn open_settling(dir: &Path, lock: File, settle: bool) -> Result<Arc<Store>> {
    wait_until_closed(&dir.join("db"))?;
    // a newer format stops here, before the engine opens (and writes) anything
    let found = format::before_open(dir)?;
    let Engine { writer, recovered } = Engine::open(&dir.join("db"), settle)?;
    let writer = Arc::new(writer);
    if recovered {
        tracing::info!("opened the existing database in {}", dir.display());
    }
    let stripes = Arc::new(Stripes::new(256));
    let inbox = Arc::new(self::sled::inbox::InboxStore::new(writer.tree(0), stripes.clone()));
    let scheduler = Arc::new(self::sled::scheduler::SchedulerStore::new(writer.tree(1), stripes));
    let store = Store {
        inbox: Inbox {
            accounts: inbox.accounts.clone(),
            items: inbox.clone(),
        },
        scheduler: Scheduler {
            accounts: scheduler.accounts.clone(),
            items: scheduler.clone(),
            triggers: scheduler.clone(),
            deliveries: scheduler.clone(),
            emails: scheduler.clone(),
            payments: scheduler.clone(),
        },
        admin: writer.clone(),
        throttles: Arc::new(throttles::MemoryThrottles::default()),
        coordination: Arc::new(Alone),
        undecodable: Arc::default(),
        sled: Some(Parts {
            inbox,
            scheduler,
            writer,
            _lock: lock,
        }),
    };
    // an older format: backed up next to it, migrated, on disk before anything else
    format::migrate(&store, dir, found)?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::inbox::models::{InboxItem, ItemType};
    use crate::domain::wire::Timestamp;
    use crate::store::inbox::AddOutcome;
    use crate::store::PageSize;
    use uuid::Uuid;

    /// A sled error becomes the store's `Engine` error with the same text as before, and
    /// the sled error itself is kept as its source (no sled type in the store's signature).
    #[test]
    fn a_sled_error_is_kept_as_the_engine_error_source() {
        let e = StoreError::from(::sled::Error::Unsupported("a test".into()));
        assert!(matches!(e, StoreError::Engine(_)));
        assert_eq!(e.to_string(), "database error: Unsupported: a test");
        let source = std::error::Error::source(&e).expect("the sled error is kept");
        assert!(matches!(
            source.downcast_ref::<::sled::Error>(),
            Some(::sled::Error::Unsupported(what)) if what == "a test"
        ));
    }

    /// Only the engine layer (writer, chunks, stable files, opening in this file) names
    /// the sled crate: the service stores (under `store/sled/`, implementing the traits),
    /// the traits and everything outside the store speak domain operations.
    #[test]
    fn only_the_engine_names_sled() {
        fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("read src") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let engine = [
            "store/sled/mod.rs",
            "store/sled/writer.rs",
            "store/sled/chunks.rs",
            "store/sled/stable.rs",
        ];
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut offenders = Vec::new();
        for file in all {
            let rel = file
                .strip_prefix(&src)
                .expect("under src")
                .to_string_lossy()
                .into_owned();
            if engine.contains(&rel.as_str()) {
                continue;
            }
            let code = std::fs::read_to_string(&file).expect("read");
            for (n, line) in code.lines().enumerate() {
                let line = line.trim_start();
                // the module `store::sled` is not the crate
                let line = line
                    .replace("self::sled::", "")
                    .replace("super::sled::", "")
                    .replace("store::sled::", "");
                if !line.starts_with("//") && (line.contains("sled::") || line.contains("use sled")) {
                    offenders.push(format!("src/{rel}:{}: {line}", n + 1));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "sled outside the engine layer:\n{}",
            offenders.join("\n")
        );
    }

    /// A database written before the e-mail queue had a prefix per stage holds its queue
    /// under `m` + sequence: opening it moves every entry to its stage with the same
    /// sequence (so the order stays) and indexes it by owner, once; nothing is lost, and
    /// deleting the account then finds its e-mails through the index.
    #[test]
    fn e_mails_queued_by_an_older_version_are_moved_to_their_stages_at_open() {
        use crate::domain::account::Account;
        use crate::domain::email::{EmailKind, Message, QueuedEmail, Stage};
        use crate::domain::scheduler::models::Delivery;

        let dir = tempfile::tempdir().expect("temporary directory");
        let owner = Uuid::from_bytes([0x11; 16]);
        let trigger = Some(Uuid::from_bytes([0x44; 16]));
        let delivery = Delivery {
            id: Uuid::from_bytes([0x55; 16]),
            owner,
            item: Uuid::from_bytes([0x33; 16]),
            trigger: Uuid::from_bytes([0x44; 16]),
            trigger_created: Timestamp::from_unix(1_700_000_100, 0),
            email: true,
            failures: 0,
            not_before: Timestamp::from_unix(0, 0),
        };
        let html = "<p>long</p>".repeat(1000); // over 4 KiB: stored in chunks
        let queued = [
            (
                7u64,
                QueuedEmail::new(
                    owner,
                    trigger,
                    EmailKind::Verification {
                        to: "c@x.org".into(),
                        key: "k".into(),
                    },
                ),
            ),
            (
                8,
                QueuedEmail::new(
                    owner,
                    trigger,
                    EmailKind::Triggered {
                        delivery: delivery.clone(),
                        to: "c@x.org".into(),
                    },
                ),
            ),
            (
                9,
                QueuedEmail::new(
                    Uuid::nil(),
                    None,
                    EmailKind::AdminNotice {
                        worker: "emailer".into(),
                        error: "e".into(),
                    },
                ),
            ),
            (
                10,
                QueuedEmail::new(
                    owner,
                    trigger,
                    EmailKind::Rendered {
                        message: Message {
                            to: "c@x.org".into(),
                            subject: "S".into(),
                            text: "T".into(),
                            html,
                        },
                        delivery: Some(delivery),
                    },
                ),
            ),
            (
                11,
                QueuedEmail::new(
                    Uuid::nil(),
                    None,
                    EmailKind::AdminNotice {
                        worker: "triggerer".into(),
                        error: "f".into(),
                    },
                ),
            ),
        ];
        // the database as the older version left it (through the writer, so that the large
        // e-mail is in chunks as it would have been)
        {
            let store = Store::open(dir.path()).expect("open");
            let account = Account {
                id: owner,
                username: "carol".into(),
                password_hash: crate::domain::account::PasswordHash::Pbkdf2("hash".into()),
                created: Timestamp::from_unix(1_700_000_000, 0),
                last_login: None,
                epoch: 0,
            };
            let tree = store.sled().unwrap().writer.tree(1);
            let mut batch = writer::Batch::default();
            batch.insert(keys::account(owner), records::account::encode(&account));
            batch.insert(keys::username("carol"), records::raw::uuid(owner));
            for (seq, email) in &queued {
                let mut k = keys::legacy_emails();
                k.extend_from_slice(&seq.to_be_bytes());
                batch.insert(k, records::email::encode(email));
            }
            let _ = tree.apply_batch(batch); // made durable by the flush
            store.flush().expect("flush");
        }
        // a database of format 1 (formats were not recorded then)
        std::fs::remove_file(dir.path().join("db").join("pigeonhole-format")).expect("format file");
        let legacy_left = |dir: &Path| {
            let db = ::sled::Config::new().path(dir.join("db")).open().expect("sled");
            let tree = db.open_tree("scheduler").expect("tree");
            tree.scan_prefix(keys::legacy_emails()).count()
        };
        assert_eq!(legacy_left(dir.path()), 5);

        let store = Store::open(dir.path()).expect("open and move the queue");
        // migrated: a backup of the database as it was lies next to it, the format is recorded
        let backups: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("db-format-1-") && n.ends_with(".backup"))
            .collect();
        assert_eq!(backups.len(), 1, "{backups:?}");
        let summary = verify(&dir.path().join(&backups[0]), &[]).expect("a valid backup");
        assert!(summary.records >= 7, "{summary:?}");
        assert_eq!(format::check(dir.path()).expect("format"), Some(format::CURRENT));
        let stage = |stage: Stage| -> Vec<String> {
            let found = ready(store.scheduler.emails.queued_emails(stage, usize::MAX)).expect("queue");
            found.iter().map(|(_, e)| format!("{e:?}")).collect()
        };
        let expected = |seqs: &[u64]| -> Vec<String> {
            queued
                .iter()
                .filter(|(s, _)| seqs.contains(s))
                .map(|(_, e)| format!("{e:?}"))
                .collect()
        };
        assert_eq!(stage(Stage::Verification), expected(&[7]));
        assert_eq!(stage(Stage::Triggered), expected(&[8]));
        assert_eq!(stage(Stage::AdminNotice), expected(&[9, 11]), "in the order queued");
        assert_eq!(stage(Stage::Rendered), expected(&[10]));
        let keys_of = |stage: Stage| -> Vec<Vec<u8>> {
            let found = ready(store.scheduler.emails.queued_emails(stage, usize::MAX)).expect("queue");
            found.iter().map(|(k, _)| k.as_bytes().to_vec()).collect()
        };
        assert_eq!(
            keys_of(Stage::AdminNotice),
            vec![keys::email(Stage::AdminNotice, 9), keys::email(Stage::AdminNotice, 11)]
        );

        // the account's e-mails are found through the owner index; admin notices stay
        let deleted = ready(store.scheduler.delete_account(owner)).expect("delete");
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        assert!(runtime.block_on(deleted.durable()).expect("durable"));
        drop(store);
        assert_eq!(legacy_left(dir.path()), 0, "moved, and the move is on disk");
        let store = Store::open(dir.path()).expect("reopen");
        for stage in [Stage::Verification, Stage::Triggered, Stage::Rendered] {
            assert!(ready(store.scheduler.emails.queued_emails(stage, usize::MAX))
                .expect("queue")
                .is_empty());
        }
        assert_eq!(
            ready(store.scheduler.emails.queued_emails(Stage::AdminNotice, usize::MAX))
                .expect("queue")
                .len(),
            2
        );
        drop(store);
        let db = ::sled::Config::new().path(dir.path().join("db")).open().expect("sled");
        let tree = db.open_tree("scheduler").expect("tree");
        assert_eq!(
            tree.scan_prefix(keys::emails_of_owner(owner)).count(),
            0,
            "index entries removed"
        );
        assert_eq!(
            tree.scan_prefix([chunks::CHUNK_PREFIX]).count(),
            0,
            "no chunk left behind"
        );
    }

    /// A receipt yields its result once the write is acknowledged by the writer; a write
    /// that changed nothing resolves at once, except a repeated idempotency key, whose
    /// receipt also covers the first request's batch.
    #[tokio::test]
    async fn receipts_resolve_once_written_and_at_once_when_nothing_changed() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Store::open(dir.path()).expect("open");
        let acknowledged = || store.writer_stats().batches;

        let before = acknowledged();
        let created = store
            .inbox
            .accounts
            .register("alice", "hash".into(), Timestamp::now())
            .await;
        let created = created.expect("register");
        assert!(created.changed());
        let Registration::Created(alice) = created.durable().await.expect("durable") else {
            panic!("a fresh store has no alice");
        };
        assert_eq!(acknowledged(), before + 1);

        let taken = store
            .inbox
            .accounts
            .register("alice", "hash".into(), Timestamp::now())
            .await;
        let taken = taken.expect("register");
        assert!(!taken.changed());
        assert!(matches!(taken.durable().await.expect("at once"), Registration::Taken));
        let missing = store.inbox.delete_item(alice.id, Uuid::nil()).await.expect("delete");
        assert!(!missing.changed());
        assert!(!missing.durable().await.expect("at once"));

        let before = acknowledged();
        let first = store
            .inbox
            .add_item(alice.id, &item(1), Some("k"), None)
            .await
            .expect("add");
        let repeat = store
            .inbox
            .add_item(alice.id, &item(2), Some("k"), None)
            .await
            .expect("add");
        assert!(first.changed() && !repeat.changed());
        let AddOutcome::Repeated(id) = repeat.durable().await.expect("durable") else {
            panic!("the key was used");
        };
        assert!(acknowledged() > before, "the first request's batch is on disk");
        assert!(matches!(first.durable().await.expect("durable"), AddOutcome::Added(first) if first == id));

        let both = store
            .inbox
            .add_item(alice.id, &item(3), None, None)
            .await
            .expect("add")
            .and(Written::nothing());
        assert!(both.changed());
        let mut receipts = Vec::new();
        for n in 4..8 {
            receipts.push(store.inbox.add_item(alice.id, &item(n), None, None).await.expect("add"));
        }
        let many = Written::all(receipts);
        assert_eq!(many.durable().await.expect("durable").len(), 4);
        // the last of 7 batches (registration, items 1, 3 and 4–7) covers every earlier one
        assert_eq!(acknowledged(), 7);
        both.durable().await.expect("durable");
        assert_eq!(store.inbox.count(alice.id).await.expect("count"), 6);
    }

    /// Pages through the traits read the whole listing in order, a page at a time, the
    /// writes still queued included; a page after an item deleted meanwhile is empty.
    #[tokio::test]
    async fn pages_read_the_listing_in_order_and_end_after_a_deleted_item() {
        const THREE: PageSize = PageSize {
            items: 3,
            bytes: usize::MAX,
        };
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Store::open(dir.path()).expect("open");
        let account = crate::domain::wire::new_uuid();
        for n in 0..10 {
            let added = store.inbox.add_item(account, &item(n), None, None).await.expect("add");
            added.durable().await.expect("durable");
        }
        let all: Vec<Uuid> = store
            .inbox
            .items(account)
            .await
            .expect("items")
            .iter()
            .map(|i| i.id)
            .collect();
        let mut paged = Vec::new();
        let mut after = None;
        loop {
            let page = store.inbox.items_page(account, after, THREE).await.expect("page");
            assert!(page.len() <= 3);
            paged.extend(page.iter().map(|i| i.id));
            match page.last() {
                Some(last) if THREE.is_full(&page) => after = Some(last.id),
                _ => break,
            }
        }
        assert_eq!(paged, all);
        let deleted = store.inbox.delete_item(account, all[4]).await.expect("delete");
        assert!(deleted.durable().await.expect("durable"));
        assert!(store
            .inbox
            .items_page(account, Some(all[4]), THREE)
            .await
            .expect("page")
            .is_empty());
        let other = crate::domain::wire::new_uuid();
        assert!(store
            .inbox
            .items_page(other, Some(all[3]), THREE)
            .await
            .expect("page")
            .is_empty());
        assert!(store
            .scheduler
            .scheduled_page(account, None, THREE)
            .await
            .expect("page")
            .is_empty());
        assert!(store
            .scheduler
            .triggered_page(account, None, THREE)
            .await
            .expect("page")
            .is_empty());
    }

    fn item(n: usize) -> InboxItem {
        InboxItem {
            id: crate::domain::wire::new_uuid(),
            kind: ItemType::Text,
            data: format!("item {n}").into_bytes(),
            created: Timestamp::now(),
        }
    }

    fn item_ids(store: &Store, account: Uuid) -> Vec<Uuid> {
        ready(store.inbox.items(account))
            .expect("items")
            .iter()
            .map(|i| i.id)
            .collect()
    }

    /// Many threads adding to, deleting from and reading one account at once, with the real
    /// writer thread: the item limit and the idempotency keys hold, the counter always
    /// matches, and a reopened store has exactly what was acknowledged.
    #[test]
    fn concurrent_writes_to_one_account_stay_consistent_and_durable() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let account = crate::domain::wire::new_uuid();
        let limit = 300;
        let kept = {
            let store = Store::open(dir.path()).expect("open");
            let threads: Vec<_> = (0..8)
                .map(|t| {
                    let store = store.clone();
                    std::thread::spawn(move || {
                        // each thread waits for its writes as a handler does
                        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
                        let durable = |w: Written<_>| runtime.block_on(w.durable()).expect("durable");
                        let mut kept = Vec::new();
                        for n in 0..60 {
                            // Every thread uses the same 20 idempotency keys: each stores one item.
                            let key = (n % 3 == 0).then(|| format!("key {}", n % 20));
                            let added = ready(store.inbox.add_item(account, &item(n), key.as_deref(), Some(limit)));
                            match durable(added.expect("add")) {
                                AddOutcome::Added(id) if n % 5 == 4 => {
                                    let deleted = ready(store.inbox.delete_item(account, id)).expect("delete");
                                    assert!(runtime.block_on(deleted.durable()).expect("durable"));
                                }
                                AddOutcome::Added(id) => kept.push((id, key)),
                                AddOutcome::Repeated(_) => assert!(key.is_some(), "thread {t}"),
                                AddOutcome::LimitReached => {}
                            }
                            let count = ready(store.inbox.count(account)).expect("count");
                            assert!(count <= limit, "{count} items");
                        }
                        kept
                    })
                })
                .collect();
            let kept: Vec<_> = threads.into_iter().flat_map(|t| t.join().expect("thread")).collect();
            let ids = item_ids(&store, account);
            assert_eq!(ids.len() as u64, ready(store.inbox.count(account)).expect("count"));
            let mut expected: Vec<Uuid> = kept.iter().map(|(id, _)| *id).collect();
            let mut got = ids.clone();
            expected.sort();
            got.sort();
            assert_eq!(got, expected, "exactly the kept items");
            let keyed = kept.iter().filter(|(_, k)| k.is_some()).count();
            assert!(keyed <= 20, "{keyed} items for 20 idempotency keys");
            ids
        };
        let store = Store::open(dir.path()).expect("reopen");
        assert_eq!(
            item_ids(&store, account),
            kept,
            "same items, same order after reopening"
        );
        assert_eq!(ready(store.inbox.count(account)).expect("count"), kept.len() as u64);
    }
}
