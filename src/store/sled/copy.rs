//! The sled engine's side of moving between engines ([`crate::store::copy`]): a stopped data
//! directory dumped as the stream of records ([`SledSource`], its signing key first), and a
//! stream loaded into an empty data directory ([`SledTarget`]): built in `DIR/.migrating`,
//! moved to `DIR/db` with the signing key beside it only when kept, removed otherwise.
//!
//! The dump reads the records of both trees prefix by prefix, in the order of
//! [`crate::store::copy::Kind`] (accounts before what they own, triggered items before their
//! queues: the order a load into a database with foreign keys needs), with values whole and
//! one record at a time, so memory stays bounded; the source is stopped (opened under its
//! lock), so nothing changes between two prefixes. Indexes and counts derived from the
//! records (the username, item, digest, due and owner indexes, the per-account counts) are
//! not records of the stream. A key of any other prefix is a fact this version does not know
//! how to carry: [`CopyError::Unrepresentable`], so that nothing is dropped silently. The
//! signing key lives beside the database (the data directory's key file), so the caller
//! adds it.
//!
//! The load writes each record with the indexes and per-account counts the store keeps for
//! it, through the store's writer (every few thousand records flushed, so memory stays
//! bounded), checking what the store relies on: the account of each record is loaded before
//! it, no id or username is there twice, a queue entry's triggered item exists. It ends by
//! dumping the new database again, for the tally the copy is checked by.
//!
//! sled 0.34 keeps every page it has read until the database is closed, so a dump closes
//! and opens the database again every [`REOPEN_BYTES`] (measured in docs/performance.md).

use super::writer::Batch;
use super::{keys, records, Store};
use crate::domain::email::Stage;
use crate::store::copy::{CopyError, Dump, Load, Loaded, Record, Service, Tally, STAGES};
use crate::store::{lock_dir, StoreError};
use std::fs::File;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;
use uuid::Uuid;

/// A stopped sled data directory to copy from, opened under its lock (a directory a server
/// runs on is [`StoreError::Locked`]; one without a database is refused, not made).
pub struct SledSource {
    dir: PathBuf,
    /// The name of the token signing key's file in it.
    key_file: String,
    lock: File,
}

impl SledSource {
    pub fn open(dir: &Path, key_file: &str) -> Result<SledSource, CopyError> {
        if !dir.join("db").is_dir() {
            return Err(CopyError::Invalid(format!("{} holds no sled database", dir.display())));
        }
        Ok(SledSource {
            lock: lock_dir(dir)?,
            dir: dir.to_path_buf(),
            key_file: key_file.to_owned(),
        })
    }

    /// Calls `out` with the signing key (when the directory has one), then every record.
    pub(crate) fn dump_into(&self, out: &mut dyn FnMut(Record) -> Result<(), CopyError>) -> Result<(), CopyError> {
        match std::fs::read(self.dir.join(&self.key_file)) {
            Ok(key) => out(Record::SigningKey(key))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::Io(e).into()),
        }
        dump(&mut || super::open(&self.dir, self.lock.try_clone()?), out)
    }
}

#[async_trait::async_trait]
impl Dump for SledSource {
    async fn dump(self: Box<Self>, out: mpsc::Sender<Record>) -> Result<(), CopyError> {
        tokio::task::spawn_blocking(move || {
            self.dump_into(&mut |r| out.blocking_send(r).map_err(|_| CopyError::Stopped))
        })
        .await
        .unwrap_or_else(|e| Err(CopyError::Invalid(format!("the dump failed: {e}"))))
    }
}

/// An empty sled data directory to copy into (made if needed), under its lock: one that
/// holds a database is [`CopyError::NotEmpty`]; a half-built one that an interrupted copy
/// left is removed.
pub struct SledTarget {
    dir: PathBuf,
    /// The name of the token signing key's file in it.
    key_file: String,
    _lock: File,
}

impl SledTarget {
    pub fn open(dir: &Path, key_file: &str) -> Result<SledTarget, CopyError> {
        let lock = lock_dir(dir)?;
        if dir.join("db").exists() {
            return Err(CopyError::NotEmpty(format!("{} holds a database", dir.display())));
        }
        let building = dir.join(".migrating");
        if building.exists() {
            // left by an interrupted copy: never used by a server
            std::fs::remove_dir_all(&building).map_err(StoreError::Io)?;
        }
        Ok(SledTarget {
            dir: dir.to_path_buf(),
            key_file: key_file.to_owned(),
            _lock: lock,
        })
    }

