//! "Acknowledged means on stable storage" (spec decision 10), checked on the system calls of
//! the real binary: the server runs under `strace`, a client makes acknowledged writes one
//! after the other (small items, items large enough that sled would write them to separate
//! blob files were they not stored in chunks, a deletion), and the trace must show, before each answer, an
//! `fsync`/`fdatasync` of every database file written since and of every directory in which a
//! file was created or renamed. `sync_file_range` (what sled's `flush()` ends in) does not
//! count: it neither empties the drive's cache nor records a grown file's size.
//!
//! tests/durability/powercut.rs checks the consequence (nothing acknowledged is lost when unsynced data
//! is dropped); this test checks the rule itself, call by call.
//!
//! Needs `strace` (Debian package `strace`). Without it the test is skipped with a message,
//! unless `PIGEONHOLE_REQUIRE_STRACE=1` (set by `.ci/run`) makes that a failure.

use crate::common;

use common::b64;
use common::process::{Proc, Services};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

fn strace_available() -> bool {
    let found = std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("PIGEONHOLE_REQUIRE_STRACE").is_none(),
            "strace is required (PIGEONHOLE_REQUIRE_STRACE is set) but not installed"
        );
        eprintln!("SKIPPED: strace is not installed (apt-get install strace)");
    }
    found
}

/// One system call of the trace, at the moment it completed.
#[derive(Debug)]
enum Event {
    /// Data written to a file (`write`, `pwrite64`, `writev`).
    Wrote(String),
    /// A directory entry made (`openat` with `O_CREAT`, `rename`, `mkdir`): the directory.
    Entry(String),
    /// `fsync`/`fdatasync` of a file or directory.
    Synced(String),
    /// An HTTP answer written to a socket, with the text strace shows of it.
    Answered(String),
}

/// The path strace's `-y` prints after a descriptor: `12</tmp/x/db/db>` → `/tmp/x/db/db`.
fn fd_path(args: &str) -> Option<&str> {
    let start = args.find('<')? + 1;
    let end = start + args[start..].find('>')?;
    Some(&args[start..end])
}

/// The first quoted string argument (`openat(AT_FDCWD, "/x/y", …)` → `/x/y`).
fn quoted(args: &str) -> Option<&str> {
    let start = args.find('"')? + 1;
    let end = start + args[start..].find('"')?;
    Some(&args[start..end])
}

fn parent(path: &str) -> String {
    Path::new(path)
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// Parses `strace -f -y -qq -s N` output into events in completion order (a call split into
/// `<unfinished ...>` and `<... resumed>` counts where it resumed).
fn parse(trace: &str) -> Vec<Event> {
    let mut unfinished: HashMap<&str, String> = HashMap::new();
    let mut events = Vec::new();
    for line in trace.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            unfinished.insert(pid, head.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some(head) = unfinished.remove(pid) else { continue };
            let tail = tail.split_once(" resumed>").map_or("", |(_, t)| t);
            format!("{head}{tail}")
        } else {
            rest.to_owned()
        };
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        if call.trim_end().ends_with("= -1") || call.contains(" = -1 ") {
            continue; // failed calls change nothing
        }
        let event = match name {
            "write" | "pwrite64" | "writev" => match fd_path(args) {
                Some(p) if p.starts_with("socket:") => match args.contains("HTTP/1.1 ") {
                    true => Event::Answered(args.to_owned()),
                    false => continue,
                },
                Some(p) => Event::Wrote(p.to_owned()),
                None => continue,
            },
            "openat" if args.contains("O_CREAT") => match quoted(args) {
                Some(p) => Event::Entry(parent(p)),
                None => continue,
            },
            "rename" | "mkdir" => match quoted(args) {
                Some(p) => {
                    // for a rename, the new name's directory (the second quoted string)
                    let second = args.splitn(4, '"').nth(3).and_then(quoted).unwrap_or(p);
                    Event::Entry(parent(second))
                }
                None => continue,
            },
            "fsync" | "fdatasync" => match fd_path(args) {
                Some(p) => Event::Synced(p.to_owned()),
                None => continue,
            },
            _ => continue,
        };
        events.push(event);
    }
    events
}

