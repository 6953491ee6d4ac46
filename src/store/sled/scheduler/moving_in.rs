//! Scheduler accounts moved in from a Tickler server, in bounded journalled batches (see
//! [`crate::store::sled::moving_in`]).

use super::SchedulerStore;
use crate::store::sled::imports::Batches;
use crate::store::sled::moving_in::{arrivals, check_ids, SchedulerArrival};
use crate::store::sled::records::raw;
use crate::store::sled::{keys, records};
use crate::store::WaitDurable;
use crate::store::{Arrival, Result};

impl SchedulerStore {
    /// Writes the accounts that are new here with their settings, scheduled items (and
    /// their due-index entries), triggered items and triggers, in bounded batches through
    /// one import journal ([`crate::store::sled::imports`]), all or nothing; answers what happened
    /// to each (nothing is written when one is a conflict).
    pub fn move_in(&self, accounts: &[SchedulerArrival], wait: WaitDurable<'_>) -> Result<Vec<Arrival>> {
        let (mut arrivals, conflict) = arrivals(accounts.iter().map(|a| &a.account), |a| self.accounts.arrival(a))?;
        let ids = accounts.iter().map(|a| {
            let scheduled = a.scheduled.iter().map(|(i, _)| i.id);
            let triggered = a.triggered.iter().map(|i| i.id);
            scheduled
                .chain(triggered)
                .chain(a.triggers.iter().map(|t| t.id))
                .collect()
        });
        let taken = |id| -> Result<bool> {
            Ok(self.tree.contains_key(keys::scheduled_id(id))?
                || self.tree.contains_key(keys::triggered_id(id))?
                || self.tree.contains_key(keys::trigger_id(id))?)
        };
        if check_ids(&mut arrivals, ids, taken)? || conflict {
            return Ok(arrivals);
        }
        if !arrivals.contains(&Arrival::Moved) {
            return Ok(arrivals);
        }
        let mut batches = Batches::new(&self.tree, wait)?;
        let result = (|| {
            for (arriving, arrival) in accounts.iter().zip(&arrivals) {
                if *arrival != Arrival::Moved {
                    continue;
                }
                let id = arriving.account.id;
                self.accounts.put_arriving_into(&mut batches, &arriving.account, &[])?;
                if let Some(settings) = &arriving.settings {
                    batches.insert(keys::settings(id), records::settings::encode(settings))?;
                }
                for (item, due) in &arriving.scheduled {
                    let place = keys::item_place(id, item.created, self.seq()?);
                    batches.insert_new(keys::scheduled_id(item.id), place.clone());
                    batches.insert_new(keys::scheduled(&place), records::scheduled::encode(item, *due));
                    batches.insert_new(keys::due(*due, item.id), raw::uuid(id));
                    if batches.full() {
                        batches.write()?;
                    }
                }
                for item in &arriving.triggered {
                    let place = keys::triggered_place(id, item.created, item.triggered, self.seq()?);
                    batches.insert_new(keys::triggered(&place), records::triggered::encode(item));
                    batches.insert_new(keys::triggered_id(item.id), place);
                    if batches.full() {
                        batches.write()?;
                    }
                }
                for trigger in &arriving.triggers {
                    let place = keys::trigger_place(id, self.seq()?, trigger.id);
                    batches.insert_new(keys::trigger(&place), records::trigger::encode(trigger));
                    batches.insert_new(keys::trigger_id(trigger.id), place);
                    if batches.full() {
                        batches.write()?;
                    }
                }
                let counts = (arriving.scheduled.len() as u64, arriving.triggered.len() as u64);
                batches.insert(keys::count(id), raw::counts(counts))?;
            }
            batches.commit()
        })();
        match result {
            Ok(()) => Ok(arrivals),
            Err(e) => {
                if let Err(undo) = batches.roll_back() {
                    tracing::error!(
                        "moving in failed ({e}), and undoing it failed too ({undo}): the next start undoes it"
                    );
                }
                Err(e)
            }
        }
    }
}
