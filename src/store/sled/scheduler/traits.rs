//! The sled implementation of the scheduler's traits ([`crate::store::api`]): each method is
//! the inherent method of [`SchedulerStore`] of the same name, one batch under the account's
//! lock.

use super::SchedulerStore;
use crate::domain::email::{QueuedEmail, Stage};
use crate::domain::scheduler::models::{Delivery, Outcome, ScheduledItem, TimeZoneSetting, Trigger, TriggeredItem};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use crate::store::api::Feed;
use crate::store::scheduler::{AddOutcome, ImportIds, ImportOutcome, QueueKey};
use crate::store::WaitDurable;
use crate::store::{Result, Written};
use uuid::Uuid;

#[async_trait::async_trait]
impl crate::store::api::ScheduledItems for SchedulerStore {
    async fn settings(&self, account: Uuid) -> Result<TimeZoneSetting> {
        SchedulerStore::settings(self, account)
    }

    async fn put_settings(
        &self,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: &(dyn for<'a> Fn(&'a ScheduledItem) -> Timestamp + Send + Sync),
    ) -> Result<Written<()>> {
        SchedulerStore::put_settings(self, account, settings, due_of)
    }

    async fn add_scheduled(
        &self,
        item: &ScheduledItem,
        due_of: &(dyn for<'a> Fn(&'a TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        SchedulerStore::add_scheduled(self, item, due_of, cap)
    }

    async fn scheduled(&self, account: Uuid, id: Uuid) -> Result<Option<ScheduledItem>> {
        SchedulerStore::scheduled(self, account, id)
    }

    async fn edit_scheduled(
        &self,
        account: Uuid,
        id: Uuid,
        edit: &mut (dyn for<'a> FnMut(ScheduledItem, &'a TimeZoneSetting) -> (ScheduledItem, Timestamp) + Send),
    ) -> Result<Written<bool>> {
        SchedulerStore::edit_scheduled(self, account, id, edit)
    }

    async fn triggered(&self, account: Uuid, id: Uuid) -> Result<Option<TriggeredItem>> {
        SchedulerStore::triggered(self, account, id)
    }

    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        SchedulerStore::delete_item(self, account, id)
    }

    async fn delete_triggered_items(&self, account: Uuid) -> Result<Written<bool>> {
        SchedulerStore::delete_triggered_items(self, account)
    }

    async fn scheduled_items(&self, account: Uuid) -> Result<Vec<ScheduledItem>> {
        SchedulerStore::scheduled_items(self, account)
    }

    async fn triggered_items(&self, account: Uuid) -> Result<Vec<TriggeredItem>> {
        SchedulerStore::triggered_items(self, account)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        SchedulerStore::next_due(self)
    }

    async fn due_count(&self, now: Timestamp, limit: usize) -> Result<usize> {
        SchedulerStore::due_count(self, now, limit)
    }

    async fn due_items(&self, now: Timestamp, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        SchedulerStore::due_items(self, now, limit)
    }

    async fn upcoming(&self, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        // sled's reading of the due index takes nothing
        SchedulerStore::due_items(self, Timestamp::from_unix(i64::MAX, u32::MAX), limit)
    }

    async fn trigger_item(
        &self,
        due: (Timestamp, Uuid, Uuid),
        now: Timestamp,
        next: &mut (dyn for<'a, 'b> FnMut(&'a ScheduledItem, &'b TimeZoneSetting) -> Option<(ScheduledItem, Timestamp)>
                  + Send),
    ) -> Result<Written<Option<TriggeredItem>>> {
        SchedulerStore::trigger_item(self, due, now, next)
    }

    async fn counts(&self, account: Uuid) -> Result<(u64, u64)> {
        SchedulerStore::counts(self, account)
    }

    async fn total_counts(&self) -> Result<(u64, u64)> {
        SchedulerStore::total_counts(self)
    }

    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        SchedulerStore::delete_account(self, account)
    }

    fn check_import(&self, account: Uuid, ids: &ImportIds, cap: Option<u64>, new_before: u64) -> Result<ImportOutcome> {
        SchedulerStore::check_import(self, account, ids, cap, new_before)
    }

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
    ) -> Result<ImportOutcome> {
        SchedulerStore::import(self, account, ids, settings, due_of, cap, entries, wait)
    }

    async fn scheduled_page(&self, account: Uuid, after: Option<Uuid>, limit: usize) -> Result<Vec<ScheduledItem>> {
        SchedulerStore::scheduled_page(self, account, after, limit)
    }

    async fn triggered_page(&self, account: Uuid, after: Option<Uuid>, limit: usize) -> Result<Vec<TriggeredItem>> {
        SchedulerStore::triggered_page(self, account, after, limit)
    }

    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a, 'b> FnMut(&'a [ScheduledItem], &'b TimeZoneSetting) -> ScheduledChanges + Send),
    ) -> Result<Written<()>> {
        SchedulerStore::sync(self, account, |items: &[ScheduledItem], settings: &TimeZoneSetting| {
            ((), decide(items, settings))
        })
    }
}

