//! One writer for the whole database, group commit, and a write-ahead journal.
//!
//! Request code never writes to sled itself. A change is a [`Batch`]; [`Tree::apply_batch`]
//! queues it and makes it visible at once to every later read of the store through an
//! in-memory *overlay* (key → newest queued value), so that the read-check-write sequences
//! under an account lock see it. One thread, the writer, takes everything queued (a
//! *cycle*), turns it into the exact writes sled gets (per tree: key → value or removal,
//! values over 4 KiB in chunks, [`chunks`]), appends them as **one checksummed record** to
//! the journal `db/pigeonhole-wal` ([`super::wal`]) with **one `fdatasync`**, then applies
//! them to sled in memory, drops those keys from the overlay and acknowledges. Queuing a
//! batch answers a [`Ticket`] (the batch's number), which resolves once the cycle that
//! carries it, and so every batch queued before it, is durable; the store hands it out
//! inside a [`super::Written`] receipt. One cycle shares its one sync among all the batches
//! it carries, whatever arrived during the previous one (measured in docs/performance.md).
//!
//! # Checkpoints
//!
//! sled's own files are made durable lazily, in a *checkpoint*: sled's `flush()`, then the
//! `fsync`s of [`super::stable`] (sled's `flush()` alone does not survive a power cut), and
//! only then the journal is emptied (its next generation written into its header,
//! `fdatasync`; the file is preallocated and written in place, see [`super::wal`]). A checkpoint
//! runs when the journal reaches [`CHECKPOINT_BYTES`], [`CHECKPOINT_AFTER`] after the first
//! record written since the last one (also when idle: the writer waits with that
//! deadline), at every [`Writer::flush_now`] (the store's `flush()`: imports, copies,
//! backups and restores, format migrations, the shutdown end fully durable, journal and
//! sled) and when the writer stops. It holds the same lock as a cycle, so no cycle is
//! applied between sled's flush and the emptying. Its `fsync`s are shared by every cycle
//! since the previous one (tests/durability/durability.rs counts them: at one client, 300
//! writes cost 300 journal syncs and a handful of others).
//!
//! Why not sled's batches: in sled 0.34 each `apply_batch` writes sled's log buffer out
//! twice (before and after its reservation, each with a `sync_file_range`), and `flush()`
//! holds a process-wide lock that batches wait for; one write at one client cost 3.19
//! syncs. Here a cycle is applied key by key (no batch, no lock), and its atomicity on
//! recovery comes from the journal.
//!
//! # Crash safety
//!
//! * **The journal is written before sled.** A cycle's writes reach sled (in memory, and
//!   then sled's files, whenever sled writes its log on its own) only after its record is
//!   synced. So at any crash, every change sled's files may hold beyond the last checkpoint
//!   is a change some record of the journal holds in full.
//! * **The journal is emptied only after sled is durable.** A checkpoint syncs sled's files
//!   (the log, new files, their directories) after its flush and before the emptying;
//!   the emptying is synced before the next record is written, so a record never lands on
//!   a journal whose emptying could still be undone.
//! * **Opening replays every record, in order, then checkpoints** ([`Writer::start`]):
//!   reading stops at the first record that is torn or fails its checksum (the tail a power
//!   cut leaves during an append, never acknowledged; a bad record followed by a good one
//!   is damage and refuses to open, naming the file and the offset). Each record's writes
//!   are whole values and removals, so applying them again over a sled that already has
//!   some, all or none of them (or half of one cycle: sled wrote it key by key) ends in the
//!   same state: sled as of the last checkpoint, plus every record in order. Then sled is
//!   flushed and synced, and only then the journal emptied: a crash during the replay
//!   replays again.
//! * **Nothing is acknowledged before its record is synced**, and cycles, records and
//!   batches follow queue order.
//! * **Crash points of a checkpoint:** before sled's sync completes, the journal is whole
//!   and sled's files hold the last checkpoint plus any part of later records; after it,
//!   sled holds everything and the journal is whole, emptied, or (a torn header slot: the
//!   other slot still names the previous generation) whole again;
//!   each of these opens to the same state (`acknowledged_writes_survive_a_crash_at_every_
//!   step_of_a_checkpoint` builds each image and opens it).
//!
//! The journal lives in the database directory, so a restore, which renames a complete
//! new `db` into place, swaps it with the data (it is empty then: the restore's last step
//! is a checkpoint).
//!
//! # A failed cycle was never there
//!
//! When journalling fails (a full disk, an I/O error: the write or the `fdatasync`), or
//! applying, or a checkpoint, every write of the cycle and every batch queued behind it is
//! answered with an error ([`StoreError::NotDurable`]), and none of them is seen by any
//! later read. Then the store takes no more writes until a restart: [`Tree::apply_batch`]
//! refuses a batch before it is queued (its receipt answers [`StoreError::Unavailable`]
//! with the reason, HTTP 503), and the writer runs no more cycles and no checkpoint (the
//! journal is never emptied after a failure). Not trying again is deliberate: after a
//! failed `fsync` the kernel may have dropped the pages it could not write, so a later
//! successful `fsync` would not mean that earlier data is on disk, and after a failed write
//! sled 0.34 refuses every later write itself (its "global error"). A restart re-reads what
//! is really there.
//!
//! When journalling fails the cycle never touched sled. When applying fails part-way,
//! sled's in-memory trees hold part of the cycle, and sled has no way to take it back (it
//! cannot be reopened or rolled back in place either: every `Tree` handle of the store
//! keeps it open). So the cycle keeps, per tree, the value each of its keys had **before**
//! it (its pre-image, `None` when absent): reading it costs nothing extra, since building
//! the writes reads each key's stored value anyway for its chunk count (only a chunked
//! value's chunks are read in addition, as they are about to be replaced). On failure, in
//! one step under the overlay's lock, the queued batches and their overlay entries are
//! dropped and the pre-images go into the overlay, marked [`PRE_IMAGE`]; only then are the
//! waiters told. Reads consult the overlay before sled, so from then on they see exactly
//! the durable state, with whatever sled holds of the cycle behind it; a backup's copy
//! ([`Frozen::records`]) merges the pre-images too. The overlay never changes again until
//! the restart, and holds at most one cycle's keys. A read that ran while the cycle was
//! being journalled may have seen its values (as reads see queued writes before they are
//! durable); none that starts after the failure is answered does.
//!
//! What a restart finds: a cycle whose record did not reach the journal is not there (sled
//! never had it). A cycle whose record was written but whose `fdatasync` failed is in the
//! kernel's hands: after a power cut it is gone; after a clean restart it may be there,
//! whole (its record is replayed). That write was answered with an error; like any write
//! that is in flight at a crash, it may or may not survive, and the client that got the
//! error retries it.

use super::chunks;
use super::stable::Stable;
use super::wal::{self, Wal};
use super::{lock, Result, StoreError};
use crate::store::api::{Administration, BackupSummary, CycleStats, WriterStats};
use crate::store::written::{Flushed, Ticket};
use sled::IVec;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::watch;