    /// Builds the database in `DIR/.migrating` from the records `next` gives and reads it
    /// back; removed again unless kept.
    pub(crate) fn load_from(self, next: &mut dyn FnMut() -> Option<Record>) -> Result<SledLoaded, CopyError> {
        let building = self.dir.join(".migrating");
        let mut loaded = SledLoaded {
            target: self,
            building,
            signing_key: None,
            tally: Tally::default(),
            kept: false,
        };
        let building_lock = lock_dir(&loaded.building)?;
        let (signing_key, tally) = load(&mut || super::open(&loaded.building, building_lock.try_clone()?), next)?;
        (loaded.signing_key, loaded.tally) = (signing_key, tally);
        Ok(loaded)
    }
}

#[async_trait::async_trait]
impl Load for SledTarget {
    /// sled does not record which occurrence made a triggered copy.
    fn keeps_occurrences(&self) -> bool {
        false
    }

    async fn load(self: Box<Self>, mut records: mpsc::Receiver<Record>) -> Result<Box<dyn Loaded>, CopyError> {
        let loaded = tokio::task::spawn_blocking(move || self.load_from(&mut || records.blocking_recv()))
            .await
            .unwrap_or_else(|e| Err(CopyError::Invalid(format!("the load failed: {e}"))))?;
        Ok(Box::new(loaded))
    }
}

/// A database built in `DIR/.migrating`, read back: [`Loaded::keep`] moves it to `DIR/db`
/// (the signing key beside it); dropped unkept, it is removed.
pub(crate) struct SledLoaded {
    target: SledTarget,
    building: PathBuf,
    signing_key: Option<Vec<u8>>,
    tally: Tally,
    kept: bool,
}

impl SledLoaded {
    /// The key file, the database moved into place, the directory synced.
    pub(crate) fn keep_now(mut self) -> Result<(), CopyError> {
        let io = |e: std::io::Error| CopyError::Store(StoreError::Io(e));
        let dir = &self.target.dir;
        if let Some(key) = &self.signing_key {
            crate::files::write(&dir.join(&self.target.key_file), crate::files::Access::Private, key).map_err(io)?;
        }
        std::fs::rename(self.building.join("db"), dir.join("db")).map_err(io)?;
        self.kept = true;
        std::fs::remove_dir_all(&self.building).map_err(io)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
    }
}

impl Drop for SledLoaded {
    fn drop(&mut self) {
        if !self.kept {
            let _ = std::fs::remove_dir_all(&self.building);
        }
    }
}

#[async_trait::async_trait]
impl Loaded for SledLoaded {
    fn tally(&self) -> &Tally {
        &self.tally
    }

    async fn keep(self: Box<Self>) -> Result<(), CopyError> {
        tokio::task::spawn_blocking(move || self.keep_now())
            .await
            .unwrap_or_else(|e| Err(CopyError::Invalid(format!("keeping the copy failed: {e}"))))
    }
}

/// The record prefixes of the trees (tree, prefix) in dump order (`u`, the payment
/// customers, are carried with their accounts and read to refuse one without its account).
fn dump_order() -> Vec<(usize, u8)> {
    let mut order = vec![
        (0, b'a'),
        (1, b'a'),
        (0, b'u'),
        (1, b'u'),
        (0, b'k'),
        (1, b'k'),
        (0, b'i'),
        (0, b'p'),
        (1, b'z'),
        (1, b's'),
        (1, b'x'),
        (1, b'g'),
        (1, b'r'),
        (1, b'v'),
    ];
    order.extend(STAGES.iter().map(|s| (1, keys::stage_prefix(*s))));
    order.extend([(1, b'E'), (1, b'F')]);
    order
}

/// Prefixes derived from the records (indexes, counts), never records of the stream.
const DERIVED: &[(usize, u8)] = &[
    (0, b'n'),
    (1, b'n'),
    (0, b'c'),
    (1, b'c'),
    (0, b'd'),
    (0, b'h'),
    (1, b'h'),
    (1, b'S'),
    (1, b'X'),
    (1, b'q'),
    (1, b'G'),
    (1, b'o'),
    // the chunks of long values (read with their record)
    (0, super::chunks::CHUNK_PREFIX),
    (1, super::chunks::CHUNK_PREFIX),
];

/// Bytes a copy reads or writes through one opening of a sled database before it closes
/// and opens it again: sled 0.34 keeps every page it has loaded until the database is
/// closed, whatever its cache capacity (sled issue #1036; measured: iterating a 240 MB tree
/// left 235 MB resident, reopening every 32 MiB kept it at 47 MB), so a copy of a large
/// database reopens it to stay within its memory budget.
/// (The tests reopen every 64 KiB, so that small databases cross it.)
const REOPEN_BYTES: usize = if cfg!(test) { 64 * 1024 } else { 32 * 1024 * 1024 };

