//! `--metrics` (issue 12, docs/operations.md): off by default; when on, a listener of its
//! own serves `GET /metrics` in the Prometheus text format, which these tests parse with an
//! independent parser (the `prometheus-parse` crate) before looking at samples.

use crate::common;

use common::scheduler::{fast_loopers, WAIT};
use common::{test_settings, text_item, Api, Auth, Method, Worker, VERIFICATION};
use pigeonhole::clock::Clock;
use pigeonhole::config::Settings;
use pigeonhole::workers::Workers;
use prometheus_parse::{Sample, Scrape, Value};
use std::net::SocketAddr;
use std::sync::Arc;
use tempfile::TempDir;

/// A server started through `launch::start`, which tells where its metrics listen.
struct Started {
    inbox: Api,
    scheduler: Api,
    metrics: Option<SocketAddr>,
    workers: Arc<Workers>,
    settings: Settings,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), String>>,
    _dir: TempDir,
}

async fn start(adjust: impl FnOnce(&mut Settings)) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let mut settings = test_settings(&dir);
    fast_loopers(&mut settings);
    adjust(&mut settings);
    let inbox = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheduler = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let inbox_api = Api::new(format!("http://{}", inbox.local_addr().unwrap()));
    let scheduler_api = Api::new(format!("http://{}", scheduler.local_addr().unwrap()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let listeners = pigeonhole::Listeners {
        inbox: Some(inbox),
        scheduler: Some(scheduler),
    };
    let running = pigeonhole::launch::start(settings.clone(), listeners, Clock::real(), stopped)
        .await
        .expect("the server starts");
    Started {
        inbox: inbox_api,
        scheduler: scheduler_api,
        metrics: running.metrics_address,
        workers: running.workers.clone(),
        settings,
        stop,
        task: tokio::spawn(running.finish()),
        _dir: dir,
    }
}

impl Started {
    async fn stop(self) {
        let _ = self.stop.send(true);
        let result = tokio::time::timeout(WAIT * 3, self.task)
            .await
            .expect("the server stops")
            .expect("no panic");
        assert_eq!(result, Ok(()));
    }

    /// Waits until each of `workers` in turn finished a pass that began after the call.
    async fn settle(&self, workers: &[Worker]) {
        for &w in workers {
            let settled = self.workers.settled(w);
            self.workers.wake(w);
            tokio::time::timeout(WAIT, settled)
                .await
                .expect("a pass within the wait");
        }
    }
}

/// Scrapes and parses; also checks the content type of the text format.
async fn scrape(metrics: &Api) -> Scrape {
    let r = metrics.get("/metrics", &Auth::None).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    Scrape::parse(r.text().lines().map(|l| Ok(l.to_owned()))).expect("a Prometheus text-format scrape")
}

/// The one sample of `metric` with exactly these labels.
fn sample<'a>(scrape: &'a Scrape, metric: &str, labels: &[(&str, &str)]) -> &'a Sample {
    let found: Vec<&Sample> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == metric && s.labels.len() == labels.len())
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .collect();
    assert_eq!(found.len(), 1, "{metric}{labels:?} in {:#?}", scrape.samples);
    found[0]
}

/// A counter's or gauge's value.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match sample(scrape, metric, labels).value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        ref other => panic!("{metric} is not a number: {other:?}"),
    }
}

/// A histogram's observation count (its `+Inf` bucket).
fn observations(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match &sample(scrape, metric, labels).value {
        Value::Histogram(buckets) => {
            buckets
                .iter()
                .find(|b| b.less_than == f64::INFINITY)
                .expect("a +Inf bucket")
                .count
        }
        other => panic!("{metric} is not a histogram: {other:?}"),
    }
}

#[tokio::test]
async fn metrics_are_off_by_default() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(Settings::with_data_dir(dir.path()).metrics_address, None);
    let server = start(|_| {}).await;
    assert_eq!(server.metrics, None, "no metrics listener");
    // and the service ports do not serve them either
    server.inbox.get("/metrics", &Auth::None).await.expect_error(404);
    server.scheduler.get("/metrics", &Auth::None).await.expect_error(404);
    server.stop().await;
}

