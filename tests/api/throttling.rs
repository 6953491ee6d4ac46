//! Login and registration throttling that a stranger cannot turn against the owner
//! (inbox.md §1.7, spec decisions 12 and 17), over real HTTP against the real server.

use crate::common;

use common::process::{Proc, Services};
use common::Server;
use serde_json::json;
use std::time::{Duration, Instant};

/// `POST /login` as if forwarded by a proxy for `client`.
async fn login_from(api: &common::Api, client: &str, username: &str, password: &str) -> common::Resp {
    api.send(
        api.http
            .post(api.url("/login"))
            .header("X-Forwarded-For", client)
            .json(&json!({"username": username, "password": password})),
    )
    .await
}

async fn register_from(api: &common::Api, client: &str, username: &str) -> common::Resp {
    api.send(
        api.http
            .post(api.url("/register"))
            .header("X-Forwarded-For", client)
            .json(&json!({"name": username, "password": "pw"})),
    )
    .await
}

fn retry_after(r: &common::Resp) -> u64 {
    r.header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After in {r:?}"))
}

#[tokio::test]
async fn a_strangers_failures_lock_neither_the_owner_elsewhere_nor_the_owners_access_keys() {
    let server =
        Server::start_with(|s| s.trusted_proxies = vec![pigeonhole::config::ProxyNet::parse("127.0.0.1").unwrap()])
            .await;
    let owner = server.user("alice").await;
    let (secret, _) = server.add_key(&owner, "scheduler", &["PermitAdd"]).await;
    let (stranger, home) = ("203.0.113.5", "198.51.100.7");
    for _ in 0..10 {
        login_from(&server, stranger, "alice", "guess").await.expect_error(401);
    }
    // the pair is full: even the right password is refused from the stranger's address
    let refused = login_from(&server, stranger, "alice", "alice-password").await;
    let wait = retry_after(&refused);
    refused.expect_error(429);
    assert!((1..=600).contains(&wait), "{wait}");
    // the owner from home, and the owner's access key from anywhere, still log in
    login_from(&server, home, "alice", "alice-password")
        .await
        .expect_empty(204);
    login_from(&server, stranger, "alice", &secret).await.expect_empty(204);
    login_from(&server, stranger, "alice", &secret.to_uppercase())
        .await
        .expect_empty(204);
    // a client cannot pick its address by prepending one: the right-most untrusted counts
    login_from(&server, &format!("{home}, {stranger}"), "alice", "alice-password")
        .await
        .expect_error(429);
    // the scheduler keeps its own counts
    server.scheduler.register("alice", "pw").await.expect_empty(200);
    server.scheduler.login_ok("alice", "pw").await;
}

#[tokio::test]
async fn the_address_limit_counts_failures_for_every_username() {
    let server =
        Server::start_with(|s| s.trusted_proxies = vec![pigeonhole::config::ProxyNet::parse("127.0.0.1").unwrap()])
            .await;
    server.user("alice").await;
    let scanner = "192.0.2.66";
    for i in 0..100 {
        login_from(&server, scanner, &format!("nobody{i}"), "x")
            .await
            .expect_error(401);
    }
    login_from(&server, scanner, "alice", "alice-password")
        .await
        .expect_error(429);
    login_from(&server, "192.0.2.67", "alice", "alice-password")
        .await
        .expect_empty(204);
}

#[tokio::test]
async fn forwarded_for_is_not_believed_from_an_untrusted_peer() {
    let server = Server::start().await;
    server.user("alice").await;
    for i in 0..10 {
        login_from(&server, &format!("203.0.113.{i}"), "alice", "guess")
            .await
            .expect_error(401);
    }
    login_from(&server, "198.51.100.7", "alice", "alice-password")
        .await
        .expect_error(429);
}

