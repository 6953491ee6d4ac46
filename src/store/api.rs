//! The store's data APIs, one async trait per concern: what the services, the workers and
//! the commands may ask of a storage engine, in domain operations. Each method is one domain
//! operation and one transaction (on sled: one atomic batch under the account's lock); each
//! write answers a [`Written`] receipt, durable once `.durable().await` has answered (sled:
//! at the flush and sync that covers it; an engine that answers after COMMIT: at once).
//!
//! The traits are object-safe (the `async-trait` crate), and [`super::Store`] holds one
//! `Arc<dyn …>` per concern. Closures handed to the store are `FnMut` (an engine may retry a
//! transaction that met a serialization failure by calling the closure again; the caller
//! keeps its own result in a captured variable), and long listings are read in pages
//! (`…_page(account, after, size)`: bounded memory on every engine, [`PageSize`]).

use super::inbox::{AddOutcome, ImportOutcome};
use super::scheduler::{
    AddOutcome as SchedulerAddOutcome, ImportIds, ImportOutcome as SchedulerImportOutcome, QueueKey,
};
use super::{Result, Written};
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::email::{QueuedEmail, Stage};
use crate::domain::inbox::models::InboxItem;
use crate::domain::inbox::sync::ItemChanges;
use crate::domain::scheduler::models::{Delivery, Outcome, ScheduledItem, TimeZoneSetting, Trigger, TriggeredItem};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use async_trait::async_trait;
use uuid::Uuid;

/// What an import reads from its request: hands each record to the callback, in order
/// (an engine writes them in bounded batches as they come).
pub type Feed<'a, T> = &'a mut dyn FnMut(&mut dyn FnMut(T) -> Result<()>) -> Result<()>;

/// Waits until a batch of an import is on disk (an import runs in a blocking thread: this
/// blocks it; an engine that imports in one transaction has nothing to wait for).
pub type WaitDurable<'a> = &'a dyn Fn(Written<()>) -> Result<()>;

