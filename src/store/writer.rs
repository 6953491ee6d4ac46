//! One writer for the whole database, and group commit.
//!
//! Request code never writes to sled itself. A change is a [`Batch`]; [`Tree::apply_batch`]
//! queues it and makes it visible at once to every later read of the store through an
//! in-memory *overlay* (key → newest queued value), so that the read-check-write sequences
//! under an account lock see it. One thread, the writer, takes everything queued, applies it
//! to sled as one `apply_batch` per tree, drops those keys from the overlay and then calls
//! `flush()`. Queuing a batch answers a [`Ticket`] (the batch's number), which resolves once
//! a flush that covers that batch, and so every batch queued before it, has finished; the
//! store hands it out inside a [`super::Written`] receipt.
//!
//! Why not let each request call `apply_batch` and share the flushes: in sled 0.34 the first
//! `apply_batch` of a process turns on a process-wide reader/writer lock; every later
//! `apply_batch` takes it for writing while `flush()` holds it for reading during the whole
//! write-out and `fsync`. Requests then wait for the flush before they can even apply their
//! change, and most flushes carry one or two changes. With one writer there is exactly one
//! `apply_batch` and one flush per cycle, and a cycle carries everything that arrived during
//! the previous one (measured in docs/performance.md).
//!
//! Crash safety: each queued batch ends up inside one sled batch (atomic on recovery),
//! batches are applied in the order they were queued, and nothing is acknowledged before the
//! flush that covers it *and* the `fsync`s of [`super::stable`] that make it survive a power
//! cut (sled's `flush()` alone does not). One cycle shares one set of syncs among all the
//! batches it carries. After a failed sync the writer refuses every later cycle: the kernel
//! may have dropped the pages it could not write, so a later successful `fsync` would not
//! mean that earlier data is on disk (a restart re-reads what is really there).

use super::chunks;
use super::stable::Stable;
use super::{lock, Result, StoreError};
use sled::IVec;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use tokio::sync::watch;

type Write = (Vec<u8>, Option<IVec>);

/// A stored value as reads answer it (derefs to `[u8]`). Only this engine layer knows it is
/// sled's.
pub(crate) type Bytes = IVec;

/// Per tree: key → (number of the newest batch writing it, its value or `None`).
type Overlay = BTreeMap<Vec<u8>, (u64, Option<IVec>)>;

/// Writes to one tree that must land together (same methods as `sled::Batch`).
#[derive(Default)]
pub(crate) struct Batch {
    writes: Vec<Write>,
}

impl Batch {
    pub(crate) fn insert(&mut self, key: impl AsRef<[u8]>, value: impl Into<IVec>) {
        self.writes.push((key.as_ref().to_vec(), Some(value.into())));
    }

    pub(crate) fn remove(&mut self, key: impl AsRef<[u8]>) {
        self.writes.push((key.as_ref().to_vec(), None));
    }
}

struct Queued {
    seq: u64,
    tree: usize,
    writes: Vec<Write>,
}

