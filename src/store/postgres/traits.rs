//! The store's traits (src/store/api.rs) on PostgreSQL, concern by concern: each method is
//! the operation of the same name of this module's stores, its errors made the store's.
//! Done so far: [`Accounts`], [`InboxItems`], [`Triggers`], [`PaymentEvents`] and
//! [`Administration`]. The other concerns' operations exist (src/store/postgres/)
//! and join the traits next (docs/scaling.md, "Status").

use super::accounts::PgAccounts;
use super::inbox::PgInbox;
use super::scheduler::PgScheduler;
use super::PgStore;
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::email::QueuedEmail;
use crate::domain::inbox::models::InboxItem;
use crate::domain::inbox::sync::ItemChanges;
use crate::domain::scheduler::models::Trigger;
use crate::domain::wire::Timestamp;
use crate::store::api::Feed;
use crate::store::inbox::{AddOutcome, ImportOutcome};
use crate::store::{
    Accounts, Administration, BackupSummary, CycleStats, InboxItems, PaymentEvents, Registration, Result, StoreError,
    Triggers, WaitDurable, WriterStats, Written,
};
use uuid::Uuid;

#[async_trait::async_trait]
impl Accounts for PgAccounts {
    async fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Written<Registration>> {
        Ok(PgAccounts::register(self, username, password_hash, now).await?)
    }

    async fn get(&self, id: Uuid) -> Result<Option<Account>> {
        Ok(PgAccounts::get(self, id).await?)
    }

    async fn by_username(&self, username: &str) -> Result<Option<Account>> {
        Ok(PgAccounts::by_username(self, username).await?)
    }

    async fn all(&self) -> Result<Vec<Account>> {
        Ok(PgAccounts::all(self).await?)
    }

    async fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<Written<bool>> {
        Ok(PgAccounts::set_last_login(self, id, at).await?)
    }

    async fn change_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        Ok(PgAccounts::change_password(self, id, expected, new_hash).await?)
    }

    async fn upgrade_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        Ok(PgAccounts::upgrade_password(self, id, expected, new_hash).await?)
    }

    async fn customer(&self, id: Uuid) -> Result<Option<String>> {
        Ok(PgAccounts::customer(self, id).await?)
    }

    async fn set_customer(&self, id: Uuid, customer: &str) -> Result<Written<bool>> {
        Ok(PgAccounts::set_customer(self, id, customer).await?)
    }

    async fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<Written<bool>> {
        Ok(PgAccounts::add_access_key(self, account, access_key).await?)
    }

    async fn legacy_access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        Ok(PgAccounts::legacy_access_keys(self, account).await?)
    }

    async fn upgrade_access_key(
        &self,
        account: Uuid,
        id: Uuid,
        expected: &KeySecret,
        digest: [u8; 32],
    ) -> Result<Written<bool>> {
        Ok(PgAccounts::upgrade_access_key(self, account, id, expected, digest).await?)
    }

    async fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        Ok(PgAccounts::access_keys(self, account).await?)
    }

    async fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        Ok(PgAccounts::access_key(self, account, id).await?)
    }

    async fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>> {
        Ok(PgAccounts::access_key_by_digest(self, digest).await?)
    }

    async fn next_key_seq(&self) -> Result<u64> {
        Ok(PgAccounts::next_key_seq(self).await?)
    }

    async fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        Ok(PgAccounts::delete_access_key(self, account, id).await?)
    }
}

#[async_trait::async_trait]
impl InboxItems for PgInbox {
    async fn count(&self, account: Uuid) -> Result<u64> {
        Ok(PgInbox::count(self, account).await?)
    }

    async fn total_items(&self) -> Result<u64> {
        Ok(PgInbox::total_items(self).await?)
    }

