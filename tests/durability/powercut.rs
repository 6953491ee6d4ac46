//! Power cuts (spec decision 10): after a power cut at any moment, every write the server
//! acknowledged is there on restart, with its exact data, and the database opens cleanly.
//!
//! The server runs on a FUSE file system that keeps, next to what programs see, what a disk
//! would still hold after losing power: each file as of its last `fsync`/`fdatasync`, each
//! directory's names as of its last `fsync` (see `common/powercut_fs.rs` for the model).
//! While several clients add items, at a random moment the test cuts the power: in one
//! critical section it freezes that durable state and kills the server with SIGKILL. It then
//! writes only the durable state into a fresh real directory, starts the server on it, and
//! checks every acknowledged item. The next round mounts that directory again and goes on,
//! so items acknowledged before earlier cuts must survive the later ones too.
//!
//! The simulation needs `/dev/fuse` and the right to mount (root or CAP_SYS_ADMIN). Without
//! them the tests fail with a message saying so, unless `PIGEONHOLE_SKIP_POWERCUT=1`.
//! `PIGEONHOLE_POWERCUT_CUTS=N` sets the number of cuts per run (default 4);
//! `PIGEONHOLE_POWERCUT_KEEP=1` keeps a copy of each cut's durable state and prints where.

use crate::common;
use crate::powercut_fs;

use base64::Engine;
use common::process::{Proc, Services};
use common::{Api, Auth, Method};
use powercut_fs::{Cut, PowerCutFs};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One kind of load.
struct Workload {
    name: &'static str,
    /// Concurrent clients adding items.
    writers: usize,
    /// Bytes of data per item.
    item_bytes: usize,
    /// Acknowledged items to wait for in a round before the cut may come.
    min_acks: usize,
    /// The cut comes at a random moment up to this long after `min_acks`.
    max_extra: Duration,
}

const SMALL: Workload = Workload {
    name: "small text items",
    writers: 4,
    item_bytes: 40,
    min_acks: 20,
    max_extra: Duration::from_millis(1500),
};

/// Values over sled's blob threshold (~128 KiB) go to files of their own under `db/blobs/`.
const LARGE: Workload = Workload {
    name: "200 KB items",
    writers: 4,
    item_bytes: 200_000,
    min_acks: 4,
    max_extra: Duration::from_millis(1500),
};

/// What one run measured.
#[derive(Default)]
struct Report {
    cuts: usize,
    acknowledged: usize,
    lost: usize,
    /// One line per cut.
    lines: Vec<String>,
    /// Cuts after which the database did not open or the account was gone.
    failures: Vec<String>,
}

// one FUSE mount at a time, shared with the other FUSE module of this program (main.rs)
use crate::ONE_AT_A_TIME;

fn cuts_per_run() -> usize {
    std::env::var("PIGEONHOLE_POWERCUT_CUTS")
        .ok()
        .map(|v| v.parse().expect("PIGEONHOLE_POWERCUT_CUTS is a number"))
        .unwrap_or(4)
}

/// `false` when the simulation is to be skipped (`PIGEONHOLE_SKIP_POWERCUT=1`); otherwise
/// mounts and unmounts a power-cut file system once and panics with the reason if it
/// cannot.
#[expect(unsafe_code, reason = "std has no safe getuid(2)")]
fn simulation_available() -> bool {
    if std::env::var("PIGEONHOLE_SKIP_POWERCUT").is_ok_and(|v| v == "1") {
        eprintln!("PIGEONHOLE_SKIP_POWERCUT=1: the power-cut simulation is skipped");
        return false;
    }
    let dir = tempfile::tempdir().unwrap();
    match PowerCutFs::mount(dir.path(), None) {
        Ok(fs) => {
            fs.unmount();
            true
        }
        Err(e) => panic!(
            "the power-cut simulation cannot run: mounting a FUSE file system failed: {e}.\n\
             It needs /dev/fuse (exists: {}) and the right to mount (root or CAP_SYS_ADMIN; \
             running as uid {}). Set PIGEONHOLE_SKIP_POWERCUT=1 to skip it knowingly.",
            Path::new("/dev/fuse").exists(),
            // SAFETY: getuid has no preconditions.
            unsafe { libc::getuid() }
        ),
    }
}

