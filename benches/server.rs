//! Benchmark of the whole server (not a test): starts the release binary on loopback with
//! fresh data directories, drives it with the concurrent HTTP/1.1 load generator below, and
//! reports every figure as a ratio against a ceiling measured in the same run.
//!
//! Run with `cargo bench --bench server` (a program of its own, no test harness; it uses the
//! release binary `cargo bench` builds with it, `target/release/pigeonhole`;
//! `PIGEONHOLE_BIN` names another binary). It prints a table and writes it into docs/performance.md between the
//! markers `<!-- bench:start -->` and `<!-- bench:end -->` (re-runs replace that section and
//! keep the rest of the file).
//!
//! Options (after `--`; the `--bench` that `cargo bench` adds is ignored): `--quick` (short phases and small data, for trying things out; the
//! doc is then not written unless `--doc` is given too), `--no-doc` (print only),
//! `--triggerer` (also re-run `benches/triggerer.rs` with its defaults, several
//! minutes, and report its 1M/1k ratio instead of the one in the doc), `--only PHASES`
//! (comma-separated among `throughput`, `logins`, `storage`, `scheduler`; never writes the
//! doc).
//!
//! Figures:
//! 1. durable `POST /inbox/item` throughput, 32 keep-alive connections, against raw sled
//!    `insert` + `flush()` + `fdatasync` of its log (32 tasks, in `spawn_blocking`) in this
//!    process, and the server's syncs per acknowledged write (from its log at stop);
//! 2. bearer-authenticated `GET /inbox/size` throughput and p99, 32 connections, against a
//!    warp route in this process answering a constant;
//! 3. p99 of `GET /inbox/size` (paced load) while 10 logins per second run against a server
//!    with the default 600,000 PBKDF2 rounds, against its p99 without them;
//! 4. full `POST /inbox/sync {}` of an account with 10,000 items, against a warp route in this
//!    process that scans the same number of sled records and answers the same JSON shape;
//! 5. start-up time to first answer with 100,000 stored items against an empty data dir,
//!    idle RSS, RSS with 100,000 items loaded, release binary size;
//! 6. scheduler: due instant → item in the inbox, with `--looper-period 60`.

use pigeonhole::domain::inbox::models::{InboxItem, ItemType};
use pigeonhole::domain::wire::{new_uuid, Timestamp};
use pigeonhole::store::inbox::AddOutcome;
use pigeonhole::store::{Registration, Store};
use serde_json::json;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::task::JoinSet;
use warp::Filter;

#[path = "common/mod.rs"]
mod common;

use common::http::{
    bearer, call, connected, exchange_on, expect, gather, http_closed, item_data, login, mean, micros, percentile,
    register_login, request, within, Conn, Load, Server, BENCH_PASSWORD, ITEM_BYTES,
};
use common::report::{mib, ms, thousands, Doc, Goal, Row, Run, MIB};
use common::{binary, manifest_dir};

type R<T> = Result<T, String>;

/// Concurrent connections of the throughput phases.
const CONNS: usize = 32;
/// PBKDF2 rounds for servers whose logins are not the subject (setup only).
const LOW_ITERATIONS: &str = "1000";
/// Logins per second in phase 3.
const LOGIN_RATE: f64 = 10.0;
/// Paced `GET /inbox/size` load of phase 3: connections × requests per second each.
const PACED_CONNS: usize = 8;
const PACED_RATE: f64 = 25.0;
const START: &str = "<!-- bench:start -->";
const END: &str = "<!-- bench:end -->";
/// The value and reference columns of the table.
const COLUMNS: [&str; 2] = ["value", "ceiling"];
const PHASES: [&str; 4] = ["throughput", "logins", "storage", "scheduler"];

struct Opts {
    /// Measured seconds per round of a throughput or latency phase.
    secs: f64,
    /// Rounds per phase; server and ceiling alternate round by round.
    rounds: usize,
    accounts: usize,
    per_account: usize,
    chunk: usize,
    sync_reps: usize,
    startups: usize,
    sched_reps: usize,
    triggerer: bool,
    doc: bool,
    /// Phases to run (`--only`); all when empty.
    only: Vec<String>,
}

impl Opts {
    fn parse() -> R<Opts> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let has = |a: &str| args.iter().any(|x| x == a);
        let mut only = Vec::new();
        let mut rest = args.iter();
        while let Some(a) = rest.next() {
            match a.as_str() {
                // `cargo bench` passes `--bench` to programs without a test harness
                "--quick" | "--no-doc" | "--doc" | "--triggerer" | "--bench" => {}
                "--only" => {
                    let list = rest.next().ok_or("--only needs a list of phases")?;
                    for p in list.split(',') {
                        if !PHASES.contains(&p) {
                            return Err(format!("unknown phase {p} (phases: {})", PHASES.join(", ")));
                        }
                        only.push(p.to_owned());
                    }
                }
                _ => {
                    return Err(format!(
                        "unknown option {a} (known: --quick, --no-doc, --doc, --triggerer, --only PHASE[,PHASE])"
                    ))
                }
            }
        }
        let quick = has("--quick");
        let mut o = Opts {
            secs: 5.0,
            rounds: 2,
            accounts: 10,
            per_account: 10_000,
            chunk: 1_000,
            sync_reps: 7,
            startups: 5,
            sched_reps: 5,
            triggerer: has("--triggerer"),
            doc: !has("--no-doc") && only.is_empty(),
            only,
        };
        if quick {
            o = Opts {
                secs: 1.0,
                rounds: 1,
                accounts: 2,
                per_account: 2_000,
                sync_reps: 3,
                startups: 2,
                sched_reps: 2,
                doc: has("--doc") && o.only.is_empty(),
                ..o
            };
        }
        Ok(o)
    }

    fn runs(&self, phase: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| p == phase)
    }

    fn total_items(&self) -> usize {
        self.accounts * self.per_account
    }
}

/// `conns` connections sending `req` at `rate` per second each, on a fixed schedule. The
/// latency counts from the instant a request was due to be sent, so a slow answer that
/// delays the next request is charged to that request too (no coordinated omission).
async fn http_paced(
    addr: SocketAddr,
    req: Arc<Vec<u8>>,
    conns: usize,
    rate: f64,
    warmup: f64,
    secs: f64,
    status: u16,
) -> Load {
    let start = Instant::now();
    let begin = start + Duration::from_secs_f64(warmup);
    let end = begin + Duration::from_secs_f64(secs);
    let hard_end = end + Duration::from_secs(30);
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut set = JoinSet::new();
    for i in 0..conns {
        let req = req.clone();
        set.spawn(async move {
            let mut l = Load::default();
            let mut conn: Option<Conn> = None;
            let mut next = start + period.mul_f64(i as f64 / conns as f64);
            while next < end && Instant::now() < hard_end {
                tokio::time::sleep_until(next.into()).await;
                let due = next;
                next += period;
                if let Err(e) = connected(&mut conn, addr).await {
                    l.error(due >= begin, e);
                    continue;
                }
                let r = exchange_on(&mut conn, &req).await;
                let done = Instant::now();
                let counted = due >= begin;
                l.record(r, status, counted, done - due);
            }
            l
        });
    }
    gather(set, secs).await
}