#[async_trait::async_trait]
impl crate::store::api::Triggers for SchedulerStore {
    async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<Written<bool>> {
        SchedulerStore::add_trigger(self, trigger, email)
    }

    async fn trigger_owner(&self, id: Uuid) -> Result<Option<Uuid>> {
        SchedulerStore::trigger_owner(self, id)
    }

    async fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        SchedulerStore::trigger(self, account, id)
    }

    async fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>> {
        SchedulerStore::triggers(self, account)
    }

    async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> Result<Written<bool>> {
        SchedulerStore::update_trigger(self, account, id, update)
    }

    async fn add_or_renew_trigger(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [Trigger]) -> Option<Trigger> + Send),
    ) -> Result<Written<bool>> {
        SchedulerStore::add_or_renew_trigger(self, account, decide)
    }

    async fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        SchedulerStore::delete_trigger(self, account, id)
    }
}

#[async_trait::async_trait]
impl crate::store::api::Deliveries for SchedulerStore {
    async fn expand_targets(&self, email: bool) -> Result<Written<usize>> {
        SchedulerStore::expand_targets(self, email)
    }

    async fn pending_deliveries(&self, limit: usize) -> Result<Vec<(QueueKey, Result<Delivery>)>> {
        SchedulerStore::pending_deliveries(self, limit)
    }

    async fn postpone_delivery(&self, k: &QueueKey, delivery: &Delivery) -> Result<Written<()>> {
        SchedulerStore::postpone_delivery(self, k, delivery)
    }

    async fn finish_delivery(&self, k: &QueueKey, delivery: &Delivery, outcome: Outcome) -> Result<Written<()>> {
        SchedulerStore::finish_delivery(self, k, delivery, outcome)
    }

    async fn remove_pending(&self, k: &QueueKey) -> Result<Written<()>> {
        SchedulerStore::remove_pending(self, k)
    }

    async fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<Written<()>> {
        SchedulerStore::retry_failed(self, account, ids)
    }
}

#[async_trait::async_trait]
impl crate::store::api::Emails for SchedulerStore {
    async fn queue_email(&self, email: &QueuedEmail) -> Result<Written<()>> {
        SchedulerStore::queue_email(self, email)
    }

    async fn queued_emails(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, QueuedEmail)>> {
        SchedulerStore::queued_emails(self, stage, limit)
    }

    async fn queued_emails_each(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, Result<QueuedEmail>)>> {
        SchedulerStore::queued_emails_each(self, stage, limit)
    }

    async fn replace_email(&self, k: &QueueKey, email: &QueuedEmail) -> Result<Written<()>> {
        SchedulerStore::replace_email(self, k, email)
    }
}

#[async_trait::async_trait]
impl crate::store::api::PaymentEvents for SchedulerStore {
    async fn event_seen(&self, id: &str) -> Result<bool> {
        SchedulerStore::event_seen(self, id)
    }

    async fn failed_events(&self) -> Result<Vec<Vec<u8>>> {
        SchedulerStore::failed_events(self)
    }

    async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<Written<()>> {
        Ok(SchedulerStore::mark_event(self, id, failed))
    }
}