/// A small random generator (xorshift), seeded once per run and printed.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let mut seed = [0u8; 8];
        getrandom::getrandom(&mut seed).expect("random seed");
        let seed = u64::from_le_bytes(seed) | 1;
        eprintln!("random seed {seed:#x}");
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The data of item `n` of writer `t` in round `round`: unique, `bytes` long.
fn item_data(round: usize, t: usize, n: u64, bytes: usize) -> Vec<u8> {
    let head = format!("round {round} writer {t} item {n} ");
    head.bytes()
        .chain((0..).map(|i: u64| b'a' + ((i * 7 + n) % 26) as u8))
        .take(bytes.max(head.len()))
        .collect()
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Acknowledged items: (UUID, data).
type Acked = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Keeps adding items from `w.writers` concurrent clients until told to stop or the server
/// is gone; every item answered 200 lands in `acked` as (UUID, data).
fn spawn_writers(
    api: &Api,
    auth: &Auth,
    w: &Workload,
    round: usize,
    stop: Arc<AtomicBool>,
    acked: Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..w.writers)
        .map(|t| {
            let (api, auth, stop, acked) = (api.clone(), auth.clone(), stop.clone(), acked.clone());
            let bytes = w.item_bytes;
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let data = item_data(round, t, n, bytes);
                    let rb = api
                        .request(Method::POST, "/inbox/item", &auth)
                        .json(&json!({"type": "text", "data": b64(&data)}));
                    let Ok(response) = rb.send().await else {
                        return; // the server is gone
                    };
                    if response.status().as_u16() != 200 {
                        continue; // not acknowledged (a failed sync answers 500)
                    }
                    let Ok(body) = response.bytes().await else {
                        return; // killed while the answer was on its way: not acknowledged
                    };
                    let uuid: String = serde_json::from_slice(&body).expect("add answers a UUID string");
                    acked.lock().unwrap().push((uuid, data));
                }
            })
        })
        .collect()
}

/// Logs `alice` in, registering her first if she does not exist.
async fn alice(api: &Api) -> Auth {
    let r = api.login("alice", "alice-pw").await;
    if r.status == 204 {
        return Auth::Bearer(common::token_of(&r));
    }
    api.register("alice", "alice-pw").await.expect_empty(204);
    api.login_ok("alice", "alice-pw").await
}

/// Every item of the account, UUID -> data.
async fn items(api: &Api, auth: &Auth) -> HashMap<String, Vec<u8>> {
    let v = api.get("/inbox/items", auth).await.expect_json(200);
    v.as_array()
        .expect("items is an array")
        .iter()
        .map(|item| {
            let id = item["id"].as_str().expect("item id").to_owned();
            let data = base64::engine::general_purpose::STANDARD
                .decode(item["contents"]["data"].as_str().expect("item data"))
                .expect("item data is base64");
            (id, data)
        })
        .collect()
}