/// The id under which `account` keeps an imported entry whose id is another account's:
/// derived from both (SHA-256), so that importing the same file again finds it. An import
/// never refuses such an entry, so its answer does not tell whether an id exists in
/// another account (issue 18).
pub(crate) fn own_id(account: uuid::Uuid, id: uuid::Uuid) -> uuid::Uuid {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"pigeonhole: an imported id of another account")
        .chain_update(account.as_bytes())
        .chain_update(id.as_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// What registering a username did.
pub enum Registration {
    Created(Account),
    Taken,
}

/// The accounts of one service (each service keeps its own): accounts, passwords, access
/// keys, the payment customer and registration.
#[async_trait]
pub trait Accounts: Send + Sync {
    /// Registers `username` with a PBKDF2 `password_hash` (exactly one of several
    /// concurrent registrations of a username wins).
    async fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Written<Registration>>;
    async fn get(&self, id: Uuid) -> Result<Option<Account>>;
    async fn by_username(&self, username: &str) -> Result<Option<Account>>;
    /// Every account (admin listing and statistics).
    async fn all(&self) -> Result<Vec<Account>>;
    /// Records a login; `false` when the account is gone.
    async fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<Written<bool>>;
    /// Replaces the password hash if it is still `expected` and starts a new credential
    /// epoch (revoking every earlier token); `false` when the account is gone or the
    /// password changed meanwhile.
    async fn change_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>>;
    /// Replaces a legacy password hash by a PBKDF2 one (same epoch), if it is still `expected`.
    async fn upgrade_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>>;
    /// The account's payment customer id.
    async fn customer(&self, id: Uuid) -> Result<Option<String>>;
    async fn set_customer(&self, id: Uuid, customer: &str) -> Result<Written<bool>>;
    /// `false` when the account is gone.
    async fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<Written<bool>>;
    /// The account's access keys whose secrets are still legacy (bcrypt) hashes.
    async fn legacy_access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>>;
    /// Replaces a legacy key's secret by its SHA-256 `digest`, if it is still `expected`.
    async fn upgrade_access_key(
        &self,
        account: Uuid,
        id: Uuid,
        expected: &KeySecret,
        digest: [u8; 32],
    ) -> Result<Written<bool>>;
    async fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>>;
    async fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>>;
    /// The key whose secret has this SHA-256 digest, and its account.
    async fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>>;
    /// The next sequence number for an access key (their order of creation).
    async fn next_key_seq(&self) -> Result<u64>;
    async fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<Written<bool>>;
}

/// The inbox service's items (inbox.md): adding, listing, deleting, syncing, importing.
#[async_trait]
pub trait InboxItems: Send + Sync {
    /// The account's item count.
    async fn count(&self, account: Uuid) -> Result<u64>;
    /// Items of every account together (metrics).
    async fn total_items(&self) -> Result<u64>;
    /// Adds `item` unless the account has `max_items` already; a repeated `idempotency` key
    /// answers the item stored by its first use.
    async fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> Result<Written<AddOutcome>>;
    async fn item(&self, account: Uuid, id: Uuid) -> Result<Option<InboxItem>>;
    /// `false` when the account has no such item.
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>>;
    /// The account's items, oldest first.
    async fn items(&self, account: Uuid) -> Result<Vec<InboxItem>>;
    /// One page ([`PageSize`]) of the account's items, oldest first, after the item `after`
    /// (from the first with `None`); empty at the end, or when `after` is no longer there.
    async fn items_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<InboxItem>>;
    /// The ids of the account's items, oldest first.
    async fn item_ids(&self, account: Uuid) -> Result<Vec<Uuid>>;
    async fn first_item(&self, account: Uuid) -> Result<Option<InboxItem>>;
    /// One sync, atomically: `decide` sees the account's items as they are (no write of the
    /// account in between) and says what to delete and add. `decide` may be called more
    /// than once (a retried transaction): the caller keeps its answer of the last call.
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [InboxItem]) -> ItemChanges + Send),
    ) -> Result<Written<()>>;
    /// Deletes the account and everything of it; `false` when there was none.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>>;
    /// What importing `ids` would do, writing nothing. Blocking: call it from a blocking
    /// thread.
    fn check_import(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        new_before: u64,
    ) -> Result<ImportOutcome>;
    /// Imports the items that `items` hands to its callback (called once, in bounded
    /// batches, each waited for with `wait`; sled: see its `imports`). Blocking: call it from
    /// a blocking thread.
    fn import_items(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        items: Feed<'_, InboxItem>,
        wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome>;
}

/// How much one page of a listing holds: at most `items` items, and no item after the one
/// that brings the page's data (item data, tickle contents) to `bytes`. A page holds at least
/// one item, so an item larger than `bytes` is a page of its own: a page is at most `bytes`
/// plus one item, whatever the items' sizes (an item is at most a request body).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageSize {
    pub items: usize,
    pub bytes: usize,
}

/// An item of a listing read in pages, with the size [`PageSize::bytes`] counts.
pub trait Listed {
    fn data_bytes(&self) -> usize;
}

impl Listed for InboxItem {
    fn data_bytes(&self) -> usize {
        self.data.len()
    }
}

impl Listed for ScheduledItem {
    fn data_bytes(&self) -> usize {
        self.tickle.content.len()
    }
}

impl Listed for TriggeredItem {
    fn data_bytes(&self) -> usize {
        self.tickle.content.len()
    }
}

impl PageSize {
    /// A page of a listing that a service answers while it reads it: little to hold (about
    /// one chunk of the answer) and few reads for lists of small items.
    pub const LISTING: PageSize = PageSize {
        items: 32,
        bytes: 256 * 1024,
    };

