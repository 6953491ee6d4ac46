//! Accounts moved in from an Intray or Tickler server (`pigeonhole import-intray` /
//! `import-tickler`): everything of every account of one run is written in one batch, with
//! the uuids and creation times it had there, or nothing is.
//!
//! An account whose uuid and username are here already (an earlier run of the same file) is
//! skipped as a whole; a username or uuid that belongs to another account here is a conflict,
//! and then nothing at all is written.

use super::inbox::InboxStore;
use super::writer::Batch;
use super::{Arrival, Result, Written};
use crate::domain::account::{AccessKey, Account};
use crate::domain::inbox::models::InboxItem;
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting, Trigger, TriggeredItem};
use crate::domain::wire::Timestamp;

/// One inbox account as it arrives.
#[derive(Clone, Debug)]
pub struct InboxArrival {
    pub account: Account,
    /// In the order they list in.
    pub access_keys: Vec<AccessKey>,
    pub items: Vec<InboxItem>,
}

/// One scheduler account as it arrives.
#[derive(Clone, Debug)]
pub struct SchedulerArrival {
    pub account: Account,
    /// `None`: the default (UTC).
    pub settings: Option<TimeZoneSetting>,
    /// Each with its due instant under `settings`.
    pub scheduled: Vec<(ScheduledItem, Timestamp)>,
    pub triggered: Vec<TriggeredItem>,
    /// In the order they list in.
    pub triggers: Vec<Trigger>,
}

/// What happened to each account of a run, in the order given; the receipt is of the one
/// batch that carries every moved account (none when there is a conflict).
pub type MoveIn = Written<Vec<Arrival>>;

/// The arrivals of `accounts`; `true` when one of them is a conflict.
pub(super) fn arrivals<'a>(
    accounts: impl Iterator<Item = &'a Account>,
    check: impl Fn(&Account) -> Result<Arrival>,
) -> Result<(Vec<Arrival>, bool)> {
    let mut out = Vec::new();
    let (mut names, mut ids) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for account in accounts {
        // two accounts of the same file with one name or uuid: the second is a conflict
        let (new_name, new_id) = (names.insert(account.username.clone()), ids.insert(account.id));
        let arrival = if !new_name || !new_id {
            Arrival::Conflict(format!(
                "the file has the username {:?} or the account {} twice",
                account.username, account.id
            ))
        } else {
            check(account)?
        };
        out.push(arrival);
    }
    let conflict = out.iter().any(|a| matches!(a, Arrival::Conflict(_)));
    Ok((out, conflict))
}

impl InboxStore {
    /// Writes the accounts that are new here with their access keys and items, in one batch.
    pub fn move_in(&self, accounts: &[InboxArrival]) -> Result<MoveIn> {
        let (arrivals, conflict) = arrivals(accounts.iter().map(|a| &a.account), |a| self.accounts.arrival(a))?;
        if conflict {
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
            self.accounts
                .put_arriving(&mut batch, &arriving.account, &arriving.access_keys);
            for item in &arriving.items {
                self.put_item(&mut batch, id, item)?;
            }
            self.put_count(&mut batch, id, arriving.items.len() as u64);
        }
        if !any {
            return Ok(Written::unchanged(arrivals));
        }
        Ok(Written::new(arrivals, self.tree.apply_batch(batch)))
    }
}