type Write = (Vec<u8>, Option<IVec>);

/// A checkpoint (sled flushed and synced, the journal emptied) runs once the journal holds
/// this many bytes…
const CHECKPOINT_BYTES: u64 = 4 * 1024 * 1024;
/// …or this long after the first record written since the last one.
const CHECKPOINT_AFTER: Duration = Duration::from_secs(1);
/// Bytes of records the journal is created with room for (zeros written once): the
/// checkpoint's size and room for the cycle that crosses it. A record that does not fit
/// is written after a checkpoint (see [`Shared::journal`]).
const JOURNAL_ROOM: u64 = CHECKPOINT_BYTES + CHECKPOINT_BYTES / 4;

/// The batch number of an overlay entry that is not a queued write but the value a key had
/// before a cycle that failed (batches are numbered from 1).
const PRE_IMAGE: u64 = 0;

/// A stored value as reads answer it (derefs to `[u8]`). Only this engine layer knows it is
/// sled's.
pub(crate) type Bytes = IVec;

/// Per tree: key → (number of the newest batch writing it, its value or `None`). After a
/// failed cycle it holds instead, with the number [`PRE_IMAGE`], the values its keys had
/// before that cycle (see the module doc).
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
    /// When a checkpoint is due: set by the first record written to the journal after a
    /// checkpoint (`None`: the journal is empty).
    checkpoint_due: Option<Instant>,
    /// Why the store takes no more writes (set once, by a failed cycle, until a restart):
    /// later batches are refused here instead of being queued.
    refused: Option<String>,
}

/// One cycle, taken from the queue by [`Shared::prepare`].
struct Cycle {
    /// The batches it carries (their overlay entries go once sled has them).
    queued: Vec<Queued>,
    /// Number of its last batch.
    upto: u64,
    /// Reading sled to build the writes failed.
    result: sled::Result<()>,
    /// Per tree, the keys written and their values before (`None`: absent).
    pre_images: Vec<Vec<(Vec<u8>, Option<IVec>)>>,
    /// Per tree written: its index and exactly what is applied to it (after chunking).
    writes: Vec<(usize, TreeWrites)>,
}

/// What the writer holds while it applies and commits a cycle (or checkpoints): the
/// journal and the next record's number.
struct Applying {
    /// `None`: a temporary database (tests), whose cycles flush sled instead.
    wal: Option<Wal>,
    next_record: u64,
}

struct Shared {
    db: sled::Db,
    trees: Vec<sled::Tree>,
    /// The trees' names (what journal records name them by).
    names: Vec<IVec>,
    pending: Mutex<Pending>,
    /// Signalled when a batch is queued or the writer must stop.
    queued: Condvar,
    /// Number of keys in the overlay: reads skip the mutex while it is empty.
    overlay_keys: AtomicUsize,
    /// Held while taking batches from the queue, applying them and committing them (and
    /// during checkpoints), so that they reach sled and the journal in the order they were
    /// queued (the writer thread and [`Writer::flush_now`]).
    applying: Mutex<Applying>,
    flushed: watch::Sender<Flushed>,
    /// The syncs after each flush of sled (`None`: a temporary database, in tests).
    stable: Option<Mutex<Stable>>,
    /// Syncs of the journal so far.
    wal_syncs: std::sync::atomic::AtomicU64,
    /// Checkpoints so far.
    checkpoints: std::sync::atomic::AtomicU64,
    /// Unit tests: the syncs after the flush fail (sled's flush itself went through).
    #[cfg(test)]
    fail_syncs: std::sync::atomic::AtomicBool,
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

/// A histogram of one cycle value with fixed bounds.
type CycleHistogram = crate::store::api::AtomicHistogram;

impl Shared {
    fn new(db: sled::Db, trees: Vec<sled::Tree>, stable: Option<Stable>, wal: Option<(Wal, u64)>) -> Arc<Shared> {
        let (wal, next_record) = match wal {
            Some((wal, next)) => (Some(wal), next),
            None => (None, 1),
        };
        Arc::new(Shared {
            stable: stable.map(Mutex::new),
            wal_syncs: std::sync::atomic::AtomicU64::new(0),
            checkpoints: std::sync::atomic::AtomicU64::new(0),
            #[cfg(test)]
            fail_syncs: std::sync::atomic::AtomicBool::new(false),
            cycles: std::sync::atomic::AtomicU64::new(0),
            last_cycle_failed: std::sync::atomic::AtomicBool::new(false),
            cycle_sizes: CycleHistogram::new(&BATCH_BUCKETS),
            sync_micros: CycleHistogram::new(&SYNC_MICROS_BUCKETS),
            db,
            pending: Mutex::new(Pending {
                overlay: trees.iter().map(|_| BTreeMap::new()).collect(),
                ..Pending::default()
            }),
            names: trees.iter().map(sled::Tree::name).collect(),
            trees,
            queued: Condvar::new(),
            overlay_keys: AtomicUsize::new(0),
            applying: Mutex::new(Applying { wal, next_record }),
            flushed: watch::channel(Flushed::default()).0,
        })
    }

    /// Queues `batch`; answers its number (0: it was empty, nothing to wait for), or why
    /// the store takes no writes (then nothing was queued and no read will see it).
    fn queue(&self, tree: usize, batch: Batch) -> Result<u64> {
        if batch.writes.is_empty() {
            return Ok(0);
        }
        let mut p = lock(&self.pending);
        if let Some(reason) = &p.refused {
            return Err(StoreError::Unavailable(reason.clone()));
        }
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
        Ok(seq)
    }

    /// The newest queued value of `key` (or, after a failed cycle, its value from before
    /// that cycle): `Some(None)` when its removal is queued, `None` when nothing about it
    /// is queued (then sled has the answer).
    fn overlay_get(&self, tree: usize, key: &[u8]) -> Option<Option<IVec>> {
        if self.overlay_keys.load(Ordering::SeqCst) == 0 {
            return None;
        }
        lock(&self.pending).overlay[tree].get(key).map(|(_, v)| v.clone())
    }

    /// The overlay's entries in a range; `pre_images_only`: only the values from before a
    /// failed cycle (what sled must not be believed about), not the queued writes.
    fn overlay_range(&self, tree: usize, from: Bound<&[u8]>, to: Bound<&[u8]>, pre_images_only: bool) -> Vec<Write> {
        if self.overlay_keys.load(Ordering::SeqCst) == 0 {
            return Vec::new();
        }
        let p = lock(&self.pending);
        p.overlay[tree]
            .range::<[u8], _>((from, to))
            .filter(|(_, (seq, _))| !pre_images_only || *seq == PRE_IMAGE)
            .map(|(k, (_, v))| (k.clone(), v.clone()))
            .collect()
    }

