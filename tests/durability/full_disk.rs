//! A write that failed was never there (issue 17, point 4; docs/durability.md, "A full or
//! failing disk"): when the writer's flush or sync fails, the write is answered with an
//! error and no later read shows it; the server then refuses every write with 503 and a
//! reason while reads go on and `/healthz` says the database is not writable; after a
//! restart on a healthy disk exactly the acknowledged items are there.
//!
//! The server runs on the FUSE file system of `common/powercut_fs.rs`, whose switch makes
//! the disk full (writes, creations and syncs fail with `ENOSPC`) or makes only its syncs
//! fail (`EIO`, the writes having gone through). It needs `/dev/fuse` and root (mount(2));
//! without them the tests are skipped with a message saying so, unless
//! `PIGEONHOLE_REQUIRE_TOOLS=1` (set by `.ci/run`): then they fail.

use crate::common;
use crate::powercut_fs;

use base64::Engine;
use common::process::{Proc, Services};
use common::{Api, Auth};
use powercut_fs::{Failure, PowerCutFs};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;

// one FUSE mount at a time, shared with the other FUSE module of this program (main.rs)
use crate::ONE_AT_A_TIME;

/// Whether a FUSE file system can be mounted here: `false` (with a message) only when the
/// mechanism is missing (no `/dev/fuse`, or not root) and `PIGEONHOLE_REQUIRE_TOOLS` is not
/// set; panics when it is set, or when the mount fails although the mechanism is there.
#[expect(unsafe_code, reason = "std has no safe getuid(2)")]
fn fuse_available() -> bool {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let fuse = Path::new("/dev/fuse").exists();
    if !fuse || uid != 0 {
        let why = format!(
            "the full-disk tests need a FUSE mount: /dev/fuse {} and running as uid {uid} \
             (root is needed for mount(2))",
            if fuse { "exists" } else { "is missing" }
        );
        assert!(
            std::env::var_os("PIGEONHOLE_REQUIRE_TOOLS").is_none(),
            "{why}; PIGEONHOLE_REQUIRE_TOOLS is set, so this is a failure"
        );
        eprintln!("SKIPPED: {why}");
        return false;
    }
    let dir = tempfile::tempdir().unwrap();
    match PowerCutFs::mount(dir.path(), None) {
        Ok(fs) => {
            fs.unmount();
            true
        }
        Err(e) => panic!("/dev/fuse exists and we are root, but mounting a FUSE file system failed: {e}"),
    }
}

/// How an item's text shows in assertions: its name and length (not its filler).
fn label(text: &str) -> String {
    format!("{} ({} bytes)", text.split(" filler").next().unwrap_or(""), text.len())
}

/// The account's items as the server lists them: [`label`] → UUID.
async fn items(api: &Api, auth: &Auth) -> BTreeMap<String, String> {
    let v = api.get("/inbox/items", auth).await.expect_json(200);
    v.as_array()
        .expect("items is an array")
        .iter()
        .map(|item| {
            let data = base64::engine::general_purpose::STANDARD
                .decode(item["contents"]["data"].as_str().expect("item data"))
                .expect("base64");
            (
                label(&String::from_utf8(data).expect("text")),
                item["id"].as_str().expect("id").to_owned(),
            )
        })
        .collect()
}

async fn healthz(api: &Api) -> (u16, Value) {
    let r = api.get("/healthz", &Auth::None).await;
    (r.status, r.json())
}

/// An item of `bytes` bytes of text starting with `name` (large ones are stored in chunks).
fn item(name: &str, bytes: usize) -> Value {
    let mut text = name.to_owned();
    while text.len() < bytes {
        text.push_str(" filler");
    }
    json!({"type": "text", "data": common::b64(text)})
}

