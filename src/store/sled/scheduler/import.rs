//! Importing an account's export (docs/backup.md): everything the account does not have
//! yet, by id. Every rule is checked before the first write; the writes go in batches of
//! bounded size ([`crate::store::sled::imports`]), each on disk before the next is queued.

use super::SchedulerStore;
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting, TriggerKind};
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use crate::store::api::Feed;
use crate::store::scheduler::{ImportIds, ImportOutcome, Imported};
use crate::store::sled::imports::{Arrival, Batches};
use crate::store::sled::keys;
use crate::store::sled::records::{self, raw};
use crate::store::WaitDurable;
use crate::store::{Result, StoreError};
use std::collections::HashSet;
use uuid::Uuid;

/// The ids of one kind of entry of an import: new to the account (as they are stored),
/// renamed (import id → stored id, for ids that are another account's) and how many it has.
#[derive(Default)]
struct Sorted {
    new: HashSet<Uuid>,
    renamed: std::collections::HashMap<Uuid, Uuid>,
    kept: usize,
}

impl Sorted {
    /// The id an entry of the import is stored under, when it is new (the first of repeats).
    fn take(&mut self, id: Uuid) -> Option<Uuid> {
        let stored = self.renamed.get(&id).copied().unwrap_or(id);
        self.new.remove(&stored).then_some(stored)
    }
}

/// The ids new to the account, per kind, and what it had.
struct Plan {
    scheduled: Sorted,
    triggered: Sorted,
    triggers: Sorted,
    done: Imported,
}

