//! The sled engine behind the traits of [`super::api`] (the zero-configuration default):
//!
//! * the per-service stores of domain operations, which implement the traits: [`accounts`]
//!   ([`super::api::Accounts`]), [`inbox`] ([`super::api::InboxItems`]), [`scheduler`] (one
//!   file per job; the scheduler's traits in `scheduler/traits.rs`) and `admin.rs`
//!   ([`super::api::Administration`]). They build atomic batches of keys ([`keys`]) and
//!   records ([`records`]: private, versioned record types, the only things encoded) and
//!   serialise the read-check-write sequences of one account with striped locks;
//! * the engine: one writer thread with group commit and an in-memory overlay of queued
//!   writes ([`writer`]), values over 4 KiB in chunks ([`chunks`]), the `fsync`s after each
//!   flush ([`stable`]); imports in journalled batches ([`imports`]), moving in
//!   ([`moving_in`]) and the backup file ([`backup`]).

pub(crate) mod accounts;
mod admin;
pub(crate) mod backup;
pub(crate) mod chunks;
pub(crate) mod copy;
pub(crate) mod imports;
pub mod inbox;
pub(crate) mod keys;
pub mod moving_in;
pub(crate) mod records;
pub mod scheduler;
pub(crate) mod stable;
pub(crate) mod writer;

// what the engine's files name as `super::…` (the store's shared types)
#[allow(unused_imports)]
use super::*;
