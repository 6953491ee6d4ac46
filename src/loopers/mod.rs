//! Background workers ("loopers", scheduler.md §9), as one table ([`JOBS`]): for each
//! worker, whether it runs with the settings, whom it wakes after a pass that produced work,
//! and its pass. One runtime ([`run`]) runs every row: a pass when woken (new work) and at
//! least every `--looper-period`, the live status for `GET /loopers`, and the retry policy:
//! a failed pass is retried after `--looper-retry-delay-us`, the waits doubling up to 30 s;
//! after `--looper-retry-amount` consecutive failures the worker reports
//! `LooperStatusErrored` and an admin notification is created, and it goes on trying at that
//! pace: the first pass that succeeds makes it running again (scheduler.md §9.2).

pub mod delivery;
pub mod dispatch;
pub mod email;
pub mod payments;
pub mod triggerer;

use crate::clock::Clock;
use crate::config::Settings;
use crate::context::Context;
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::worker::Worker;
use crate::store::{ClaimedWork, OnceWork};
use crate::workers::{Status, Workers};
use std::fmt::Display;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What one pass did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Work it handed on (items triggered, deliveries queued, e-mails rendered): when there
    /// is some, the workers its row of [`JOBS`] names are woken.
    pub produced: usize,
    /// How long the worker may sleep at most before its next pass (the next due instant,
    /// the next back-off); `None`: the period.
    pub next: Option<Duration>,
}

impl Pass {
    fn produced(produced: usize) -> Pass {
        Pass { produced, next: None }
    }

    fn next(next: Option<Duration>) -> Pass {
        Pass { produced: 0, next }
    }
}

/// What the passes work with: the context, and the two workers that keep deliveries in
/// flight between their passes.
pub struct Crew {
    pub ctx: Arc<Context>,
    sender: Arc<delivery::InboxSender>,
    emailer: Arc<email::Emailer>,
    /// The due items the triggerer set aside (a record they need cannot be decoded).
    set_aside: triggerer::SetAside,
}

type PassFuture = Pin<Box<dyn Future<Output = Result<Pass, String>> + Send>>;

/// One worker: a row of [`JOBS`].
struct Job {
    worker: Worker,
    /// Whether it runs with these settings (besides `--disable-looper`).
    runs: fn(&Settings) -> bool,
    /// The workers that have new work after one of its passes produced some.
    wakes: &'static [Worker],
    /// One pass, made by [`boxed`] from a pass with an error type of its own.
    pass: fn(Arc<Crew>) -> PassFuture,
}

/// A pass as a row of the table holds it: its error, of whatever type the pass has, becomes
/// the text that `GET /loopers` and the admin notification show.
fn boxed<E: Display>(pass: impl Future<Output = Result<Pass, E>> + Send + 'static) -> PassFuture {
    Box::pin(async move { pass.await.map_err(|e| e.to_string()) })
}

fn always(_: &Settings) -> bool {
    true
}

fn with_admin_email(settings: &Settings) -> bool {
    settings.admin_email.is_some()
}

fn with_payments(settings: &Settings) -> bool {
    settings.payment_secret_key.is_some() && settings.payment_plan.is_some()
}

