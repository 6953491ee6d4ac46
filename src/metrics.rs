//! The process's metrics in the Prometheus text format (`--metrics`, docs/operations.md),
//! kept with the official `prometheus-client` crate.
//!
//! Two kinds of numbers:
//! - **Recorded** as things happen, by the layers above (requests in `http`, login
//!   throttling in `auth`, deliveries and e-mails in `loopers`): counters and histograms
//!   whose hot path is a read lock, a hash and an atomic add — and nothing at all while
//!   metrics are off ([`Metrics::off`]).
//! - **Sampled** at scrape time from what the server already keeps (items stored, due items
//!   waiting, the writer's cycles, the workers): `launch` hands a [`Sampler`] that reads
//!   them, so that this module, below the store and the workers, knows neither.
//!
//! Labels are bounded: a request is counted by its service, the NAME of its route (never
//! the raw path, which holds ids) and its status.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, LabelSetEncoder, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The `Content-Type` of a scrape (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Upper bounds (seconds) of the request latency histogram.
const LATENCY_BUCKETS: [f64; 12] = [
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A request's labels: service, route name, status.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct RequestLabels {
    service: &'static str,
    route: &'static str,
    status: u16,
}

impl EncodeLabelSet for RequestLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("service", self.service).encode(encoder.encode_label())?;
        ("route", self.route).encode(encoder.encode_label())?;
        ("status", self.status).encode(encoder.encode_label())
    }
}

/// Labels of the latency histogram and of the other recorded families: a few fixed words.
type Words = [(&'static str, &'static str); 2];

#[derive(Clone, Debug)]
struct LatencyHistogram;

impl MetricConstructor<Histogram> for LatencyHistogram {
    fn new_metric(&self) -> Histogram {
        Histogram::new(LATENCY_BUCKETS)
    }
}

/// How a delivery attempt (inbox item or e-mail) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Delivered.
    Sent,
    /// Failed for now, tried again later.
    Retried,
    /// Failed for good.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Sent => "sent",
            Outcome::Retried => "retried",
            Outcome::Failed => "failed",
        }
    }
}

/// What is delivered: an item into an inbox service, an e-mail, a push message, a webhook.
pub use crate::domain::scheduler::models::Channel;

/// A histogram read from elsewhere at scrape time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramValues {
    /// Upper bounds of the buckets.
    pub bounds: Vec<f64>,
    /// Values per bucket (not cumulative): one more than `bounds`, the last above them all.
    pub counts: Vec<u64>,
    pub sum: f64,
}

/// One worker as sampled.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerSample {
    pub name: &'static str,
    /// `running`, `failing`, `errored`, `starting` or `disabled`.
    pub state: &'static str,
    pub passes: u64,
    pub failed_passes: u64,
}

/// A connection pool as sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolSample {
    pub max: u64,
    pub open: u64,
    pub idle: u64,
    pub waiting: u64,
}

/// What a PostgreSQL store did in this process (sampled from its counters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DatabaseSample {
    pub pool: PoolSample,
    /// Seconds callers waited for a pooled connection.
    pub pool_wait_seconds: HistogramValues,
    /// Seconds each store transaction took (wait, statements, commit, retries).
    pub transaction_seconds: HistogramValues,
    /// The database's schema version and the binary's (`None`: could not be read).
    pub schema: Option<(i64, i64)>,
    /// How long claims hold unless renewed.
    pub lease_seconds: f64,
    /// Claims whose lease ran out and that nobody took over yet, by queue (the leader's
    /// only: database-wide).
    pub expired_claims: Option<Vec<(&'static str, u64)>>,
    /// Claims on queued work: claimed, of them taken over after a lease ran out, released.
    pub claimed: u64,
    pub taken_over: u64,
    pub released: u64,
}

