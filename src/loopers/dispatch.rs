//! Deliveries as independent tasks (scheduler.md §7.4): a delivery whose target hangs until
//! its timeout must not hold up any other delivery. A worker's pass only decides what is
//! due and starts each delivery here as its own task; the task records its result (and
//! waits for it to be durable) as soon as it has it. Three bounds keep one destination or
//! one person from taking every connection, and the process from opening too many: a
//! number of deliveries per destination *host* (an inbox URL's host and port, whatever its
//! path, or an e-mail domain), a number per account (so that one account's many slow hosts
//! take at most that share of the places), and a number overall. The overall bound never
//! keeps out an account that has nothing in flight: several strangers' slow hosts can fill
//! the places they may take, not the one of an account they are not (up to twice the
//! overall bound, a hard ceiling on tasks and connections). A due delivery that finds no
//! free place is started by a later pass, which the task that frees a place wakes.

use super::PassError;
use crate::domain::wire::Timestamp;
use crate::domain::worker::Worker;
use crate::workers::Workers;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::task::JoinSet;
use uuid::Uuid;

/// Whether [`Dispatcher::start`] started the delivery.
#[derive(Debug, PartialEq, Eq)]
pub enum Start {
    Started,
    /// That queue entry is being delivered already.
    Running,
    /// A bound is reached (or the dispatcher is stopped); a later pass starts it.
    Full,
}

/// Where a delivery goes and for whom: what its bounds count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The host and port of an inbox URL (lower case), or an e-mail address's domain.
    pub host: String,
    /// The account it is sent for (nil for the operator's own e-mails).
    pub account: Uuid,
    /// This server's own inbox: not a stranger's host, so no bound of a host counts (its
    /// users' reminders would otherwise share a stranger's few places); the account's and
    /// the overall bounds do.
    pub own: bool,
}

/// How many deliveries may be in flight at once.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub overall: usize,
    pub per_host: usize,
    pub per_account: usize,
}

impl Bounds {
    /// Whether one more delivery may start with `running` in flight overall, `on_host` to
    /// its destination and `of_account` of its account. The overall bound counts only for
    /// an account that has deliveries in flight: one that has none takes its first place
    /// beyond it (fair to whoever waits for nothing), up to twice the bound in all.
    fn admits(&self, running: usize, on_host: usize, of_account: usize) -> bool {
        let overall = match of_account {
            0 => self.overall.saturating_mul(2),
            _ => self.overall,
        };
        running < overall && on_host < self.per_host && of_account < self.per_account
    }
}

pub struct Dispatcher {
    bounds: Bounds,
    /// The delivery tasks; `None` once stopped: nothing new starts. Apart from `state`
    /// because a task can be dropped inside `spawn` (a runtime that shuts down drops what
    /// is spawned at once), and dropping a task gives its place back in `state`. So `state`
    /// is never held while a task is spawned or dropped; `tasks` is taken first.
    tasks: Mutex<Option<JoinSet<()>>>,
    state: Mutex<State>,
    /// The worker whose passes start the deliveries: woken when one of them needs another
    /// pass, told how many are in flight.
    workers: Arc<Workers>,
    worker: Worker,
}

#[derive(Default)]
struct State {
    /// Queue keys of the deliveries in flight.
    running: HashSet<Vec<u8>>,
    /// Queue keys of the deliveries that ended since the worker's current pass began (see
    /// [`Dispatcher::pass_begins`]); `None` outside a pass.
    ended: Option<HashSet<Vec<u8>>>,
    /// Deliveries in flight per destination host.
    hosts: HashMap<String, usize>,
    /// Deliveries in flight per account.
    accounts: HashMap<Uuid, usize>,
    /// A due delivery was not started for lack of a place: wake the worker when one frees.
    starved: bool,
    /// A failure (of the store) in a delivery task, reported by the worker's next pass.
    error: Option<PassError>,
    /// Destination hosts that failed transiently: none of their deliveries starts before
    /// the instant (the host's own back-off, doubling with its failures in a row).
    resting: HashMap<String, Rest>,
}

impl State {
    /// The deliveries in flight that the bounds of `to` count: to its host (none for the
    /// server's own inbox), and of its account.
    fn in_flight(&self, to: &Destination) -> (usize, usize) {
        let on_host = match to.own {
            true => 0,
            false => self.hosts.get(&to.host).copied().unwrap_or(0),
        };
        (on_host, self.accounts.get(&to.account).copied().unwrap_or(0))
    }
}

