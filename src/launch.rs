//! Wiring: makes the shared [`Context`] once, serves the services on their listeners, runs
//! the workers, and at a stop flushes the database.

use crate::clock::Clock;
use crate::config::Settings;
use crate::context::Context;
use crate::domain::worker::Worker;
use crate::metrics::{DatabaseSample, HistogramValues, Metrics, PoolSample, Sample, WorkerSample};
use crate::shell::Shell;
use crate::workers::Workers;
use crate::{auth, control, datadir, http, inbox, loopers, mail, memory, outbound, payments, scheduler, store};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub mod database;
pub mod migrate;

/// Listeners for the services to run (`None`: that service is off).
pub struct Listeners {
    pub inbox: Option<TcpListener>,
    pub scheduler: Option<TcpListener>,
}

/// Opens the store in the settings' data directory and serves until `shutdown` turns true;
/// then stops accepting, finishes requests in flight and flushes the database.
pub async fn launch(settings: Settings, listeners: Listeners, shutdown: watch::Receiver<bool>) -> Result<(), String> {
    start(settings, listeners, Clock::real(), shutdown)
        .await?
        .finish()
        .await
}

/// A started server: the services answer on their listeners and the workers run, until
/// the shutdown signal.
pub struct Running {
    /// The workers' table: tests wait on it for passes that began after their event.
    pub workers: Arc<Workers>,
    /// Where the metrics listener is bound (`None`: metrics are off); with
    /// `--metrics-address 127.0.0.1:0` this is how tests learn the port.
    pub metrics_address: Option<SocketAddr>,
    store: Arc<store::Store>,
    settings: Arc<Settings>,
    tasks: Vec<JoinHandle<()>>,
    /// On a shared database: the data directory's lock (sled's store holds its own).
    _dir_lock: Option<std::fs::File>,
}