/// What the server shows once the disk failed: the failed write is not there, later writes
/// are refused with 503 and a reason, reads go on, `/healthz` says not writable.
async fn check_failed_state(server: &Proc, auth: &Auth, acknowledged: &BTreeMap<String, String>) {
    let api = &server.api;
    // the write that met the failing disk: an error, never a UUID
    let failed = api.post("/inbox/item", auth, &item("failed", 10)).await;
    assert!(
        failed.status == 500 || failed.status == 503,
        "a write on a failing disk was answered {}: {}\n{}",
        failed.status,
        failed.text(),
        server.log_text()
    );
    assert!(failed.json()["error"].is_string(), "{}", failed.text());

    // ... and no read shows it, now or later
    for _ in 0..2 {
        assert_eq!(
            &items(api, auth).await,
            acknowledged,
            "reads show exactly what was acknowledged"
        );
        assert_eq!(api.size(auth).await, acknowledged.len() as u64);
        assert_eq!(api.uuids(auth).await.len(), acknowledged.len());
    }

    // every later write: 503 with a reason and Retry-After, and not seen either
    for n in 0..3 {
        let r = api
            .post("/inbox/item", auth, &item(&format!("refused {n}"), 10 + n * 5000))
            .await;
        assert_eq!(r.status, 503, "{}", r.text());
        let why = r.json()["error"].as_str().expect("an error message").to_owned();
        assert!(why.contains("cannot store"), "{why}");
        assert!(
            r.header("retry-after").is_some_and(|s| s.parse::<u64>().is_ok()),
            "{:?}",
            r.headers
        );
    }
    let first = acknowledged.values().next().expect("an item");
    let r = api.delete(&format!("/inbox/item/{first}"), auth).await;
    assert_eq!(r.status, 503, "a deletion is a write too: {}", r.text());
    assert_eq!(&items(api, auth).await, acknowledged, "reads still work");

    let (status, body) = healthz(api).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["database"]["writable"], false, "{body}");
    assert_eq!(body["database"]["readable"], true, "{body}");
    assert!(
        body["database"]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{body}"
    );
}

/// Starts a server on `mnt`, registers alice and stores `n` acknowledged items.
async fn server_with_items(mnt: &Path, logs: &Path, n: usize) -> (Proc, Auth, BTreeMap<String, String>) {
    let server = Proc::start(mnt, logs, Services::Both, &[]).await;
    let auth = server.api.user("alice").await;
    let mut acknowledged = BTreeMap::new();
    for i in 0..n {
        // one of them large enough to be stored in chunks
        let body = item(&format!("kept {i}"), if i == 1 { 20_000 } else { 10 });
        let v = server.api.post("/inbox/item", &auth, &body).await.expect_json(200);
        let data = base64::engine::general_purpose::STANDARD
            .decode(body["data"].as_str().unwrap())
            .unwrap();
        acknowledged.insert(label(&String::from_utf8(data).unwrap()), v.as_str().unwrap().to_owned());
    }
    assert_eq!(&items(&server.api, &auth).await, &acknowledged);
    (server, auth, acknowledged)
}

/// A full disk: the write fails in sled's own write to its log (`ENOSPC`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_a_refused_write_is_never_seen_and_a_restart_has_the_acknowledged_items() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !fuse_available() {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let fs = PowerCutFs::mount(mnt.path(), None).expect("mount");
    let (mut server, auth, acknowledged) = server_with_items(mnt.path(), logs.path(), 3).await;

    fs.fail(Some(Failure::Full));
    check_failed_state(&server, &auth, &acknowledged).await;
    assert!(fs.stats().failed > 0, "the disk was asked for space");
    let log = server.log_text();
    assert!(
        log.contains("No space left on device") && log.contains("refused"),
        "the log says why:\n{log}"
    );

    // stopped while the disk is full (the last flush fails: the exit status says so)
    server.signal(libc::SIGTERM);
    server.wait_exit().await;
    // space is freed, the server restarts on the same disk
    fs.fail(None);
    let server = Proc::start(mnt.path(), logs.path(), Services::Both, &[]).await;
    let auth = server.api.login_ok("alice", "alice-password").await;
    assert_eq!(
        items(&server.api, &auth).await,
        acknowledged,
        "exactly the acknowledged items after the restart"
    );
    server.api.add_text(&auth, "after the restart").await;
    assert_eq!(healthz(&server.api).await.1["database"]["writable"], true);
    server.stop().await;
    fs.unmount();
}

/// A drive whose syncs fail after the writes went through: sled's memory (and its log
/// file) already hold the write when the writer learns that it is not durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_syncs_fail_the_write_is_never_seen_and_a_power_cut_keeps_the_acknowledged_items() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !fuse_available() {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let fs = PowerCutFs::mount(mnt.path(), None).expect("mount");
    let (mut server, auth, acknowledged) = server_with_items(mnt.path(), logs.path(), 3).await;

    fs.fail(Some(Failure::Syncs));
    check_failed_state(&server, &auth, &acknowledged).await;

    // the machine loses power: only what was synced is on the disk it restarts with
    let cut = fs.cut(|| server.kill_9());
    server.wait_exit().await;
    fs.unmount();
    let after = tempfile::tempdir().unwrap();
    cut.durable.materialise(after.path()).expect("the durable state");
    let server = Proc::start(after.path(), logs.path(), Services::Both, &[]).await;
    let auth = server.api.login_ok("alice", "alice-password").await;
    assert_eq!(items(&server.api, &auth).await, acknowledged);
    server.stop().await;
}