/// Concurrent attempts take their slots before the (costly) hash: no more than ten wrong
/// passwords are ever evaluated.
#[tokio::test]
async fn concurrent_wrong_logins_cannot_exceed_the_limit() {
    let server = Server::start_with(|s| s.password_iterations = 20_000).await;
    server.register("alice", "right").await.expect_empty(204);
    let attempts = (0..40).map(|_| {
        let api = server.api.clone();
        async move { api.login("alice", "wrong").await.status }
    });
    let codes = futures_util::future::join_all(attempts).await;
    assert!(codes.iter().all(|c| *c == 401 || *c == 429), "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 401).count(), 10, "{codes:?}");
    server.login("alice", "right").await.expect_error(429);
}

/// An access-key login costs one SHA-256, not a password hash: it is answered while password
/// logins queue for the (at most four) hashing threads.
#[tokio::test]
async fn an_access_key_login_does_not_wait_for_password_hashes() {
    let server = Server::start_with(|s| {
        s.password_iterations = 100_000;
        s.trusted_proxies = vec![pigeonhole::config::ProxyNet::parse("127.0.0.1").unwrap()];
    })
    .await;
    let owner = server.user("alice").await;
    let (secret, _) = server.add_key(&owner, "scheduler", &["PermitAdd"]).await;
    // 24 password logins from 24 addresses (so none is refused) fill the hashing queue
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hashing: Vec<_> = (0..24)
        .map(|i| {
            let (api, done) = (server.api.clone(), done.clone());
            tokio::spawn(async move {
                login_from(&api, &format!("198.51.100.{i}"), "alice", "wrong")
                    .await
                    .expect_error(401);
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            })
        })
        .collect();
    // once the first hash is done, the others are queued or in progress
    let deadline = Instant::now() + Duration::from_secs(60);
    while done.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no password login finished");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await; // poll
    }
    let before = done.load(std::sync::atomic::Ordering::SeqCst);
    login_from(&server, "203.0.113.1", "alice", &secret)
        .await
        .expect_empty(204);
    let meanwhile = done.load(std::sync::atomic::Ordering::SeqCst) - before;
    // the hashes already running may finish; a key login behind the queue would wait for ~20
    assert!(meanwhile <= 6, "the key login waited for {meanwhile} password hashes");
    for h in hashing {
        h.await.unwrap();
    }
}

#[tokio::test]
async fn registrations_are_limited_per_client_address() {
    let server =
        Server::start_with(|s| s.trusted_proxies = vec![pigeonhole::config::ProxyNet::parse("127.0.0.1").unwrap()])
            .await;
    for i in 0..10 {
        register_from(&server, "203.0.113.9", &format!("spam{i}"))
            .await
            .expect_empty(204);
    }
    let refused = register_from(&server, "203.0.113.9", "spam10").await;
    let wait = retry_after(&refused);
    assert!((3000..=3600).contains(&wait), "{wait}");
    refused.expect_error(429);
    // nothing was created by the refused registration
    server.login("spam10", "pw").await.expect_error(401);
    register_from(&server, "203.0.113.10", "neighbour")
        .await
        .expect_empty(204);
    // the owner's own machine (loopback, no proxy in between) is not limited
    let direct = Server::start().await;
    for i in 0..15 {
        direct.register(&format!("local{i}"), "pw").await.expect_empty(204);
    }
}

/// Ten failed logins with 8 MiB usernames must not pin 80 MiB: the limiter keeps a digest
/// (the bound allows for what the allocator keeps of the request buffers).
#[tokio::test]
async fn huge_usernames_in_failed_logins_do_not_stay_in_memory() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let pid = server.child.id();
    let huge = |i: usize| format!("{}{i}", "u".repeat(8 << 20));
    // A first round warms up what big requests leave behind (allocator, buffers).
    for i in 0..3 {
        server.api.login(&huge(i), "wrong").await.expect_error(401);
    }
    let settled = settled_rss(pid).await;
    // Ten more failed usernames of 8 MiB: a limiter keeping them would hold 80 MiB more.
    for i in 10..20 {
        server.api.login(&huge(i), "wrong").await.expect_error(401);
    }
    let after = settled_rss(pid).await;
    assert!(
        after <= settled + 32 * 1024,
        "RSS grew from {settled} KiB to {after} KiB after ten failed logins with 8 MiB usernames"
    );
}

/// The resident memory of `pid` once idle: the server hands freed memory back a second
/// after the last request (src/memory.rs), so wait until three readings a second apart
/// agree within 1 MiB.
async fn settled_rss(pid: u32) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = common::process::rss_kib(pid);
    let mut agreeing = 0;
    loop {
        let poll_interval = Duration::from_millis(1100);
        tokio::time::sleep(poll_interval).await;
        let now = common::process::rss_kib(pid);
        agreeing = if now.abs_diff(last) < 1024 { agreeing + 1 } else { 0 };
        if agreeing == 2 || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}
