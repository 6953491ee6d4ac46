//! Pigeonhole side by side with atuin-server (issues 30 point 7 and 31 point 4; not a test):
//! both servers on the same machine, on the same kind of storage, driven by the same
//! HTTP/1.1 load generator (benches/common/http.rs: one keep-alive connection per client).
//!
//! Run with `cargo bench --bench peers` (a program of its own, no test harness). It installs
//! atuin-server itself once (`cargo install --locked atuin-server --version 18.24.4 --root
//! CACHE`, CACHE = `$PIGEONHOLE_BENCH_CACHE`, else
//! `${XDG_CACHE_HOME:-$HOME/.cache}/pigeonhole-bench/atuin-server-18.24.4`; skipped when
//! `CACHE/bin/atuin-server` exists), then measures two pairings:
//!
//! * **PostgreSQL**: `pigeonhole serve --database` and atuin-server with `db_uri`, each on a
//!   database of its own in **one** throwaway cluster (tools/throwaway-postgres, Unix socket,
//!   `fsync` and `synchronous_commit` on), started with `pg_stat_statements` when it loads;
//! * **embedded**: Pigeonhole on sled (its default) and atuin-server on SQLite.
//!
//! Per pairing, `BENCH_ROUNDS` (3) rounds alternate the two servers (the order flips each
//! round); each phase is a 1 s warm-up and `BENCH_SECS` (5) measured seconds; the table shows
//! medians of the rounds: durable writes/s at 1 and 16 clients (Pigeonhole `POST
//! /inbox/item` of a 100-byte text item; atuin `POST /api/v0/record` of one record with
//! 100 bytes of data), authenticated reads/s ("auth only": Pigeonhole `GET /permissions`,
//! atuin `GET /api/v0/me`; "how much do I have": `GET /inbox/size`, `GET /api/v0/record`),
//! server CPU per write at 16 clients, RSS after the writes, syncs per write at 1 client
//! under strace (embedded pairing), statements per request (pg_stat_statements) and the
//! PostgreSQL backends' CPU per write, and Pigeonhole's due → inbox latency on PostgreSQL
//! with 1 and 3 processes (`BENCH_DUE`, 200, reminders due at one second).
//!
//! It prints a table and writes it into docs/performance.md between `<!-- peers:start -->`
//! and `<!-- peers:end -->` (after the server benchmark's section when new); `--no-doc`
//! only prints. Without PostgreSQL or strace the rows that need them are left out, with a
//! note. Every process listens on 127.0.0.1 only.

use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[path = "common/mod.rs"]
mod common;

use common::due::{due_to_inbox, Services};
use common::http::{
    call, free_port, http_closed_with, item_data, log_tail, percentile, register_login, request, rss_of, stop_child,
    Conn, Load, Server, ITEM_BYTES,
};
use common::report::{mib, Doc, Goal, Row, Run, MIB};
use common::{binary, env_usize, manifest_dir, Cluster};

type R<T> = Result<T, String>;

const ATUIN_VERSION: &str = "18.24.4";
const START: &str = "<!-- peers:start -->";
const END: &str = "<!-- peers:end -->";
/// A new section goes after the server benchmark's.
const AFTER: &str = "<!-- bench:end -->";
const COLUMNS: [&str; 2] = ["Pigeonhole", "atuin-server"];
/// Clients of the concurrent phases.
const MANY: usize = 16;
const WARMUP: f64 = 1.0;
/// PBKDF2 rounds of Pigeonhole's passwords: logins are setup here, not measured.
const LOW_ITERATIONS: &str = "1000";
const PG_STATEMENTS: &str = "-c shared_preload_libraries=pg_stat_statements";

struct Opts {
    secs: f64,
    rounds: usize,
    due: usize,
    doc: bool,
}

impl Opts {
    fn parse() -> R<Opts> {
        let mut doc = true;
        for a in std::env::args().skip(1) {
            match a.as_str() {
                // `cargo bench` passes `--bench` to programs without a test harness
                "--bench" => {}
                "--no-doc" => doc = false,
                _ => return Err(format!("unknown option {a} (known: --no-doc)")),
            }
        }
        Ok(Opts {
            secs: env_usize("BENCH_SECS", 5).max(1) as f64,
            rounds: env_usize("BENCH_ROUNDS", 3).max(1),
            due: env_usize("BENCH_DUE", 200).max(1),
            doc,
        })
    }
}

// ---------------------------------------------------------------------------------------
// atuin-server: installed once into a cache, started with a config of its own.

/// Where atuin-server is installed (`cargo install --root`).
fn atuin_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("PIGEONHOLE_BENCH_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache
        .join("pigeonhole-bench")
        .join(format!("atuin-server-{ATUIN_VERSION}"))
}

/// The atuin-server binary, installed first when the cache does not have it.
fn atuin_binary() -> R<PathBuf> {
    let root = atuin_root();
    let bin = root.join("bin").join("atuin-server");
    if bin.exists() {
        return Ok(bin);
    }
    println!(
        "installing atuin-server {ATUIN_VERSION} into {} (once; several minutes) ...",
        root.display()
    );
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "install",
            "--locked",
            "atuin-server",
            "--version",
            ATUIN_VERSION,
            "--root",
        ])
        .arg(&root)
        // not the project's directory: its cargo configuration is not atuin's
        .current_dir(&root)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cargo install atuin-server: {e}"))?;
    if !status.success() || !bin.exists() {
        return Err(format!("cargo install atuin-server {ATUIN_VERSION} failed ({status})"));
    }
    Ok(bin)
}

