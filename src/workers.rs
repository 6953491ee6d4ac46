//! The table of the scheduler's workers as the rest of the server sees it: each worker's
//! live status (`GET /loopers`), the signal that wakes it early (new work), and what it is
//! doing: passes started and finished, deliveries in flight (tests wait for a pass that
//! started after their event instead of sleeping). The workers' passes themselves live in
//! `loopers`; the HTTP services only wake them, by [`Worker`].

use crate::config::Settings;
use crate::domain::worker::Worker;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::sync::{Mutex, OnceLock};
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

/// What a worker has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    /// Passes started.
    pub started: u64,
    /// Passes finished (with or without an error); passes of one worker never overlap.
    pub finished: u64,
    /// Deliveries started by its passes that are still running (sender, emailer).
    pub deliveries: usize,
    /// Passes that failed (an error the runtime retries), in all.
    pub failed: u64,
    /// Passes that failed since the last good one: 0 when its last pass went well. A
    /// worker whose last pass failed counts as errored for the health check even while it
    /// still retries (`Status::Errored` comes only after `--looper-retry-amount` retries).
    pub failing: u32,
}

/// One worker's entry.
struct Entry {
    status: Mutex<Status>,
    /// Wakes the worker early (new work).
    wake: Notify,
    activity: watch::Sender<Activity>,
}

/// All ten workers and their common settings.
pub struct Workers {
    pub period: Duration,
    pub retry_delay: Duration,
    pub retry_amount: u32,
    period_secs: u64,
    retry_delay_us: u64,
    entries: Vec<Entry>,
    /// Wakes a worker in the other processes on the same database ([`Workers::announce_with`]).
    announcer: OnceLock<Announcer>,
}

/// How a wake-up reaches the other processes' workers.
type Announcer = Box<dyn Fn(Worker) + Send + Sync>;

impl Workers {
    /// The table for `settings`; `runs` tells which workers run with them (the others are
    /// `Disabled`; `loopers::runs` knows).
    pub fn new(settings: &Settings, runs: impl Fn(Worker) -> bool) -> Workers {
        let entries = Worker::ALL
            .iter()
            .map(|&worker| Entry {
                status: Mutex::new(if runs(worker) {
                    Status::Starting
                } else {
                    Status::Disabled
                }),
                wake: Notify::new(),
                activity: watch::channel(Activity::default()).0,
            })
            .collect();
        Workers {
            period: Duration::from_secs(settings.looper_period),
            retry_delay: Duration::from_micros(settings.looper_retry_delay_us),
            retry_amount: settings.looper_retry_amount,
            period_secs: settings.looper_period,
            retry_delay_us: settings.looper_retry_delay_us,
            entries,
            announcer: OnceLock::new(),
        }
    }

    fn entry(&self, worker: Worker) -> &Entry {
        &self.entries[worker.index()]
    }

