//! Triggers: where an account's triggered items are delivered (`g` by account + sequence,
//! so listing is in creation order; `G` finds one by id).

use super::SchedulerStore;
use crate::domain::email::QueuedEmail;
use crate::domain::scheduler::models::Trigger;
use crate::store::sled::keys;
use crate::store::sled::records;
use crate::store::sled::writer::Batch;
use crate::store::{Result, Written};
use uuid::Uuid;

impl SchedulerStore {
    /// The key and record of the account's trigger `id`.
    fn trigger_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, Trigger)>> {
        match self.locate(keys::trigger_id(id), account, keys::trigger)? {
            Some((k, v)) => {
                let trigger = records::trigger::decode(&k, &v)?;
                Ok(Some((k, trigger)))
            }
            None => Ok(None),
        }
    }

    /// The account's triggers in creation order.
    pub(super) fn triggers_of(&self, account: Uuid) -> Result<Vec<Trigger>> {
        self.tree
            .scan_prefix(keys::triggers_of(account))
            .map(|kv| {
                let (k, v) = kv?;
                records::trigger::decode(&k, &v)
            })
            .collect()
    }

    /// The account's trigger `id`.
    pub(super) fn trigger_of(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        Ok(self.trigger_location(account, id)?.map(|(_, t)| t))
    }

    /// Adds to `batch` the removal of every trigger of the account.
    pub(super) fn drop_triggers_of(&self, batch: &mut Batch, account: Uuid) -> Result<()> {
        for kv in self.tree.scan_prefix(keys::triggers_of(account)) {
            let (k, v) = kv?;
            let trigger = records::trigger::decode(&k, &v)?;
            batch.remove(k);
            batch.remove(keys::trigger_id(trigger.id));
        }
        Ok(())
    }
}

/// The sled implementation: each write one batch under the account's lock.
#[async_trait::async_trait]
impl crate::store::api::Triggers for SchedulerStore {
    /// Stores a new trigger of its owner, with the e-mail that goes with it (verification),
    /// in one batch; `false` when the owner's account is gone.
    async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(trigger.owner);
        if self.accounts.account(trigger.owner)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let place = keys::trigger_place(trigger.owner, self.seq()?, trigger.id);
        let mut batch = Batch::default();
        batch.insert(keys::trigger(&place), records::trigger::encode(trigger));
        batch.insert(keys::trigger_id(trigger.id), place);
        if let Some(email) = email {
            self.put_email(&mut batch, &email)?;
        }
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// The account a trigger belongs to (`None`: there is no trigger `id`): the
    /// verification page reaches a trigger by its id and key alone.
    async fn trigger_owner(&self, id: Uuid) -> Result<Option<Uuid>> {
        Ok(self
            .tree
            .get(keys::trigger_id(id))?
            .and_then(|place| keys::uuid_at(&place, 0)))
    }

    async fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        self.trigger_of(account, id)
    }

    /// The account's triggers in creation order.
    async fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>> {
        self.triggers_of(account)
    }

    /// Replaces a trigger of the account (verification, new key) and optionally queues an
    /// e-mail, in one batch; `false` when the account has no such trigger.
    async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some((k, trigger)) = self.trigger_location(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let Some((trigger, email)) = update(trigger) else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        batch.insert(k, records::trigger::encode(&trigger));
        if let Some(email) = email {
            self.put_email(&mut batch, &email)?;
        }
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// Stores the trigger that `decide` makes of the account's triggers (all of them, under
    /// the account's lock): a new one, or one of them renewed (same id); nothing when it
    /// answers `None`. `false` when the account is gone or nothing was stored.
    async fn add_or_renew_trigger(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [Trigger]) -> Option<Trigger> + Send),
    ) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        if self.accounts.account(account)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let Some(trigger) = decide(&self.triggers_of(account)?).filter(|t| t.owner == account) else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        match self.trigger_location(account, trigger.id)? {
            Some((k, _)) => batch.insert(k, records::trigger::encode(&trigger)),
            None => {
                let place = keys::trigger_place(account, self.seq()?, trigger.id);
                batch.insert(keys::trigger(&place), records::trigger::encode(&trigger));
                batch.insert(keys::trigger_id(trigger.id), place);
            }
        }
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// Deletes a trigger of the account with its pending deliveries and queued e-mails.
    async fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some((k, _)) = self.trigger_location(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        batch.remove(k);
        batch.remove(keys::trigger_id(id));
        self.drop_pending(&mut batch, account, |_, trigger| trigger == Some(id))?;
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }
}
