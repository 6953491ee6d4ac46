//! The store's traits (src/store/api.rs) on PostgreSQL, concern by concern: each method is
//! the operation of the same name of this module's stores, its errors made the store's.
//! Every concern is behind its trait: [`Accounts`], [`InboxItems`], [`ScheduledItems`],
//! [`Triggers`], [`Deliveries`], [`Emails`], [`PaymentEvents`] and [`Administration`]. All six
//! of the scheduler's part of the store (its accounts, by delegation to
//! [`PgScheduler::accounts`], included) are implemented by [`PgScheduler`], so that one
//! `Arc<PgScheduler>` serves as each of its trait objects.
//!
//! Claims (several processes on one database, issue 21 point 3): `due_items`,
//! `pending_deliveries` and `queued_emails(_each)` claim what they answer for this process
//! (the store's claimant id, for its lease: [`PgStore::with_lease`]); a process gets its own
//! claims back renewed, another gets them once the lease ran out. Postponing, finishing,
//! removing and replacing end a claim. Queue keys are [`PgQueueKey`]s carried as the
//! store's opaque [`QueueKey`] bytes. Imports are one transaction each (blocking on the
//! runtime of their blocking thread), so there are no batches to wait for.

use super::emails::PgQueueKey;
use super::scheduler::PgScheduler;
use super::PgStore;
use crate::domain::email::{QueuedEmail, Stage};
use crate::domain::scheduler::models::{Delivery, Outcome, Trigger};
use crate::store::scheduler::QueueKey;
use crate::store::{
    Administration, BackupSummary, CycleStats, Deliveries, Emails, PaymentEvents, Result, StoreError, Triggers,
    WriterStats, Written,
};
use uuid::Uuid;

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

    async fn add_or_renew_trigger(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [Trigger]) -> Option<Trigger> + Send),
    ) -> Result<Written<bool>> {
        Ok(PgScheduler::add_or_renew_trigger(self, account, decide).await?)
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

/// The engine-neutral key of a PostgreSQL queue entry.
fn keyed<T>(entries: Vec<(PgQueueKey, T)>) -> Vec<(QueueKey, T)> {
    entries.into_iter().map(|(k, v)| (k.to_key(), v)).collect()
}

#[async_trait::async_trait]
impl Deliveries for PgScheduler {
    async fn expand_targets(&self, email: bool) -> Result<Written<usize>> {
        Ok(PgScheduler::expand_targets(self, email).await?)
    }

    async fn pending_deliveries(&self, limit: usize) -> Result<Vec<(QueueKey, Result<Delivery>)>> {
        let pending = PgScheduler::pending_deliveries(self, limit).await?;
        Ok(keyed(
            pending
                .into_iter()
                .map(|(k, d)| (k, d.map_err(StoreError::from)))
                .collect(),
        ))
    }

    async fn release_deliveries(&self, keys: &[QueueKey]) -> Result<()> {
        let ids = keys_of(keys, "pending deliveries", |k| match k {
            PgQueueKey::Delivery(id) => Some(id),
            PgQueueKey::Email(_) => None,
        })?;
        Ok(self.give_back("deliveries", "id", &ids).await?)
    }

    async fn postpone_delivery(&self, k: &QueueKey, delivery: &Delivery) -> Result<Written<()>> {
        Ok(PgScheduler::postpone_delivery(self, &PgQueueKey::of(k)?, delivery).await?)
    }

    async fn finish_delivery(&self, k: &QueueKey, delivery: &Delivery, outcome: Outcome) -> Result<Written<()>> {
        Ok(PgScheduler::finish_delivery(self, &PgQueueKey::of(k)?, delivery, outcome).await?)
    }

    async fn remove_pending(&self, k: &QueueKey) -> Result<Written<()>> {
        Ok(PgScheduler::remove_pending(self, &PgQueueKey::of(k)?).await?)
    }

    async fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<Written<()>> {
        Ok(PgScheduler::retry_failed(self, account, ids).await?)
    }
}

#[async_trait::async_trait]
impl Emails for PgScheduler {
    async fn queue_email(&self, email: &QueuedEmail) -> Result<Written<()>> {
        PgScheduler::queue_email(self, email).await?.durable().await?;
        Ok(Written::committed(()))
    }

    async fn queued_emails(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, QueuedEmail)>> {
        Ok(keyed(PgScheduler::queued_emails(self, stage, limit).await?))
    }

    async fn queued_emails_each(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, Result<QueuedEmail>)>> {
        let queued = PgScheduler::queued_emails_each(self, stage, limit).await?;
        Ok(keyed(
            queued
                .into_iter()
                .map(|(k, e)| (k, e.map_err(StoreError::from)))
                .collect(),
        ))
    }

    async fn replace_email(&self, k: &QueueKey, email: &QueuedEmail) -> Result<Written<()>> {
        Ok(PgScheduler::replace_email(self, &PgQueueKey::of(k)?, email).await?)
    }

    async fn release_emails(&self, keys: &[QueueKey]) -> Result<()> {
        let seqs = keys_of(keys, "queued e-mails", |k| match k {
            PgQueueKey::Email(seq) => Some(seq),
            PgQueueKey::Delivery(_) => None,
        })?;
        Ok(self.give_back("email_queue", "seq", &seqs).await?)
    }
}

/// What `pick` takes of each of `keys` (the ids of one queue); a key of another queue or
/// engine is refused as not one of `expected`.
fn keys_of<T>(keys: &[QueueKey], expected: &'static str, pick: impl Fn(PgQueueKey) -> Option<T>) -> Result<Vec<T>> {
    keys.iter()
        .map(|k| pick(PgQueueKey::of(k)?).ok_or(super::PgError::ForeignQueueKey(expected).into()))
        .collect()
}
