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

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs an import asked to stop (and wait) once `batches` batches are on disk
/// (`PIGEONHOLE_TEST_MOVE_IN_STOP_AFTER_BATCHES`) until it says so within `within`, then
/// kills it (`kill -9`): a run cut short, part of its file on disk.
fn kill_after_batches(mut import: Command, batches: u32, within: Duration) {
    let mut child = import
        .env("PIGEONHOLE_TEST_MOVE_IN_STOP_AFTER_BATCHES", batches.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pigeonhole");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let said = format!("{batches} batches on disk");
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(&said) => break,
            Ok(_) => continue,
            Err(e) => panic!("the import did not reach {said:?}: {e}"),
        }
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
}
