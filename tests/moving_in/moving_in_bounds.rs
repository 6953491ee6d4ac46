//! Moving in a large Intray database (issue 17 point 5): `import-intray` streams the file in
//! two passes and writes it in bounded batches, so its peak memory stays within a fixed
//! budget whatever the file's size; and a run killed mid-write leaves nothing of the file
//! once the data directory is next opened, after which a second run moves everything in.

use crate::originals;

use originals::ddl::IntrayLayout;
use originals::*;
use pigeonhole::store::Store;
use rusqlite::{params, Connection};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The most resident memory (peak, `VmHWM`) `import-intray` of the 200,000-item file (61
/// MiB) may use (docs/moving-in.md). Measured on the debug build: 94 MiB, of which the
/// first pass (every row read and decoded, the store opened) is 31 MiB whatever the file's
/// size; the rest grows by about 0.3 KiB per item written, which is the storage engine's
/// (sled's) memory of the keys written, not the file's (50,000 items: 51 MiB). Before the
/// two passes the same file took 3.1 GB.
const BUDGET_MIB: u64 = 128;

/// An Intray database (the layout since 2020) with one account, alice, and `items` text
/// items of 200 bytes each.
/// Runs a store call to its end in this (test) thread.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn large_intray_file(path: &Path, items: u32) {
    intray_file_of(path, ALICE, "alice", items, 0)
}

/// An Intray database with one account `name` of uuid `account` and `items` text items whose
/// uuids are numbered from `first`.
fn intray_file_of(path: &Path, account: &str, name: &str, items: u32, first: u32) {
    let mut db = Connection::open(path).expect("create");
    db.execute_batch(&IntrayLayout::Since2020.ddl()).expect("schema");
    let hash = match bcrypt_hash(ALICE_PASSWORD, 4, bcrypt::Version::TwoY) {
        rusqlite::types::Value::Text(t) => t,
        rusqlite::types::Value::Blob(b) => String::from_utf8(b).expect("hash"),
        other => panic!("{other:?}"),
    };
    db.execute(
        "INSERT INTO user(identifier, username, hashed_password, created_timestamp, last_login) \
         VALUES (?1, ?2, ?3, '2020-03-04T05:06:07', NULL)",
        params![id(account).as_bytes().to_vec(), name, hash.into_bytes()],
    )
    .expect("user");
    let tx = db.transaction().expect("transaction");
    {
        let mut insert = tx
            .prepare(
                "INSERT INTO intray_item(identifier, user_id, type, contents, created) \
                 VALUES (?1, ?2, X'74657874', ?3, '2021-01-02T03:04:05')",
            )
            .expect("prepare");
        for n in first..first + items {
            let mut uuid = [0u8; 16];
            uuid[..4].copy_from_slice(&n.to_be_bytes());
            uuid[6] = 0x40;
            uuid[8] = 0x80;
            let contents = format!("{n:0200}").into_bytes();
            insert
                .execute(params![uuid.to_vec(), id(account).as_bytes().to_vec(), contents])
                .expect("item");
        }
    }
    tx.commit().expect("commit");
}

fn import_command(file: &Path, data: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
    command
        .args(["import-intray", file.to_str().expect("path"), "--data-dir"])
        .arg(data)
        .env_remove("PIGEONHOLE_DATA_DIR")
        .env_remove("PIGEONHOLE_TEST_MOVE_IN_STOP_AFTER_BATCHES");
    command
}

/// The peak resident memory of process `pid` so far in KiB (`VmHWM`), if it is still there.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs the command to its end (within a deadline); answers whether it succeeded, its peak
/// RSS in KiB (the last `VmHWM` read while it ran: the peak is monotonic) and its output.
fn run_measured(mut command: Command) -> (bool, u64, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pigeonhole");
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).expect("read");
        let mut e = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut e).expect("read");
        s + &e
    });
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut peak = 0;
    let status = loop {
        if let Some(kib) = peak_kib(pid) {
            peak = peak.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "import-intray ran past its deadline");
        std::thread::sleep(Duration::from_millis(5)); // poll: samples the peak RSS until the exit, with a deadline
    };
    let text = out.join().expect("output");
    (status.success(), peak, text)
}