/// Runs `cuts` rounds of: mount, start, write, cut, restart on the durable state, check.
async fn run(w: &Workload, cuts: usize) -> Report {
    let started = Instant::now();
    let mut rng = Rng::new();
    let logs = tempfile::tempdir().unwrap();
    let mut report = Report::default();
    // what the disk holds between rounds (none before the first)
    let mut disk: Option<tempfile::TempDir> = None;
    // acknowledged items that every later restart must show
    let mut expected: Vec<(String, Vec<u8>)> = Vec::new();

    for round in 0..cuts {
        // the server, on a power-cut file system holding the disk of the last round
        let mnt = tempfile::tempdir().unwrap();
        let fs = PowerCutFs::mount(mnt.path(), disk.as_ref().map(|d| d.path())).expect("mount");
        let mut server = Proc::start(mnt.path(), logs.path(), Services::Both, &[]).await;
        let auth = alice(&server.api).await;

        // clients write; the cut comes at a random moment once some items were acknowledged
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Acked = Arc::new(Mutex::new(Vec::new()));
        let writers = spawn_writers(&server.api, &auth, w, round, stop.clone(), acked.clone());
        let round_start = Instant::now();
        while acked.lock().unwrap().len() < w.min_acks {
            assert!(
                round_start.elapsed() < Duration::from_secs(60),
                "round {round}: fewer than {} items acknowledged in a minute:\n{}",
                w.min_acks,
                server.log_text()
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // poll
        }
        tokio::time::sleep(Duration::from_millis(rng.below(w.max_extra.as_millis() as u64))).await;
        let cut: Cut = fs.cut(|| server.kill_9());
        server.wait_exit().await;
        stop.store(true, Ordering::SeqCst);
        for writer in writers {
            writer.await.expect("writer task");
        }
        fs.unmount();
        let new: Vec<(String, Vec<u8>)> = std::mem::take(&mut *acked.lock().unwrap());
        report.cuts += 1;
        report.acknowledged += new.len();
        expected.extend(new.iter().cloned());

        // restart on only what was durable, in a real directory
        let after = tempfile::tempdir().unwrap();
        cut.durable.materialise(after.path()).expect("write the durable state");
        if std::env::var("PIGEONHOLE_POWERCUT_KEEP").is_ok_and(|v| v == "1") {
            // a copy the restart does not touch, for a look at what survived
            let kept = tempfile::tempdir().unwrap().keep();
            cut.durable.materialise(&kept).expect("write the durable state");
            eprintln!("cut {round}: the durable state is kept in {}", kept.display());
        }
        let losses = cut.durable.losses_against(&cut.visible);
        let s = cut.stats;
        let fs_line = format!(
            "file system: {} writes, {} fsync, {} fdatasync, {} O_DSYNC writes, {} directory fsync; \
             at the cut {} files or names not durable",
            s.writes,
            s.fsyncs,
            s.fdatasyncs,
            s.dsync_writes,
            s.dir_fsyncs,
            losses.len()
        );
        let mut server = match Proc::try_start(after.path(), logs.path(), Services::Both, &[]).await {
            Ok(server) => server,
            Err(log) => {
                report.lost += expected.len();
                // the log's error lines (a panic's message, the server's last word)
                let why: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("panicked") || l.contains("failed"))
                    .take(3)
                    .collect();
                report
                    .failures
                    .push(format!("cut {round}: the database did not open: {}", why.join(" / ")));
                report.lines.push(format!(
                    "cut {round}: {} acknowledged, the database did not open; {fs_line}",
                    new.len()
                ));
                break;
            }
        };
        let login = server.api.login("alice", "alice-pw").await;
        let found = if login.status == 204 {
            items(&server.api, &Auth::Bearer(common::token_of(&login))).await
        } else {
            report.failures.push(format!("cut {round}: the account was lost"));
            HashMap::new()
        };
        let before = expected.len();
        let mut corrupt = 0;
        expected.retain(|(id, data)| match found.get(id) {
            Some(d) if d == data => true,
            Some(_) => {
                corrupt += 1;
                false
            }
            None => false,
        });
        let lost = before - expected.len();
        report.lost += lost;
        let kept: HashSet<&String> = expected.iter().map(|(id, _)| id).collect();
        let lost_new = new.iter().filter(|(id, _)| !kept.contains(id)).count();
        report.lines.push(format!(
            "cut {round}: {} acknowledged this round, {lost} lost ({lost_new} of this round, {} \
             of earlier ones{}); {fs_line}{}",
            new.len(),
            lost - lost_new,
            if corrupt > 0 {
                format!(", {corrupt} with wrong data")
            } else {
                String::new()
            },
            if losses.is_empty() {
                String::new()
            } else {
                format!(
                    ":\n      {}",
                    losses.iter().take(8).cloned().collect::<Vec<_>>().join("\n      ")
                )
            }
        ));
        // the recovered database takes writes (the account is registered again if lost)
        let auth = alice(&server.api).await;
        server
            .api
            .post(
                "/inbox/item",
                &auth,
                &json!({"type": "text", "data": b64(b"after the cut")}),
            )
            .await
            .expect_json(200);

        // a clean stop; the next round starts from this directory
        server.signal(libc::SIGTERM);
        let status = server.wait_exit().await;
        assert!(
            status.success(),
            "clean stop after cut {round}: {status:?}\n{}",
            server.log_text()
        );
        disk = Some(after);
    }
    eprintln!(
        "power cuts, {}: {} cuts, {} acknowledged, {} lost ({:.1} s)\n  {}",
        w.name,
        report.cuts,
        report.acknowledged,
        report.lost,
        started.elapsed().as_secs_f64(),
        report.lines.join("\n  ")
    );
    report
}