/// Issue 29 point 2: while the disk is full (every write refused with 503), every read and
/// every login answers on both services: logins by password and by access key (the last
/// login time and a key's upgrade are written when they can be, never needed to answer),
/// and each read route with a token and with an access key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_and_login_answers_while_the_disk_is_full() {
    let _one = ONE_AT_A_TIME.lock().await;
    if !fuse_available() {
        return;
    }
    // a full disk, and a disk whose syncs fail (the writes having gone through)
    for failure in [Failure::Full, Failure::Syncs] {
        reads_and_logins_answer(failure).await;
    }
}

async fn reads_and_logins_answer(failure: Failure) {
    let logs = tempfile::tempdir().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let fs = PowerCutFs::mount(mnt.path(), None).expect("mount");
    let (server, auth, acknowledged) = server_with_items(mnt.path(), logs.path(), 2).await;
    let (api, scheduler) = (&server.api, &server.scheduler);
    let (secret, key_id) = api
        .add_key(
            &auth,
            "phone",
            &["PermitGetItems", "PermitGetItem", "PermitSize", "PermitGetItemUUIDs"],
        )
        .await;
    let planner = scheduler.user("alice").await;
    let tickle = common::scheduler::future_tickle("on a full disk");
    let tickle_id = scheduler.add_tickle(&planner, &tickle).await;
    let (scheduler_secret, _) = scheduler.add_key(&planner, "planner", &["PermitGetItems"]).await;
    let item = acknowledged.values().next().unwrap().clone();

    fs.fail(Some(failure));
    let refused = api.post("/inbox/item", &auth, &item_body("refused")).await;
    assert!(refused.status == 500 || refused.status == 503, "{}", refused.text());

    for _ in 0..2 {
        // logins: by password (both services) and by access key
        for service in [api, scheduler] {
            let r = service.login("alice", "alice-password").await;
            assert_eq!(
                r.status,
                204,
                "login while the disk is full: {}\n{}",
                r.text(),
                server.log_text()
            );
        }
        let by_key = Auth::key("alice", &secret);
        let scheduler_key = Auth::key("alice", &scheduler_secret);
        let fresh = api.login_ok("alice", "alice-password").await;
        let planner = scheduler.login_ok("alice", "alice-password").await;
        let reads: Vec<(&Api, String, &Auth)> = vec![
            (api, "/inbox/items".into(), &fresh),
            (api, "/inbox/items".into(), &by_key),
            (api, "/inbox/uuids".into(), &by_key),
            (api, "/inbox/size".into(), &by_key),
            (api, format!("/inbox/item/{item}"), &by_key),
            (api, "/inbox/show-item".into(), &fresh),
            (api, "/account".into(), &fresh),
            (api, "/access-key".into(), &fresh),
            (api, format!("/access-key/{key_id}"), &fresh),
            (api, "/permissions".into(), &fresh),
            (scheduler, "/scheduler/items".into(), &planner),
            (scheduler, "/scheduler/items".into(), &scheduler_key),
            (scheduler, "/scheduler/uuids".into(), &planner),
            (scheduler, format!("/scheduler/item/info/{tickle_id}"), &planner),
            (scheduler, "/account/settings".into(), &planner),
            (scheduler, "/account".into(), &planner),
            (scheduler, "/trigger".into(), &planner),
        ];
        for (service, path, who) in reads {
            let r = service.get(&path, who).await;
            assert_eq!(
                r.status,
                200,
                "GET {path} while the disk is full: {}\n{}",
                r.text(),
                server.log_text()
            );
        }
    }
    assert_eq!(&items(api, &auth).await, &acknowledged);
    // the writer failed: the server stops with an error status (its last flush failed)
    let mut server = server;
    server.signal(libc::SIGTERM);
    server.wait_exit().await;
    fs.fail(None);
    fs.unmount();
}

fn item_body(text: &str) -> Value {
    item(text, 10)
}