/// [`launch`] until everything runs: the store is open and the services and workers are
/// started, with `clock` as the workers' clock (tests may pass a manual one).
pub async fn start(
    settings: Settings,
    listeners: Listeners,
    clock: Clock,
    shutdown: watch::Receiver<bool>,
) -> Result<Running, String> {
    // reqwest (inbox deliveries) and lettre use rustls with ring; install it once
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Arc::new(settings);
    // PostgreSQL connects first (a database that cannot be reached leaves the data
    // directory untouched); a sled database of a newer format stops the start before
    // anything in the directory is touched (the process exits with status 1)
    let shared = match &settings.database {
        Some(url) => Some(open_postgres(&settings, url).await?),
        None => {
            store::format::check(&settings.data_dir).map_err(|e| e.to_string())?;
            None
        }
    };
    let tightened = datadir::prepare(&settings.data_dir)?;
    // the directory's lock: with sled the store takes it; on a shared database, this
    // process's local files (the outbox) still need a directory of their own
    let dir_lock = match &shared {
        Some(_) => Some(store::lock_dir(&settings.data_dir).map_err(|e| e.to_string())?),
        None => None,
    };
    if tightened > 0 {
        tracing::warn!(
            "the data directory {} was readable by others: {tightened} files and directories made private to this user",
            settings.data_dir.display()
        );
    }
    // With much data, opening the sled database is the slow part of a start: it runs on
    // another thread while the rest is built.
    let opening = match shared {
        Some(_) => None,
        None => {
            let dir = settings.data_dir.clone();
            Some(tokio::task::spawn_blocking(move || store::Store::open(&dir)))
        }
    };
    let tokens = Arc::new(match &shared {
        Some(shared) => shared.tokens(settings.token_lifetime).await?,
        None => auth::TokenKeys::load_or_create(&settings.data_dir, settings.token_lifetime)
            .map_err(|e| format!("cannot load the token signing key: {e}"))?,
    });
    let decoy = auth::passwords::Decoy::start(settings.password_iterations);
    let http = outbound::client();
    let open_files = http::server::raise_open_file_limit();
    // bound before anything else starts, so that a busy address fails the start
    let metrics_listener = match settings.metrics_address {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .map_err(|e| format!("cannot listen for the metrics on {addr}: {e}"))?,
        ),
        None => None,
    };
    let payments = Arc::new(payments::Payments::new(settings.clone(), http.clone()));
    let mailer = match listeners.scheduler {
        Some(_) => Some(mail::Mailer::new(&settings)?),
        None => None,
    };
    let (store, shared) = match (opening, shared) {
        (Some(opening), _) => (
            opening
                .await
                .map_err(|e| format!("opening the database failed: {e}"))?
                .map_err(|e| match e {
                    // already names the directory
                    store::StoreError::Locked(_) => e.to_string(),
                    e => format!(
                        "cannot open the database in {}: {e}",
                        settings.data_dir.join("db").display()
                    ),
                })?,
            None,
        ),
        (None, Some(shared)) => (shared.store.clone(), Some(shared)),
        (None, None) => unreachable!("a store is opening or open"),
    };
    warn_about_unregistered_admins(
        &settings,
        &store,
        listeners.inbox.is_some(),
        listeners.scheduler.is_some(),
    )
    .await;
    // without the scheduler service no worker runs: they show as disabled, not starting
    let scheduler_on = listeners.scheduler.is_some();
    let workers = Arc::new(Workers::new(&settings, |w| scheduler_on && loopers::runs(w, &settings)));
    let mut tasks = Vec::new();
    if let Some(shared) = &shared {
        tasks.push(shared.wake_across(&workers, shutdown.clone()));
        tasks.push(tokio::spawn(watch_database(store.clone(), shutdown.clone())));
    }
    let metrics = Arc::new(match metrics_listener {
        Some(_) => Metrics::on(sampler(store.clone(), workers.clone(), clock.clone())),
        None => Metrics::off(),
    });
    let limits = Arc::new(
        http::Limits::new(
            settings.timeouts,
            http::server::connection_bound(open_files),
            Duration::from_secs(10),
        )
        .with_metrics(metrics.clone())
        .with_undecodable(store.undecodable().clone()),
    );
    tracing::debug!(
        "at most {} connections at once ({open_files} open files allowed)",
        limits.connections.bound()
    );
    let ctx = Arc::new(Context {
        settings: settings.clone(),
        store: store.clone(),
        tokens,
        decoy,
        payments,
        http,
        inbox_client: outbound::InboxClient::new(settings.outbound_allow, settings.outbound_resolve.clone()),
        workers,
        clock,
        metrics: metrics.clone(),
        started: std::time::Instant::now(),
    });
    tasks.push(tokio::spawn(memory::release_when_idle(shutdown.clone())));
    let mut metrics_address = None;
    if let Some(listener) = metrics_listener {
        metrics_address = listener.local_addr().ok();
        tasks.push(tokio::spawn(http::serve_metrics(
            metrics,
            listener,
            limits.clone(),
            shutdown.clone(),
        )));
    }
    let local_inbox = listeners
        .inbox
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .map(|a| a.port());
    let local_scheduler = match (&listeners.scheduler, &mailer) {
        (Some(l), Some(_)) => l.local_addr().ok().map(|a| a.port()),
        _ => None,
    };
    if let Some(listener) = listeners.inbox {
        let service = Arc::new(Shell::<inbox::Inbox>::new(ctx.clone(), local_scheduler));
        tasks.push(tokio::spawn(http::serve(
            service,
            listener,
            limits.clone(),
            shutdown.clone(),
        )));
    }
    if let (Some(listener), Some(mailer)) = (listeners.scheduler, mailer) {
        let service = Arc::new(Shell::<scheduler::Scheduler>::new(ctx.clone(), local_inbox));
        tasks.push(tokio::spawn(http::serve(
            service,
            listener,
            limits.clone(),
            shutdown.clone(),
        )));
        tasks.extend(loopers::start(&ctx, mailer, local_inbox, shutdown.clone()));
    }
    tasks.extend(control::serve(store.clone(), &settings.data_dir, shutdown.clone()));
    Ok(Running {
        workers: ctx.workers.clone(),
        metrics_address,
        store,
        settings,
        tasks,
        _dir_lock: dir_lock,
    })
}

impl Running {
    /// The open store (tests: fault injection for the health check).
    pub fn store(&self) -> &Arc<store::Store> {
        &self.store
    }

    /// Waits until the services and workers have stopped (after the shutdown signal), then
    /// flushes the database.
    pub async fn finish(self) -> Result<(), String> {
        let Running {
            store,
            settings,
            tasks,
            _dir_lock,
            ..
        } = self;
        for t in tasks {
            let _ = t.await;
        }
        // the workers have stopped: what they had claimed goes back to the queue
        store.coordination.release().await;
        store.admin.flush().map_err(|e| e.to_string())?;
        let w = store.admin.writer_stats();
        tracing::info!(
            "stopped; database flushed (writer: {} acknowledged batches in {} cycles, {} syncs)",
            w.batches,
            w.cycles,
            w.syncs
        );
        if store.is_sled() {
            leave_fresh_snapshot(store, &settings.data_dir);
        }
        Ok(())
    }
}

