//! Benchmark of `pigeonhole migrate-store` (issue 21 point 4; not a test): the memory and
//! time of moving one large database between the engines, to show that a copy stays within a
//! memory budget whatever the database's size.
//!
//! Run with `cargo bench --bench migrate` (a program of its own, no test harness; it needs
//! PostgreSQL's server programs for the throwaway cluster of tools/throwaway-postgres). It
//! fills a sled data directory through the library's store with `BENCH_ITEMS` (4,000) inbox
//! items of `BENCH_ITEM_BYTES` (60,000) random bytes in one account, then runs the release
//! binary's `migrate-store` sled → PostgreSQL, PostgreSQL → sled, PostgreSQL → PostgreSQL
//! and sled → sled, and reports each copy's maximum resident set size (the child's
//! `ru_maxrss`, from `wait4`) and time, and the resident size as a ratio to the data copied
//! (docs/performance.md). Each copy checks itself (counts and digest); a failure stops the
//! benchmark.

use pigeonhole::domain::inbox::models::{InboxItem, ItemType};
use pigeonhole::domain::wire::{new_uuid, Timestamp};
use pigeonhole::store::{Registration, Store};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "common/mod.rs"]
mod common;

use common::{env_usize, Cluster};

type R<T> = Result<T, String>;

/// The sled data directory `dir` with one account of `items` items of `bytes` bytes each.
async fn fill(dir: &Path, items: usize, bytes: usize) -> R<()> {
    let store = Store::open(dir).map_err(|e| format!("open {}: {e}", dir.display()))?;
    let registered = store
        .inbox
        .accounts
        .register("bench", "not a real hash".into(), Timestamp::now())
        .await
        .map_err(|e| e.to_string())?
        .durable()
        .await
        .map_err(|e| e.to_string())?;
    let Registration::Created(account) = registered else {
        return Err("the account exists already".into());
    };
    // random-looking bytes (so that no layer can compress them), cheaply: a counter hashed
    let mut data = Vec::with_capacity(bytes);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data.truncate(bytes);
    let mut pending = Vec::new();
    for n in 0..items {
        data[0] = n as u8;
        let item = InboxItem {
            id: new_uuid(),
            kind: ItemType::Png,
            data: data.clone(),
            created: Timestamp::now(),
        };
        let written = store
            .inbox
            .items
            .add_item(account.id, &item, None, None)
            .await
            .map_err(|e| e.to_string())?;
        pending.push(written);
        if pending.len() == 64 {
            for w in pending.drain(..) {
                w.durable().await.map_err(|e| e.to_string())?;
            }
        }
    }
    for w in pending {
        w.durable().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs `pigeonhole migrate-store --from FROM --to TO`; its maximum RSS in KiB and seconds.
#[allow(unsafe_code, reason = "std has no wait4: a child's own resource usage")]
fn migrate(binary: &Path, from: &str, to: &str) -> R<(u64, f64)> {
    let started = Instant::now();
    let child = Command::new(binary)
        .args(["migrate-store", "--from", from, "--to", to])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    let pid = child.id() as libc::pid_t;
    // the child's own resource usage (std's wait does not give it)
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct, filled by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on the pid of our own child, with pointers to live locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let seconds = started.elapsed().as_secs_f64();
    if waited != pid {
        return Err(format!("wait4: {}", std::io::Error::last_os_error()));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string());
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let stderr = out
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .unwrap_or_default();
        return Err(format!("migrate-store --from {from} --to {to} failed: {stderr}"));
    }
    Ok((usage.ru_maxrss as u64, seconds))
}

async fn run() -> R<()> {
    let items = env_usize("BENCH_ITEMS", 4_000);
    let bytes = env_usize("BENCH_ITEM_BYTES", 60_000);
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_pigeonhole"));
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    // the cluster's directories must be readable by the user PostgreSQL runs as
    std::fs::set_permissions(work.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    let pi = work.path().join("pi");
    let started = Instant::now();
    fill(&pi, items, bytes).await?;
    let data_mib = (items * bytes) as f64 / 1_048_576.0;
    eprintln!(
        "filled {items} items of {bytes} bytes ({data_mib:.0} MiB) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let cluster = Cluster::start(work.path())?;
    let (first, second) = (cluster.database("copy1")?, cluster.database("copy2")?);
    let back = work.path().join("back").display().to_string();
    let again = work.path().join("again").display().to_string();
    let pi = pi.display().to_string();
    let copies = [
        ("sled → PostgreSQL", pi.as_str(), first.as_str()),
        ("PostgreSQL → sled", first.as_str(), back.as_str()),
        ("PostgreSQL → PostgreSQL", first.as_str(), second.as_str()),
        ("sled → sled", back.as_str(), again.as_str()),
    ];
    println!("{items} items of {bytes} bytes: {data_mib:.0} MiB of items");
    println!();
    println!("| copy | max RSS | ratio to the data | time | MiB/s |");
    println!("|---|---|---|---|---|");
    for (name, from, to) in copies {
        let (kib, seconds) = migrate(&binary, from, to)?;
        let mib = kib as f64 / 1024.0;
        println!(
            "| {name} | {mib:.0} MiB | {:.2} | {seconds:.1} s | {:.0} |",
            mib / data_mib,
            data_mib / seconds
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("migrate benchmark: {e}");
        std::process::exit(1);
    }
}
