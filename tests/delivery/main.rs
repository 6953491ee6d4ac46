//! Deliveries (issue 28 point 6: one test program per concern, each module once a program
//! of its own): e-mail, inbox and webhook deliveries of the scheduler, and Web Push.
//!
//! Every module's tests run together on the test harness's threads in this one process: a
//! test may not change what the process shares (environment, working directory).

#[path = "../common/mod.rs"]
mod common;

mod delivery;
mod push;
