//! Benchmark of the storage engines and of several processes on one database (issue 21; not
//! a test): durable writes per second and due-to-inbox latency for
//!
//! * sled, one process (the zero-config default);
//! * PostgreSQL with 1, 2 and 4 processes on one database (when PostgreSQL is installed:
//!   a throwaway cluster from tests/common/postgres.rs, on a Unix socket).
//!
//! Run with `cargo bench --bench scaling` (a program of its own, no test harness). Every
//! process is the release binary, started with a data directory of its own; the clients are
//! in this program, over loopback HTTP.
//!
//! * **Writes**: `BENCH_WRITERS` (32) clients, each `POST /inbox/item` in a loop for
//!   `BENCH_SECS` (5) seconds after a one-second warm-up, spread round-robin over the
//!   processes and over 8 accounts. Every 200 is a durable write (fsynced, or committed).
//! * **Due to inbox**: `BENCH_DUE` (200) reminders, added round-robin through every
//!   process, all due at the same second, delivered by an inbox trigger into an inbox of the
//!   same server; the latency of each is the time from its due second to its arrival (seen by
//!   polling `GET /inbox/size` every 5 ms). Each must arrive exactly once: the count is
//!   checked to stay at `BENCH_DUE` for a second after.
//!
//! The figures are printed as a table, with ratios to sled measured in the same run
//! (docs/performance.md).

use base64::Engine;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/mod.rs"]
mod common;

use common::due::{account, due_to_inbox, Services};
use common::{env_usize, Cluster};

type R<T> = Result<T, String>;

fn free_port() -> R<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// One `pigeonhole serve` process.
struct Process {
    child: Child,
    inbox: String,
    scheduler: String,
    log: PathBuf,
}

impl Process {
    async fn start(data: &Path, database: Option<&str>, http: &reqwest::Client) -> R<Process> {
        std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
        let (ip, sp) = (free_port()?, free_port()?);
        let log = data.with_extension("log");
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
        command
            .arg("serve")
            .arg("--data-dir")
            .arg(data)
            .args(["--host", "127.0.0.1", "--log-level", "warn"])
            .args(["--inbox-port", &ip.to_string(), "--scheduler-port", &sp.to_string()]);
        if let Some(url) = database {
            command.args(["--database", url]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("start the server: {e}"))?;
        let mut process = Process {
            child,
            inbox: format!("http://127.0.0.1:{ip}"),
            scheduler: format!("http://127.0.0.1:{sp}"),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        for base in [process.inbox.clone(), process.scheduler.clone()] {
            loop {
                if let Ok(Some(status)) = process.child.try_wait() {
                    return Err(format!("the server exited at start ({status}): {}", process.log_tail()));
                }
                if let Ok(r) = http.get(format!("{base}/healthz")).send().await {
                    if r.status() == 200 {
                        break;
                    }
                }
                if Instant::now() > deadline {
                    return Err(format!("the server did not start: {}", process.log_tail()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(process)
    }

    fn log_tail(&self) -> String {
        common::http::log_tail(&self.log)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Durable writes per second of `writers` clients over the processes.
async fn writes(http: &reqwest::Client, processes: &[Process], writers: usize, secs: f64) -> R<f64> {
    let mut tokens = Vec::new();
    for i in 0..8 {
        let base = &processes[i % processes.len()].inbox;
        tokens.push(account(http, base, &format!("writer{i}")).await?);
    }
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let url = format!("{}/inbox/item", processes[w % processes.len()].inbox);
        let token = tokens[w % tokens.len()].clone();
        let (http, counting, stop, done, failed) = (
            http.clone(),
            counting.clone(),
            stop.clone(),
            done.clone(),
            failed.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let data = base64::engine::general_purpose::STANDARD.encode(format!("write of client {w}"));
            let body = json!({"type": "text", "data": data});
            while !stop.load(Ordering::Relaxed) {
                let ok = matches!(
                    http.post(&url).bearer_auth(&token).json(&body).send().await,
                    Ok(r) if r.status() == 200
                );
                if counting.load(Ordering::Relaxed) {
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    counting.store(true, Ordering::SeqCst);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    counting.store(false, Ordering::SeqCst);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    let failed = failed.load(Ordering::SeqCst);
    if failed > 0 {
        return Err(format!("{failed} writes failed"));
    }
    Ok(done.load(Ordering::SeqCst) as f64 / elapsed)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

struct Row {
    name: String,
    writes: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

async fn measure(name: &str, processes: &[Process], http: &reqwest::Client) -> R<Row> {
    let writers = env_usize("BENCH_WRITERS", 32);
    let secs = env_usize("BENCH_SECS", 5) as f64;
    let due = env_usize("BENCH_DUE", 200);
    eprintln!("{name}: writes…");
    let writes = writes(http, processes, writers, secs).await?;
    eprintln!("{name}: {writes:.0} writes/s; {due} reminders due at once…");
    let services: Vec<Services> = processes
        .iter()
        .map(|p| Services {
            inbox: p.inbox.clone(),
            scheduler: p.scheduler.clone(),
        })
        .collect();
    let mut latencies = due_to_inbox(http, &services, due, 0).await?;
    latencies.sort_by(f64::total_cmp);
    Ok(Row {
        name: name.to_owned(),
        writes,
        p50: percentile(&latencies, 0.5),
        p99: percentile(&latencies, 0.99),
        max: latencies.last().copied().unwrap_or(f64::NAN),
    })
}

/// The PostgreSQL rows: a throwaway cluster, one database per setup, 1, 2 and 4 processes.
async fn postgres_rows(dir: &Path, http: &reqwest::Client) -> R<Vec<Row>> {
    let cluster = Cluster::start(dir)?;
    let mut rows = Vec::new();
    for n in [1usize, 2, 4] {
        let url = cluster.database(&format!("bench{n}"))?;
        let mut processes = Vec::new();
        for i in 0..n {
            processes.push(Process::start(&dir.join(format!("pg{n}-{i}")), Some(&url), http).await?);
        }
        let name = format!("PostgreSQL, {n} process{}", if n == 1 { "" } else { "es" });
        rows.push(measure(&name, &processes, http).await?);
    }
    Ok(rows)
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // reqwest is built without a crypto provider of its own (the server's is ring's)
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client");
    let mut rows = Vec::new();
    let sled = async {
        let process = Process::start(&dir.path().join("sled"), None, &http).await?;
        measure("sled, 1 process", std::slice::from_ref(&process), &http).await
    };
    match sled.await {
        Ok(row) => rows.push(row),
        Err(e) => {
            eprintln!("sled: {e}");
            std::process::exit(1);
        }
    }
    match postgres_rows(dir.path(), &http).await {
        Ok(more) => rows.extend(more),
        Err(e) => eprintln!("PostgreSQL: not measured: {e}"),
    }
    let base = rows[0].writes;
    println!("| setup | durable writes/s | ratio to sled | due→inbox p50 | p99 | max |");
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {:.0} | {:.2} | {:.0} ms | {:.0} ms | {:.0} ms |",
            r.name,
            r.writes,
            r.writes / base,
            r.p50 * 1000.0,
            r.p99 * 1000.0,
            r.max * 1000.0
        );
    }
}
