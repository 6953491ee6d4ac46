//! E-mail stages (scheduler.md §7.3, §8): converters render queued e-mails (verification,
//! triggered item, admin notification); the emailer sends rendered ones through the
//! configured transport, retrying transient failures with back-off, and records the final
//! outcome of triggered-item e-mails on their triggered item.

use super::dispatch::{Bounds, Destination, Dispatcher, Start};
use super::PassError;
use super::{backoff, set_aside};
use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::email::{EmailKind, QueuedEmail, Stage};
use crate::domain::scheduler::models::Outcome;
use crate::domain::wire::Timestamp;
use crate::domain::worker::Worker;
use crate::mail::{self, Mailer};
use crate::metrics::{Channel, Metrics, Outcome as MetricOutcome};
use crate::store::scheduler::QueueKey;
use crate::store::{ClaimedWork, Store, Written};
use crate::workers::Workers;
use std::sync::Arc;
use std::time::Duration;

/// Which queued e-mails a converter renders.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Converter {
    Verification,
    Triggered,
    AdminNotice,
}

impl Converter {
    /// The stage of the queue it reads.
    fn stage(self) -> Stage {
        match self {
            Converter::Verification => Stage::Verification,
            Converter::Triggered => Stage::Triggered,
            Converter::AdminNotice => Stage::AdminNotice,
        }
    }
}

/// Renders every queued e-mail of the converter's kind; answers how many it rendered, once
/// they are durable.
pub async fn convert(store: &Store, settings: &Settings, which: Converter) -> Result<usize, PassError> {
    let s = &store.scheduler;
    let mut rendered = 0;
    let mut written = Vec::new();
    let queued = s.emails.queued_emails_each(which.stage(), usize::MAX).await?;
    for (k, email) in queued {
        // an e-mail (or its triggered item) that cannot be decoded is set aside: noted like
        // the requests note it, left queued, read again (and skipped) by each pass
        let Some(mut email) = set_aside(store, email)? else {
            continue;
        };
        let (message, delivery) = match (&email.kind, which) {
            (EmailKind::Verification { to, key }, Converter::Verification) => {
                let Some(trigger) = email.trigger else { continue };
                (mail::verification(settings, to, trigger, key), None)
            }
            (EmailKind::Triggered { delivery, to }, Converter::Triggered) => {
                let Some(item) = set_aside(store, s.triggered(delivery.owner, delivery.item).await)? else {
                    continue;
                };
                match item {
                    Some(item) => (
                        mail::triggered(settings, to, &item.tickle.content),
                        Some(delivery.clone()),
                    ),
                    None => {
                        written.push(s.deliveries.remove_pending(&k).await?);
                        continue;
                    }
                }
            }
            (EmailKind::AdminNotice { worker, error }, Converter::AdminNotice) => {
                let Some(to) = &settings.admin_email else { continue };
                (mail::admin_notice(to, worker, error), None)
            }
            _ => continue,
        };
        // claimed as it is written: another process may have taken it meanwhile (then it
        // renders it; a claim here is never left behind by a `continue`)
        if !s.emails.claim_email(&k).await? {
            continue;
        }
        email.kind = EmailKind::Rendered { message, delivery };
        written.push(s.emails.replace_email(&k, &email).await?);
        rendered += 1;
    }
    Written::all(written).durable().await?;
    Ok(rendered)
}

/// E-mails sent at once: overall, per recipient domain and per account (so that one
/// account's e-mails to slow mail servers leave places for everybody else's).
const BOUNDS: Bounds = Bounds {
    overall: 8,
    per_host: 4,
    per_account: 4,
};

/// The emailer: sends rendered e-mails, each as its own task.
pub struct Emailer {
    mailer: Arc<Mailer>,
    retry_delay: Duration,
    retry_amount: u32,
    /// What is due, and when a postponed e-mail may be tried again.
    clock: Clock,
    pub dispatcher: Arc<Dispatcher>,
    /// Counts each attempt's outcome.
    metrics: Arc<Metrics>,
}