#[derive(Default)]
struct Pending {
    /// Number of the last batch queued (batches are numbered from 1).
    last_seq: u64,
    queue: Vec<Queued>,
    overlay: Vec<Overlay>,
    stop: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flushed {
    /// Every batch numbered up to this one is on disk.
    ok_upto: u64,
    /// The batches numbered up to this one were lost (applying or flushing failed).
    failed_upto: u64,
}

struct Shared {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    pending: Mutex<Pending>,
    /// Signalled when a batch is queued or the writer must stop.
    queued: Condvar,
    /// Number of keys in the overlay: reads skip the mutex while it is empty.
    overlay_keys: AtomicUsize,
    /// Held while taking batches from the queue and applying them, so that they reach sled
    /// in the order they were queued (the writer thread and [`Writer::flush_now`]).
    applying: Mutex<()>,
    flushed: watch::Sender<Flushed>,
    /// The syncs after each flush (`None`: a temporary database, in tests).
    stable: Option<Mutex<Stable>>,
    /// A sync failed: nothing is acknowledged any more.
    broken: std::sync::atomic::AtomicBool,
    /// Cycles that reached the disk.
    cycles: std::sync::atomic::AtomicU64,
    /// The last cycle failed (applying, flushing or syncing); cleared by the next good one.
    last_cycle_failed: std::sync::atomic::AtomicBool,
    /// Per cycle that reached the disk: batches it carried and time its flush and syncs
    /// took, for the metrics (read at scrape time).
    cycle_sizes: CycleHistogram,
    sync_micros: CycleHistogram,
}

/// Bucket bounds of [`CycleHistogram`]s: batches per cycle, and sync durations in µs.
pub const BATCH_BUCKETS: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
pub const SYNC_MICROS_BUCKETS: [u64; 10] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// A histogram of one cycle value with fixed bounds, kept with atomics by the writer thread
/// (the store knows nothing of the metrics; `launch` reads these at scrape time).
struct CycleHistogram {
    bounds: &'static [u64],
    /// Cumulative-free counts: `counts[i]` is the number of values ≤ `bounds[i]` and above
    /// the previous bound; the last entry counts the values above every bound.
    counts: Vec<std::sync::atomic::AtomicU64>,
    sum: std::sync::atomic::AtomicU64,
}

impl CycleHistogram {
    fn new(bounds: &'static [u64]) -> CycleHistogram {
        CycleHistogram {
            bounds,
            counts: (0..=bounds.len())
                .map(|_| std::sync::atomic::AtomicU64::new(0))
                .collect(),
            sum: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn observe(&self, value: u64) {
        let i = self
            .bounds
            .iter()
            .position(|b| value <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(value, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
            sum: self.sum.load(Ordering::Relaxed),
        }
    }
}

/// What a [`CycleHistogram`] counted so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Upper bounds of the buckets (inclusive).
    pub bounds: &'static [u64],
    /// Values per bucket (not cumulative); one more entry than `bounds`: above the last.
    pub counts: Vec<u64>,
    pub sum: u64,
}

/// The writer's cycles as histograms (batches per cycle, µs per flush and sync).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    pub batches: HistogramSnapshot,
    pub sync_micros: HistogramSnapshot,
}

impl Shared {
    fn new(db: sled::Db, trees: Vec<sled::Tree>, stable: Option<Stable>) -> Arc<Shared> {
        Arc::new(Shared {
            stable: stable.map(Mutex::new),
            broken: std::sync::atomic::AtomicBool::new(false),
            cycles: std::sync::atomic::AtomicU64::new(0),
            last_cycle_failed: std::sync::atomic::AtomicBool::new(false),
            cycle_sizes: CycleHistogram::new(&BATCH_BUCKETS),
            sync_micros: CycleHistogram::new(&SYNC_MICROS_BUCKETS),
            db,
            pending: Mutex::new(Pending {
                overlay: trees.iter().map(|_| BTreeMap::new()).collect(),
                ..Pending::default()
            }),
            trees,
            queued: Condvar::new(),
            overlay_keys: AtomicUsize::new(0),
            applying: Mutex::new(()),
            flushed: watch::channel(Flushed::default()).0,
        })
    }

    /// Queues `batch`; answers its number (0: it was empty, nothing to wait for).
    fn queue(&self, tree: usize, batch: Batch) -> u64 {
        if batch.writes.is_empty() {
            return 0;
        }
        let mut p = lock(&self.pending);
        p.last_seq += 1;
        let seq = p.last_seq;
        let mut added = 0;
        for (k, v) in &batch.writes {
            if p.overlay[tree].insert(k.clone(), (seq, v.clone())).is_none() {
                added += 1;
            }
        }
        self.overlay_keys.fetch_add(added, Ordering::SeqCst);
        p.queue.push(Queued {
            seq,
            tree,
            writes: batch.writes,
        });
        drop(p);
        self.queued.notify_one();
        seq
    }

    /// The newest queued value of `key`: `Some(None)` when its removal is queued, `None`
    /// when nothing about it is queued (then sled has the answer).
    fn overlay_get(&self, tree: usize, key: &[u8]) -> Option<Option<IVec>> {
        if self.overlay_keys.load(Ordering::SeqCst) == 0 {
            return None;
        }
        lock(&self.pending).overlay[tree].get(key).map(|(_, v)| v.clone())
    }

    fn overlay_range(&self, tree: usize, from: Bound<&[u8]>, to: Bound<&[u8]>) -> Vec<Write> {
        if self.overlay_keys.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        let p = lock(&self.pending);
        p.overlay[tree]
            .range::<[u8], _>((from, to))
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }

