//! Scheduler accounts moved in from a Tickler server, in one batch (see
//! [`crate::store::moving_in`]).

use super::SchedulerStore;
use crate::store::moving_in::{arrivals, check_ids, MoveIn, SchedulerArrival};
use crate::store::writer::Batch;
use crate::store::{keys, records, Arrival, Result, Written};

impl SchedulerStore {
    /// Writes the accounts that are new here with their settings, scheduled items (and
    /// their due-index entries), triggered items and triggers, in one batch.
    pub fn move_in(&self, accounts: &[SchedulerArrival]) -> Result<MoveIn> {
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
            return Ok(Written::unchanged(arrivals));
        }
        let mut batch = Batch::default();
        let mut any = false;
        for (arriving, arrival) in accounts.iter().zip(&arrivals) {
            if *arrival != Arrival::Moved {
                continue;
            }
            any = true;
            let id = arriving.account.id;
            self.accounts.put_arriving(&mut batch, &arriving.account, &[]);
            if let Some(settings) = &arriving.settings {
                batch.insert(keys::settings(id), records::settings::encode(settings));
            }
            for (item, due) in &arriving.scheduled {
                self.put_scheduled(&mut batch, item, *due)?;
            }
            for item in &arriving.triggered {
                let place = keys::triggered_place(id, item.created, item.triggered, self.seq()?);
                batch.insert(keys::triggered(&place), records::triggered::encode(item));
                batch.insert(keys::triggered_id(item.id), place);
            }
            for trigger in &arriving.triggers {
                let place = keys::trigger_place(id, self.seq()?, trigger.id);
                batch.insert(keys::trigger(&place), records::trigger::encode(trigger));
                batch.insert(keys::trigger_id(trigger.id), place);
            }
            let counts = (arriving.scheduled.len() as u64, arriving.triggered.len() as u64);
            Self::put_counts(&mut batch, id, counts);
        }
        if !any {
            return Ok(Written::unchanged(arrivals));
        }
        Ok(Written::new(arrivals, self.tree.apply_batch(batch)))
    }
}
