//! `GET /healthz` on both services (issue 12, docs/operations.md): 200 with version, uptime,
//! the database's state and every worker's while all is well; 503 with the same body shape
//! when a worker's last pass failed or the database no longer takes writes.

use crate::common;

use common::scheduler::{fast_loopers, WAIT};
use common::{test_settings, Api, Auth, Method, Server, Worker};
use pigeonhole::clock::Clock;
use serde_json::Value;
use std::time::Duration;

/// The body every answer of `/healthz` has, whatever its status.
fn assert_shape(body: &Value) {
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"), "{body}");
    assert!(body["uptime-seconds"].is_u64(), "{body}");
    assert!(body["database"]["writable"].is_boolean(), "{body}");
    assert!(body["database"]["readable"].is_boolean(), "{body}");
    assert!(body["errored-workers"].is_array(), "{body}");
    // the process: its name, the engine, whether it leads (issue 30)
    assert!(
        body["process"]["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{body}"
    );
    assert_eq!(body["process"]["engine"], body["database"]["engine"], "{body}");
    assert!(body["process"]["leads"].is_boolean(), "{body}");
    let workers = body["workers"].as_object().expect("workers by name");
    assert_eq!(workers.len(), Worker::ALL.len(), "{body}");
    for worker in Worker::ALL {
        let w = &workers[worker.name()];
        assert!(
            w["status"].is_string() && w["passes"].is_u64() && w["failed-passes"].is_u64(),
            "{w}"
        );
    }
}

async fn health(api: &Api) -> (u16, Value) {
    let r = api.get("/healthz", &Auth::None).await;
    assert_eq!(r.media_type(), "application/json", "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let body = r.json();
    assert_shape(&body);
    (r.status, body)
}

#[tokio::test]
async fn healthz_is_200_with_version_uptime_database_and_workers_on_both_ports() {
    let server = Server::start_with(fast_loopers).await;
    // a pass of the triggerer has run: its status is "running" with a pass counted
    server.settle(&[Worker::Triggerer]).await;
    // alone on its database it leads once its first try of the lock is done (on
    // PostgreSQL a connection of its own: /healthz says "no" until then, waiting at most its
    // bound for it)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while health(&server.api).await.1["process"]["leads"] != true {
        assert!(std::time::Instant::now() < deadline, "a process alone never led");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for api in [&server.api, &server.scheduler] {
        let (status, body) = health(api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "ok");
        assert_eq!(body["database"]["writable"], true);
        assert_eq!(body["database"]["readable"], true);
        // no stored record failed to decode (tests/api/format.rs: "degraded" when one did)
        assert_eq!(body["database"]["undecodable-records"], 0, "{body}");
        assert_eq!(body["errored-workers"], serde_json::json!([]));
        // named host:pid, alone on its database (sled, or a database of its own): it leads;
        // the schema's version on PostgreSQL only, which has one
        assert!(
            body["process"]["id"]
                .as_str()
                .is_some_and(|id| id.contains(&format!(":{}", std::process::id()))),
            "{body}"
        );
        assert_eq!(body["process"]["leads"], true, "{body}");
        match body["database"]["engine"].as_str() {
            Some("sled") => assert!(body["database"].get("schema-version").is_none(), "{body}"),
            Some("postgres") => assert_eq!(
                body["database"]["schema-version"], body["database"]["binary-schema-version"],
                "{body}"
            ),
            _ => panic!("an engine: {body}"),
        }
        assert_eq!(body["workers"]["triggerer"]["status"], "running", "{body}");
        assert!(body["workers"]["triggerer"]["passes"].as_u64().unwrap() >= 1, "{body}");
        // no payment provider configured: its workers are off
        assert_eq!(body["workers"]["paymentsEventsFetcher"]["status"], "disabled");
        // HEAD answers as GET, without a body
        let head = api.send(api.request(Method::HEAD, "/healthz", &Auth::None)).await;
        assert_eq!(head.status, 200);
        assert!(head.body.is_empty());
        // other methods and neighbouring paths keep the table's answers
        assert_eq!(
            api.post("/healthz", &Auth::None, &serde_json::json!({})).await.status,
            405
        );
        for path in ["/health", "/healthz/", "/metrics", "/version"] {
            api.get(path, &Auth::None).await.expect_error(404);
        }
    }
}

/// A worker that fails and retries is `failing` and the server stays healthy (200): a
/// supervisor must not restart the server for one failed pass. After
/// `--looper-retry-amount` failed passes in a row it is `errored` and the answer is 503; it
/// goes on trying (scheduler.md §9.2), and once the cause is gone its first pass that
/// succeeds makes it running and the answer 200 again, without a restart.
#[tokio::test]
async fn healthz_is_200_while_a_worker_retries_503_once_errored_and_200_once_it_recovers() {
    async fn with_failing_fetcher(retry_amount: u32, failed_passes: u64) -> (Server, u16) {
        let closed = common::process::free_port();
        let server = Server::start_with(|s| {
            fast_loopers(s);
            s.payment_plan = Some(common::test_plan());
            s.payment_secret_key = Some("sk_test_unreachable".into());
            s.payment_api_url = format!("http://127.0.0.1:{closed}");
            s.looper_retry_amount = retry_amount;
        })
        .await;
        let mut fetcher = server.workers.activity(Worker::PaymentsEventsFetcher);
        tokio::time::timeout(WAIT, fetcher.wait_for(|a| a.failed >= failed_passes))
            .await
            .expect("failed passes within the wait")
            .expect("the workers' table lives");
        (server, closed)
    }

    // it keeps retrying for the whole test: failing, not errored
    let (retrying, _) = with_failing_fetcher(1_000, 1).await;
    for api in [&retrying.api, &retrying.scheduler] {
        let (status, body) = health(api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "ok");
        assert_eq!(body["errored-workers"], serde_json::json!([]));
        let w = &body["workers"]["paymentsEventsFetcher"];
        assert_eq!(w["status"], "failing", "{body}");
        assert!(w["failed-passes"].as_u64().unwrap() >= 1, "{body}");
    }

    // one retry allowed: the second failure in a row makes it errored
    let (errored, port) = with_failing_fetcher(1, 2).await;
    for api in [&errored.api, &errored.scheduler] {
        let (status, body) = health(api).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "unhealthy");
        assert_eq!(body["database"]["writable"], true, "the database is fine: {body}");
        assert_eq!(body["errored-workers"], serde_json::json!(["paymentsEventsFetcher"]));
        assert_eq!(body["workers"]["paymentsEventsFetcher"]["status"], "errored", "{body}");
    }
    // the provider comes up: the worker, still trying, runs again
    use warp::Filter;
    let events =
        warp::path!("v1" / "events").map(|| warp::reply::json(&serde_json::json!({"data": [], "has_more": false})));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the provider's port");
    let _provider = tokio::spawn(warp::serve(events).incoming(listener).run());
    let mut fetcher = errored.workers.activity(Worker::PaymentsEventsFetcher);
    let finished = fetcher.borrow().finished;
    tokio::time::timeout(WAIT, fetcher.wait_for(|a| a.finished > finished && a.failing == 0))
        .await
        .expect("a pass that succeeds within the wait")
        .expect("the workers' table lives");
    for api in [&errored.api, &errored.scheduler] {
        let (status, body) = health(api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["workers"]["paymentsEventsFetcher"]["status"], "running", "{body}");
    }
}

/// The store's fault injection ([`pigeonhole::store::Store::simulate_sync_failure_for_tests`]):
/// after a failed sync nothing is acknowledged any more, and the health check says so.
#[tokio::test]
async fn healthz_is_503_once_the_database_no_longer_takes_writes() {
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(&dir);
    let inbox = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheduler = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api = Api::new(format!("http://{}", inbox.local_addr().unwrap()));
    let scheduler_api = Api::new(format!("http://{}", scheduler.local_addr().unwrap()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let listeners = pigeonhole::Listeners {
        inbox: Some(inbox),
        scheduler: Some(scheduler),
    };
    let running = pigeonhole::launch::start(settings, listeners, Clock::real(), stopped)
        .await
        .expect("the server starts");
    let auth = api.user("alice").await;
    api.add_text(&auth, "before").await;
    assert_eq!(health(&api).await.0, 200);

    running.store().admin.simulate_sync_failure_for_tests();
    for api in [&api, &scheduler_api] {
        let (status, body) = health(api).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["status"], "unhealthy");
        assert_eq!(body["database"]["writable"], false, "{body}");
        assert!(body["database"]["error"].as_str().unwrap().contains("sync"), "{body}");
    }
    // what "not writable" means for a client: a write is refused, not acknowledged
    let r = api.post("/inbox/item", &auth, &common::text_item("after")).await;
    assert_eq!(r.status, 503, "{}", r.text());

    let _ = stop.send(true);
    // the stop's final flush fails too (the store is broken): only that it stops matters
    let _ = tokio::time::timeout(Duration::from_secs(60), running.finish())
        .await
        .expect("the server stops");
}

/// With `--no-scheduler` no worker runs: all show as disabled and the inbox is healthy.
#[tokio::test]
async fn without_the_scheduler_every_worker_is_disabled_and_the_inbox_is_healthy() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let proc = common::process::Proc::start(
        data.path(),
        logs.path(),
        common::process::Services::Both,
        &["--no-scheduler"],
    )
    .await;
    let (status, body) = health(&proc.api).await;
    assert_eq!(status, 200, "{body}");
    for worker in Worker::ALL {
        assert_eq!(body["workers"][worker.name()]["status"], "disabled", "{body}");
    }
    proc.stop().await;
}