    async fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        Ok(PgInbox::add_item(self, account, item, idempotency, max_items).await?)
    }

    async fn item(&self, account: Uuid, id: Uuid) -> Result<Option<InboxItem>> {
        Ok(PgInbox::item(self, account, id).await?)
    }

    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        Ok(PgInbox::delete_item(self, account, id).await?)
    }

    async fn items(&self, account: Uuid) -> Result<Vec<InboxItem>> {
        Ok(PgInbox::items(self, account).await?)
    }

    async fn items_page(&self, account: Uuid, after: Option<Uuid>, limit: usize) -> Result<Vec<InboxItem>> {
        Ok(PgInbox::items_page(self, account, after, limit).await?)
    }

    async fn item_ids(&self, account: Uuid) -> Result<Vec<Uuid>> {
        Ok(PgInbox::item_ids(self, account).await?)
    }

    async fn first_item(&self, account: Uuid) -> Result<Option<InboxItem>> {
        Ok(PgInbox::first_item(self, account).await?)
    }

    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [InboxItem]) -> ItemChanges + Send),
    ) -> Result<Written<()>> {
        Ok(PgInbox::sync(self, account, decide).await?)
    }

    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        Ok(PgInbox::delete_account(self, account).await?)
    }

    fn check_import(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        new_before: u64,
    ) -> Result<ImportOutcome> {
        let runtime = tokio::runtime::Handle::current();
        Ok(runtime.block_on(PgInbox::check_import(self, account, ids, max_items, new_before))?)
    }

    fn import_items(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        items: Feed<'_, InboxItem>,
        _wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        // one transaction: committed whole or not at all, so there are no batches to wait for
        Ok(self.import_items_blocking(account, ids, max_items, items)?)
    }
}

#[async_trait::async_trait]
impl Triggers for PgScheduler {
    async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<Written<bool>> {
        Ok(PgScheduler::add_trigger(self, trigger, email).await?)
    }

    async fn trigger_owner(&self, id: Uuid) -> Result<Option<Uuid>> {
        Ok(PgScheduler::trigger_owner(self, id).await?)
    }

    async fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        Ok(PgScheduler::trigger(self, account, id).await?)
    }

    async fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>> {
        Ok(PgScheduler::triggers(self, account).await?)
    }

    async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> Result<Written<bool>> {
        Ok(PgScheduler::update_trigger(self, account, id, update).await?)
    }

    async fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        Ok(PgScheduler::delete_trigger(self, account, id).await?)
    }
}

#[async_trait::async_trait]
impl PaymentEvents for PgScheduler {
    async fn event_seen(&self, id: &str) -> Result<bool> {
        Ok(PgScheduler::event_seen(self, id).await?)
    }

    async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<Written<()>> {
        Ok(PgScheduler::mark_event(self, id, failed).await?)
    }

    async fn failed_events(&self) -> Result<Vec<Vec<u8>>> {
        Ok(PgScheduler::failed_events(self).await?)
    }
}

#[async_trait::async_trait]
impl Administration for PgStore {
    async fn writable(&self) -> std::result::Result<(), String> {
        PgStore::writable(self).await
    }

    /// No group commit: every write is its own committed transaction.
    fn writer_stats(&self) -> WriterStats {
        WriterStats::default()
    }

    fn writer_cycles(&self) -> CycleStats {
        CycleStats::default()
    }

    /// Nothing to do: what was answered is committed.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Closes the pool: every later write (and read) fails, and `writable` says so.
    fn simulate_sync_failure_for_tests(&self) {
        self.close_for_tests();
    }

    /// A PostgreSQL database is backed up by PostgreSQL's own tools, consistent while the
    /// processes run (docs/backup.md).
    fn backup_to(&self, _out: &mut dyn std::io::Write, _files: &[(&str, &[u8])]) -> Result<BackupSummary> {
        Err(StoreError::Unsupported(
            "this server keeps its data in PostgreSQL: back it up with pg_dump (for example \
             `pg_dump --format=custom --file=pigeonhole.dump DATABASE`) or the database's own \
             backups; `pigeonhole backup` copies a sled data directory"
                .into(),
        ))
    }
}