/// What the server keeps anyway, read at each scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The storage engine (`sled`, `postgres`) and this process's name.
    pub engine: &'static str,
    pub process: String,
    /// Whether this process exports the database-wide numbers (alone on sled; the holder
    /// of the overview's lock on a shared database).
    pub leads: bool,
    /// Items stored: inbox, scheduled and triggered items (`None`: the store failed, or
    /// another process leads).
    pub items: Option<(u64, u64, u64)>,
    /// Scheduled items that are due and not yet triggered (`None`: the store failed, or
    /// another process leads).
    pub due_items: Option<u64>,
    /// Batches per writer cycle that reached the disk (`None`: no group commit, PostgreSQL).
    pub writer_batches: Option<HistogramValues>,
    /// Seconds each cycle's flush and syncs took (`None`: no group commit).
    pub writer_sync_seconds: Option<HistogramValues>,
    /// The PostgreSQL store's pool, timings, schema and claims (`None`: sled).
    pub database: Option<DatabaseSample>,
    pub workers: Vec<WorkerSample>,
    /// Whether the database takes writes (see `Store::writable`).
    pub database_writable: bool,
}

/// Reads a [`Sample`] (made by `launch`).
pub type Sampler = Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Sample> + Send>> + Send + Sync>;

/// The process's metrics: recorded families and the scrape-time sampler.
pub struct Metrics {
    enabled: bool,
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<Words, Histogram, LatencyHistogram>,
    deliveries: Family<Words, Counter>,
    throttled: Family<Words, Counter>,
    sampler: Sampler,
    /// The latest sample, which the registry's collector encodes.
    sampled: Arc<std::sync::Mutex<Sample>>,
}

impl Metrics {
    /// Metrics that record nothing (`--metrics` not given): every recording call returns
    /// at once.
    pub fn off() -> Metrics {
        Metrics::build(false, Box::new(|| Box::pin(async { Sample::default() })))
    }

    /// Metrics that record, with `sampler` read at each scrape.
    pub fn on(sampler: Sampler) -> Metrics {
        Metrics::build(true, sampler)
    }

    fn build(enabled: bool, sampler: Sampler) -> Metrics {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "pigeonhole_http_requests",
            "HTTP requests answered, by service, route name and status",
            requests.clone(),
        );
        let request_seconds = Family::new_with_constructor(LatencyHistogram);
        registry.register(
            "pigeonhole_http_request_duration_seconds",
            "Time from routing a request to its answer, by service and route name",
            request_seconds.clone(),
        );
        let deliveries = Family::<Words, Counter>::default();
        registry.register(
            "pigeonhole_deliveries",
            "Delivery attempts (items into inbox services; e-mails: triggered items, verifications, admin notices), by channel (inbox, email) and outcome (sent, retried, failed)",
            deliveries.clone(),
        );
        let throttled = Family::<Words, Counter>::default();
        registry.register(
            "pigeonhole_throttled",
            "Attempts refused by the throttles (429), by service and kind (login, registration)",
            throttled.clone(),
        );
        let sampled = Arc::new(std::sync::Mutex::new(Sample::default()));
        registry.register_collector(Box::new(Sampled(sampled.clone())));
        Metrics {
            enabled,
            registry,
            requests,
            request_seconds,
            deliveries,
            throttled,
            sampler,
            sampled,
        }
    }

    /// Whether metrics are recorded (and served).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// A request of `service` to route `route` (its name; `unknown` for a path with none)
    /// answered `status` after `took`.
    pub fn request(&self, service: &'static str, route: &'static str, status: u16, took: Duration) {
        if !self.enabled {
            return;
        }
        self.requests
            .get_or_create(&RequestLabels { service, route, status })
            .inc();
        self.request_seconds
            .get_or_create(&[("service", service), ("route", route)])
            .observe(took.as_secs_f64());
    }

    /// A delivery attempt through `channel` ended with `outcome`.
    pub fn delivery(&self, channel: Channel, outcome: Outcome) {
        if !self.enabled {
            return;
        }
        let channel = match channel {
            Channel::Inbox => "inbox",
            Channel::Email => "email",
            Channel::Push => "push",
            Channel::Webhook => "webhook",
        };
        self.deliveries
            .get_or_create(&[("channel", channel), ("outcome", outcome.as_str())])
            .inc();
    }

    /// A login (`kind` = `login`) or registration (`registration`) of `service` was
    /// refused by its throttle.
    pub fn throttled(&self, service: &'static str, kind: &'static str) {
        if !self.enabled {
            return;
        }
        self.throttled
            .get_or_create(&[("service", service), ("kind", kind)])
            .inc();
    }

    /// Samples (the store's counts are read through its async traits), then encodes: what a
    /// scrape answers.
    pub async fn scrape(&self) -> String {
        let sample = (self.sampler)().await;
        *self.sampled.lock().unwrap_or_else(|p| p.into_inner()) = sample;
        self.encode()
    }

    /// Every metric in the Prometheus text format (version 0.0.4), with the latest sample.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry) {
            tracing::error!("could not encode the metrics: {e}");
        }
        out
    }
}