/// A store in a PostgreSQL database that other processes may share, with what only the
/// launch does with it.
struct Shared {
    store: Arc<store::Store>,
    pg: store::postgres::PgStore,
    connection: store::postgres::Connection,
}

/// Connects to the PostgreSQL database of `--database` (migrating its schema).
async fn open_postgres(settings: &Settings, url: &crate::config::DatabaseUrl) -> Result<Shared, String> {
    if settings.data_dir.join("db").exists() {
        tracing::warn!(
            "the data directory {} holds a sled database, which is not used with --database: copy it into \
             PostgreSQL with `pigeonhole migrate-store` to keep its data",
            settings.data_dir.display()
        );
    }
    let mut connection = database::connection(url);
    connection.bounds = database::bounds(settings);
    let wait = Duration::from_secs(settings.database_wait_secs);
    let (store, pg) = store::postgres::open_within(&connection, settings.database_lease, wait)
        .await
        .map_err(|e| format!("cannot open the PostgreSQL database {}: {e}", url.redacted()))?;
    tracing::info!("keeping the data in the PostgreSQL database {}", url.redacted());
    Ok(Shared {
        store: Arc::new(store),
        pg,
        connection,
    })
}

/// How long a lost wake-up connection waits before listening again.
const LISTEN_RETRY: Duration = Duration::from_secs(5);

impl Shared {
    /// The signing key every process on the database shares (made by the first).
    async fn tokens(&self, lifetime: Option<u64>) -> Result<auth::TokenKeys, String> {
        let fresh = crate::domain::wire::random_bytes::<64>();
        let secret = self
            .pg
            .signing_key(&fresh)
            .await
            .map_err(|e| format!("cannot read the token signing key from the database: {e}"))?;
        Ok(auth::TokenKeys::from_secret(&secret, lifetime))
    }

    /// Wakes the other processes' workers when this one's have new work, and this one's
    /// when theirs have; the listening ends at the shutdown.
    fn wake_across(&self, workers: &Arc<Workers>, mut shutdown: watch::Receiver<bool>) -> JoinHandle<()> {
        let coordination = self.store.coordination.clone();
        workers.announce_with(move |w| coordination.announce(w.name()));
        let here = workers.clone();
        let woken = workers.clone();
        let listening = store::postgres::listen(
            self.connection.clone(),
            LISTEN_RETRY,
            move |name| {
                if let Some(w) = Worker::parse(name) {
                    here.wake_here(w);
                }
            },
            // the database is back after an outage: every worker tries again now, not
            // after the rest of its back-off
            move || {
                for w in Worker::ALL {
                    woken.wake_here(w);
                }
            },
        );
        tokio::spawn(async move {
            let _ = shutdown.wait_for(|s| *s).await;
            listening.abort();
        })
    }
}

/// How often a process on a shared database reads the schema's version and tries to lead
/// the overview.
const WATCH_PERIOD: Duration = Duration::from_secs(10);