    /// Applies everything queued so far to sled, in order. Answers the number of the last
    /// batch applied (`None`: nothing was queued).
    fn apply_queued(&self) -> Option<(u64, usize, sled::Result<()>)> {
        let _applying = lock(&self.applying);
        let queued = std::mem::take(&mut lock(&self.pending).queue);
        let upto = queued.last()?.seq;
        let carried = queued.len();
        let mut batches: Vec<Option<StoredBatch>> = self.trees.iter().map(|_| None).collect();
        let mut result = Ok(());
        for q in &queued {
            let batch = batches[q.tree].get_or_insert_with(StoredBatch::default);
            for (k, v) in &q.writes {
                if let Err(e) = batch.write(&self.trees[q.tree], k, v.as_deref()) {
                    result = Err(e);
                }
            }
        }
        for (tree, batch) in self.trees.iter().zip(batches) {
            if let Some(batch) = batch {
                result = result.and_then(|_| tree.apply_batch(batch.batch));
            }
        }
        // Now sled has these values (or, after a failure, they are lost: the overlay must
        // not keep showing them either).
        let mut p = lock(&self.pending);
        let mut removed = 0;
        for q in &queued {
            for (k, _) in &q.writes {
                if p.overlay[q.tree].get(k).is_some_and(|(seq, _)| *seq <= upto) {
                    p.overlay[q.tree].remove(k);
                    removed += 1;
                }
            }
        }
        self.overlay_keys.fetch_sub(removed, Ordering::SeqCst);
        Some((upto, carried, result))
    }

    /// Flushes sled and makes what it wrote stable.
    fn flush_and_sync(&self) -> std::result::Result<(), String> {
        if self.broken.load(Ordering::SeqCst) {
            return Err("an earlier sync failed; restart the server".into());
        }
        self.db.flush().map_err(|e| e.to_string())?;
        if let Some(stable) = &self.stable {
            if let Err(e) = lock(stable).sync() {
                self.broken.store(true, Ordering::SeqCst);
                return Err(format!("syncing the database files failed: {e}"));
            }
        }
        Ok(())
    }

    /// One cycle: apply what is queued, flush, sync, tell the waiters.
    fn cycle(&self) {
        let Some((upto, carried, applied)) = self.apply_queued() else {
            return;
        };
        let syncing = std::time::Instant::now();
        let result = applied.map_err(|e| e.to_string()).and_then(|_| self.flush_and_sync());
        match &result {
            Ok(()) => {
                self.cycles.fetch_add(1, Ordering::Relaxed);
                self.cycle_sizes.observe(carried as u64);
                let micros = u64::try_from(syncing.elapsed().as_micros()).unwrap_or(u64::MAX);
                self.sync_micros.observe(micros);
                self.last_cycle_failed.store(false, Ordering::SeqCst);
            }
            Err(e) => {
                self.last_cycle_failed.store(true, Ordering::SeqCst);
                tracing::error!("writing to the database failed: {e}")
            }
        }
        self.flushed.send_modify(|f| match result {
            Ok(()) => f.ok_upto = f.ok_upto.max(upto),
            Err(_) => f.failed_upto = f.failed_upto.max(upto),
        });
    }

    /// A ticket for every batch queued so far.
    fn queued_ticket(&self) -> Ticket {
        self.ticket(lock(&self.pending).last_seq, false)
    }

    fn ticket(&self, upto: u64, wrote: bool) -> Ticket {
        Ticket {
            upto,
            wrote,
            flushed: Some(self.flushed.subscribe()),
        }
    }

    fn run(&self) {
        loop {
            {
                let mut p = lock(&self.pending);
                while p.queue.is_empty() && !p.stop {
                    p = self.queued.wait(p).unwrap_or_else(|e| e.into_inner());
                }
                if p.queue.is_empty() && p.stop {
                    return;
                }
            }
            self.cycle();
        }
    }
}

/// A write's place in the writer's order: it is on disk once every batch numbered up to
/// `upto` is (0: nothing to wait for). The store wraps it with the write's result into a
/// [`super::Written`] receipt.
#[must_use = "a ticket is how a write's durability is awaited"]
pub(crate) struct Ticket {
    upto: u64,
    /// The write queued a batch of its own (`false`: it changed nothing, or it rests only
    /// on batches queued before it, like a repeated idempotency key).
    wrote: bool,
    flushed: Option<watch::Receiver<Flushed>>,
}

impl Ticket {
    /// Nothing to wait for: resolves at once.
    pub(crate) fn none() -> Ticket {
        Ticket {
            upto: 0,
            wrote: false,
            flushed: None,
        }
    }

    pub(crate) fn wrote(&self) -> bool {
        self.wrote
    }