/// Opens the database being copied (again), under the lock the caller holds.
pub(crate) type Open<'a> = dyn FnMut() -> crate::store::Result<std::sync::Arc<Store>> + 'a;

/// Calls `out` with every record of the database that `open` opens (under its directory's
/// lock), in [`Kind`] order, reopening it every [`REOPEN_BYTES`] read.
pub(crate) fn dump(open: &mut Open<'_>, out: &mut dyn FnMut(Record) -> Result<(), CopyError>) -> Result<(), CopyError> {
    let order = dump_order();
    let mut store = open()?;
    // a prefix the dump does not know: refused before anything is given out
    for tree in 0..2 {
        let lookup = store.sled()?.writer.tree(tree);
        for first in 0..=u8::MAX {
            if order.contains(&(tree, first)) || DERIVED.contains(&(tree, first)) {
                continue;
            }
            if let Some(entry) = lookup.scan_prefix([first]).next() {
                let (key, _) = entry?;
                return Err(unknown(tree, &key));
            }
        }
    }
    let mut read = 0usize;
    for (tree, prefix) in order {
        let service = [Service::Inbox, Service::Scheduler][tree];
        let mut after: Option<Vec<u8>> = None;
        loop {
            // a part: up to REOPEN_BYTES from `after` (the iterator and the tree are gone
            // before the database is closed)
            let mut stopped_at = None;
            {
                let lookup = store.sled()?.writer.tree(tree);
                let entries = match &after {
                    None => lookup.scan_prefix([prefix]),
                    Some(last) => lookup.scan_prefix_after(&[prefix], last),
                };
                for entry in entries {
                    let (key, value) = entry?;
                    read += key.len() + value.len();
                    if let Some(record) = record_of(&lookup, tree, service, &key, &value)? {
                        out(record)?;
                    }
                    if read >= REOPEN_BYTES {
                        stopped_at = Some(key.to_vec());
                        break;
                    }
                }
            }
            let Some(key) = stopped_at else { break };
            read = 0;
            after = Some(key);
            drop(store);
            store = open()?;
        }
    }
    Ok(())
}

fn unknown(tree: usize, key: &[u8]) -> CopyError {
    match key.first() {
        Some(b'j' | b'J') => CopyError::Unrepresentable {
            kind: "an account import's journal",
            what: "the data directory holds an interrupted import: start the server once and stop it (it \
                   settles the import), then copy"
                .into(),
        },
        _ => CopyError::Unrepresentable {
            kind: "a record of an unknown kind",
            what: format!("tree {tree}, key {}", hex::encode(key)),
        },
    }
}

fn malformed(kind: &'static str, key: &[u8]) -> CopyError {
    CopyError::Unrepresentable {
        kind,
        what: format!("a malformed key {}", hex::encode(key)),
    }
}

/// The stream record of the stored `key` and `value` of `tree`, `None` for indexes and
/// counts derived from other records.
fn record_of(
    lookup: &super::writer::Tree,
    tree: usize,
    service: Service,
    key: &[u8],
    value: &[u8],
) -> Result<Option<Record>, CopyError> {
    let Some(prefix) = key.first() else {
        return Err(malformed("an unknown record", key));
    };
    let account_at_1 = || keys::uuid_at(key, 1).ok_or_else(|| malformed("a record", key));
    let record = match (tree, prefix) {
        (_, b'a') => {
            let account = records::account::decode(key, value)?;
            let customer = lookup.get(keys::customer(account.id))?;
            Record::Account {
                service,
                account,
                customer: customer.map(|c| records::raw::to_customer(&c)),
            }
        }
        // the payment customer id: carried with its account (above); one without is a fact
        // the stream has no place for
        (_, b'u') => {
            if lookup.contains_key(keys::account(account_at_1()?))? {
                return Ok(None);
            }
            return Err(CopyError::Unrepresentable {
                kind: "a payment customer id",
                what: format!("of an account that does not exist (key {})", hex::encode(key)),
            });
        }
        (0, b'i') => {
            let created = keys::created_of(key).ok_or_else(|| malformed("an inbox item", key))?;
            Record::InboxItem {
                account: account_at_1()?,
                item: records::item::decode(key, value, created)?,
            }
        }
        (_, b'k') => Record::AccessKey {
            service,
            account: account_at_1()?,
            key: records::access_key::decode(key, value)?,
        },
        (0, b'p') => Record::Idempotency {
            account: account_at_1()?,
            key: String::from_utf8(key.get(17..).unwrap_or_default().to_vec())
                .map_err(|_| malformed("an idempotency key", key))?,
            item: records::raw::to_uuid("idempotency key", key, value)?,
        },
        (1, b's') => {
            let (item, due) = records::scheduled::decode(key, value)?;
            Record::Scheduled { item, due }
        }
        // sled does not record which occurrence made a triggered copy
        (1, b'x') => Record::Triggered {
            item: records::triggered::decode(key, value)?,
            occurrence: None,
        },
        (1, b'g') => Record::Trigger(records::trigger::decode(key, value)?),
        (1, b'z') => Record::Settings {
            account: account_at_1()?,
            setting: records::settings::decode(key, value)?,
        },
        (1, b'r') => {
            let t = records::targets::decode(key, value)?;
            Record::Targets {
                item: keys::targets_item(key).ok_or_else(|| malformed("delivery targets", key))?,
                owner: t.owner,
                email: key.get(1) == Some(&b'e'),
                triggers: t.triggers,
            }
        }
        (1, b'v') => Record::Delivery(records::delivery::decode(key, value)?),
        (1, b'V' | b'T' | b'N' | b'M') => Record::Email(records::email::decode(key, value)?),
        (1, b'E') => Record::PaymentEvent {
            id: event_id(key)?,
            failed: None,
        },
        (1, b'F') => Record::PaymentEvent {
            id: event_id(key)?,
            failed: Some(value.to_vec()),
        },
        _ => return Err(unknown(tree, key)),
    };
    Ok(Some(record))
}