/// The ten workers (scheduler.md §9.1), in the order of [`Worker::ALL`]. Each runs a pass
/// when woken and at least every `--looper-period` ([`run`]).
static JOBS: [Job; 10] = [
    Job {
        worker: Worker::Triggerer,
        runs: always,
        wakes: &[Worker::TriggeredInboxItemScheduler, Worker::TriggeredEmailScheduler],
        pass: |c| {
            boxed(async move {
                let round = || hand_on(&c, Worker::Triggerer);
                let (triggered, next) = triggerer::pass(&c.ctx.store, &c.ctx.clock, &c.set_aside, &round).await?;
                Ok::<_, PassError>(Pass {
                    produced: triggered,
                    next,
                })
            })
        },
    },
    Job {
        worker: Worker::TriggeredInboxItemScheduler,
        runs: always,
        wakes: &[Worker::TriggeredInboxItemSender],
        pass: |c| {
            boxed(async move {
                let round = || hand_on(&c, Worker::TriggeredInboxItemScheduler);
                delivery::schedule(&c.ctx.store, false, &round)
                    .await
                    .map(Pass::produced)
            })
        },
    },
    Job {
        worker: Worker::TriggeredInboxItemSender,
        runs: always,
        // its deliveries wake it themselves (a freed place, a postponement)
        wakes: &[],
        pass: |c| boxed(async move { c.sender.pass(&c.ctx.store).await.map(Pass::next) }),
    },
    Job {
        worker: Worker::TriggeredEmailScheduler,
        runs: always,
        wakes: &[Worker::TriggeredEmailConverter],
        pass: |c| {
            boxed(async move {
                let round = || hand_on(&c, Worker::TriggeredEmailScheduler);
                delivery::schedule(&c.ctx.store, true, &round).await.map(Pass::produced)
            })
        },
    },
    Job {
        worker: Worker::TriggeredEmailConverter,
        runs: always,
        wakes: &[Worker::Emailer],
        pass: |c| boxed(async move { convert(&c, email::Converter::Triggered).await }),
    },
    Job {
        worker: Worker::VerificationEmailConverter,
        runs: always,
        wakes: &[Worker::Emailer],
        pass: |c| boxed(async move { convert(&c, email::Converter::Verification).await }),
    },
    Job {
        worker: Worker::Emailer,
        runs: always,
        // its e-mails wake it themselves (a freed place, a postponement)
        wakes: &[],
        pass: |c| boxed(async move { c.emailer.pass(&c.ctx.store).await.map(Pass::next) }),
    },
    Job {
        worker: Worker::AdminNotificationEmailConverter,
        runs: with_admin_email,
        wakes: &[Worker::Emailer],
        pass: |c| {
            boxed(async move {
                if !c.ctx.store.coordination.leads(OnceWork::AdminNotices).await {
                    return Ok(Pass::default());
                }
                convert(&c, email::Converter::AdminNotice).await
            })
        },
    },
    Job {
        worker: Worker::PaymentsEventsFetcher,
        runs: with_payments,
        wakes: &[],
        pass: |c| {
            boxed(async move {
                if !c.ctx.store.coordination.leads(OnceWork::Payments).await {
                    return Ok(Pass::default());
                }
                payments::fetch(&c.ctx.store, &c.ctx.payments)
                    .await
                    .map(|()| Pass::default())
            })
        },
    },
    Job {
        worker: Worker::PaymentsEventsRetrier,
        runs: with_payments,
        wakes: &[],
        pass: |c| {
            boxed(async move {
                if !c.ctx.store.coordination.leads(OnceWork::Payments).await {
                    return Ok(Pass::default());
                }
                payments::retry(&c.ctx.store).await.map(|()| Pass::default())
            })
        },
    },
];

/// Wakes the workers of `worker`'s row's `wakes` in the middle of its pass: a round of its
/// work is durable, and the next stage may start on it while the pass goes on.
fn hand_on(c: &Crew, worker: Worker) {
    for job in JOBS.iter().filter(|j| j.worker == worker) {
        for &next in job.wakes {
            c.ctx.workers.wake(next);
        }
    }
}

async fn convert(c: &Crew, which: email::Converter) -> Result<Pass, PassError> {
    let produced = email::convert(&c.ctx.store, &c.ctx.settings, which).await?;
    let next = until_claims_end(&c.ctx.store, ClaimedWork::Emails, None).await;
    Ok(Pass { produced, next })
}

/// A little past the end of another process's claim, so that it has run out by the
/// database's clock too when the worker looks again.
const PAST_CLAIM_END: Duration = Duration::from_millis(100);

/// How long a worker whose pass ended with its own deadline `next` sleeps when other
/// processes hold some of its `work` (several processes on one database): until the
/// earliest of their claims runs out, if that is sooner. A process that died (`kill -9`)
/// so gets its work taken over when its lease ends, not up to a period later; a live
/// process renews its claims, and the worker looks again then.
pub(crate) async fn until_claims_end(
    store: &crate::store::Store,
    work: ClaimedWork,
    next: Option<Duration>,
) -> Option<Duration> {
    let ends = store.coordination.claims_elsewhere_end(work).await;
    match (next, ends.map(|e| e + PAST_CLAIM_END)) {
        (Some(n), Some(e)) => Some(n.min(e)),
        (n, e) => n.or(e),
    }
}