    /// The page that `rows` (the listing from the page's start, in order) begin with,
    /// reading no row after the page's last.
    pub fn fill<T: Listed, E>(
        self,
        mut rows: impl Iterator<Item = std::result::Result<T, E>>,
    ) -> std::result::Result<Vec<T>, E> {
        let mut page = Vec::new();
        let mut bytes = 0;
        while !self.holds(page.len(), bytes) {
            match rows.next() {
                Some(row) => {
                    let row = row?;
                    bytes += row.data_bytes();
                    page.push(row);
                }
                None => break,
            }
        }
        Ok(page)
    }

    /// Whether `page` holds all a page may: more of the listing may follow its last item.
    pub fn is_full<T: Listed>(self, page: &[T]) -> bool {
        self.holds(page.len(), page.iter().map(Listed::data_bytes).sum())
    }

    fn holds(self, items: usize, bytes: usize) -> bool {
        items > 0 && (items >= self.items || bytes >= self.bytes)
    }
}

/// Where an item triggered now goes next: its next occurrence and due instant in the owner's
/// time zone, `None` when it does not recur (the triggerer's rule, handed to the store).
pub type NextOccurrence<'n> =
    dyn for<'a, 'b> FnMut(&'a ScheduledItem, &'b TimeZoneSetting) -> Option<(ScheduledItem, Timestamp)> + Send + 'n;