/// The ceiling of durable writes: `conns` tasks, each inserting a value of `value_size` bytes
/// into `db` and then waiting for `db.flush()` and an `fdatasync` of its log file `log` (in
/// `spawn_blocking`; sled's `flush()` alone ends in `sync_file_range`, which a power cut
/// does not survive), so that concurrent writers share flushes.
async fn sled_closed(
    db: sled::Db,
    log: Arc<std::fs::File>,
    conns: usize,
    warmup: f64,
    secs: f64,
    value_size: usize,
) -> Load {
    let begin = Instant::now() + Duration::from_secs_f64(warmup);
    let end = begin + Duration::from_secs_f64(secs);
    let counter = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for w in 0..conns {
        let db = db.clone();
        let log = log.clone();
        let counter = counter.clone();
        set.spawn(async move {
            let mut l = Load::default();
            let value: Vec<u8> = (0..value_size).map(|i| (i * 31 + w) as u8).collect();
            while Instant::now() < end {
                let k = counter.fetch_add(1, Ordering::Relaxed);
                let t0 = Instant::now();
                if let Err(e) = db.insert(k.to_be_bytes(), value.clone()) {
                    l.error(true, format!("insert: {e}"));
                    continue;
                }
                let (d, f) = (db.clone(), log.clone());
                let flush_and_sync = move || {
                    d.flush()
                        .map_err(|e| e.to_string())
                        .and(f.sync_data().map_err(|e| e.to_string()))
                };
                let flushed =
                    tokio::time::timeout(Duration::from_secs(30), tokio::task::spawn_blocking(flush_and_sync)).await;
                let t1 = Instant::now();
                let counted = t0 >= begin && t1 <= end;
                match flushed {
                    Ok(Ok(Ok(_))) => {
                        if counted {
                            l.ok += 1;
                            l.lat_us.push(micros(t1 - t0));
                        }
                    }
                    Ok(Ok(Err(e))) => l.error(counted, format!("flush: {e}")),
                    Ok(Err(e)) => l.error(counted, format!("flush task: {e}")),
                    Err(_) => l.error(counted, "flush took over 30 s".into()),
                }
            }
            l
        });
    }
    gather(set, secs).await
}

/// The server's store without HTTP: `conns` tasks, each adding an item of `ITEM_BYTES` bytes
/// with `InboxStore::add_item` and waiting for its receipt to be durable (the group commit),
/// as the `POST /inbox/item` handler does after authentication and parsing.
async fn store_closed(store: Arc<Store>, account: uuid::Uuid, conns: usize, warmup: f64, secs: f64) -> Load {
    let begin = Instant::now() + Duration::from_secs_f64(warmup);
    let end = begin + Duration::from_secs_f64(secs);
    let mut set = JoinSet::new();
    for w in 0..conns {
        let store = store.clone();
        set.spawn(async move {
            let mut l = Load::default();
            let data: Vec<u8> = (0..ITEM_BYTES).map(|i| (i * 31 + w) as u8).collect();
            while Instant::now() < end {
                let item = InboxItem {
                    id: new_uuid(),
                    kind: ItemType::Text,
                    data: data.clone(),
                    created: Timestamp::now(),
                };
                let t0 = Instant::now();
                let written = match store.inbox.add_item(account, &item, None, None).await {
                    Ok(written) => written,
                    Err(e) => {
                        l.error(true, format!("add_item: {e}"));
                        continue;
                    }
                };
                let durable = tokio::time::timeout(Duration::from_secs(30), written.durable()).await;
                let t1 = Instant::now();
                let counted = t0 >= begin && t1 <= end;
                match durable {
                    Ok(Ok(AddOutcome::Added(_))) => {
                        if counted {
                            l.ok += 1;
                            l.lat_us.push(micros(t1 - t0));
                        }
                    }
                    Ok(Ok(_)) => l.error(true, "add_item did not add".into()),
                    Ok(Err(e)) => l.error(counted, format!("durable: {e}")),
                    Err(_) => l.error(counted, "durable() took over 30 s".into()),
                }
            }
            l
        });
    }
    gather(set, secs).await
}

// ---------------------------------------------------------------------------------------
// Servers: the binary under test, and the warp ceilings in this process.

