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
pub(crate) mod moving_in;
mod payments;
mod triggers;

use super::accounts::AccountStore;
use super::records::raw;
use super::writer::{Batch, Bytes, Tree};
use super::{keys, Result, Stripes};
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
    fn counts_of(&self, account: Uuid) -> Result<(u64, u64)> {
        let k = keys::count(account);
        match self.tree.get(&k)? {
            Some(v) => raw::to_counts(&k, &v),
            None => Ok((0, 0)),
        }
    }

    fn put_counts(batch: &mut Batch, account: Uuid, counts: (u64, u64)) {
        batch.insert(keys::count(account), raw::counts(counts));
    }
}
