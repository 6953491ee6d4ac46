//! Durability of the real binary (inbox.md §6): every acknowledged write survives `kill -9`
//! and the database opens cleanly afterwards; SIGTERM and SIGINT stop the server with status
//! 0 after flushing.

use crate::common;

use common::process::{Proc, Services};
use common::{text_item, Api, Auth, Method};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Keeps adding items from `tasks` concurrent tasks until told to stop or until the server
/// goes away; returns every UUID answered with 200.
fn spawn_writers(
    api: &Api,
    auth: &Auth,
    tasks: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|t| {
            let api = api.clone();
            let auth = auth.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    n += 1;
                    let rb = api
                        .request(Method::POST, "/inbox/item", &auth)
                        .json(&text_item(&format!("writer {t} item {n}")));
                    let Ok(response) = rb.send().await else {
                        return; // the server is gone
                    };
                    if response.status().as_u16() != 200 {
                        continue;
                    }
                    let Ok(body) = response.bytes().await else {
                        return; // killed while the answer was on its way: not acknowledged
                    };
                    let uuid: String = serde_json::from_slice(&body).expect("add answers a UUID string");
                    acked.lock().unwrap().push(uuid);
                }
            })
        })
        .collect()
}

/// A server on fresh data and log directories, with the account `alice` logged in.
async fn start_with_alice() -> (tempfile::TempDir, tempfile::TempDir, Proc, Auth) {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let alice = server.api.login_ok("alice", "pw").await;
    (data, logs, server, alice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9() {
    let (data, logs, mut server, alice) = start_with_alice().await;
    let mut all_acked: Vec<String> = Vec::new();

    for round in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let writers = spawn_writers(&server.api, &alice, 4, stop.clone(), acked.clone());
        // let writes stream for a while, then kill the server in the middle of them
        let started = Instant::now();
        while acked.lock().unwrap().len() < 30 || started.elapsed() < Duration::from_millis(300) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "too few writes acknowledged:\n{}",
                server.log_text()
            );
            tokio::time::sleep(Duration::from_millis(10)).await; // poll
        }
        server.signal(libc::SIGKILL);
        let status = server.wait_exit().await;
        assert!(!status.success(), "round {round}: killed, yet {status:?}");
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.await.expect("writer task");
        }
        all_acked.extend(acked.lock().unwrap().drain(..));
        eprintln!("round {round}: {} acknowledged so far", all_acked.len());

        // restart on the same data directory: every acknowledged item is there and the
        // token issued before the crash still works
        server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
        let stored: std::collections::HashSet<String> = server.api.uuids(&alice).await.into_iter().collect();
        let missing: Vec<&String> = all_acked.iter().filter(|u| !stored.contains(*u)).collect();
        assert!(
            missing.is_empty(),
            "round {round}: {} of {} acknowledged items lost after kill -9: {missing:?}",
            missing.len(),
            all_acked.len()
        );
        // distinct UUIDs were answered
        let distinct: std::collections::HashSet<&String> = all_acked.iter().collect();
        assert_eq!(distinct.len(), all_acked.len());
        // the database is usable: reads and writes work after recovery
        let size = server.api.size(&alice).await;
        assert_eq!(size as usize, stored.len());
        server.api.add_text(&alice, "after restart").await;
    }
    // the account itself and its password survived too
    server.api.login_ok("alice", "pw").await;
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_and_sigint_exit_cleanly_and_keep_data() {
    let (data, logs, mut server, alice) = start_with_alice().await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(server.api.add_text(&alice, &format!("item {i}")).await);
    }
    let keyed = server
        .api
        .send(
            server
                .api
                .request(Method::POST, "/inbox/item", &alice)
                .header("Idempotency-Key", "once")
                .json(&text_item("keyed")),
        )
        .await
        .expect_json(200);
    ids.push(keyed.as_str().unwrap().to_owned());
    let (secret, _) = server.api.add_key(&alice, "script", &["PermitSize"]).await;

    server.signal(libc::SIGTERM);
    let status = server.wait_exit().await;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM exit: {status:?}\n{}",
        server.log_text()
    );

    let mut server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    assert_eq!(server.api.uuids(&alice).await, ids);
    assert_eq!(server.api.size(&Auth::key("alice", &secret)).await, 4);
    let again = server
        .api
        .send(
            server
                .api
                .request(Method::POST, "/inbox/item", &alice)
                .header("Idempotency-Key", "once")
                .json(&text_item("keyed again")),
        )
        .await
        .expect_json(200);
    assert_eq!(again, keyed, "the Idempotency-Key survived the restart");
    ids.push(server.api.add_text(&alice, "second run").await);

    server.signal(libc::SIGINT);
    let status = server.wait_exit().await;
    assert_eq!(status.code(), Some(0), "SIGINT exit: {status:?}\n{}", server.log_text());

    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    assert_eq!(server.api.uuids(&alice).await, ids);
    server.api.login_ok("alice", "pw").await;
    drop(server);
}

/// The newest recovery snapshot sled has written in the data directory (its name carries
/// the log position it covers, in hexadecimal).
fn newest_snapshot(data: &std::path::Path) -> Option<u64> {
    std::fs::read_dir(data.join("db"))
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix("snap.").map(str::to_owned))
        .filter_map(|hex| u64::from_str_radix(&hex, 16).ok())
        .max()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_a_snapshot_covering_everything_written() {
    let (data, logs, mut server, alice) = start_with_alice().await;
    let mut ids = Vec::new();
    for i in 0..50 {
        ids.push(server.api.add_text(&alice, &format!("item {i}")).await);
    }
    // sled writes snapshots only while it opens the database: what the running server has
    // written since its start is not covered by any snapshot yet.
    let while_running = newest_snapshot(data.path());

    server.signal(libc::SIGTERM);
    assert_eq!(server.wait_exit().await.code(), Some(0), "{}", server.log_text());
    let after_stop = newest_snapshot(data.path()).expect("a snapshot after a clean stop");
    assert!(
        while_running.is_none_or(|before| after_stop > before),
        "the stop wrote a newer snapshot: {while_running:?} -> {after_stop}"
    );

    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    assert_eq!(server.api.uuids(&alice).await, ids);
}
