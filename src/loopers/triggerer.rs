//! The triggerer (scheduler.md §5.2): reads the due index up to now (never the items that
//! are not due), triggers each due item in its own atomic batch, makes the batch durable
//! before any delivery starts, wakes the delivery schedulers, and sleeps until the next due
//! instant (or the period, whichever is first).

use crate::clock::Clock;
use crate::domain::scheduler::models::ScheduledItem;
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::Timestamp;
use crate::store::{Store, Written};
use std::time::Duration;

const BATCH: usize = 256;

/// One pass; answers how many items it triggered and how long the worker may sleep before
/// the next due instant. `clock` says what is due.
pub async fn pass(store: &Store, clock: &Clock) -> Result<(usize, Option<Duration>), String> {
    let s = &store.scheduler;
    let mut triggered = 0;
    loop {
        let now = clock.now();
        let due = s.due_items(now, BATCH).map_err(|e| e.to_string())?;
        let mut written = Vec::with_capacity(due.len());
        for entry in &due {
            let copy = s
                .trigger_item(*entry, now, |item, setting| {
                    next_occurrence(item, &Zone::of(setting), now)
                })
                .map_err(|e| e.to_string())?;
            written.push(copy);
        }
        // one flush for the round, and durable before any delivery starts
        let copies = Written::all(written).durable().await.map_err(|e| e.to_string())?;
        for ((_, owner, id), copy) in due.iter().zip(copies) {
            if let Some(copy) = copy {
                tracing::info!("triggered item {id} of account {owner}: triggered item {}", copy.id);
                triggered += 1;
            }
        }
        if due.len() < BATCH {
            break;
        }
    }
    let next = s.next_due().map_err(|e| e.to_string())?;
    Ok((triggered, next.map(|at| clock.until(at))))
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