/// The scrape-time part of the registry.
struct Sampled(Arc<std::sync::Mutex<Sample>>);

impl fmt::Debug for Sampled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sampled")
    }
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn histogram(encoder: &mut DescriptorEncoder, name: &str, help: &str, h: &HistogramValues) -> Result<(), fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    let mut buckets: Vec<(f64, u64)> = h.bounds.iter().copied().zip(h.counts.iter().copied()).collect();
    buckets.push((f64::INFINITY, h.counts.get(h.bounds.len()).copied().unwrap_or(0)));
    let count = h.counts.iter().sum();
    metric.encode_histogram::<NoLabelSet>(h.sum, count, &buckets, None)
}

fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The PostgreSQL store's part of a sample.
fn encode_database(encoder: &mut DescriptorEncoder, d: &DatabaseSample) -> Result<(), fmt::Error> {
    let p = d.pool;
    for (name, help, value) in [
        (
            "pigeonhole_database_pool_max",
            "Connections this process's pool keeps at most.",
            p.max,
        ),
        (
            "pigeonhole_database_pool_open",
            "Connections of this process's pool open (idle and in use).",
            p.open,
        ),
        (
            "pigeonhole_database_pool_idle",
            "Connections of this process's pool open and idle.",
            p.idle,
        ),
        (
            "pigeonhole_database_pool_in_use",
            "Connections of this process's pool in use.",
            p.open.saturating_sub(p.idle),
        ),
        (
            "pigeonhole_database_pool_waiting",
            "Callers waiting for a connection of this process's pool.",
            p.waiting,
        ),
    ] {
        gauge(encoder, name, help, saturating_i64(value))?;
    }
    histogram(
        encoder,
        "pigeonhole_database_pool_wait_seconds",
        "Time store transactions waited for a pooled connection.",
        &d.pool_wait_seconds,
    )?;
    histogram(
        encoder,
        "pigeonhole_database_transaction_duration_seconds",
        "Time each store transaction took: the wait for a connection, its statements, its commit and retries.",
        &d.transaction_seconds,
    )?;
    {
        let mut m = encoder.encode_descriptor(
            "pigeonhole_claims",
            "Claims of this process on queued work (due items, deliveries, e-mails), by event: claimed (renewals included), taken_over (claimed after another process's lease ran out), released (given up at a graceful stop).",
            None,
            MetricType::Counter,
        )?;
        for (event, n) in [
            ("claimed", d.claimed),
            ("taken_over", d.taken_over),
            ("released", d.released),
        ] {
            let labels = [("event", event)];
            ConstCounter::new(n).encode(m.encode_family(&labels)?)?;
        }
    }
    {
        let m = encoder.encode_descriptor(
            "pigeonhole_claim_lease_seconds",
            "How long this process's claims on queued work hold unless renewed (--database-lease).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(d.lease_seconds).encode(m)?;
    }
    if let Some(expired) = &d.expired_claims {
        let mut m = encoder.encode_descriptor(
            "pigeonhole_claims_expired",
            "Claims on queued work whose lease ran out and that no process took over yet (a process died holding them), by queue; database-wide, exported by the leader only.",
            None,
            MetricType::Gauge,
        )?;
        for (queue, n) in expired {
            let labels = [("queue", *queue)];
            ConstGauge::new(saturating_i64(*n)).encode(m.encode_family(&labels)?)?;
        }
    }
    if let Some((database, binary)) = d.schema {
        let mut m = encoder.encode_descriptor(
            "pigeonhole_schema_version",
            "The PostgreSQL schema version, of the database (max of schema_migrations, read at each scrape) and of this binary (its latest migration).",
            None,
            MetricType::Gauge,
        )?;
        for (of, v) in [("database", database), ("binary", binary)] {
            let labels = [("of", of)];
            ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
        }
        gauge(
            encoder,
            "pigeonhole_schema_newer",
            "1 while the database's schema is newer than this binary knows (a newer version migrated it: upgrade this process; its /healthz answers 503).",
            i64::from(database > binary),
        )?;
    }
    Ok(())
}

impl Collector for Sampled {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner()).clone();
        {
            let mut m = encoder.encode_descriptor(
                "pigeonhole_build_info",
                "The running version (always 1).",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("version", env!("CARGO_PKG_VERSION"))];
            ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "pigeonhole_database_writable",
            "1 while the database takes writes (writer alive, no failed sync, last cycle on disk).",
            i64::from(s.database_writable),
        )?;
        if let Some((inbox, scheduled, triggered)) = s.items {
            let mut m = encoder.encode_descriptor(
                "pigeonhole_items",
                "Items stored, by kind (inbox, scheduled, triggered).",
                None,
                MetricType::Gauge,
            )?;
            for (kind, n) in [("inbox", inbox), ("scheduled", scheduled), ("triggered", triggered)] {
                let labels = [("kind", kind)];
                ConstGauge::new(saturating_i64(n)).encode(m.encode_family(&labels)?)?;
            }
        }
        if let Some(due) = s.due_items {
            gauge(
                &mut encoder,
                "pigeonhole_due_items",
                "Scheduled items that are due and not yet triggered.",
                saturating_i64(due),
            )?;
        }
        if let Some(h) = &s.writer_batches {
            histogram(
                &mut encoder,
                "pigeonhole_writer_cycle_batches",
                "Write batches carried by each writer cycle (group commit) that reached the disk.",
                h,
            )?;
        }
        if let Some(h) = &s.writer_sync_seconds {
            histogram(
                &mut encoder,
                "pigeonhole_writer_sync_duration_seconds",
                "Time each writer cycle took to flush and sync the database files.",
                h,
            )?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "pigeonhole_process_info",
                "This process: its name (host:pid, and on PostgreSQL its claimant id) and storage engine (always 1).",
                None,
                MetricType::Gauge,
            )?;
            let labels = [("process", s.process.as_str()), ("engine", s.engine)];
            ConstGauge::new(1i64).encode(m.encode_family(&labels)?)?;
        }
        gauge(
            &mut encoder,
            "pigeonhole_leader",
            "1 while this process exports the database-wide numbers (pigeonhole_items, pigeonhole_due_items): always on sled, one process of those sharing a PostgreSQL database.",
            i64::from(s.leads),
        )?;
        if let Some(d) = &s.database {
            encode_database(&mut encoder, d)?;
        }
        {
            let mut m = encoder.encode_descriptor(
                "pigeonhole_worker_up",
                "1 while an enabled worker's last pass went well, 0 while it fails or after it stopped errored.",
                None,
                MetricType::Gauge,
            )?;
            for w in s.workers.iter().filter(|w| w.state != "disabled") {
                let labels = [("worker", w.name)];
                let up = i64::from(matches!(w.state, "running" | "starting"));
                ConstGauge::new(up).encode(m.encode_family(&labels)?)?;
            }
        }
        for (name, help, value) in [
            (
                "pigeonhole_worker_passes",
                "Passes each worker finished.",
                (|w: &WorkerSample| w.passes) as fn(&WorkerSample) -> u64,
            ),
            (
                "pigeonhole_worker_failed_passes",
                "Passes of each worker that failed.",
                |w: &WorkerSample| w.failed_passes,
            ),
        ] {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for w in s.workers.iter().filter(|w| w.state != "disabled") {
                let labels = [("worker", w.name)];
                ConstCounter::new(value(w)).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn off_records_nothing_and_on_counts_by_route_name() {
        let off = Metrics::off();
        off.request("inbox", "AddItem", 200, Duration::from_millis(2));
        assert!(!off.encode().contains("route=\"AddItem\""));

        let on = Metrics::on(Box::new(|| {
            Box::pin(async {
                Sample {
                    items: Some((3, 2, 1)),
                    due_items: Some(4),
                    writer_batches: Some(HistogramValues {
                        bounds: vec![1.0, 2.0],
                        counts: vec![5, 1, 1],
                        sum: 10.0,
                    }),
                    workers: vec![WorkerSample {
                        name: "emailer",
                        state: "failing",
                        passes: 7,
                        failed_passes: 2,
                    }],
                    ..Sample::default()
                }
            })
        }));
        for _ in 0..3 {
            on.request("inbox", "AddItem", 200, Duration::from_millis(2));
        }
        on.delivery(Channel::Email, Outcome::Retried);
        on.throttled("inbox", "login");
        let text = on.scrape().await;
        for line in [
            "pigeonhole_http_requests_total{service=\"inbox\",route=\"AddItem\",status=\"200\"} 3",
            "pigeonhole_http_request_duration_seconds_count{service=\"inbox\",route=\"AddItem\"} 3",
            "pigeonhole_deliveries_total{channel=\"email\",outcome=\"retried\"} 1",
            "pigeonhole_throttled_total{service=\"inbox\",kind=\"login\"} 1",
            "pigeonhole_items{kind=\"scheduled\"} 2",
            "pigeonhole_due_items 4",
            "pigeonhole_writer_cycle_batches_bucket{le=\"2\"} 6",
            "pigeonhole_writer_cycle_batches_bucket{le=\"+Inf\"} 7",
            "pigeonhole_writer_cycle_batches_count 7",
            "pigeonhole_worker_up{worker=\"emailer\"} 0",
            "pigeonhole_worker_passes_total{worker=\"emailer\"} 7",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in:\n{text}");
        }
        assert!(
            !text.contains("pigeonhole_database_pool"),
            "no PostgreSQL series on sled"
        );
    }

    /// A PostgreSQL sample: the pool (in use = open − idle), the timings, the claims and a
    /// newer schema; no writer histograms, no database-wide numbers from a non-leader.
    #[tokio::test]
    async fn a_postgres_sample_exports_pool_claims_and_schema_but_no_writer_series() {
        let on = Metrics::on(Box::new(|| {
            Box::pin(async {
                Sample {
                    engine: "postgres",
                    process: "h:1:ab".into(),
                    database: Some(DatabaseSample {
                        pool: PoolSample {
                            max: 16,
                            open: 5,
                            idle: 2,
                            waiting: 1,
                        },
                        pool_wait_seconds: HistogramValues {
                            bounds: vec![0.001],
                            counts: vec![4, 1],
                            sum: 0.5,
                        },
                        schema: Some((4, 3)),
                        lease_seconds: 300.0,
                        claimed: 7,
                        taken_over: 2,
                        released: 3,
                        ..DatabaseSample::default()
                    }),
                    ..Sample::default()
                }
            })
        }));
        let text = on.scrape().await;
        for line in [
            "pigeonhole_process_info{process=\"h:1:ab\",engine=\"postgres\"} 1",
            "pigeonhole_leader 0",
            "pigeonhole_database_pool_max 16",
            "pigeonhole_database_pool_in_use 3",
            "pigeonhole_database_pool_waiting 1",
            "pigeonhole_database_pool_wait_seconds_count 5",
            "pigeonhole_claims_total{event=\"taken_over\"} 2",
            "pigeonhole_claims_total{event=\"released\"} 3",
            "pigeonhole_schema_version{of=\"database\"} 4",
            "pigeonhole_schema_version{of=\"binary\"} 3",
            "pigeonhole_schema_newer 1",
            "pigeonhole_claim_lease_seconds 300.0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in:\n{text}");
        }
        for absent in ["pigeonhole_writer_", "pigeonhole_items", "pigeonhole_due_items"] {
            assert!(!text.lines().any(|l| l.starts_with(absent)), "{absent} in:\n{text}");
        }
    }
}