    /// Takes everything queued so far and turns it into the cycle's writes per tree (values
    /// in chunks, the chunks of replaced values removed), reading sled for that (call with
    /// `applying` held). `None`: nothing was queued.
    fn prepare(&self) -> Option<Cycle> {
        let queued = std::mem::take(&mut lock(&self.pending).queue);
        let upto = queued.last()?.seq;
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
        let mut pre_images = Vec::with_capacity(self.trees.len());
        let mut writes = Vec::new();
        for (index, batch) in batches.into_iter().enumerate() {
            let Some(StoredBatch { writes: w, seen }) = batch else {
                pre_images.push(Vec::new());
                continue;
            };
            pre_images.push(seen.into_iter().map(|(k, (_, before))| (k, before)).collect());
            writes.push((index, w));
        }
        Some(Cycle {
            queued,
            upto,
            result,
            pre_images,
            writes,
        })
    }

    /// Applies the cycle's writes to sled (in memory: sled writes them to its files later,
    /// in its own time or at a checkpoint), then drops its batches from the overlay.
    fn apply(&self, cycle: &Cycle) -> sled::Result<()> {
        for (index, writes) in &cycle.writes {
            apply_writes(
                &self.trees[*index],
                writes.iter().map(|(k, v)| (k.as_slice(), v.clone())),
            )?;
        }
        // Now sled has these values (or, after a failure, some of them: `refuse` puts the
        // values from before them back in front of sled).
        let mut p = lock(&self.pending);
        let mut removed = 0;
        for q in &cycle.queued {
            for (k, _) in &q.writes {
                if p.overlay[q.tree]
                    .get(k)
                    .is_some_and(|(seq, _)| *seq != PRE_IMAGE && *seq <= cycle.upto)
                {
                    p.overlay[q.tree].remove(k);
                    removed += 1;
                }
            }
        }
        self.overlay_keys.fetch_sub(removed, Ordering::SeqCst);
        Ok(())
    }

    /// Flushes sled and makes what it wrote stable.
    fn flush_and_sync(&self) -> std::result::Result<(), String> {
        self.db
            .flush()
            .map_err(|e| format!("writing to the database files failed: {e}"))?;
        #[cfg(test)]
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err("syncing the database files failed: injected by a test".into());
        }
        if let Some(stable) = &self.stable {
            lock(stable)
                .sync()
                .map_err(|e| format!("syncing the database files failed: {e}"))?;
        }
        Ok(())
    }