/// The scheduler service's items: the time-zone setting, scheduled and triggered items,
/// sync, the due index and triggering, counts, deleting an account, importing.
#[async_trait]
pub trait ScheduledItems: Send + Sync {
    async fn settings(&self, account: Uuid) -> Result<TimeZoneSetting>;
    /// Stores the setting and moves every scheduled item in the due index to its due
    /// instant under it (`due_of`).
    async fn put_settings(
        &self,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: &(dyn for<'a> Fn(&'a ScheduledItem) -> Timestamp + Send + Sync),
    ) -> Result<Written<()>>;
    /// Adds a scheduled item due at `due_of(the account's settings)`, unless the account
    /// has `cap` items.
    async fn add_scheduled(
        &self,
        item: &ScheduledItem,
        due_of: &(dyn for<'a> Fn(&'a TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
    ) -> Result<Written<SchedulerAddOutcome>>;
    async fn scheduled(&self, account: Uuid, id: Uuid) -> Result<Option<ScheduledItem>>;
    /// Replaces a scheduled item by what `edit` makes of it (with its due instant);
    /// `false` when the account has no such item. `edit` may be called more than once.
    async fn edit_scheduled(
        &self,
        account: Uuid,
        id: Uuid,
        edit: &mut (dyn for<'a> FnMut(ScheduledItem, &'a TimeZoneSetting) -> (ScheduledItem, Timestamp) + Send),
    ) -> Result<Written<bool>>;
    async fn triggered(&self, account: Uuid, id: Uuid) -> Result<Option<TriggeredItem>>;
    /// Deletes the scheduled or triggered item `id`; `false` when there is none.
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>>;
    async fn delete_triggered_items(&self, account: Uuid) -> Result<Written<bool>>;
    /// The account's scheduled items in creation order.
    async fn scheduled_items(&self, account: Uuid) -> Result<Vec<ScheduledItem>>;
    /// One page of scheduled items after the item `after` (see `InboxItems::items_page`).
    async fn scheduled_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<ScheduledItem>>;
    /// The account's triggered items by original `created`, then by triggering time.
    async fn triggered_items(&self, account: Uuid) -> Result<Vec<TriggeredItem>>;
    /// One page of triggered items after the item `after`.
    async fn triggered_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<TriggeredItem>>;
    /// One sync, atomically: `decide` sees the account's scheduled items and settings and
    /// says what to delete and store. `decide` may be called more than once.
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a, 'b> FnMut(&'a [ScheduledItem], &'b TimeZoneSetting) -> ScheduledChanges + Send),
    ) -> Result<Written<()>>;
    /// The earliest due instant in the due index.
    async fn next_due(&self) -> Result<Option<Timestamp>>;
    /// How many items are due at `now`, counted up to `limit`.
    async fn due_count(&self, now: Timestamp, limit: usize) -> Result<usize>;
    /// Up to `limit` (due, owner, item) entries of the due index due at `now`, earliest first.
    async fn due_items(&self, now: Timestamp, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>>;
    /// Up to `limit` of the earliest entries of the due index, however far off, without
    /// claiming them (the triggerer's next wake-up), leaving out those another process
    /// holds (it is triggering them).
    async fn upcoming(&self, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>>;
    /// Triggers the due entry `due` (one transaction: the triggered copy, its target lists,
    /// the item moved to its `next` occurrence or deleted); `None` when it is gone or moved.
    async fn trigger_item(
        &self,
        due: (Timestamp, Uuid, Uuid),
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> Result<Written<Option<TriggeredItem>>>;
    /// Triggers the due entries `due` as [`Self::trigger_item`] triggers each, in order: one
    /// result per entry, or fewer when it stopped at an error (the last result). An engine
    /// may write several in one transaction (PostgreSQL does: one commit for a round instead
    /// of one per item); by default each is triggered on its own.
    async fn trigger_items(
        &self,
        due: &[(Timestamp, Uuid, Uuid)],
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> Vec<Result<Written<Option<TriggeredItem>>>> {
        let mut results = Vec::with_capacity(due.len());
        for &entry in due {
            results.push(self.trigger_item(entry, now, next).await);
        }
        results
    }
    /// (scheduled, triggered) item counts of the account.
    async fn counts(&self, account: Uuid) -> Result<(u64, u64)>;
    /// (scheduled, triggered) items of every account together.
    async fn total_counts(&self) -> Result<(u64, u64)>;
    /// Deletes the account and everything of it; `false` when there was none.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>>;
    /// What importing would do, writing nothing. Blocking: call it from a blocking thread.
    fn check_import(
        &self,
        account: Uuid,
        ids: &ImportIds,
        cap: Option<u64>,
        new_before: u64,
    ) -> Result<SchedulerImportOutcome>;
    /// Imports the entries `entries` hands to its callback, in bounded batches each waited
    /// for with `wait`. Blocking: call it from a blocking thread.
    #[allow(clippy::too_many_arguments)]
    fn import(
        &self,
        account: Uuid,
        ids: &ImportIds,
        settings: Option<&TimeZoneSetting>,
        due_of: &(dyn Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
        entries: Feed<'_, SchedulerEntry>,
        wait: WaitDurable<'_>,
    ) -> Result<SchedulerImportOutcome>;
}

/// The scheduler's delivery targets (inbox services, e-mail addresses, push subscriptions,
/// webhooks).
#[async_trait]
pub trait Triggers: Send + Sync {
    /// Adds a trigger (with the verification e-mail to queue, if any); `false` when the
    /// account is gone.
    async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<Written<bool>>;
    /// The account a trigger belongs to.
    async fn trigger_owner(&self, id: Uuid) -> Result<Option<Uuid>>;
    async fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>>;
    async fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>>;
    /// Replaces a trigger by what `update` makes of it (`None`: leave it), with an e-mail to
    /// queue; `false` when there is no such trigger. `update` may be called more than once.
    async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> Result<Written<bool>>;
    /// Stores the trigger that `decide` makes of the account's triggers, all of them seen
    /// atomically (a push subscription replaces the one of its endpoint, and a limit
    /// counts): a new trigger, or one of them renewed (same id); nothing with `None`.
    /// `false` when the account is gone or nothing was stored. `decide` may be called more
    /// than once.
    async fn add_or_renew_trigger(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [Trigger]) -> Option<Trigger> + Send),
    ) -> Result<Written<bool>>;
    async fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<Written<bool>>;
}

/// The delivery queue: target lists fixed at triggering, pending inbox deliveries, outcomes.
#[async_trait]
pub trait Deliveries: Send + Sync {
    /// Expands up to `limit` waiting target lists of triggered items, oldest first, into
    /// pending deliveries (inbox, or e-mail with `email`); how many (fewer than `limit`:
    /// no other list waits, or another process expands it).
    async fn expand_targets(&self, email: bool, limit: usize) -> Result<Written<usize>>;
    /// Up to `limit` pending inbox deliveries, each decoded or its error. With several
    /// processes on one database: those no other process holds; reading claims nothing
    /// (a pass claims only what it starts: [`Deliveries::claim_delivery`]).
    async fn pending_deliveries(&self, limit: usize) -> Result<Vec<(QueueKey, Result<Delivery>)>>;
    /// Claims the pending delivery `k` for this process, to start it now: `false` when
    /// another process holds it (or it is gone). One process alone holds all its work.
    async fn claim_delivery(&self, _k: &QueueKey) -> Result<bool> {
        Ok(true)
    }
    /// Gives back the claims on the pending deliveries `keys`, read by this process but not
    /// started (not due yet, or its delivery bounds were full), so that another process on
    /// the database may deliver them; one process alone has nothing to give back.
    async fn release_deliveries(&self, _keys: &[QueueKey]) -> Result<()> {
        Ok(())
    }
    async fn postpone_delivery(&self, k: &QueueKey, delivery: &Delivery) -> Result<Written<()>>;
    async fn finish_delivery(&self, k: &QueueKey, delivery: &Delivery, outcome: Outcome) -> Result<Written<()>>;
    /// Drops a pending delivery that cannot be decoded.
    async fn remove_pending(&self, k: &QueueKey) -> Result<Written<()>>;
    /// Queues the failed deliveries of the account's triggered items `ids` again.
    async fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<Written<()>>;
}

/// The e-mail queue, one stage after another.
#[async_trait]
pub trait Emails: Send + Sync {
    async fn queue_email(&self, email: &QueuedEmail) -> Result<Written<()>>;
    /// Up to `limit` e-mails of `stage`, in the order queued, each decoded or its error
    /// (with several processes on one database: those no other process holds; reading
    /// claims nothing, see [`Emails::claim_email`]).
    async fn queued_emails_each(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, Result<QueuedEmail>)>>;
    /// [`Emails::queued_emails_each`], the first that cannot be decoded an error of the whole.
    async fn queued_emails(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, QueuedEmail)>> {
        self.queued_emails_each(stage, limit)
            .await?
            .into_iter()
            .map(|(k, e)| Ok((k, e?)))
            .collect()
    }
    /// Claims the queued e-mail `k` for this process, to render or send it now: `false`
    /// when another process holds it (or it is gone). One process alone holds all its work.
    async fn claim_email(&self, _k: &QueueKey) -> Result<bool> {
        Ok(true)
    }
    /// Replaces (moves to its new stage) or removes a queued e-mail.
    async fn replace_email(&self, k: &QueueKey, email: &QueuedEmail) -> Result<Written<()>>;
    /// Gives back the claims on the queued e-mails `keys`, read by this process but not
    /// sent (as [`Deliveries::release_deliveries`] does for deliveries).
    async fn release_emails(&self, _keys: &[QueueKey]) -> Result<()> {
        Ok(())
    }
}

/// Payment events handled or failed.
#[async_trait]
pub trait PaymentEvents: Send + Sync {
    async fn event_seen(&self, id: &str) -> Result<bool>;
    /// Records the event as handled, or as failed with its body to retry.
    async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<Written<()>>;
    async fn failed_events(&self) -> Result<Vec<Vec<u8>>>;
}

/// The engine itself: health, durability, statistics, backup. (Item counts are with the
/// items: `InboxItems::total_items`, `ScheduledItems::total_counts`.)
#[async_trait]
pub trait Administration: Send + Sync {
    /// Whether the database takes writes (the health check's "database writable"); `Err`
    /// gives the reason. Cheap enough for every health probe.
    async fn writable(&self) -> std::result::Result<(), String>;
    /// What the group commit did so far (benchmarks, diagnostics); zeros for an engine
    /// without one.
    fn writer_stats(&self) -> WriterStats;
    /// The group commit's cycles as histograms: batches per cycle, µs per flush and sync.
    fn writer_cycles(&self) -> CycleStats;
    /// Makes everything written so far durable, in the calling thread (shutdown, the end of
    /// moving in).
    fn flush(&self) -> Result<()>;
    /// FOR TESTS ONLY (fault injection): the engine behaves as after a failed sync of its
    /// files: every later write fails and [`Administration::writable`] reports it.
    #[doc(hidden)]
    fn simulate_sync_failure_for_tests(&self);
    /// Writes a consistent copy of the whole database to `out`, with `files` (name and
    /// contents) alongside (sled: its `backup`); the caller makes `out` durable. Blocking.
    fn backup_to(&self, out: &mut dyn std::io::Write, files: &[(&str, &[u8])]) -> Result<BackupSummary>;
    /// The engine's name: `sled` or `postgres` (the health check, the metrics).
    fn engine(&self) -> &'static str;
    /// This process's name among those on the database (the health check, the metrics):
    /// host name and process id, and on a shared database its claimant id in claims.
    fn process(&self) -> String {
        process_name()
    }
    /// The database's schema version and the binary's, read now, for an engine with a
    /// versioned schema (`None`: sled, whose format is checked at start only); `Err` when it
    /// could not be read. A database newer than the binary is logged as an error, once.
    async fn schema(&self) -> Option<std::result::Result<SchemaVersions, String>> {
        None
    }
    /// The connection pool's state, for an engine with one.
    fn pool(&self) -> Option<PoolStats> {
        None
    }
    /// How long claims on queued work hold unless renewed, for an engine that claims.
    fn claim_lease(&self) -> Option<std::time::Duration> {
        None
    }
    /// Claims on queued work whose lease ran out and that no process took over yet (a
    /// process died holding them), by queue, read now (database-wide: the metrics' leader
    /// asks); `None` for an engine without claims.
    async fn expired_claims(&self) -> Option<std::result::Result<Vec<(&'static str, u64)>, String>> {
        None
    }
    /// What the engine counted in this process (PostgreSQL: pool waits, transactions,
    /// claims); `None` for an engine that counts none of it.
    fn counters(&self) -> Option<EngineCounters> {
        None
    }
}

/// `host:pid`, the start of a process's name ([`Administration::process`]).
pub fn process_name() -> String {
    // the kernel's host name (Linux); elsewhere, the shell's
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// The schema version a database has and the one this binary knows (its latest migration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchemaVersions {
    pub database: i64,
    pub binary: i64,
}

impl SchemaVersions {
    /// Whether the database was migrated by a newer binary than this one.
    pub fn newer(&self) -> bool {
        self.database > self.binary
    }

    /// Why a newer schema is a fault, naming both versions.
    pub fn reason(&self) -> String {
        format!(
            "the database's schema is version {}, newer than version {} that this binary knows: \
             a newer pigeonhole migrated it; run that version here too (docs/operations.md, rolling upgrades)",
            self.database, self.binary
        )
    }
}

/// A connection pool's state (deadpool's `Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open (idle and in use).
    pub open: usize,
    /// Idle connections.
    pub idle: usize,
    /// Callers waiting for a connection.
    pub waiting: usize,
    pub max: usize,
}

/// What an engine counted in this process: waits for a pooled connection (µs), whole
/// transactions (µs), and claims on queued work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineCounters {
    pub pool_wait_micros: HistogramSnapshot,
    pub transaction_micros: HistogramSnapshot,
    /// Due items, deliveries and e-mails claimed by this process (its own renewed claims
    /// included).
    pub claimed: u64,
    /// Of those, claims taken over from another process whose lease had run out.
    pub taken_over: u64,
    /// Claims this process gave up (a graceful stop).
    pub released: u64,
}