    /// The later of two tickets (waiting for it covers both: batches reach the disk in
    /// the order they were queued).
    pub(crate) fn and(self, other: Ticket) -> Ticket {
        let wrote = self.wrote || other.wrote;
        let mut later = if other.upto > self.upto { other } else { self };
        later.wrote = wrote;
        later
    }

    /// Resolves once every batch up to this ticket's is on disk.
    pub(crate) async fn wait(self) -> Result<()> {
        let (upto, Some(mut rx)) = (self.upto, self.flushed) else {
            return Ok(());
        };
        if upto == 0 {
            return Ok(());
        }
        let state = rx
            .wait_for(|f| f.ok_upto >= upto || f.failed_upto >= upto)
            .await
            .map_err(|_| StoreError::NotDurable)?;
        if state.ok_upto >= upto {
            Ok(())
        } else {
            Err(StoreError::NotDurable)
        }
    }
}

/// What the group commit did so far: batches acknowledged as stable, cycles that carried
/// them, and `fsync`/`fdatasync` calls (the ratio syncs / batches is the benchmark's "syncs
/// per acknowledged write").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterStats {
    pub batches: u64,
    pub cycles: u64,
    pub syncs: u64,
}

/// The writer thread and the handle that request code waits on.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer for `trees` (a [`Tree`] names its sled tree by its index here) of
    /// the database in `db_dir`, whose files it syncs after each flush.
    pub(crate) fn start(db: sled::Db, trees: Vec<sled::Tree>, db_dir: &std::path::Path) -> std::io::Result<Writer> {
        let stable = Stable::open(db_dir)?;
        let shared = Shared::new(db, trees, Some(stable));
        let run = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pigeonhole-writer".into())
            .spawn(move || run.run())?;
        Ok(Writer {
            shared,
            thread: Some(thread),
        })
    }

    pub(crate) fn tree(&self, index: usize) -> Tree {
        Tree {
            index,
            sled: self.shared.trees[index].clone(),
            shared: self.shared.clone(),
        }
    }

    /// Applies, flushes and syncs everything queued, in the calling thread (shutdown, tools).
    pub(crate) fn flush_now(&self) -> Result<()> {
        self.shared.cycle();
        self.shared.flush_and_sync().map_err(|e| {
            tracing::error!("{e}");
            StoreError::NotDurable
        })?;
        if self.shared.flushed.borrow().failed_upto > 0 {
            return Err(StoreError::NotDurable);
        }
        Ok(())
    }

    /// Runs `f` while no batch is applied to sled: between two cycles of the writer. What
    /// `f` reads through [`Frozen`] is then the state after one batch, with every batch
    /// before it and none after (a consistent copy); writes keep being queued meanwhile
    /// (reads see them in the overlay) and wait for their flush until `f` returns.
    pub(crate) fn between_cycles<T>(&self, f: impl FnOnce(&Frozen) -> Result<T>) -> Result<T> {
        let _applying = lock(&self.shared.applying);
        f(&Frozen { shared: &self.shared })
    }

    /// Makes every later sequence number larger than `floor` (a restored database continues
    /// after the numbers its backup's database handed out: they are in keys).
    pub(crate) fn raise_ids(&self, floor: u64) -> Result<()> {
        // sled has no way to set its generator; each call is an atomic increment, and a
        // long-lived database has handed out a few million at most.
        while self.shared.db.generate_id()? < floor {}
        Ok(())
    }

    /// Whether the database takes writes, without writing anything (a health probe must
    /// not cost a sync): the writer thread is alive, no sync ever failed (after one,
    /// nothing is acknowledged until a restart), and its latest cycle reached the disk.
    /// `Err` says why not.
    pub(crate) fn writable(&self) -> std::result::Result<(), String> {
        if self.shared.broken.load(Ordering::SeqCst) {
            return Err("a sync of the database files failed; restart the server".into());
        }
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return Err("the database writer thread stopped".into());
        }
        if self.shared.last_cycle_failed.load(Ordering::SeqCst) {
            return Err("the latest write to the database failed".into());
        }
        Ok(())
    }

    /// Marks the writer as after a failed sync (every later write fails, and
    /// [`Writer::writable`] says so). Only for tests of the health check and of what
    /// follows a failed sync: a real failed sync is hard to provoke on demand.
    pub(crate) fn simulate_sync_failure(&self) {
        self.shared.broken.store(true, Ordering::SeqCst);
    }

    /// The cycles so far as histograms (metrics).
    pub(crate) fn cycle_stats(&self) -> CycleStats {
        CycleStats {
            batches: self.shared.cycle_sizes.snapshot(),
            sync_micros: self.shared.sync_micros.snapshot(),
        }
    }

    /// Counters of the group commit so far.
    pub(crate) fn stats(&self) -> WriterStats {
        WriterStats {
            batches: self.shared.flushed.borrow().ok_upto,
            cycles: self.shared.cycles.load(Ordering::Relaxed),
            syncs: self.shared.stable.as_ref().map_or(0, |s| lock(s).syncs()),
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        lock(&self.shared.pending).stop = true;
        self.shared.queued.notify_one();
        if let Some(thread) = self.thread.take() {
            // The thread only returns or panics; either way it is gone.
            let _ = thread.join();
        }
    }
}

