//! Scheduler accounts moved in from a Tickler server, streamed in bounded journalled batches
//! (see [`crate::store::sled::moving_in`]).

use super::SchedulerStore;
use crate::domain::account::Account;
use crate::domain::scheduler::models::{ScheduledItem, TriggeredItem};
use crate::domain::wire::Timestamp;
use crate::store::sled::accounts::AccountStore;
use crate::store::sled::moving_in::{all_or_nothing, arrivals, SchedulerMoving, Target};
use crate::store::sled::records::raw;
use crate::store::sled::{keys, records};
use crate::store::WaitDurable;
use crate::store::{Arrival, Result, StoreError};

/// An item of a scheduler account moving in.
pub enum SchedulerItem {
    /// With its due instant under the account's settings.
    Scheduled(ScheduledItem, Timestamp),
    Triggered(TriggeredItem),
}

impl SchedulerStore {
    /// What would happen to each of `accounts` (new here, here already, or a conflict of
    /// its username or uuid), without writing anything; `true` when one is a conflict.
    pub fn move_in_arrivals<'a>(&self, accounts: impl Iterator<Item = &'a Account>) -> Result<(Vec<Arrival>, bool)> {
        arrivals(accounts, |a| self.accounts.arrival(a))
    }

    /// Whether a scheduled item, triggered item or trigger of this uuid is here (of any
    /// account): they are found by uuid alone.
    pub fn id_taken(&self, id: uuid::Uuid) -> Result<bool> {
        Ok(self.tree.contains_key(keys::scheduled_id(id))?
            || self.tree.contains_key(keys::triggered_id(id))?
            || self.tree.contains_key(keys::trigger_id(id))?)
    }
}

/// Writes `accounts` (each checked by [`SchedulerStore::move_in_arrivals`] to be new here)
/// with their settings and triggers, and the items `items` hands on (each of one of
/// `accounts`; scheduled ones with their due-index entries) into `target` in bounded batches,
/// each on disk before the next, all or nothing through one import journal
/// ([`crate::store::sled::imports`]): when `items` or a write fails, what was written is
/// undone (now, or at the next open). An item uuid that is here already (one the run wrote
/// itself: the file has it twice) is an error. Answers how many scheduled and triggered
/// items each account got.
pub fn move_in_scheduler<E: From<StoreError>>(
    target: &mut Target,
    accounts: &[SchedulerMoving],
    items: impl FnOnce(&mut dyn FnMut(SchedulerItem) -> Result<()>) -> std::result::Result<(), E>,
    wait: WaitDurable<'_>,
) -> std::result::Result<Vec<(u64, u64)>, E> {
    let batches = target.batches(1, wait)?;
    let index: std::collections::HashMap<uuid::Uuid, usize> =
        accounts.iter().enumerate().map(|(i, a)| (a.account.id, i)).collect();
    all_or_nothing(batches, |batches| {
        let mut counts = vec![(0u64, 0u64); accounts.len()];
        // the ids of the batch being filled (not readable in the tree before it is written)
        let mut in_batch = std::collections::HashSet::new();
        for arriving in accounts {
            let id = arriving.account.id;
            AccountStore::put_arriving_into(batches, &arriving.account, &[])?;
            if let Some(settings) = &arriving.settings {
                batches.insert(keys::settings(id), records::settings::encode(settings))?;
            }
            for trigger in &arriving.triggers {
                let place = keys::trigger_place(id, batches.tree()?.next_id()?, trigger.id);
                batches.insert_new(keys::trigger(&place), records::trigger::encode(trigger));
                batches.insert_new(keys::trigger_id(trigger.id), place);
                in_batch.insert(trigger.id);
                if batches.write_if_full()? {
                    in_batch.clear();
                }
            }
        }
        items(&mut |item| {
            let (item_id, owner) = match &item {
                SchedulerItem::Scheduled(i, _) => (i.id, i.owner),
                SchedulerItem::Triggered(i) => (i.id, i.owner),
            };
            let i = *index
                .get(&owner)
                .ok_or_else(|| StoreError::Codec(format!("an item of {owner}, an account not moving in")))?;
            let tree = batches.tree()?;
            let taken = tree.contains_key(keys::scheduled_id(item_id))?
                || tree.contains_key(keys::triggered_id(item_id))?
                || tree.contains_key(keys::trigger_id(item_id))?;
            if !in_batch.insert(item_id) || taken {
                return Err(StoreError::Codec(format!(
                    "the uuid {item_id} of an item or trigger is in the file twice"
                )));
            }
            let seq = tree.next_id()?;
            match item {
                SchedulerItem::Scheduled(item, due) => {
                    let place = keys::item_place(owner, item.created, seq);
                    batches.insert_new(keys::scheduled_id(item.id), place.clone());
                    batches.insert_new(keys::scheduled(&place), records::scheduled::encode(&item, due));
                    batches.insert_new(keys::due(due, item.id), raw::uuid(owner));
                    counts[i].0 += 1;
                }
                SchedulerItem::Triggered(item) => {
                    let place = keys::triggered_place(owner, item.created, item.triggered, seq);
                    batches.insert_new(keys::triggered(&place), records::triggered::encode(&item));
                    batches.insert_new(keys::triggered_id(item.id), place);
                    counts[i].1 += 1;
                }
            }
            if batches.write_if_full()? {
                in_batch.clear();
            }
            Ok(())
        })?;
        for (arriving, n) in accounts.iter().zip(&counts) {
            batches.insert(keys::count(arriving.account.id), raw::counts(*n))?;
        }
        Ok(counts)
    })
}