    /// Makes the cycle durable before it is applied: its record appended to the journal
    /// and synced (without a journal, in tests: nothing; sled is flushed after the apply).
    fn journal(&self, applying: &mut Applying, cycle: &Cycle) -> std::result::Result<(), String> {
        let Some(wal) = applying.wal.as_ref() else {
            return Ok(());
        };
        let number = applying.next_record;
        applying.next_record += 1;
        let trees = cycle.writes.iter().map(|(index, writes)| {
            let name: &[u8] = self.names[*index].as_ref();
            (name, writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))
        });
        let mut record = wal::encode(number, trees);
        #[cfg(test)]
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err("syncing the write-ahead journal failed: injected by a test".into());
        }
        if !wal.fits(record.len()) && wal.bytes() > 0 {
            // the journal's preallocated room is used up: a checkpoint first (sled holds
            // every earlier cycle, not yet this one), then the record at its start
            self.checkpoint(applying)?;
        }
        let Some(wal) = applying.wal.as_mut() else {
            return Ok(());
        };
        wal.append(&mut record)
            .map_err(|e| format!("writing the write-ahead journal {} failed: {e}", wal.path().display()))?;
        self.wal_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// After a cycle was journalled and applied: a checkpoint when asked for (`checkpoint`)
    /// or due (time, size), or always without a journal (tests: sled flushed).
    fn after_apply(&self, applying: &mut Applying, checkpoint: bool) -> std::result::Result<(), String> {
        let Some(wal) = applying.wal.as_ref() else {
            return self.flush_and_sync();
        };
        let mut p = lock(&self.pending);
        let due = p
            .checkpoint_due
            .get_or_insert_with(|| Instant::now() + CHECKPOINT_AFTER);
        let due = *due <= Instant::now();
        drop(p);
        if checkpoint || due || wal.bytes() >= CHECKPOINT_BYTES {
            return self.checkpoint(applying);
        }
        Ok(())
    }

    /// A checkpoint (call with `applying` held): sled flushed and its files synced, so that
    /// it holds every record of the journal durably; only then the journal emptied.
    fn checkpoint(&self, applying: &mut Applying) -> std::result::Result<(), String> {
        self.flush_and_sync()?;
        if let Some(wal) = applying.wal.as_mut() {
            wal.empty()
                .map_err(|e| format!("emptying the write-ahead journal {} failed: {e}", wal.path().display()))?;
            self.wal_syncs.fetch_add(1, Ordering::Relaxed);
        }
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        lock(&self.pending).checkpoint_due = None;
        Ok(())
    }

    /// A checkpoint on its own (not with a cycle), unless the store takes no writes: when
    /// one is due and nothing is queued, at a stop, for [`Writer::flush_now`]. A failure
    /// is handled as a failed cycle's (nothing is acknowledged any more until a restart).
    fn checkpoint_alone(&self) -> Result<()> {
        let mut applying = lock(&self.applying);
        if let Some(reason) = lock(&self.pending).refused.clone() {
            return Err(StoreError::Unavailable(reason));
        }
        if let Err(e) = self.checkpoint(&mut applying) {
            tracing::error!("{e}");
            self.refuse(&e, Vec::new());
            return Err(StoreError::NotDurable);
        }
        Ok(())
    }

    /// After a failed cycle (`why`): from now on the store takes no writes, and nothing of
    /// that cycle or queued behind it is ever seen. Under the overlay's lock, in one step:
    /// later batches are refused at queue time; the batches queued behind the cycle are
    /// dropped with their overlay entries; and `pre_images`, per tree the values the
    /// cycle's keys had before it (`None`: absent), are put in front of sled, which may
    /// already show the cycle's values in memory. Then every waiter up to the last batch
    /// queued is told that its write failed; reads go on, from what was durable.
    fn refuse(&self, why: &str, pre_images: Vec<Vec<(Vec<u8>, Option<IVec>)>>) {
        let reason = format!("{why}; the database takes no writes until the server is restarted");
        let mut p = lock(&self.pending);
        if p.refused.is_none() {
            p.refused = Some(reason);
        }
        self.last_cycle_failed.store(true, Ordering::SeqCst);
        p.queue.clear();
        for overlay in &mut p.overlay {
            overlay.retain(|_, (seq, _)| *seq == PRE_IMAGE);
        }
        for (overlay, images) in p.overlay.iter_mut().zip(pre_images) {
            for (k, before) in images {
                // a value from before an earlier failure is older still: keep it
                overlay.entry(k).or_insert((PRE_IMAGE, before));
            }
        }
        let keys = p.overlay.iter().map(BTreeMap::len).sum();
        self.overlay_keys.store(keys, Ordering::SeqCst);
        let last = p.last_seq;
        drop(p);
        self.flushed.send_modify(|f| f.failed_upto = f.failed_upto.max(last));
    }

    /// One cycle: take what is queued, journal it (one record, one `fdatasync`), apply it
    /// to sled, checkpoint when `checkpoint` is asked for or one is due, tell the waiters.
    /// `Ok(false)`: nothing was queued. `Err`: the cycle failed (or the store took no
    /// writes any more); nothing it carried counts.
    fn cycle(&self, checkpoint: bool) -> Result<bool> {
        // held for the whole cycle: the pre-images of the next cycle must be read after
        // this one's verdict (and a backup copies sled between whole cycles)
        let mut applying = lock(&self.applying);
        if let Some(reason) = lock(&self.pending).refused.clone() {
            // nothing can be queued any more; anything left was refused with the failure
            return Err(StoreError::Unavailable(reason));
        }
        let Some(cycle) = self.prepare() else {
            return Ok(false);
        };
        let carried = cycle.queued.len();
        let syncing = std::time::Instant::now();
        let result = match &cycle.result {
            Ok(()) => self.journal(&mut applying, &cycle),
            Err(e) => Err(format!("reading the database failed: {e}")),
        };
        let micros = u64::try_from(syncing.elapsed().as_micros()).unwrap_or(u64::MAX);
        let result = result
            .and_then(|()| {
                self.apply(&cycle)
                    .map_err(|e| format!("writing to the database failed: {e}"))
            })
            .and_then(|()| self.after_apply(&mut applying, checkpoint));
        match result {
            Ok(()) => {
                self.cycles.fetch_add(1, Ordering::Relaxed);
                self.cycle_sizes.observe(carried as u64);
                self.sync_micros.observe(micros);
                self.last_cycle_failed.store(false, Ordering::SeqCst);
                self.flushed.send_modify(|f| f.ok_upto = f.ok_upto.max(cycle.upto));
                Ok(true)
            }
            Err(e) => {
                tracing::error!(
                    "{e}: the {carried} writes of this cycle and any queued behind them are refused, \
                     and from now on every write until a restart"
                );
                self.refuse(&e, cycle.pre_images);
                Err(StoreError::NotDurable)
            }
        }
    }

    /// A ticket for every batch queued so far.
    fn queued_ticket(&self) -> Ticket {
        self.ticket(lock(&self.pending).last_seq, false)
    }

    fn ticket(&self, upto: u64, wrote: bool) -> Ticket {
        Ticket::queued(upto, wrote, self.flushed.subscribe())
    }

    /// The writer thread: a cycle whenever something is queued, a checkpoint when one is
    /// due and nothing is, and one at the stop (a clean shutdown leaves the journal empty).
    fn run(&self) {
        loop {
            let checkpoint_due = {
                let mut p = lock(&self.pending);
                loop {
                    if !p.queue.is_empty() {
                        break false;
                    }
                    if p.stop {
                        let dirty = p.checkpoint_due.is_some() && p.refused.is_none();
                        drop(p);
                        if dirty {
                            // a failure is logged and refused by the checkpoint
                            let _ = self.checkpoint_alone();
                        }
                        return;
                    }
                    match p.checkpoint_due {
                        Some(due) if p.refused.is_none() => {
                            let now = Instant::now();
                            if due <= now {
                                break true;
                            }
                            p = self
                                .queued
                                .wait_timeout(p, due - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        _ => p = self.queued.wait(p).unwrap_or_else(|e| e.into_inner()),
                    }
                }
            };
            // a failure is logged and answered to the waiters by the cycle or checkpoint
            let _ = match checkpoint_due {
                true => self.checkpoint_alone().map(|()| true),
                false => self.cycle(false),
            };
        }
    }
}

/// The writer thread and the handle that request code waits on.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer for `trees` (a [`Tree`] names its sled tree by its index here) of
    /// the database in `db_dir`, whose files it syncs after each flush of sled. First the
    /// journal of the directory is read and its records replayed, made durable in sled,
    /// and the journal emptied; a damaged journal is an error naming it.
    pub(crate) fn start(db: sled::Db, trees: Vec<sled::Tree>, db_dir: &std::path::Path) -> Result<Writer> {
        let mut stable = Stable::open(db_dir)?;
        let (mut wal, records) = Wal::open(db_dir, JOURNAL_ROOM)?;
        let next_record = replay(&trees, &records).map_err(|e| match e {
            StoreError::Codec(why) => StoreError::Codec(format!("{}: {why}", wal.path().display())),
            e => e,
        })?;
        if !records.is_empty() {
            db.flush()?;
            stable.sync()?;
            tracing::info!(
                "replayed {} records of the write-ahead journal {} (writes acknowledged since the \
                 database was last flushed)",
                records.len(),
                wal.path().display()
            );
        }
        // after the replay is durable (and a torn tail goes too)
        wal.empty()?;
        let shared = Shared::new(db, trees, Some(stable), Some((wal, next_record)));
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

    /// Applies everything queued and checkpoints, in the calling thread (shutdown, tools):
    /// then everything is durable in sled's own files and the journal is empty.
    pub(crate) fn flush_now(&self) -> Result<()> {
        if self.shared.cycle(true)? {
            return Ok(());
        }
        // also when nothing was queued (what sled keeps for itself, like its id generator)
        self.shared.checkpoint_alone()
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
}

/// The sled engine's [`crate::store::api::Administration`]: the writer thread's health,
/// statistics and flush, and the backup held between two of its write cycles.
#[async_trait::async_trait]
impl Administration for Writer {
    /// Whether the database takes writes, without writing anything (a health probe must
    /// not cost a sync): the writer thread is alive, no sync ever failed (after one,
    /// nothing is acknowledged until a restart), and its latest cycle reached the disk.
    /// `Err` says why not.
    async fn writable(&self) -> std::result::Result<(), String> {
        if let Some(reason) = &lock(&self.shared.pending).refused {
            return Err(reason.clone());
        }
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            return Err("the database writer thread stopped".into());
        }
        if self.shared.last_cycle_failed.load(Ordering::SeqCst) {
            return Err("the latest write to the database failed".into());
        }
        Ok(())
    }

    /// Counters of the group commit so far.
    fn writer_stats(&self) -> WriterStats {
        WriterStats {
            batches: self.shared.flushed.borrow().ok_upto,
            cycles: self.shared.cycles.load(Ordering::Relaxed),
            syncs: self.shared.stable.as_ref().map_or(0, |s| lock(s).syncs())
                + self.shared.wal_syncs.load(Ordering::Relaxed),
        }
    }

    /// The cycles so far as histograms (metrics).
    fn writer_cycles(&self) -> CycleStats {
        CycleStats {
            batches: self.shared.cycle_sizes.snapshot(),
            sync_micros: self.shared.sync_micros.snapshot(),
        }
    }

    fn flush(&self) -> Result<()> {
        self.flush_now()
    }

    /// Marks the writer as after a failed sync (every later write fails, and `writable`
    /// says so): a real failed sync is hard to provoke on demand.
    fn simulate_sync_failure_for_tests(&self) {
        let _applying = lock(&self.shared.applying);
        self.shared
            .refuse("syncing the database files failed (simulated by a test)", Vec::new());
    }

    fn engine(&self) -> &'static str {
        "sled"
    }

    fn backup_to(&self, out: &mut dyn std::io::Write, files: &[(&str, &[u8])]) -> Result<BackupSummary> {
        // an open store has been migrated to the current format
        super::backup::backup_of_format(self, out, files, super::format::CURRENT)
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
    ///
    /// After a failed cycle, the values from before it replace what sled shows of it in
    /// memory (a copy holds only what was durable); queued writes are never in it.
    pub(crate) fn records(&self, index: usize) -> impl Iterator<Item = Result<(Bytes, Bytes)>> + '_ {
        let tree = &self.shared.trees[index];
        let end = [chunks::CHUNK_PREFIX];
        let pre_images = self
            .shared
            .overlay_range(index, Bound::Unbounded, Bound::Excluded(&end[..]), true);
        merge(tree, tree.range(..end.to_vec()), pre_images)
    }
}

