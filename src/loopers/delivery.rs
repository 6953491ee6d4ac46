//! Inbox delivery (scheduler.md §7.2): the scheduler stage turns the inbox targets fixed at
//! triggering into pending deliveries; the sender performs them, each with its own
//! `Idempotency-Key`, retrying transient failures with exponential back-off and recording
//! the final outcome on the triggered item.

use super::backoff;
use crate::scheduler::inbox_client::{self, Failure};
use crate::scheduler::models::{Delivery, Outcome, TriggerKind};
use crate::store::Store;
use crate::wire::{self, Timestamp};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use uuid::Uuid;

/// How many deliveries the sender performs at once.
const CONCURRENCY: usize = 32;

/// The scheduler stage for one kind (`email` or inbox): expands every waiting target list.
pub async fn schedule(store: &Store, email: bool) -> Result<usize, String> {
    let mut total = 0;
    loop {
        let n = store.scheduler.expand_targets(email, 256).map_err(|e| e.to_string())?;
        total += n;
        if n < 256 {
            break;
        }
    }
    if total > 0 {
        store.durable().await.map_err(|e| e.to_string())?;
    }
    Ok(total)
}

pub struct InboxSender {
    client: reqwest::Client,
    /// Tokens from earlier logins, by trigger.
    tokens: Mutex<HashMap<Uuid, String>>,
    retry_delay: Duration,
    retry_amount: u32,
}

impl InboxSender {
    pub fn new(client: reqwest::Client, retry_delay: Duration, retry_amount: u32) -> InboxSender {
        InboxSender {
            client,
            tokens: Mutex::new(HashMap::new()),
            retry_delay,
            retry_amount,
        }
    }

    fn cached(&self, trigger: Uuid) -> Option<String> {
        self.tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&trigger)
            .cloned()
    }

    fn remember(&self, trigger: Uuid, token: Option<String>) {
        let mut map = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        match token {
            Some(t) => map.insert(trigger, t),
            None => map.remove(&trigger),
        };
    }

    /// One pass: performs the pending deliveries that are due; answers how long until the
    /// next postponed one.
    pub async fn pass(&self, store: &Store) -> Result<Option<Duration>, String> {
        let now = Timestamp::now();
        let pending = store
            .scheduler
            .pending_deliveries(usize::MAX)
            .map_err(|e| e.to_string())?;
        let (due, waiting): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, d)| d.not_before <= now);
        let mut next = waiting.iter().map(|(_, d)| d.not_before).min();
        for chunk in due.chunks(CONCURRENCY) {
            let results = futures_util::future::join_all(chunk.iter().map(|(k, d)| self.deliver(store, k, d))).await;
            for r in results {
                if let Some(at) = r? {
                    next = Some(next.map_or(at, |n: Timestamp| n.min(at)));
                }
            }
            store.durable().await.map_err(|e| e.to_string())?;
        }
        Ok(next.map(|at| Duration::from_secs_f64(Timestamp::now().seconds_until(&at).max(0.0))))
    }

    /// Performs one delivery; answers when it is to be tried again (transient failure).
    async fn deliver(&self, store: &Store, k: &[u8], d: &Delivery) -> Result<Option<Timestamp>, String> {
        let s = &store.scheduler;
        let trigger = s.trigger(d.owner, d.trigger).map_err(|e| e.to_string())?;
        let item = s.triggered(d.owner, d.item).map_err(|e| e.to_string())?;
        let (Some(trigger), Some(item)) = (trigger, item) else {
            // trigger or item deleted meanwhile: the delivery is dropped
            s.remove_pending(k).map_err(|e| e.to_string())?;
            return Ok(None);
        };
        let TriggerKind::Inbox {
            url,
            username,
            access_key,
        } = &trigger.kind
        else {
            return Ok(None);
        };
        let data = wire::encode_base64(&item.tickle.content);
        let result = self.attempt(url, username, access_key, trigger.id, d.id, &data).await;
        let outcome = match result {
            Ok(id) => Outcome::InboxAdded(id),
            Err(f) if f.transient && d.failures < self.retry_amount => {
                let mut later = d.clone();
                later.failures += 1;
                let wait = backoff(self.retry_delay, later.failures);
                let at = Timestamp::now().plus(wait);
                later.not_before = at;
                tracing::info!(
                    "delivery {} failed ({}), retry {} in {wait:?}",
                    d.id,
                    f.reason,
                    later.failures
                );
                s.postpone_delivery(k, &later).map_err(|e| e.to_string())?;
                return Ok(Some(at));
            }
            Err(f) => Outcome::InboxFailed(f.reason),
        };
        s.finish_delivery(k, d, outcome).map_err(|e| e.to_string())?;
        Ok(None)
    }

    async fn attempt(
        &self,
        url: &str,
        username: &str,
        key: &str,
        trigger: Uuid,
        delivery: Uuid,
        data: &str,
    ) -> Result<Uuid, Failure> {
        if let Some(token) = self.cached(trigger) {
            match inbox_client::add_item(&self.client, url, &token, delivery, data).await {
                // a reused token that is no longer good: log in again (not a retry)
                Err(f) if f.status == Some(401) => self.remember(trigger, None),
                other => return other,
            }
        }
        let token = inbox_client::login(&self.client, url, username, key).await?;
        self.remember(trigger, Some(token.clone()));
        inbox_client::add_item(&self.client, url, &token, delivery, data).await
    }
}