/// The database between two cycles (see [`Writer::between_cycles`]).
pub(crate) struct Frozen<'a> {
    shared: &'a Shared,
}

impl Frozen<'_> {
    /// A number larger than every sequence number handed out so far.
    pub(crate) fn id_floor(&self) -> Result<u64> {
        Ok(self.shared.db.generate_id()? + 1)
    }

    /// Every record of the writer's tree `index`, with values whole (chunk records, which
    /// are how a value is stored and not records of their own, are left out).
    pub(crate) fn records(&self, index: usize) -> impl Iterator<Item = Result<(Bytes, Bytes)>> + '_ {
        let tree = &self.shared.trees[index];
        Whole {
            iter: tree.range(..vec![chunks::CHUNK_PREFIX]),
            tree: tree.clone(),
        }
        .map(|kv| kv.map_err(StoreError::from))
    }
}

/// One cycle's sled batch for one tree, with values split into chunks ([`chunks`]).
#[derive(Default)]
struct StoredBatch {
    batch: sled::Batch,
    /// Chunk counts of the keys written earlier in this batch (sled does not have them yet).
    counts: std::collections::HashMap<Vec<u8>, u32>,
}

impl StoredBatch {
    /// Adds the write of `key` (`None`: its removal), removing the chunks of the value it
    /// replaces beyond the new value's own.
    fn write(&mut self, tree: &sled::Tree, key: &[u8], value: Option<&[u8]>) -> sled::Result<()> {
        let before = match self.counts.get(key) {
            Some(n) => *n,
            None => tree
                .get(key)?
                .and_then(|stored| chunks::manifest_len(&stored))
                .map_or(0, chunks::count),
        };
        let after = match value {
            Some(v) if chunks::needs_chunks(v) => {
                self.batch.insert(key, chunks::manifest(v.len()));
                for (i, part) in chunks::split(v).enumerate() {
                    self.batch.insert(chunks::chunk_key(key, i as u32), part);
                }
                chunks::count(v.len())
            }
            Some(v) => {
                self.batch.insert(key, v);
                0
            }
            None => {
                self.batch.remove(key);
                0
            }
        };
        for i in after..before {
            self.batch.remove(chunks::chunk_key(key, i));
        }
        self.counts.insert(key.to_vec(), after);
        Ok(())
    }
}

/// A value as sled stores it, made whole: a manifest's chunks are read and joined. The
/// manifest and its chunks are read separately, so a batch applied in between can replace
/// them: then the key is read again (`None`: it was removed meanwhile).
fn whole(tree: &sled::Tree, key: &[u8], stored: IVec) -> sled::Result<Option<IVec>> {
    let mut stored = Some(stored);
    for _ in 0..16 {
        let Some(v) = stored else { return Ok(None) };
        let Some(len) = chunks::manifest_len(&v) else {
            return Ok(Some(v));
        };
        let n = chunks::count(len);
        let mut out = Vec::with_capacity(len);
        let mut parts = 0;
        for part in tree.range(chunks::chunk_key(key, 0)..chunks::chunk_key(key, n)) {
            out.extend_from_slice(&part?.1);
            parts += 1;
        }
        if parts == n && out.len() == len {
            return Ok(Some(IVec::from(out)));
        }
        stored = tree.get(key)?;
    }
    Err(sled::Error::ReportableBug(format!(
        "the chunks of a value of {} bytes stay incomplete",
        key.len()
    )))
}

/// A sled tree as the store code sees it: reads see queued changes, writes are queued.
#[derive(Clone)]
pub(crate) struct Tree {
    index: usize,
    sled: sled::Tree,
    shared: Arc<Shared>,
}

