//! The triggerer (scheduler.md §5.2): reads the due index up to now (never the items that
//! are not due), triggers each due item in its own atomic batch, makes the batch durable
//! before any delivery starts, wakes the delivery schedulers, and sleeps until the next due
//! instant (or the period, whichever is first).
//!
//! A due item that cannot be triggered because a record it needs cannot be decoded (the
//! item, its owner's triggers or settings: written by a newer version, or damaged) is set
//! aside: noted like the requests note it (logged once, counted by `/healthz`), remembered
//! in [`SetAside`] and skipped, also when computing the next wake-up, until a restart.

use super::PassError;
use crate::clock::Clock;
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::Timestamp;
use crate::store::undecodable::CAPACITY;
use crate::store::{ClaimedWork, Store, StoreError, Written};
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use uuid::Uuid;

/// Due items triggered in one round: each round is durable, and handed on to the delivery
/// stages, before the next begins (the first reminders of a burst go out while the later
/// ones are triggered).
const BATCH: usize = 64;

/// The due-index entries (due instant, item id) set aside because a record needed to
/// trigger them cannot be decoded; at most [`CAPACITY`] (past that, such an entry fails the
/// pass as before, so that the index is never read further than `BATCH + CAPACITY`).
#[derive(Default)]
pub struct SetAside(Mutex<HashSet<(Timestamp, Uuid)>>);

impl SetAside {
    fn set(&self) -> MutexGuard<'_, HashSet<(Timestamp, Uuid)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn contains(&self, at: Timestamp, id: Uuid) -> bool {
        self.set().contains(&(at, id))
    }

    fn len(&self) -> usize {
        self.set().len()
    }

    /// Remembers the entry; `false` when the set is full.
    fn add(&self, at: Timestamp, id: Uuid) -> bool {
        let mut set = self.set();
        if set.len() >= CAPACITY {
            return false;
        }
        set.insert((at, id));
        true
    }
}

/// One pass; answers how many items it triggered and how long the worker may sleep before
/// the next due instant. `clock` says what is due; `aside` holds the entries set aside;
/// `round` is called after each durable round that triggered something.
pub async fn pass(
    store: &Store,
    clock: &Clock,
    aside: &SetAside,
    round: &(dyn Fn() + Sync),
) -> Result<(usize, Option<Duration>), PassError> {
    let s = &store.scheduler;
    let mut triggered = 0;
    loop {
        let now = clock.now();
        // the entries set aside are read again and skipped: reading that many more keeps
        // a round of BATCH entries to trigger
        let limit = BATCH + aside.len();
        let read = s.due_items(now, limit).await?;
        let mut due = Vec::with_capacity(read.len());
        let mut written = Vec::with_capacity(read.len());
        let entries: Vec<_> = read
            .iter()
            .filter(|&&(at, _, id)| !aside.contains(at, id))
            .copied()
            .collect();
        let mut next = |item: &ScheduledItem, setting: &TimeZoneSetting| next_occurrence(item, &Zone::of(setting), now);
        let results = s.trigger_items(&entries, now, &mut next).await;
        for (entry @ (at, _, id), result) in entries.into_iter().zip(results) {
            match result {
                Ok(copy) => {
                    due.push(entry);
                    written.push(copy);
                }
                Err(StoreError::Undecodable(record)) if aside.add(at, id) => {
                    store.undecodable().note(&record);
                    tracing::warn!(
                        "item {id} of account {} is set aside, not triggered: a record it needs cannot be decoded",
                        entry.1
                    );
                }
                Err(e) => return Err(e.into()),
            }
        }
        // one flush for the round, and durable before any delivery starts
        let copies = Written::all(written).durable().await?;
        let before = triggered;
        for ((_, owner, id), copy) in due.iter().zip(copies) {
            if let Some(copy) = copy {
                tracing::info!("triggered item {id} of account {owner}: triggered item {}", copy.id);
                triggered += 1;
            }
        }
        if triggered > before {
            round();
        }
        if read.len() < limit {
            break;
        }
    }
    // the earliest entry not set aside
    let next = s
        .upcoming(aside.len() + 1)
        .await?
        .into_iter()
        .find(|&(at, _, id)| !aside.contains(at, id))
        .map(|(at, _, _)| at);
    let next = next.map(|at| clock.until(at));
    // items another process holds (it died, or triggers them now): looked at again when its
    // claims run out
    let next = super::until_claims_end(store, ClaimedWork::DueItems, next).await;
    Ok((triggered, next))
}

/// The item moved to its first occurrence after `now`, with a new server time and due
/// instant; `None` when it does not recur (or has no representable next occurrence).
fn next_occurrence(item: &ScheduledItem, zone: &Zone, now: Timestamp) -> Option<(ScheduledItem, Timestamp)> {
    let tickle = schedule::first_after(&item.tickle, zone, now)?;
    let due = schedule::due(&tickle, zone);
    let moved = ScheduledItem {
        tickle,
        server_time: item.server_time + 1,
        ..item.clone()
    };
    Some((moved, due))
}