/// A destination host's back-off.
#[derive(Clone, Copy, Debug)]
struct Rest {
    until: Timestamp,
    failures: u32,
}

/// The most destination hosts whose back-off is kept (the map is keyed by what triggers
/// name): beyond it, those whose rest is over are forgotten first, then the soonest over.
const MOST_RESTING_HOSTS: usize = 4096;

impl Dispatcher {
    pub fn new(bounds: Bounds, workers: Arc<Workers>, worker: Worker) -> Arc<Dispatcher> {
        Arc::new(Dispatcher {
            bounds: Bounds {
                overall: bounds.overall.max(1),
                per_host: bounds.per_host.max(1),
                per_account: bounds.per_account.max(1),
            },
            tasks: Mutex::new(Some(JoinSet::new())),
            state: Mutex::new(State::default()),
            workers,
            worker,
        })
    }

    fn wake(&self) {
        self.workers.wake_here(self.worker);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the queue entry `key` is in flight, or ended since the current pass began:
    /// either way the pass must not start it (what the pass read of the queue may predate
    /// the entry's removal by its task).
    pub fn is_running(&self, key: &[u8]) -> bool {
        let state = self.state();
        state.running.contains(key) || state.ended.as_ref().is_some_and(|e| e.contains(key))
    }

    /// A pass begins, before it reads the queue: deliveries that end from now on are
    /// remembered until the next pass, so that an entry read before its task removed it is
    /// not started again (a second e-mail, a second request to an inbox). Bounded: only
    /// the tasks that end during one pass.
    pub fn pass_begins(&self) {
        self.state().ended = Some(HashSet::new());
    }

    /// Starts `job`, the delivery of queue entry `key` to `to`, as a task of its own,
    /// unless it is running already or a bound is reached. The job answers whether the
    /// worker must run again (it postponed the delivery: the worker's next wake-up may have
    /// to come sooner); an `Err` is a failure of the store, reported by the next pass.
    pub fn start<F>(self: &Arc<Self>, key: Vec<u8>, to: Destination, job: F) -> Start
    where
        F: Future<Output = Result<bool, PassError>> + Send + 'static,
    {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tasks) = tasks.as_mut() else {
            return Start::Full;
        };
        // results of finished tasks are kept until joined
        while let Some(done) = tasks.try_join_next() {
            if let Err(e) = done {
                if e.is_panic() {
                    tracing::error!("a delivery task panicked: {e}");
                }
            }
        }
        {
            let mut state = self.state();
            if state.running.contains(&key) || state.ended.as_ref().is_some_and(|e| e.contains(&key)) {
                return Start::Running;
            }
            let (on_host, of_account) = state.in_flight(&to);
            if !self.bounds.admits(state.running.len(), on_host, of_account) {
                state.starved = true;
                return Start::Full;
            }
            state.running.insert(key.clone());
            *state.hosts.entry(to.host.clone()).or_insert(0) += 1;
            *state.accounts.entry(to.account).or_insert(0) += 1;
        }
        self.workers.delivery_started(self.worker);
        let place = Place {
            dispatcher: self.clone(),
            key,
            to,
        };
        tasks.spawn(async move {
            let again = match job.await {
                Ok(again) => again,
                Err(e) => {
                    place.dispatcher.state().error = Some(e);
                    true
                }
            };
            let dispatcher = place.dispatcher.clone();
            drop(place);
            if again {
                dispatcher.wake();
            }
        });
        Start::Started
    }

    /// Whether a delivery to `to` would start now, without starting it: a pass claims a
    /// delivery (several processes on one database) only when it can start it. A `false`
    /// is remembered as [`Start::Full`] is: the place that frees wakes the worker.
    pub fn has_place(&self, to: &Destination) -> bool {
        if self.tasks.lock().unwrap_or_else(|p| p.into_inner()).is_none() {
            return false;
        }
        let mut state = self.state();
        let (on_host, of_account) = state.in_flight(to);
        let admits = self.bounds.admits(state.running.len(), on_host, of_account);
        if !admits {
            state.starved = true;
        }
        admits
    }

    /// Until when deliveries to `host` wait (its back-off after a transient failure), if
    /// it rests at `now`.
    pub fn rests_until(&self, host: &str, now: Timestamp) -> Option<Timestamp> {
        self.state()
            .resting
            .get(host)
            .map(|r| r.until)
            .filter(|until| *until > now)
    }

