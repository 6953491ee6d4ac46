//! What the PostgreSQL engine counts in this process, for the metrics (issue 30): waits for
//! a pooled connection, whole transactions, and claims on queued work. Process-wide (one
//! server process has one store; tests that run several stores in one process read sums),
//! kept with atomics so that recording is an atomic add; read through
//! `Administration::counters`.

use crate::store::api::{AtomicHistogram, EngineCounters};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Instant;

/// Bucket bounds in µs of the pool-wait and transaction histograms.
const MICROS_BUCKETS: [u64; 12] = [
    100, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000, 5_000_000,
];

struct Stats {
    pool_wait: AtomicHistogram,
    transaction: AtomicHistogram,
    claimed: AtomicU64,
    taken_over: AtomicU64,
    released: AtomicU64,
}

static STATS: LazyLock<Stats> = LazyLock::new(|| Stats {
    pool_wait: AtomicHistogram::new(&MICROS_BUCKETS),
    transaction: AtomicHistogram::new(&MICROS_BUCKETS),
    claimed: AtomicU64::new(0),
    taken_over: AtomicU64::new(0),
    released: AtomicU64::new(0),
});

fn micros_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A wait for a pooled connection that began at `start` ended (with a connection or not).
pub(crate) fn pool_waited(start: Instant) {
    STATS.pool_wait.observe(micros_since(start));
}

/// A transaction (its wait for a connection, its statements, its commit, its retries)
/// that began at `start` ended.
pub(crate) fn transaction_took(start: Instant) {
    STATS.transaction.observe(micros_since(start));
}

/// `n` due items, deliveries or e-mails were claimed by this process, `taken_over` of them
/// from another process whose lease had run out. (The claiming queries answer the new
/// `claimed_by` only, so they pass 0 taken over until they also answer the old one.)
pub(crate) fn claimed(n: u64, taken_over: u64) {
    STATS.claimed.fetch_add(n, Ordering::Relaxed);
    STATS.taken_over.fetch_add(taken_over, Ordering::Relaxed);
}

/// `n` claims were given up.
pub(crate) fn released(n: u64) {
    STATS.released.fetch_add(n, Ordering::Relaxed);
}

/// Everything counted so far.
pub(crate) fn counters() -> EngineCounters {
    EngineCounters {
        pool_wait_micros: STATS.pool_wait.snapshot(),
        transaction_micros: STATS.transaction.snapshot(),
        claimed: STATS.claimed.load(Ordering::Relaxed),
        taken_over: STATS.taken_over.load(Ordering::Relaxed),
        released: STATS.released.load(Ordering::Relaxed),
    }
}
