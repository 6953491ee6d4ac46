//! Moving in in constant memory (issue 29 point 3): `import-intray` and `import-tickler`
//! read the file in two passes and write through a store they close and open again every
//! few dozen batches (sled keeps the pages it wrote until it is closed), so the import
//! process's peak resident memory does not grow with the number of rows.
//!
//! The always-run tests compare a file with four times the rows of another (debug build);
//! the ignored one moves in 2,000,000 Intray rows and 1,000,000 Tickler rows within
//! [`BUDGET_MIB`]: six minutes with the release binary, too slow for `cargo test` and for
//! CI, run it on demand with `PIGEONHOLE_BIN=target/release/pigeonhole cargo test --test
//! moving_in import_memory -- --ignored`. docs/moving-in.md has the figures.

#[path = "../../benches/common/originals.rs"]
mod large;

use crate::originals::ddl::{IntrayLayout, TicklerLayout};
use pigeonhole::store::Store;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most resident memory (peak, `VmHWM`) the import process may use for 2,000,000 Intray
/// rows or 1,000,000 Tickler rows (release build). Measured: 248 MiB and 193 MiB (they took
/// 1.05 GB and 1.8 GB at first). The 128 MiB issue 29 asks for is out of reach with sled
/// 0.34: sled alone opening the database those runs make peaks at 174 MiB and 108 MiB
/// (docs/moving-in.md), since it holds memory for every page of an open database.
const BUDGET_MIB: u64 = 288;

/// How much more the writing's share of the peak (the peak of the run that writes, less that
/// of a second run of the same file, which reads it all and opens the database it made but
/// writes nothing) may be for a file of 200,000 rows than for one of 50,000 (debug build).
/// sled needs memory for every page of an open database (a server opening it needs the
/// same), so the second run's peak grows with the database; what writing adds on top is
/// held down by closing and opening the database every 32 batches and handing freed memory
/// back after each. Measured: 19 MiB more for Intray items, 14 MiB for Tickler rows; it grew
/// by 0.45 KiB per item before (66 MiB for 150,000 items).
const GROWTH_MIB: f64 = 28.0;

/// The pigeonhole binary: `PIGEONHOLE_BIN` (the release build in CI), else this build's.
fn binary() -> PathBuf {
    std::env::var_os("PIGEONHOLE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pigeonhole")))
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// The peak resident memory of process `pid` so far in KiB (`VmHWM`), if it is still there.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// What one run measured.
struct Run {
    peak_mib: f64,
    seconds: f64,
    said: String,
}

/// Runs `pigeonhole COMMAND FILE --data-dir DATA` to its end (within a deadline), sampling
/// its peak RSS (`VmHWM` is monotonic: the last read while it ran is the peak); it must
/// succeed.
fn import(command: &str, file: &Path, data: &Path) -> Run {
    let started = Instant::now();
    let mut child = Command::new(binary())
        .args([command, file.to_str().expect("path"), "--data-dir"])
        .arg(data)
        .env_remove("PIGEONHOLE_DATA_DIR")
        .env_remove("PIGEONHOLE_TEST_MOVE_IN_STOP_AFTER_BATCHES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pigeonhole");
    let pid = child.id();
    let (mut stdout, mut stderr) = (
        child.stdout.take().expect("stdout"),
        child.stderr.take().expect("stderr"),
    );
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).expect("read");
        std::io::Read::read_to_string(&mut stderr, &mut s).expect("read");
        s
    });
    let deadline = started + Duration::from_secs(1800);
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "{command} ran past its deadline");
        std::thread::sleep(Duration::from_millis(5)); // poll: samples the peak RSS until the exit, with a deadline
    };
    let said = out.join().expect("output");
    assert!(status.success(), "{command} failed: {said}");
    Run {
        peak_mib: peak as f64 / 1024.0,
        seconds: started.elapsed().as_secs_f64(),
        said,
    }
}

/// A move-in, and the same file moved in again (all of it is read and the database opened,
/// nothing is written: "already here").
struct Measured {
    run: Run,
    again: Run,
}

impl Measured {
    /// What writing added to the peak.
    fn writing_mib(&self) -> f64 {
        self.run.peak_mib - self.again.peak_mib
    }
}

/// Moves in an Intray file of `items` items into a new data directory, checks they are all
/// there, and moves it in again.
fn intray_run(dir: &Path, items: u64) -> Measured {
    let file = dir.join(format!("intray-{items}.sqlite3"));
    let data = dir.join(format!("intray-data-{items}"));
    large::intray_file(&file, &IntrayLayout::Since2020.ddl(), items);
    let run = import("import-intray", &file, &data);
    assert!(
        run.said
            .contains(&format!("moved in 1 inbox account(s) with {items} item(s): alice")),
        "{}",
        run.said
    );
    {
        let store = Store::open(&data).expect("open");
        let alice = block(store.inbox.accounts.by_username("alice"))
            .expect("read")
            .expect("alice");
        assert_eq!(block(store.inbox.count(alice.id)).expect("count"), items);
    }
    let again = import("import-intray", &file, &data);
    assert!(again.said.contains("already here, skipped: alice"), "{}", again.said);
    eprintln!(
        "import-intray of {items} items: peak RSS {:.1} MiB ({:.1} MiB when run again), {:.1} s ({:.0} rows/s)",
        run.peak_mib,
        again.peak_mib,
        run.seconds,
        items as f64 / run.seconds
    );
    Measured { run, again }
}

