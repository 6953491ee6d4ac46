//! The writes of an account import, in batches of bounded size (docs/backup.md).
//!
//! A batch is queued only once the one before it is on disk: the writer merges everything
//! queued during a cycle into one sled batch, and sled holds every page a batch replaces
//! until the whole batch is applied, so one batch of a 16 MiB import (250,000 writes) took
//! the server over a gigabyte. Batches of [`IMPORT_BATCH_WRITES`] writes keep that to a few
//! MiB. Every rule of the import is checked before the first batch is queued; the caller
//! holds the account's lock throughout, so that no other write of the account comes between
//! two batches.

use super::writer::{Batch, Bytes, Tree};
use super::{Result, Written};

/// The most writes of one batch of an import.
pub const IMPORT_BATCH_WRITES: usize = 2048;

/// Waits until a batch is on disk (an import runs in a blocking thread: this blocks it).
pub type WaitDurable<'a> = &'a dyn Fn(Written<()>) -> Result<()>;

/// An import's writes, queued a batch at a time.
pub(crate) struct Batches<'a> {
    tree: &'a Tree,
    wait: WaitDurable<'a>,
    batch: Batch,
    writes: usize,
    /// Batches that reached the disk.
    pub(crate) done: usize,
}

impl<'a> Batches<'a> {
    pub(crate) fn new(tree: &'a Tree, wait: WaitDurable<'a>) -> Batches<'a> {
        Batches {
            tree,
            wait,
            batch: Batch::default(),
            writes: 0,
            done: 0,
        }
    }

    pub(crate) fn insert(&mut self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) {
        self.batch.insert(key, value);
        self.writes += 1;
    }

    pub(crate) fn remove(&mut self, key: impl AsRef<[u8]>) {
        self.batch.remove(key);
        self.writes += 1;
    }

    /// Whether the batch is full (then the caller adds what must land with it, such as the
    /// account's counts, and calls [`Batches::write`]).
    pub(crate) fn full(&self) -> bool {
        self.writes >= IMPORT_BATCH_WRITES
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.writes == 0
    }

    /// Queues the batch and waits until it is on disk.
    pub(crate) fn write(&mut self) -> Result<()> {
        if self.writes == 0 {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.writes = 0;
        (self.wait)(Written::new((), self.tree.apply_batch(batch)))?;
        self.done += 1;
        Ok(())
    }
}
