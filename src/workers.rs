//! The table of the scheduler's workers as the rest of the server sees it: each worker's
//! live status (`GET /loopers`), the signal that wakes it early (new work), and a count of the
//! passes it has finished (tests wait for a finished pass instead of sleeping). The workers'
//! passes themselves live in `loopers`; the HTTP services only wake them, by [`Worker`].

use crate::config::Settings;
use crate::domain::worker::Worker;
use serde_json::{json, Map, Value};
use std::sync::Mutex;
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
struct Entry {
    status: Mutex<Status>,
    /// Wakes the worker early (new work).
    wake: Notify,
    /// Passes finished so far (with or without an error).
    passes: watch::Sender<u64>,
}

/// All ten workers and their common settings.
pub struct Workers {
    pub period: Duration,
    pub retry_delay: Duration,
    pub retry_amount: u32,
    period_secs: u64,
    retry_delay_us: u64,
    entries: Vec<Entry>,
}

impl Workers {
    pub fn new(settings: &Settings) -> Workers {
        let entries = Worker::ALL
            .iter()
            .map(|&worker| {
                let applicable = match worker {
                    Worker::AdminNotificationEmailConverter => settings.admin_email.is_some(),
                    Worker::PaymentsEventsFetcher | Worker::PaymentsEventsRetrier => {
                        settings.payment_secret_key.is_some() && settings.payment_plan.is_some()
                    }
                    _ => true,
                };
                let on = applicable && !settings.disabled_loopers.contains(&worker);
                Entry {
                    status: Mutex::new(if on { Status::Starting } else { Status::Disabled }),
                    wake: Notify::new(),
                    passes: watch::channel(0).0,
                }
            })
            .collect();
        Workers {
            period: Duration::from_secs(settings.looper_period),
            retry_delay: Duration::from_micros(settings.looper_retry_delay_us),
            retry_amount: settings.looper_retry_amount,
            period_secs: settings.looper_period,
            retry_delay_us: settings.looper_retry_delay_us,
            entries,
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

    /// Wakes `worker` early: it has new work.
    pub fn wake(&self, worker: Worker) {
        self.entry(worker).wake.notify_one();
    }

    /// Resolves when `worker` is woken (a wake that came while it was busy counts).
    pub async fn woken(&self, worker: Worker) {
        self.entry(worker).wake.notified().await
    }

    /// Records that `worker` finished a pass.
    pub fn pass_finished(&self, worker: Worker) {
        self.entry(worker).passes.send_modify(|n| *n += 1);
    }

    /// The number of passes `worker` has finished, to wait on: a test that must show that
    /// "nothing more happens" waits for a pass that started after its event.
    pub fn passes(&self, worker: Worker) -> watch::Receiver<u64> {
        self.entry(worker).passes.subscribe()
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

    #[test]
    fn statuses_follow_the_configuration() {
        let w = Workers::new(&settings(|s| s.disabled_loopers = vec![Worker::Emailer]));
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
        assert_eq!(
            j["paymentsEventsFetcherLooperInfo"]["looperInfoStatus"]["tag"],
            "LooperStatusDisabled"
        );
        assert_eq!(j.as_object().unwrap().len(), 10);
        let w = Workers::new(&settings(|s| s.admin_email = Some("root@example.org".into())));
        assert!(w.enabled(Worker::AdminNotificationEmailConverter));
    }

    #[tokio::test]
    async fn a_wake_while_busy_is_kept_and_passes_are_counted() {
        let w = Workers::new(&settings(|_| {}));
        w.wake(Worker::Emailer);
        // the worker was busy when woken: the next wait returns at once
        tokio::time::timeout(Duration::from_secs(5), w.woken(Worker::Emailer))
            .await
            .expect("the wake was kept");
        let mut passes = w.passes(Worker::Emailer);
        w.pass_finished(Worker::Emailer);
        passes.wait_for(|n| *n == 1).await.expect("counted");
        assert_eq!(*w.passes(Worker::Triggerer).borrow(), 0);
    }
}
