//! Online backup and restore (issue 12, point 3): `pigeonhole backup` copies the database of
//! a running server that keeps serving writes; `pigeonhole restore` brings the copy into a
//! fresh data directory, where every write acknowledged before the backup began is found.

mod common;

use common::process::succeeded;
use common::scheduler::future_tickle;
use common::{Auth, Server};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs `pigeonhole ARGS` (no client settings or data directory from the environment).
fn pigeonhole(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args(args)
        .env_remove("PIGEONHOLE_DATA_DIR")
        .output()
        .expect("run pigeonhole")
}

fn backup(data_dir: &Path, dest: &Path) -> Output {
    pigeonhole(&[
        "backup".as_ref(),
        dest.as_os_str(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
    ])
}

fn restore(src: &Path, data_dir: &Path) -> Output {
    pigeonhole(&[
        "restore".as_ref(),
        src.as_os_str(),
        "--data-dir".as_ref(),
        data_dir.as_os_str(),
    ])
}

#[track_caller]
fn failed(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

/// What the writers had acknowledged, and when.
#[derive(Default)]
struct Acked {
    inbox: Vec<(Instant, String)>,
    scheduled: Vec<(Instant, String)>,
}

/// The names in `dir`.
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_load_restores_every_write_acknowledged_before_it_began() {
    let server = Server::start().await;
    let alice = server.user("alice").await;
    let bob = server.scheduler.user("bob").await;
    // a large item (stored in chunks) and enough items that the backup takes a while
    let big = "x".repeat(300_000);
    let big_id = server.add_text(&alice, &big).await;
    for i in 0..300 {
        server.add_text(&alice, &format!("before {i}")).await;
    }

    let acked = Arc::new(Mutex::new(Acked::default()));
    // (inbox, scheduled) acknowledgements so far: the test waits on it for the writers' progress
    let (progress, mut progressed) = tokio::sync::watch::channel((0usize, 0usize));
    let progress = Arc::new(progress);
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..4 {
        let (api, sched, alice, bob) = (server.api.clone(), server.scheduler.clone(), alice.clone(), bob.clone());
        let (acked, stop, progress) = (acked.clone(), stop.clone(), progress.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let id = api.add_text(&alice, &format!("load {w} {n}")).await;
                acked.lock().unwrap().inbox.push((Instant::now(), id));
                progress.send_modify(|(inbox, _)| *inbox += 1);
                if n % 4 == 0 {
                    let id = sched.add_tickle(&bob, &future_tickle(&format!("tickle {w} {n}"))).await;
                    acked.lock().unwrap().scheduled.push((Instant::now(), id));
                    progress.send_modify(|(_, scheduled)| *scheduled += 1);
                }
                n += 1;
            }
        }));
    }
    // under load for a moment: wait until the writers have acknowledged some writes
    tokio::time::timeout(
        Duration::from_secs(30),
        progressed.wait_for(|(_, scheduled)| *scheduled >= 20),
    )
    .await
    .expect("the writers make no progress")
    .expect("the writers run");

    let out_dir = tempfile::tempdir().expect("backup directory");
    let dest = out_dir.path().join("pigeonhole.backup");
    // watch the destination's name while the backup runs: it is absent or whole
    let seen = Arc::new(Mutex::new(Vec::<u64>::new()));
    let watching = Arc::new(AtomicBool::new(true));
    let watcher = {
        let (dest, seen, watching) = (dest.clone(), seen.clone(), watching.clone());
        std::thread::spawn(move || {
            while watching.load(Ordering::SeqCst) {
                if let Ok(m) = std::fs::metadata(&dest) {
                    seen.lock().unwrap().push(m.len());
                }
                std::thread::yield_now();
            }
        })
    };
    let began = Instant::now();
    let data_dir = server.settings.data_dir.clone();
    let out = tokio::task::spawn_blocking({
        let dest = dest.clone();
        move || backup(&data_dir, &dest)
    })
    .await
    .unwrap();
    let said = succeeded(&out);
    assert!(said.contains("backup written to"), "{said}");
    // writes went on during the backup and after it
    let after = progressed.borrow().0;
    tokio::time::timeout(
        Duration::from_secs(30),
        progressed.wait_for(|(inbox, _)| *inbox >= after + 20),
    )
    .await
    .expect("writes stopped after the backup")
    .expect("the writers run");
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.await.expect("writer");
    }
    watching.store(false, Ordering::SeqCst);
    watcher.join().unwrap();
    let size = std::fs::metadata(&dest).expect("the backup").len();
    assert!(
        seen.lock().unwrap().iter().all(|s| *s == size),
        "the destination showed a partial file: sizes {:?}, final {size}",
        seen.lock().unwrap().iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(
        names(out_dir.path()),
        BTreeSet::from(["pigeonhole.backup".to_owned()]),
        "no temporary file left"
    );
    // an old token, to check that the signing key came along
    let Auth::Bearer(_) = &alice else { panic!("bearer") };
    let (before_inbox, before_scheduled): (Vec<String>, Vec<String>) = {
        let a = acked.lock().unwrap();
        (
            a.inbox
                .iter()
                .filter(|(t, _)| *t < began)
                .map(|(_, id)| id.clone())
                .collect(),
            a.scheduled
                .iter()
                .filter(|(t, _)| *t < began)
                .map(|(_, id)| id.clone())
                .collect(),
        )
    };
    assert!(!before_inbox.is_empty() && !before_scheduled.is_empty());
    server.stop().await;

    // restore into a fresh data directory and serve it
    let fresh = tempfile::tempdir().expect("fresh data directory");
    let said = succeeded(&restore(&dest, fresh.path()));
    assert!(said.contains("restored"), "{said}");
    let restored = Server::start_in(fresh).await;
    let inbox: BTreeSet<String> = restored.uuids(&alice).await.into_iter().collect();
    for id in before_inbox.iter().chain([&big_id]) {
        assert!(
            inbox.contains(id),
            "inbox item {id}, acknowledged before the backup, is missing"
        );
    }
    let item = restored
        .get(&format!("/inbox/item/{big_id}"), &alice)
        .await
        .expect_json(200);
    let data = item["contents"]["data"].as_str().unwrap();
    assert_eq!(data, common::b64(&big), "the large item came back whole");
    let scheduled: BTreeSet<String> = restored
        .scheduler
        .tickles(&bob, None)
        .await
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect();
    for id in &before_scheduled {
        assert!(
            scheduled.contains(id),
            "scheduled item {id}, acknowledged before the backup, is missing"
        );
    }
    // the restored server keeps going: new writes, and the counts agree with the items
    restored.add_text(&alice, "after the restore").await;
    assert_eq!(restored.size(&alice).await, inbox.len() as u64 + 1);
    restored.stop().await;
}