#[tokio::test]
async fn a_scrape_counts_requests_by_route_name_deliveries_throttling_and_state() {
    let server = start(|s| s.metrics_address = Some("127.0.0.1:0".parse().unwrap())).await;
    let address = server.metrics.expect("metrics are on");
    assert!(address.ip().is_loopback() && address.port() != 0, "{address}");
    let metrics = Api::new(format!("http://{address}"));
    assert_eq!(server.settings.metrics_address.map(|a| a.ip()), Some(address.ip()));

    // requests: three items added, each read back by its id
    let alice = server.inbox.user("alice").await;
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(server.inbox.add_text(&alice, &format!("note {n}")).await);
    }
    for id in &ids {
        server.inbox.get(&format!("/inbox/item/{id}"), &alice).await.expect(200);
    }
    server.inbox.get("/no/such/path", &Auth::None).await.expect_error(404);
    server.inbox.get("/healthz", &Auth::None).await.expect(200);
    // login throttling: ten wrong passwords, then the eleventh attempt is refused
    for _ in 0..10 {
        server.inbox.login("alice", "wrong").await.expect_error(401);
    }
    server.inbox.login("alice", "wrong").await.expect_error(429);
    // a delivery: the verification e-mail of an e-mail trigger, sent to the outbox
    let bob = server.scheduler.user("bob").await;
    server.scheduler.add_email_trigger(&bob, "bob@example.org").await;
    server.settle(&VERIFICATION).await;
    server.settle(&[Worker::Triggerer]).await;

    let s = scrape(&metrics).await;
    // `add_text` posts JSON to /inbox/item: the AddItem route
    let labels = [("service", "inbox"), ("route", "AddItem"), ("status", "200")];
    assert_eq!(value(&s, "pigeonhole_http_requests_total", &labels), 3.0);
    assert_eq!(
        value(
            &s,
            "pigeonhole_http_requests_total",
            &[("service", "inbox"), ("route", "GetItem"), ("status", "200")]
        ),
        3.0
    );
    assert_eq!(
        value(
            &s,
            "pigeonhole_http_requests_total",
            &[("service", "inbox"), ("route", "unknown"), ("status", "404")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "pigeonhole_http_requests_total",
            &[("service", "inbox"), ("route", "Login"), ("status", "429")]
        ),
        1.0
    );
    assert_eq!(
        observations(
            &s,
            "pigeonhole_http_request_duration_seconds",
            &[("service", "inbox"), ("route", "AddItem")]
        ),
        3.0
    );
    // bounded labels: route names only, never a path or an id
    for x in s.samples.iter().filter(|x| x.metric.starts_with("pigeonhole_http_")) {
        let r = x.labels.get("route").expect("a route label");
        assert!(r.chars().all(|c| c.is_ascii_alphanumeric()), "route label {r:?}");
    }
    assert_eq!(
        value(
            &s,
            "pigeonhole_throttled_total",
            &[("service", "inbox"), ("kind", "login")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &s,
            "pigeonhole_deliveries_total",
            &[("channel", "email"), ("outcome", "sent")]
        ),
        1.0
    );
    // state read at scrape time
    assert_eq!(value(&s, "pigeonhole_items", &[("kind", "inbox")]), 3.0);
    assert_eq!(value(&s, "pigeonhole_items", &[("kind", "scheduled")]), 0.0);
    assert_eq!(value(&s, "pigeonhole_due_items", &[]), 0.0);
    assert_eq!(value(&s, "pigeonhole_database_writable", &[]), 1.0);
    assert_eq!(value(&s, "pigeonhole_worker_up", &[("worker", "triggerer")]), 1.0);
    assert!(value(&s, "pigeonhole_worker_passes_total", &[("worker", "triggerer")]) >= 1.0);
    assert_eq!(
        value(&s, "pigeonhole_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        1.0
    );
    // alone on its database: it leads; named with its engine; no PostgreSQL series
    assert_eq!(value(&s, "pigeonhole_leader", &[]), 1.0);
    assert!(
        s.samples
            .iter()
            .any(|x| x.metric == "pigeonhole_process_info" && x.labels.get("engine") == Some("sled")),
        "the process's engine"
    );
    assert!(!s
        .samples
        .iter()
        .any(|x| x.metric.starts_with("pigeonhole_database_pool")
            || x.metric.starts_with("pigeonhole_schema")
            || x.metric.starts_with("pigeonhole_claims")));
    // every acknowledged write went through a writer cycle
    assert!(observations(&s, "pigeonhole_writer_cycle_batches", &[]) >= 3.0);
    assert!(observations(&s, "pigeonhole_writer_sync_duration_seconds", &[]) >= 3.0);

    // the metrics listener serves nothing else
    metrics.get("/", &Auth::None).await.expect_error(404);
    let head = metrics
        .send(metrics.request(Method::HEAD, "/metrics", &Auth::None))
        .await;
    assert_eq!((head.status, head.body.len()), (200, 0));
    server.stop().await;
}

#[tokio::test]
async fn an_item_added_raises_the_counter_by_one() {
    let server = start(|s| s.metrics_address = Some("127.0.0.1:0".parse().unwrap())).await;
    let metrics = Api::new(format!("http://{}", server.metrics.unwrap()));
    let auth = server.inbox.user("carol").await;
    let labels = [("service", "inbox"), ("route", "AddItem"), ("status", "200")];
    let count = |s: &Scrape| {
        s.samples
            .iter()
            .find(|x| {
                x.metric == "pigeonhole_http_requests_total" && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v))
            })
            .map_or(0.0, |x| match x.value {
                Value::Counter(v) | Value::Untyped(v) => v,
                _ => f64::NAN,
            })
    };
    let before = count(&scrape(&metrics).await);
    server
        .inbox
        .post("/inbox/item", &auth, &text_item("one more"))
        .await
        .expect(200);
    assert_eq!(count(&scrape(&metrics).await), before + 1.0);
    server.stop().await;
}