/// A histogram with fixed bounds, kept with atomics (the store knows nothing of the
/// metrics; `launch` reads these at scrape time).
pub(crate) struct AtomicHistogram {
    bounds: &'static [u64],
    /// Cumulative-free counts: `counts[i]` is the number of values ≤ `bounds[i]` and above
    /// the previous bound; the last entry counts the values above every bound.
    counts: Vec<std::sync::atomic::AtomicU64>,
    sum: std::sync::atomic::AtomicU64,
}

impl AtomicHistogram {
    pub(crate) fn new(bounds: &'static [u64]) -> AtomicHistogram {
        AtomicHistogram {
            bounds,
            counts: (0..=bounds.len())
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            sum: std::sync::atomic::AtomicU64::new(0),
        }
    }

    pub(crate) fn observe(&self, value: u64) {
        use std::sync::atomic::Ordering;
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> HistogramSnapshot {
        use std::sync::atomic::Ordering;
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// Work that runs in one process at a time when several share one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnceWork {
    /// Fetching the payment provider's events.
    Payments,
    /// Mailing the admins about failing workers.
    AdminNotices,
    /// The database-wide numbers (items stored, due items) of the metrics: exported by one
    /// process only, so that a sum over the processes is right (docs/operations.md); its
    /// holder is "the leader" of the health check and of `pigeonhole_leader`.
    Overview,
}

/// Queued work that a process claims for a lease while it works on it (several processes
/// on one database).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimedWork {
    /// Due scheduled items (the triggerer).
    DueItems,
    /// Pending inbox, push and webhook deliveries (the sender).
    Deliveries,
    /// Queued e-mails of every stage (the converters and the emailer).
    Emails,
}

/// What several server processes on one database settle through it (issue 21): which
/// process does the work that must run once, and wake-ups of the other processes' workers.
/// A store that one process alone opens (sled) does all work itself and wakes nobody else.
#[async_trait]
pub trait Coordination: Send + Sync {
    /// Whether this process is the one to do `work` now.
    async fn leads(&self, work: OnceWork) -> bool;
    /// Wakes the worker named `worker` in the other processes (new work for it was
    /// committed); best effort: every worker also looks at the database at its period.
    fn announce(&self, worker: &'static str);
    /// Gives up this process's claims on queued work (a graceful stop), so that another
    /// process, or this one started again, takes it at once rather than after the lease.
    async fn release(&self);
    /// Extends the lease of every claim this process holds (its heartbeat, a few times per
    /// lease): work a live process is on is never taken over, however slow it is.
    async fn renew_claims(&self);
    /// How long until the earliest claim another process holds on `work` runs out (that
    /// process died, or finishes first): a worker that found such work waits that long at
    /// most, not its whole period. `None`: no other process holds any.
    async fn claims_elsewhere_end(&self, work: ClaimedWork) -> Option<std::time::Duration>;
}

/// What a histogram of the group commit's cycles counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets (inclusive).
    pub bounds: &'static [u64],
    /// Values per bucket (not cumulative); one more entry than `bounds`: above the last.
    pub counts: Vec<u64>,
    pub sum: u64,
}

/// The writer's cycles as histograms (batches per cycle, µs per flush and sync).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    pub batches: HistogramSnapshot,
    pub sync_micros: HistogramSnapshot,
}

/// What the group commit did so far: batches acknowledged as stable, cycles that carried
/// them, and `fsync`/`fdatasync` calls (the ratio syncs / batches is the benchmark's "syncs
/// per acknowledged write").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub batches: u64,
    pub cycles: u64,
    pub syncs: u64,
}

/// What a backup holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupSummary {
    pub records: u64,
    pub files: Vec<String>,
    /// Bytes of the backup, trailer included.
    pub bytes: u64,
    /// How long writes waited for the backup (the writer was held between two cycles).
    pub paused: std::time::Duration,
}
