//! Benchmark of the scheduler's triggerer (not a test): a pass must cost time proportional
//! to the number of DUE items, not to the number of stored items.
//!
//! Run with `cargo bench --bench triggerer` (a program of its own, no test harness). It fills two fresh stores in
//! temporary directories (1,000 and 1,000,000 scheduled items, none due: all are due in
//! 2099), times many idle triggerer passes on each (alternating between the stores, so drift
//! of the machine affects both alike), prints mean and median per pass and the ratio
//! cost(1M) / cost(1k), then times passes in which 1,000 items ARE due (each triggers).
//!
//! Sizes can be changed with `BENCH_SMALL`, `BENCH_LARGE`, `BENCH_PASSES` and `BENCH_DUE`
//! (environment variables) for quick runs; docs/performance.md reports the defaults.

use pigeonhole::clock::Clock;
use pigeonhole::domain::scheduler::models::{Day, ScheduledItem, Tickle};
use pigeonhole::domain::wire::{new_uuid, Timestamp};
use pigeonhole::loopers::triggerer;
use pigeonhole::store::scheduler::AddOutcome;
use pigeonhole::store::{Registration, Store, Written};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Items per account while filling.
#[path = "common/mod.rs"]
mod common;

use common::env_usize;

const PER_ACCOUNT: usize = 1_000;
/// 2099-01-01T00:00:00Z: every filled item is due from then on (one second apart).
const FAR_FUTURE: i64 = 4_070_908_800;

async fn register(store: &Store, name: &str) -> Uuid {
    let registered = store
        .scheduler
        .accounts
        .register(name, "bench-hash".into(), Timestamp::now())
        .await;
    match registered {
        Ok(written) => match written.durable().await {
            Ok(Registration::Created(account)) => account.id,
            Ok(Registration::Taken) => panic!("username {name} taken in a fresh store"),
            Err(e) => panic!("register {name}: {e}"),
        },
        Err(e) => panic!("register {name}: {e}"),
    }
}

fn item(owner: Uuid, n: usize, day: Day) -> ScheduledItem {
    ScheduledItem {
        id: new_uuid(),
        owner,
        tickle: Tickle {
            content: format!("benchmark item {n}").into_bytes(),
            day,
            time: None,
            recurrence: None,
        },
        created: Timestamp::now(),
        server_time: 0,
    }
}

/// Queues an item (the receipt is awaited by the caller, many at once).
async fn add(store: &Store, item: &ScheduledItem, due: Timestamp) -> Written<AddOutcome> {
    match store.scheduler.add_scheduled(item, &move |_: &_| due, None).await {
        Ok(written) => written,
        Err(e) => panic!("add_scheduled: {e}"),
    }
}

/// Waits until the queued items are durable and checks that each was added.
async fn added(receipts: Vec<Written<AddOutcome>>) {
    match Written::all(receipts).durable().await {
        Ok(outcomes) => assert!(
            outcomes.iter().all(|o| matches!(o, AddOutcome::Added)),
            "limit reached without a cap"
        ),
        Err(e) => panic!("add_scheduled: {e}"),
    }
}

