//! Payment events: which the fetcher handled (`E`), and which failed and wait for the
//! retrier (`F`, the event's JSON).

use super::SchedulerStore;
use crate::store::sled::keys;
use crate::store::sled::writer::Batch;
use crate::store::{Result, Written};

impl SchedulerStore {}

#[async_trait::async_trait]
impl crate::store::api::PaymentEvents for SchedulerStore {
    /// Whether the payment event was handled (successfully or queued for the retrier).
    async fn event_seen(&self, id: &str) -> Result<bool> {
        Ok(self.tree.contains_key(keys::event_handled(id))? || self.tree.contains_key(keys::event_failed(id))?)
    }

    /// Marks a payment event handled; `failed` keeps it (JSON) for the retrier instead.
    async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<Written<()>> {
        let mut batch = Batch::default();
        match failed {
            Some(event) => batch.insert(keys::event_failed(id), event),
            None => {
                batch.remove(keys::event_failed(id));
                batch.insert(keys::event_handled(id), &[] as &[u8]);
            }
        }
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// Payment events whose handling failed (JSON).
    async fn failed_events(&self) -> Result<Vec<Vec<u8>>> {
        self.tree
            .scan_prefix(keys::failed_events())
            .map(|kv| Ok(kv?.1.to_vec()))
            .collect()
    }
}
