//! Deliveries: the target lists fixed when an item triggered (`r`), the pending inbox
//! deliveries made of them (`v`), and the outcomes recorded on triggered items. A delivery
//! to an e-mail trigger goes through the e-mail queue ([`super::emails`]) instead.

use super::SchedulerStore;
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::scheduler::models::{Attempt, Delivery, Outcome, TriggerKind};
use crate::domain::wire::Timestamp;
use crate::store::scheduler::QueueKey;
use crate::store::sled::keys::{self, TargetKind};
use crate::store::sled::records;
use crate::store::sled::writer::Batch;
use crate::store::written::Ticket;
use crate::store::{Result, StoreError, Written};
use uuid::Uuid;

impl SchedulerStore {
    /// Expands up to `limit` target lists of `kind`; answers how many it read.
    fn expand_lists(&self, kind: TargetKind, limit: usize) -> Result<(usize, Ticket)> {
        let email = kind == TargetKind::Email;
        let lists: Vec<_> = self
            .tree
            .scan_prefix(keys::targets_of(kind))
            .take(limit)
            .collect::<Result<_>>()?;
        let mut written = Ticket::none();
        for (k, v) in &lists {
            let targets = records::targets::decode(k, v)?;
            let item = keys::targets_item(k).ok_or_else(|| StoreError::Codec("target list key".into()))?;
            let _guard = self.accounts.lock(targets.owner);
            if self.tree.get(k)?.is_none() {
                continue; // dropped meanwhile (item or account deleted)
            }
            let mut batch = Batch::default();
            batch.remove(k);
            for trigger_id in &targets.triggers {
                let Some(trigger) = self.trigger_of(targets.owner, *trigger_id)? else {
                    continue;
                };
                // no longer verified or expired meanwhile: skipped
                if !trigger.kind.receives() || trigger.kind.channel().by_email() != email {
                    continue;
                }
                let delivery = Delivery {
                    id: crate::domain::wire::new_uuid(),
                    owner: targets.owner,
                    item,
                    trigger: trigger.id,
                    trigger_created: trigger.created,
                    email,
                    failures: 0,
                    not_before: Timestamp::from_unix(0, 0),
                };
                self.queue_delivery(&mut batch, &trigger.kind, delivery)?;
            }
            written = written.and(self.tree.apply_batch(batch));
        }
        Ok((lists.len(), written))
    }

    /// Adds to `batch` the delivery to a trigger of `kind`: a pending delivery, or a queued
    /// e-mail to render for an e-mail trigger.
    fn queue_delivery(&self, batch: &mut Batch, kind: &TriggerKind, delivery: Delivery) -> Result<()> {
        match kind {
            TriggerKind::Email { address, .. } => {
                let to = address.clone();
                let queued = QueuedEmail::new(
                    delivery.owner,
                    Some(delivery.trigger),
                    EmailKind::Triggered { delivery, to },
                );
                self.put_email(batch, &queued)
            }
            _ => self.put_delivery(batch, &delivery),
        }
    }

    fn put_delivery(&self, batch: &mut Batch, delivery: &Delivery) -> Result<()> {
        batch.insert(
            keys::delivery(self.seq()?, delivery.id),
            records::delivery::encode(delivery),
        );
        Ok(())
    }

    /// Adds to `batch` the removal of the pending delivery or queued e-mail `k` of `owner`.
    fn remove_pending_into(batch: &mut Batch, k: &QueueKey, owner: Uuid) {
        if keys::is_delivery(k.as_bytes()) {
            batch.remove(k.as_bytes());
        } else {
            Self::remove_email(batch, k.as_bytes(), owner);
        }
    }

    /// Adds to `batch` the removal of every pending delivery and queued e-mail of `owner`
    /// for which `drop(triggered item, trigger)` holds. Target lists are dropped by item
    /// only (a deleted trigger is skipped when they are expanded).
    pub(super) fn drop_pending(
        &self,
        batch: &mut Batch,
        owner: Uuid,
        drop: impl Fn(Option<Uuid>, Option<Uuid>) -> bool,
    ) -> Result<()> {
        for kv in self.tree.scan_prefix(keys::deliveries()) {
            let (k, v) = kv?;
            let d = records::delivery::decode(&k, &v)?;
            if d.owner == owner && drop(Some(d.item), Some(d.trigger)) {
                batch.remove(k);
            }
        }
        self.drop_emails(batch, owner, &drop)?;
        for kv in self.tree.scan_prefix(keys::all_targets()) {
            let (k, v) = kv?;
            let t = records::targets::decode(&k, &v)?;
            if t.owner == owner && drop(keys::targets_item(&k), None) {
                batch.remove(k);
            }
        }
        Ok(())
    }
}

