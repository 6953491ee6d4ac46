//! The e-mail queue: e-mails waiting for their converter, and rendered ones waiting for the
//! emailer.

use super::SchedulerStore;
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::store::keys;
use crate::store::records;
use crate::store::writer::Batch;
use crate::store::Result;
use uuid::Uuid;

impl SchedulerStore {
    /// Adds the queueing of `email` to `batch`.
    pub(super) fn put_email(&self, batch: &mut Batch, email: &QueuedEmail) -> Result<()> {
        batch.insert(keys::email(self.seq()?), records::email::encode(email));
        Ok(())
    }

    /// Queues an e-mail (admin notifications).
    pub fn queue_email(&self, email: &QueuedEmail) -> Result<()> {
        let mut batch = Batch::default();
        self.put_email(&mut batch, email)?;
        self.tree.apply_batch(batch);
        Ok(())
    }

    /// Up to `limit` queued e-mails, oldest first, with their keys.
    pub fn queued_emails(&self, limit: usize) -> Result<Vec<(Vec<u8>, QueuedEmail)>> {
        self.tree
            .scan_prefix(keys::emails())
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                Ok((k.to_vec(), records::email::decode(&v)?))
            })
            .collect()
    }

    /// Replaces a queued e-mail (rendered, or postponed) if it is still queued.
    pub fn replace_email(&self, k: &[u8], email: &QueuedEmail) -> Result<()> {
        let _guard = self.accounts.lock(email.owner);
        if self.tree.get(k)?.is_some() {
            self.tree.insert(k, records::email::encode(email));
        }
        Ok(())
    }

    /// Adds to `batch` the removal of the queued e-mails of `owner` for which
    /// `drop(triggered item, trigger)` holds.
    pub(super) fn drop_emails(
        &self,
        batch: &mut Batch,
        owner: Uuid,
        drop: impl Fn(Option<Uuid>, Option<Uuid>) -> bool,
    ) -> Result<()> {
        for (k, email) in self.queued_emails(usize::MAX)? {
            let item = match &email.kind {
                EmailKind::Triggered { delivery, .. } => Some(delivery.item),
                EmailKind::Rendered { delivery: Some(d), .. } => Some(d.item),
                _ => None,
            };
            if email.owner == owner && drop(item, email.trigger) {
                batch.remove(k);
            }
        }
        Ok(())
    }
}
