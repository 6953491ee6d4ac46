//! Several server processes on one PostgreSQL database behave as one server (issue 21):
//! what is written through one is read through every other, a token made by one is good at
//! all, login throttling counts across them, 200 reminders due at once land in the target
//! inbox exactly once each, and a process killed with `kill -9` in the middle of deliveries
//! leaves nothing lost and nothing doubled. Each test starts a throwaway cluster
//! (tests/common/postgres.rs) and the real binary; without PostgreSQL they skip loudly
//! (CI sets PIGEONHOLE_REQUIRE_POSTGRES=1).

use crate::common;

use base64::Engine;
use common::postgres::Cluster;
use common::process::{Proc, Services};
use common::scheduler::{add_inbox_trigger, wait_for_within};
use common::{Api, Auth};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tempfile::TempDir;

/// The flags of every process here: fast workers, and claims that another process takes
/// over two seconds after their holder stopped renewing them.
const FAST: [&str; 6] = [
    "--looper-period",
    "1",
    "--looper-retry-delay-us",
    "100000",
    "--database-lease-secs",
    "2",
];

/// A cluster with one fresh database; its URL.
fn database(test: &str) -> Option<(Cluster, String)> {
    let cluster = Cluster::start_or_skip(test)?;
    let db = cluster.fresh_database();
    let url = cluster.url(&db);
    Some((cluster, url))
}

/// A server process on the database `url` (a data directory of its own for its local files).
async fn process(url: &str, dirs: &TempDir, extra: &[&str]) -> Proc {
    let data = tempfile::tempdir_in(dirs.path()).expect("a data directory");
    let data = data.keep();
    let mut args = vec!["--database", url, "--admin", "admin"];
    args.extend_from_slice(&FAST);
    args.extend_from_slice(extra);
    Proc::start(&data, dirs.path(), Services::Both, &args).await
}

