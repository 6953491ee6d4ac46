//! Importing an account's export (docs/backup.md): everything the account does not have
//! yet, by id, in one batch.

use super::SchedulerStore;
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting};
use crate::domain::transfer::SchedulerImport;
use crate::domain::wire::Timestamp;
use crate::store::keys;
use crate::store::records::{self, raw};
use crate::store::writer::Batch;
use crate::store::{Result, Written};
use std::collections::HashSet;
use uuid::Uuid;

/// What an import stored; "kept" counts what the account had already (left as it is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub settings_changed: bool,
    pub scheduled_added: usize,
    pub scheduled_kept: usize,
    pub triggered_added: usize,
    pub triggered_kept: usize,
    pub triggers_added: usize,
    pub triggers_kept: usize,
}

#[derive(Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported(Imported),
    /// This id belongs to another account: nothing was stored.
    Taken(Uuid),
    LimitReached,
}

/// Whether the id index `id_key` names a record: `Some(true)` of `account`, `Some(false)` of
/// another account, `None` of none.
fn owned_by(store: &SchedulerStore, id_key: Vec<u8>, account: Uuid) -> Result<Option<bool>> {
    Ok(store.tree.get(id_key)?.map(|place| keys::place_of(&place, account)))
}

impl SchedulerStore {
    /// Imports `import` into `account` under its lock, in one batch: the settings (when they
    /// differ; every scheduled item is then indexed again under them), and the scheduled
    /// items, triggered items and triggers whose ids the account does not have yet, with
    /// their ids and times. Importing the same export twice changes nothing the second
    /// time. `due_of` gives a scheduled item's due instant under settings; `cap` bounds the
    /// scheduled items as adding one does.
    pub fn import(
        &self,
        account: Uuid,
        import: &SchedulerImport,
        due_of: impl Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp,
        cap: Option<u64>,
    ) -> Result<Written<ImportOutcome>> {
        let _guard = self.accounts.lock(account);
        let mut done = Imported::default();
        let mut batch = Batch::default();
        let current = self.settings(account)?;
        let settings = import.settings.clone().unwrap_or_else(|| current.clone());
        if settings != current {
            done.settings_changed = true;
            batch.insert(keys::settings(account), records::settings::encode(&settings));
            for kv in self.tree.scan_prefix(keys::scheduled_of(account)) {
                let (k, v) = kv?;
                let (item, old_due) = records::scheduled::decode(&k, &v)?;
                let due = due_of(&item, &settings);
                if due != old_due {
                    batch.remove(keys::due(old_due, item.id));
                    batch.insert(keys::due(due, item.id), raw::uuid(account));
                    batch.insert(k, records::scheduled::encode(&item, due));
                }
            }
        }
        let mut seen = HashSet::new();
        for item in &import.scheduled {
            match owned_by(self, keys::scheduled_id(item.id), account)? {
                _ if !seen.insert(item.id) => done.scheduled_kept += 1,
                Some(true) => done.scheduled_kept += 1,
                Some(false) => return Ok(Written::unchanged(ImportOutcome::Taken(item.id))),
                None => {
                    self.put_scheduled(&mut batch, item, due_of(item, &settings))?;
                    done.scheduled_added += 1;
                }
            }
        }
        let mut seen = HashSet::new();
        for item in &import.triggered {
            match owned_by(self, keys::triggered_id(item.id), account)? {
                _ if !seen.insert(item.id) => done.triggered_kept += 1,
                Some(true) => done.triggered_kept += 1,
                Some(false) => return Ok(Written::unchanged(ImportOutcome::Taken(item.id))),
                None => {
                    let place = keys::triggered_place(account, item.created, item.triggered, self.seq()?);
                    batch.insert(keys::triggered(&place), records::triggered::encode(item));
                    batch.insert(keys::triggered_id(item.id), place);
                    done.triggered_added += 1;
                }
            }
        }
        let mut seen = HashSet::new();
        for trigger in &import.triggers {
            match owned_by(self, keys::trigger_id(trigger.id), account)? {
                _ if !seen.insert(trigger.id) => done.triggers_kept += 1,
                Some(true) => done.triggers_kept += 1,
                Some(false) => return Ok(Written::unchanged(ImportOutcome::Taken(trigger.id))),
                None => {
                    let place = keys::trigger_place(account, self.seq()?, trigger.id);
                    batch.insert(keys::trigger(&place), records::trigger::encode(trigger));
                    batch.insert(keys::trigger_id(trigger.id), place);
                    done.triggers_added += 1;
                }
            }
        }
        let (s, t) = self.counts(account)?;
        if done.scheduled_added > 0 && cap.is_some_and(|cap| s + done.scheduled_added as u64 > cap) {
            return Ok(Written::unchanged(ImportOutcome::LimitReached));
        }
        if done.scheduled_added + done.triggered_added > 0 {
            Self::put_counts(
                &mut batch,
                account,
                (s + done.scheduled_added as u64, t + done.triggered_added as u64),
            );
        }
        Ok(Written::new(
            ImportOutcome::Imported(done),
            self.tree.apply_batch(batch),
        ))
    }
}