/// Moves in a Tickler file of `rows` rows into a new data directory, checks its items and
/// the outcomes of their deliveries are all there, and moves it in again.
fn tickler_run(dir: &Path, rows: u64) -> Measured {
    let file = dir.join(format!("tickler-{rows}.sqlite3"));
    let data = dir.join(format!("tickler-data-{rows}"));
    large::tickler_file(&file, &TicklerLayout::Since2022.ddl(), rows);
    let run = import("import-tickler", &file, &data);
    let (scheduled, triggered, _) = large::tickler_rows(rows);
    assert!(
        run.said.contains(&format!(
            "moved in 1 scheduler account(s) with {} item(s): alice",
            scheduled + triggered
        )),
        "{}",
        run.said
    );
    {
        let store = Store::open(&data).expect("open");
        let alice = block(store.scheduler.accounts.by_username("alice"))
            .expect("read")
            .expect("alice");
        let counts = block(store.scheduler.items.counts(alice.id)).expect("counts");
        assert_eq!(counts, (scheduled, triggered));
        // every triggered item has the outcome of its delivery
        let listed = block(store.scheduler.items.triggered_items(alice.id)).expect("triggered");
        assert_eq!(listed.len() as u64, triggered);
        assert!(listed.iter().all(|t| t.attempts.len() == 1), "an outcome is missing");
    }
    let again = import("import-tickler", &file, &data);
    assert!(again.said.contains("already here, skipped: alice"), "{}", again.said);
    eprintln!(
        "import-tickler of {rows} rows: peak RSS {:.1} MiB ({:.1} MiB when run again), {:.1} s ({:.0} rows/s)",
        run.peak_mib,
        again.peak_mib,
        run.seconds,
        rows as f64 / run.seconds
    );
    Measured { run, again }
}

/// Held by each test that measures peaks: two imports measured at once take each other's
/// cores, and a starved import's peak says more about the machine's load than its memory
/// (CI saw 28.3 MiB of growth where a run alone shows 7–15).
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn measuring() -> std::sync::MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writing's share of the peak does not grow with the rows.
fn bounded(small: &Measured, large: &Measured, what: &str) {
    assert!(
        large.writing_mib() < small.writing_mib() + GROWTH_MIB,
        "writing {what} added {:.1} MiB to the peak for four times the rows, {:.1} MiB for the smaller file",
        large.writing_mib(),
        small.writing_mib()
    );
}

#[test]
fn import_intrays_peak_memory_does_not_grow_with_the_rows() {
    let _alone = measuring();
    let dir = tempfile::tempdir().expect("tempdir");
    let small = intray_run(dir.path(), 50_000);
    let large = intray_run(dir.path(), 200_000);
    bounded(&small, &large, "items");
}

#[test]
fn import_ticklers_peak_memory_does_not_grow_with_the_rows() {
    let _alone = measuring();
    let dir = tempfile::tempdir().expect("tempdir");
    let small = tickler_run(dir.path(), 50_000);
    let large = tickler_run(dir.path(), 200_000);
    bounded(&small, &large, "scheduled items");
}

#[test]
#[ignore = "six minutes with the release binary: run it with PIGEONHOLE_BIN=target/release/pigeonhole"]
fn two_million_intray_rows_and_a_million_tickler_rows_move_in_within_the_budget() {
    let _alone = measuring();
    let dir = tempfile::tempdir().expect("tempdir");
    for measured in [intray_run(dir.path(), 2_000_000), tickler_run(dir.path(), 1_000_000)] {
        assert!(
            measured.run.peak_mib < BUDGET_MIB as f64,
            "peak RSS {:.1} MiB over the budget of {BUDGET_MIB} MiB",
            measured.run.peak_mib
        );
    }
}

/// A run killed after it closed and opened its database again (its journal then spans two
/// openings) leaves nothing once the data directory is next opened, and the next run moves
/// everything in.
#[test]
fn an_import_tickler_killed_after_reopening_its_database_leaves_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tickler.sqlite3");
    let data = dir.path().join("data");
    // about 70 batches; the database is opened again after the 32nd
    let rows = 60_000;
    large::tickler_file(&file, &TicklerLayout::Since2022.ddl(), rows);
    let mut first = Command::new(binary());
    first
        .args(["import-tickler", file.to_str().expect("path"), "--data-dir"])
        .arg(&data)
        .env_remove("PIGEONHOLE_DATA_DIR");
    super::kill_after_batches(first, 40, Duration::from_secs(300));
    {
        // 40 batches are on disk; opening the data directory undoes them
        let store = Store::open(&data).expect("open");
        assert!(block(store.scheduler.accounts.by_username("alice"))
            .expect("read")
            .is_none());
        assert_eq!(block(store.scheduler.items.total_counts()).expect("counts"), (0, 0));
    }
    let (scheduled, triggered, _) = large::tickler_rows(rows);
    let run = import("import-tickler", &file, &data);
    assert!(
        run.said
            .contains(&format!("with {} item(s): alice", scheduled + triggered)),
        "{}",
        run.said
    );
}