impl Tree {
    pub(crate) fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        match self.shared.overlay_get(self.index, key.as_ref()) {
            Some(v) => Ok(v),
            None => match self.sled.get(key.as_ref())? {
                Some(stored) => Ok(whole(&self.sled, key.as_ref(), stored)?),
                None => Ok(None),
            },
        }
    }

    pub(crate) fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Queues `batch` (atomic: on disk all of it or none of it); the ticket resolves once it
    /// is on disk.
    pub(crate) fn apply_batch(&self, batch: Batch) -> Ticket {
        let seq = self.shared.queue(self.index, batch);
        if seq == 0 {
            return Ticket::none();
        }
        self.shared.ticket(seq, true)
    }

    pub(crate) fn insert(&self, key: impl AsRef<[u8]>, value: impl Into<IVec>) -> Ticket {
        let mut batch = Batch::default();
        batch.insert(key, value);
        self.apply_batch(batch)
    }

    pub(crate) fn remove(&self, key: impl AsRef<[u8]>) -> Ticket {
        let mut batch = Batch::default();
        batch.remove(key);
        self.apply_batch(batch)
    }

    /// A ticket for every batch queued so far, of any tree: for an answer that rests on
    /// what earlier writes queued (a repeated idempotency key answers the item of a request
    /// that may still be waiting for its flush).
    pub(crate) fn queued(&self) -> Ticket {
        self.shared.queued_ticket()
    }

    /// A number larger than every one this database handed out before, also across
    /// restarts (order of items stored within the same instant, queue order).
    pub(crate) fn next_id(&self) -> Result<u64> {
        Ok(self.shared.db.generate_id()?)
    }

    /// The records whose key starts with `prefix`, in key order.
    pub(crate) fn scan_prefix(&self, prefix: impl AsRef<[u8]>) -> Scan {
        let prefix = prefix.as_ref();
        let end = prefix_end(prefix);
        let to = match &end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        let queued = self.shared.overlay_range(self.index, Bound::Included(prefix), to);
        merge(&self.sled, self.sled.scan_prefix(prefix), queued)
    }

    /// The records with `from <= key <= to`, in key order.
    pub(crate) fn range_inclusive(&self, from: &[u8], to: &[u8]) -> Scan {
        let queued = self
            .shared
            .overlay_range(self.index, Bound::Included(from), Bound::Included(to));
        merge(&self.sled, self.sled.range(from..=to), queued)
    }
}

/// The first key after every key that starts with `prefix` (`None`: there is none).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// sled's records merged with queued changes (taken before sled was read, so that a change
/// applied meanwhile is seen either in sled or here, with the same value). The merge is
/// lazy: a long scan (a list answered while it is sent) holds one record at a time; each key
/// shows its value of some moment during the scan.
fn merge(tree: &sled::Tree, sled: sled::Iter, queued: Vec<Write>) -> Scan {
    let sled = Whole {
        iter: sled,
        tree: tree.clone(),
    };
    if queued.is_empty() {
        return Scan::Sled(sled);
    }
    Scan::Merged(Merged {
        sled,
        queued: queued.into_iter().peekable(),
        sled_next: None,
        sled_done: false,
    })
}

/// Records of a scan: straight from sled, or merged with queued changes.
// A scan lives briefly on the stack of its caller; boxing sled's iterator would cost an
// allocation per scan to save a few hundred bytes of stack.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Scan {
    Sled(Whole),
    Merged(Merged),
}

/// sled's records with their values made whole ([`whole`]); records removed while the scan
/// read their chunks are skipped.
pub(crate) struct Whole {
    iter: sled::Iter,
    tree: sled::Tree,
}

