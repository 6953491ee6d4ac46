//! The command line (issue 28 point 6: one test program per concern, each module once a
//! program of its own): the client and the administration commands, the queue of the
//! offline client, reminders, the examples of examples/ and the Debian package's scripts.
//!
//! Every module's tests run together on the test harness's threads in this one process: a
//! test may not change what the process shares (environment, working directory).

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod cli_account;
mod cli_queue;
mod cli_reminders;
mod examples;
mod package_scripts;
