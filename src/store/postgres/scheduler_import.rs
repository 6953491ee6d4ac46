//! Importing an account's export into the scheduler (docs/backup.md), as the sled store's
//! `scheduler/import.rs` does it: the settings (when they differ, every scheduled item is
//! then due again under them), and the scheduled items, triggered items and triggers whose
//! ids the account does not have yet, with their ids and times. All or nothing: ONE
//! transaction under the account's row lock, the plan first (nothing is written when the new
//! scheduled items would take the account over its cap), then the entries in batches of
//! bounded size as the feed hands them over; it commits only when every planned entry came.

use super::imports::{feed_in_batches, sort_ids, Sorted};
use super::rows::{self, from_bigint};
use super::scheduler::PgScheduler;
use super::sql::Sql;
use super::triggers::put_trigger;
use super::{PgError, PgResult};
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting, TriggerKind};
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use crate::store::scheduler::{ImportIds, ImportOutcome, Imported};
use deadpool_postgres::Transaction;
use uuid::Uuid;

/// The ids new to the account, per kind, and what the import would do.
struct Plan {
    scheduled: Sorted,
    triggered: Sorted,
    triggers: Sorted,
    done: Imported,
}

/// A scheduled item's due instant under settings.
pub type DueOf<'a> = &'a (dyn Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp + Send + Sync);

impl PgScheduler {
    /// The plan of an import, in `tx` under the account's lock; or why nothing is imported.
    async fn import_plan(
        tx: &Transaction<'_>,
        account: Uuid,
        ids: &ImportIds,
        cap: Option<u64>,
    ) -> PgResult<std::result::Result<Plan, ImportOutcome>> {
        let scheduled = sort_ids(tx, "scheduled_items", account, &ids.scheduled).await?;
        let triggered = sort_ids(tx, "triggered_items", account, &ids.triggered).await?;
        let triggers = sort_ids(tx, "triggers", account, &ids.triggers).await?;
        let n: i64 = tx
            .fetch_one("SELECT count(*) FROM scheduled_items WHERE account = $1", &[&account])
            .await?
            .try_get(0)?;
        let count: u64 = from_bigint(n, "count")?;
        if !scheduled.new.is_empty() && cap.is_some_and(|cap| count + scheduled.new.len() as u64 > cap) {
            return Ok(Err(ImportOutcome::LimitReached));
        }
        let done = Imported {
            scheduled_added: scheduled.new.len(),
            scheduled_kept: scheduled.kept,
            triggered_added: triggered.new.len(),
            triggered_kept: triggered.kept,
            triggers_added: triggers.new.len(),
            triggers_kept: triggers.kept,
            ..Imported::default()
        };
        Ok(Ok(Plan {
            scheduled,
            triggered,
            triggers,
            done,
        }))
    }