    /// A delivery to `host` failed transiently at `now`: the host rests for `wait(n)`, n its
    /// failures in a row (from 1), so that its other deliveries wait too instead of each
    /// trying it.
    pub fn host_failed(&self, host: &str, now: Timestamp, wait: impl Fn(u32) -> std::time::Duration) {
        let mut state = self.state();
        if !state.resting.contains_key(host) && state.resting.len() >= MOST_RESTING_HOSTS {
            state.resting.retain(|_, r| r.until > now);
            if state.resting.len() >= MOST_RESTING_HOSTS {
                let soonest = state
                    .resting
                    .iter()
                    .min_by_key(|(_, r)| r.until)
                    .map(|(h, _)| h.clone());
                if let Some(h) = soonest {
                    state.resting.remove(&h);
                }
            }
        }
        let rest = state.resting.entry(host.to_owned()).or_insert(Rest {
            until: now,
            failures: 0,
        });
        rest.failures += 1;
        let until = now.plus(wait(rest.failures));
        if until > rest.until {
            rest.until = until;
        }
    }

    /// `host` answered (a delivery went through, or failed for good): it rests no more.
    pub fn host_answered(&self, host: &str) {
        self.state().resting.remove(host);
    }

    /// The failure of a delivery task since the last call, if any.
    pub fn take_error(&self) -> Option<PassError> {
        self.state().error.take()
    }

    /// Abandons the deliveries in flight (they stay pending in the database) and starts no
    /// more; returns once their tasks have ended.
    pub async fn stop(&self) {
        let tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut tasks) = tasks {
            tasks.shutdown().await;
        }
    }
}

/// A delivery's place among those in flight, given back when its task ends (also when the
/// task is aborted or panics).
struct Place {
    dispatcher: Arc<Dispatcher>,
    key: Vec<u8>,
    to: Destination,
}