/// The sled implementation: each write one batch (under the owner's lock where it reads
/// what it changes).
#[async_trait::async_trait]
impl crate::store::api::Deliveries for SchedulerStore {
    /// Turns up to `limit` waiting target lists of one kind (`email` or inbox) into pending
    /// deliveries (inbox) or queued e-mails to render (e-mail), each list in a batch of its
    /// own, reading 256 lists at a time; triggers deleted meanwhile, and e-mail triggers no
    /// longer verified, are skipped. Answers how many lists it took.
    async fn expand_targets(&self, email: bool, limit: usize) -> Result<Written<usize>> {
        const ROUND: usize = 256;
        let kind = if email { TargetKind::Email } else { TargetKind::Inbox };
        let mut total = 0;
        let mut written = Ticket::none();
        loop {
            // every list read is removed (or was dropped meanwhile): each round progresses
            let round = ROUND.min(limit - total);
            let (n, ticket) = self.expand_lists(kind, round)?;
            total += n;
            written = written.and(ticket);
            if n < round || total == limit {
                return Ok(Written::new(total, written));
            }
        }
    }

    /// Pending inbox deliveries, oldest first, with their keys; a record that cannot be
    /// decoded is an error of its own (the others are read on).
    async fn pending_deliveries(&self, limit: usize) -> Result<Vec<(QueueKey, Result<Delivery>)>> {
        self.tree
            .scan_prefix(keys::deliveries())
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                let delivery = records::delivery::decode(&k, &v);
                Ok((QueueKey::from_bytes(k.to_vec()), delivery))
            })
            .collect()
    }

    /// Replaces a pending delivery (after a transient failure) if it is still pending.
    async fn postpone_delivery(&self, k: &QueueKey, delivery: &Delivery) -> Result<Written<()>> {
        let _guard = self.accounts.lock(delivery.owner);
        if self.tree.get(k.as_bytes())?.is_none() {
            return Ok(Written::unchanged(()));
        }
        let ticket = self.tree.insert(k.as_bytes(), records::delivery::encode(delivery));
        Ok(Written::new((), ticket))
    }

    /// Records the final outcome of a delivery on its triggered item and removes the
    /// pending record (`k`: its delivery key, or e-mail queue key), in one batch. Nothing
    /// happens when the record was dropped meanwhile.
    async fn finish_delivery(&self, k: &QueueKey, delivery: &Delivery, outcome: Outcome) -> Result<Written<()>> {
        let _guard = self.accounts.lock(delivery.owner);
        if self.tree.get(k.as_bytes())?.is_none() {
            return Ok(Written::unchanged(()));
        }
        let mut batch = Batch::default();
        Self::remove_pending_into(&mut batch, k, delivery.owner);
        if let Some((item_key, mut item)) = self.triggered_location(delivery.owner, delivery.item)? {
            item.attempts.push(Attempt {
                trigger: delivery.trigger,
                trigger_created: delivery.trigger_created,
                delivery: delivery.id,
                outcome,
            });
            item.attempts.sort_by_key(Attempt::order);
            batch.insert(item_key, records::triggered::encode(&item));
        }
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// Removes a pending delivery or queued e-mail without recording anything.
    async fn remove_pending(&self, k: &QueueKey) -> Result<Written<()>> {
        if keys::is_delivery(k.as_bytes()) {
            return Ok(Written::new((), self.tree.remove(k.as_bytes())));
        }
        let Some(owner) = self.email_owner(k.as_bytes())? else {
            return Ok(Written::unchanged(()));
        };
        let _guard = self.accounts.lock(owner);
        if self.tree.get(k.as_bytes())?.is_none() {
            return Ok(Written::unchanged(())); // dropped meanwhile
        }
        let mut batch = Batch::default();
        Self::remove_pending_into(&mut batch, k, owner);
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// `POST /scheduler/item/retry`: the failed deliveries of the account's triggered items
    /// `ids` become pending again (same delivery id, fresh budget), unless their trigger is
    /// gone ([`Written::changed`]: whether anything did).
    async fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<Written<()>> {
        let _guard = self.accounts.lock(account);
        let mut batch = Batch::default();
        let mut changed = false;
        for id in ids {
            let Some((item_key, mut item)) = self.triggered_location(account, *id)? else {
                continue;
            };
            let mut keep = Vec::new();
            for attempt in std::mem::take(&mut item.attempts) {
                let trigger = self.trigger_of(account, attempt.trigger)?;
                let (Some(trigger), true) = (trigger, attempt.outcome.is_failure()) else {
                    keep.push(attempt);
                    continue;
                };
                changed = true;
                let delivery = Delivery {
                    id: attempt.delivery,
                    owner: account,
                    item: item.id,
                    trigger: trigger.id,
                    trigger_created: trigger.created,
                    email: trigger.kind.channel().by_email(),
                    failures: 0,
                    not_before: Timestamp::from_unix(0, 0),
                };
                self.queue_delivery(&mut batch, &trigger.kind, delivery)?;
            }
            item.attempts = keep;
            batch.insert(item_key, records::triggered::encode(&item));
        }
        if !changed {
            return Ok(Written::unchanged(()));
        }
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }
}