/// The heartbeat of a process on a shared database: every third of the lease it renews
/// every claim it holds, so that work it is on (a delivery waiting for a slow target up to
/// its timeouts) is never taken over while it lives. Runs until `stop` turns true.
async fn heartbeat(store: Arc<crate::store::Store>, lease: Duration, mut stop: watch::Receiver<bool>) {
    let period = lease / 3;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        store.coordination.renew_claims().await;
    }
}

/// Whether `worker` runs with `settings` (else `GET /loopers` shows it disabled).
pub fn runs(worker: Worker, settings: &Settings) -> bool {
    !settings.disabled_loopers.contains(&worker) && (JOBS[worker.index()].runs)(settings)
}

/// Runs `worker` until `stop` turns true: `pass` does one pass; when it produced work, the
/// workers in `wakes` are woken. Then the worker sleeps until the period is over, the pass's
/// own deadline ([`Pass::next`]) comes, it is woken, or the (manual) clock is set. Failed
/// passes are retried after the retry delay, doubling up to [`LONGEST_WORKER_WAIT`]; too many
/// in a row make the worker errored and `on_error` is told once (admin notification), and it
/// goes on trying: the first pass that succeeds makes it running again (scheduler.md §9.2:
/// a worker never stops for good while the process runs). Passes are counted in the
/// workers' table ([`Workers::activity`]) and logged at `trace`.
pub async fn run<F, Fut>(
    workers: Arc<Workers>,
    clock: Clock,
    worker: Worker,
    wakes: &[Worker],
    mut stop: watch::Receiver<bool>,
    on_error: impl Fn(Worker, &str),
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Pass, String>>,
{
    if !workers.enabled(worker) {
        return;
    }
    workers.set_status(worker, Status::Running);
    let name = worker.name();
    let mut clock_changes = clock.changes();
    let mut failures = 0u32;
    while !*stop.borrow() {
        let started = workers.pass_started(worker);
        tracing::trace!("worker {name} starts pass {}", started.started);
        // On shutdown a pass in flight is abandoned: its results are written atomically
        // only when a step completes, so what it had not finished stays pending.
        let outcome = tokio::select! {
            r = pass() => r,
            _ = stop.wait_for(|s| *s) => return,
        };
        let failed = outcome.is_err();
        let sleep = match outcome {
            Ok(done) => {
                if failures > workers.retry_amount {
                    tracing::info!("worker {name} runs again after {failures} failed passes");
                    workers.set_status(worker, Status::Running);
                }
                failures = 0;
                if done.produced > 0 {
                    for &next in wakes {
                        workers.wake(next);
                    }
                }
                done.next.map_or(workers.period, |n| n.min(workers.period))
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                tracing::warn!("worker {name} failed ({failures} in a row): {e}");
                if failures > workers.retry_amount {
                    // the status keeps the latest error; the admin hears of it once
                    workers.set_status(worker, Status::Errored(e.clone()));
                    if failures == workers.retry_amount.saturating_add(1) {
                        on_error(worker, &e);
                    }
                }
                worker_backoff(workers.retry_delay, failures)
            }
        };
        let done = match failed {
            true => workers.pass_failed(worker),
            false => workers.pass_finished(worker),
        };
        // tests of the binary read these two lines to know that a pass began after their
        // event and left no delivery in flight
        tracing::trace!(
            "worker {name} finished pass {}; {} deliveries in flight",
            done.finished,
            done.deliveries
        );
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = workers.woken(worker) => {}
            _ = clock_changes.changed() => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }
}

/// The longest wait of a failing worker before it tries again (scheduler.md §9.2): what
/// it owes is done within about this long of the cause going away.
pub const LONGEST_WORKER_WAIT: Duration = Duration::from_secs(30);

/// The wait of a worker after its `failures`-th failed pass in a row: the retry delay,
/// doubling, at most [`LONGEST_WORKER_WAIT`].
pub fn worker_backoff(delay: Duration, failures: u32) -> Duration {
    backoff(delay, failures).min(LONGEST_WORKER_WAIT)
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

/// A worker failed too many passes in a row (it goes on trying): say so, and queue an
/// e-mail to the admin (with `--admin-email`).
fn notify_admin(ctx: &Context, worker: Worker, error: &str) {
    tracing::error!(
        "worker {} is failing repeatedly (it goes on trying): {error}",
        worker.name()
    );
    if ctx.settings.admin_email.is_some() {
        let notice = EmailKind::AdminNotice {
            worker: worker.name().to_owned(),
            error: error.to_owned(),
        };
        // queued by a task (the store is async), the converter woken once it is on disk
        let store = ctx.store.clone();
        let workers = ctx.workers.clone();
        tokio::spawn(async move {
            let queued = store
                .scheduler
                .emails
                .queue_email(&QueuedEmail::new(uuid::Uuid::nil(), None, notice))
                .await;
            match queued {
                Ok(queued) => match queued.durable().await {
                    Ok(()) => workers.wake(Worker::AdminNotificationEmailConverter),
                    Err(e) => tracing::error!("could not queue the admin notification: {e}"),
                },
                Err(e) => tracing::error!("could not queue the admin notification: {e}"),
            }
        });
    }
}

/// Spawns every worker of [`JOBS`] (those that do not run end at once); they stop when
/// `stop` turns true. `own_inbox`: the port of this process's inbox service, if it runs one.
pub fn start(
    ctx: &Arc<Context>,
    mailer: crate::mail::Mailer,
    own_inbox: Option<u16>,
    stop: watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let workers = &ctx.workers;
    let crew = Arc::new(Crew {
        ctx: ctx.clone(),
        sender: Arc::new(
            delivery::InboxSender::new(
                ctx.inbox_client.clone(),
                delivery::PushSettings::of(ctx),
                ctx.clock.clone(),
                workers.clone(),
            )
            .with_metrics(ctx.metrics.clone())
            .with_own_inbox(own_inbox),
        ),
        emailer: Arc::new(
            email::Emailer::new(Arc::new(mailer), ctx.clock.clone(), workers.clone()).with_metrics(ctx.metrics.clone()),
        ),
        set_aside: Default::default(),
    });
    let mut tasks = Vec::new();
    if !ctx.store.is_sled() {
        let lease = ctx.settings.database_lease;
        tasks.push(tokio::spawn(heartbeat(ctx.store.clone(), lease, stop.clone())));
    }
    // Deliveries run as tasks of their own: at shutdown they are abandoned (they stay
    // pending) before the store is flushed.
    for dispatcher in [crew.sender.dispatcher.clone(), crew.emailer.dispatcher.clone()] {
        let mut stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let _ = stop.wait_for(|s| *s).await;
            dispatcher.stop().await;
        }));
    }
    for job in &JOBS {
        let (notifying, passing) = (crew.clone(), crew.clone());
        tasks.push(tokio::spawn(run(
            workers.clone(),
            ctx.clock.clone(),
            job.worker,
            job.wakes,
            stop.clone(),
            move |worker, error| notify_admin(&notifying.ctx, worker, error),
            move || (job.pass)(passing.clone()),
        )));
    }
    tasks
}