/// For each answer that contains one of `acknowledged`, the files and directories under
/// `db` written (or given a new entry) before it and not synced since.
fn unsynced_before_answers(events: &[Event], db: &str, acknowledged: &[String]) -> Vec<(String, Vec<String>)> {
    let mut dirty: Vec<String> = Vec::new();
    let mut problems = Vec::new();
    for e in events {
        match e {
            Event::Wrote(p) | Event::Entry(p) if p.starts_with(db) && !dirty.contains(p) => dirty.push(p.clone()),
            Event::Synced(p) => dirty.retain(|d| d != p),
            Event::Answered(text) => {
                if let Some(ack) = acknowledged.iter().find(|a| text.contains(a.as_str())) {
                    if !dirty.is_empty() {
                        problems.push((ack.clone(), dirty.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    problems
}

/// The process strace started (its only child).
fn traced_pid(strace: u32) -> libc::pid_t {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{strace}/task/{strace}/children")).unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().expect("a pid");
        }
        assert!(Instant::now() < deadline, "strace started no process");
        std::thread::sleep(Duration::from_millis(10)); // poll
    }
}

#[tokio::test]
#[expect(unsafe_code, reason = "std has no safe kill(2) for a process that is not our child")]
async fn every_acknowledged_write_is_synced_before_its_answer() {
    if !strace_available() {
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let trace_file = logs.path().join("trace");
    let trace_arg = trace_file.display().to_string();
    let wrapper = [
        "strace",
        "-f",
        "-y",
        "-qq",
        "-s",
        "200",
        "-e",
        "trace=openat,rename,mkdir,write,pwrite64,writev,fsync,fdatasync,sync_file_range",
        "-o",
        trace_arg.as_str(),
    ];
    let mut server = Proc::start_under(&wrapper, data.path(), logs.path(), Services::Both, &[]).await;
    let api = server.api.clone();
    api.register("alice", "pw").await.expect_empty(204);
    let alice = api.login_ok("alice", "pw").await;

    // Acknowledged writes, one at a time: each answer carries the id it acknowledges.
    let mut acknowledged = Vec::new();
    for n in 0..12 {
        // every third item is large (sled would put it in a blob file of its own)
        let size = if n % 3 == 2 { 200_000 } else { 20 };
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + n) as u8).collect();
        let r = api
            .post("/inbox/item", &alice, &json!({"type": "text", "data": b64(&data)}))
            .await;
        let id: String = serde_json::from_value(r.expect_json(200)).expect("a UUID string");
        acknowledged.push(id);
    }
    let deleted = acknowledged.remove(0);
    api.delete(&format!("/inbox/item/{deleted}"), &alice)
        .await
        .expect_empty(200);
    let after_delete = api
        .post("/inbox/item", &alice, &common::text_item("after the deletion"))
        .await
        .expect_json(200);
    let after_delete: String = serde_json::from_value(after_delete).expect("a UUID string");
    acknowledged.push(after_delete);

    let strace_pid = server.child.id();
    let pid = traced_pid(strace_pid);
    // SAFETY: kill(2) on the traced server process has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert!(server.wait_exit().await.success(), "{}", server.log_text());

    let trace = std::fs::read_to_string(&trace_file).expect("read the trace");
    let events = parse(&trace);
    let db = data.path().join("db").display().to_string();
    let answers = events
        .iter()
        .filter(|e| matches!(e, Event::Answered(t) if acknowledged.iter().any(|a| t.contains(a.as_str()))))
        .count();
    assert_eq!(answers, acknowledged.len(), "every acknowledgement is in the trace");
    // large values are stored in chunks (src/store/sled/chunks.rs): sled never writes a blob file
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Wrote(p) if p.contains("/db/blobs/"))),
        "a value went to one of sled's blob files"
    );
    let problems = unsynced_before_answers(&events, &db, &acknowledged);
    assert!(
        problems.is_empty(),
        "answers sent before these database files were synced: {problems:#?}"
    );
}

#[test]
fn the_trace_check_finds_a_write_answered_before_its_sync() {
    let trace = "\
10 openat(AT_FDCWD</>, \"/d/db/blobs/7\", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = 5</d/db/blobs/7>
10 write(5</d/db/blobs/7>, \"x\", 1) = 1
11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1
11 sync_file_range(4</d/db/db>, 0, 1, SYNC_FILE_RANGE_WRITE) = 0
12 writev(9<socket:[1]>, [{iov_base=\"HTTP/1.1 200 OK\\r\\n\", iov_len=17}, {iov_base=\"\\\"aaaa\\\"\", iov_len=6}], 2) = 23
13 fsync(6</d/db/blobs/7> <unfinished ...>
14 fdatasync(4</d/db/db>) = 0
13 <... fsync resumed>) = 0
13 fsync(6</d/db/blobs>) = 0
12 writev(9<socket:[1]>, [{iov_base=\"HTTP/1.1 200 OK\\r\\n\", iov_len=17}, {iov_base=\"\\\"bbbb\\\"\", iov_len=6}], 2) = 23
";
    let events = parse(trace);
    let problems = unsynced_before_answers(&events, "/d/db", &["aaaa".into(), "bbbb".into()]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].0, "aaaa");
    assert_eq!(problems[0].1, ["/d/db/blobs", "/d/db/blobs/7", "/d/db/db"]);
}