/// Fills `store` with `n` items due in 2099, `PER_ACCOUNT` per account, through
/// `add_scheduled` (one atomic batch per item, as the API does; the items of one account
/// are awaited together). Answers the accounts and the fill time.
async fn fill(store: &Store, label: &str, n: usize) -> (Vec<Uuid>, Duration) {
    let started = Instant::now();
    let day = Day {
        year: 2099,
        month: 1,
        day: 1,
    };
    let mut accounts = Vec::new();
    let mut receipts = Vec::new();
    let step = (n / 10).max(1);
    for i in 0..n {
        if i % PER_ACCOUNT == 0 {
            added(std::mem::take(&mut receipts)).await;
            accounts.push(register(store, &format!("{label}{:07}", i / PER_ACCOUNT)).await);
        }
        let owner = *accounts.last().expect("an account was registered");
        receipts.push(
            add(
                store,
                &item(owner, i, day),
                Timestamp::from_unix(FAR_FUTURE + i as i64, 0),
            )
            .await,
        );
        if (i + 1) % step == 0 && n >= 100_000 {
            println!(
                "  {label}: {:>9} / {n} items, {:.1} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    added(receipts).await;
    store.admin.flush().expect("flush after filling");
    (accounts, started.elapsed())
}

fn dir_size(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_size(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

struct Stats {
    mean: f64,
    median: f64,
    p99: f64,
    min: f64,
}

/// Statistics in microseconds.
fn stats(samples: &mut [Duration]) -> Stats {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = samples.len();
    Stats {
        mean: samples.iter().map(|d| us(*d)).sum::<f64>() / n as f64,
        median: if n % 2 == 1 {
            us(samples[n / 2])
        } else {
            (us(samples[n / 2 - 1]) + us(samples[n / 2])) / 2.0
        },
        p99: us(samples[(n * 99 / 100).min(n - 1)]),
        min: us(samples[0]),
    }
}

/// One idle pass, checked to have triggered nothing; answers its duration.
async fn idle_pass(store: &Store) -> Duration {
    let started = Instant::now();
    let (triggered, sleep) = triggerer::pass(store, &Clock::real(), &Default::default(), &|| ())
        .await
        .expect("triggerer pass");
    let took = started.elapsed();
    assert_eq!(triggered, 0, "nothing is due");
    assert!(sleep.is_some(), "the next due instant is known");
    took
}

/// Adds `n` items that are already due (one per account, round robin) and times the one pass
/// that triggers them all; answers the pass duration.
async fn due_pass(store: &Store, accounts: &[Uuid], n: usize) -> Duration {
    let now = Timestamp::now();
    let day = Day {
        year: 2000,
        month: 1,
        day: 1,
    };
    let mut receipts = Vec::new();
    for i in 0..n {
        let owner = accounts[i % accounts.len()];
        receipts.push(
            add(
                store,
                &item(owner, i, day),
                Timestamp::from_unix(now.secs - 60, i as u32),
            )
            .await,
        );
    }
    added(receipts).await;
    store.admin.flush().expect("flush before the due pass");
    let started = Instant::now();
    let (triggered, _) = triggerer::pass(store, &Clock::real(), &Default::default(), &|| ())
        .await
        .expect("triggerer pass");
    let took = started.elapsed();
    assert_eq!(triggered, n, "every due item triggers");
    took
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let small_n = env_usize("BENCH_SMALL", 1_000);
    let large_n = env_usize("BENCH_LARGE", 1_000_000);
    let passes = env_usize("BENCH_PASSES", 1_000).max(10);
    let due_n = env_usize("BENCH_DUE", 1_000);
    let warmup = 200;
    let rounds = 10;

    println!("triggerer benchmark (release: {})", !cfg!(debug_assertions));
    let small_dir = tempfile::tempdir().expect("temp dir");
    let large_dir = tempfile::tempdir().expect("temp dir");
    let small: Arc<Store> = Store::open(small_dir.path()).expect("open the small store");
    let large: Arc<Store> = Store::open(large_dir.path()).expect("open the large store");

    println!("filling {small_n} items ...");
    let (small_accounts, small_fill) = fill(&small, "small", small_n).await;
    println!("filling {large_n} items ...");
    let (large_accounts, large_fill) = fill(&large, "large", large_n).await;
    let fill_rate = |n: usize, d: Duration| d.as_secs_f64() * 1e6 / n as f64;
    println!(
        "fill: {small_n} items in {:.2} s ({:.1} µs/item, {} accounts, {:.1} MB on disk)",
        small_fill.as_secs_f64(),
        fill_rate(small_n, small_fill),
        small_accounts.len(),
        dir_size(small_dir.path()) as f64 / 1e6
    );
    println!(
        "fill: {large_n} items in {:.2} s ({:.1} µs/item, {} accounts, {:.1} MB on disk)",
        large_fill.as_secs_f64(),
        fill_rate(large_n, large_fill),
        large_accounts.len(),
        dir_size(large_dir.path()) as f64 / 1e6
    );

    // Warm-up, then alternate rounds between the two stores.
    for _ in 0..warmup {
        idle_pass(&small).await;
        idle_pass(&large).await;
    }
    let per_round = passes.div_ceil(rounds);
    let mut small_samples = Vec::with_capacity(per_round * rounds);
    let mut large_samples = Vec::with_capacity(per_round * rounds);
    for _ in 0..rounds {
        for _ in 0..per_round {
            small_samples.push(idle_pass(&small).await);
        }
        for _ in 0..per_round {
            large_samples.push(idle_pass(&large).await);
        }
    }
    let s = stats(&mut small_samples);
    let l = stats(&mut large_samples);
    println!();
    println!(
        "idle passes (nothing due), {} passes per store after {warmup} warm-up:",
        small_samples.len()
    );
    println!(
        "  {:>9} items: mean {:>7.2} µs  median {:>7.2} µs  p99 {:>7.2} µs  min {:>7.2} µs",
        small_n, s.mean, s.median, s.p99, s.min
    );
    println!(
        "  {:>9} items: mean {:>7.2} µs  median {:>7.2} µs  p99 {:>7.2} µs  min {:>7.2} µs",
        large_n, l.mean, l.median, l.p99, l.min
    );
    println!(
        "  ratio cost({large_n}) / cost({small_n}): mean {:.2}, median {:.2} (goal <= 2)",
        l.mean / s.mean,
        l.median / s.median
    );

    if due_n > 0 {
        println!();
        println!("passes with {due_n} due items (each triggers; includes the durable flush):");
        let due_rounds = 5;
        // The small store has one account; on the large store the due items are measured both
        // in one account (same shape as the small store) and spread over all its accounts.
        for (label, store, accounts) in [
            (
                format!("{small_n} items, due items in 1 account"),
                &small,
                &small_accounts[..1],
            ),
            (
                format!("{large_n} items, due items in 1 account"),
                &large,
                &large_accounts[..1],
            ),
            (
                format!(
                    "{large_n} items, due items over {} accounts",
                    large_accounts.len().min(due_n)
                ),
                &large,
                &large_accounts[..],
            ),
        ] {
            let mut samples: Vec<Duration> = Vec::new();
            for _ in 0..due_rounds {
                samples.push(due_pass(store, accounts, due_n).await);
            }
            let st = stats(&mut samples);
            println!(
                "  {label}: {due_rounds} passes, mean {:.1} ms/pass = {:.1} µs per triggered item, \
                 median {:.1} ms/pass = {:.1} µs per item, min {:.1} µs per item",
                st.mean / 1e3,
                st.mean / due_n as f64,
                st.median / 1e3,
                st.median / due_n as f64,
                st.min / due_n as f64
            );
            // Back to idle: the store still answers an idle pass.
            idle_pass(store).await;
        }
    }
}
