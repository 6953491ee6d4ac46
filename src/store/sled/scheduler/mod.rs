//! The scheduler service's data, in its own tree (layouts in [`super::keys`]), one file per
//! job, all of them methods of [`SchedulerStore`] in domain terms:
//!
//! * [`items`]: scheduled items (`s`, id index `S`) with the due index (`q`) the triggerer
//!   reads, triggered items (`x`, id index `X`), the time-zone setting (`z`) and the item
//!   counts (`c`); triggering an item;
//! * [`triggers`]: the account's delivery targets (`g`, id index `G`);
//! * [`deliveries`]: target lists fixed at triggering (`r`), pending inbox deliveries
//!   (`v`), outcomes and retries;
//! * [`emails`]: the e-mail queue, one prefix per stage (`V`, `T`, `N` to render, `M`
//!   rendered) and an index by owner (`o`);
//! * [`payments`]: payment events handled (`E`) or failed (`F`).
//!
//! Writes that belong together (triggering: the triggered copy, its target lists, the item
//! moved or deleted, the counts) share one batch, passed between the files.

mod deliveries;
mod emails;
mod import;
mod items;
mod moving_in;
mod payments;
mod traits;
mod triggers;

use super::accounts::AccountStore;
use super::records::raw;
use super::writer::{Batch, Bytes, Tree};
use super::{keys, Result, Stripes, Written};
use std::sync::Arc;
use uuid::Uuid;

pub struct SchedulerStore {
    tree: Tree,
    /// This service's accounts (the same object as a trait: `Accounts`).
    pub accounts: Arc<AccountStore>,
}

impl SchedulerStore {
    pub(in crate::store) fn new(tree: Tree, stripes: Arc<Stripes>) -> SchedulerStore {
        SchedulerStore {
            accounts: Arc::new(AccountStore::new(tree.clone(), stripes)),
            tree,
        }
    }

    /// The next sequence number (order of items stored in the same instant, of triggers,
    /// of the queues).
    fn seq(&self) -> Result<u64> {
        self.tree.next_id()
    }

    /// The key and stored value of the account's record that the id index `id_key` points
    /// to (its value is the record's place, `record_key` makes the key of a place); `None`
    /// when there is none or it belongs to another account.
    fn locate(
        &self,
        id_key: Vec<u8>,
        account: Uuid,
        record_key: fn(&[u8]) -> Vec<u8>,
    ) -> Result<Option<(Vec<u8>, Bytes)>> {
        let Some(place) = self.tree.get(id_key)? else {
            return Ok(None);
        };
        if !keys::place_of(&place, account) {
            return Ok(None);
        }
        let k = record_key(&place);
        Ok(self.tree.get(&k)?.map(|v| (k, v)))
    }

    /// (scheduled, triggered) item counts of the account.
    pub fn counts(&self, account: Uuid) -> Result<(u64, u64)> {
        let k = keys::count(account);
        match self.tree.get(&k)? {
            Some(v) => raw::to_counts(&k, &v),
            None => Ok((0, 0)),
        }
    }

    /// (scheduled, triggered) items of every account together, from the accounts' count
    /// records (one small read per account: cheap enough for each metrics scrape).
    pub fn total_counts(&self) -> Result<(u64, u64)> {
        let (mut scheduled, mut triggered) = (0u64, 0u64);
        for kv in self.tree.scan_prefix(keys::counts()) {
            let (k, v) = kv?;
            let (s, t) = raw::to_counts(&k, &v)?;
            scheduled = scheduled.saturating_add(s);
            triggered = triggered.saturating_add(t);
        }
        Ok((scheduled, triggered))
    }

    fn put_counts(batch: &mut Batch, account: Uuid, counts: (u64, u64)) {
        batch.insert(keys::count(account), raw::counts(counts));
    }

    /// Deletes the account and everything of it in one batch; `false` when there was none.
    pub fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some(record) = self.accounts.account(account)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        self.drop_items_of(&mut batch, account)?;
        self.drop_triggers_of(&mut batch, account)?;
        self.drop_pending(&mut batch, account, |_, _| true)?;
        batch.remove(keys::settings(account));
        batch.remove(keys::count(account));
        self.accounts.delete_into(&record, &mut batch)?;
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }
}