#[test]
fn a_large_intray_database_moves_in_within_the_memory_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("intray.sqlite3");
    let data = dir.path().join("data");
    let items = 200_000;
    large_intray_file(&file, items);
    let size = std::fs::metadata(&file).expect("file").len();
    let (ok, peak_kib, said) = run_measured(import_command(&file, &data));
    assert!(ok, "import-intray failed: {said}");
    assert!(
        said.contains(&format!("moved in 1 inbox account(s) with {items} item(s): alice")),
        "{said}"
    );
    eprintln!(
        "import-intray of a {} MiB file with {items} items: peak RSS {} MiB",
        size / (1024 * 1024),
        peak_kib / 1024
    );
    assert!(
        peak_kib < BUDGET_MIB * 1024,
        "peak RSS {} MiB over the budget of {BUDGET_MIB} MiB",
        peak_kib / 1024
    );
    let store = Store::open(&data).expect("open");
    let alice = block(store.inbox.accounts.by_username("alice"))
        .expect("read")
        .expect("alice");
    assert_eq!(block(store.inbox.count(alice.id)).expect("count"), items as u64);
}

#[test]
fn a_run_killed_mid_write_leaves_nothing_and_the_next_moves_everything_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("intray.sqlite3");
    let data = dir.path().join("data");
    let items = 20_000;
    large_intray_file(&file, items);

    // stops (and waits) once 3 batches are on disk; killed then
    super::kill_after_batches(import_command(&file, &data), 3, Duration::from_secs(120));
    {
        // part of the file is on disk; opening the data directory undoes it
        let store = Store::open(&data).expect("open");
        assert!(block(store.inbox.accounts.by_username("alice"))
            .expect("read")
            .is_none());
    }

    let (ok, _, said) = run_measured(import_command(&file, &data));
    assert!(ok, "the second run failed: {said}");
    assert!(said.contains(&format!("with {items} item(s): alice")), "{said}");
    let store = Store::open(&data).expect("open");
    let alice = block(store.inbox.accounts.by_username("alice"))
        .expect("read")
        .expect("alice");
    assert_eq!(block(store.inbox.count(alice.id)).expect("count"), items as u64);
}

#[test]
fn an_item_uuid_of_another_account_here_or_twice_in_the_file_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let alices = dir.path().join("alice.sqlite3");
    intray_file_of(&alices, ALICE, "alice", 3000, 0);
    let (ok, _, said) = run_measured(import_command(&alices, &data));
    assert!(ok, "{said}");

    // bob's last item has the uuid of one of alice's, found before anything is written
    let bobs = dir.path().join("bob.sqlite3");
    intray_file_of(&bobs, BOB, "bob", 2999, 3000);
    intray_file_of_more(&bobs, BOB, 2999);
    let (ok, _, said) = run_measured(import_command(&bobs, &data));
    assert!(!ok, "{said}");
    assert!(said.contains("is in use already; nothing was written"), "{said}");

    // a file with one item uuid twice (of bob and of an account the file has not)
    let twice = dir.path().join("twice.sqlite3");
    intray_file_of(&twice, BOB, "bob", 10, 5000);
    intray_file_of_more(&twice, CAROL, 5003);
    let (ok, _, said) = run_measured(import_command(&twice, &data));
    assert!(!ok, "{said}");
    assert!(said.contains("is in the file twice; nothing was written"), "{said}");

    let store = Store::open(&data).expect("open");
    assert!(block(store.inbox.accounts.by_username("bob")).expect("read").is_none());
    let alice = block(store.inbox.accounts.by_username("alice"))
        .expect("read")
        .expect("alice");
    assert_eq!(block(store.inbox.count(alice.id)).expect("count"), 3000);
}

/// Adds to the file at `path` one more item of `account` with the uuid numbered `n`.
fn intray_file_of_more(path: &Path, account: &str, n: u32) {
    let db = Connection::open(path).expect("open");
    let mut uuid = [0u8; 16];
    uuid[..4].copy_from_slice(&n.to_be_bytes());
    uuid[6] = 0x40;
    uuid[8] = 0x80;
    db.execute(
        "INSERT INTO intray_item(identifier, user_id, type, contents, created) \
         VALUES (?1, ?2, X'74657874', X'78', '2021-01-02T03:04:05')",
        params![uuid.to_vec(), id(account).as_bytes().to_vec()],
    )
    .expect("item");
}