/// `Ok(None)` for a record that cannot be decoded, once noted in the store's undecodable
/// records (logged once, counted by `/healthz`); any other error fails the pass.
pub(crate) fn set_aside<T>(store: &crate::store::Store, read: crate::store::Result<T>) -> Result<Option<T>, PassError> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(crate::store::StoreError::Undecodable(record)) => {
            store.undecodable().note(&record);
            Ok(None)
        }
        Err(e) => Err(PassError::Store(e)),
    }
}

/// Why a worker's pass failed (shown as text by `GET /loopers` and the admin notice).
#[derive(Debug)]
pub enum PassError {
    /// Reading or writing the database failed.
    Store(crate::store::StoreError),
    /// The payment provider could not be asked: what it or the connection said.
    Provider(String),
    /// A failed payment event kept for the retrier is not JSON any more.
    Event(serde_json::Error),
}

impl std::fmt::Display for PassError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassError::Store(e) => write!(f, "{e}"),
            PassError::Provider(e) => write!(f, "the payment provider: {e}"),
            PassError::Event(e) => write!(f, "a kept payment event is not JSON: {e}"),
        }
    }
}

impl std::error::Error for PassError {}

impl From<crate::store::StoreError> for PassError {
    fn from(e: crate::store::StoreError) -> PassError {
        PassError::Store(e)
    }
}

