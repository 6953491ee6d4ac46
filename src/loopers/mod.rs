//! Background workers ("loopers", scheduler.md §9). Each is a small task with a trigger
//! (woken by a [`Notify`] when there is new work, and at least every `--looper-period`), a
//! live status for `GET /loopers`, and a retry policy: a failed run is retried after
//! `--looper-retry-delay-us`; after `--looper-retry-amount` consecutive failures the worker
//! stops, reports `LooperStatusErrored` and an admin notification is created.

pub mod delivery;
pub mod dispatch;
pub mod email;
pub mod payments;
pub mod triggerer;

use crate::config::{Settings, LOOPER_NAMES};
use crate::store::scheduler::{EmailKind, QueuedEmail};
use crate::store::Store;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Configured off (by `--disable-looper`, or not applicable to this configuration).
    Disabled,
    /// Enabled, waiting for its task to start.
    Starting,
    Running,
    Errored(String),
}

/// One worker's entry.
pub struct Looper {
    pub name: &'static str,
    status: Mutex<Status>,
    /// Wakes the worker early (new work).
    pub wake: Notify,
}

impl Looper {
    pub fn status(&self) -> Status {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, s: Status) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    pub fn enabled(&self) -> bool {
        self.status() != Status::Disabled
    }
}

/// All ten workers and their common settings.
pub struct Loopers {
    pub period: Duration,
    pub retry_delay: Duration,
    pub retry_amount: u32,
    period_secs: u64,
    retry_delay_us: u64,
    all: Vec<Looper>,
}

impl Loopers {
    pub fn new(settings: &Settings) -> Loopers {
        let all = LOOPER_NAMES
            .iter()
            .map(|&name| {
                let applicable = match name {
                    "adminNotificationEmailConverter" => settings.admin_email.is_some(),
                    "paymentsEventsFetcher" | "paymentsEventsRetrier" => {
                        settings.payment_secret_key.is_some() && settings.payment_plan.is_some()
                    }
                    _ => true,
                };
                let on = applicable && !settings.disabled_loopers.iter().any(|d| d == name);
                Looper {
                    name,
                    status: Mutex::new(if on { Status::Starting } else { Status::Disabled }),
                    wake: Notify::new(),
                }
            })
            .collect();
        Loopers {
            period: Duration::from_secs(settings.looper_period),
            retry_delay: Duration::from_micros(settings.looper_retry_delay_us),
            retry_amount: settings.looper_retry_amount,
            period_secs: settings.looper_period,
            retry_delay_us: settings.looper_retry_delay_us,
            all,
        }
    }

    /// The entry of a worker by its `--disable-looper` name.
    pub fn get(&self, name: &str) -> &Looper {
        // LOOPER_NAMES is the list `all` was built from, and callers pass names from it.
        self.all.iter().find(|l| l.name == name).expect("a known worker name")
    }

    pub fn wake(&self, name: &str) {
        self.get(name).wake.notify_one();
    }

