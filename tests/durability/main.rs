//! What is acknowledged is kept (issue 28 point 6: one test program per concern, each
//! module once a program of its own): `kill -9`, the order of system calls, power cuts and
//! a full disk on a simulated file system, several processes on one database, exports and
//! moving between engines. (tests/backup.rs stays a program of its own: its servers keep
//! sled whatever `PIGEONHOLE_TEST_POSTGRES` says, which tests/common decides per program.)
//!
//! Every module's tests run together on the test harness's threads in this one process: a
//! test may not change what the process shares (environment, working directory).

#[path = "../common/mod.rs"]
mod common;
#[path = "../common/powercut_fs.rs"]
mod powercut_fs;

mod claims;
mod crash;
mod durability;
mod export;
mod full_disk;
mod migrate_store;
mod powercut;
mod processes;

/// One FUSE mount at a time, of powercut and full_disk together: they share two cores with
/// everything else (as programs of their own they never ran at the same time).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