    /// What importing entries of these `ids` would do now, writing nothing, after
    /// `new_before` new scheduled items of earlier pieces of the same import.
    pub(super) async fn check_entries(
        &self,
        account: Uuid,
        ids: &ImportIds,
        cap: Option<u64>,
        new_before: u64,
    ) -> PgResult<ImportOutcome> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        self.accounts.lock(&tx, account).await?;
        let cap = cap.map(|cap| cap.saturating_sub(new_before));
        Ok(match Self::import_plan(&tx, account, ids, cap).await? {
            Ok(plan) => ImportOutcome::Imported(plan.done),
            Err(refused) => refused,
        })
    }

    /// Stores the settings and makes every scheduled item of the account due under them.
    async fn import_settings(
        tx: &Transaction<'_>,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: DueOf<'_>,
    ) -> PgResult<()> {
        tx.run(
            "INSERT INTO scheduler_settings (account, utc_offset, name, summer) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (account) DO UPDATE SET utc_offset = $2, name = $3, summer = $4",
            &[&account, &settings.offset, &settings.name.as_bytes(), &settings.summer],
        )
        .await?;
        for item in Self::scheduled_in_tx(tx, account).await? {
            let due = due_of(&item, settings);
            let nanos = rows::nanos(due)?;
            tx.run(
                "UPDATE scheduled_items SET due_secs = $2, due_nanos = $3, claimed_by = NULL, lease_until = NULL \
                 WHERE id = $1",
                &[&item.id, &due.secs, &nanos],
            )
            .await?;
        }
        Ok(())
    }

    /// Writes a batch of entries (already given their stored ids) in `tx`.
    async fn import_batch(
        tx: &Transaction<'_>,
        batch: &[SchedulerEntry],
        settings: &TimeZoneSetting,
        due_of: DueOf<'_>,
    ) -> PgResult<()> {
        for entry in batch {
            match entry {
                SchedulerEntry::Scheduled(item) => {
                    Self::put_scheduled(tx, item, due_of(item, settings)).await?;
                }
                SchedulerEntry::Triggered(item) => {
                    Self::insert_triggered(tx, item, None).await?;
                    for (position, attempt) in item.attempts.iter().enumerate() {
                        let position = i32::try_from(position)
                            .map_err(|_| PgError::Corrupt("more attempts than positions".into()))?;
                        super::deliveries::insert_attempt(tx, item.id, position, attempt).await?;
                    }
                }
                SchedulerEntry::Trigger(trigger) => put_trigger(tx, trigger, true).await?,
            }
        }
        Ok(())
    }

    /// Imports into `account` (see the module's documentation); `due_of` gives a scheduled
    /// item's due instant under settings. Called from a blocking thread (the feed is
    /// synchronous): each step runs on the runtime of that thread.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn import_entries(
        &self,
        account: Uuid,
        ids: &ImportIds,
        settings: Option<&TimeZoneSetting>,
        due_of: DueOf<'_>,
        cap: Option<u64>,
        entries: crate::store::api::Feed<'_, SchedulerEntry>,
    ) -> PgResult<ImportOutcome> {
        let runtime = tokio::runtime::Handle::current();
        let mut client = runtime.block_on(self.pool.get())?;
        let tx = runtime.block_on(client.transaction())?;
        runtime.block_on(self.accounts.lock(&tx, account))?;
        let mut plan = match runtime.block_on(Self::import_plan(&tx, account, ids, cap))? {
            Ok(plan) => plan,
            Err(refused) => return Ok(refused),
        };
        let planned = plan.done.clone();
        // what the import adds (all of it lands, or none)
        let mut done = Imported {
            scheduled_kept: planned.scheduled_kept,
            triggered_kept: planned.triggered_kept,
            triggers_kept: planned.triggers_kept,
            ..Imported::default()
        };
        let current = runtime.block_on(Self::settings_in(&tx, account))?;
        let settings = settings.cloned().unwrap_or_else(|| current.clone());
        if settings != current {
            runtime.block_on(Self::import_settings(&tx, account, &settings, due_of))?;
            done.settings_changed = true;
        }
        let accept = |entry: SchedulerEntry| -> Option<SchedulerEntry> {
            Some(match entry {
                SchedulerEntry::Scheduled(mut item) => {
                    let id = plan.scheduled.take(item.id)?;
                    (item.id, item.owner) = (id, account);
                    done.scheduled_added += 1;
                    SchedulerEntry::Scheduled(item)
                }
                SchedulerEntry::Triggered(mut item) => {
                    let id = plan.triggered.take(item.id)?;
                    (item.id, item.owner) = (id, account);
                    // attempts name the import's triggers as they are stored
                    for attempt in &mut item.attempts {
                        if let Some(stored) = plan.triggers.renamed.get(&attempt.trigger) {
                            attempt.trigger = *stored;
                        }
                    }
                    done.triggered_added += 1;
                    SchedulerEntry::Triggered(item)
                }
                SchedulerEntry::Trigger(mut trigger) => {
                    let id = plan.triggers.take(trigger.id)?;
                    (trigger.id, trigger.owner) = (id, account);
                    done.triggers_added += 1;
                    if matches!(trigger.kind, TriggerKind::Email { verified: false, .. }) {
                        done.email_triggers.push(trigger.id);
                    }
                    SchedulerEntry::Trigger(trigger)
                }
            })
        };
        let write = |batch: &[SchedulerEntry]| runtime.block_on(Self::import_batch(&tx, batch, &settings, due_of));
        feed_in_batches(entries, accept, write)?;
        let complete = done.scheduled_added == planned.scheduled_added
            && done.triggered_added == planned.triggered_added
            && done.triggers_added == planned.triggers_added;
        if !complete {
            return Err(PgError::Corrupt("the import changed while it was read".into()));
        }
        runtime.block_on(tx.commit())?;
        Ok(ImportOutcome::Imported(done))
    }
}
