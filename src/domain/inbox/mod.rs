//! The inbox domain: items and their wire shapes (inbox.md §1.4, §3), and the sync planner.

pub mod models;
pub mod sync;