/// Applies `writes` (value, or `None`: removal) to `tree` one by one. Not as a sled batch:
/// in sled 0.34 each `apply_batch` writes sled's log buffer out twice (`sync_file_range`
/// each), and atomicity on recovery comes from the journal (see the module comment).
fn apply_writes<'a, V: Into<IVec>>(
    tree: &sled::Tree,
    writes: impl IntoIterator<Item = (&'a [u8], Option<V>)>,
) -> sled::Result<()> {
    for (k, v) in writes {
        match v {
            Some(v) => {
                tree.insert(k, v)?;
            }
            None => {
                tree.remove(k)?;
            }
        }
    }
    Ok(())
}

/// Replays the journal's `records` into `trees` (in sled's memory), every one, in order:
/// sled may hold any of them already, all or in part (it writes its log in its own time),
/// and writing whole values and removals again ends in the same state. Answers the number
/// of the next record.
fn replay(trees: &[sled::Tree], records: &[wal::Record]) -> Result<u64> {
    let mut next = 1;
    for record in records {
        next = record.number + 1;
        for writes in &record.trees {
            let Some(tree) = trees.iter().find(|t| t.name() == writes.tree.as_slice()) else {
                return Err(StoreError::Codec(format!(
                    "record {} writes to a tree {:?} the database does not have",
                    record.number,
                    String::from_utf8_lossy(&writes.tree)
                )));
            };
            apply_writes(tree, writes.writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))?;
        }
    }
    Ok(next)
}

/// One cycle's writes to one tree: key → value (`None`: removal); a later write of a key in
/// the cycle replaces an earlier one, as in a `sled::Batch`.
type TreeWrites = BTreeMap<Vec<u8>, Option<IVec>>;

/// One cycle's writes to one tree, with values split into chunks ([`chunks`]): what is
/// applied to sled as one batch and journalled as is.
#[derive(Default)]
struct StoredBatch {
    writes: TreeWrites,
    /// Per key written in this batch: its chunk count as of the last write in the batch
    /// (sled does not have it yet), and its value before the batch, whole (`None`: absent),
    /// read anyway for the chunk count: the pre-image a failed cycle puts back.
    seen: std::collections::HashMap<Vec<u8>, (u32, Option<IVec>)>,
}

