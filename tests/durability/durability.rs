//! "Acknowledged means on stable storage" (spec decision 10), checked on the system calls of
//! the real binary: the server runs under `strace`, a client makes acknowledged writes one
//! after the other (small items, items large enough that sled would write them to separate
//! blob files were they not stored in chunks, a deletion), and the trace must show the rule
//! of the sled store's write-ahead journal (src/store/sled/writer.rs):
//!
//! * before each answer, the journal `db/pigeonhole-wal` was written and synced
//!   (`fdatasync`) since the previous answer, nothing written to it is unsynced, and its
//!   name in `db/` was made durable (the directory synced after its creation), or else a
//!   checkpoint made everything durable (below);
//! * before the journal is emptied (a checkpoint: the next generation written into its
//!   header, a `pwrite64` below offset 4096; the file is preallocated and written in
//!   place, never truncated), every other file of the
//!   database written since the previous checkpoint and every directory in which a file was
//!   created or renamed since was synced (`fsync`/`fdatasync`) after the journal's last
//!   record was (sled's own threads may write meanwhile, on their own: that is not data a
//!   journal record stands for).
//!
//! `sync_file_range` (what sled's `flush()` ends in) does not count: it neither empties the
//! drive's cache nor records a grown file's size. A second test counts the syncs: one per
//! acknowledged write at one client, plus the checkpoints' and sled's own, few.
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
    /// A directory entry made (`openat` with `O_CREAT`, `rename`, `mkdir`): the directory
    /// and the new name's path.
    Entry { dir: String, path: String },
    /// `fsync`/`fdatasync` of a file or directory.
    Synced(String),
    /// `sync_file_range` of a file (not a sync: counted only).
    RangeWritten(String),
    /// `ftruncate` of a file, or a write into the header of the journal (`pigeonhole-wal`,
    /// below offset 4096: its generation bumped): the file emptied.
    Emptied(String),
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

/// The offset of a `pwrite64` (its last argument: `…, 20, 512) = 20` → 512).
fn pwrite_offset(args: &str) -> u64 {
    let call = args.rsplit_once(')').map_or(args, |(call, _)| call);
    call.rsplit(',')
        .next()
        .and_then(|o| o.trim().parse().ok())
        .unwrap_or(u64::MAX)
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
                Some(p) if name == "pwrite64" && p.ends_with("/pigeonhole-wal") && pwrite_offset(args) < 4096 => {
                    Event::Emptied(p.to_owned())
                }
                Some(p) => Event::Wrote(p.to_owned()),
                None => continue,
            },
            "openat" if args.contains("O_CREAT") => match quoted(args) {
                Some(p) => Event::Entry {
                    dir: parent(p),
                    path: p.to_owned(),
                },
                None => continue,
            },
            "rename" | "mkdir" => match quoted(args) {
                Some(p) => {
                    // for a rename, the new name's directory (the second quoted string)
                    let second = args.splitn(4, '"').nth(3).and_then(quoted).unwrap_or(p);
                    Event::Entry {
                        dir: parent(second),
                        path: second.to_owned(),
                    }
                }
                None => continue,
            },
            "fsync" | "fdatasync" => match fd_path(args) {
                Some(p) => Event::Synced(p.to_owned()),
                None => continue,
            },
            "sync_file_range" => match fd_path(args) {
                Some(p) => Event::RangeWritten(p.to_owned()),
                None => continue,
            },
            "ftruncate" => match fd_path(args) {
                Some(p) => Event::Emptied(p.to_owned()),
                None => continue,
            },
            _ => continue,
        };
        events.push(event);
    }
    events
}

/// The journal of the database directory `db`.
fn journal_of(db: &str) -> String {
    format!("{db}/pigeonhole-wal")
}

