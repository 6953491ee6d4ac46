//! Inbox delivery (scheduler.md §7.2): the scheduler stage turns the inbox targets fixed at
//! triggering into pending deliveries; the sender performs them, each with its own
//! `Idempotency-Key`, retrying transient failures with exponential back-off and recording
//! the final outcome on the triggered item.

use super::dispatch::{Bounds, Destination, Dispatcher, Start};
use super::PassError;
use super::{retry_wait, set_aside};
use crate::clock::Clock;
use crate::domain::scheduler::models::{Delivery, Outcome, Trigger, TriggerKind};
use crate::domain::wire::{self, Timestamp};
use crate::domain::worker::Worker;
use crate::metrics::{Channel, Metrics, Outcome as MetricOutcome};
use crate::outbound::{self, Failure};
use crate::store::scheduler::QueueKey;
use crate::store::{Store, Written};
use crate::workers::Workers;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// The scheduler stage for one kind (`email` or inbox): expands every waiting target list;
/// answers how many, once the deliveries made of them are durable.
pub async fn schedule(store: &Store, email: bool) -> Result<usize, PassError> {
    let expanded = store.scheduler.deliveries.expand_targets(email).await?;
    Ok(expanded.durable().await?)
}

/// The destination of an inbox URL: its host (lower case) and port, whatever the path (the
/// whole URL when it has no host: it would not connect anyway). The port counts because a
/// home server's own inbox shares its host (loopback) with whatever else runs there: a
/// stranger's slow service on another port must not take the places of the owner's inbox.
/// A stranger's many ports are bounded by the account's share.
fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| {
            let host = u.host_str()?.to_ascii_lowercase();
            Some(format!("{host}:{}", u.port_or_known_default()?))
        })
        .unwrap_or_else(|| url.to_owned())
}

/// Inbox deliveries in flight at once: overall, per destination host and port (4 slow
/// triggers of one, whatever their paths, hold 4 places) and per account (one account's slow
/// hosts hold at most a quarter of the places: the other 24 stay for everybody else).
const BOUNDS: Bounds = Bounds {
    overall: 32,
    per_host: 4,
    per_account: 8,
};

pub struct InboxSender {
    client: outbound::InboxClient,
    /// Tokens from earlier logins, by trigger.
    tokens: Mutex<HashMap<Uuid, String>>,
    retry_delay: Duration,
    retry_amount: u32,
    /// What is due, and when a postponed delivery may be tried again.
    clock: Clock,
    pub dispatcher: Arc<Dispatcher>,
    /// Counts each attempt's outcome.
    metrics: Arc<Metrics>,
}

impl InboxSender {
    /// The sender of `workers`' table (retries as configured there; a freed place or a
    /// postponed delivery wakes its worker).
    pub fn new(client: outbound::InboxClient, clock: Clock, workers: Arc<Workers>) -> InboxSender {
        InboxSender {
            client,
            tokens: Mutex::new(HashMap::new()),
            retry_delay: workers.retry_delay,
            retry_amount: workers.retry_amount,
            clock,
            dispatcher: Dispatcher::new(BOUNDS, workers, Worker::TriggeredInboxItemSender),
            metrics: Arc::new(Metrics::off()),
        }
    }

    /// This sender, counting its attempts in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> InboxSender {
        self.metrics = metrics;
        self
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

