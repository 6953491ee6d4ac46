//! Deliveries over HTTP (scheduler.md §7.2, §7.6, §7.7): the scheduler stage turns the
//! targets fixed at triggering (inbox services, push subscriptions, webhooks) into pending
//! deliveries; the sender performs them, each with its own `Idempotency-Key` (a push
//! message's `Topic`), under one set of bounds per destination and per account, retrying
//! transient failures with exponential back-off and recording the final outcome on the
//! triggered item.

use super::dispatch::{Bounds, Destination, Dispatcher, Start};
use super::PassError;
use super::{retry_wait, set_aside};
use crate::clock::Clock;
use crate::context::Context;
use crate::domain::scheduler::models::{Channel, Delivery, Outcome, Trigger, TriggerKind};
use crate::domain::scheduler::push::{endpoint_host, PushSubscription, Reminder, WebhookFormat};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::{self, Timestamp};
use crate::domain::worker::Worker;
use crate::metrics::{Metrics, Outcome as MetricOutcome};
use crate::outbound::{self, Failure};
use crate::store::scheduler::QueueKey;
use crate::store::{ClaimedWork, Store, Written};
use crate::webpush::{self, VapidKey};
use crate::workers::Workers;
use reqwest::header::{HeaderMap, HeaderValue};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// Target lists expanded in one round of the scheduler stage.
const EXPAND_ROUND: usize = 64;