/// `n` processes on the database `url`.
async fn processes(n: usize, url: &str, dirs: &TempDir) -> Vec<Proc> {
    let mut all = Vec::new();
    for _ in 0..n {
        all.push(process(url, dirs, &[]).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_process_writes_every_other_reads_and_their_tokens_are_one_servers() {
    let Some((_cluster, url)) = database("what_one_process_writes_every_other_reads") else {
        return;
    };
    let dirs = tempfile::tempdir().expect("temporary directory");
    let ps = processes(3, &url, &dirs).await;
    // registered through the first, logged in through the second, the token used at the third
    ps[0].api.register("alice", "a passphrase").await.expect_registered();
    let token = ps[1].api.login_ok("alice", "a passphrase").await;
    let mut added = Vec::new();
    for (n, p) in ps.iter().enumerate() {
        added.push(p.api.add_text(&token, &format!("through process {n}")).await);
    }
    added.sort();
    for p in &ps {
        let mut seen = p.api.uuids(&token).await;
        seen.sort();
        assert_eq!(seen, added, "every process reads every item");
        assert_eq!(p.api.size(&token).await, 3);
    }
    // a scheduler item likewise, and the account is one account everywhere
    ps[2]
        .scheduler
        .register("alice", "a passphrase")
        .await
        .expect_registered();
    let planner = ps[2].scheduler.login_ok("alice", "a passphrase").await;
    let id = ps[0]
        .scheduler
        .add_tickle(&planner, &common::scheduler::future_tickle("later"))
        .await;
    for p in &ps {
        let items = p.scheduler.tickles(&planner, None).await;
        assert_eq!(items.len(), 1, "{items:?}");
        assert_eq!(items[0]["id"], json!(id), "{items:?}");
    }
    // a second registration of the name through another process is refused
    ps[1].api.register("alice", "another").await.expect_error(409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_throttling_counts_across_processes() {
    let Some((_cluster, url)) = database("login_throttling_counts_across_processes") else {
        return;
    };
    let dirs = tempfile::tempdir().expect("temporary directory");
    let ps = processes(3, &url, &dirs).await;
    ps[0].api.register("bob", "the right one").await.expect_registered();
    // ten failures, spread over the three processes: the limit of one server
    for n in 0..10 {
        let r = ps[n % 3].api.login("bob", "wrong").await;
        r.expect_error(401);
    }
    for p in &ps {
        p.api.login("bob", "the right one").await.expect_error(429);
    }
}

/// An inbox account on `target` with an access key that may add items: (username, key).
async fn inbox_account(target: &Api) -> (String, String) {
    target
        .register("collector", "collects things")
        .await
        .expect_registered();
    let auth = target.login_ok("collector", "collects things").await;
    let (secret, _id) = target.add_key(&auth, "scheduler", &["PermitAdd"]).await;
    ("collector".into(), secret)
}

/// Item contents due one minute ago (the account's default offset is 0).
fn due_now(content: &str) -> Value {
    due_at(content, time::OffsetDateTime::now_utc() - time::Duration::minutes(1))
}

/// Item contents due at `t` (to the second; the account's default offset is 0).
pub(super) fn due_at(content: &str, t: time::OffsetDateTime) -> Value {
    json!({
        "content": content,
        "scheduled-day": format!("{:04}-{:02}-{:02}", t.year(), t.month() as u8, t.day()),
        "scheduled-time": format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
        "recurrence": null,
    })
}

/// The target inbox of a test's deliveries: a server of its own (sled) in `dirs`, where
/// duplicates would show, with its collecting account's credentials for the scheduler
/// (username, access key) and a login of it.
pub(super) async fn target_inbox(dirs: &TempDir) -> (Proc, (String, String), Auth) {
    let dir = tempfile::tempdir_in(dirs.path()).expect("target directory").keep();
    let target = Proc::start(&dir, dirs.path(), Services::Both, &[]).await;
    let credentials = inbox_account(&target.api).await;
    let collector = target.api.login_ok("collector", "collects things").await;
    (target, credentials, collector)
}

/// Asserts that the target's account holds each of `items` exactly once, and nothing else.
pub(super) async fn assert_each_once(target: &Api, collector: &Auth, items: &[String]) {
    let landed = arrived(target, collector).await;
    let doubled: Vec<_> = landed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "delivered more than once: {doubled:?}");
    assert_eq!(
        landed.keys().cloned().collect::<Vec<_>>(),
        items,
        "every item, nothing lost"
    );
}

/// The texts of the target account's inbox items, each with how many times it is there.
pub(super) async fn arrived(target: &Api, auth: &Auth) -> BTreeMap<String, usize> {
    let v = target.get("/inbox/items", auth).await.expect_json(200);
    let mut texts = BTreeMap::new();
    for item in v.as_array().expect("inbox items are an array") {
        let data = item["contents"]["data"].as_str().expect("an item's data");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64 data");
        let text = String::from_utf8(bytes).expect("text items");
        *texts.entry(text).or_insert(0) += 1;
    }
    texts
}

/// How long the deliveries of a test may take at most (the slow machine of a CI run, a
/// lease that must run out first).
pub(super) const DELIVERED_WITHIN: Duration = Duration::from_secs(120);

/// Waits until every one of the `n` triggered items of `planner` has its one delivery
/// finished (so nothing is pending that could still arrive twice).
pub(super) async fn wait_delivered(scheduler: &Api, planner: &Auth, n: usize) {
    let deadline = tokio::time::Instant::now() + DELIVERED_WITHIN;
    loop {
        let v = scheduler
            .get("/scheduler/items?filter=onlytriggered", planner)
            .await
            .expect_json(200);
        let items = v.as_array().expect("items").clone();
        let attempts = |i: &Value| {
            i["triggered"]["triggeredInfoTriggerTriggerAttempts"]
                .as_array()
                .map_or(0, |a| a.len())
        };
        if items.len() == n && items.iter().all(|i| attempts(i) == 1) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {DELIVERED_WITHIN:?} waiting for {n} triggered items each delivered: {} \
             triggered, {} with an attempt; one without: {:?}",
            items.len(),
            items.iter().filter(|i| attempts(i) > 0).count(),
            items.iter().find(|i| attempts(i) == 0)
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // poll
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_reminders_due_at_once_land_exactly_once_each() {
    let Some((_cluster, url)) = database("two_hundred_reminders_due_at_once_land_exactly_once_each") else {
        return;
    };
    let dirs = tempfile::tempdir().expect("temporary directory");
    let (target, credentials, collector) = target_inbox(&dirs).await;
    let ps = processes(3, &url, &dirs).await;
    ps[0]
        .scheduler
        .register("planner", "plans things")
        .await
        .expect_registered();
    let planner = ps[0].scheduler.login_ok("planner", "plans things").await;
    add_inbox_trigger(
        &ps[1].scheduler,
        &planner,
        &target.api.url(""),
        &credentials.0,
        &credentials.1,
    )
    .await;
    // all due at the same second, a little after they are all added: the three processes'
    // triggerers and senders then race for them
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(10);
    let items = (0..200).map(|n| format!("reminder {n:03}")).collect::<Vec<_>>();
    for (n, text) in items.iter().enumerate() {
        ps[n % 3].scheduler.add_tickle(&planner, &due_at(text, at)).await;
    }
    wait_delivered(&ps[2].scheduler, &planner, 200).await;
    assert_each_once(&target.api, &collector, &items).await;
}

/// A proxy in front of the target inbox that lets logins through, and while `holding`,
/// passes each added item on to the inbox (where it is stored) but never answers: the
/// delivering process waits, as for a slow peer, with its deliveries in the middle. Each
/// added item's answer comes `slow` after the inbox's; `added` counts the requests by
/// their `Idempotency-Key` (the delivery), and `unanswered` holds those whose answer has
/// not gone back yet.
pub(super) struct Proxy {
    pub(super) url: String,
    holding: Arc<AtomicBool>,
    held: Arc<AtomicUsize>,
    pub(super) added: Arc<Mutex<BTreeMap<String, usize>>>,
    pub(super) unanswered: Arc<Mutex<BTreeSet<String>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        Proxy::start_with(target, true, Duration::ZERO).await
    }

    /// A proxy that holds nothing and answers each added item `slow` late.
    pub(super) async fn slow(target: String, slow: Duration) -> Proxy {
        Proxy::start_with(target, false, slow).await
    }

    async fn start_with(target: String, holding: bool, slow: Duration) -> Proxy {
        use warp::Filter;
        let holding = Arc::new(AtomicBool::new(holding));
        let held = Arc::new(AtomicUsize::new(0));
        let added = Arc::new(Mutex::new(BTreeMap::new()));
        let unanswered = Arc::new(Mutex::new(BTreeSet::new()));
        let client = common::http_client();
        let (h, c, a, u) = (holding.clone(), held.clone(), added.clone(), unanswered.clone());
        let route = warp::method()
            .and(warp::path::full())
            .and(warp::header::headers_cloned())
            .and(warp::body::bytes())
            .then(
                move |method: warp::http::Method, path: warp::path::FullPath, headers: warp::http::HeaderMap, body| {
                    let (client, target, holding, held) = (client.clone(), target.clone(), h.clone(), c.clone());
                    let (added, unanswered) = (a.clone(), u.clone());
                    async move {
                        let item = path.as_str().ends_with("/item");
                        let key = headers
                            .get("idempotency-key")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned)
                            .filter(|_| item);
                        if let Some(key) = &key {
                            *added.lock().unwrap().entry(key.clone()).or_insert(0) += 1;
                            unanswered.lock().unwrap().insert(key.clone());
                        }
                        let mut request = client.request(method, format!("{target}{}", path.as_str())).body(body);
                        for name in ["content-type", "authorization", "idempotency-key", "cookie"] {
                            if let Some(v) = headers.get(name) {
                                request = request.header(name, v);
                            }
                        }
                        let answer = request.send().await;
                        if item && holding.load(Ordering::SeqCst) {
                            held.fetch_add(1, Ordering::SeqCst);
                            // stored by the inbox; its answer never reaches the deliverer
                            std::future::pending::<()>().await;
                        }
                        if item {
                            tokio::time::sleep(slow).await;
                        }
                        if let Some(key) = &key {
                            unanswered.lock().unwrap().remove(key);
                        }
                        let mut reply = warp::http::Response::builder();
                        let bytes = match answer {
                            Ok(answer) => {
                                reply = reply.status(answer.status().as_u16());
                                for (name, value) in answer.headers() {
                                    if name != "content-length" && name != "transfer-encoding" {
                                        reply = reply.header(name.as_str(), value.as_bytes());
                                    }
                                }
                                answer.bytes().await.unwrap_or_default()
                            }
                            Err(_) => {
                                reply = reply.status(502);
                                Default::default()
                            }
                        };
                        reply.body(bytes.to_vec()).expect("a response")
                    }
                },
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        tokio::spawn(warp::serve(route).incoming(listener).run());
        Proxy {
            url,
            holding,
            held,
            added,
            unanswered,
        }
    }

    /// Registers "planner" at `scheduler` with an inbox trigger through this proxy to the
    /// target account `credentials` (the trigger's check logs in and adds nothing, so it
    /// passes while answers are held); its credentials.
    async fn planner(&self, scheduler: &Api, credentials: &(String, String)) -> Auth {
        scheduler.register("planner", "plans things").await.expect_registered();
        let planner = scheduler.login_ok("planner", "plans things").await;
        self.holding.store(false, Ordering::SeqCst);
        add_inbox_trigger(scheduler, &planner, &self.url, &credentials.0, &credentials.1).await;
        self.holding.store(true, Ordering::SeqCst);
        planner
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_delivery_leaves_nothing_lost_and_nothing_doubled() {
    let Some((_cluster, url)) = database("a_process_killed_mid_delivery") else {
        return;
    };
    let dirs = tempfile::tempdir().expect("temporary directory");
    let (target, credentials, collector) = target_inbox(&dirs).await;
    let proxy = Proxy::start(target.api.url("")).await;
    // the first process triggers and starts delivering; the proxy holds the answers
    let first = process(&url, &dirs, &[]).await;
    let planner = proxy.planner(&first.scheduler, &credentials).await;
    let items = (0..30).map(|n| format!("errand {n:02}")).collect::<Vec<_>>();
    for text in &items {
        first.scheduler.add_tickle(&planner, &due_now(text)).await;
    }
    wait_for_within(
        DELIVERED_WITHIN,
        "deliveries in the middle (stored by the inbox, unanswered)",
        || async { (proxy.held.load(Ordering::SeqCst) >= 2).then_some(()) },
    )
    .await;
    let stored_before = arrived(&target.api, &collector).await.len();
    assert!(
        stored_before >= 2,
        "the held deliveries reached the inbox: {stored_before}"
    );
    first.kill_9();
    // a second process takes over once the dead one's claims run out; answers flow again
    proxy.holding.store(false, Ordering::SeqCst);
    let second = process(&url, &dirs, &[]).await;
    wait_delivered(&second.scheduler, &planner, items.len()).await;
    assert_each_once(&target.api, &collector, &items).await;
}

/// Pending deliveries are spread over the processes: one process works at most its bounds'
/// worth at a time (4 to one host) and gives back what it read but could not start, so a
/// second process delivers the rest at the same time: with a host that answers nothing, 8
/// deliveries hang at once, 4 from each process. (A process that kept every delivery it
/// read would leave the other idle, and 4 would hang.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_deliveries_are_spread_over_the_processes() {
    let Some((_cluster, url)) = database("pending_deliveries_are_spread_over_the_processes") else {
        return;
    };
    let dirs = tempfile::tempdir().expect("temporary directory");
    let (target, credentials, _collector) = target_inbox(&dirs).await;
    let proxy = Proxy::start(target.api.url("")).await;
    // claims that outlast the test: no delivery changes process by its lease running out
    let mut ps = Vec::new();
    for _ in 0..2 {
        let data = tempfile::tempdir_in(dirs.path()).expect("a data directory").keep();
        let args = [
            "--database",
            url.as_str(),
            "--looper-period",
            "1",
            "--database-lease-secs",
            "600",
        ];
        ps.push(Proc::start(&data, dirs.path(), Services::Both, &args).await);
    }
    let planner = proxy.planner(&ps[0].scheduler, &credentials).await;
    // all due at one second: one process's pass reads all 12 deliveries before the other's
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(3);
    for n in 0..12 {
        ps[n % 2]
            .scheduler
            .add_tickle(&planner, &due_at(&format!("errand {n:02}"), at))
            .await;
    }
    wait_for_within(
        DELIVERED_WITHIN,
        "8 deliveries hanging at once: 4 from each of the two processes",
        || async { (proxy.held.load(Ordering::SeqCst) >= 8).then_some(()) },
    )
    .await;
    // first attempts from both processes, none retried (a delivery whose request timed out
    // is postponed and tried again, which would also reach the proxy)
    for (n, p) in ps.iter().enumerate() {
        let log = p.log_text();
        assert!(log.contains(", attempt 1"), "process {n} delivered nothing:\n{log}");
        assert!(!log.contains(", attempt 2"), "process {n} retried:\n{log}");
    }
}
