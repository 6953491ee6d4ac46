//! The scheduler domain: items, recurrences, triggers and settings with their wire shapes
//! (scheduler.md §2), due instants (§5) and the sync planner (§10), and what push and webhook triggers take and send (§6.4–§6.5, §7.6–§7.7).

pub mod models;
pub mod push;
pub mod schedule;
pub mod sync;