    pub fn status(&self, worker: Worker) -> Status {
        self.entry(worker)
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_status(&self, worker: Worker, status: Status) {
        *self.entry(worker).status.lock().unwrap_or_else(|p| p.into_inner()) = status;
    }

    pub fn enabled(&self, worker: Worker) -> bool {
        self.status(worker) != Status::Disabled
    }

    /// Wakes `worker` early, here and in the other processes on the same database: it has
    /// new work.
    pub fn wake(&self, worker: Worker) {
        self.wake_here(worker);
        if let Some(announce) = self.announcer.get() {
            announce(worker);
        }
    }

    /// Wakes `worker` early in this process only (its own deliveries' turns, a wake-up
    /// from another process).
    pub fn wake_here(&self, worker: Worker) {
        self.entry(worker).wake.notify_one();
    }

    /// From now on, [`Workers::wake`] also wakes the worker in the other processes with
    /// `announce` (set once, by the launch of a shared database).
    pub fn announce_with(&self, announce: impl Fn(Worker) + Send + Sync + 'static) {
        let _ = self.announcer.set(Box::new(announce));
    }

    /// Resolves when `worker` is woken (a wake that came while it was busy counts).
    pub async fn woken(&self, worker: Worker) {
        self.entry(worker).wake.notified().await
    }

    /// Applies `change` to `worker`'s activity; answers the activity after it.
    fn record(&self, worker: Worker, change: impl FnOnce(&mut Activity)) -> Activity {
        let activity = &self.entry(worker).activity;
        activity.send_modify(change);
        *activity.borrow()
    }

    pub fn pass_started(&self, worker: Worker) -> Activity {
        self.record(worker, |a| a.started += 1)
    }

    /// A pass that went well finished.
    pub fn pass_finished(&self, worker: Worker) -> Activity {
        self.record(worker, |a| {
            a.finished += 1;
            a.failing = 0;
        })
    }

    /// A pass that failed finished.
    pub fn pass_failed(&self, worker: Worker) -> Activity {
        self.record(worker, |a| {
            a.finished += 1;
            a.failed += 1;
            a.failing = a.failing.saturating_add(1);
        })
    }

    /// Whether `worker` is errored: more than `--looper-retry-amount` failed passes in a
    /// row and none good since (the health check answers 503; it goes on trying). A worker whose last pass failed but
    /// that still retries is only `failing`: one failure of the payment provider or of the
    /// disk is not a reason for a supervisor to restart the server.
    pub fn errored(&self, worker: Worker) -> bool {
        matches!(self.status(worker), Status::Errored(_))
    }

    /// `worker`'s state in one word for the health check and the metrics: `disabled`,
    /// `starting`, `running`, `failing` (its last pass failed, it retries) or `errored`
    /// (too many failed passes in a row; it goes on trying).
    pub fn state(&self, worker: Worker) -> &'static str {
        match self.status(worker) {
            Status::Disabled => "disabled",
            Status::Starting => "starting",
            Status::Errored(_) => "errored",
            Status::Running if self.entry(worker).activity.borrow().failing > 0 => "failing",
            Status::Running => "running",
        }
    }

    /// Every worker's state and passes, for `GET /healthz`.
    pub fn health_json(&self) -> Value {
        let mut out = Map::new();
        for worker in Worker::ALL {
            let a = *self.entry(worker).activity.borrow();
            let mut entry = Map::new();
            entry.insert("status".into(), json!(self.state(worker)));
            entry.insert("passes".into(), json!(a.finished));
            entry.insert("failed-passes".into(), json!(a.failed));
            if let Status::Errored(e) = self.status(worker) {
                entry.insert("error".into(), json!(e));
            }
            out.insert(worker.name().into(), Value::Object(entry));
        }
        Value::Object(out)
    }

    pub fn delivery_started(&self, worker: Worker) {
        self.record(worker, |a| a.deliveries += 1);
    }

    pub fn delivery_ended(&self, worker: Worker) {
        self.record(worker, |a| a.deliveries -= 1);
    }

    /// What `worker` has done so far, to watch.
    pub fn activity(&self, worker: Worker) -> watch::Receiver<Activity> {
        self.entry(worker).activity.subscribe()
    }