/// Counts one fewer under `key`, forgetting keys that reach zero (the maps stay as small as
/// what is in flight).
fn release<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let starved = {
            let mut state = self.dispatcher.state();
            state.running.remove(&self.key);
            if let Some(ended) = state.ended.as_mut() {
                ended.insert(std::mem::take(&mut self.key));
            }
            release(&mut state.hosts, &self.to.host);
            release(&mut state.accounts, &self.to.account);
            std::mem::take(&mut state.starved)
        };
        self.dispatcher.workers.delivery_ended(self.dispatcher.worker);
        if starved {
            self.dispatcher.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use std::time::Duration;
    use tokio::sync::Notify;

    const WORKER: Worker = Worker::TriggeredInboxItemSender;

    fn bounds(overall: usize, per_host: usize, per_account: usize) -> Bounds {
        Bounds {
            overall,
            per_host,
            per_account,
        }
    }

    fn to(host: &str, account: u128) -> Destination {
        Destination {
            host: host.into(),
            account: Uuid::from_u128(account),
            own: false,
        }
    }

    fn workers() -> Arc<Workers> {
        Arc::new(Workers::new(&Settings::with_data_dir("/tmp/unused"), |_| true))
    }

    fn in_flight(workers: &Workers) -> usize {
        workers.activity(WORKER).borrow().deliveries
    }

    /// A job that runs until `release` is notified.
    fn held(release: &Arc<Notify>) -> impl Future<Output = Result<bool, PassError>> + Send + 'static {
        let release = release.clone();
        async move {
            release.notified().await;
            Ok(false)
        }
    }

    #[test]
    fn a_failed_host_rests_doubling_until_it_answers_and_the_rests_kept_are_bounded() {
        let d = Dispatcher::new(bounds(3, 2, 3), workers(), WORKER);
        let now = Timestamp::from_unix(1_000, 0);
        let wait = |n: u32| Duration::from_secs(10 << (n - 1));
        assert_eq!(d.rests_until("a:1", now), None);
        d.host_failed("a:1", now, wait);
        assert_eq!(d.rests_until("a:1", now), Some(now.plus(Duration::from_secs(10))));
        d.host_failed("a:1", now, wait);
        assert_eq!(d.rests_until("a:1", now), Some(now.plus(Duration::from_secs(20))));
        assert_eq!(d.rests_until("a:1", now.plus(Duration::from_secs(20))), None, "over");
        d.host_answered("a:1");
        assert_eq!(d.rests_until("a:1", now), None);
        for h in 0..MOST_RESTING_HOSTS + 100 {
            d.host_failed(&format!("h{h}:1"), now, wait);
        }
        assert!(d.state().resting.len() <= MOST_RESTING_HOSTS);
        assert!(d.rests_until(&format!("h{}:1", MOST_RESTING_HOSTS + 99), now).is_some());
    }

    /// A delivery that ends while a pass runs is not started again by that pass (its read
    /// of the queue may predate the task's removal of the entry): not before the next pass.
    #[tokio::test]
    async fn an_entry_that_ended_during_a_pass_is_not_started_again_by_it() {
        let workers = workers();
        let d = Dispatcher::new(bounds(3, 3, 3), workers.clone(), WORKER);
        d.pass_begins();
        let release = Arc::new(Notify::new());
        assert_eq!(d.start(vec![7], to("a", 1), held(&release)), Start::Started);
        release.notify_one();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while in_flight(&workers) > 0 {
            assert!(tokio::time::Instant::now() < deadline, "the job did not end");
            tokio::task::yield_now().await;
        }
        assert!(d.is_running(&[7]), "ended during this pass");
        assert_eq!(d.start(vec![7], to("a", 1), held(&release)), Start::Running);
        d.pass_begins();
        assert!(!d.is_running(&[7]), "a new pass reads the queue after the end");
        assert_eq!(d.start(vec![7], to("a", 1), held(&release)), Start::Started);
        release.notify_one();
    }

    #[tokio::test]
    async fn bounds_per_host_and_overall_and_a_freed_place_wakes_the_worker() {
        let workers = workers();
        let d = Dispatcher::new(bounds(3, 2, 3), workers.clone(), WORKER);
        let release = Arc::new(Notify::new());
        let key = |n: u8| vec![n];
        assert_eq!(d.start(key(1), to("a", 1), held(&release)), Start::Started);
        assert_eq!(d.start(key(1), to("a", 1), held(&release)), Start::Running);
        assert_eq!(d.start(key(2), to("a", 2), held(&release)), Start::Started);
        assert_eq!(
            d.start(key(3), to("a", 3), held(&release)),
            Start::Full,
            "two per host, whoever sends"
        );
        assert_eq!(d.start(key(4), to("b", 4), held(&release)), Start::Started);
        assert_eq!(
            d.start(key(5), to("c", 4), held(&release)),
            Start::Full,
            "three overall for an account with a delivery in flight"
        );
        assert!(d.is_running(&key(1)) && !d.is_running(&key(3)));
        assert_eq!(in_flight(&workers), 3);
        let woken = tokio::time::timeout(Duration::from_millis(50), workers.woken(WORKER)).await;
        assert!(woken.is_err(), "woken before a place freed");

        release.notify_one();
        tokio::time::timeout(Duration::from_secs(5), workers.woken(WORKER))
            .await
            .expect("no wake-up after a place freed");
        assert_eq!(in_flight(&workers), 2);
        assert_eq!(d.start(key(5), to("c", 5), held(&release)), Start::Started);
        d.stop().await;
        assert!(!d.is_running(&key(1)), "stopping gives every place back");
        assert_eq!(in_flight(&workers), 0);
        assert_eq!(d.start(key(6), to("d", 6), held(&release)), Start::Full, "stopped");
    }

    /// Deliveries to the server's own inbox count no bound of a host: the accounts' and
    /// the overall bounds hold them; other hosts keep theirs.
    #[tokio::test]
    async fn the_own_inbox_is_bounded_per_account_and_overall_not_per_host() {
        let workers = workers();
        let d = Dispatcher::new(bounds(4, 1, 3), workers.clone(), WORKER);
        let release = Arc::new(Notify::new());
        let own = |account: u128| Destination {
            own: true,
            ..to("127.0.0.1:8001", account)
        };
        for n in 1..=3 {
            assert!(d.has_place(&own(1)));
            assert_eq!(d.start(vec![n], own(1), held(&release)), Start::Started, "delivery {n}");
        }
        assert!(!d.has_place(&own(1)), "three per account");
        assert_eq!(d.start(vec![4], own(1), held(&release)), Start::Full);
        assert_eq!(d.start(vec![5], own(2), held(&release)), Start::Started);
        assert_eq!(
            d.start(vec![6], own(2), held(&release)),
            Start::Full,
            "four overall for an account with a delivery in flight"
        );
        assert_eq!(d.start(vec![7], to("a", 3), held(&release)), Start::Started);
        assert_eq!(
            d.start(vec![8], to("a", 4), held(&release)),
            Start::Full,
            "another host keeps its bound"
        );
        d.stop().await;
    }

    /// The overall bound keeps out no account that has nothing in flight: strangers who
    /// fill it leave the first place of every other account free, up to twice the bound.
    #[tokio::test]
    async fn full_places_never_keep_out_an_account_with_nothing_in_flight() {
        let d = Dispatcher::new(bounds(4, 4, 2), workers(), WORKER);
        let release = Arc::new(Notify::new());
        // two strangers fill the four places
        for n in 0..4u8 {
            let stranger = u128::from(n / 2) + 1;
            assert_eq!(
                d.start(vec![n], to(&format!("s{n}"), stranger), held(&release)),
                Start::Started
            );
        }
        assert_eq!(
            d.start(vec![9], to("s9", 1), held(&release)),
            Start::Full,
            "the strangers' share"
        );
        // every other account still gets its first place, up to twice the bound (8)
        for account in 10..14u8 {
            assert_eq!(
                d.start(
                    vec![account],
                    to(&format!("h{account}"), u128::from(account)),
                    held(&release)
                ),
                Start::Started,
                "account {account}"
            );
            assert_eq!(
                d.start(vec![account + 100], to("other", u128::from(account)), held(&release)),
                Start::Full,
                "one place beyond the bound per account"
            );
        }
        assert_eq!(
            d.start(vec![20], to("h20", 20), held(&release)),
            Start::Full,
            "the ceiling"
        );
        d.stop().await;
    }

    /// One account's deliveries to many hosts take at most its share of the places; other
    /// accounts still find theirs, and a freed place of that account is its own again.
    #[tokio::test]
    async fn one_account_takes_at_most_its_share() {
        let d = Dispatcher::new(bounds(8, 4, 3), workers(), WORKER);
        let release = Arc::new(Notify::new());
        for n in 0..3 {
            assert_eq!(
                d.start(vec![n], to(&format!("h{n}"), 1), held(&release)),
                Start::Started
            );
        }
        assert_eq!(
            d.start(vec![3], to("h3", 1), held(&release)),
            Start::Full,
            "three per account"
        );
        // another account on the same hosts is not held up by the first one's share
        for n in 4..7 {
            assert_eq!(
                d.start(vec![n], to(&format!("h{}", n - 4), 2), held(&release)),
                Start::Started
            );
        }
        assert_eq!(
            d.start(vec![7], to("h7", 2), held(&release)),
            Start::Full,
            "its share too"
        );
        assert_eq!(d.start(vec![8], to("h8", 3), held(&release)), Start::Started);
        release.notify_one();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while d.start(vec![3], to("h3", 1), held(&release)) != Start::Started {
            assert!(
                tokio::time::Instant::now() < deadline,
                "a freed place was not given back"
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // poll: the task ends on its own
        }
        d.stop().await;
    }

    /// A task spawned while the runtime shuts down (a test that ends while a pass starts
    /// deliveries) is dropped at once, inside `start`: its place is given back without a
    /// deadlock.
    #[test]
    fn a_delivery_dropped_by_a_closing_runtime_gives_its_place_back() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let handle = runtime.handle().clone();
        drop(runtime);
        let workers = workers();
        let d = Dispatcher::new(bounds(2, 2, 2), workers.clone(), WORKER);
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _entered = handle.enter();
            d.start(vec![1], to("a", 1), async { Ok(false) });
            done.send(d.is_running(&[1])).unwrap();
        });
        let running = answer
            .recv_timeout(Duration::from_secs(5))
            .expect("start returns (no deadlock)");
        assert!(!running, "the place was given back");
        assert_eq!(in_flight(&workers), 0);
    }

    #[tokio::test]
    async fn failures_are_kept_for_the_next_pass() {
        let d = Dispatcher::new(bounds(2, 2, 2), workers(), WORKER);
        assert_eq!(
            d.start(vec![1], to("a", 1), async {
                Err(PassError::Provider("disk on fire".to_string()))
            }),
            Start::Started
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let error = loop {
            if let Some(e) = d.take_error() {
                break e;
            }
            assert!(tokio::time::Instant::now() < deadline, "the failure was not reported");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(error.to_string(), "the payment provider: disk on fire");
        assert!(d.take_error().is_none());
    }
}
