//! The domain: what Pigeonhole's data is and the rules it follows, with no knowledge of HTTP,
//! storage or the runtime. Models and their wire forms (inbox.md, scheduler.md), the sync
//! planners, scheduling (due instants, recurrences), accounts, permissions and secrets.
//!
//! Nothing here imports another module of the crate (tests/static_checks/layers.rs checks it): the store
//! persists these types, the services parse requests into them and answer with them.

pub mod account;
pub mod client_keys;
pub mod email;
pub mod error;
pub mod inbox;
pub mod permissions;
pub mod scheduler;
pub mod secrets;
pub mod transfer;
pub mod wire;
pub mod worker;

pub use error::DomainError;