/// The scheduler stage for one kind (`email` or inbox): expands every waiting target list,
/// in rounds, calling `round` once the deliveries of a round that expanded some are durable
/// (the sender starts on them while the stage goes on); answers how many.
pub async fn schedule(store: &Store, email: bool, round: &(dyn Fn() + Sync)) -> Result<usize, PassError> {
    let mut total = 0;
    loop {
        let expanded = store.scheduler.deliveries.expand_targets(email, EXPAND_ROUND).await?;
        let n = expanded.durable().await?;
        total += n;
        if n > 0 {
            round();
        }
        if n < EXPAND_ROUND {
            return Ok(total);
        }
    }
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

/// Where a delivery to a trigger of `kind` goes over HTTP (`None`: it goes by e-mail).
fn destination(kind: &TriggerKind) -> Option<&str> {
    match kind {
        TriggerKind::Inbox { url, .. } | TriggerKind::Webhook { url, .. } => Some(url),
        TriggerKind::Push { subscription, .. } => Some(&subscription.endpoint),
        TriggerKind::Email { .. } => None,
    }
}

/// A push service's or webhook's answer as a delivery's result (§7.6–§7.7): 2xx is a
/// success; 408, 429 (with its `Retry-After`), 5xx and no answer at all are transient;
/// anything else (other 4xx, a redirect) is permanent. What the owner reads does not tell
/// the services of the LAN apart (no oracle: a stranger's trigger may point there): no
/// answer at all and any answer of a loopback or private address read the same
/// [`not_delivered`] text; the cause goes to the operator's log. A public address's status
/// is shown (it is the owner's own target: an ntfy topic's 403 says what to fix).
fn answered(what: &str, url: &str, answer: Result<outbound::Answer, Failure>) -> Result<(), Failure> {
    let host = endpoint_host(url);
    let answer = match answer {
        Ok(answer) => answer,
        Err(mut f) => {
            if f.transient {
                f.shown = Some(outbound::withheld(what, url));
            }
            return Err(f);
        }
    };
    let status = answer.status;
    if status.is_success() {
        return Ok(());
    }
    let mut reason = format!("{what} {host} answered {status}");
    if status.is_redirection() {
        reason.push_str(" (redirects are not followed)");
    }
    let shown = answer.local.then(|| outbound::withheld(what, url));
    Err(Failure {
        transient: status.is_server_error() || status == 408 || status == 429,
        reason,
        status: Some(status.as_u16()),
        retry_after: answer.retry_after,
        shown,
    })
}

/// Inbox deliveries in flight at once: overall, per destination host and port (4 slow
/// triggers of one, whatever their paths, hold 4 places) and per account (one account's slow
/// hosts hold at most a quarter of the places: the other 24 stay for everybody else).
const BOUNDS: Bounds = Bounds {
    overall: 32,
    per_host: 4,
    per_account: 8,
};

/// What push messages are signed with and point to.
pub struct PushSettings {
    /// The server's VAPID key pair.
    pub key: Arc<VapidKey>,
    /// VAPID's `sub`: the operator's contact (`mailto:` or an https URL).
    pub subject: String,
    /// The scheduler's page of triggered items, for the message's `url`.
    pub page: Option<String>,
}

impl PushSettings {
    /// The settings of `ctx`: its key; its link base as the contact when it is an https
    /// URL, else `mailto:` the sender address of e-mails (RFC 8292 §2.1); the triggered
    /// page under the link base e-mails use.
    pub fn of(ctx: &Context) -> PushSettings {
        let (_, base) = crate::mail::web_host_and_base(&ctx.settings);
        let subject = if base.starts_with("https://") {
            base.clone()
        } else {
            format!("mailto:{}", ctx.settings.email_from)
        };
        PushSettings {
            key: ctx.tokens.push_key().clone(),
            subject,
            page: Some(format!("{base}/app/triggered")),
        }
    }
}

pub struct InboxSender {
    client: outbound::InboxClient,
    push: PushSettings,
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
    pub fn new(client: outbound::InboxClient, push: PushSettings, clock: Clock, workers: Arc<Workers>) -> InboxSender {
        InboxSender {
            client,
            push,
            tokens: Mutex::new(HashMap::new()),
            retry_delay: workers.retry_delay,
            retry_amount: workers.retry_amount,
            clock,
            dispatcher: Dispatcher::new(BOUNDS, workers, Worker::TriggeredInboxItemSender),
            metrics: Arc::new(Metrics::off()),
        }
    }

    /// This sender, delivering to the inbox service of this process at `port` (when it
    /// runs one) under the bounds of its own inbox ([`Destination::own`]).
    pub fn with_own_inbox(mut self, port: Option<u16>) -> InboxSender {
        self.client = self.client.with_own_inbox(port);
        self
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
    /// own task (as far as the bounds allow), claiming each as it starts it (several
    /// processes on one database: what it does not start stays free for the others);
    /// answers how long until the next postponed one, or until a claim of another process
    /// runs out, whichever is sooner.
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
        // claimed but not started after all: given back at the end of the pass, for another
        // process to deliver
        let mut not_started = Vec::new();
        let mut triggers: std::collections::HashMap<(uuid::Uuid, uuid::Uuid), Option<Trigger>> =
            std::collections::HashMap::new();
        for (k, d) in pending {
            if self.dispatcher.is_running(k.as_bytes()) {
                continue;
            }
            // a delivery (or its trigger) that cannot be decoded is set aside: noted like
            // the requests note it, left pending, read again (and skipped) by each pass
            let Some(d) = set_aside(store, d)? else { continue };
            if d.not_before > now {
                next = Some(next.map_or(d.not_before, |n| n.min(d.not_before)));
                continue;
            }
            // read once per pass: a burst of one account's reminders shares its triggers
            let trigger = match triggers.get(&(d.owner, d.trigger)) {
                Some(known) => known.clone(),
                None => {
                    let Some(read) = set_aside(store, s.triggers.trigger(d.owner, d.trigger).await)? else {
                        continue;
                    };
                    triggers.insert((d.owner, d.trigger), read.clone());
                    read
                }
            };
            let Some(trigger) = trigger else {
                // the trigger was deleted meanwhile: the delivery is dropped
                dropped.push(s.deliveries.remove_pending(&k).await?);
                continue;
            };
            let Some(url) = destination(&trigger.kind) else {
                continue;
            };
            let target = Destination {
                host: host_of(url),
                account: d.owner,
                own: matches!(trigger.kind, TriggerKind::Inbox { .. }) && self.client.is_own_inbox(url),
            };
            // the host failed lately: its deliveries wait for its back-off together
            if let Some(until) = self.dispatcher.rests_until(&target.host, now) {
                next = Some(next.map_or(until, |n| n.min(until)));
                continue;
            }
            // claimed only when it starts: a pass holds what it works on, no more
            if !self.dispatcher.has_place(&target) || !s.deliveries.claim_delivery(&k).await? {
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
        let next = next.map(|at| self.clock.until(at));
        Ok(super::until_claims_end(store, ClaimedWork::Deliveries, next).await)
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
        let Some(url) = destination(&trigger.kind) else {
            return Ok(false);
        };
        let Some(item) = s.triggered(d.owner, d.item).await? else {
            // the triggered item was deleted meanwhile: the delivery is dropped
            let dropped = s.deliveries.remove_pending(&k).await?;
            dropped.durable().await?;
            return Ok(false);
        };
        let channel = trigger.kind.channel();
        let what = format!("item {} (delivery {}) to the {} at {url}", d.item, d.id, channel.name());
        tracing::info!("delivering {what}, attempt {}", d.failures + 1);
        let result = match &trigger.kind {
            TriggerKind::Inbox {
                username, access_key, ..
            } => {
                let data = wire::encode_base64(&item.tickle.content);
                self.attempt(url, username, access_key, trigger.id, d.id, &data)
                    .await
                    .map(Outcome::InboxAdded)
            }
            TriggerKind::Push { subscription, .. } => {
                let due = schedule::due(&item.tickle, &Zone::of(&s.settings(d.owner).await?));
                let reminder = Reminder {
                    content: &item.tickle.content,
                    item: item.id,
                    due,
                    url: self.push.page.as_deref(),
                };
                self.push_message(subscription, &reminder, d.id)
                    .await
                    .map(|()| Outcome::PushSent)
            }
            TriggerKind::Webhook { url, format } => {
                let due = schedule::due(&item.tickle, &Zone::of(&s.settings(d.owner).await?));
                let reminder = Reminder {
                    content: &item.tickle.content,
                    item: item.id,
                    due,
                    url: None,
                };
                self.webhook(url, *format, &reminder, d.id)
                    .await
                    .map(|()| Outcome::WebhookSent)
            }
            TriggerKind::Email { .. } => return Ok(false),
        };
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
            Ok(outcome) => {
                self.metrics.delivery(channel, MetricOutcome::Sent);
                tracing::info!("delivered {what}: {outcome:?}");
                (false, s.deliveries.finish_delivery(&k, &d, outcome).await)
            }
            Err(f) if f.transient && d.failures < self.retry_amount => {
                let mut later = d.clone();
                later.failures += 1;
                let wait = retry_wait(self.retry_delay, later.failures, f.retry_after);
                later.not_before = self.clock.now().plus(wait);
                self.metrics.delivery(channel, MetricOutcome::Retried);
                tracing::info!(
                    "delivering {what} failed ({}); retry {} of {} in {wait:?}",
                    f.reason,
                    later.failures,
                    self.retry_amount
                );
                (true, s.deliveries.postpone_delivery(&k, &later).await)
            }
            Err(f) => {
                self.metrics.delivery(channel, MetricOutcome::Failed);
                tracing::warn!("delivering {what} failed for good: {}", f.reason);
                let gone = channel == Channel::Push && matches!(f.status, Some(404 | 410));
                let shown = f.shown.unwrap_or(f.reason);
                let finished = s
                    .deliveries
                    .finish_delivery(&k, &d, Outcome::failed(channel, shown))
                    .await;
                if gone {
                    // the subscription is gone: no further deliveries until it is renewed
                    s.triggers
                        .update_trigger(d.owner, trigger.id, &mut |mut t| {
                            let TriggerKind::Push { expired, .. } = &mut t.kind else {
                                return None;
                            };
                            *expired = true;
                            Some((t, None))
                        })
                        .await?
                        .durable()
                        .await?;
                    tracing::info!("the push subscription of trigger {} is gone: it is expired", trigger.id);
                }
                (false, finished)
            }
        };
        let recorded = recorded?;
        recorded.durable().await?;
        Ok(postponed)
    }

    /// One push message (§7.6): the reminder encrypted for the subscription (RFC 8291),
    /// signed for its push service (VAPID), with the delivery as its `Topic` (a retried
    /// message replaces its earlier copy there).
    async fn push_message(
        &self,
        subscription: &PushSubscription,
        reminder: &Reminder<'_>,
        delivery: Uuid,
    ) -> Result<(), Failure> {
        let endpoint = &subscription.endpoint;
        let made = webpush::encrypt(&reminder.push_message(), subscription).and_then(|body| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let authorization = self.push.key.authorization(endpoint, &self.push.subject, now)?;
            Ok((body, authorization))
        });
        let (body, authorization) =
            made.map_err(|e| Failure::permanent(format!("the push message could not be made: {e}")))?;
        let mut headers = HeaderMap::new();
        let mut put = |name: &'static str, value: &str| {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        };
        put("content-encoding", "aes128gcm");
        put("content-type", "application/octet-stream");
        put("ttl", "86400");
        put("urgency", "high");
        put("topic", &delivery.simple().to_string());
        put("authorization", &authorization);
        let answer = self.client.post(endpoint, headers, body).await;
        answered("push service", endpoint, answer)
    }

    /// One webhook call (§7.7): the content as text (ntfy) or as JSON (Gotify, bridges).
    async fn webhook(
        &self,
        url: &str,
        format: WebhookFormat,
        reminder: &Reminder<'_>,
        delivery: Uuid,
    ) -> Result<(), Failure> {
        let mut headers = HeaderMap::new();
        let content_type = match format {
            WebhookFormat::Text => "text/plain; charset=utf-8",
            WebhookFormat::Json => "application/json",
        };
        headers.insert("content-type", HeaderValue::from_static(content_type));
        headers.insert("title", HeaderValue::from_static(Reminder::title()));
        if let Ok(v) = HeaderValue::from_str(&delivery.to_string()) {
            headers.insert("idempotency-key", v);
        }
        let answer = self.client.post(url, headers, reminder.webhook_body(format)).await;
        answered("webhook", url, answer)
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
