//! The scheduler domain: items, recurrences, triggers and settings with their wire shapes
//! (scheduler.md §2), due instants (§5) and the sync planner (§10).

pub mod models;
pub mod schedule;
pub mod sync;