// several threads: the client processes wait on this test's thread while the server
// answers on the others
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_damaged_backup_is_refused_before_anything_changes() {
    let server = Server::start().await;
    let alice = server.user("alice").await;
    for i in 0..20 {
        server.add_text(&alice, &format!("item {i}")).await;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let dest = out_dir.path().join("b");
    let data_dir = server.settings.data_dir.clone();
    succeeded(&backup(&data_dir, &dest));
    // restoring while the server runs is refused
    let err = failed(&restore(&dest, &data_dir));
    assert!(err.contains("running"), "{err}");
    // a backup into a directory that does not exist fails and leaves nothing
    let err = failed(&backup(&data_dir, &out_dir.path().join("missing/b")));
    assert!(err.contains("cannot write the backup"), "{err}");
    server.stop().await;

    let good = std::fs::read(&dest).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("one byte flipped", {
            let mut b = good.clone();
            let i = b.len() / 2;
            b[i] ^= 0x40;
            b
        }),
        ("truncated", good[..good.len() - 100].to_vec()),
        ("not a backup", b"hello".to_vec()),
    ];
    for (what, bytes) in cases {
        let damaged = out_dir.path().join("damaged");
        std::fs::write(&damaged, &bytes).unwrap();
        // into a fresh directory: nothing is created in it
        let fresh = tempfile::tempdir().unwrap();
        let before = names(fresh.path());
        let err = failed(&restore(&damaged, fresh.path()));
        assert!(err.contains("damaged") || err.contains("checksum"), "{what}: {err}");
        assert!(!fresh.path().join("db").exists(), "{what}: a database was made");
        assert!(!fresh.path().join("db.restoring").exists(), "{what}");
        assert!(before.is_subset(&names(fresh.path())));
    }

    // into an existing database: refused without --force, the database unchanged
    let fresh = tempfile::tempdir().unwrap();
    succeeded(&restore(&dest, fresh.path()));
    let err = failed(&restore(&dest, fresh.path()));
    assert!(err.contains("--force"), "{err}");
    let again = pigeonhole(&[
        "restore".as_ref(),
        dest.as_os_str(),
        "--data-dir".as_ref(),
        fresh.path().as_os_str(),
        "--force".as_ref(),
    ]);
    succeeded(&again);
    assert!(
        names(fresh.path()).iter().any(|n| n.starts_with("db.replaced-")),
        "the replaced database is kept"
    );
    let restored = Server::start_in(fresh).await;
    assert_eq!(restored.size(&alice).await, 20);
    restored.stop().await;
}

#[test]
fn backup_without_a_running_server_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let err = failed(&backup(dir.path(), &dir.path().join("b")));
    assert!(err.contains("no server answers"), "{err}");
}
