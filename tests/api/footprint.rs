//! The embedded (sled) server stays small (issue 31 points 2 and 3): what a burst of durable
//! writes leaves resident once the server is idle, and what listing a large account costs
//! while it is answered and afterwards. Sizes are growths over a settled reading of the
//! same process taken after a warm-up, so the binary's own pages (a debug build's are
//! larger) do not count. Figures of the release binary are in docs/performance.md.

use crate::common;
use common::process::{Proc, Services};
use common::{b64, Auth, Method};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1024;

/// The resident memory of the idle server in KiB: it hands freed memory back a second after
/// the last request (src/memory.rs), so three readings 1.1 s apart must agree within 1 MiB
/// (30 s at most).
async fn settled_kib(server: &Proc) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = server.status_kib("VmRSS");
    let mut agreeing = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let now = server.status_kib("VmRSS");
        agreeing = if now.abs_diff(last) < MIB { agreeing + 1 } else { 0 };
        if agreeing == 2 || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

/// `total` durable `POST /inbox/item` of 100-byte items by `clients` concurrent clients
/// (each its own keep-alive connection), every one answered 200.
async fn post_items(server: &Proc, auth: &Auth, clients: usize, total: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let posts = (0..clients).map(|_| {
        let (api, auth, next) = (server.api.clone(), auth.clone(), next.clone());
        async move {
            while next.fetch_add(1, Ordering::Relaxed) < total {
                let body = json!({"type": "text", "data": b64([b'w'; 100])});
                api.post("/inbox/item", &auth, &body).await.expect_json(200);
            }
        }
    });
    futures_util::future::join_all(posts).await;
}

/// The server allocates from jemalloc with the settings of src/main.rs (`MALLOC_CONF`): its
/// background thread, which hands freed pages back to the kernel, runs only when jemalloc
/// is the allocator and has read those settings (with glibc's malloc, or settings under a
/// name jemalloc does not read, there is no such thread).
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_allocates_from_jemalloc_with_its_settings() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", server.pid()))
        .expect("the server's threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    assert!(
        threads.iter().any(|name| name == "jemalloc_bg_thd"),
        "no jemalloc background thread among the server's threads: {threads:?}"
    );
    server.stop().await;
}

/// After 30,000 durable writes by 16 clients into one account, the idle server holds at most
/// 14 MiB more than before them (now 9–10 MiB). sled's page cache was 8 MiB of on-disk page
/// sizes, about 22 MiB of memory once its pages are decoded: the writes left the server
/// 18 MiB larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_writes_leaves_the_idle_server_small() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let alice = server.api.login_ok("alice", "pw").await;
    // the code of the write path paged in, the connections' buffers made once
    post_items(&server, &alice, 16, 500).await;
    let before = settled_kib(&server).await;
    post_items(&server, &alice, 16, 30_000).await;
    assert_eq!(server.api.size(&alice).await, 30_500);
    let after = settled_kib(&server).await;
    let grown = after.saturating_sub(before);
    eprintln!(
        "30,000 writes by 16 clients: idle RSS {} MiB before, {} MiB after (grown {} KiB)",
        before / MIB,
        after / MIB,
        grown
    );
    assert!(
        grown < 14 * MIB,
        "the idle server grew by {} MiB after 30,000 writes",
        grown / MIB
    );
    server.stop().await;
}

/// A fresh server lists an account of 48 MiB in items of 60 KiB (64 MiB of JSON): the answer
/// is streamed (the server's RSS while sending it grows by less than half the answer), and
/// afterwards the idle server holds at most 24 MiB more than before (now 14–17 MiB). sled 0.34
/// keeps the pages it reads until its cache's bookkeeping catches up, and a scan's pages were
/// never counted often enough for that: the whole account stayed resident (54 MiB more, and
/// 58 MiB more while sending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_large_account_is_streamed_and_leaves_the_server_small() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let alice = server.api.login_ok("alice", "pw").await;
    const ITEMS: usize = 820;
    const ITEM_BYTES: usize = 60 * 1024;
    let next = Arc::new(AtomicUsize::new(0));
    let posts = (0..4).map(|_| {
        let (api, alice, next) = (server.api.clone(), alice.clone(), next.clone());
        async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= ITEMS {
                    break;
                }
                let mut item = vec![b'l'; ITEM_BYTES];
                item[..8].copy_from_slice(&(i as u64).to_be_bytes());
                api.post("/inbox/item", &alice, &json!({"type": "text", "data": b64(&item)}))
                    .await
                    .expect_json(200);
            }
        }
    });
    futures_util::future::join_all(posts).await;
    server.stop().await;

    // a fresh process: nothing of the items is in memory
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    // (only the count: `GET /inbox/uuids` would read every item)
    assert_eq!(server.api.size(&alice).await, ITEMS as u64);
    let before = settled_kib(&server).await;
    let response = server
        .api
        .request(Method::GET, "/inbox/items", &alice)
        .send()
        .await
        .expect("GET /inbox/items");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers().get("transfer-encoding").map(|v| v.as_bytes()),
        Some(&b"chunked"[..]),
        "a long list is sent while it is read"
    );
    let mut response = response;
    let mut body = Vec::new();
    let mut peak = before;
    let mut sampled_at = 0;
    while let Some(chunk) = response.chunk().await.expect("the list") {
        body.extend_from_slice(&chunk);
        if body.len() - sampled_at >= 2 << 20 {
            sampled_at = body.len();
            peak = peak.max(server.status_kib("VmRSS"));
        }
    }
    let items: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("the list is JSON");
    assert_eq!(items.len(), ITEMS);
    let answer_kib = body.len() as u64 / 1024;
    drop((items, body));
    let after = settled_kib(&server).await;
    eprintln!(
        "GET /inbox/items of {} MiB of items ({} MiB answer): RSS {} MiB before, {} MiB at most while sending, {} MiB idle after",
        ITEMS * ITEM_BYTES / (1 << 20),
        answer_kib / MIB,
        before / MIB,
        peak / MIB,
        after / MIB
    );
    let while_sending = peak.saturating_sub(before);
    assert!(
        while_sending < answer_kib / 2,
        "the server grew by {} MiB while sending an answer of {} MiB",
        while_sending / MIB,
        answer_kib / MIB
    );
    let kept = after.saturating_sub(before);
    assert!(
        kept < 24 * MIB,
        "the idle server kept {} MiB after listing {} MiB of items",
        kept / MIB,
        ITEMS * ITEM_BYTES / (1 << 20)
    );
    server.stop().await;
}