/// The domain of an address (where a slow mail exchange would hold up its messages).
fn domain(address: &str) -> String {
    address.rsplit_once('@').map_or("", |(_, d)| d).to_ascii_lowercase()
}

impl Emailer {
    /// The emailer of `workers`' table (retries as configured there; a freed place or a
    /// postponed e-mail wakes its worker).
    pub fn new(mailer: Arc<Mailer>, clock: Clock, workers: Arc<Workers>) -> Emailer {
        Emailer {
            mailer,
            retry_delay: workers.retry_delay,
            retry_amount: workers.retry_amount,
            clock,
            dispatcher: Dispatcher::new(BOUNDS, workers, Worker::Emailer),
            metrics: Arc::new(Metrics::off()),
        }
    }

    /// This emailer, counting its attempts in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Emailer {
        self.metrics = metrics;
        self
    }

    /// One emailer pass: starts sending every rendered e-mail that is due and not in flight
    /// yet, each as its own task; answers how long until the next postponed one.
    pub async fn pass(self: &Arc<Self>, store: &Arc<Store>) -> Result<Option<Duration>, PassError> {
        if let Some(e) = self.dispatcher.take_error() {
            return Err(e);
        }
        let now = self.clock.now();
        self.dispatcher.pass_begins();
        let queued = store
            .scheduler
            .emails
            .queued_emails_each(Stage::Rendered, usize::MAX)
            .await?;
        let mut next: Option<Timestamp> = None;
        // claimed but not started after all: given back at the end of the pass, for another
        // process to send
        let mut not_started = Vec::new();
        for (k, email) in queued {
            let Some(email) = set_aside(store, email)? else {
                continue;
            };
            let EmailKind::Rendered { message, .. } = &email.kind else {
                continue;
            };
            if self.dispatcher.is_running(k.as_bytes()) {
                continue;
            }
            if email.not_before > now {
                next = Some(next.map_or(email.not_before, |n| n.min(email.not_before)));
                continue;
            }
            let target = Destination {
                host: domain(&message.to),
                account: email.owner,
                own: false,
            };
            // the domain failed lately: its e-mails wait for its back-off together
            if let Some(until) = self.dispatcher.rests_until(&target.host, now) {
                next = Some(next.map_or(until, |n| n.min(until)));
                continue;
            }
            // claimed only when its sending starts: a pass holds what it works on, no more
            if !self.dispatcher.has_place(&target) || !store.scheduler.emails.claim_email(&k).await? {
                continue;
            }
            let running = k.as_bytes().to_vec();
            let job = self.clone().send_one(store.clone(), k.clone(), email);
            if self.dispatcher.start(running, target, job) == Start::Full {
                not_started.push(k);
            }
        }
        store.scheduler.emails.release_emails(&not_started).await?;
        let next = next.map(|at| self.clock.until(at));
        Ok(super::until_claims_end(store, ClaimedWork::Emails, next).await)
    }

    /// Sends one e-mail and records the result durably; answers whether it was postponed.
    async fn send_one(self: Arc<Self>, store: Arc<Store>, k: QueueKey, email: QueuedEmail) -> Result<bool, PassError> {
        let s = &store.scheduler;
        let EmailKind::Rendered { message, delivery } = &email.kind else {
            return Ok(false);
        };
        // names the e-mail without its text (a verification e-mail carries a key)
        let what = match (delivery, email.trigger) {
            (Some(d), _) => format!("item {} (delivery {}) by e-mail to {}", d.item, d.id, message.to),
            (None, Some(trigger)) => format!("the verification e-mail of trigger {trigger} to {}", message.to),
            (None, None) => format!("the admin notification to {}", message.to),
        };
        tracing::info!("sending {what}, attempt {}", email.failures + 1);
        let result = self.mailer.send(message).await;
        let to_domain = domain(&message.to);
        match &result {
            Err(f) if f.transient => {
                let delay = self.retry_delay;
                self.dispatcher
                    .host_failed(&to_domain, self.clock.now(), |n| backoff(delay, n));
            }
            _ => self.dispatcher.host_answered(&to_domain),
        }
        let failure = match result {
            Ok(()) => {
                self.metrics.delivery(Channel::Email, MetricOutcome::Sent);
                tracing::info!("sent {what}");
                None
            }
            Err(f) if f.transient && email.failures < self.retry_amount => {
                let mut later = email.clone();
                later.failures += 1;
                let wait = backoff(self.retry_delay, later.failures);
                later.not_before = self.clock.now().plus(wait);
                self.metrics.delivery(Channel::Email, MetricOutcome::Retried);
                tracing::info!(
                    "sending {what} failed ({}); retry {} of {} in {wait:?}",
                    f.reason,
                    later.failures,
                    self.retry_amount
                );
                let postponed = s.emails.replace_email(&k, &later).await?;
                postponed.durable().await?;
                return Ok(true);
            }
            Err(f) => {
                self.metrics.delivery(Channel::Email, MetricOutcome::Failed);
                tracing::warn!("sending {what} failed for good: {}", f.reason);
                Some(f.reason)
            }
        };
        let recorded = match (delivery, failure) {
            (Some(d), None) => s.deliveries.finish_delivery(&k, d, Outcome::EmailSent),
            (Some(d), Some(reason)) => s.deliveries.finish_delivery(&k, d, Outcome::EmailFailed(reason)),
            (None, _) => s.deliveries.remove_pending(&k),
        }
        .await?;
        recorded.durable().await?;
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    /// An admin notification is rendered for `--admin-email` and sent to the outbox.
    #[tokio::test]
    async fn admin_notifications_are_rendered_and_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut settings = Settings::with_data_dir(dir.path());
        settings.admin_email = Some("root@example.org".into());
        let store = Store::open(dir.path()).unwrap();
        let notice = EmailKind::AdminNotice {
            worker: "emailer".into(),
            error: "disk on fire".into(),
        };
        let queued = store
            .scheduler
            .emails
            .queue_email(&QueuedEmail::new(uuid::Uuid::nil(), None, notice))
            .await;
        queued.unwrap().durable().await.unwrap();
        // other converters leave it alone
        assert_eq!(convert(&store, &settings, Converter::Verification).await.unwrap(), 0);
        assert_eq!(convert(&store, &settings, Converter::AdminNotice).await.unwrap(), 1);
        assert!(store
            .scheduler
            .emails
            .queued_emails(Stage::AdminNotice, 10)
            .await
            .unwrap()
            .is_empty());
        let queued = store.scheduler.emails.queued_emails(Stage::Rendered, 10).await.unwrap();
        let EmailKind::Rendered { message, delivery } = &queued[0].1.kind else {
            panic!("not rendered: {:?}", queued[0].1.kind);
        };
        assert_eq!(message.to, "root@example.org");
        assert_eq!(message.subject, "Pigeonhole admin notification");
        assert!(message.text.contains("emailer") && message.text.contains("disk on fire"));
        assert!(delivery.is_none());

        let mailer = Arc::new(Mailer::new(&settings).unwrap());
        let workers = Arc::new(Workers::new(&settings, |_| true));
        let emailer = Arc::new(Emailer::new(mailer, Clock::real(), workers));
        assert_eq!(emailer.pass(&store).await.unwrap(), None);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !store
            .scheduler
            .emails
            .queued_emails(Stage::Rendered, 10)
            .await
            .unwrap()
            .is_empty()
        {
            assert!(std::time::Instant::now() < deadline, "not sent and removed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let files: Vec<_> = std::fs::read_dir(dir.path().join("outbox"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with(".eml") && name.len() == "20261123T205959123456Z-".len() + 36 + 4,
            "{name}"
        );
        let raw = std::fs::read_to_string(&files[0]).unwrap();
        assert!(raw.contains("Subject: Pigeonhole admin notification"), "{raw}");
        assert!(raw.contains("To: root@example.org"), "{raw}");
        assert!(raw.contains("From: Pigeonhole <pigeonhole@localhost>"), "{raw}");
    }
}
