//! Moving in from Intray and Tickler (issue 28 point 6: one test program per concern, each
//! module once a program of its own): account imports within their bounds, the original
//! servers' databases read as they are, and the memory of moving in.
//!
//! Every module's tests run together on the test harness's threads in this one process: a
//! test may not change what the process shares (environment, working directory).

#[path = "../common/mod.rs"]
mod common;
#[path = "../originals/mod.rs"]
mod originals;

mod import_bounds;
mod import_memory;
mod import_originals;
mod moving_in_bounds;