/// One `atuin-server start` process, configured by a `server.toml` of its own
/// (`ATUIN_CONFIG_DIR`), with open registration.
struct Atuin {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Atuin {
    async fn start(bin: &Path, dir: &Path, db_uri: &str) -> R<Atuin> {
        let config = dir.join("config");
        std::fs::create_dir_all(&config).map_err(|e| format!("{}: {e}", config.display()))?;
        let port = free_port()?;
        let toml = format!(
            "host = \"127.0.0.1\"\nport = {port}\nopen_registration = true\ndb_uri = {}\n",
            Value::from(db_uri)
        );
        std::fs::write(config.join("server.toml"), toml).map_err(|e| e.to_string())?;
        let log = dir.join("atuin-server.log");
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(bin)
            .args(["start", "--host", "127.0.0.1", "--port", &port.to_string()])
            .env("ATUIN_CONFIG_DIR", &config)
            .env("ATUIN_HOME", dir)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let mut atuin = Atuin {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = atuin.child.try_wait() {
                return Err(format!("atuin-server exited at start ({status}): {}", atuin.log_tail()));
            }
            if let Ok(r) = call(atuin.addr, "GET", "/healthz", None, None).await {
                if r.status == 200 {
                    return Ok(atuin);
                }
            }
            if Instant::now() > deadline {
                return Err(format!("atuin-server did not start: {}", atuin.log_tail()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    async fn stop(mut self) -> R<()> {
        stop_child(&mut self.child, libc::SIGTERM, "atuin-server")
            .await
            .map(drop)
    }
}

impl Drop for Atuin {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Registers `name` on atuin-server: its session token.
async fn atuin_register(addr: SocketAddr, name: &str) -> R<String> {
    let body = json!({"email": format!("{name}@bench.invalid"), "username": name, "password": "bench password"});
    let r = call(addr, "POST", "/register", None, Some(&body)).await?;
    if r.status != 200 {
        return Err(format!("atuin POST /register: {} {}", r.status, r.text()));
    }
    r.json()["session"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("atuin POST /register: no session in {}", r.text()))
}

/// The body of one `POST /api/v0/record`: an array of one record of `host`, index `idx`,
/// a fresh id, and data in PASETO's wire form carrying `ITEM_BYTES` bytes (as atuin's
/// clients send it; the server stores it as it is).
fn record_body(host: &str, idx: u64, data: &str, cek: &str) -> Vec<u8> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    json!([{
        "id": uuid::Uuid::new_v4(),
        "idx": idx,
        "host": {"id": host, "name": ""},
        "timestamp": now.as_nanos() as u64,
        "version": "v0",
        "tag": "history",
        "data": {"data": data, "content_encryption_key": cek},
    }])
    .to_string()
    .into_bytes()
}

/// (data, content encryption key) of the records: fixed bytes in the wire form's shape.
fn record_payload() -> (String, String) {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let bytes = |n: usize, seed: usize| -> Vec<u8> { (0..n).map(|i| (i * 31 + seed) as u8).collect() };
    let data = format!("v4.local.{}", b64.encode(bytes(ITEM_BYTES, 7)));
    let cek = json!({
        "wpk": format!("k4.local-wrap.pie.{}", b64.encode(bytes(96, 3))),
        "kid": format!("k4.lid.{}", b64.encode(bytes(33, 5))),
    })
    .to_string();
    (data, cek)
}

// ---------------------------------------------------------------------------------------
// The two servers of a pairing, as the load generator sees them.

#[derive(Clone, Copy, PartialEq)]
enum Read {
    /// Authentication and nothing else to speak of.
    Auth,
    /// How much the account has.
    Count,
}

struct Peer {
    /// 0: Pigeonhole, 1: atuin-server (the table's columns).
    side: usize,
    addr: SocketAddr,
    pid: u32,
    /// The value of the `Authorization` header.
    auth: String,
    /// Pigeonhole: the prepared `POST /inbox/item`.
    item: Arc<Vec<u8>>,
    /// atuin: one host per client, each with its next record index.
    hosts: Arc<Vec<(String, AtomicU64)>>,
    record: Arc<(String, String)>,
    /// The PostgreSQL database it uses.
    database: Option<String>,
    /// Writes acknowledged in all phases (checked against what is stored at the end).
    acknowledged: u64,
}

impl Peer {
    fn new(side: usize, addr: SocketAddr, pid: u32, auth: String, database: Option<String>) -> Peer {
        let body = json!({"type": "text", "data": item_data(0)}).to_string();
        let item = request(
            "POST",
            addr,
            "/inbox/item",
            &[("Authorization", &auth)],
            Some(body.as_bytes()),
        );
        let hosts = (0..MANY)
            .map(|_| (uuid::Uuid::new_v4().to_string(), AtomicU64::new(0)))
            .collect();
        Peer {
            side,
            addr,
            pid,
            auth,
            item: Arc::new(item),
            hosts: Arc::new(hosts),
            record: Arc::new(record_payload()),
            database,
            acknowledged: 0,
        }
    }

    fn name(&self) -> &'static str {
        COLUMNS[self.side]
    }

    /// The write requests of client `conn`.
    fn writes(&self, conn: usize) -> Box<dyn FnMut() -> Arc<Vec<u8>> + Send> {
        if self.side == 0 {
            let item = self.item.clone();
            return Box::new(move || item.clone());
        }
        let (addr, auth, hosts, record) = (self.addr, self.auth.clone(), self.hosts.clone(), self.record.clone());
        Box::new(move || {
            let (host, next) = &hosts[conn % hosts.len()];
            let idx = next.fetch_add(1, Ordering::Relaxed);
            let body = record_body(host, idx, &record.0, &record.1);
            Arc::new(request(
                "POST",
                addr,
                "/api/v0/record",
                &[("Authorization", &auth)],
                Some(&body),
            ))
        })
    }

    fn read_path(&self, read: Read) -> &'static str {
        match (self.side, read) {
            (0, Read::Auth) => "/permissions",
            (0, Read::Count) => "/inbox/size",
            (_, Read::Auth) => "/api/v0/me",
            (_, Read::Count) => "/api/v0/record",
        }
    }

    fn read(&self, read: Read) -> Arc<Vec<u8>> {
        Arc::new(request(
            "GET",
            self.addr,
            self.read_path(read),
            &[("Authorization", &self.auth)],
            None,
        ))
    }

    /// How many writes the server has stored for the account.
    async fn stored(&self) -> R<u64> {
        let mut c = Conn::open(self.addr).await.map_err(|e| e.to_string())?;
        let r = c.exchange(&self.read(Read::Count)).await.map_err(|e| e.to_string())?;
        if r.status != 200 {
            return Err(format!("{}: {} {}", self.read_path(Read::Count), r.status, r.text()));
        }
        let v = r.json();
        if self.side == 0 {
            return v.as_u64().ok_or_else(|| format!("/inbox/size: {}", r.text()));
        }
        // {"hosts": {host: {tag: last idx}}}: indexes run from 0 without gaps per host
        let hosts = v["hosts"]
            .as_object()
            .ok_or_else(|| format!("/api/v0/record: {}", r.text()))?;
        Ok(hosts
            .values()
            .filter_map(Value::as_object)
            .flat_map(|tags| tags.values().filter_map(Value::as_u64))
            .map(|last| last + 1)
            .sum())
    }
}

// ---------------------------------------------------------------------------------------
// Phases: the load of one server, with the server's (and its database's) CPU and
// statements read at the start and the end of the measured window.

/// The PostgreSQL side of the measurements.
struct Pg {
    cluster: Cluster,
    /// Whether pg_stat_statements is loaded.
    statements: bool,
}

#[derive(Default)]
struct Snapshot {
    /// Requests answered so far (the mean of the counts before and after the readings).
    answered: f64,
    /// utime + stime of the server process, in clock ticks.
    ticks: u64,
    /// The same of each backend of the server's database.
    backends: HashMap<u32, u64>,
    /// Calls of all statements in the server's database (pg_stat_statements).
    calls: u64,
}

/// utime + stime (clock ticks) of the process `pid`; 0 when it is gone.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // after the command name in parentheses: state is field 3, utime 14, stime 15
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    field(11) + field(12)
}

fn ticks_per_second() -> f64 {
    #[expect(unsafe_code, reason = "sysconf(3) is not wrapped by std")]
    // SAFETY: sysconf only reads a system constant; _SC_CLK_TCK is a valid name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

fn snapshot(peer: &Peer, pg: Option<&Pg>, answered: &AtomicU64) -> R<Snapshot> {
    let before = answered.load(Ordering::SeqCst);
    let mut s = Snapshot {
        ticks: cpu_ticks(peer.pid),
        ..Snapshot::default()
    };
    if let (Some(pg), Some(db)) = (pg, &peer.database) {
        let calls = match pg.statements {
            true => format!(
                "(SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
                 WHERE d.datname = '{db}')"
            ),
            false => "0".into(),
        };
        let out = pg.cluster.psql(
            "postgres",
            &format!(
                "SELECT {calls}, coalesce((SELECT string_agg(pid::text, ',') FROM pg_stat_activity \
                 WHERE datname = '{db}' AND backend_type = 'client backend'), '')"
            ),
        )?;
        let (calls, pids) = out.split_once('|').ok_or_else(|| format!("psql answered {out}"))?;
        s.calls = calls.trim().parse().map_err(|_| format!("psql answered {out}"))?;
        for pid in pids.split(',').filter_map(|p| p.trim().parse::<u32>().ok()) {
            s.backends.insert(pid, cpu_ticks(pid));
        }
    }
    s.answered = (before + answered.load(Ordering::SeqCst)) as f64 / 2.0;
    Ok(s)
}

/// A phase: its load, and per request answered between the two readings (at the start and
/// the end of the measured window): the server's CPU seconds, its database backends' CPU
/// seconds and statements (PostgreSQL).
struct Phase {
    load: Load,
    cpu: f64,
    backends_cpu: Option<f64>,
    statements: Option<f64>,
}

async fn phase<G>(peer: &Peer, pg: Option<&Pg>, clients: usize, secs: f64, requests: impl Fn(usize) -> G) -> R<Phase>
where
    G: FnMut() -> Arc<Vec<u8>> + Send + 'static,
{
    let answered = Arc::new(AtomicU64::new(0));
    let window = async {
        tokio::time::sleep(Duration::from_secs_f64(WARMUP)).await;
        let a = tokio::task::block_in_place(|| snapshot(peer, pg, &answered));
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        let b = tokio::task::block_in_place(|| snapshot(peer, pg, &answered));
        (a, b)
    };
    let (load, (a, b)) = tokio::join!(
        http_closed_with(peer.addr, clients, WARMUP, secs, 200, requests, Some(&answered)),
        window
    );
    let (a, b) = (a?, b?);
    load.check(peer.name())?;
    let requests = (b.answered - a.answered).max(1.0);
    let hz = ticks_per_second();
    let on_pg = pg.is_some() && peer.database.is_some();
    let backends: u64 = b
        .backends
        .iter()
        .map(|(pid, t)| t.saturating_sub(a.backends.get(pid).copied().unwrap_or(0)))
        .sum();
    Ok(Phase {
        cpu: b.ticks.saturating_sub(a.ticks) as f64 / hz / requests,
        backends_cpu: on_pg.then_some(backends as f64 / hz / requests),
        statements: (on_pg && pg.is_some_and(|p| p.statements))
            .then_some(b.calls.saturating_sub(a.calls) as f64 / requests),
        load,
    })
}

/// Measures of one pairing: per measure, the rounds' values of each side.
#[derive(Default)]
struct Figures(HashMap<String, [Vec<f64>; 2]>);

impl Figures {
    fn push(&mut self, measure: &str, side: usize, x: f64) {
        self.0.entry(measure.to_owned()).or_default()[side].push(x);
    }

    /// The median of the rounds (NaN when not measured).
    fn median(&self, measure: &str, side: usize) -> f64 {
        let Some(v) = self.0.get(measure) else {
            return f64::NAN;
        };
        let mut v = v[side].clone();
        if v.is_empty() {
            return f64::NAN;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    }

    fn both(&self, measure: &str) -> [f64; 2] {
        [self.median(measure, 0), self.median(measure, 1)]
    }
}

fn clients_text(n: usize) -> String {
    match n {
        1 => "1 client".into(),
        n => format!("{n} clients"),
    }
}

/// The rounds of one pairing: writes at 1 and 16 clients, then both reads at 1 and 16, the
/// two servers alternating (the order flips each round).
async fn rounds(peers: &mut [Peer; 2], pg: Option<&Pg>, o: &Opts) -> R<Figures> {
    let mut f = Figures::default();
    for round in 0..o.rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for clients in [1, MANY] {
            for i in order {
                let peer = &peers[i];
                println!(
                    "  round {}: {} writes, {} ...",
                    round + 1,
                    peer.name(),
                    clients_text(clients)
                );
                let p = phase(peer, pg, clients, o.secs, |c| peer.writes(c)).await?;
                f.push(&format!("writes{clients}"), i, p.load.rate());
                if clients == MANY {
                    f.push("cpu", i, p.cpu * 1e6);
                    if let Some(b) = p.backends_cpu {
                        f.push("backends cpu", i, b * 1e6);
                    }
                }
                if let Some(s) = p.statements {
                    f.push(&format!("statements writes{clients}"), i, s);
                }
                peers[i].acknowledged += p.load.answered;
            }
        }
        for i in order {
            f.push("rss", i, rss_of(peers[i].pid)? as f64);
        }
        for read in [Read::Auth, Read::Count] {
            for clients in [1, MANY] {
                for i in order {
                    let peer = &peers[i];
                    let path = peer.read_path(read);
                    println!(
                        "  round {}: {} GET {path}, {} ...",
                        round + 1,
                        peer.name(),
                        clients_text(clients)
                    );
                    let req = peer.read(read);
                    let p = phase(peer, pg, clients, o.secs, |_| {
                        let req = req.clone();
                        move || req.clone()
                    })
                    .await?;
                    let key = if read == Read::Auth { "auth" } else { "count" };
                    f.push(&format!("{key}{clients}"), i, p.load.rate());
                    if let Some(s) = p.statements {
                        f.push(&format!("statements {key}{clients}"), i, s);
                    }
                }
            }
        }
    }
    Ok(f)
}

// ---------------------------------------------------------------------------------------
// Syncs per write under strace.

/// Whether strace can be run.
fn has_strace() -> bool {
    Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const SYNC_CALLS: [&str; 3] = ["fsync", "fdatasync", "sync_file_range"];

/// One client writing for `secs` with strace counting the server's sync calls: (calls per
/// acknowledged write of each of `SYNC_CALLS`, writes).
async fn syncs_per_write(peer: &mut Peer, dir: &Path, secs: f64) -> R<([f64; 3], u64)> {
    let out = dir.join(format!("strace-{}.txt", peer.side));
    let mut strace = Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync,sync_file_range", "-o"])
        .arg(&out)
        .args(["-p", &peer.pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("strace: {e}"))?;
    // strace says "Process N attached" once it traces the server
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = strace.stderr.take().ok_or("strace: no stderr")?;
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut said = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) if line.contains("attached") => break,
            Ok(line) => said.push(line),
            Err(_) if Instant::now() > deadline || strace.try_wait().ok().flatten().is_some() => {
                let _ = stop_child(&mut strace, libc::SIGINT, "strace").await;
                return Err(format!("strace did not attach: {}", said.join(" | ")));
            }
            Err(_) => {}
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let load = http_closed_with(peer.addr, 1, 0.0, secs, 200, |c| peer.writes(c), None).await;
    // the last answers' syncs are done before their answers
    stop_child(&mut strace, libc::SIGINT, "strace").await?;
    load.check(&format!("{} under strace", peer.name()))?;
    peer.acknowledged += load.answered;
    let text = std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut calls = [0u64; 3];
    for line in text.lines() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        if let (Some(name), Some(n)) = (cells.last(), cells.get(3).and_then(|n| n.parse::<u64>().ok())) {
            if let Some(k) = SYNC_CALLS.iter().position(|c| c == name) {
                calls[k] = n;
            }
        }
    }
    let writes = load.answered.max(1);
    Ok((calls.map(|c| c as f64 / writes as f64), load.answered))
}

// ---------------------------------------------------------------------------------------
// The pairings.

struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
}

fn rate(x: f64) -> String {
    if x.is_nan() {
        "—".into()
    } else {
        format!("{x:.0}/s")
    }
}

fn number(x: f64, unit: &str) -> String {
    if x.is_nan() {
        "—".into()
    } else if x >= 100.0 {
        format!("{x:.0}{unit}")
    } else {
        format!("{x:.2}{unit}")
    }
}

/// Rows comparing the two sides of `measure`, a rate or another number.
fn compare(
    rows: &mut Vec<Row>,
    what: String,
    [p, a]: [f64; 2],
    format: impl Fn(f64) -> String,
    goal: Goal,
    text: &str,
) {
    rows.push(Row::new(what, format(p), format(a), p / a, goal, text));
}

/// The rows every pairing has: writes, their scaling, reads, CPU and RSS.
fn common_rows(r: &mut Report, kind: &str, f: &Figures, goals: &[(&str, Goal, &str)]) {
    let goal = |key: &str| {
        goals
            .iter()
            .find(|(k, _, _)| *k == key)
            .map_or((Goal::Info, "—"), |(_, g, t)| (*g, *t))
    };
    for clients in [1, MANY] {
        let (g, t) = goal(&format!("writes{clients}"));
        compare(
            &mut r.rows,
            format!("{kind}: durable writes/s, {}", clients_text(clients)),
            f.both(&format!("writes{clients}")),
            rate,
            g,
            t,
        );
    }
    let scale = [0, 1].map(|i| f.median(&format!("writes{MANY}"), i) / f.median("writes1", i));
    let (g, t) = goal("scale");
    r.rows.push(
        Row::new(
            format!("{kind}: writes/s at {MANY} clients / at 1 client"),
            format!("{:.2}×", scale[0]),
            format!("{:.2}×", scale[1]),
            scale[0] / scale[1],
            g,
            t,
        )
        .checked_on(scale[0]),
    );
    for (key, what) in [
        ("auth", "auth only (`GET /permissions` vs `GET /api/v0/me`)"),
        (
            "count",
            "how much do I have (`GET /inbox/size` vs `GET /api/v0/record`)",
        ),
    ] {
        for clients in [1, MANY] {
            let (g, t) = goal(key);
            compare(
                &mut r.rows,
                format!("{kind}: reads/s, {what}, {}", clients_text(clients)),
                f.both(&format!("{key}{clients}")),
                rate,
                g,
                t,
            );
        }
    }
    let cpu = f.both("cpu");
    let (g, t) = goal("cpu");
    r.rows.push(
        Row::new(
            format!("{kind}: server CPU per write at {MANY} clients"),
            number(cpu[0], " µs"),
            number(cpu[1], " µs"),
            cpu[0] / cpu[1],
            g,
            t,
        )
        .checked_on(cpu[0]),
    );
    let rss = f.both("rss");
    let (g, t) = goal("rss");
    r.rows.push(
        Row::new(
            format!("{kind}: server RSS after the writes"),
            mib(rss[0] as u64),
            mib(rss[1] as u64),
            rss[0] / rss[1],
            g,
            t,
        )
        .checked_on(rss[0] / MIB),
    );
}

async fn pigeonhole(tmp: &Path, name: &str, database: Option<&str>) -> R<(Server, String)> {
    std::fs::create_dir_all(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let mut extra = vec!["--password-iterations", LOW_ITERATIONS];
    if let Some(url) = database {
        extra.extend(["--database", url]);
    }
    let (server, _) = Server::start(&binary(), &tmp.join(name), &tmp.join(format!("{name}.log")), &extra).await?;
    let token = register_login(server.inbox, "bench").await?;
    Ok((server, format!("Bearer {token}")))
}

/// One write of each peer before the phases: an error here is clearer than a failed phase.
async fn first_write(peer: &mut Peer) -> R<()> {
    let req = peer.writes(0)();
    let mut c = Conn::open(peer.addr).await.map_err(|e| e.to_string())?;
    let r = c.exchange(&req).await.map_err(|e| e.to_string())?;
    if r.status != 200 {
        return Err(format!("{}: first write: {} {}", peer.name(), r.status, r.text()));
    }
    peer.acknowledged += 1;
    Ok(())
}

/// Whether each side stored every write it acknowledged (asked at the end): a note.
async fn stored_note(kind: &str, peers: &[Peer; 2]) -> R<String> {
    let mut parts = Vec::new();
    for p in peers {
        let stored = p.stored().await?;
        let verdict = if stored == p.acknowledged { "" } else { " (**differs**)" };
        parts.push(format!(
            "{}: {} acknowledged, {stored} stored{verdict}",
            p.name(),
            p.acknowledged
        ));
    }
    Ok(format!(
        "{kind}: writes acknowledged, and found stored at the end: {}.",
        parts.join("; ")
    ))
}

async fn embedded(tmp: &Path, atuin_bin: &Path, o: &Opts) -> R<Report> {
    let dir = tmp.join("embedded");
    let (server, auth) = pigeonhole(&dir, "pigeonhole", None).await?;
    let atuin_db = dir.join("atuin").join("atuin.db");
    std::fs::create_dir_all(dir.join("atuin")).map_err(|e| e.to_string())?;
    let atuin = Atuin::start(
        atuin_bin,
        &dir.join("atuin"),
        &format!("sqlite://{}", atuin_db.display()),
    )
    .await?;
    let session = atuin_register(atuin.addr, "bench").await?;
    let mut peers = [
        Peer::new(0, server.inbox, server.pid(), auth, None),
        Peer::new(1, atuin.addr, atuin.child.id(), format!("Token {session}"), None),
    ];
    for p in peers.iter_mut() {
        first_write(p).await?;
    }
    let f = rounds(&mut peers, None, o).await?;
    let mut r = Report {
        rows: Vec::new(),
        notes: Vec::new(),
    };
    common_rows(
        &mut r,
        "embedded",
        &f,
        &[
            ("writes1", Goal::AtLeast(1.5), "≥ 1.5"),
            ("writes16", Goal::AtLeast(4.0), "≥ 4"),
            ("cpu", Goal::AtMost(80.0), "Pigeonhole ≤ 80 µs"),
            ("rss", Goal::AtMost(20.0), "Pigeonhole ≤ 20 MiB"),
        ],
    );
    if has_strace() {
        let mut syncs = [[f64::NAN; 3]; 2];
        let mut writes = [0; 2];
        for i in [0, 1] {
            println!("  {} writes, 1 client, under strace ...", peers[i].name());
            match syncs_per_write(&mut peers[i], &dir, o.secs).await {
                Ok((s, w)) => (syncs[i], writes[i]) = (s, w),
                Err(e) => r
                    .notes
                    .push(format!("Syncs per write of {}: not measured: {e}.", peers[i].name())),
            }
        }
        let total = syncs.map(|s| s.iter().sum::<f64>());
        // the calls made, e.g. "3.19 (fdatasync 1.00, sync_file_range 2.19)"
        let cell = |i: usize| {
            let made: Vec<String> = SYNC_CALLS
                .iter()
                .zip(syncs[i])
                .filter(|(_, n)| *n >= 0.005)
                .map(|(c, n)| format!("{c} {n:.2}"))
                .collect();
            format!("{} ({})", number(total[i], ""), made.join(", "))
        };
        r.rows.push(
            Row::new(
                "embedded: sync calls (fsync, fdatasync, sync_file_range) per acknowledged write, 1 client (strace)",
                cell(0),
                cell(1),
                total[0] / total[1],
                Goal::AtMost(1.1),
                "Pigeonhole = 1 (≤ 1.1)",
            )
            .checked_on(total[0]),
        );
        r.notes.push(format!(
            "Sync calls per write: one client writing for {} s with `strace -f -c -e trace=fsync,fdatasync,sync_file_range \
             -p PID` attached to the server (strace slows the server; only the count matters): calls of all its threads \
             divided by the writes acknowledged while attached ({} by Pigeonhole, {} by atuin-server). \
             `sync_file_range` (sled's own flush) writes pages out but is no durability barrier; `fsync` and \
             `fdatasync` are.",
            o.secs, writes[0], writes[1],
        ));
    } else {
        r.notes
            .push("Sync calls per write: not measured, strace is not installed (`apt-get install strace`).".into());
    }
    r.notes.push(stored_note("Embedded", &peers).await?);
    server.stop().await?;
    atuin.stop().await?;
    r.notes.push(format!(
        "Embedded storage: Pigeonhole on sled in a fresh data directory (its default engine), answering a write \
         once it is synced; atuin-server on SQLite, `db_uri = \"sqlite://DIR/atuin.db\"`. atuin opens SQLite with \
         sqlx's `SqliteConnectOptions` and `journal_mode(Wal)`, `create_if_missing(true)`, nothing else \
         (atuin-server 18.24.4 src/db/sqlite/mod.rs): `synchronous` is left to SQLite's compiled default, FULL \
         (sqlx sets no `synchronous` unless asked, libsqlite3-sys's bundled build does not change \
         SQLITE_DEFAULT_SYNCHRONOUS or SQLITE_DEFAULT_WAL_SYNCHRONOUS), so each commit syncs the WAL before it \
         returns: atuin acknowledges only synced writes too (the strace row counts its syncs). Journal mode of \
         its file after the run: {}. Its pool: sqlx's default of at most 10 connections.",
        sqlite_journal_mode(&atuin_db)
    ));
    Ok(r)
}

fn sqlite_journal_mode(db: &Path) -> String {
    let mode = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("PRAGMA journal_mode", [], |row| row.get::<_, String>(0)));
    match mode {
        Ok(m) => format!("`{m}`"),
        Err(e) => format!("not read ({e})"),
    }
}

async fn postgres(tmp: &Path, atuin_bin: &Path, o: &Opts) -> R<Report> {
    let dir = tmp.join("postgres");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut notes = Vec::new();
    let pg = match Cluster::start_with(&dir.join("with-statements"), PG_STATEMENTS) {
        Ok(cluster) => match cluster.psql("postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements") {
            Ok(_) => Pg {
                cluster,
                statements: true,
            },
            Err(e) => {
                notes.push(format!(
                    "pg_stat_statements not usable ({e}): no statements per request."
                ));
                Pg {
                    cluster,
                    statements: false,
                }
            }
        },
        Err(e) => {
            notes.push(format!(
                "The cluster would not start with pg_stat_statements ({}): no statements per request.",
                e.lines().next().unwrap_or("")
            ));
            Pg {
                cluster: Cluster::start(&dir.join("plain"))?,
                statements: false,
            }
        }
    };
    let url = pg.cluster.database("pigeonhole")?;
    pg.cluster.database("atuin")?;
    let mut settings = Vec::new();
    for db in ["pigeonhole", "atuin"] {
        let s = pg.cluster.psql(
            db,
            "SELECT current_setting('synchronous_commit') || ', fsync ' || current_setting('fsync')",
        )?;
        settings.push(format!("{db}: synchronous_commit {s}"));
    }
    let version = pg.cluster.psql("postgres", "SHOW server_version")?;
    let (server, auth) = pigeonhole(&dir, "pigeonhole", Some(&url)).await?;
    let atuin_uri = format!(
        "postgres://postgres@localhost/atuin?host={}",
        pg.cluster.socket_dir().display()
    );
    let atuin = Atuin::start(atuin_bin, &dir.join("atuin"), &atuin_uri).await?;
    let session = atuin_register(atuin.addr, "bench").await?;
    let mut peers = [
        Peer::new(0, server.inbox, server.pid(), auth, Some("pigeonhole".into())),
        Peer::new(
            1,
            atuin.addr,
            atuin.child.id(),
            format!("Token {session}"),
            Some("atuin".into()),
        ),
    ];
    for p in peers.iter_mut() {
        first_write(p).await?;
    }
    let f = rounds(&mut peers, Some(&pg), o).await?;
    let mut r = Report {
        rows: Vec::new(),
        notes,
    };
    let at_least_one = (Goal::AtLeast(1.0), "≥ 1.0");
    common_rows(
        &mut r,
        "PostgreSQL",
        &f,
        &[
            ("writes1", at_least_one.0, at_least_one.1),
            ("writes16", at_least_one.0, at_least_one.1),
            ("scale", Goal::AtLeast(4.0), "Pigeonhole ≥ 4×"),
            ("auth", at_least_one.0, at_least_one.1),
            ("count", at_least_one.0, at_least_one.1),
        ],
    );
    let backends = f.both("backends cpu");
    compare(
        &mut r.rows,
        format!("PostgreSQL: its backends' CPU per write at {MANY} clients"),
        backends,
        |x| number(x, " µs"),
        Goal::Info,
        "—",
    );
    if pg.statements {
        for (key, what) in [
            ("writes1".to_owned(), "write, 1 client".to_owned()),
            (format!("writes{MANY}"), format!("write, {MANY} clients")),
            ("auth1".into(), "auth-only read".into()),
            ("count1".into(), "how-much read".into()),
        ] {
            compare(
                &mut r.rows,
                format!("PostgreSQL: statements per {what}"),
                f.both(&format!("statements {key}")),
                |x| number(x, ""),
                Goal::Info,
                "—",
            );
        }
    }
    r.notes.push(stored_note("PostgreSQL", &peers).await?);
    server.stop().await?;
    atuin.stop().await?;
    r.notes.push(format!(
        "PostgreSQL {version}: one throwaway cluster (tools/throwaway-postgres: Unix socket only, fsync and \
         synchronous_commit on{}), a database for each server; as each database's sessions see them: {}. Pigeonhole \
         connects with `--database` (its own connections also set `synchronous_commit=on`); atuin-server with \
         `db_uri = \"postgres://postgres@localhost/atuin?host=SOCKET_DIR\"` (sqlx, a pool of at most 100 \
         connections; it sets no `synchronous_commit` of its own). Backends' CPU: utime + stime of the \
         `client backend` processes of the server's database (pg_stat_activity), read at both ends of the window. \
         Statements per request: calls of all statements of the server's database in pg_stat_statements \
         (BEGIN and COMMIT count, as `track_utility` is on) between the readings at both ends of the window, \
         divided by the requests answered between them.",
        if pg.statements {
            ", `shared_preload_libraries = pg_stat_statements`"
        } else {
            ""
        },
        settings.join("; ")
    ));

    // the database alone: the statements of one Pigeonhole write, run by pgbench without
    // any server, at 1 and 16 clients on the same machine (what the scaling of writes on
    // PostgreSQL is bounded by here)
    match database_alone(&pg.cluster, &dir, o) {
        Ok([one, many]) => r.rows.push(Row::new(
            format!("PostgreSQL alone (pgbench, Pigeonhole's 2 statements of a write, no server): writes/s at {MANY} clients / at 1 client"),
            format!("{:.2}× ({one:.0}/s → {many:.0}/s)", many / one),
            "—".into(),
            f64::NAN,
            Goal::Info,
            "—",
        )),
        Err(e) => r.notes.push(format!("PostgreSQL alone: not measured ({e}).")),
    }
    r.notes.push(format!(
        "PostgreSQL alone: pgbench (`-M prepared`, {} rounds of {} s at 1 and {MANY} clients, medians) runs in a loop what \
         Pigeonhole runs for one `POST /inbox/item` with a token: the account read by id, then the insert of a \
         100-byte item (each its own transaction, as Pigeonhole commits them), into Pigeonhole's database after \
         its rounds, with no server and no HTTP. Its ratio bounds what any server sending these statements \
         can reach on this machine.",
        o.rounds, o.secs
    ));

    // due → inbox on the same cluster, 1 and 3 Pigeonhole processes on one database
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| e.to_string())?;
    for n in [1usize, 3] {
        println!("  due → inbox, {n} Pigeonhole process(es), {} reminders ...", o.due);
        let url = pg.cluster.database(&format!("due{n}"))?;
        let mut servers = Vec::new();
        for i in 0..n {
            let name = format!("due{n}-{i}");
            let (s, _) = Server::start(
                &binary(),
                &dir.join(&name),
                &dir.join(format!("{name}.log")),
                &["--password-iterations", LOW_ITERATIONS, "--database", &url],
            )
            .await?;
            servers.push(s);
        }
        let services: Vec<Services> = servers
            .iter()
            .map(|s| Services {
                inbox: format!("http://{}", s.inbox),
                scheduler: format!("http://{}", s.scheduler),
            })
            .collect();
        // a burst to warm up (each process's connections and their prepared statements, as
        // on a server that has run a while), then the rounds: the median of their p50s, the
        // largest of their maxima
        due_to_inbox(&http, &services, o.due, 0).await?;
        let (mut p50s, mut max) = (Vec::new(), f64::NAN);
        for round in 1..=o.rounds {
            let latencies = due_to_inbox(&http, &services, o.due, round).await?;
            p50s.push(percentile(&latencies, 0.5) * 1000.0);
            max = latencies.iter().copied().fold(max, f64::max);
        }
        for s in servers {
            s.stop().await?;
        }
        let max = max * 1000.0;
        let p50 = percentile(&p50s, 0.5);
        let each: Vec<String> = p50s.iter().map(|p| format!("{p:.0}")).collect();
        r.rows.push(
            Row::new(
                format!(
                    "PostgreSQL: due → inbox, {} reminders due at one second, {n} Pigeonhole process{}",
                    o.due,
                    if n == 1 { "" } else { "es" }
                ),
                format!("p50 {p50:.0} ms (rounds: {}), max {max:.0} ms", each.join(", ")),
                "— (no scheduler)".into(),
                f64::NAN,
                Goal::AtMost(200.0),
                "p50 ≤ 200 ms",
            )
            .checked_on(p50),
        );
    }
    r.notes.push(format!(
        "Due → inbox: {} reminders added round-robin through the processes, all due at the same whole second, \
         delivered by an inbox trigger into an inbox of the first process; latency = arrival (polled with `GET \
         /inbox/size` every 5 ms) − due second; each must arrive exactly once (benches/common/due.rs, as \
         benches/scaling.rs). On fresh processes, one burst warms them up (not counted), then {} rounds (new \
         accounts each): the median of the rounds' p50s, the largest of their maxima. atuin-server has no scheduler.",
        o.due, o.rounds
    ));
    Ok(r)
}

/// Medians of pgbench's rates at 1 and [`MANY`] clients running the statements of one write
/// of Pigeonhole on its database (see the note of the table).
fn database_alone(cluster: &Cluster, dir: &Path, o: &Opts) -> R<[f64; 2]> {
    let account = cluster.psql("pigeonhole", "SELECT id FROM inbox_accounts ORDER BY username LIMIT 1")?;
    if account.is_empty() {
        return Err("no account in Pigeonhole's database".into());
    }
    let data: String = (0..100).map(|i| format!("{:02x}", b'a' + (i % 26) as u8)).collect();
    let script = dir.join("write.sql");
    std::fs::write(
        &script,
        format!(
            "SELECT * FROM inbox_accounts WHERE id = '{account}';\n\
             INSERT INTO inbox_items (id, account, kind, data, created_secs, created_nanos) \
             VALUES (gen_random_uuid(), '{account}', 'text', '\\x{data}', 1, 0);\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let mut rates = [Vec::new(), Vec::new()];
    for _ in 0..o.rounds {
        for (i, clients) in [1, MANY].into_iter().enumerate() {
            rates[i].push(cluster.pgbench("pigeonhole", clients, o.secs as u64, &script)?);
        }
    }
    Ok(rates.map(|mut r| {
        r.sort_by(f64::total_cmp);
        r[r.len() / 2]
    }))
}

// ---------------------------------------------------------------------------------------

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

async fn run() -> R<()> {
    let o = Opts::parse()?;
    // reqwest (the due → inbox phase) is built without a crypto provider of its own
    let _ = rustls::crypto::ring::default_provider().install_default();
    let atuin_bin = atuin_binary()?;
    let run = Run::start(&format!(
        "Pigeonhole {} vs atuin-server {}",
        binary().display(),
        atuin_bin.display()
    ));
    let tmp = tempfile::Builder::new()
        .prefix("pigeonhole-peers-")
        .tempdir()
        .map_err(|e| e.to_string())?;

    let mut rows = Vec::new();
    let mut notes = vec![format!(
        "Each pairing: {} rounds, the two servers alternating (the order flips each round); each phase a {WARMUP:.0} s \
         warm-up and {} s measured with the load generator of benches/common/http.rs (one keep-alive HTTP/1.1 \
         connection per client, requests back to back; it runs on the same machine and shares its cores); figures \
         are medians of the rounds. One account on each server: Pigeonhole's bearer token from `POST /login` on \
         the inbox service, atuin's session token from `POST /register` (`Authorization: Token …`). Writes: \
         Pigeonhole `POST /inbox/item` of a {ITEM_BYTES}-byte text item (server-made id); atuin `POST \
         /api/v0/record` of an array of one record with a fresh id, the next index of its client's host (one \
         host per client) and data in PASETO's wire form carrying {ITEM_BYTES} bytes (plus its 129-byte wrapped key, \
         which atuin stores too). A 200 is a durable write on both. Reads: \"auth only\" is Pigeonhole's cheapest \
         authenticated read, `GET /permissions` (the token checked and its account looked up, nothing else read), \
         against atuin's `GET /api/v0/me` (its session looked up); \"how much do I have\" is `GET /inbox/size` \
         against `GET /api/v0/record` (the last index of each host and tag); both read accounts filled by the \
         write phases before them. CPU per write: utime + stime of the server process (/proc/PID/stat) read at both \
         ends of the measured window, divided by the writes answered between the two readings. RSS: VmRSS after each round's write \
         phases (median). Pigeonhole uses --password-iterations {LOW_ITERATIONS} (logins are setup here).",
        o.rounds, o.secs
    )];
    println!("embedded pairing: Pigeonhole on sled, atuin-server on SQLite ...");
    let e = embedded(tmp.path(), &atuin_bin, &o).await?;
    rows.extend(e.rows);
    notes.extend(e.notes);
    println!("PostgreSQL pairing ...");
    match postgres(tmp.path(), &atuin_bin, &o).await {
        Ok(p) => {
            rows.extend(p.rows);
            notes.extend(p.notes);
        }
        Err(e) => {
            println!("PostgreSQL pairing not measured: {e}");
            notes.push(format!("PostgreSQL pairing: not measured ({e})."));
        }
    }
    let bin = binary();
    let bin = bin.strip_prefix(manifest_dir()).unwrap_or(&bin);
    let doc = o.doc.then(|| Doc {
        markers: (START, END),
        after: Some(AFTER),
        bench: "peers",
        title: "Side by side with atuin-server",
        about: format!(
            "It installs atuin-server {ATUIN_VERSION} once (`cargo install --locked`, into \
             `${{XDG_CACHE_HOME:-$HOME/.cache}}/pigeonhole-bench/atuin-server-{ATUIN_VERSION}` or \
             `$PIGEONHOLE_BENCH_CACHE`) and compares it with Pigeonhole (`{}`), each pairing on the same kind of \
             storage: an embedded store (sled / SQLite) and PostgreSQL (one throwaway cluster). The ratio is \
             Pigeonhole / atuin-server; goals are on the ratio unless they name Pigeonhole's own figure. \
             `BENCH_ROUNDS` and `BENCH_SECS` set the rounds and the seconds per phase.",
            bin.display()
        ),
        caveat: "; the two servers of a pairing ran alternately under the same conditions",
    });
    run.finish(&rows, COLUMNS, &notes, doc)
}