impl SchedulerStore {
    /// Sorts `ids` (of the id index `id_key`) into new ones (as they will be stored) and
    /// kept ones; an id that is another account's is stored under an id derived from the
    /// account and it ([`crate::store::own_id`]), so an import never tells whether an
    /// id exists elsewhere.
    fn sort_ids(&self, account: Uuid, ids: &[Uuid], id_key: fn(Uuid) -> Vec<u8>) -> Result<Sorted> {
        let mut sorted = Sorted::default();
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(*id) {
                sorted.kept += 1;
                continue;
            }
            match crate::store::sled::imports::arrival(account, *id, |id| self.tree.get(id_key(id)))? {
                Arrival::Kept => sorted.kept += 1,
                Arrival::New(stored) => {
                    if stored != *id {
                        sorted.renamed.insert(*id, stored);
                    }
                    sorted.new.insert(stored);
                }
            }
        }
        Ok(sorted)
    }

    fn import_plan(
        &self,
        account: Uuid,
        ids: &ImportIds,
        cap: Option<u64>,
    ) -> Result<std::result::Result<Plan, ImportOutcome>> {
        let mut sorted = Vec::new();
        for (list, id_key) in [
            (&ids.scheduled, keys::scheduled_id as fn(Uuid) -> Vec<u8>),
            (&ids.triggered, keys::triggered_id),
            (&ids.triggers, keys::trigger_id),
        ] {
            sorted.push(self.sort_ids(account, list, id_key)?);
        }
        let mut sorted = sorted.into_iter();
        let mut next = || sorted.next().unwrap_or_default();
        let (scheduled, triggered, triggers) = (next(), next(), next());
        let (s, _) = self.counts_of(account)?;
        if !scheduled.new.is_empty() && cap.is_some_and(|cap| s + scheduled.new.len() as u64 > cap) {
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

    /// What importing entries of these `ids` would do now, without writing anything, after
    /// `new_before` new scheduled items of earlier pieces of the same import.
    pub(super) fn check_entries(
        &self,
        account: Uuid,
        ids: &ImportIds,
        cap: Option<u64>,
        new_before: u64,
    ) -> Result<ImportOutcome> {
        let _guard = self.accounts.lock(account);
        let cap = cap.map(|cap| cap.saturating_sub(new_before));
        Ok(match self.import_plan(account, ids, cap)? {
            Ok(plan) => ImportOutcome::Imported(plan.done),
            Err(refused) => refused,
        })
    }

    /// Imports into `account` under its lock: the settings (when they differ; every
    /// scheduled item is then indexed again under them), and the scheduled items, triggered
    /// items and triggers whose ids the account does not have yet, with their ids and
    /// times. `ids` are checked first (nothing is written when one belongs to another
    /// account, or when the new scheduled items would take the account over `cap`); then
    /// `entries` hands over the entries one at a time (the import read again) and they are
    /// written in bounded batches, each on disk before the next. Importing the same export
    /// twice changes nothing the second time. `due_of` gives a scheduled item's due instant
    /// under settings. Runs in a blocking thread.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn import_entries(
        &self,
        account: Uuid,
        ids: &ImportIds,
        settings: Option<&TimeZoneSetting>,
        due_of: &(dyn Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
        entries: Feed<'_, SchedulerEntry>,
        wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        let _guard = self.accounts.lock(account);
        let mut plan = match self.import_plan(account, ids, cap)? {
            Ok(plan) => plan,
            Err(refused) => return Ok(refused),
        };
        let planned = plan.done.clone();
        let mut batches = Batches::new(&self.tree, wait)?;
        // what the import adds (all of it lands, or none)
        let mut done = Imported {
            scheduled_kept: planned.scheduled_kept,
            triggered_kept: planned.triggered_kept,
            triggers_kept: planned.triggers_kept,
            ..Imported::default()
        };
        let current = self.settings_of(account)?;
        let settings = settings.cloned().unwrap_or_else(|| current.clone());
        let before = self.counts_of(account)?;
        // the counts in the batch being filled land with the entries they count
        let counts_into = |batches: &mut Batches<'_>, done: &Imported| -> Result<()> {
            let now = (
                before.0 + done.scheduled_added as u64,
                before.1 + done.triggered_added as u64,
            );
            if now != before {
                batches.insert(keys::count(account), raw::counts(now))?;
            }
            Ok(())
        };
        let result = (|| -> Result<()> {
            if settings != current {
                for kv in self.tree.scan_prefix(keys::scheduled_of(account)) {
                    let (k, v) = kv?;
                    let (item, old_due) = records::scheduled::decode(&k, &v)?;
                    let due = due_of(&item, &settings);
                    if due != old_due {
                        batches.remove(keys::due(old_due, item.id))?;
                        batches.insert(keys::due(due, item.id), raw::uuid(account))?;
                        batches.insert(k, records::scheduled::encode(&item, due))?;
                    }
                    if batches.full() {
                        batches.write()?;
                    }
                }
                batches.insert(keys::settings(account), records::settings::encode(&settings))?;
                done.settings_changed = true;
            }
            entries(&mut |entry| {
                match entry {
                    SchedulerEntry::Scheduled(mut item) => {
                        let Some(id) = plan.scheduled.take(item.id) else {
                            return Ok(());
                        };
                        item.id = id;
                        let due = due_of(&item, &settings);
                        let place = keys::item_place(account, item.created, self.seq()?);
                        // new ids (checked under the lock), fresh sequence numbers
                        batches.insert_new(keys::scheduled_id(item.id), place.clone());
                        batches.insert_new(keys::scheduled(&place), records::scheduled::encode(&item, due));
                        batches.insert_new(keys::due(due, item.id), raw::uuid(account));
                        done.scheduled_added += 1;
                    }
                    SchedulerEntry::Triggered(mut item) => {
                        let Some(id) = plan.triggered.take(item.id) else {
                            return Ok(());
                        };
                        item.id = id;
                        // attempts name the import's triggers as they are stored
                        for attempt in &mut item.attempts {
                            if let Some(stored) = plan.triggers.renamed.get(&attempt.trigger) {
                                attempt.trigger = *stored;
                            }
                        }
                        let place = keys::triggered_place(account, item.created, item.triggered, self.seq()?);
                        batches.insert_new(keys::triggered(&place), records::triggered::encode(&item));
                        batches.insert_new(keys::triggered_id(item.id), place);
                        done.triggered_added += 1;
                    }
                    SchedulerEntry::Trigger(mut trigger) => {
                        let Some(id) = plan.triggers.take(trigger.id) else {
                            return Ok(());
                        };
                        trigger.id = id;
                        let place = keys::trigger_place(account, self.seq()?, trigger.id);
                        batches.insert_new(keys::trigger(&place), records::trigger::encode(&trigger));
                        batches.insert_new(keys::trigger_id(trigger.id), place);
                        done.triggers_added += 1;
                        if matches!(trigger.kind, TriggerKind::Email { verified: false, .. }) {
                            done.email_triggers.push(trigger.id);
                        }
                    }
                }
                if batches.full() {
                    counts_into(&mut batches, &done)?;
                    batches.write()?;
                }
                Ok(())
            })?;
            let complete = done.scheduled_added == planned.scheduled_added
                && done.triggered_added == planned.triggered_added
                && done.triggers_added == planned.triggers_added;
            if !complete {
                return Err(StoreError::Codec("the import changed while it was read".into()));
            }
            counts_into(&mut batches, &done)?;
            batches.commit()
        })();
        match result {
            Ok(()) => Ok(ImportOutcome::Imported(done)),
            Err(e) => crate::store::sled::imports::failed(batches, e, account).map(|()| ImportOutcome::Interrupted),
        }
    }
}
