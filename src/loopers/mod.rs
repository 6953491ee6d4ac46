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

use crate::context::Context;
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::worker::Worker;
use crate::workers::{Status, Workers};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Runs `worker` until `stop` turns true: `pass` does one pass and answers how long the
/// worker may sleep at most before the next (`None`: the period). Failed passes are retried
/// after the retry delay; too many in a row stop the worker as errored, and `on_error` is
/// told (admin notification). Every finished pass is counted ([`Workers::passes`]).
pub async fn run<F, Fut>(
    workers: Arc<Workers>,
    worker: Worker,
    mut stop: watch::Receiver<bool>,
    on_error: impl Fn(Worker, &str),
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<Duration>, String>>,
{
    if !workers.enabled(worker) {
        return;
    }
    workers.set_status(worker, Status::Running);
    let name = worker.name();
    let mut failures = 0u32;
    while !*stop.borrow() {
        // On shutdown a pass in flight is abandoned: its results are written atomically
        // only when a step completes, so what it had not finished stays pending.
        let outcome = tokio::select! {
            r = pass() => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        workers.pass_finished(worker);
        let sleep = match outcome {
            Ok(next) => {
                failures = 0;
                next.map_or(workers.period, |n| n.min(workers.period))
            }
            Err(e) => {
                failures += 1;
                tracing::warn!("worker {name} failed ({failures} in a row): {e}");
                if failures > workers.retry_amount {
                    workers.set_status(worker, Status::Errored(e.clone()));
                    on_error(worker, &e);
                    return;
                }
                workers.retry_delay
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = workers.woken(worker) => {}
            _ = stop.wait_for(|s| *s) => {}
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
    ctx: &Context,
    mailer: crate::mail::Mailer,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (workers, store, settings) = (ctx.workers.clone(), ctx.store.clone(), ctx.settings.clone());
    let (payments, http) = (ctx.payments.clone(), ctx.http.clone());
    let notify_admin = {
        let store = store.clone();
        let workers = workers.clone();
        let settings = settings.clone();
        move |worker: Worker, error: &str| {
            tracing::error!("worker {} stopped after repeated failures: {error}", worker.name());
            if settings.admin_email.is_some() {
                let notice = EmailKind::AdminNotice {
                    worker: worker.name().to_owned(),
                    error: error.to_owned(),
                };
                match store
                    .scheduler
                    .queue_email(&QueuedEmail::new(uuid::Uuid::nil(), None, notice))
                {
                    // the converter is woken once the notice is on disk
                    Ok(queued) => {
                        let workers = workers.clone();
                        tokio::spawn(async move {
                            match queued.durable().await {
                                Ok(()) => workers.wake(Worker::AdminNotificationEmailConverter),
                                Err(e) => tracing::error!("could not queue the admin notification: {e}"),
                            }
                        });
                    }
                    Err(e) => tracing::error!("could not queue the admin notification: {e}"),
                }
            }
        }
    };
    let notify_admin = Arc::new(notify_admin);
    let mailer = Arc::new(mailer);
    let waker = |worker: Worker| {
        let workers = workers.clone();
        move || workers.wake(worker)
    };
    let sender = Arc::new(delivery::InboxSender::new(
        http,
        workers.retry_delay,
        workers.retry_amount,
        waker(Worker::TriggeredInboxItemSender),
    ));
    let emailer = Arc::new(email::Emailer::new(
        mailer,
        workers.retry_delay,
        workers.retry_amount,
        waker(Worker::Emailer),
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
    let mut spawn = |worker: Worker, pass: Box<dyn Fn() -> PassFuture + Send + Sync>| {
        let n = notify_admin.clone();
        tasks.push(tokio::spawn(run(
            workers.clone(),
            worker,
            stop.clone(),
            move |w, e| n(w, e),
            pass,
        )));
    };
    let ctx = (workers.clone(), store.clone(), settings.clone());
    {
        let (l, s, _) = ctx.clone();
        spawn(
            Worker::Triggerer,
            Box::new(move || {
                let (l, s) = (l.clone(), s.clone());
                Box::pin(async move {
                    let (count, sleep) = triggerer::pass(&s).await?;
                    if count > 0 {
                        l.wake(Worker::TriggeredInboxItemScheduler);
                        l.wake(Worker::TriggeredEmailScheduler);
                    }
                    Ok(sleep)
                })
            }),
        );
    }
    for (name, email, next) in [
        (
            Worker::TriggeredInboxItemScheduler,
            false,
            Worker::TriggeredInboxItemSender,
        ),
        (Worker::TriggeredEmailScheduler, true, Worker::TriggeredEmailConverter),
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
            Worker::TriggeredInboxItemSender,
            Box::new(move || {
                let (s, sender) = (s.clone(), sender.clone());
                Box::pin(async move { sender.pass(&s).await })
            }),
        );
    }
    for (name, which) in [
        (Worker::TriggeredEmailConverter, email::Converter::Triggered),
        (Worker::VerificationEmailConverter, email::Converter::Verification),
        (Worker::AdminNotificationEmailConverter, email::Converter::AdminNotice),
    ] {
        let (l, s, st) = ctx.clone();
        spawn(
            name,
            Box::new(move || {
                let (l, s, st) = (l.clone(), s.clone(), st.clone());
                Box::pin(async move {
                    if email::convert(&s, &st, which).await? > 0 {
                        l.wake(Worker::Emailer);
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
            Worker::PaymentsEventsFetcher,
            Box::new(move || {
                let (s, p) = (s.clone(), p.clone());
                Box::pin(async move { payments::fetch(&s, &p).await.map(|()| None) })
            }),
        );
        let (_, s, _) = ctx.clone();
        spawn(
            Worker::PaymentsEventsRetrier,
            Box::new(move || {
                let s = s.clone();
                Box::pin(async move { payments::retry(&s).await.map(|()| None) })
            }),
        );
    }
    {
        let (_, s, _) = ctx.clone();
        spawn(
            Worker::Emailer,
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
    use crate::config::Settings;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Mutex;

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

    #[tokio::test]
    async fn repeated_failures_stop_the_worker_and_notify() {
        let workers = Arc::new(Workers::new(&settings(|_| {})));
        let (_stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let notified = Arc::new(Mutex::new(Vec::new()));
        let (r, n) = (runs.clone(), notified.clone());
        run(
            workers.clone(),
            Worker::Triggerer,
            stop,
            move |w, e| n.lock().unwrap().push(format!("{}: {e}", w.name())),
            move || {
                r.fetch_add(1, Ordering::SeqCst);
                async { Err::<Option<Duration>, String>("disk on fire".into()) }
            },
        )
        .await;
        assert_eq!(runs.load(Ordering::SeqCst), 4, "the first run and three retries");
        assert_eq!(*workers.passes(Worker::Triggerer).borrow(), 4);
        assert_eq!(
            workers.status(Worker::Triggerer),
            Status::Errored("disk on fire".into())
        );
        assert_eq!(*notified.lock().unwrap(), ["triggerer: disk on fire"]);
        let j = workers.to_json();
        assert_eq!(j["triggererLooperInfo"]["looperInfoStatus"]["contents"], "disk on fire");
    }

    #[tokio::test]
    async fn a_success_resets_the_failure_count_and_stop_ends_the_worker() {
        let workers = Arc::new(Workers::new(&settings(|_| {})));
        let (stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let mut passes = workers.passes(Worker::Emailer);
        let task = tokio::spawn(run(
            workers.clone(),
            Worker::Emailer,
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
        passes.wait_for(|n| *n >= 20).await.expect("twenty passes");
        assert_eq!(workers.status(Worker::Emailer), Status::Running);
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
}