impl Iterator for Whole {
    type Item = sled::Result<(IVec, IVec)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (k, v) = match self.iter.next()? {
                Ok(kv) => kv,
                Err(e) => return Some(Err(e)),
            };
            match whole(&self.tree, &k, v) {
                Ok(Some(v)) => return Some(Ok((k, v))),
                Ok(None) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// sled's records and the queued changes of the same range, both in key order.
pub(crate) struct Merged {
    sled: Whole,
    queued: std::iter::Peekable<std::vec::IntoIter<Write>>,
    /// sled's next record, kept until the queued changes before it are passed.
    sled_next: Option<(IVec, IVec)>,
    sled_done: bool,
}

impl Iterator for Merged {
    type Item = sled::Result<(IVec, IVec)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.sled_next.is_none() && !self.sled_done {
                match self.sled.next() {
                    Some(Ok(kv)) => self.sled_next = Some(kv),
                    Some(Err(e)) => {
                        // a failed scan ends with its error
                        self.sled_done = true;
                        self.queued = Vec::new().into_iter().peekable();
                        return Some(Err(e));
                    }
                    None => self.sled_done = true,
                }
            }
            let Some((k, _)) = &self.sled_next else {
                // sled is done: the rest of the queued changes
                if let (qk, Some(qv)) = self.queued.next()? {
                    return Some(Ok((IVec::from(qk), qv)));
                }
                continue;
            };
            let order = self.queued.peek().map(|(qk, _)| qk.as_slice().cmp(k.as_ref()));
            match order {
                Some(std::cmp::Ordering::Less) => {
                    if let Some((qk, Some(qv))) = self.queued.next() {
                        return Some(Ok((IVec::from(qk), qv)));
                    }
                }
                // A queued change of this key wins over sled's value.
                Some(std::cmp::Ordering::Equal) => {
                    let queued = self.queued.next().and_then(|(_, qv)| qv);
                    let sled = self.sled_next.take();
                    if let (Some(qv), Some((k, _))) = (queued, sled) {
                        return Some(Ok((k, qv)));
                    }
                }
                _ => return self.sled_next.take().map(Ok),
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = match self {
            Scan::Sled(it) => it.next(),
            Scan::Merged(it) => it.next(),
        };
        next.map(|kv| kv.map_err(StoreError::from))
    }
}

#[cfg(test)]
// These tests run cycles by hand and look at sled itself, not at the tickets.
#[allow(unused_must_use)]
mod tests {
    use super::*;

    fn temporary() -> (sled::Db, Arc<Shared>, Tree) {
        let db = sled::Config::new().temporary(true).open().expect("temporary sled db");
        let sled = db.open_tree("t").expect("tree");
        let shared = Shared::new(db.clone(), vec![sled.clone()], None);
        let tree = Tree {
            index: 0,
            sled,
            shared: shared.clone(),
        };
        (db, shared, tree)
    }

    fn keys(scan: Scan) -> Vec<(String, String)> {
        scan.map(|kv| {
            let (k, v) = kv.expect("scan");
            (String::from_utf8_lossy(&k).into(), String::from_utf8_lossy(&v).into())
        })
        .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn queued_changes_are_read_before_they_reach_sled() {
        // No writer thread: batches stay queued until `cycle` runs.
        let (_db, shared, tree) = temporary();
        for k in ["pa", "pb", "pc", "pd", "q"] {
            tree.sled.insert(k, "old").expect("insert");
        }
        let mut batch = Batch::default();
        batch.remove("pb");
        batch.insert("pc", "new");
        batch.insert("pbb", "added");
        batch.insert("pe", "added");
        batch.insert("a", "outside");
        // deletions of keys sled does not have, before and after all of its keys
        batch.remove("p0");
        batch.remove("pz");
        tree.apply_batch(batch);

        assert_eq!(tree.sled.get("pc").expect("get").as_deref(), Some(&b"old"[..]));
        assert_eq!(tree.get("pc").expect("get").as_deref(), Some(&b"new"[..]));
        assert!(!tree.contains_key("pb").expect("get"));
        let expected = pairs(&[
            ("pa", "old"),
            ("pbb", "added"),
            ("pc", "new"),
            ("pd", "old"),
            ("pe", "added"),
        ]);
        assert_eq!(keys(tree.scan_prefix("p")), expected);
        assert_eq!(
            keys(tree.range_inclusive(b"pb", b"pd")),
            pairs(&[("pbb", "added"), ("pc", "new"), ("pd", "old")])
        );

        shared.cycle();
        assert_eq!(shared.overlay_keys.load(Ordering::SeqCst), 0);
        assert_eq!(tree.sled.get("pc").expect("get").as_deref(), Some(&b"new"[..]));
        assert!(tree.sled.get("pb").expect("get").is_none());
        assert_eq!(keys(tree.scan_prefix("p")), expected);
        assert_eq!(shared.flushed.borrow().ok_upto, 1);
    }

    #[test]
    fn later_batches_win_and_stay_visible_until_applied() {
        let (_db, shared, tree) = temporary();
        tree.insert("k", "1");
        tree.insert("k", "2");
        assert_eq!(shared.overlay_keys.load(Ordering::SeqCst), 1);
        // Take the first batch out of the queue as if the writer had applied only it.
        let second = {
            let mut p = lock(&shared.pending);
            p.queue.split_off(1)
        };
        shared.cycle();
        assert_eq!(tree.sled.get("k").expect("get").as_deref(), Some(&b"1"[..]));
        assert_eq!(
            tree.get("k").expect("get").as_deref(),
            Some(&b"2"[..]),
            "batch 2 is still queued"
        );
        lock(&shared.pending).queue.extend(second);
        shared.cycle();
        assert_eq!(tree.sled.get("k").expect("get").as_deref(), Some(&b"2"[..]));
        assert_eq!(shared.flushed.borrow().ok_upto, 2);
        assert_eq!(shared.overlay_keys.load(Ordering::SeqCst), 0);
    }

    /// Keys of chunk records in sled (what a value's chunks left behind).
    fn chunk_records(tree: &Tree) -> usize {
        tree.sled.scan_prefix([chunks::CHUNK_PREFIX]).count()
    }

    #[test]
    fn large_values_are_stored_in_chunks_and_read_whole() {
        let (_db, shared, tree) = temporary();
        let big: Vec<u8> = (0..3 * chunks::CHUNK + 10).map(|i| i as u8).collect();
        let shaped = chunks::manifest(5); // a small value that looks like a manifest
        tree.insert("pbig", big.clone());
        tree.insert("pshaped", shaped.clone());
        tree.insert("psmall", "x");
        shared.cycle();
        // sled holds manifests and chunks: no record is larger than a chunk
        assert!(tree.sled.iter().all(|kv| kv.expect("record").1.len() <= chunks::CHUNK));
        assert_eq!(chunk_records(&tree), 4 + 1);
        assert_eq!(tree.get("pbig").expect("get").as_deref(), Some(&big[..]));
        assert_eq!(tree.get("pshaped").expect("get").as_deref(), Some(&shaped[..]));
        let scanned: Vec<(IVec, IVec)> = tree.scan_prefix("p").map(|kv| kv.expect("scan")).collect();
        assert_eq!(scanned.len(), 3, "chunk records never show in scans");
        assert_eq!(scanned[0].1.as_ref(), &big[..]);

        // a shorter value, then a small one, then a removal: no chunk is left behind
        tree.insert("pbig", vec![1u8; chunks::CHUNK + 1]);
        shared.cycle();
        assert_eq!(chunk_records(&tree), 2 + 1);
        assert_eq!(tree.get("pbig").expect("get").map(|v| v.len()), Some(chunks::CHUNK + 1));
        // two writes of one key in one cycle
        tree.insert("pbig", vec![2u8; 5 * chunks::CHUNK]);
        tree.insert("pbig", "small now");
        tree.remove("pshaped");
        shared.cycle();
        assert_eq!(chunk_records(&tree), 0);
        assert_eq!(tree.get("pbig").expect("get").as_deref(), Some(&b"small now"[..]));
        assert!(tree.get("pshaped").expect("get").is_none());
    }

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[tokio::test]
    async fn tickets_wait_for_the_writer_and_drop_writes_what_is_queued() {
        let dir = tempfile::tempdir().expect("temporary directory");
        {
            let db = sled::Config::new().path(dir.path()).open().expect("open");
            let writer = Writer::start(db.clone(), vec![db.open_tree("t").expect("tree")], dir.path()).expect("writer");
            let tree = writer.tree(0);
            let before = writer.stats();
            let first = tree.insert("first", "yes");
            let ticket = tree.insert("acknowledged", "yes");
            assert!(ticket.wrote());
            ticket.wait().await.expect("durable");
            first.wait().await.expect("an earlier batch is durable too");
            let after = writer.stats();
            assert_eq!(after.batches, before.batches + 2);
            assert!(after.syncs > before.syncs, "the cycle synced the files: {after:?}");
            assert_eq!(
                tree.sled.get("acknowledged").expect("get").as_deref(),
                Some(&b"yes"[..])
            );
            // Nothing to wait for: answers at once.
            Ticket::none().wait().await.expect("durable");
            tree.queued().wait().await.expect("durable");
            let empty = tree.apply_batch(Batch::default());
            assert!(!empty.wrote());
            empty.wait().await.expect("durable");
            let _ = tree.insert("queued at drop", "yes");
        }
        let db = sled::Config::new().path(dir.path()).open().expect("reopen");
        let tree = db.open_tree("t").expect("tree");
        assert!(tree.get("acknowledged").expect("get").is_some());
        assert!(tree.get("queued at drop").expect("get").is_some());
    }
}