/// Where the trace breaks the journal's rule (see the module comment) for the database
/// directory `db`: answers that contain one of `acknowledged` sent before their write was
/// durable, and emptyings of the journal before the rest of the database was synced.
fn durability_problems(events: &[Event], db: &str, acknowledged: &[String]) -> Vec<String> {
    let journal = journal_of(db);
    // per file or directory of the database but the journal, since the last checkpoint:
    // the event of its last write before the journal's last record, whether it was written
    // since, and the event of its last sync
    #[derive(Default)]
    struct File {
        written_before_record: Option<usize>,
        written_since_record: bool,
        synced: Option<usize>,
    }
    let mut files: HashMap<String, File> = HashMap::new();
    // the event of the journal's last record sync
    let mut record = 0;
    let mut journal_dirty = false;
    let mut journal_name_dirty = false;
    // a write became durable since the last acknowledged answer
    let mut durable_since_answer = false;
    let mut problems = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Wrote(p) if *p == journal => journal_dirty = true,
            Event::Entry { path, .. } if *path == journal => journal_name_dirty = true,
            Event::Wrote(p) | Event::Entry { dir: p, .. } if p.starts_with(db) => {
                files.entry(p.clone()).or_default().written_since_record = true;
            }
            // (the journal's creation, its header synced before its name, is no record)
            Event::Synced(p) if *p == journal => {
                if journal_dirty && !journal_name_dirty {
                    durable_since_answer = true;
                    record = i;
                    for f in files.values_mut() {
                        if std::mem::take(&mut f.written_since_record) {
                            f.written_before_record = Some(i);
                        }
                    }
                }
                journal_dirty = false;
            }
            Event::Synced(p) => {
                if *p == db {
                    journal_name_dirty = false;
                }
                if let Some(f) = files.get_mut(p) {
                    f.synced = Some(i);
                }
            }
            Event::Emptied(p) if *p == journal => {
                let synced_after = |f: &File, at: usize| f.synced.is_some_and(|s| s > at);
                let mut unsynced: Vec<&String> = files
                    .iter()
                    .filter(|(_, f)| {
                        let before = f.written_before_record.is_some_and(|w| !synced_after(f, w));
                        let since = f.written_since_record && !synced_after(f, record);
                        before || since
                    })
                    .map(|(p, _)| p)
                    .collect();
                if unsynced.is_empty() {
                    durable_since_answer = true; // a checkpoint: everything is durable
                } else {
                    unsynced.sort();
                    problems.push(format!(
                        "the journal was emptied before these were synced: {unsynced:?}"
                    ));
                }
                files.clear();
            }
            Event::Answered(text) => {
                if let Some(ack) = acknowledged.iter().find(|a| text.contains(a.as_str())) {
                    if journal_dirty || journal_name_dirty || !durable_since_answer {
                        problems.push(format!(
                            "{ack} answered before its write was durable (journal written since its last sync: \
                             {journal_dirty}, its name not synced: {journal_name_dirty}, nothing made durable \
                             since the previous answer: {})",
                            !durable_since_answer
                        ));
                    }
                    durable_since_answer = false;
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

/// The server under strace (tracing `calls`, with file names), with alice registered and
/// logged in.
struct Traced {
    server: Proc,
    data: tempfile::TempDir,
    _logs: tempfile::TempDir,
    trace_file: std::path::PathBuf,
}

impl Traced {
    async fn start(calls: &str) -> (Traced, common::Auth) {
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
            calls,
            "-o",
            trace_arg.as_str(),
        ];
        let server = Proc::start_under(&wrapper, data.path(), logs.path(), Services::Both, &[]).await;
        let api = server.api.clone();
        api.register("alice", "pw").await.expect_empty(204);
        let alice = api.login_ok("alice", "pw").await;
        let traced = Traced {
            server,
            data,
            _logs: logs,
            trace_file,
        };
        (traced, alice)
    }

    /// Stops the server (SIGTERM to the traced process, a clean exit expected): its data
    /// directory and the whole trace.
    #[expect(unsafe_code, reason = "std has no safe kill(2) for a process that is not our child")]
    async fn stop(mut self) -> (tempfile::TempDir, String) {
        let pid = traced_pid(self.server.child.id());
        // SAFETY: kill(2) on the traced server process has no memory-safety preconditions.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        assert!(self.server.wait_exit().await.success(), "{}", self.server.log_text());
        let trace = std::fs::read_to_string(&self.trace_file).expect("read the trace");
        (self.data, trace)
    }
}

#[tokio::test]
async fn every_acknowledged_write_is_synced_before_its_answer() {
    if !strace_available() {
        return;
    }
    let (traced, alice) =
        Traced::start("trace=openat,rename,mkdir,write,pwrite64,writev,fsync,fdatasync,sync_file_range,ftruncate")
            .await;
    let api = traced.server.api.clone();

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

    let (data, trace) = traced.stop().await;
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
    let problems = durability_problems(&events, &db, &acknowledged);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_trace_check_finds_writes_answered_before_their_sync() {
    let answer = |pid: u32, id: &str| {
        format!(
            "{pid} writev(9<socket:[1]>, [{{iov_base=\"HTTP/1.1 200 OK\\r\\n\", iov_len=17}}, {{iov_base=\"\\\"{id}\\\"\", iov_len=6}}], 2) = 23\n"
        )
    };
    let trace = [
        // the journal created, its name not yet synced
        "10 openat(AT_FDCWD</>, \"/d/db/pigeonhole-wal\", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = 5</d/db/pigeonhole-wal>\n",
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"r\", 1, 4096) = 1\n",
        "10 fdatasync(5</d/db/pigeonhole-wal>) = 0\n",
        &answer(12, "aaaa"), // 1: the journal's name is not durable
        "10 fsync(6</d/db>) = 0\n",
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"r\", 1, 4097) = 1\n",
        "11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1\n",
        "11 sync_file_range(4</d/db/db>, 0, 1, SYNC_FILE_RANGE_WRITE) = 0\n",
        "10 fdatasync(5</d/db/pigeonhole-wal> <unfinished ...>\n",
        "14 fsync(7</d/db/db>) = 0\n",
        "10 <... fdatasync resumed>) = 0\n",
        &answer(12, "bbbb"), // fine: sled's own file need not be synced before an answer
        &answer(12, "cccc"), // 2: nothing was made durable for it
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"r\", 1, 4098) = 1\n",
        &answer(12, "dddd"), // 3: its record is not synced
        "10 fdatasync(5</d/db/pigeonhole-wal>) = 0\n",
        "11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1\n",
        "13 openat(AT_FDCWD</>, \"/d/db/snap.1\", O_WRONLY|O_CREAT|O_EXCL|O_CLOEXEC, 0666) = 8</d/db/snap.1>\n",
        "10 fdatasync(4</d/db/db>) = 0\n",
        "10 fsync(8</d/db/snap.1>) = 0\n",
        "10 ftruncate(5</d/db/pigeonhole-wal>, 8) = 0\n", // 4: before the directory's sync
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"r\", 1, 4096) = 1\n",
        "10 fdatasync(5</d/db/pigeonhole-wal>) = 0\n",
        "11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1\n",
        "10 fdatasync(4</d/db/db>) = 0\n",
        "11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1\n", // sled's own, after the sync: fine
        "10 ftruncate(5</d/db/pigeonhole-wal>, 8) = 0\n",
        &answer(12, "eeee"), // fine: the checkpoint made it durable
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"r\", 1, 4096) = 1\n",
        "10 fdatasync(5</d/db/pigeonhole-wal>) = 0\n",
        "11 pwrite64(4</d/db/db>, \"y\", 1, 0) = 1\n",
        "10 pwrite64(5</d/db/pigeonhole-wal>, \"PHWAL02\\n\\3\", 20, 512) = 20\n", // 5: sled's file not synced since
    ]
    .concat();
    let events = parse(&trace);
    let ids: Vec<String> = ["aaaa", "bbbb", "cccc", "dddd", "eeee"].map(String::from).into();
    let problems = durability_problems(&events, "/d/db", &ids);
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(problems[0].starts_with("aaaa") && problems[0].contains("its name not synced: true"));
    assert!(problems[1].starts_with("cccc") && problems[1].contains("since the previous answer: true"));
    assert!(problems[2].starts_with("dddd") && problems[2].contains("last sync: true"));
    assert!(
        problems[3].contains("emptied") && problems[3].contains("/d/db\""),
        "{}",
        problems[3]
    );
    assert!(
        problems[4].contains("emptied") && problems[4].contains("/d/db/db"),
        "{}",
        problems[4]
    );
}

/// What one client's sequential writes cost in syncs, counted in the trace of the real
/// server (issue 31): exactly one `fdatasync` of the journal per acknowledged write (each
/// answered before the next is sent, so each is a cycle of its own), apart from the
/// checkpoints (sled's flush, its syncs, the journal emptied) and sled's own background
/// `fsync`, which together stay under a tenth of the writes.
#[tokio::test]
async fn one_sync_per_acknowledged_write_at_one_client() {
    if !strace_available() {
        return;
    }
    const WRITES: usize = 300;
    let (traced, alice) =
        Traced::start("trace=openat,write,pwrite64,writev,fsync,fdatasync,sync_file_range,ftruncate").await;
    let api = traced.server.api.clone();
    let mut acknowledged = Vec::new();
    for n in 0..WRITES {
        let r = api
            .post("/inbox/item", &alice, &common::text_item(&format!("item {n}")))
            .await;
        let id: String = serde_json::from_value(r.expect_json(200)).expect("a UUID string");
        acknowledged.push(id);
    }
    let (data, trace) = traced.stop().await;
    let events = parse(&trace);
    let db = data.path().join("db").display().to_string();
    let journal = journal_of(&db);
    let is_ack = |e: &Event| matches!(e, Event::Answered(t) if acknowledged.iter().any(|a| t.contains(a.as_str())));
    let first = events.iter().position(is_ack).expect("an acknowledgement");
    // from the answer before the first write (the login's) to the last acknowledgement
    let start = events[..first]
        .iter()
        .rposition(|e| matches!(e, Event::Answered(_)))
        .expect("the login's answer");
    let end = events.iter().rposition(is_ack).expect("an acknowledgement");
    let (mut per_write, mut checkpoints, mut other) = (0usize, 0usize, Vec::new());
    let (mut journal_written, mut in_interval, mut intervals_off) = (false, 0usize, Vec::new());
    for e in &events[start + 1..=end] {
        match e {
            Event::Wrote(p) if *p == journal => journal_written = true,
            Event::Synced(p) if *p == journal && journal_written => {
                per_write += 1;
                in_interval += 1;
                journal_written = false;
            }
            Event::Emptied(p) if *p == journal => checkpoints += 1,
            Event::Synced(p) | Event::RangeWritten(p) => other.push(p.clone()),
            e if is_ack(e) => {
                if in_interval != 1 {
                    intervals_off.push(in_interval);
                }
                in_interval = 0;
            }
            _ => {}
        }
    }
    let total = per_write + other.len();
    eprintln!(
        "{WRITES} acknowledged writes: {per_write} journal syncs, {checkpoints} checkpoints, {} other syncs \
         ({total} in all: {:.3} per write)",
        other.len(),
        total as f64 / WRITES as f64
    );
    // a write made durable by a checkpoint instead of its record has no journal sync
    assert!(
        intervals_off.iter().all(|n| *n == 0) && intervals_off.len() <= checkpoints,
        "writes without exactly one journal sync: {intervals_off:?} ({checkpoints} checkpoints)"
    );
    assert_eq!(per_write + intervals_off.len(), WRITES);
    assert!(
        total * 10 <= WRITES * 11,
        "{total} syncs for {WRITES} writes; beyond the journal's: {other:?}"
    );
}