fn event_id(key: &[u8]) -> Result<String, CopyError> {
    String::from_utf8(key.get(1..).unwrap_or_default().to_vec()).map_err(|_| malformed("a payment event", key))
}

/// Records written between two flushes of a load (and at most these many bytes of them):
/// what a load keeps in memory.
const LOAD_BATCH: usize = 5_000;
const LOAD_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Writes the records `next` gives into the store `open` opens, which must be new (on an
/// empty directory), until they end; then writes the per-account counts, flushes and dumps
/// the database again: the stream's signing key (written beside the database when kept) and
/// the tally of the new database. A record that breaks a rule of the store is an error, and
/// the directory is thrown away.
fn load(open: &mut Open<'_>, next: &mut dyn FnMut() -> Option<Record>) -> Result<(Option<Vec<u8>>, Tally), CopyError> {
    let mut loader = Loader {
        store: open()?,
        signing_key: None,
        since_flush: 0,
        bytes: 0,
    };
    while let Some(record) = next() {
        loader.put(record)?;
        loader.settle()?;
    }
    loader.flush()?;
    let signing_key = loader.signing_key.take();
    drop(loader);
    let mut tally = Tally::default();
    if let Some(key) = &signing_key {
        tally.add(&Record::SigningKey(key.clone()));
    }
    dump(open, &mut |r| {
        tally.add(&r);
        Ok(())
    })?;
    Ok((signing_key, tally))
}

struct Loader {
    store: std::sync::Arc<Store>,
    signing_key: Option<Vec<u8>>,
    /// Records and bytes since the last flush.
    since_flush: usize,
    bytes: usize,
}

fn tree_of(service: Service) -> usize {
    match service {
        Service::Inbox => 0,
        Service::Scheduler => 1,
    }
}

impl Loader {
    /// Flushes every [`LOAD_BATCH`] records or [`LOAD_BATCH_BYTES`]. (Writing does not
    /// keep pages the way reading does: a load reads only small index records until its
    /// check, which reopens as any dump does.)
    fn settle(&mut self) -> Result<(), CopyError> {
        if self.since_flush >= LOAD_BATCH || self.bytes >= LOAD_BATCH_BYTES {
            self.flush()?;
            self.since_flush = 0;
            self.bytes = 0;
        }
        Ok(())
    }

    fn tree(&self, index: usize) -> Result<super::writer::Tree, CopyError> {
        Ok(self.store.sled()?.writer.tree(index))
    }

    fn flush(&self) -> Result<(), CopyError> {
        Ok(self.store.flush()?)
    }

    /// Applies `batch` to tree `tree` (queued for the next flush; reads see it at once).
    fn apply(&mut self, tree: usize, batch: Batch) -> Result<(), CopyError> {
        self.since_flush += 1;
        // the writer's tickets resolve at the flush the load waits for itself
        let _ = self.tree(tree)?.apply_batch(batch);
        Ok(())
    }

    /// Refuses a record whose account `account` of `tree` is not loaded (yet).
    fn needs_account(&self, tree: usize, account: Uuid, what: &str) -> Result<(), CopyError> {
        if self.tree(tree)?.contains_key(keys::account(account))? {
            Ok(())
        } else {
            Err(CopyError::Invalid(format!(
                "{what} of the account {account}, which is not in the stream before it"
            )))
        }
    }

    /// Refuses a second record under the key `key` of `tree`.
    fn once(&self, tree: usize, key: &[u8], what: impl FnOnce() -> String) -> Result<(), CopyError> {
        if self.tree(tree)?.contains_key(key)? {
            Err(CopyError::Invalid(format!("{} is in the stream twice", what())))
        } else {
            Ok(())
        }
    }

    fn seq(&self) -> Result<u64, CopyError> {
        Ok(self.tree(0)?.next_id()?)
    }

    fn put(&mut self, record: Record) -> Result<(), CopyError> {
        let mut batch = Batch::default();
        let tree = match record {
            Record::SigningKey(key) => {
                if self.signing_key.replace(key).is_some() {
                    return Err(CopyError::Invalid("the signing key is in the stream twice".into()));
                }
                return Ok(());
            }
            Record::Account {
                service,
                account,
                customer,
            } => {
                let tree = tree_of(service);
                self.once(tree, &keys::account(account.id), || {
                    format!("the account {}", account.id)
                })?;
                self.once(tree, &keys::username(&account.username), || {
                    format!("the username {:?}", account.username)
                })?;
                batch.insert(keys::username(&account.username), records::raw::uuid(account.id));
                batch.insert(keys::account(account.id), records::account::encode(&account));
                if let Some(customer) = customer {
                    batch.insert(keys::customer(account.id), records::raw::customer(&customer));
                }
                tree
            }
            Record::AccessKey { service, account, key } => {
                let tree = tree_of(service);
                self.needs_account(tree, account, "an access key")?;
                self.once(tree, &keys::access_key(account, key.id), || {
                    format!("the access key {}", key.id)
                })?;
                if let Some(digest) = key.secret.digest() {
                    self.once(tree, &keys::key_digest(digest), || {
                        format!("the secret of the access key {}", key.id)
                    })?;
                    batch.insert(keys::key_digest(digest), keys::key_owner(account, key.id));
                }
                batch.insert(keys::access_key(account, key.id), records::access_key::encode(&key));
                tree
            }
            Record::InboxItem { account, item } => {
                self.needs_account(0, account, "an inbox item")?;
                self.once(0, &keys::item_id(item.id), || format!("the inbox item {}", item.id))?;
                let place = keys::item_place(account, item.created, self.seq()?);
                self.bytes += item.data.len();
                batch.insert(keys::item(&place), records::item::encode(&item));
                batch.insert(keys::item_id(item.id), place);
                self.count_one(&mut batch, 0, account, false)?;
                0
            }
            Record::Idempotency { account, key, item } => {
                self.needs_account(0, account, "an idempotency key")?;
                if key.len() > 200 {
                    return Err(CopyError::Unrepresentable {
                        kind: "an idempotency key",
                        what: format!("one of {} bytes (sled keeps keys of up to 200)", key.len()),
                    });
                }
                self.once(0, &keys::idempotency(account, &key), || {
                    format!("the idempotency key {key:?}")
                })?;
                batch.insert(keys::idempotency(account, &key), records::raw::uuid(item));
                0
            }
            Record::Settings { account, setting } => {
                self.needs_account(1, account, "a time-zone setting")?;
                self.once(1, &keys::settings(account), || {
                    format!("the setting of the account {account}")
                })?;
                batch.insert(keys::settings(account), records::settings::encode(&setting));
                1
            }
            Record::Scheduled { item, due } => {
                self.needs_account(1, item.owner, "a scheduled item")?;
                self.new_scheduler_id(item.id)?;
                let place = keys::item_place(item.owner, item.created, self.seq()?);
                self.bytes += item.tickle.content.len();
                batch.insert(keys::scheduled_id(item.id), place.clone());
                batch.insert(keys::scheduled(&place), records::scheduled::encode(&item, due));
                batch.insert(keys::due(due, item.id), records::raw::uuid(item.owner));
                self.count_one(&mut batch, 1, item.owner, false)?;
                1
            }
            // sled keeps no occurrence (one process triggers; the copy adds none): the
            // command takes it out of the stream before it reaches here, and says so
            Record::Triggered { item, occurrence } => {
                if occurrence.is_some() {
                    return Err(CopyError::Unrepresentable {
                        kind: "a triggered item's occurrence",
                        what: format!("the triggered item {}", item.id),
                    });
                }
                self.needs_account(1, item.owner, "a triggered item")?;
                self.new_scheduler_id(item.id)?;
                let place = keys::triggered_place(item.owner, item.created, item.triggered, self.seq()?);
                self.bytes += item.tickle.content.len();
                batch.insert(keys::triggered(&place), records::triggered::encode(&item));
                batch.insert(keys::triggered_id(item.id), place);
                self.count_one(&mut batch, 1, item.owner, true)?;
                1
            }
            Record::Trigger(trigger) => {
                self.needs_account(1, trigger.owner, "a trigger")?;
                self.new_scheduler_id(trigger.id)?;
                let place = keys::trigger_place(trigger.owner, self.seq()?, trigger.id);
                batch.insert(keys::trigger(&place), records::trigger::encode(&trigger));
                batch.insert(keys::trigger_id(trigger.id), place);
                1
            }
            Record::Targets {
                item,
                owner,
                email,
                triggers,
            } => {
                self.needs_account(1, owner, "delivery targets")?;
                self.needs_triggered(item, "delivery targets")?;
                let kind = if email {
                    keys::TargetKind::Email
                } else {
                    keys::TargetKind::Inbox
                };
                let value = records::targets::encode(&records::targets::Targets { owner, triggers });
                batch.insert(keys::targets(kind, self.seq()?, item), value);
                1
            }
            Record::Delivery(delivery) => {
                self.needs_account(1, delivery.owner, "a pending delivery")?;
                self.needs_triggered(delivery.item, "a pending delivery")?;
                batch.insert(
                    keys::delivery(self.seq()?, delivery.id),
                    records::delivery::encode(&delivery),
                );
                1
            }
            Record::Email(email) => {
                let stage: Stage = email.kind.stage();
                let seq = self.seq()?;
                let value = records::email::encode(&email);
                self.bytes += value.len();
                batch.insert(keys::email(stage, seq), value);
                if !email.owner.is_nil() {
                    batch.insert(keys::email_of_owner(email.owner, seq), vec![keys::stage_prefix(stage)]);
                }
                1
            }
            Record::PaymentEvent { id, failed } => {
                self.once(1, &keys::event_handled(&id), || format!("the payment event {id:?}"))?;
                self.once(1, &keys::event_failed(&id), || format!("the payment event {id:?}"))?;
                match failed {
                    Some(event) => batch.insert(keys::event_failed(&id), event),
                    None => batch.insert(keys::event_handled(&id), &[] as &[u8]),
                }
                1
            }
        };
        self.apply(tree, batch)
    }

    /// Scheduled items, triggered items and triggers are found by id alone: one id names
    /// one of them.
    fn new_scheduler_id(&self, id: Uuid) -> Result<(), CopyError> {
        for key in [keys::scheduled_id(id), keys::triggered_id(id), keys::trigger_id(id)] {
            self.once(1, &key, || {
                format!("the id {id} of a scheduled or triggered item or trigger")
            })?;
        }
        Ok(())
    }

    fn needs_triggered(&self, item: Uuid, what: &str) -> Result<(), CopyError> {
        if self.tree(1)?.contains_key(keys::triggered_id(item))? {
            Ok(())
        } else {
            Err(CopyError::Invalid(format!(
                "{what} of the triggered item {item}, which is not in the stream before it"
            )))
        }
    }

    /// Adds one to the account's count of inbox items (tree 0) or of scheduled or
    /// triggered items (tree 1; `triggered`), in `batch`: the counts the store keeps beside
    /// the records, counted as the records come (one small read each, whatever the order).
    fn count_one(&self, batch: &mut Batch, tree: usize, account: Uuid, triggered: bool) -> Result<(), CopyError> {
        let key = keys::count(account);
        let stored = self.tree(tree)?.get(&key)?;
        if tree == 0 {
            let n = stored
                .map(|v| records::raw::to_count(&key, &v))
                .transpose()?
                .unwrap_or(0);
            batch.insert(key, records::raw::count(n + 1));
        } else {
            let (s, t) = stored
                .map(|v| records::raw::to_counts(&key, &v))
                .transpose()?
                .unwrap_or((0, 0));
            let counts = if triggered { (s, t + 1) } else { (s + 1, t) };
            batch.insert(key, records::raw::counts(counts));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::account::{Account, PasswordHash};
    use crate::domain::wire::Timestamp;
    use crate::store::copy::samples::{every_kind_for_sled, id as sample_id, t as sample_t};
    use crate::store::copy::{Kind, Tally};
    use crate::store::sled::ready;
    use crate::store::sled::writer::Batch;
    use uuid::Uuid;

    const KEY_FILE: &str = "signing.key";

    /// `records` loaded into the data directory `dir`, read back, not kept yet.
    fn load_into(dir: &Path, records: Vec<Record>) -> Result<SledLoaded, CopyError> {
        let mut records = records.into_iter();
        SledTarget::open(dir, KEY_FILE)?.load_from(&mut || records.next())
    }

    /// What the data directory holds, dumped, with its key file.
    fn dumped_dir(dir: &Path) -> Tally {
        let mut tally = Tally::default();
        let source = SledSource::open(dir, KEY_FILE).expect("open");
        source
            .dump_into(&mut |r| {
                tally.add(&r);
                Ok(())
            })
            .expect("dump");
        tally
    }

    /// Every kind of record goes into a new sled database with its indexes and comes back
    /// out the same; the signing key lands in its file once the load is kept.
    #[test]
    fn every_kind_loads_into_sled_and_dumps_back_the_same() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let records = every_kind_for_sled();
        let mut expected = Tally::default();
        records.iter().for_each(|r| expected.add(r));
        let loaded = load_into(dir.path(), records).expect("load");
        assert_eq!(loaded.tally, expected);
        assert!(!dir.path().join("db").exists(), "nothing in place before it is kept");
        loaded.keep_now().expect("keep");
        assert_eq!(dumped_dir(dir.path()), expected);
        assert_eq!(std::fs::read(dir.path().join(KEY_FILE)).expect("key file"), vec![9; 32]);
        assert!(!dir.path().join(".migrating").exists());
        // the indexes are there: the store finds the item by id and the key by its secret
        let store = Store::open(dir.path()).expect("open");
        let id = sample_id;
        assert!(ready(store.inbox.item(id(1), id(4))).expect("read").is_some());
        assert_eq!(
            ready(store.inbox.accounts.access_key_by_digest(&[3; 32]))
                .expect("read")
                .map(|(a, k)| (a, k.id)),
            Some((id(1), id(2)))
        );
        assert_eq!(ready(store.inbox.count(id(1))).expect("count"), 1);
        assert_eq!(ready(store.scheduler.counts(id(1))).expect("counts"), (1, 1));
    }

    /// A load that is not kept, a record that breaks a rule of the store and a directory that
    /// holds a database already: nothing is kept, and the directory holds no database (nor
    /// a half-built one, nor the signing key) afterwards.
    #[test]
    fn a_load_not_kept_or_broken_or_into_a_full_target_leaves_no_database() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let records = every_kind_for_sled();
        let half: Vec<Record> = records[..records.len() / 2].to_vec();
        let unkept = load_into(dir.path(), half).expect("half a stream loads");
        assert!(dir.path().join(".migrating").exists());
        drop(unkept);
        assert!(!dir.path().join(".migrating").exists(), "dropped unkept: removed");
        let mut orphan = records.clone();
        orphan.push(Record::InboxItem {
            account: sample_id(99),
            item: crate::domain::inbox::models::InboxItem {
                id: sample_id(98),
                kind: crate::domain::inbox::models::ItemType::Text,
                data: b"x".to_vec(),
                created: sample_t(1, 0),
            },
        });
        let broken = load_into(dir.path(), orphan).err();
        assert!(
            matches!(broken, Some(CopyError::Invalid(ref m)) if m.contains("not in the stream before")),
            "{broken:?}"
        );
        let mut twice = records.clone();
        twice.push(records[1].clone());
        assert!(matches!(
            load_into(dir.path(), twice).err(),
            Some(CopyError::Invalid(_))
        ));
        assert!(!dir.path().join("db").exists() && !dir.path().join(".migrating").exists());
        assert!(!dir.path().join(KEY_FILE).exists());

        load_into(dir.path(), records.clone())
            .expect("into the empty directory")
            .keep_now()
            .expect("keep");
        let full = SledTarget::open(dir.path(), KEY_FILE).err();
        assert!(matches!(full, Some(CopyError::NotEmpty(_))), "{full:?}");
    }

    fn account(id: Uuid) -> Account {
        Account {
            id,
            username: "carol".into(),
            password_hash: PasswordHash::Pbkdf2("hash".into()),
            created: Timestamp::from_unix(1_700_000_000, 0),
            last_login: None,
            epoch: 2,
        }
    }

    fn dumped(store: &std::sync::Arc<Store>) -> Result<Vec<Record>, CopyError> {
        let mut out = Vec::new();
        dump(&mut || Ok(store.clone()), &mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Accounts come with their customer id, idempotency keys with their key text; indexes
    /// and counts are not records of the stream; a record of a kind the dump does not know
    /// is refused, not dropped.
    #[test]
    fn a_sled_database_dumps_its_facts_and_refuses_what_it_cannot_carry() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Store::open(dir.path()).expect("open");
        let owner = Uuid::from_bytes([0x11; 16]);
        let item = Uuid::from_bytes([0x22; 16]);
        let mut batch = Batch::default();
        batch.insert(keys::account(owner), records::account::encode(&account(owner)));
        batch.insert(keys::username("carol"), records::raw::uuid(owner));
        batch.insert(keys::customer(owner), records::raw::customer("cus_1"));
        batch.insert(keys::idempotency(owner, "idem-1"), records::raw::uuid(item));
        let _ = store.sled().unwrap().writer.tree(0).apply_batch(batch);
        store.flush().expect("flush");

        let records = dumped(&store).expect("dump");
        let mut tally = Tally::default();
        records.iter().for_each(|r| tally.add(r));
        assert_eq!(tally.count(Kind::InboxAccount), 1);
        assert_eq!(tally.count(Kind::Idempotency), 1);
        assert_eq!(tally.total(), 2, "{records:?}");
        assert!(records.iter().any(|r| matches!(r,
            Record::Account { account, customer: Some(c), .. } if account.epoch == 2 && c == "cus_1")));
        assert!(records.iter().any(|r| matches!(r,
            Record::Idempotency { key, item: i, .. } if key == "idem-1" && *i == item)));

        let _ = store.sled().unwrap().writer.tree(1).insert(b"Zunknown", b"x".to_vec());
        store.flush().expect("flush");
        match dumped(&store) {
            Err(CopyError::Unrepresentable { what, .. }) => assert!(what.contains("tree 1"), "{what}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// The source must be stopped: a directory a server holds is refused by its lock, and
    /// one without a database is not made.
    #[test]
    fn a_running_or_missing_source_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let running = Store::open(dir.path()).expect("open");
        let dump = |dir: &Path| SledSource::open(dir, KEY_FILE)?.dump_into(&mut |_| Ok(()));
        match dump(dir.path()) {
            Err(CopyError::Store(crate::store::StoreError::Locked(_))) => {}
            other => panic!("expected the lock's refusal, got {other:?}"),
        }
        drop(running);
        dump(dir.path()).expect("a stopped, empty source");
        let missing = dir.path().join("nothing");
        assert!(matches!(dump(&missing), Err(CopyError::Invalid(_))));
        assert!(!missing.exists(), "nothing made");
    }

    /// A database larger than what one opening may read is dumped in parts (by the load's
    /// check too), closing and opening it again between them (sled keeps what it read until
    /// closed), and nothing is lost or doubled at the seams; the counts are the items'.
    #[test]
    fn a_large_database_is_copied_in_parts_reopened_between_them() {
        use crate::domain::inbox::models::{InboxItem, ItemType};
        use crate::store::copy::samples::{id, t};
        let dir = tempfile::tempdir().expect("temporary directory");
        let lock = crate::store::lock_dir(dir.path()).expect("lock");
        let opens = std::cell::Cell::new(0);
        let mut open = || {
            opens.set(opens.get() + 1);
            crate::store::sled::open(dir.path(), lock.try_clone()?)
        };
        let mut records = vec![Record::Account {
            service: Service::Inbox,
            account: account(id(1)),
            customer: None,
        }];
        for n in 0..300u32 {
            records.push(Record::InboxItem {
                account: id(1),
                item: InboxItem {
                    id: Uuid::from_u128(u128::from(n) + 1000),
                    kind: ItemType::Text,
                    data: vec![n as u8; 5_000],
                    // a few share an instant: their order is kept by the sequence
                    created: t(1_700_000_000 + i64::from(n / 3), 0),
                },
            });
        }
        let mut expected = Tally::default();
        records.iter().for_each(|r| expected.add(r));
        let mut feed = records.into_iter();
        let (_, loaded) = load(&mut open, &mut || feed.next()).expect("load");
        assert_eq!(loaded, expected);
        let after_load = opens.get();
        assert!(after_load > 10, "opened {after_load} times for 1.5 MB");
        let mut again = Tally::default();
        dump(&mut open, &mut |r| {
            again.add(&r);
            Ok(())
        })
        .expect("dump");
        assert_eq!(again, expected);
        assert!(opens.get() - after_load > 10);
        let store = open().expect("open");
        let listed = crate::store::sled::ready(store.inbox.item_ids(id(1))).expect("ids");
        assert_eq!(listed.len(), 300);
        assert_eq!(
            listed[..3],
            [Uuid::from_u128(1000), Uuid::from_u128(1001), Uuid::from_u128(1002)]
        );
        assert_eq!(crate::store::sled::ready(store.inbox.count(id(1))).expect("count"), 300);
    }
}