/// A process on a shared database: from the start, tries to lead the overview (so that the
/// health check and the first scrape know at once whether it does), and reads the schema's
/// version every [`WATCH_PERIOD`], so that a newer binary's migration is logged (once) even
/// when nothing probes this process; until the shutdown.
async fn watch_database(store: Arc<store::Store>, mut shutdown: watch::Receiver<bool>) {
    loop {
        store.coordination.leads(store::OnceWork::Overview).await;
        if let Some(Err(e)) = store.admin.schema().await {
            tracing::debug!("could not read the database's schema version: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep(WATCH_PERIOD) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// What the metrics read at each scrape: totals the store keeps per account (no scan of
/// items), the due part of the due index, the writer's cycle histograms, the workers.
fn sampler(store: Arc<store::Store>, workers: Arc<Workers>, clock: Clock) -> crate::metrics::Sampler {
    Box::new(move || {
        let (store, workers, clock) = (store.clone(), workers.clone(), clock.clone());
        Box::pin(async move { sample(&store, &workers, &clock).await })
    })
}

/// One sample of [`sampler`]. The database-wide numbers (items, due items) come from the
/// process that leads the overview only (on sled, the only process), so that summing them
/// over the processes of one database is right; the writer's histograms from sled only,
/// the pool, timings, schema and claims from PostgreSQL only.
async fn sample(store: &store::Store, workers: &Workers, clock: &Clock) -> crate::metrics::Sample {
    fn values(h: store::HistogramSnapshot, scale: f64) -> HistogramValues {
        HistogramValues {
            bounds: h.bounds.iter().map(|b| *b as f64 * scale).collect(),
            counts: h.counts,
            sum: h.sum as f64 * scale,
        }
    }
    let leads = store.coordination.leads(store::OnceWork::Overview).await;
    let (items, due_items) = if leads {
        let items = match (store.inbox.total_items().await, store.scheduler.total_counts().await) {
            (Ok(inbox), Ok((scheduled, triggered))) => Some((inbox, scheduled, triggered)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!("metrics: could not count the items: {e}");
                None
            }
        };
        // counted up to a bound: a scrape stays cheap even if the triggerer fell far behind
        let due_items = store
            .scheduler
            .due_count(clock.now(), 100_000)
            .await
            .map(|n| n as u64)
            .map_err(|e| tracing::warn!("metrics: could not count the due items: {e}"))
            .ok();
        (items, due_items)
    } else {
        (None, None)
    };
    let database = match (store.admin.pool(), store.admin.counters()) {
        (Some(pool), Some(counters)) => Some(DatabaseSample {
            pool: PoolSample {
                max: pool.max as u64,
                open: pool.open as u64,
                idle: pool.idle as u64,
                waiting: pool.waiting as u64,
            },
            pool_wait_seconds: values(counters.pool_wait_micros, 1e-6),
            transaction_seconds: values(counters.transaction_micros, 1e-6),
            schema: match store.admin.schema().await {
                Some(Ok(v)) => Some((v.database, v.binary)),
                _ => None,
            },
            lease_seconds: store.admin.claim_lease().unwrap_or_default().as_secs_f64(),
            // database-wide: the leader's only
            expired_claims: match leads {
                true => match store.admin.expired_claims().await {
                    Some(Ok(expired)) => Some(expired),
                    Some(Err(e)) => {
                        tracing::warn!("metrics: could not count the expired claims: {e}");
                        None
                    }
                    None => None,
                },
                false => None,
            },
            claimed: counters.claimed,
            taken_over: counters.taken_over,
            released: counters.released,
        }),
        _ => None,
    };
    let (writer_batches, writer_sync_seconds) = if store.is_sled() {
        let cycles = store.admin.writer_cycles();
        (
            Some(values(cycles.batches, 1.0)),
            Some(values(cycles.sync_micros, 1e-6)),
        )
    } else {
        (None, None)
    };
    Sample {
        engine: store.admin.engine(),
        process: store.admin.process(),
        leads,
        items,
        due_items,
        writer_batches,
        writer_sync_seconds,
        database,
        workers: Worker::ALL
            .into_iter()
            .map(|w| {
                let activity = *workers.activity(w).borrow();
                WorkerSample {
                    name: w.name(),
                    state: workers.state(w),
                    passes: activity.finished,
                    failed_passes: activity.failed,
                }
            })
            .collect(),
        database_writable: store.admin.writable().await.is_ok(),
    }
}

/// sled writes the snapshot it recovers from only while it opens a database; until then, a
/// start replays every log record written since the previous start (about 80 ms after
/// 100,000 items were added, docs/performance.md). At a clean stop, once nothing else holds
/// the store, the database is opened once more so that the next start reads a fresh
/// snapshot.
fn leave_fresh_snapshot(store: Arc<store::Store>, dir: &std::path::Path) {
    let Ok(store) = Arc::try_unwrap(store) else {
        return; // still in use somewhere: skip it, the next start replays the log
    };
    drop(store);
    match store::Store::open(dir) {
        Ok(_) => tracing::info!("wrote a fresh recovery snapshot of the database"),
        Err(e) => tracing::warn!("could not refresh the database snapshot at shutdown: {e}"),
    }
}

/// An `--admin` name that has no account yet could be registered by anyone, who would then
/// be an admin: say so at start.
async fn warn_about_unregistered_admins(settings: &Settings, store: &store::Store, inbox: bool, scheduler: bool) {
    for name in &settings.admins {
        let services = [
            (inbox, "inbox", &*store.inbox.accounts),
            (scheduler, "scheduler", &*store.scheduler.accounts),
        ];
        for (running, service, accounts) in services {
            if running && matches!(accounts.by_username(name).await, Ok(None)) {
                tracing::warn!(
                    "the admin name {name:?} is not registered on the {service} service: whoever registers it first \
                     becomes an admin; register it now, or close registration"
                );
            }
        }
    }
}