fn assert_nothing_lost(w: &Workload, r: &Report) {
    assert!(
        r.lost == 0 && r.failures.is_empty(),
        "power cuts, {}: {} of {} acknowledged items lost in {} cuts{}\n  {}",
        w.name,
        r.lost,
        r.acknowledged,
        r.cuts,
        if r.failures.is_empty() {
            String::new()
        } else {
            format!("; {}", r.failures.join("; "))
        },
        r.lines.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_small_items_survive_power_cuts() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !simulation_available() {
        return;
    }
    let report = run(&SMALL, cuts_per_run()).await;
    assert_nothing_lost(&SMALL, &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_large_items_survive_power_cuts() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !simulation_available() {
        return;
    }
    let report = run(&LARGE, cuts_per_run()).await;
    assert_nothing_lost(&LARGE, &report);
}

/// The file system's model itself, through real system calls: only `fsync`/`fdatasync`
/// make contents durable (not `sync_file_range`, not `close`), and a new name only once its
/// directory is fsynced.
#[test]
#[expect(unsafe_code, reason = "std has no safe sync_file_range(2)")]
fn the_file_system_keeps_only_what_was_synced() {
    let _one = ONE_AT_A_TIME.blocking_lock();
    if !simulation_available() {
        return;
    }
    let initial = tempfile::tempdir().unwrap();
    std::fs::create_dir(initial.path().join("d")).unwrap();
    std::fs::write(initial.path().join("d/old"), b"old").unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let fs = PowerCutFs::mount(mnt.path(), Some(initial.path())).expect("mount");
    let root = mnt.path();
    let open_dir = |p: &Path| std::fs::File::open(p).unwrap();

    // the initial image is durable; a rewrite without a sync is not
    assert_eq!(std::fs::read(root.join("d/old")).unwrap(), b"old");
    std::fs::write(root.join("d/old"), b"rewritten, never synced").unwrap();
    // synced file, name made durable by fsyncing the directory
    let mut f = std::fs::File::create(root.join("d/synced")).unwrap();
    std::io::Write::write_all(&mut f, b"synced").unwrap();
    f.sync_data().unwrap();
    open_dir(&root.join("d")).sync_all().unwrap();
    std::io::Write::write_all(&mut f, b" then more").unwrap(); // after the sync: lost
                                                               // sync_file_range (sled 0.34's flush) is not a sync
    let g = std::fs::File::create(root.join("d/range")).unwrap();
    std::io::Write::write_all(&mut &g, b"only sync_file_range").unwrap();
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a valid descriptor; the call has no memory arguments.
    assert_eq!(unsafe { libc::sync_file_range(g.as_raw_fd(), 0, 0, flags) }, 0);
    open_dir(&root.join("d")).sync_all().unwrap();
    // a file synced through another descriptor than the one that wrote it
    std::fs::write(root.join("d/other-fd"), b"written by one descriptor").unwrap();
    std::fs::File::open(root.join("d/other-fd"))
        .unwrap()
        .sync_all()
        .unwrap();
    open_dir(&root.join("d")).sync_all().unwrap();
    // O_DSYNC writes are durable when they return
    let mut o = std::fs::OpenOptions::new();
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut o, libc::O_DSYNC);
    let d = o.create(true).write(true).open(root.join("d/dsync")).unwrap();
    std::io::Write::write_all(&mut &d, b"dsync").unwrap();
    std::fs::write(root.join("d/tmp"), b"renamed").unwrap();
    std::fs::File::open(root.join("d/tmp")).unwrap().sync_all().unwrap();
    open_dir(&root.join("d")).sync_all().unwrap();
    // from here on "d" is not synced again:
    // a synced file whose directory was not synced after it was created: lost
    let h = std::fs::File::create(root.join("d/no-dir-sync")).unwrap();
    std::io::Write::write_all(&mut &h, b"synced, but not its name").unwrap();
    h.sync_all().unwrap();
    // a rename not followed by a directory sync: the old name stays
    std::fs::rename(root.join("d/tmp"), root.join("d/final")).unwrap();
    // a new directory whose name the root never synced
    std::fs::create_dir(root.join("new-dir")).unwrap();
    // truncation needs a sync too
    std::fs::File::options()
        .write(true)
        .open(root.join("d/synced"))
        .unwrap()
        .set_len(2)
        .unwrap();

    let cut = fs.cut(|| {});
    // after the cut nothing works, a sync included
    assert!(open_dir(&root.join("d")).sync_all().is_err());
    drop((f, g, h, d));
    fs.unmount();
    let after = tempfile::tempdir().unwrap();
    cut.durable.materialise(after.path()).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(after.path().join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["dsync", "old", "other-fd", "range", "synced", "tmp"]);
    let read = |name: &str| String::from_utf8(std::fs::read(after.path().join("d").join(name)).unwrap()).unwrap();
    assert_eq!(read("old"), "old");
    assert_eq!(read("synced"), "synced");
    assert_eq!(read("range"), "", "sync_file_range made data durable");
    assert_eq!(read("other-fd"), "written by one descriptor");
    assert_eq!(read("tmp"), "renamed");
    assert_eq!(read("dsync"), "dsync");
    assert!(!after.path().join("new-dir").exists());
    let losses = cut.durable.losses_against(&cut.visible).join("\n");
    for lost in [
        "d/no-dir-sync: directory entry not durable",
        "d/final",
        "new-dir/",
        "d/range: contents",
    ] {
        assert!(losses.contains(lost), "{lost:?} not reported in:\n{losses}");
    }
}