impl StoredBatch {
    /// Adds the write of `key` (`None`: its removal), removing the chunks of the value it
    /// replaces beyond the new value's own.
    fn write(&mut self, tree: &sled::Tree, key: &[u8], value: Option<&[u8]>) -> sled::Result<()> {
        let before = match self.seen.get(key) {
            Some((n, _)) => *n,
            None => {
                let stored = tree.get(key)?;
                let n = stored
                    .as_ref()
                    .and_then(|v| chunks::manifest_len(v))
                    .map_or(0, chunks::count);
                // a chunked value's chunks are read now: the batch replaces them
                let pre_image = match stored {
                    Some(v) if n > 0 => whole(tree, key, v)?,
                    other => other,
                };
                self.seen.insert(key.to_vec(), (n, pre_image));
                n
            }
        };
        let after = match value {
            Some(v) if chunks::needs_chunks(v) => {
                self.writes.insert(key.to_vec(), Some(chunks::manifest(v.len()).into()));
                for (i, part) in chunks::split(v).enumerate() {
                    self.writes.insert(chunks::chunk_key(key, i as u32), Some(part.into()));
                }
                chunks::count(v.len())
            }
            Some(v) => {
                self.writes.insert(key.to_vec(), Some(v.into()));
                0
            }
            None => {
                self.writes.insert(key.to_vec(), None);
                0
            }
        };
        for i in after..before {
            self.writes.insert(chunks::chunk_key(key, i), None);
        }
        if let Some((n, _)) = self.seen.get_mut(key) {
            *n = after;
        }
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
        if let Some(value) = chunks::read(tree, key, len)? {
            return Ok(Some(IVec::from(value)));
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
    ///
    /// When the store takes no writes (after a failed cycle), nothing is queued and no read
    /// sees the batch: the ticket answers [`StoreError::Unavailable`] with the reason.
    pub(crate) fn apply_batch(&self, batch: Batch) -> Ticket {
        match self.shared.queue(self.index, batch) {
            Ok(0) => Ticket::none(),
            Ok(seq) => self.shared.ticket(seq, true),
            Err(StoreError::Unavailable(reason)) => Ticket::refused(reason),
            Err(e) => Ticket::refused(e.to_string()),
        }
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
        let queued = self
            .shared
            .overlay_range(self.index, Bound::Included(prefix), to, false);
        merge(&self.sled, self.sled.scan_prefix(prefix), queued)
    }

    /// The records under `prefix` whose keys come after `after`, in key order (a page of a
    /// listing after its previous page's last key).
    pub(crate) fn scan_prefix_after(&self, prefix: &[u8], after: &[u8]) -> Scan {
        let end = prefix_end(prefix);
        let to = match &end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        let queued = self.shared.overlay_range(self.index, Bound::Excluded(after), to, false);
        merge(
            &self.sled,
            self.sled.range::<&[u8], _>((Bound::Excluded(after), to)),
            queued,
        )
    }

    /// The records with `from <= key <= to`, in key order.
    pub(crate) fn range_inclusive(&self, from: &[u8], to: &[u8]) -> Scan {
        let queued = self
            .shared
            .overlay_range(self.index, Bound::Included(from), Bound::Included(to), false);
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
        let shared = Shared::new(db.clone(), vec![sled.clone()], None, None);
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

        shared.cycle(false);
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
        shared.cycle(false);
        assert_eq!(tree.sled.get("k").expect("get").as_deref(), Some(&b"1"[..]));
        assert_eq!(
            tree.get("k").expect("get").as_deref(),
            Some(&b"2"[..]),
            "batch 2 is still queued"
        );
        lock(&shared.pending).queue.extend(second);
        shared.cycle(false);
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
        shared.cycle(false);
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
        shared.cycle(false);
        assert_eq!(chunk_records(&tree), 2 + 1);
        assert_eq!(tree.get("pbig").expect("get").map(|v| v.len()), Some(chunks::CHUNK + 1));
        // two writes of one key in one cycle
        tree.insert("pbig", vec![2u8; 5 * chunks::CHUNK]);
        tree.insert("pbig", "small now");
        tree.remove("pshaped");
        shared.cycle(false);
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
            let before = writer.writer_stats();
            let first = tree.insert("first", "yes");
            let ticket = tree.insert("acknowledged", "yes");
            assert!(ticket.wrote());
            ticket.wait().await.expect("durable");
            first.wait().await.expect("an earlier batch is durable too");
            let after = writer.writer_stats();
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

    /// Every record (the keys of these tests are text: below the chunk records' prefix).
    /// (values over 40 bytes shown by their length and first byte).
    fn all(tree: &Tree) -> Vec<(String, String)> {
        let short = |(k, v): (String, String)| match v.len() {
            0..=40 => (k, v),
            n => (k, format!("{n} bytes from {:?}", v.as_bytes()[0])),
        };
        keys(tree.range_inclusive(b"", b"\x7f"))
            .into_iter()
            .map(short)
            .collect()
    }

    /// A cycle whose syncs fail (sled's flush went through, so sled's memory already holds
    /// its writes): none of its writes, nor of the batches queued behind it, is seen by any
    /// later read (get, scans, a backup's copy), each of them fails, and from then on every
    /// write is refused without being queued.
    #[tokio::test]
    async fn a_failed_cycle_is_never_seen_and_later_writes_are_refused() {
        let (_db, shared, tree) = temporary();
        let big_old: Vec<u8> = (0..3 * chunks::CHUNK + 5).map(|i| i as u8).collect();
        tree.insert("a", "old");
        tree.insert("big", big_old.clone());
        tree.insert("gone", "old");
        shared.cycle(false).expect("a good cycle");
        let durable = all(&tree);
        assert_eq!(durable.len(), 3);

        let mut batch = Batch::default();
        batch.insert("a", "new");
        batch.insert("a", "newer");
        batch.insert("big", vec![7u8; 2 * chunks::CHUNK]);
        batch.remove("gone");
        batch.insert("added", "new");
        batch.insert("added big", vec![9u8; 5 * chunks::CHUNK]);
        let failing = tree.apply_batch(batch);
        let behind_ticket = tree.insert("behind", "queued behind the failing cycle");
        // the writer takes only the first batch; the second is queued behind it
        let behind = lock(&shared.pending).queue.split_off(1);
        assert_eq!(
            tree.get("a").expect("get").as_deref(),
            Some(&b"newer"[..]),
            "queued: seen"
        );

        shared.fail_syncs.store(true, Ordering::SeqCst);
        assert!(matches!(shared.cycle(false), Err(StoreError::NotDurable)));
        // (the second batch was still queued when the cycle failed: in the overlay, and
        // numbered below the last batch queued)
        drop(behind);
        // sled's memory has the failed cycle's values (why they must be hidden)
        assert_eq!(tree.sled.get("a").expect("get").as_deref(), Some(&b"newer"[..]));
        assert!(tree.sled.get("added").expect("get").is_some());

        assert!(matches!(failing.wait().await, Err(StoreError::NotDurable)));
        assert!(matches!(behind_ticket.wait().await, Err(StoreError::NotDurable)));
        assert_eq!(all(&tree), durable, "reads show only what was durable");
        assert_eq!(tree.get("a").expect("get").as_deref(), Some(&b"old"[..]));
        assert_eq!(tree.get("big").expect("get").as_deref(), Some(&big_old[..]));
        assert_eq!(tree.get("gone").expect("get").as_deref(), Some(&b"old"[..]));
        assert!(!tree.contains_key("added").expect("get"));
        assert!(!tree.contains_key("added big").expect("get"));
        assert!(!tree.contains_key("behind").expect("get"));
        let ranged: Vec<(IVec, IVec)> = tree.range_inclusive(b"a", b"c").map(|kv| kv.expect("scan")).collect();
        assert_eq!(ranged.len(), 2);
        assert_eq!(
            (ranged[0].1.as_ref(), ranged[1].1.as_ref()),
            (&b"old"[..], &big_old[..])
        );
        let frozen = Frozen { shared: &shared };
        let copied: Vec<(IVec, IVec)> = frozen.records(0).map(|kv| kv.expect("record")).collect();
        let copied: Vec<Vec<u8>> = copied.into_iter().map(|(k, _)| k.to_vec()).collect();
        assert_eq!(
            copied,
            vec![b"a".to_vec(), b"big".to_vec(), b"gone".to_vec()],
            "a backup copies what was durable"
        );

        // later writes are refused before they are queued, with the reason
        let overlay_before = shared.overlay_keys.load(Ordering::SeqCst);
        let refused = tree.insert("later", "refused");
        assert!(refused.wrote());
        assert!(!tree.contains_key("later").expect("get"));
        assert_eq!(shared.overlay_keys.load(Ordering::SeqCst), overlay_before);
        assert!(lock(&shared.pending).queue.is_empty());
        match refused.wait().await {
            Err(StoreError::Unavailable(why)) => assert!(why.contains("syncing"), "{why}"),
            other => panic!("not refused: {other:?}"),
        }
        // joined with a good receipt, still refused
        let joined = Ticket::none().and(tree.remove("a"));
        assert!(matches!(joined.wait().await, Err(StoreError::Unavailable(_))));
        assert_eq!(tree.get("a").expect("get").as_deref(), Some(&b"old"[..]));
        // the writer does no more cycles, even once the disk is fine again
        shared.fail_syncs.store(false, Ordering::SeqCst);
        assert!(matches!(shared.cycle(false), Err(StoreError::Unavailable(_))));
        assert_eq!(all(&tree), durable);
        assert_eq!(shared.flushed.borrow().ok_upto, 3);
    }

    /// The same with the real writer thread and files: the failed write is not there after
    /// a restart either, the acknowledged ones are, and the writer says why it is not
    /// writable.
    #[tokio::test]
    async fn after_a_failed_sync_the_writer_refuses_and_a_restart_has_the_acknowledged_writes() {
        let dir = tempfile::tempdir().expect("temporary directory");
        {
            let db = sled::Config::new().path(dir.path()).open().expect("open");
            let writer = Writer::start(db.clone(), vec![db.open_tree("t").expect("tree")], dir.path()).expect("writer");
            let tree = writer.tree(0);
            tree.insert("acknowledged", "yes").wait().await.expect("durable");
            assert!(writer.writable().await.is_ok());
            writer.shared.fail_syncs.store(true, Ordering::SeqCst);
            let failed = tree.insert("failed", "no");
            assert!(matches!(failed.wait().await, Err(StoreError::NotDurable)));
            assert!(tree.get("failed").expect("get").is_none());
            let why = writer.writable().await.expect_err("not writable");
            assert!(why.contains("syncing the write-ahead journal failed"), "{why}");
            writer.shared.fail_syncs.store(false, Ordering::SeqCst);
            let refused = tree.insert("refused", "no");
            assert!(matches!(refused.wait().await, Err(StoreError::Unavailable(_))));
            assert!(matches!(writer.flush_now(), Err(StoreError::Unavailable(_))));
            assert_eq!(tree.get("acknowledged").expect("get").as_deref(), Some(&b"yes"[..]));
            assert_eq!(writer.writer_stats().batches, 1);
        }
        // ("failed" may be there: its flush reached the files, only the sync failed; what
        // a failed sync leaves on disk is unknown, docs/durability.md)
        let db = sled::Config::new().path(dir.path()).open().expect("reopen");
        let tree = db.open_tree("t").expect("tree");
        assert!(tree.get("acknowledged").expect("get").is_some());
        assert!(tree.get("refused").expect("get").is_none());
    }

    /// A database directory with two trees, its writer, and its trees.
    fn on_disk(dir: &std::path::Path) -> (Writer, Tree, Tree) {
        let db = sled::Config::new().path(dir).open().expect("open");
        let trees = vec![db.open_tree("t").expect("tree"), db.open_tree("u").expect("tree")];
        let writer = Writer::start(db, trees, dir).expect("writer");
        let (t, u) = (writer.tree(0), writer.tree(1));
        (writer, t, u)
    }

    /// Every record sled holds in both trees, the engine's own (chunks, the journal
    /// position) included.
    fn everything(writer: &Writer) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for (i, tree) in writer.shared.trees.iter().enumerate() {
            for kv in tree.iter() {
                let (k, v) = kv.expect("record");
                out.push((i, k.to_vec(), v.to_vec()));
            }
        }
        out
    }

    fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("list") {
            let entry = entry.expect("entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("type").is_dir() {
                copy_dir(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).expect("copy");
            }
        }
    }

    /// The journal of a directory.
    fn journal(dir: &std::path::Path) -> Vec<u8> {
        std::fs::read(dir.join(wal::FILE)).expect("journal")
    }

    /// The records of the journal of a directory.
    fn records(dir: &std::path::Path) -> Vec<wal::Record> {
        wal::read(&journal(dir)).expect("read the journal").records
    }

    /// What a crash can leave at each step of a checkpoint, for writes acknowledged by the
    /// journal alone: sled's files as of the previous checkpoint (its flush not yet done or
    /// not yet synced), as some later moment (sled's own background writes), or as after
    /// this checkpoint's sync; with the journal whole (not yet emptied, or the emptying not
    /// yet synced), torn in its next record, or empty (only after sled's sync). Each opens
    /// with every acknowledged write, and the same records everywhere.
    #[tokio::test]
    async fn acknowledged_writes_survive_a_crash_at_every_step_of_a_checkpoint() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let images = tempfile::tempdir().expect("temporary directory");
        let live = dir.path();
        let image = |name: &str, sled_from: &std::path::Path, journal: &[u8]| {
            let to = images.path().join(name);
            copy_dir(sled_from, &to);
            std::fs::write(to.join(wal::FILE), journal).expect("journal");
            to
        };
        let big: Vec<u8> = (0..3 * chunks::CHUNK + 7).map(|i| (i % 251) as u8).collect();
        let (expected, all_images) = {
            let (writer, t, u) = on_disk(live);
            t.insert("a", "before the checkpoint").wait().await.expect("durable");
            t.insert("replaced big", big.clone()).wait().await.expect("durable");
            writer.flush_now().expect("checkpoint");
            assert!(records(live).is_empty(), "a checkpoint empties the journal");
            let previous = images.path().join("previous checkpoint");
            copy_dir(live, &previous);

            // acknowledged by the journal: one record per cycle
            t.insert("b", "journal only").wait().await.expect("durable");
            t.insert("replaced big", "small now").wait().await.expect("durable");
            t.insert("big", big.clone()).wait().await.expect("durable");
            let mut both = Batch::default();
            both.insert("c", "in both trees");
            u.apply_batch(both).wait().await.expect("durable");
            t.insert("c", "in both trees").wait().await.expect("durable");
            t.remove("a").wait().await.expect("durable");
            let syncs = writer.shared.wal_syncs.load(Ordering::SeqCst);
            let full = journal(live);
            let contents = wal::read(&full).expect("read");
            assert!(
                contents.end > wal::RECORDS + 3 * chunks::CHUNK,
                "the records are in the journal"
            );
            assert_eq!(contents.records.len(), 6, "one record per acknowledged cycle");
            assert_eq!(full.len(), wal::RECORDS + JOURNAL_ROOM as usize, "written in place");
            let later = images.path().join("sled's own writes");
            copy_dir(live, &later);
            // a next record cut short by the crash
            let torn_next = {
                let mut b = full.clone();
                let mut next = wal::encode(99, [(&b"t"[..], [(&b"d"[..], Some(&b"never acknowledged"[..]))])]);
                wal::stamp(&mut next, contents.generation);
                b[contents.end..contents.end + next.len() - 3].copy_from_slice(&next[..next.len() - 3]);
                b
            };
            writer.flush_now().expect("checkpoint");
            assert_eq!(writer.shared.wal_syncs.load(Ordering::SeqCst), syncs + 1);
            let after = images.path().join("after the checkpoint");
            copy_dir(live, &after);
            let expected = everything(&writer);
            drop(writer);
            // the emptying is the next generation written into the header, nothing else
            let emptied = journal(live);
            let changed: Vec<usize> = (0..full.len()).filter(|i| full[*i] != emptied[*i]).collect();
            assert!(
                !changed.is_empty() && changed.iter().all(|i| *i < 1024),
                "only the header changes: {changed:?}"
            );
            let torn_bump = {
                let mut b = full.clone();
                for i in &changed[..changed.len() / 2] {
                    b[*i] = emptied[*i];
                }
                b
            };
            let all_images = vec![
                // crash before sled's flush or its sync reached the disk
                image("1 previous + whole journal", &previous, &full),
                image("2 previous + torn next record", &previous, &torn_next),
                // crash during sled's flush (some of it on disk)
                image("3 some of sled + whole journal", &later, &full),
                // crash after sled's sync, before the journal's emptying is durable
                image("4 after sync + whole journal", &after, &full),
                // crash while the journal's generation is bumped (a torn header slot)
                image("5 after sync + torn emptying", &after, &torn_bump),
                // after the checkpoint (what the directory itself holds)
                after.clone(),
            ];
            (expected, all_images)
        };
        for path in all_images {
            let (writer, t, u) = on_disk(&path);
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(t.get("a").expect("get"), None, "{name}");
            assert_eq!(
                t.get("b").expect("get").as_deref(),
                Some(&b"journal only"[..]),
                "{name}"
            );
            assert_eq!(t.get("big").expect("get").as_deref(), Some(&big[..]), "{name}");
            assert_eq!(
                t.get("replaced big").expect("get").as_deref(),
                Some(&b"small now"[..]),
                "{name}"
            );
            assert_eq!(
                u.get("c").expect("get").as_deref(),
                Some(&b"in both trees"[..]),
                "{name}"
            );
            assert_eq!(everything(&writer), expected, "{name}: the same records and chunks");
            assert!(records(&path).is_empty(), "{name}: the journal is empty after open");
            // and it goes on journalling
            t.insert("after", "reopen").wait().await.expect("durable");
            let next = wal::read(&journal(&path)).expect("read").records;
            assert_eq!(next.len(), 1);
            assert_eq!(next[0].trees[0].writes.len(), 1);
        }
    }