    /// `GET /loopers`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        for l in &self.all {
            let (status, on) = match l.status() {
                Status::Disabled => (json!({"tag": "LooperStatusDisabled"}), false),
                Status::Starting | Status::Running => (json!({"tag": "LooperStatusRunning"}), true),
                Status::Errored(e) => (json!({"tag": "LooperStatusErrored", "contents": e}), true),
            };
            let value = if on {
                json!({"looperInfoStatus": status, "looperInfoPeriod": self.period_secs,
                       "looperInfoRetryDelay": self.retry_delay_us, "looperInfoRetryAmount": self.retry_amount})
            } else {
                json!({"looperInfoStatus": status, "looperInfoPeriod": null,
                       "looperInfoRetryDelay": null, "looperInfoRetryAmount": null})
            };
            out.insert(format!("{}LooperInfo", l.name), value);
        }
        Value::Object(out)
    }

    /// Runs worker `name` until `stop` turns true: `run` does one pass and answers how long
    /// the worker may sleep at most before the next (`None`: the period). Failed passes are
    /// retried after the retry delay; too many in a row stop the worker as errored, and
    /// `on_error` is told (admin notification).
    pub async fn run<F, Fut>(
        self: Arc<Self>,
        name: &'static str,
        mut stop: watch::Receiver<bool>,
        on_error: impl Fn(&str, &str),
        mut run: F,
    ) where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Option<Duration>, String>>,
    {
        let me = self.get(name);
        if !me.enabled() {
            return;
        }
        me.set(Status::Running);
        let mut failures = 0u32;
        while !*stop.borrow() {
            // On shutdown a pass in flight is abandoned: its results are written atomically
            // only when a step completes, so what it had not finished stays pending.
            let outcome = tokio::select! {
                r = run() => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            let sleep = match outcome {
                Ok(next) => {
                    failures = 0;
                    next.map_or(self.period, |n| n.min(self.period))
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!("worker {name} failed ({failures} in a row): {e}");
                    if failures > self.retry_amount {
                        me.set(Status::Errored(e.clone()));
                        on_error(name, &e);
                        return;
                    }
                    self.retry_delay
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = me.wake.notified() => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        }
    }
}

/// The longest wait before an automatic retry (scheduler.md §7.4).
const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// The automatic retry back-off of scheduler.md §7.4: before retry k, wait
/// `delay` × 2^(k−1), at most 10 minutes.
pub fn backoff(delay: Duration, retry: u32) -> Duration {
    let factor = 2u32.saturating_pow(retry.saturating_sub(1).min(30));
    delay.saturating_mul(factor).min(LONGEST_WAIT)
}

/// The wait before retry k: the back-off, or longer when the target asked for a longer
/// wait (`Retry-After`), at most 10 minutes.
pub fn retry_wait(delay: Duration, retry: u32, asked: Option<Duration>) -> Duration {
    backoff(delay, retry).max(asked.unwrap_or_default()).min(LONGEST_WAIT)
}

/// Spawns every enabled worker; they stop when `stop` turns true.
type PassFuture = std::pin::Pin<Box<dyn Future<Output = Result<Option<Duration>, String>> + Send>>;

pub fn start(
    loopers: Arc<Loopers>,
    store: Arc<Store>,
    settings: Arc<Settings>,
    mailer: crate::mail::Mailer,
    payments: Arc<crate::payments::Payments>,
    http: reqwest::Client,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let notify_admin = {
        let store = store.clone();
        let loopers = loopers.clone();
        let settings = settings.clone();
        move |worker: &str, error: &str| {
            tracing::error!("worker {worker} stopped after repeated failures: {error}");
            if settings.admin_email.is_some() {
                let notice = EmailKind::AdminNotice {
                    worker: worker.to_owned(),
                    error: error.to_owned(),
                };
                match store
                    .scheduler
                    .queue_email(&QueuedEmail::new(uuid::Uuid::nil(), None, notice))
                {
                    Ok(()) => loopers.wake("adminNotificationEmailConverter"),
                    Err(e) => tracing::error!("could not queue the admin notification: {e}"),
                }
            }
        }
    };
    let notify_admin = Arc::new(notify_admin);
    let mailer = Arc::new(mailer);
    let waker = |name: &'static str| {
        let loopers = loopers.clone();
        move || loopers.wake(name)
    };
    let sender = Arc::new(delivery::InboxSender::new(
        http,
        loopers.retry_delay,
        loopers.retry_amount,
        waker("triggeredInboxItemSender"),
    ));
    let emailer = Arc::new(email::Emailer::new(
        mailer,
        loopers.retry_delay,
        loopers.retry_amount,
        waker("emailer"),
    ));
    let mut tasks = Vec::new();
    // Deliveries run as tasks of their own: at shutdown they are abandoned (they stay
    // pending) before the store is flushed.
    for dispatcher in [sender.dispatcher.clone(), emailer.dispatcher.clone()] {
        let mut stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let _ = stop.wait_for(|s| *s).await;
            dispatcher.stop().await;
        }));
    }
    let mut spawn = |name: &'static str, pass: Box<dyn Fn() -> PassFuture + Send + Sync>| {
        let n = notify_admin.clone();
        tasks.push(tokio::spawn(loopers.clone().run(
            name,
            stop.clone(),
            move |w, e| n(w, e),
            pass,
        )));
    };
    let ctx = (loopers.clone(), store.clone(), settings.clone());
    {
        let (l, s, _) = ctx.clone();
        spawn(
            "triggerer",
            Box::new(move || {
                let (l, s) = (l.clone(), s.clone());
                Box::pin(async move {
                    let (count, sleep) = triggerer::pass(&s).await?;
                    if count > 0 {
                        l.wake("triggeredInboxItemScheduler");
                        l.wake("triggeredEmailScheduler");
                    }
                    Ok(sleep)
                })
            }),
        );
    }
    for (name, email, next) in [
        ("triggeredInboxItemScheduler", false, "triggeredInboxItemSender"),
        ("triggeredEmailScheduler", true, "triggeredEmailConverter"),
    ] {
        let (l, s, _) = ctx.clone();
        spawn(
            name,
            Box::new(move || {
                let (l, s) = (l.clone(), s.clone());
                Box::pin(async move {
                    if delivery::schedule(&s, email).await? > 0 {
                        l.wake(next);
                    }
                    Ok(None)
                })
            }),
        );
    }
    {
        let (_, s, _) = ctx.clone();
        let sender = sender.clone();
        spawn(
            "triggeredInboxItemSender",
            Box::new(move || {
                let (s, sender) = (s.clone(), sender.clone());
                Box::pin(async move { sender.pass(&s).await })
            }),
        );
    }
    for (name, which) in [
        ("triggeredEmailConverter", email::Converter::Triggered),
        ("verificationEmailConverter", email::Converter::Verification),
        ("adminNotificationEmailConverter", email::Converter::AdminNotice),
    ] {
        let (l, s, st) = ctx.clone();
        spawn(
            name,
            Box::new(move || {
                let (l, s, st) = (l.clone(), s.clone(), st.clone());
                Box::pin(async move {
                    if email::convert(&s, &st, which).await? > 0 {
                        l.wake("emailer");
                    }
                    Ok(None)
                })
            }),
        );
    }
    {
        let (_, s, _) = ctx.clone();
        let p = payments.clone();
        spawn(
            "paymentsEventsFetcher",
            Box::new(move || {
                let (s, p) = (s.clone(), p.clone());
                Box::pin(async move { payments::fetch(&s, &p).await.map(|()| None) })
            }),
        );
        let (_, s, _) = ctx.clone();
        spawn(
            "paymentsEventsRetrier",
            Box::new(move || {
                let s = s.clone();
                Box::pin(async move { payments::retry(&s).await.map(|()| None) })
            }),
        );
    }
    {
        let (_, s, _) = ctx.clone();
        spawn(
            "emailer",
            Box::new(move || {
                let (s, emailer) = (s.clone(), emailer.clone());
                Box::pin(async move { emailer.pass(&s).await })
            }),
        );
    }
    tasks
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn settings(f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::with_data_dir("/tmp/unused");
        s.looper_period = 1;
        s.looper_retry_delay_us = 1000;
        s.looper_retry_amount = 3;
        f(&mut s);
        s
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let d = Duration::from_millis(100);
        assert_eq!(backoff(d, 1), d);
        assert_eq!(backoff(d, 2), d * 2);
        assert_eq!(backoff(d, 7), d * 64);
        assert_eq!(backoff(d, 40), Duration::from_secs(600));
        let asked = |s| Some(Duration::from_secs(s));
        assert_eq!(retry_wait(d, 1, None), d);
        assert_eq!(retry_wait(d, 1, asked(2)), Duration::from_secs(2));
        assert_eq!(retry_wait(d, 7, asked(2)), d * 64, "the back-off when it is longer");
        assert_eq!(retry_wait(d, 1, asked(86_400)), Duration::from_secs(600), "capped");
    }

    #[test]
    fn statuses_follow_the_configuration() {
        let l = Loopers::new(&settings(|s| s.disabled_loopers = vec!["emailer".into()]));
        let j = l.to_json();
        assert_eq!(
            j["emailerLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusDisabled"
        );
        assert_eq!(j["emailerLooperInfo"]["looperInfoPeriod"], Value::Null);
        assert_eq!(
            j["triggererLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusRunning"
        );
        assert_eq!(j["triggererLooperInfo"]["looperInfoRetryAmount"], 3);
        assert_eq!(
            j["adminNotificationEmailConverterLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusDisabled"
        );
        assert_eq!(
            j["paymentsEventsFetcherLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusDisabled"
        );
        assert_eq!(j.as_object().unwrap().len(), 10);
        let l = Loopers::new(&settings(|s| s.admin_email = Some("root@example.org".into())));
        assert!(l.get("adminNotificationEmailConverter").enabled());
    }

    #[tokio::test]
    async fn repeated_failures_stop_the_worker_and_notify() {
        let loopers = Arc::new(Loopers::new(&settings(|_| {})));
        let (_stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let notified = Arc::new(Mutex::new(Vec::new()));
        let (r, n) = (runs.clone(), notified.clone());
        loopers
            .clone()
            .run(
                "triggerer",
                stop,
                move |w, e| n.lock().unwrap().push(format!("{w}: {e}")),
                move || {
                    r.fetch_add(1, Ordering::SeqCst);
                    async { Err::<Option<Duration>, String>("disk on fire".into()) }
                },
            )
            .await;
        assert_eq!(runs.load(Ordering::SeqCst), 4, "the first run and three retries");
        assert_eq!(
            loopers.get("triggerer").status(),
            Status::Errored("disk on fire".into())
        );
        assert_eq!(*notified.lock().unwrap(), ["triggerer: disk on fire"]);
        let j = loopers.to_json();
        assert_eq!(j["triggererLooperInfo"]["looperInfoStatus"]["contents"], "disk on fire");
    }

    #[tokio::test]
    async fn a_success_resets_the_failure_count_and_stop_ends_the_worker() {
        let loopers = Arc::new(Loopers::new(&settings(|_| {})));
        let (stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let task = tokio::spawn(loopers.clone().run(
            "emailer",
            stop,
            |_, _| {},
            move || {
                let n = r.fetch_add(1, Ordering::SeqCst);
                // fail, fail, fail, succeed, repeatedly: never 4 failures in a row
                async move {
                    if n % 4 == 3 {
                        Ok(Some(Duration::from_millis(1)))
                    } else {
                        Err("flaky".to_string())
                    }
                }
            },
        ));
        while runs.load(Ordering::SeqCst) < 20 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(loopers.get("emailer").status(), Status::Running);
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
}