    /// Resolves once a pass of `worker` that started after this call has finished and no
    /// delivery of the worker is in flight: whatever the worker would do about the state of
    /// the moment of the call, it has done. This is how tests show that "nothing more
    /// happens" (no second trigger, no duplicate delivery) instead of sleeping a while: a
    /// pass in flight at the call does not count, it may have read the state before the
    /// event. Never resolves while the worker does not run (disabled, errored, stopped).
    pub fn settled(&self, worker: Worker) -> impl Future<Output = ()> + Send + 'static {
        let mut activity = self.activity(worker);
        let started = activity.borrow_and_update().started;
        async move {
            let _ = activity.wait_for(|a| a.finished > started && a.deliveries == 0).await;
        }
    }

    /// `GET /loopers`.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        for worker in Worker::ALL {
            let (status, on) = match self.status(worker) {
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
            out.insert(format!("{}LooperInfo", worker.name()), value);
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(f: impl FnOnce(&mut Settings)) -> Settings {
        let mut s = Settings::with_data_dir("/tmp/unused");
        s.looper_retry_amount = 3;
        f(&mut s);
        s
    }

    fn all_run(_: Worker) -> bool {
        true
    }

    #[test]
    fn statuses_follow_the_configuration() {
        let off = [Worker::Emailer, Worker::AdminNotificationEmailConverter];
        let w = Workers::new(&settings(|_| {}), |w| !off.contains(&w));
        let j = w.to_json();
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
        assert_eq!(j.as_object().unwrap().len(), 10);
        assert!(w.enabled(Worker::Triggerer) && !w.enabled(Worker::Emailer));
    }

    #[tokio::test]
    async fn a_wake_while_busy_is_kept_and_passes_are_counted() {
        let w = Workers::new(&settings(|_| {}), all_run);
        w.wake(Worker::Emailer);
        // the worker was busy when woken: the next wait returns at once
        tokio::time::timeout(Duration::from_secs(5), w.woken(Worker::Emailer))
            .await
            .expect("the wake was kept");
        let mut activity = w.activity(Worker::Emailer);
        w.pass_started(Worker::Emailer);
        w.pass_finished(Worker::Emailer);
        activity.wait_for(|a| a.finished == 1).await.expect("counted");
        assert_eq!(*w.activity(Worker::Triggerer).borrow(), Activity::default());
    }

    #[test]
    fn a_worker_whose_last_pass_failed_is_failing_until_a_good_pass_and_errored_once_stopped() {
        let w = Workers::new(&settings(|_| {}), all_run);
        w.set_status(Worker::Emailer, Status::Running);
        assert!(!w.errored(Worker::Emailer));
        assert_eq!(w.state(Worker::Emailer), "running");
        w.pass_started(Worker::Emailer);
        let a = w.pass_failed(Worker::Emailer);
        assert_eq!((a.finished, a.failed, a.failing), (1, 1, 1));
        assert!(!w.errored(Worker::Emailer), "it still retries");
        assert_eq!(w.state(Worker::Emailer), "failing");
        assert_eq!(w.health_json()["emailer"]["failed-passes"], 1);
        w.pass_started(Worker::Emailer);
        let a = w.pass_finished(Worker::Emailer);
        assert_eq!((a.finished, a.failed, a.failing), (2, 1, 0));
        assert!(!w.errored(Worker::Emailer));
        w.set_status(Worker::Emailer, Status::Errored("broken".into()));
        assert!(w.errored(Worker::Emailer));
        assert_eq!(w.state(Worker::Emailer), "errored");
        assert_eq!(w.health_json()["emailer"]["error"], "broken");
        assert_eq!(w.state(Worker::Triggerer), "starting");
    }

    /// Resolves in time, or `None`.
    async fn within<T>(f: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout(Duration::from_millis(50), f).await.ok()
    }

    #[tokio::test]
    async fn settled_waits_for_a_pass_that_started_after_the_call_and_its_deliveries() {
        let w = Workers::new(&settings(|_| {}), all_run);
        let sender = Worker::TriggeredInboxItemSender;
        // a pass in flight at the call does not count
        w.pass_started(sender);
        let mut settled = Box::pin(w.settled(sender));
        w.delivery_started(sender);
        w.pass_finished(sender);
        assert!(
            within(&mut settled).await.is_none(),
            "that pass started before the call"
        );
        // the next pass finishes, but a delivery is still running
        w.pass_started(sender);
        w.pass_finished(sender);
        assert!(within(&mut settled).await.is_none(), "a delivery is in flight");
        w.delivery_ended(sender);
        assert!(within(&mut settled).await.is_some());
        // an idle worker: its next pass counts
        let settled = w.settled(sender);
        w.pass_started(sender);
        w.pass_finished(sender);
        assert!(within(settled).await.is_some());
        assert!(within(w.settled(sender)).await.is_none(), "no pass since");
    }
}