    /// A cycle whose record does not fit in the journal's preallocated room is written after
    /// a checkpoint, at the start of the room: the file keeps its size (no `fdatasync` has
    /// to commit a new one), and the records before it are in sled.
    #[tokio::test]
    async fn a_record_that_does_not_fit_checkpoints_first() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let room = 64 * 1024;
        drop(Wal::open(dir.path(), room).expect("a small journal"));
        let size = std::fs::metadata(dir.path().join(wal::FILE)).expect("stat").len();
        let (writer, t, _) = on_disk(dir.path());
        let value = vec![7u8; 40 * 1024];
        t.insert("first", value.clone()).wait().await.expect("durable");
        let checkpoints = writer.shared.checkpoints.load(Ordering::SeqCst);
        assert_eq!(records(dir.path()).len(), 1);
        t.insert("second", value.clone()).wait().await.expect("durable");
        assert!(writer.shared.checkpoints.load(Ordering::SeqCst) > checkpoints);
        let contents = wal::read(&journal(dir.path())).expect("read");
        assert_eq!(contents.records.len(), 1, "only the second record");
        let names = |name: &[u8]| {
            contents.records[0].trees[0]
                .writes
                .iter()
                .any(|(k, _)| k.windows(name.len()).any(|w| w == name))
        };
        assert!(names(b"second") && !names(b"first"));
        assert_eq!(std::fs::metadata(dir.path().join(wal::FILE)).expect("stat").len(), size);
        drop((t, writer));
        let (_, t, _) = on_disk(dir.path());
        assert_eq!(t.get("first").expect("get").as_deref(), Some(&value[..]));
        assert_eq!(t.get("second").expect("get").as_deref(), Some(&value[..]));
    }

    /// Replaying records sled already has, all or some of them, changes nothing: the writes
    /// are whole values and removals, not increments.
    #[test]
    fn replay_is_idempotent() {
        let db = sled::Config::new().temporary(true).open().expect("temporary sled db");
        let trees = vec![db.open_tree("t").expect("tree"), db.open_tree("u").expect("tree")];
        let rec = |number: u64, tree: &str, writes: &[(&str, Option<&str>)]| wal::Record {
            number,
            trees: vec![wal::TreeWrites {
                tree: tree.as_bytes().to_vec(),
                writes: writes
                    .iter()
                    .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
                    .collect(),
            }],
        };
        let records = vec![
            rec(5, "t", &[("k", Some("1")), ("gone", Some("x"))]),
            rec(6, "u", &[("k", Some("u"))]),
            rec(7, "t", &[("k", Some("2")), ("gone", None), ("new", Some("n"))]),
        ];
        let dump = || -> Vec<(usize, Vec<u8>, Vec<u8>)> {
            let mut out = Vec::new();
            for (i, t) in trees.iter().enumerate() {
                out.extend(t.iter().map(|kv| {
                    let (k, v) = kv.expect("record");
                    (i, k.to_vec(), v.to_vec())
                }));
            }
            out
        };
        trees[0].insert("untouched", "kept").expect("insert");
        assert_eq!(replay(&trees, &records).expect("replay"), 8);
        let once = dump();
        let text = |v: Option<IVec>| v.map(|v| String::from_utf8_lossy(&v).into_owned());
        assert_eq!(text(trees[0].get("k").expect("get")).as_deref(), Some("2"));
        assert!(trees[0].get("gone").expect("get").is_none());
        assert_eq!(text(trees[1].get("k").expect("get")).as_deref(), Some("u"));
        assert_eq!(text(trees[0].get("untouched").expect("get")).as_deref(), Some("kept"));
        assert_eq!(replay(&trees, &records).expect("again"), 8);
        assert_eq!(dump(), once, "sled had every record");
        // sled had record 5 and part of record 7
        trees[0].insert("k", "1").expect("as after record 5");
        trees[0].insert("gone", "x").expect("as after record 5");
        trees[1].remove("k").expect("record 6 missing");
        trees[0].insert("new", "n").expect("part of record 7");
        replay(&trees, &records).expect("replay");
        assert_eq!(dump(), once, "from a part");
        // a record naming a tree the database does not have is refused
        let unknown = vec![rec(9, "nope", &[("k", None)])];
        assert!(matches!(replay(&trees, &unknown), Err(StoreError::Codec(_))));
    }

    /// A checkpoint whose sync of sled's files fails leaves the journal as it was (the
    /// writes it acknowledged are only there) and refuses later writes; a restart replays
    /// them.
    #[tokio::test]
    async fn a_failed_checkpoint_keeps_the_journal() {
        let dir = tempfile::tempdir().expect("temporary directory");
        {
            let (writer, t, _) = on_disk(dir.path());
            t.insert("k", "acknowledged").wait().await.expect("durable");
            let before = journal(dir.path());
            assert!(!records(dir.path()).is_empty());
            writer.shared.fail_syncs.store(true, Ordering::SeqCst);
            assert!(matches!(writer.flush_now(), Err(StoreError::NotDurable)));
            assert_eq!(journal(dir.path()), before, "not emptied");
            writer.shared.fail_syncs.store(false, Ordering::SeqCst);
            assert!(matches!(writer.flush_now(), Err(StoreError::Unavailable(_))));
            assert_eq!(journal(dir.path()), before, "not emptied at the stop either");
        }
        let (_, t, _) = on_disk(dir.path());
        assert_eq!(t.get("k").expect("get").as_deref(), Some(&b"acknowledged"[..]));
    }

    /// Idle, the writer checkpoints on its own within about [`CHECKPOINT_AFTER`], and a
    /// stop leaves the journal empty.
    #[tokio::test]
    async fn the_journal_is_emptied_when_idle_and_at_the_stop() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (writer, t, _) = on_disk(dir.path());
        t.insert("k", "v").wait().await.expect("durable");
        assert!(!records(dir.path()).is_empty());
        let deadline = Instant::now() + CHECKPOINT_AFTER + Duration::from_secs(10);
        while writer.shared.checkpoints.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no checkpoint");
            tokio::time::sleep(Duration::from_millis(20)).await; // poll, with a deadline
        }
        assert!(records(dir.path()).is_empty());
        t.insert("k", "w").wait().await.expect("durable");
        let shared = writer.shared.clone();
        let checkpoints = {
            // (no checkpoint runs while this is held)
            let _applying = lock(&shared.applying);
            assert!(!records(dir.path()).is_empty());
            shared.checkpoints.load(Ordering::SeqCst)
        };
        drop((t, writer));
        assert_eq!(shared.checkpoints.load(Ordering::SeqCst), checkpoints + 1);
        assert!(records(dir.path()).is_empty());
    }
}