impl From<serde_json::Error> for PassError {
    fn from(e: serde_json::Error) -> PassError {
        PassError::Event(e)
    }
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

    fn table(s: &Settings) -> Arc<Workers> {
        Arc::new(Workers::new(s, |w| runs(w, s)))
    }

    #[test]
    fn the_table_follows_worker_order_and_the_settings() {
        for (job, worker) in JOBS.iter().zip(Worker::ALL) {
            assert_eq!(job.worker, worker);
        }
        let s = settings(|s| s.disabled_loopers = vec![Worker::Emailer]);
        let on: Vec<Worker> = Worker::ALL.into_iter().filter(|&w| runs(w, &s)).collect();
        assert_eq!(on.len(), 6, "{on:?}");
        assert!(!on.contains(&Worker::Emailer), "--disable-looper");
        assert!(
            !on.contains(&Worker::AdminNotificationEmailConverter),
            "no --admin-email"
        );
        assert!(!on.contains(&Worker::PaymentsEventsFetcher), "no payments");
        let s = settings(|s| {
            s.admin_email = Some("root@example.org".into());
            s.payment_secret_key = Some("sk_test".into());
        });
        assert!(runs(Worker::AdminNotificationEmailConverter, &s));
        assert!(!runs(Worker::PaymentsEventsRetrier, &s), "a key without a plan");
        let j = table(&s).to_json();
        assert_eq!(
            j["paymentsEventsFetcherLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusDisabled"
        );
        assert_eq!(
            j["adminNotificationEmailConverterLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusRunning"
        );
    }

    /// Spawns `worker` with a pass that counts its calls and produces `produced` each time.
    fn counting(
        workers: &Arc<Workers>,
        clock: &Clock,
        worker: Worker,
        wakes: &'static [Worker],
        produced: usize,
        stop: &watch::Receiver<bool>,
    ) -> (Arc<AtomicU32>, tokio::task::JoinHandle<()>) {
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let task = tokio::spawn(run(
            workers.clone(),
            clock.clone(),
            worker,
            wakes,
            stop.clone(),
            |_, _| {},
            move || {
                c.fetch_add(1, Ordering::SeqCst);
                async move { Ok(Pass::produced(produced)) }
            },
        ));
        (calls, task)
    }

    /// Within a second (the period is a minute).
    async fn soon<T>(f: impl Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(1), f).await.expect("in time")
    }

    #[tokio::test]
    async fn a_productive_pass_wakes_the_next_workers_and_a_clock_change_wakes_all() {
        let workers = table(&settings(|s| s.looper_period = 60));
        let clock = Clock::manual(crate::domain::wire::Timestamp::from_unix(0, 0));
        let (stop_tx, stop) = watch::channel(false);
        let (sender, sender_task) = counting(&workers, &clock, Worker::TriggeredInboxItemSender, &[], 0, &stop);
        let mut sender_passes = workers.activity(Worker::TriggeredInboxItemSender);
        soon(sender_passes.wait_for(|a| a.finished >= 1)).await.unwrap();
        let (_, scheduler_task) = counting(
            &workers,
            &clock,
            Worker::TriggeredInboxItemScheduler,
            &[Worker::TriggeredInboxItemSender],
            1,
            &stop,
        );
        // the scheduler's first pass produced work: the sender runs again at once
        soon(sender_passes.wait_for(|a| a.finished >= 2)).await.unwrap();
        assert_eq!(sender.load(Ordering::SeqCst), 2);
        // a manual clock that moves wakes the workers to look at the new time
        let both = [Worker::TriggeredInboxItemSender, Worker::TriggeredInboxItemScheduler].map(|w| workers.settled(w));
        clock.advance(Duration::from_secs(3600));
        for settled in both {
            soon(settled).await;
        }
        stop_tx.send(true).unwrap();
        for task in [sender_task, scheduler_task] {
            soon(task).await.unwrap();
        }
    }

    /// §9.2: after the first run and `--looper-retry-amount` (3) retries failed, the worker
    /// is errored and the admin is told once; it goes on trying, waiting longer each time
    /// (doubling, at most 30 s), and its first pass that succeeds makes it running again.
    #[tokio::test(start_paused = true)]
    async fn repeated_failures_make_the_worker_errored_and_it_goes_on_until_it_recovers() {
        let workers = table(&settings(|s| s.looper_retry_delay_us = 1_000_000));
        let (stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let at = Arc::new(Mutex::new(Vec::new()));
        let notified = Arc::new(Mutex::new(Vec::new()));
        let (r, a, n) = (runs.clone(), at.clone(), notified.clone());
        let started = tokio::time::Instant::now();
        let mut activity = workers.activity(Worker::Triggerer);
        let task = tokio::spawn(run(
            workers.clone(),
            Clock::real(),
            Worker::Triggerer,
            &[Worker::TriggeredInboxItemScheduler],
            stop,
            move |w, e| n.lock().unwrap().push(format!("{}: {e}", w.name())),
            move || {
                let run = r.fetch_add(1, Ordering::SeqCst);
                a.lock().unwrap().push(started.elapsed());
                // the disk is on fire for 12 passes, then it is put out
                async move {
                    match run {
                        0..12 => Err::<Pass, String>(format!("disk on fire ({run})")),
                        _ => Ok(Pass::next(None)),
                    }
                }
            },
        ));
        activity.wait_for(|a| a.finished >= 4).await.expect("four passes");
        assert_eq!(
            workers.status(Worker::Triggerer),
            Status::Errored("disk on fire (3)".into()),
            "errored after the first run and three retries"
        );
        assert_eq!(
            workers.activity(Worker::TriggeredInboxItemScheduler).borrow().started,
            0,
            "failed passes wake nobody"
        );
        activity.wait_for(|a| a.finished >= 8).await.expect("more passes");
        assert_eq!(
            workers.status(Worker::Triggerer),
            Status::Errored("disk on fire (7)".into()),
            "still trying, the latest error shown"
        );
        let j = workers.to_json();
        assert_eq!(
            j["triggererLooperInfo"]["looperInfoStatus"]["contents"],
            "disk on fire (7)"
        );
        activity
            .wait_for(|a| a.finished >= 13)
            .await
            .expect("the pass that succeeds");
        assert_eq!(workers.status(Worker::Triggerer), Status::Running, "running again");
        assert_eq!(*notified.lock().unwrap(), ["triggerer: disk on fire (3)"], "told once");
        // the waits double from the retry delay (1 s here) and stay at 30 s
        let at = at.lock().unwrap().clone();
        let waits: Vec<u64> = at.windows(2).take(12).map(|w| (w[1] - w[0]).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30, 30, 30, 30, 30]);
        stop_tx.send(true).unwrap();
        soon(task).await.unwrap();
    }

    #[tokio::test]
    async fn a_success_resets_the_failure_count_and_stop_ends_the_worker() {
        let workers = table(&settings(|_| {}));
        let (stop_tx, stop) = watch::channel(false);
        let runs = Arc::new(AtomicU32::new(0));
        let r = runs.clone();
        let mut activity = workers.activity(Worker::Emailer);
        let task = tokio::spawn(run(
            workers.clone(),
            Clock::real(),
            Worker::Emailer,
            &[],
            stop,
            |_, _| {},
            move || {
                let n = r.fetch_add(1, Ordering::SeqCst);
                // fail, fail, fail, succeed, repeatedly: never 4 failures in a row
                async move {
                    if n % 4 == 3 {
                        Ok(Pass::next(Some(Duration::from_millis(1))))
                    } else {
                        Err("flaky".to_string())
                    }
                }
            },
        ));
        activity.wait_for(|a| a.finished >= 20).await.expect("twenty passes");
        assert_eq!(workers.status(Worker::Emailer), Status::Running);
        stop_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap()
            .unwrap();
    }
}