    /// One pass: starts every due pending delivery that is not in flight yet, each as its
    /// own task (as far as the bounds allow); answers how long until the next postponed one.
    pub async fn pass(self: &Arc<Self>, store: &Arc<Store>) -> Result<Option<Duration>, PassError> {
        if let Some(e) = self.dispatcher.take_error() {
            return Err(e);
        }
        let s = &store.scheduler;
        let now = self.clock.now();
        self.dispatcher.pass_begins();
        let pending = s.deliveries.pending_deliveries(usize::MAX).await?;
        let mut next: Option<Timestamp> = None;
        let mut dropped = Vec::new();
        // read (and so, with several processes, claimed) but not started here: given back
        // at the end of the pass, for another process to deliver
        let mut not_started = Vec::new();
        for (k, d) in pending {
            if self.dispatcher.is_running(k.as_bytes()) {
                continue;
            }
            // a delivery (or its trigger) that cannot be decoded is set aside: noted like
            // the requests note it, left pending, read again (and skipped) by each pass
            let Some(d) = set_aside(store, d)? else { continue };
            if d.not_before > now {
                next = Some(next.map_or(d.not_before, |n| n.min(d.not_before)));
                not_started.push(k);
                continue;
            }
            let Some(trigger) = set_aside(store, s.triggers.trigger(d.owner, d.trigger).await)? else {
                continue;
            };
            let Some(trigger) = trigger else {
                // the trigger was deleted meanwhile: the delivery is dropped
                dropped.push(s.deliveries.remove_pending(&k).await?);
                continue;
            };
            let TriggerKind::Inbox { url, .. } = &trigger.kind else {
                continue;
            };
            let target = Destination {
                host: host_of(url),
                account: d.owner,
            };
            // the host failed lately: its deliveries wait for its back-off together
            if let Some(until) = self.dispatcher.rests_until(&target.host, now) {
                next = Some(next.map_or(until, |n| n.min(until)));
                not_started.push(k);
                continue;
            }
            let running = k.as_bytes().to_vec();
            let job = self.clone().deliver(store.clone(), k.clone(), d, trigger);
            if self.dispatcher.start(running, target, job) == Start::Full {
                not_started.push(k);
            }
        }
        Written::all(dropped).durable().await?;
        s.deliveries.release_deliveries(&not_started).await?;
        Ok(next.map(|at| self.clock.until(at)))
    }

    /// Performs one delivery and records its result durably; answers whether it was
    /// postponed (transient failure), so that the worker plans its next wake-up.
    async fn deliver(
        self: Arc<Self>,
        store: Arc<Store>,
        k: QueueKey,
        d: Delivery,
        trigger: Trigger,
    ) -> Result<bool, PassError> {
        let s = &store.scheduler;
        let TriggerKind::Inbox {
            url,
            username,
            access_key,
        } = &trigger.kind
        else {
            return Ok(false);
        };
        let Some(item) = s.triggered(d.owner, d.item).await? else {
            // the triggered item was deleted meanwhile: the delivery is dropped
            let dropped = s.deliveries.remove_pending(&k).await?;
            dropped.durable().await?;
            return Ok(false);
        };
        let data = wire::encode_base64(&item.tickle.content);
        let what = format!("item {} (delivery {}) to the inbox at {url}", d.item, d.id);
        tracing::info!("delivering {what}, attempt {}", d.failures + 1);
        let result = self.attempt(url, username, access_key, trigger.id, d.id, &data).await;
        let host = host_of(url);
        match &result {
            Err(f) if f.transient => {
                let (delay, asked) = (self.retry_delay, f.retry_after);
                self.dispatcher
                    .host_failed(&host, self.clock.now(), |n| retry_wait(delay, n, asked));
            }
            _ => self.dispatcher.host_answered(&host),
        }
        let (postponed, recorded) = match result {
            Ok(id) => {
                self.metrics.delivery(Channel::Inbox, MetricOutcome::Sent);
                tracing::info!("delivered {what}: inbox item {id}");
                (
                    false,
                    s.deliveries.finish_delivery(&k, &d, Outcome::InboxAdded(id)).await,
                )
            }
            Err(f) if f.transient && d.failures < self.retry_amount => {
                let mut later = d.clone();
                later.failures += 1;
                let wait = retry_wait(self.retry_delay, later.failures, f.retry_after);
                later.not_before = self.clock.now().plus(wait);
                self.metrics.delivery(Channel::Inbox, MetricOutcome::Retried);
                tracing::info!(
                    "delivering {what} failed ({}); retry {} of {} in {wait:?}",
                    f.reason,
                    later.failures,
                    self.retry_amount
                );
                (true, s.deliveries.postpone_delivery(&k, &later).await)
            }
            Err(f) => {
                self.metrics.delivery(Channel::Inbox, MetricOutcome::Failed);
                tracing::warn!("delivering {what} failed for good: {}", f.reason);
                (
                    false,
                    s.deliveries
                        .finish_delivery(&k, &d, Outcome::InboxFailed(f.reason))
                        .await,
                )
            }
        };
        let recorded = recorded?;
        recorded.durable().await?;
        Ok(postponed)
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
            match self.client.add_item(url, &token, delivery, data).await {
                // a reused token that is no longer good: log in again (not a retry)
                Err(f) if f.status == Some(401) => self.remember(trigger, None),
                other => return other,
            }
        }
        let token = self.client.login(url, username, key).await?;
        self.remember(trigger, Some(token.clone()));
        self.client.add_item(url, &token, delivery, data).await
    }
}
