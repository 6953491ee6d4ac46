//! What the imports of both services share: sorting an import's ids into the ones new to
//! the account (as they will be stored) and the ones it has already, in the import's
//! transaction under the account's row lock. An id that another account has is stored under
//! [`crate::store::own_id`], as the sled store does, so that an import's answer
//! never tells whether an id exists elsewhere.

use super::sql::Sql;
use super::{PgError, PgResult};
use deadpool_postgres::Transaction;
use std::collections::{HashMap, HashSet};
use uuid::Uuid;

/// Entries an import holds in memory before it writes them.
const IMPORT_BATCH: usize = 500;

/// Reads an import's feed to its end: `accept` says what of each entry is written (`None`:
/// nothing, a repeat or a known id), `write` writes a batch of at most [`IMPORT_BATCH`] of
/// them (in the import's transaction), the last one too. A failed write, or a feed that
/// cannot be read, ends the import (the caller's transaction is then not committed).
pub(super) fn feed_in_batches<T, U>(
    feed: crate::store::api::Feed<'_, T>,
    mut accept: impl FnMut(T) -> Option<U>,
    mut write: impl FnMut(&[U]) -> PgResult<()>,
) -> PgResult<()> {
    let mut batch: Vec<U> = Vec::with_capacity(IMPORT_BATCH);
    let mut failed: Option<PgError> = None;
    let fed = feed(&mut |entry| {
        if let Some(u) = accept(entry) {
            batch.push(u);
        }
        if batch.len() >= IMPORT_BATCH {
            if let Err(e) = write(&batch) {
                failed = Some(e);
                return Err(crate::store::StoreError::Engine("an import batch failed".into()));
            }
            batch.clear();
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    fed.map_err(|e| PgError::Corrupt(format!("the import could not be read: {e}")))?;
    write(&batch)
}

/// Ids looked up at once while an import is planned.
const PLAN_CHUNK: usize = 1_000;

/// The ids of one kind of entry of an import.
#[derive(Default)]
pub(super) struct Sorted {
    /// New to the account, as they are stored.
    pub new: HashSet<Uuid>,
    /// Import id → stored id, for ids that are another account's.
    pub renamed: HashMap<Uuid, Uuid>,
    /// How many the account has already (repeats of one id count as kept).
    pub kept: usize,
}

impl Sorted {
    /// The id an entry of the import is stored under, when it is new (the first of repeats).
    pub fn take(&mut self, id: Uuid) -> Option<Uuid> {
        let stored = self.renamed.get(&id).copied().unwrap_or(id);
        self.new.remove(&stored).then_some(stored)
    }
}

/// Sorts `ids` by whom the rows of `table` (with columns `id` and `account`) say they
/// belong to; in `tx`, which holds the account's lock.
pub(super) async fn sort_ids(tx: &Transaction<'_>, table: &str, account: Uuid, ids: &[Uuid]) -> PgResult<Sorted> {
    let mut sorted = Sorted::default();
    let mut distinct = Vec::new();
    let mut seen = HashSet::new();
    for id in ids {
        if seen.insert(*id) {
            distinct.push(*id);
        } else {
            sorted.kept += 1;
        }
    }
    let sql = format!("SELECT id, account FROM {table} WHERE id = ANY($1)");
    for chunk in distinct.chunks(PLAN_CHUNK) {
        // (original id, candidate), each candidate looked up until it is free or ours
        let mut open: Vec<(Uuid, Uuid)> = chunk.iter().map(|id| (*id, *id)).collect();
        // a derived id that is another account's too would need 2^64 tries to find
        for _ in 0..4 {
            if open.is_empty() {
                break;
            }
            let candidates: Vec<Uuid> = open.iter().map(|(_, c)| *c).collect();
            let owners: HashMap<Uuid, Uuid> = tx
                .fetch_all(&sql, &[&candidates])
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                .collect::<PgResult<_>>()?;
            let mut next = Vec::new();
            for (original, candidate) in open {
                match owners.get(&candidate) {
                    None => {
                        if candidate != original {
                            sorted.renamed.insert(original, candidate);
                        }
                        sorted.new.insert(candidate);
                    }
                    Some(owner) if *owner == account => sorted.kept += 1,
                    Some(_) => next.push((original, crate::store::own_id(account, candidate))),
                }
            }
            open = next;
        }
        if let Some((original, _)) = open.first() {
            return Err(PgError::Corrupt(format!(
                "no free id for the imported entry {original}"
            )));
        }
    }
    Ok(sorted)
}
