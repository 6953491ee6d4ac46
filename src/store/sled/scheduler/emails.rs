//! The e-mail queue. Each stage has a prefix of its own: `V` verification e-mails, `T`
//! triggered-item e-mails and `N` admin notifications wait for their converter, `M`
//! rendered e-mails for the emailer; the key's sequence stays when an e-mail moves on, so
//! the emailer sends in the order queued. So a worker's pass reads only its own stage. An
//! index by owner (`o` + owner + sequence → stage) finds an account's e-mails when the
//! account, one of its triggers or one of its triggered items is deleted, without reading
//! anyone else's.
//!
//! Before stages had prefixes, every queued e-mail was under `m` + sequence with its stage
//! only in the value; [`SchedulerStore::move_legacy_emails`] moves such entries, once, when
//! the database opens (the record format is the same, only the key changes).

use super::SchedulerStore;
use crate::domain::email::{EmailKind, QueuedEmail, Stage};
use crate::store::scheduler::QueueKey;
use crate::store::sled::keys;
use crate::store::sled::records;
use crate::store::sled::writer::Batch;
use crate::store::{Result, StoreError, Written};
use uuid::Uuid;

impl SchedulerStore {
    /// Adds to `batch` the e-mail at sequence `seq` of its stage, with its owner-index
    /// entry.
    fn put_email_at(batch: &mut Batch, seq: u64, email: &QueuedEmail) {
        let stage = email.kind.stage();
        batch.insert(keys::email(stage, seq), records::email::encode(email));
        if !email.owner.is_nil() {
            batch.insert(keys::email_of_owner(email.owner, seq), vec![keys::stage_prefix(stage)]);
        }
    }

    /// Adds the queueing of `email` to `batch`.
    pub(super) fn put_email(&self, batch: &mut Batch, email: &QueuedEmail) -> Result<()> {
        Self::put_email_at(batch, self.seq()?, email);
        Ok(())
    }

    /// Adds to `batch` the removal of the queued e-mail `k` of `owner` (with its index
    /// entry; admin notifications have no owner and no entry).
    pub(super) fn remove_email(batch: &mut Batch, k: &[u8], owner: Uuid) {
        batch.remove(k);
        if let (false, Some((_, seq))) = (owner.is_nil(), keys::email_entry(k)) {
            batch.remove(keys::email_of_owner(owner, seq));
        }
    }

    /// The owner of the queued e-mail `k`, if it is still queued.
    pub(super) fn email_owner(&self, k: &[u8]) -> Result<Option<Uuid>> {
        match self.tree.get(k)? {
            Some(v) => Ok(Some(records::email::decode(k, &v)?.owner)),
            None => Ok(None),
        }
    }

    /// Adds to `batch` the removal of the queued e-mails of `owner` for which
    /// `drop(triggered item, trigger)` holds; reads only the owner's e-mails.
    pub(super) fn drop_emails(
        &self,
        batch: &mut Batch,
        owner: Uuid,
        drop: impl Fn(Option<Uuid>, Option<Uuid>) -> bool,
    ) -> Result<()> {
        for kv in self.tree.scan_prefix(keys::emails_of_owner(owner)) {
            let (index_key, stage) = kv?;
            let (Some(seq), Some(stage)) = (
                keys::email_owner_seq(&index_key),
                stage.first().and_then(|p| keys::stage_of_prefix(*p)),
            ) else {
                return Err(StoreError::Codec("e-mail owner index entry".into()));
            };
            let k = keys::email(stage, seq);
            let Some(v) = self.tree.get(&k)? else {
                batch.remove(index_key); // an entry left behind (should not happen)
                continue;
            };
            let email = records::email::decode(&k, &v)?;
            let item = match &email.kind {
                EmailKind::Triggered { delivery, .. } => Some(delivery.item),
                EmailKind::Rendered { delivery: Some(d), .. } => Some(d.item),
                _ => None,
            };
            if drop(item, email.trigger) {
                batch.remove(k);
                batch.remove(index_key);
            }
        }
        Ok(())
    }

    /// Moves every e-mail of the queue as it was before stages had prefixes (`m` +
    /// sequence) to its stage's prefix with the same sequence, indexed by owner, in one
    /// batch; answers how many (the caller makes the move durable). An entry that does not
    /// decode stays where it is (and is logged): nothing queued is lost by an upgrade.
    pub(in crate::store) fn move_legacy_emails(&self) -> Result<usize> {
        let mut batch = Batch::default();
        let mut moved = 0;
        for kv in self.tree.scan_prefix(keys::legacy_emails()) {
            let (k, v) = kv?;
            let decoded = records::email::decode(&k, &v);
            let (Some(seq), Ok(email)) = (keys::legacy_email_seq(&k), decoded) else {
                tracing::error!(
                    "a queued e-mail of an older version could not be read; it stays queued under its old key"
                );
                continue;
            };
            batch.remove(k);
            Self::put_email_at(&mut batch, seq, &email);
            moved += 1;
        }
        // made durable by the caller (Store::open flushes before anything else happens)
        let _ = self.tree.apply_batch(batch);
        Ok(moved)
    }
}

#[async_trait::async_trait]
impl crate::store::api::Emails for SchedulerStore {
    /// Queues an e-mail (admin notifications).
    async fn queue_email(&self, email: &QueuedEmail) -> Result<Written<()>> {
        let mut batch = Batch::default();
        self.put_email(&mut batch, email)?;
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// Up to `limit` queued e-mails of one stage, oldest first, with their keys, a record
    /// that cannot be decoded being an error of its own (the others are read on).
    async fn queued_emails_each(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, Result<QueuedEmail>)>> {
        self.tree
            .scan_prefix(keys::emails(stage))
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                let email = records::email::decode(&k, &v);
                Ok((QueueKey::from_bytes(k.to_vec()), email))
            })
            .collect()
    }

    /// Replaces a queued e-mail if it is still queued: rendered (it moves on to the rendered
    /// stage, keeping its place in the order) or postponed.
    async fn replace_email(&self, k: &QueueKey, email: &QueuedEmail) -> Result<Written<()>> {
        let Some((stage, seq)) = keys::email_entry(k.as_bytes()) else {
            return Err(StoreError::Codec("not a queued e-mail's key".into()));
        };
        let _guard = self.accounts.lock(email.owner);
        if self.tree.get(k.as_bytes())?.is_none() {
            return Ok(Written::unchanged(()));
        }
        let mut batch = Batch::default();
        if stage != email.kind.stage() {
            batch.remove(k.as_bytes());
        }
        Self::put_email_at(&mut batch, seq, email);
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }
}
