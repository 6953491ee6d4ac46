//! Pigeonhole: a small, fast, trustworthy personal server with two services in one process,
//! an inbox (Intray-compatible) and a scheduler (Tickler-compatible), all state in sled.
//!
//! [`launch`] runs the services on listeners the caller bound (tests use port 0) until a
//! shutdown signal; `main.rs` only parses the settings, binds and waits for signals. The
//! layers and the path of a request are in docs/architecture.md.

pub mod auth;
pub mod client;
pub mod clock;
pub mod config;
pub mod context;
pub mod control;
pub mod datadir;
pub mod domain;
pub mod files;
pub mod http;
pub mod inbox;
pub mod launch;
pub mod loopers;
pub mod mail;
pub mod manual;
pub mod memory;
pub mod metrics;
pub mod moving_in;
pub mod outbound;
pub mod payments;
pub mod scheduler;
pub mod shell;
pub mod store;
pub mod webpush;
pub mod workers;

pub use launch::{launch, Listeners, Running};