/// A warp server in this process, on its own multi-thread runtime (as many workers as the
/// server under test has), so that it does not share threads with the load generator.
struct Side {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Side {
    fn start<F, Fut>(serve: F) -> R<Side>
    where
        F: FnOnce(tokio::net::TcpListener, tokio::sync::oneshot::Receiver<()>) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("bench-ceiling".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                    .expect("ceiling runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).expect("ceiling listener");
                    serve(listener, stopped).await;
                });
            })
            .map_err(|e| e.to_string())?;
        Ok(Side {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A route that answers every request with a constant JSON number.
fn constant_server() -> R<Side> {
    Side::start(|listener, stopped| async move {
        let route = warp::any().map(|| warp::reply::json(&12_345u64));
        warp::serve(route)
            .incoming(listener)
            .graceful(async move {
                let _ = stopped.await;
            })
            .run()
            .await;
    })
}

/// A route that answers like a full inbox sync: scans the `i` records of `tree` (key: `i` +
/// creation nanoseconds; value: item uuid + data) and answers the same JSON shape.
fn sync_ceiling_server(tree: sled::Tree) -> R<Side> {
    Side::start(|listener, stopped| async move {
        let route = warp::post()
            .and(warp::body::bytes())
            .map(move |_body: bytes::Bytes| match sync_answer(&tree) {
                Ok(body) => warp::http::Response::builder()
                    .header("content-type", "application/json")
                    .body(body)
                    .unwrap_or_default(),
                Err(e) => warp::http::Response::builder()
                    .status(500)
                    .body(e.into_bytes())
                    .unwrap_or_default(),
            });
        warp::serve(route)
            .incoming(listener)
            .graceful(async move {
                let _ = stopped.await;
            })
            .run()
            .await;
    })
}

fn sync_answer(tree: &sled::Tree) -> R<Vec<u8>> {
    use base64::Engine;
    let mut added = serde_json::Map::new();
    for kv in tree.scan_prefix(b"i") {
        let (k, v) = kv.map_err(|e| e.to_string())?;
        let id = uuid::Uuid::from_slice(&v[..16]).map_err(|e| e.to_string())?;
        let nanos = i128::from_be_bytes(k[1..17].try_into().map_err(|_| "key")?);
        let created = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
            .map_err(|e| e.to_string())?
            .format(&time::format_description::well_known::Rfc3339)
            .map_err(|e| e.to_string())?;
        let data = base64::engine::general_purpose::STANDARD.encode(&v[16..]);
        added.insert(
            id.to_string(),
            json!({"contents": {"type": "text", "data": data}, "created": created}),
        );
    }
    let answer = json!({"client-added": {}, "client-deleted": [], "server-added": added, "server-deleted": []});
    serde_json::to_vec(&answer).map_err(|e| e.to_string())
}

/// Milliseconds to open the server's sled database in the data dir `data` and its two trees.
fn sled_open_ms(data: &Path) -> R<f64> {
    let t0 = Instant::now();
    let db = open_sled(&data.join("db"))?;
    for tree in ["inbox", "scheduler"] {
        db.open_tree(tree).map_err(|e| e.to_string())?;
    }
    Ok(t0.elapsed().as_secs_f64() * 1000.0)
}

/// [`sled_open_ms`] in a fresh process (this benchmark, re-run with `--sled-open`).
fn sled_open_fresh_ms(data: &Path) -> R<f64> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .arg("--sled-open")
        .arg(data)
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().map_err(|_| {
        format!(
            "--sled-open {}: {text} {}",
            data.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn open_sled(dir: &Path) -> R<sled::Db> {
    // the server's configuration (src/store/mod.rs)
    sled::Config::new()
        .path(dir)
        .cache_capacity(8 * 1024 * 1024)
        .open()
        .map_err(|e| format!("open sled in {}: {e}", dir.display()))
}

// ---------------------------------------------------------------------------------------
// The report.

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

// ---------------------------------------------------------------------------------------
// The phases.

struct Throughput {
    post_server: Load,
    post_sled: Load,
    post_store: Load,
    size_server: Load,
    size_const: Load,
    /// The server's writer at its stop: (acknowledged batches, syncs).
    server_syncs: (u64, u64),
    /// The store-level run's writer: (acknowledged batches, syncs).
    store_syncs: (u64, u64),
}

/// Phases 1 and 2 on one server: rounds alternate between the ceiling and the server.
async fn throughput(bin: &Path, tmp: &Path, o: &Opts) -> R<Throughput> {
    let data = tmp.join("throughput");
    let (server, _) = Server::start(
        bin,
        &data,
        &tmp.join("throughput.log"),
        // info: the writer's counters are logged at stop
        &["--password-iterations", LOW_ITERATIONS, "--log-level", "info"],
    )
    .await?;
    let token = register_login(server.inbox, "bench").await?;
    let auth = bearer(&token);
    let body = json!({"type": "text", "data": item_data(0)}).to_string();
    let post = Arc::new(request(
        "POST",
        server.inbox,
        "/inbox/item",
        &[("Authorization", &auth)],
        Some(body.as_bytes()),
    ));
    let size = Arc::new(request(
        "GET",
        server.inbox,
        "/inbox/size",
        &[("Authorization", &auth)],
        None,
    ));

    let sled_dir = tmp.join("sled-ceiling");
    let db = open_sled(&sled_dir)?;
    let log = Arc::new(std::fs::File::open(sled_dir.join("db")).map_err(|e| format!("open the sled log: {e}"))?);
    let mut t = Throughput {
        post_server: Load::default(),
        post_sled: Load::default(),
        post_store: Load::default(),
        size_server: Load::default(),
        size_const: Load::default(),
        server_syncs: (0, 0),
        store_syncs: (0, 0),
    };
    // the server's own store without HTTP (diagnosis: HTTP and auth versus the store)
    let store = Store::open(&tmp.join("store-level")).map_err(|e| e.to_string())?;
    let registered = store
        .inbox
        .accounts
        .register("bench", "not a hash".into(), Timestamp::now())
        .await
        .map_err(|e| e.to_string())?;
    let account = match registered.durable().await {
        Ok(Registration::Created(a)) => a.id,
        Ok(Registration::Taken) => return Err("username taken in a fresh store".into()),
        Err(e) => return Err(e.to_string()),
    };
    for round in 0..o.rounds {
        println!("  round {}: sled insert+flush+fdatasync, {CONNS} tasks ...", round + 1);
        t.post_sled
            .add(sled_closed(db.clone(), log.clone(), CONNS, 1.0, o.secs, ITEM_BYTES).await);
        println!("  round {}: POST /inbox/item, {CONNS} connections ...", round + 1);
        t.post_server
            .add(http_closed(server.inbox, post.clone(), CONNS, 1.0, o.secs, 200).await);
    }
    // After the sled rounds: sled's first `apply_batch` in a process turns on a process-wide
    // lock for every later sled call, which would handicap the ceiling.
    let before = store.admin.writer_stats();
    for round in 0..o.rounds {
        println!("  round {}: Store::add_item + durable(), {CONNS} tasks ...", round + 1);
        t.post_store
            .add(store_closed(store.clone(), account, CONNS, 1.0, o.secs).await);
    }
    let after = store.admin.writer_stats();
    t.store_syncs = (after.batches - before.batches, after.syncs - before.syncs);
    drop(db);
    drop(store);
    t.post_sled.check("sled insert+flush")?;
    t.post_store.check("Store::add_item + durable()")?;
    t.post_server.check("POST /inbox/item")?;

    let constant = constant_server()?;
    let const_req = Arc::new(request(
        "GET",
        constant.addr,
        "/inbox/size",
        &[("Authorization", &auth)],
        None,
    ));
    for round in 0..o.rounds {
        println!("  round {}: warp constant route, {CONNS} connections ...", round + 1);
        t.size_const
            .add(http_closed(constant.addr, const_req.clone(), CONNS, 1.0, o.secs, 200).await);
        println!("  round {}: GET /inbox/size, {CONNS} connections ...", round + 1);
        t.size_server
            .add(http_closed(server.inbox, size.clone(), CONNS, 1.0, o.secs, 200).await);
    }
    drop(constant);
    t.size_const.check("warp constant route")?;
    t.size_server.check("GET /inbox/size")?;
    let stored = call(server.inbox, "GET", "/inbox/size", Some(&token), None)
        .await?
        .json();
    println!("  items stored by the POST phase: {stored}");
    let log_path = server.log.clone();
    server.stop().await?;
    t.server_syncs = writer_counts(&std::fs::read_to_string(&log_path).unwrap_or_default())
        .ok_or("the server did not log its writer counters at stop")?;
    Ok(t)
}

#[derive(Default)]
struct LoginStats {
    issued: u64,
    completed: u64,
    failed: u64,
    skipped: u64,
    issue_secs: f64,
    lat_ms: Vec<f64>,
}

/// Logs in `rate` times per second (each on a new connection) until `stop`, then waits for
/// the logins in flight (at most 120 s).
async fn login_driver(addr: SocketAddr, req: Arc<Vec<u8>>, rate: f64, stop: Arc<AtomicBool>) -> LoginStats {
    let mut s = LoginStats::default();
    let mut tasks: JoinSet<Option<f64>> = JoinSet::new();
    let period = Duration::from_secs_f64(1.0 / rate);
    let started = Instant::now();
    let mut next = started;
    let reap = |r: Result<Option<f64>, tokio::task::JoinError>, s: &mut LoginStats| match r {
        Ok(Some(ms)) => {
            s.completed += 1;
            s.lat_ms.push(ms);
        }
        _ => s.failed += 1,
    };
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep_until(next.into()).await;
        next += period;
        while let Some(r) = tasks.try_join_next() {
            reap(r, &mut s);
        }
        if tasks.len() >= 200 {
            s.skipped += 1;
            continue;
        }
        let req = req.clone();
        tasks.spawn(async move {
            let t0 = Instant::now();
            let attempt = async {
                let mut c = Conn::open(addr).await?;
                c.exchange(&req).await
            };
            match tokio::time::timeout(Duration::from_secs(120), attempt).await {
                Ok(Ok(r)) if r.status == 204 => Some(t0.elapsed().as_secs_f64() * 1000.0),
                _ => None,
            }
        });
        s.issued += 1;
    }
    s.issue_secs = started.elapsed().as_secs_f64();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while let Ok(Some(r)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        reap(r, &mut s);
    }
    s.failed += tasks.len() as u64;
    tasks.abort_all();
    s
}

struct Logins {
    quiet: Load,
    busy: Load,
    stats: LoginStats,
    login_ms: f64,
}

/// Phase 3: a server with the default PBKDF2 cost; paced `GET /inbox/size`, rounds without
/// and with 10 logins per second.
async fn logins(bin: &Path, tmp: &Path, o: &Opts) -> R<Logins> {
    let (server, _) = Server::start(bin, &tmp.join("logins"), &tmp.join("logins.log"), &[]).await?;
    let body = json!({"name": "loginbench", "password": BENCH_PASSWORD});
    expect(server.inbox, "POST", "/register", None, Some(&body), 204).await?;
    let t0 = Instant::now();
    let token = login(server.inbox, "loginbench").await?;
    let login_ms = t0.elapsed().as_secs_f64() * 1000.0;
    println!("  one login with the default PBKDF2 cost: {login_ms:.0} ms");
    let auth = bearer(&token);
    let size = Arc::new(request(
        "GET",
        server.inbox,
        "/inbox/size",
        &[("Authorization", &auth)],
        None,
    ));
    let login_body = json!({"username": "loginbench", "password": BENCH_PASSWORD}).to_string();
    let login_req = Arc::new(request(
        "POST",
        server.inbox,
        "/login",
        &[],
        Some(login_body.as_bytes()),
    ));
    let mut r = Logins {
        quiet: Load::default(),
        busy: Load::default(),
        stats: LoginStats::default(),
        login_ms,
    };
    for round in 0..o.rounds {
        println!(
            "  round {}: paced GET /inbox/size ({PACED_CONNS} × {PACED_RATE}/s), no logins ...",
            round + 1
        );
        r.quiet
            .add(http_paced(server.inbox, size.clone(), PACED_CONNS, PACED_RATE, 0.5, o.secs, 200).await);
        println!("  round {}: the same with {LOGIN_RATE} logins/s ...", round + 1);
        let stop = Arc::new(AtomicBool::new(false));
        let driver = tokio::spawn(login_driver(server.inbox, login_req.clone(), LOGIN_RATE, stop.clone()));
        r.busy
            .add(http_paced(server.inbox, size.clone(), PACED_CONNS, PACED_RATE, 1.0, o.secs, 200).await);
        stop.store(true, Ordering::SeqCst);
        let s = driver.await.map_err(|e| format!("login driver: {e}"))?;
        println!(
            "    logins issued {}, completed {}, failed {}, skipped {}",
            s.issued, s.completed, s.failed, s.skipped
        );
        r.stats.issued += s.issued;
        r.stats.completed += s.completed;
        r.stats.failed += s.failed;
        r.stats.skipped += s.skipped;
        r.stats.issue_secs += s.issue_secs;
        r.stats.lat_ms.extend(s.lat_ms);
    }
    r.quiet.check("paced GET /inbox/size")?;
    r.busy.check("paced GET /inbox/size with logins")?;
    server.stop().await?;
    Ok(r)
}

struct Storage {
    fill_secs: f64,
    disk_bytes: u64,
    sync_ms: Vec<f64>,
    sync_ceiling_ms: Vec<f64>,
    sync_bytes: usize,
    items_ms: f64,
    rss: Vec<(String, u64)>,
    startup_empty_ms: Vec<f64>,
    startup_full_ms: Vec<f64>,
    sled_open_empty_ms: Vec<f64>,
    sled_open_full_ms: Vec<f64>,
    startup_default_ms: f64,
    idle_rss: u64,
}

/// Phases 4 and 5: fills `accounts` × `per_account` items through `POST /inbox/sync`, times
/// full syncs, then restarts and measures start-up and memory.
async fn storage(bin: &Path, tmp: &Path, o: &Opts) -> R<Storage> {
    let data = tmp.join("filled");
    let log = tmp.join("filled.log");
    let low = ["--password-iterations", LOW_ITERATIONS];
    let (server, _) = Server::start(bin, &data, &log, &low).await?;
    let mut tokens = Vec::new();
    for a in 0..o.accounts {
        tokens.push(register_login(server.inbox, &format!("fill{a}")).await?);
    }
    println!(
        "  filling {} items ({} accounts × {}, {} per sync request) ...",
        thousands(o.total_items() as u64),
        o.accounts,
        thousands(o.per_account as u64),
        o.chunk
    );
    let t0 = Instant::now();
    for (a, token) in tokens.iter().enumerate() {
        let mut conn = Conn::open(server.inbox).await.map_err(|e| e.to_string())?;
        let auth = bearer(token);
        let mut done = 0;
        while done < o.per_account {
            let n = o.chunk.min(o.per_account - done);
            let mut added = serde_json::Map::new();
            for i in 0..n {
                added.insert(
                    i.to_string(),
                    json!({"contents": {"type": "text", "data": item_data(a * o.per_account + done + i)},
                           "created": "2024-05-01T10:00:00Z"}),
                );
            }
            let body = json!({ "added": added }).to_string();
            let req = request(
                "POST",
                server.inbox,
                "/inbox/sync",
                &[("Authorization", &auth)],
                Some(body.as_bytes()),
            );
            let r = within(Duration::from_secs(120), "fill sync", async {
                conn.exchange(&req).await.map_err(|e| e.to_string())
            })
            .await?;
            let got = r.json()["client-added"].as_object().map_or(0, |m| m.len());
            if r.status != 200 || got != n {
                return Err(format!(
                    "fill sync: status {}, {got} of {n} added: {}",
                    r.status,
                    r.text()
                ));
            }
            done += n;
        }
    }
    let fill_secs = t0.elapsed().as_secs_f64();
    println!(
        "  filled in {fill_secs:.1} s ({:.0} items/s)",
        o.total_items() as f64 / fill_secs
    );
    let mut rss = vec![("after filling".to_owned(), server.rss()?)];

    // GET /inbox/items of one full account
    let t0 = Instant::now();
    let items = expect(server.inbox, "GET", "/inbox/items", Some(&tokens[0]), None, 200).await?;
    let items_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let n = items.json().as_array().map_or(0, |a| a.len());
    if n != o.per_account {
        return Err(format!(
            "GET /inbox/items answered {n} items, expected {}",
            o.per_account
        ));
    }
    rss.push((
        format!("after `GET /inbox/items` of a {}-item account", thousands(n as u64)),
        server.rss()?,
    ));

    // full sync against the ceiling: same number of sled records, same JSON shape
    let ceiling_db = open_sled(&tmp.join("sync-ceiling"))?;
    let tree = ceiling_db.open_tree("inbox").map_err(|e| e.to_string())?;
    let base_nanos = 1_714_557_600_000_000_000i128;
    for i in 0..o.per_account {
        let mut k = vec![b'i'];
        k.extend_from_slice(&(base_nanos + i as i128).to_be_bytes());
        let mut v = uuid::Uuid::new_v4().as_bytes().to_vec();
        v.extend(std::iter::repeat_n(b'x', ITEM_BYTES));
        tree.insert(k, v).map_err(|e| e.to_string())?;
    }
    ceiling_db.flush().map_err(|e| e.to_string())?;
    let ceiling = sync_ceiling_server(tree)?;
    let auth = bearer(&tokens[0]);
    let sync_req = request(
        "POST",
        server.inbox,
        "/inbox/sync",
        &[("Authorization", &auth)],
        Some(b"{}"),
    );
    let ceiling_req = request("POST", ceiling.addr, "/inbox/sync", &[], Some(b"{}"));
    let mut server_conn = Conn::open(server.inbox).await.map_err(|e| e.to_string())?;
    let mut ceiling_conn = Conn::open(ceiling.addr).await.map_err(|e| e.to_string())?;
    let mut sync_ms = Vec::new();
    let mut sync_ceiling_ms = Vec::new();
    let mut sync_bytes = 0;
    println!(
        "  full sync of {} items, {} times (after one warm-up each) ...",
        thousands(o.per_account as u64),
        o.sync_reps
    );
    for rep in 0..=o.sync_reps {
        let t0 = Instant::now();
        let r = within(Duration::from_secs(60), "sync", async {
            server_conn.exchange(&sync_req).await.map_err(|e| e.to_string())
        })
        .await?;
        let server_time = t0.elapsed().as_secs_f64() * 1000.0;
        let t0 = Instant::now();
        let c = within(Duration::from_secs(60), "ceiling sync", async {
            ceiling_conn.exchange(&ceiling_req).await.map_err(|e| e.to_string())
        })
        .await?;
        let ceiling_time = t0.elapsed().as_secs_f64() * 1000.0;
        if rep == 0 {
            let got = r.json()["server-added"].as_object().map_or(0, |m| m.len());
            let cgot = c.json()["server-added"].as_object().map_or(0, |m| m.len());
            if r.status != 200 || got != o.per_account || cgot != o.per_account {
                return Err(format!(
                    "full sync: status {}, {got} items (ceiling {cgot}), expected {}",
                    r.status, o.per_account
                ));
            }
            sync_bytes = r.body.len();
            println!("    answer {} bytes (ceiling {} bytes)", r.body.len(), c.body.len());
        } else {
            sync_ms.push(server_time);
            sync_ceiling_ms.push(ceiling_time);
        }
    }
    drop(ceiling);
    drop(ceiling_db);
    rss.push(("after the full syncs".to_owned(), server.rss()?));
    // The server hands free heap back to the kernel once requests have stopped for a second
    // (src/memory.rs): what it keeps while it waits for the next request.
    tokio::time::sleep(Duration::from_secs(3)).await;
    rss.push(("settled, 3 s after the last request".to_owned(), server.rss()?));
    let status = server.stop().await?;
    if !status.success() {
        return Err(format!("the filled server stopped with {status}"));
    }
    let disk_bytes = dir_size(&data);

    // start-up: empty data dir vs the filled one, alternating
    println!(
        "  start-up times, {} × empty and {} × filled ...",
        o.startups, o.startups
    );
    let mut startup_empty_ms = Vec::new();
    let mut startup_full_ms = Vec::new();
    for i in 0..o.startups {
        let empty = tmp.join(format!("empty-{i}"));
        let (s, d) = Server::start(bin, &empty, &tmp.join("empty.log"), &low).await?;
        startup_empty_ms.push(d.as_secs_f64() * 1000.0);
        s.stop().await?;
        let (s, d) = Server::start(bin, &data, &log, &low).await?;
        startup_full_ms.push(d.as_secs_f64() * 1000.0);
        if i + 1 == o.startups {
            tokio::time::sleep(Duration::from_secs(2)).await;
            rss.push((
                format!(
                    "restarted on the {}-item data dir, idle 2 s",
                    thousands(o.total_items() as u64)
                ),
                s.rss()?,
            ));
            for token in tokens.iter().take(3) {
                expect(s.inbox, "GET", "/inbox/items", Some(token), None, 200).await?;
            }
            rss.push((
                "restarted, then `GET /inbox/items` of 3 full accounts".to_owned(),
                s.rss()?,
            ));
        }
        s.stop().await?;
    }

    // what sled's open alone costs, each in a fresh process like a server start
    let mut sled_open_empty_ms = Vec::new();
    let mut sled_open_full_ms = Vec::new();
    for i in 0..o.startups {
        sled_open_empty_ms.push(sled_open_fresh_ms(&tmp.join(format!("empty-{i}")))?);
        sled_open_full_ms.push(sled_open_fresh_ms(&data)?);
    }

    // the default configuration (600,000 PBKDF2 rounds for the decoy hash, made in the
    // background): start-up
    // time and idle RSS on an empty data dir
    let (s, d) = Server::start(bin, &tmp.join("empty-default"), &tmp.join("empty.log"), &[]).await?;
    let startup_default_ms = d.as_secs_f64() * 1000.0;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_rss = s.rss()?;
    s.stop().await?;
    Ok(Storage {
        fill_secs,
        disk_bytes,
        sync_ms,
        sync_ceiling_ms,
        sync_bytes,
        items_ms,
        rss,
        startup_empty_ms,
        startup_full_ms,
        sled_open_empty_ms,
        sled_open_full_ms,
        startup_default_ms,
        idle_rss,
    })
}

/// Phase 6: seconds from the due instant to the item's arrival in the inbox, per repetition.
async fn scheduler(bin: &Path, tmp: &Path, o: &Opts) -> R<Vec<f64>> {
    let (server, _) = Server::start(
        bin,
        &tmp.join("scheduler"),
        &tmp.join("scheduler.log"),
        &["--password-iterations", LOW_ITERATIONS, "--looper-period", "60"],
    )
    .await?;
    let inbox_token = register_login(server.inbox, "target").await?;
    let key = expect(
        server.inbox,
        "POST",
        "/access-key",
        Some(&inbox_token),
        Some(&json!({"addAccessKeyName": "scheduler", "addAccessKeyPermissions": ["PermitAdd"]})),
        200,
    )
    .await?
    .json()["accessKeyCreatedKey"]
        .as_str()
        .ok_or("no accessKeyCreatedKey")?
        .to_owned();
    let sched_token = register_login(server.scheduler, "tickler").await?;
    let trigger = expect(
        server.scheduler,
        "POST",
        "/trigger/inbox",
        Some(&sched_token),
        Some(&json!({
            "addInboxTriggerUrl": format!("http://{}", server.inbox),
            "addInboxTriggerUsername": "target",
            "addInboxTriggerAccessKey": key,
        })),
        200,
    )
    .await?
    .json();
    if trigger.get("Right").is_none() {
        return Err(format!("adding the inbox trigger failed: {trigger}"));
    }
    let auth = bearer(&inbox_token);
    let size_req = request("GET", server.inbox, "/inbox/size", &[("Authorization", &auth)], None);
    let mut poll = Conn::open(server.inbox).await.map_err(|e| e.to_string())?;
    let mut latencies = Vec::new();
    for rep in 0..o.sched_reps {
        let before = poll
            .exchange(&size_req)
            .await
            .map_err(|e| e.to_string())?
            .json()
            .as_u64()
            .ok_or("size")?;
        // due at the first whole second at least 2 s from now
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        let due_unix = now.as_secs() as i64 + 3;
        let due = time::OffsetDateTime::from_unix_timestamp(due_unix).map_err(|e| e.to_string())?;
        let body = json!({
            "content": format!("benchmark reminder {rep}"),
            "scheduled-day": format!("{:04}-{:02}-{:02}", due.year(), u8::from(due.month()), due.day()),
            "scheduled-time": format!("{:02}:{:02}:{:02}", due.hour(), due.minute(), due.second()),
        });
        expect(
            server.scheduler,
            "POST",
            "/scheduler/item",
            Some(&sched_token),
            Some(&body),
            200,
        )
        .await?;
        let due_at = UNIX_EPOCH + Duration::from_secs(due_unix as u64);
        let give_up = due_at + Duration::from_secs(75);
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let arrival = loop {
            tick.tick().await;
            let r = poll.exchange(&size_req).await.map_err(|e| e.to_string())?;
            let t = SystemTime::now();
            if r.json().as_u64().is_some_and(|n| n > before) {
                break Some(t);
            }
            if t > give_up {
                break None;
            }
        };
        let latency = match arrival {
            Some(t) => match t.duration_since(due_at) {
                Ok(d) => d.as_secs_f64(),
                Err(e) => -e.duration().as_secs_f64(),
            },
            None => f64::INFINITY,
        };
        println!("  repetition {}: due → inbox {:.3} s", rep + 1, latency);
        latencies.push(latency);
    }
    server.stop().await?;
    Ok(latencies)
}

/// The triggerer's 1M/1k ratio: from a fresh run of `benches/triggerer.rs` when asked, else from
/// the triggerer section of the doc.
fn triggerer_ratio(run: bool, doc: &str) -> R<(f64, String)> {
    if run {
        println!("running benches/triggerer.rs (several minutes) ...");
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["bench", "--bench", "triggerer"])
            .current_dir(manifest_dir())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cargo bench --bench triggerer: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let ratio = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("ratio cost("))
            .and_then(|l| l.split("mean ").nth(1))
            .and_then(|l| l.split(',').next())
            .and_then(|v| v.trim().parse().ok())
            .ok_or("no ratio in the output of benches/triggerer.rs")?;
        return Ok((ratio, "re-run in this run (`--triggerer`)".into()));
    }
    let outside: String = match (doc.find(START), doc.find(END)) {
        (Some(a), Some(b)) if a < b => format!("{}{}", &doc[..a], &doc[b..]),
        _ => doc.to_owned(),
    };
    let ratio = outside
        .split("Ratio cost(1M) / cost(1k): ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    Ok((ratio, "from the triggerer section below, not re-run".into()))
}

#[tokio::main]
async fn main() {
    // `bench --sled-open DIR`: the diagnosis of the start-up rows, run in a fresh process.
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, dir] = args.as_slice() {
        if flag == "--sled-open" {
            match sled_open_ms(Path::new(dir)) {
                Ok(ms) => println!("{ms}"),
                Err(e) => {
                    eprintln!("bench: {e}");
                    std::process::exit(1);
                }
            }
            return;
        }
    }
    if let Err(e) = run().await {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

async fn run() -> R<()> {
    let o = Opts::parse()?;
    let bin = binary();
    let run = Run::start(&format!("pigeonhole benchmark: {}", bin.display()));
    let bin_size = std::fs::metadata(&bin).map_err(|e| e.to_string())?.len();
    let tmp = tempfile::Builder::new()
        .prefix("pigeonhole-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    if o.runs("throughput") {
        println!("phase 1–2: throughput ({} × {} s per side) ...", o.rounds, o.secs);
        let t = throughput(&bin, tmp.path(), &o).await?;
        throughput_report(&t, &o, &mut rows, &mut notes);
    }
    if o.runs("logins") {
        println!("phase 3: GET /inbox/size latency with and without {LOGIN_RATE} logins/s ...");
        let l = logins(&bin, tmp.path(), &o).await?;
        logins_report(&l, &mut rows, &mut notes);
    }
    if o.runs("storage") {
        println!("phase 4–5: storage, sync, start-up, memory ...");
        let s = storage(&bin, tmp.path(), &o).await?;
        storage_report(&s, &o, &mut rows, &mut notes);
    }
    rows.push(Row::new(
        "release binary size",
        mib(bin_size),
        "15 MiB".into(),
        bin_size as f64 / (15.0 * MIB),
        Goal::Below(1.0),
        "< 15 MiB",
    ));
    if o.runs("scheduler") {
        println!("phase 6: scheduler due → inbox with --looper-period 60 ...");
        let sched = scheduler(&bin, tmp.path(), &o).await?;
        let max = sched.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        rows.push(Row::new(
            format!("scheduler: due → item in the inbox (max of {})", sched.len()),
            format!("{max:.3} s"),
            "60 s (`--looper-period`)".into(),
            max / 60.0,
            Goal::AtMost(1.0 / 60.0),
            "≤ 1/60 (≤ 1 s)",
        ));
        notes.push(format!(
            "Scheduler: one server with `--looper-period 60`; an inbox account with an access key (`PermitAdd`), a \
             scheduler account with an inbox trigger to the same server's inbox; each repetition adds an item due at \
             the first whole second ≥ 2 s ahead (`scheduled-time` with seconds, UTC) and polls `GET /inbox/size` every \
             20 ms; due → arrival: {}.",
            sched.iter().map(|x| format!("{x:.3} s")).collect::<Vec<_>>().join(", ")
        ));
    }

    let doc_path = manifest_dir().join("docs").join("performance.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    let (trig, trig_source) = triggerer_ratio(o.triggerer, &doc)?;
    rows.push(Row::new(
        "triggerer idle pass, 1,000,000 vs 1,000 stored items",
        format!("{trig:.2} (mean)"),
        "pass over 1,000".into(),
        trig,
        Goal::AtMost(2.0),
        "≤ 2",
    ));
    notes.push(format!("Triggerer: {trig_source}."));
    let doc = o.doc.then(|| Doc {
        markers: (START, END),
        after: None,
        bench: "server",
        title: "Server benchmark",
        about: "It starts `target/release/pigeonhole` on loopback with fresh data directories, drives it with an \
                HTTP/1.1 load generator written in the benchmark (one keep-alive connection per client; the generator \
                runs on the same machine and shares its cores with the server), and reports every figure as a ratio \
                against a ceiling measured in the same run. Ceilings marked as limits (MiB, the looper period) are the \
                goal's own bound."
            .into(),
        caveat: "",
    });
    run.finish(&rows, COLUMNS, &notes, doc)
}

/// (acknowledged batches, syncs) from the server's line at a clean stop: "writer: B
/// acknowledged batches in C cycles, S syncs".
fn writer_counts(log: &str) -> Option<(u64, u64)> {
    let line = log.lines().rev().find(|l| l.contains("acknowledged batches in"))?;
    let after = &line[line.find("writer: ")? + 8..];
    let mut numbers = after
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<u64>().ok());
    let batches = numbers.next()??;
    let _cycles = numbers.next()??;
    let syncs = numbers.next()??;
    Some((batches, syncs))
}

fn throughput_report(t: &Throughput, o: &Opts, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    rows.push(Row::new(
        format!("`POST /inbox/item` throughput, {CONNS} connections (durable)"),
        format!("{:.0} req/s", t.post_server.rate()),
        format!("{:.0} op/s (sled insert + flush + fdatasync)", t.post_sled.rate()),
        t.post_server.rate() / t.post_sled.rate(),
        Goal::AtLeast(0.5),
        "≥ 0.5",
    ));
    let per_write = |(batches, syncs): (u64, u64)| syncs as f64 / batches.max(1) as f64;
    rows.push(Row::new(
        format!("syncs per acknowledged write, server, {CONNS} connections"),
        format!(
            "{} syncs / {} writes",
            thousands(t.server_syncs.1),
            thousands(t.server_syncs.0)
        ),
        "1 sync per write".to_string(),
        per_write(t.server_syncs),
        Goal::AtMost(0.25),
        "≤ 0.25",
    ));
    rows.push(Row::new(
        format!("diagnosis: syncs per acknowledged write, `Store`, {CONNS} tasks"),
        format!(
            "{} syncs / {} writes",
            thousands(t.store_syncs.1),
            thousands(t.store_syncs.0)
        ),
        "1 sync per write".to_string(),
        per_write(t.store_syncs),
        Goal::Info,
        "—",
    ));
    rows.push(Row::new(
        "`POST /inbox/item` p99 latency",
        ms(t.post_server.pct_ms(0.99)),
        ms(t.post_sled.pct_ms(0.99)),
        t.post_server.pct_ms(0.99) / t.post_sled.pct_ms(0.99),
        Goal::Info,
        "—",
    ));
    rows.push(Row::new(
        format!("diagnosis: `Store::add_item` + `durable()`, {CONNS} tasks, no HTTP"),
        format!("{:.0} op/s", t.post_store.rate()),
        format!("{:.0} op/s (sled insert + flush + fdatasync)", t.post_sled.rate()),
        t.post_store.rate() / t.post_sled.rate(),
        Goal::Info,
        "—",
    ));
    rows.push(Row::new(
        format!("`GET /inbox/size` throughput, {CONNS} connections (bearer)"),
        format!("{:.0} req/s", t.size_server.rate()),
        format!("{:.0} req/s (warp constant)", t.size_const.rate()),
        t.size_server.rate() / t.size_const.rate(),
        Goal::AtLeast(0.6),
        "≥ 0.6",
    ));
    rows.push(Row::new(
        "`GET /inbox/size` p99 latency",
        ms(t.size_server.pct_ms(0.99)),
        ms(t.size_const.pct_ms(0.99)),
        t.size_server.pct_ms(0.99) / t.size_const.pct_ms(0.99),
        Goal::Info,
        "—",
    ));
    notes.push(format!(
        "`POST /inbox/item`: {ITEM_BYTES}-byte text items into one account, one bearer token, {CONNS} keep-alive \
         connections; median {} (sled: {}, store: {}); {} errors. The sled ceiling runs in the benchmark process \
         on a fresh sled db with the server's configuration (8 MiB cache): {CONNS} tasks, each inserting a \
         {ITEM_BYTES}-byte value and then calling `db.flush()` and `fdatasync` of sled's log file in \
         `spawn_blocking` (what a durable write needs: `flush()` alone ends in `sync_file_range`). Syncs per \
         write: every `fsync`/`fdatasync` the server's writer made, over the batches it acknowledged, as the \
         server logs them at its stop (registration and logins included). The diagnosis row runs the \
         server's own `Store` (crate `pigeonhole`, fresh directory) in the benchmark process: `add_item` then \
         `durable()`, {CONNS} tasks, after all sled rounds (sled's first `apply_batch` in a process turns on a \
         process-wide lock for all later sled calls). Rounds of {} s (after 1 s warm-up) alternate sled and server, \
         {} rounds each.",
        ms(t.post_server.pct_ms(0.5)),
        ms(t.post_sled.pct_ms(0.5)),
        ms(t.post_store.pct_ms(0.5)),
        t.post_server.errors,
        o.secs,
        o.rounds
    ));
    notes.push(format!(
        "`GET /inbox/size`: median {} (warp constant: {}); {} errors. The ceiling is \
         `warp::any().map(|| warp::reply::json(&12345))` served by `warp::serve(..).incoming(..).run()` on its own \
         2-worker runtime in the benchmark process; rounds alternate as above.",
        ms(t.size_server.pct_ms(0.5)),
        ms(t.size_const.pct_ms(0.5)),
        t.size_server.errors
    ));
}

fn logins_report(l: &Logins, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    rows.push(Row::new(
        format!("`GET /inbox/size` p99 with {LOGIN_RATE} logins/s (600,000 PBKDF2 rounds)"),
        ms(l.busy.pct_ms(0.99)),
        format!("{} (no logins)", ms(l.quiet.pct_ms(0.99))),
        l.busy.pct_ms(0.99) / l.quiet.pct_ms(0.99),
        Goal::AtMost(2.0),
        "≤ 2",
    ));
    let login_rate = l.stats.completed as f64 / l.stats.issue_secs.max(1e-9);
    notes.push(format!(
        "Logins: a separate server with the default `--password-iterations` (600,000; one login took {:.0} ms \
         alone). Paced load of {PACED_CONNS} connections × {PACED_RATE} req/s = {:.0} req/s, latency counted from \
         the instant each request was due (no coordinated omission); median {} without and {} with logins. \
         Logins: {} issued at {LOGIN_RATE}/s (each on a new connection), {} completed ({login_rate:.1}/s), {} failed, \
         {} not issued (200 in flight); login latency under this load median {}, max {}.",
        l.login_ms,
        PACED_CONNS as f64 * PACED_RATE,
        ms(l.quiet.pct_ms(0.5)),
        ms(l.busy.pct_ms(0.5)),
        l.stats.issued,
        l.stats.completed,
        l.stats.failed,
        l.stats.skipped,
        ms(percentile(&l.stats.lat_ms, 0.5)),
        ms(percentile(&l.stats.lat_ms, 1.0)),
    ));
}

fn storage_report(s: &Storage, o: &Opts, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let total = thousands(o.total_items() as u64);
    let sync_mean = mean(&s.sync_ms);
    let ceil_mean = mean(&s.sync_ceiling_ms);
    rows.push(Row::new(
        format!(
            "full `POST /inbox/sync {{}}`, {} items (mean of {})",
            thousands(o.per_account as u64),
            s.sync_ms.len()
        ),
        ms(sync_mean),
        format!("{} (sled scan + JSON)", ms(ceil_mean)),
        sync_mean / ceil_mean,
        Goal::Info,
        "—",
    ));
    let sync_median = percentile(&s.sync_ms, 0.5);
    let ceil_median = percentile(&s.sync_ceiling_ms, 0.5);
    rows.push(Row::new(
        "full sync (median)",
        ms(sync_median),
        ms(ceil_median),
        sync_median / ceil_median,
        Goal::Info,
        "—",
    ));
    let up_empty = percentile(&s.startup_empty_ms, 0.5);
    let first = s.startup_full_ms.first().copied().unwrap_or(f64::NAN);
    let later = percentile(s.startup_full_ms.get(1..).unwrap_or(&[]), 0.5);
    rows.push(Row::new(
        format!("start-up to first answer, {total} items stored: first start after filling"),
        ms(first),
        format!("{} (empty data dir, median)", ms(up_empty)),
        first / up_empty,
        Goal::AtMost(2.0),
        "≤ 2",
    ));
    rows.push(Row::new(
        format!(
            "start-up to first answer, {total} items stored: later starts (median of {})",
            s.startup_full_ms.len().saturating_sub(1)
        ),
        ms(later),
        format!("{} (empty data dir, median)", ms(up_empty)),
        later / up_empty,
        Goal::AtMost(2.0),
        "≤ 2",
    ));
    let (open_empty, open_full) = (
        percentile(&s.sled_open_empty_ms, 0.5),
        percentile(&s.sled_open_full_ms, 0.5),
    );
    rows.push(Row::new(
        format!("diagnosis: opening sled alone in a fresh process, {total} items (median)"),
        ms(open_full),
        format!("{} (empty data dir, median)", ms(open_empty)),
        open_full / open_empty,
        Goal::Info,
        "—",
    ));
    rows.push(Row::new(
        "idle RSS (empty data dir, default settings, 2 s idle)",
        mib(s.idle_rss),
        "12 MiB".into(),
        s.idle_rss as f64 / (12.0 * MIB),
        Goal::Below(1.0),
        "< 12 MiB",
    ));
    let max_rss = |from: &str| {
        s.rss
            .iter()
            .filter(|(what, _)| what.starts_with(from))
            .map(|(_, b)| *b)
            .max()
            .unwrap_or(0)
    };
    let (busy, settled, restarted) = (max_rss("after"), max_rss("settled"), max_rss("restarted"));
    rows.push(Row::new(
        format!("RSS of the server that stored the {total} items, 3 s after its last request"),
        mib(settled),
        "64 MiB".into(),
        settled as f64 / (64.0 * MIB),
        Goal::Below(1.0),
        "< 64 MiB",
    ));
    rows.push(Row::new(
        "same server while busy (max: right after filling, listing, syncs)",
        mib(busy),
        "64 MiB".into(),
        busy as f64 / (64.0 * MIB),
        Goal::Info,
        "—",
    ));
    rows.push(Row::new(
        format!(
            "RSS after a restart on the {total}-item data dir and `GET /inbox/items` of 3 × {} items",
            thousands(o.per_account as u64)
        ),
        mib(restarted),
        "64 MiB".into(),
        restarted as f64 / (64.0 * MIB),
        Goal::Below(1.0),
        "< 64 MiB",
    ));
    let list = |v: &[f64]| v.iter().map(|&x| ms(x)).collect::<Vec<_>>().join(", ");
    notes.push(format!(
        "Sync: {} items of {ITEM_BYTES} bytes in the account, stored through `POST /inbox/sync` `added` ({} per \
         request); the answer is {} bytes. Time per request measured by the client on loopback, one keep-alive \
         connection, after one warm-up; each repetition times the server and then the ceiling. Server: {}. \
         Ceiling: {}: a warp route in the benchmark process that scans as many sled records (uuid + data) and \
         builds the same JSON answer. `GET /inbox/items` of the same account took {}.",
        thousands(o.per_account as u64),
        o.chunk,
        thousands(s.sync_bytes as u64),
        list(&s.sync_ms),
        list(&s.sync_ceiling_ms),
        ms(s.items_ms),
    ));
    notes.push(format!(
        "Data: {total} items in {} accounts filled through `POST /inbox/sync` in {:.1} s ({:.0} items/s); the data \
         dir then holds {}.",
        o.accounts,
        s.fill_secs,
        o.total_items() as f64 / s.fill_secs,
        mib(s.disk_bytes)
    ));
    notes.push(format!(
        "Start-up: from spawning the process to `GET /pricing` answering 200 on both ports (polled every \
         millisecond), with `--password-iterations {LOW_ITERATIONS}` so that the decoy password hash (made in the \
         background at start) does not compete with the store for the cores; empty and filled starts alternate, the first filled start comes right \
         after the server that filled the data dir stopped: empty {}; filled {}. With the default 600,000 rounds an \
         empty start took {}.",
        list(&s.startup_empty_ms),
        list(&s.startup_full_ms),
        ms(s.startup_default_ms)
    ));
    notes.push(format!(
        "Diagnosis of the start-up rows: the benchmark re-runs itself with `--sled-open DIR`, which only opens \
         the server's sled database (`db/` of the data dir, 8 MiB cache) and its two trees, one fresh process \
         each time, after the start-up runs: empty data dirs {}; the filled one {}. A fresh process pays sled's \
         recovery at open (page table and segment accounting rebuilt from the snapshot, in proportion to the \
         number of pages) and the first-touch of the memory it builds.",
        list(&s.sled_open_empty_ms),
        list(&s.sled_open_full_ms)
    ));
    notes.push(format!(
        "RSS (VmRSS of `/proc/<pid>/status`): {}.",
        s.rss
            .iter()
            .map(|(what, b)| format!("{what} {}", mib(*b)))
            .collect::<Vec<_>>()
            .join("; ")
    ));
}
