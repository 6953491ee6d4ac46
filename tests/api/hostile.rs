//! Hostile and broken connections (spec decision 17): timeouts for silent, idle and stalled
//! connections, many half-open connections, credentials checked before a body is buffered,
//! the open-file limit, bounded memory for long lists, and the request log line.

use crate::common;

use base64::Engine;
use common::process::{Proc, Services};
use common::{b64, Api, Auth, Method};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
const CAP: usize = 16 * 1024 * 1024;

/// A server on fresh data and log directories.
async fn start(extra: &[&str]) -> (tempfile::TempDir, tempfile::TempDir, Proc) {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, extra).await;
    (data, logs, server)
}

/// A server with `alice` logged in.
async fn start_with_alice(extra: &[&str]) -> (tempfile::TempDir, tempfile::TempDir, Proc, Auth) {
    let (data, logs, server) = start(extra).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let alice = server.api.login_ok("alice", "pw").await;
    (data, logs, server, alice)
}

/// A plain TCP connection to a service, for requests no HTTP client would send.
struct Raw {
    stream: TcpStream,
    /// Bytes read beyond the last answer.
    pending: Vec<u8>,
}

impl Raw {
    async fn connect(api: &Api) -> Raw {
        let addr = api.base.strip_prefix("http://").expect("http base URL");
        Raw {
            stream: TcpStream::connect(addr).await.expect("connect"),
            pending: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("send");
    }

    async fn fill(&mut self) -> bool {
        let mut buf = [0u8; 16 * 1024];
        match self.stream.read(&mut buf).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                true
            }
        }
    }

    /// Reads one answer (with `Content-Length`): its status and body.
    async fn answer(&mut self) -> (u16, String) {
        let end = loop {
            if let Some(at) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            assert!(
                self.fill().await,
                "connection closed before an answer: {:?}",
                String::from_utf8_lossy(&self.pending)
            );
        };
        let head = String::from_utf8_lossy(&self.pending[..end]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        while self.pending.len() < end + length {
            assert!(self.fill().await, "connection closed in an answer");
        }
        let body = String::from_utf8_lossy(&self.pending[end..end + length]).into_owned();
        self.pending.drain(..end + length);
        (status, body)
    }

    /// Waits (at most `limit`) until the server closes the connection; answers how long
    /// that took.
    async fn closed_within(&mut self, limit: Duration) -> Duration {
        let started = Instant::now();
        tokio::time::timeout(limit, async { while self.fill().await {} })
            .await
            .unwrap_or_else(|_| panic!("the connection is still open after {limit:?}"));
        started.elapsed()
    }
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_finish_its_headers_in_time_is_closed() {
    let (_data, _logs, server) = start(&["--header-timeout-secs", "1", "--idle-timeout-secs", "5"]).await;
    // a partial header, then silence
    let mut partial = Raw::connect(&server.api).await;
    partial.send(b"GET /pricing HTTP/1.1\r\nHost: x\r\n").await;
    let after = partial.closed_within(Duration::from_secs(10)).await;
    assert!(after >= Duration::from_millis(900), "closed after {after:?}");
    assert!(
        after < Duration::from_secs(4),
        "closed after {after:?}: the idle timeout, not the header timeout"
    );
    // a connection that never sends a byte
    let mut silent = Raw::connect(&server.api).await;
    let after = silent.closed_within(Duration::from_secs(10)).await;
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_secs(4),
        "{after:?}"
    );
    // a header sent a byte at a time is still cut at the deadline (slowloris)
    let mut slow = Raw::connect(&server.api).await;
    let started = Instant::now();
    let header =
        b"GET /pricing HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut closed = false;
    for byte in header {
        if slow.stream.write_all(&[*byte]).await.is_err() {
            closed = true;
            break;
        }
        match tokio::time::timeout(Duration::from_millis(100), slow.stream.read(&mut [0u8; 64])).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => panic!("an answer to a header that took too long"),
            Err(_) => {}
        }
    }
    assert!(closed, "a header trickling in for {:?} was accepted", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    // meanwhile, and afterwards, the server answers
    server.api.get("/pricing", &Auth::None).await.expect(200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_64_kib_is_refused() {
    let (_data, _logs, server) = start(&[]).await;
    for (padding, status) in [(60 * 1024, 200), (70 * 1024, 431)] {
        let mut conn = Raw::connect(&server.api).await;
        let head = format!(
            "GET /pricing HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
            "a".repeat(padding)
        );
        conn.send(head.as_bytes()).await;
        assert_eq!(conn.answer().await.0, status, "a head of {padding} bytes");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_idle_timeout_and_not_before() {
    let (_data, _logs, server) = start(&["--header-timeout-secs", "1", "--idle-timeout-secs", "3"]).await;
    let mut conn = Raw::connect(&server.api).await;
    conn.send(&get("/pricing")).await;
    assert_eq!(conn.answer().await, (200, "null".to_owned()));
    // idle for longer than the header timeout, less than the idle timeout: still served
    tokio::time::sleep(Duration::from_millis(1800)).await;
    conn.send(&get("/pricing")).await;
    assert_eq!(conn.answer().await, (200, "null".to_owned()));
    // then closed once idle for the idle timeout
    let after = conn.closed_within(Duration::from_secs(15)).await;
    assert!(after >= Duration::from_millis(2800), "closed after {after:?}");
    assert!(after < Duration::from_secs(6), "closed after {after:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_cut_off_with_408() {
    let (_data, _logs, server, alice) = start_with_alice(&["--body-timeout-secs", "1"]).await;
    let Auth::Bearer(token) = &alice else { unreachable!() };
    for (name, framing, part) in [
        (
            "with Content-Length",
            "Content-Length: 1000\r\n",
            "{\"type\": \"text\", ",
        ),
        (
            "chunked",
            "Transfer-Encoding: chunked\r\n",
            "10\r\n{\"type\": \"text\",\r\n",
        ),
    ] {
        let mut conn = Raw::connect(&server.api).await;
        let started = Instant::now();
        conn.send(
            format!(
                "POST /inbox/item HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json\r\n{framing}\r\n{part}"
            )
            .as_bytes(),
        )
        .await;
        let (status, body) = tokio::time::timeout(Duration::from_secs(10), conn.answer())
            .await
            .unwrap_or_else(|_| panic!("{name}: no answer to a stalled body"));
        assert_eq!(status, 408, "{name}: {body}");
        let reason: Value = serde_json::from_str(&body).expect("a JSON error");
        assert!(reason["error"].as_str().is_some_and(|r| !r.is_empty()), "{body}");
        assert!(
            started.elapsed() >= Duration::from_millis(900),
            "{name}: {:?}",
            started.elapsed()
        );
        conn.closed_within(Duration::from_secs(5)).await;
    }
    assert_eq!(server.api.size(&alice).await, 0, "nothing was added");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_half_open_connections_do_not_stop_others_from_being_served() {
    let (_data, _logs, server, alice) = start_with_alice(&[]).await;
    let mut half_open = Vec::new();
    for i in 0..300 {
        let mut conn = Raw::connect(&server.api).await;
        if i % 2 == 0 {
            conn.send(b"POST /inbox/item HTTP/1.1\r\nHost: x\r\nContent-Le").await;
        }
        half_open.push(conn);
    }
    for i in 0..20 {
        let started = Instant::now();
        server.api.get("/inbox/size", &alice).await.expect(200);
        server.api.add_text(&alice, &format!("item {i}")).await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(2), "two requests took {took:?}");
    }
    let started = Instant::now();
    server.api.login_ok("alice", "pw").await;
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    // and a stop does not wait for them
    let started = Instant::now();
    server.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the stop took {:?}",
        started.elapsed()
    );
    drop(half_open);
}

/// Sends `POST path` with `Content-Length: length` and `length` bytes of body (in pieces
/// of 64 KiB) and reads the answer.
async fn post_sized(api: &Api, path: &str, length: usize, auth: &str) -> (u16, String) {
    let mut conn = Raw::connect(api).await;
    conn.send(
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {length}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    let piece = vec![b' '; 64 * 1024];
    let mut left = length;
    while left > 0 {
        let n = left.min(piece.len());
        if conn.stream.write_all(&piece[..n]).await.is_err() {
            break; // answered early
        }
        left -= n;
    }
    conn.answer().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_body_is_counted_not_kept() {
    let (_data, _logs, server) = start(&[]).await;
    // a body of exactly the cap: 401 (credentials), read to its end but not kept
    let (status, body) = post_sized(&server.api, "/inbox/item", CAP, "").await;
    assert_eq!(status, 401, "{body}");
    // over the cap, declared: 413 at once (the body is not sent)
    let mut conn = Raw::connect(&server.api).await;
    conn.send(
        format!(
            "POST /inbox/item HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            CAP + 1
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(conn.answer().await.0, 413);
    // over the cap without Content-Length (chunked): 413 once the cap is passed
    let mut conn = Raw::connect(&server.api).await;
    conn.send(
        b"POST /inbox/item HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
    )
    .await;
    let piece = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent <= CAP {
        let n = if sent + piece.len() > CAP {
            CAP + 1 - sent
        } else {
            piece.len()
        };
        let mut chunk = format!("{n:x}\r\n").into_bytes();
        chunk.extend_from_slice(&piece[..n]);
        chunk.extend_from_slice(b"\r\n");
        conn.send(&chunk).await;
        sent += n;
    }
    assert_eq!(conn.answer().await.0, 413);
    // within the cap, chunked: 401
    let mut conn = Raw::connect(&server.api).await;
    conn.send(b"POST /inbox/item HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        .await;
    assert_eq!(conn.answer().await.0, 401);

    // 24 at once: the server holds none of them
    let before = server.status_kib("VmRSS");
    let posts = (0..24).map(|i| {
        let api = server.api.clone();
        let path = if i % 2 == 0 { "/inbox/item" } else { "/inbox/sync" };
        async move { post_sized(&api, path, CAP, "Authorization: Bearer not-a-token\r\n").await }
    });
    for (status, body) in futures_util::future::join_all(posts).await {
        assert_eq!(status, 401, "{body}");
    }
    let peak = server.status_kib("VmHWM");
    let grown = peak.saturating_sub(before);
    eprintln!("24 unauthenticated 16 MiB bodies: RSS {before} KiB before, peak {peak} KiB");
    assert!(grown < 8 * 1024, "the server grew by {grown} KiB");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_public_bodies_take_turns_and_small_logins_do_not_wait() {
    let (_data, _logs, server) = start(&[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    // a large login body that stalls half-way holds the turn of large public bodies
    let mut stalled = Raw::connect(&server.api).await;
    stalled
        .send(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n")
        .await;
    stalled.send(&vec![b' '; 512 * 1024]).await;
    // normal logins go on
    for _ in 0..5 {
        let started = Instant::now();
        server.api.login_ok("alice", "pw").await;
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }
    drop(stalled);
    // many large logins at once are all answered, one body held at a time: a login of 8 MiB
    // costs about 25 MiB at its peak (body, parsed password, its copy for the hash)
    let before = server.status_kib("VmRSS");
    let password = "p".repeat(8 * 1024 * 1024);
    let logins = (0..24).map(|i| {
        let api = server.api.clone();
        // unknown users: 401 each, never the 429 of repeated failures of one username
        let body = serde_json::to_vec(&json!({"username": format!("nobody{i}"), "password": password})).unwrap();
        async move {
            api.post_raw("/login", &Auth::None, Some("application/json"), body)
                .await
        }
    });
    for r in futures_util::future::join_all(logins).await {
        r.expect_error(401);
    }
    let grown = server.status_kib("VmHWM").saturating_sub(before);
    eprintln!("24 large logins at once: grown {grown} KiB");
    assert!(grown < 100 * 1024, "the server grew by {grown} KiB");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
    use std::os::unix::process::CommandExt;
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start_adjusted(data.path(), logs.path(), Services::Both, &[], |command| {
        #[expect(unsafe_code, reason = "pre_exec is unsafe; std has no safe setrlimit(2)")]
        // SAFETY: between fork and exec only async-signal-safe calls: getrlimit, setrlimit.
        unsafe {
            command.pre_exec(|| {
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                limit.rlim_cur = limit.rlim_max.min(256);
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    })
    .await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("an open files line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers.len(), 2, "{line}");
    assert_eq!(numbers[0], numbers[1], "soft limit not raised: {line}");
    assert_ne!(numbers[0], "256", "{line}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_log_line_per_request_without_colour_codes() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &["--log-level", "debug"]).await;
    server.api.get("/inbox/nothing-here", &Auth::None).await.expect(404);
    // the scheduler's port is named in the log line of its listener (which may come after
    // the inbox's first answer)
    let deadline = Instant::now() + Duration::from_secs(10);
    let port = loop {
        let log = server.log_text();
        let line = log
            .lines()
            .find_map(|l| l.split("scheduler service listening on http://127.0.0.1:").nth(1));
        if let Some(port) = line {
            break port.trim().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler's address is not in the log:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // poll
    };
    let scheduler = Api::new(format!("http://127.0.0.1:{port}"));
    scheduler.get("/pricing", &Auth::None).await.expect(200);
    let deadline = Instant::now() + Duration::from_secs(10);
    let (inbox_line, scheduler_line) = loop {
        let log = server.log_text();
        let find = |needle: &str| log.lines().find(|l| l.contains(needle)).map(str::to_owned);
        if let (Some(i), Some(s)) = (find("path=/inbox/nothing-here"), find("service=\"scheduler\"")) {
            break (i, s);
        }
        assert!(Instant::now() < deadline, "no request lines in the log:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await; // poll
    };
    for field in [
        "DEBUG",
        "request",
        "service=\"inbox\"",
        "client=127.0.0.1",
        "method=GET",
        "status=404",
        "duration=",
    ] {
        assert!(inbox_line.contains(field), "{field} missing in {inbox_line:?}");
    }
    for field in ["client=127.0.0.1", "method=GET", "path=/pricing", "status=200"] {
        assert!(scheduler_line.contains(field), "{field} missing in {scheduler_line:?}");
    }
    let log = server.log_text();
    assert!(
        !log.contains('\x1b'),
        "colour codes in a log that is not a terminal:\n{log:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_list_is_served_with_bounded_memory() {
    let (data, logs, server) = start(&[]).await;
    server.api.register("alice", "pw").await.expect_empty(204);
    let alice = server.api.login_ok("alice", "pw").await;
    // 563 items of 100 KiB: about 55 MiB of item data, 73 MiB of base64 in the answer
    const ITEMS: usize = 563;
    let item_with = |data: &[u8]| json!({"type": "text", "data": b64(data)});
    let item = |i: usize| {
        let mut data = vec![b'x'; 100 * 1024];
        data[..8].copy_from_slice(&(i as u64).to_be_bytes());
        item_with(&data)
    };
    let mut added = Vec::new();
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(8) {
        let posts = chunk.iter().map(|&i| {
            let api = server.api.clone();
            let alice = alice.clone();
            let body = item(i);
            async move { api.post("/inbox/item", &alice, &body).await.expect_json(200) }
        });
        added.extend(futures_util::future::join_all(posts).await);
    }
    assert_eq!(added.len(), ITEMS);
    server.stop().await;

    // A fresh process. Reading the items once (their ids) fills sled's page cache, which
    // keeps what it read (about the size of the data); what the list adds beyond that is
    // the cost of answering it.
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    assert_eq!(server.api.size(&alice).await, ITEMS as u64);
    let started = server.status_kib("VmRSS");
    assert_eq!(server.api.uuids(&alice).await.len(), ITEMS);
    let before = server.status_kib("VmRSS");
    eprintln!(
        "RSS {} MiB at start, {} MiB after reading every item once",
        started / 1024,
        before / 1024
    );
    let response = server
        .api
        .request(Method::GET, "/inbox/items", &alice)
        .send()
        .await
        .expect("GET /inbox/items");
    assert_eq!(response.status().as_u16(), 200);
    let body = response.bytes().await.expect("the whole list");
    let peak = server.status_kib("VmHWM");
    let items: Vec<Value> = serde_json::from_slice(&body).expect("the list is JSON");
    // every item once, in the order they were added (the 8 of a round in any order)
    let order: Vec<usize> = items
        .iter()
        .map(|v| {
            let data = base64::engine::general_purpose::STANDARD
                .decode(v["contents"]["data"].as_str().expect("data"))
                .expect("base64");
            assert_eq!(v["contents"], item_with(&data), "contents survive");
            u64::from_be_bytes(data[..8].try_into().unwrap()) as usize
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..ITEMS).collect::<Vec<_>>());
    assert!(order.windows(2).all(|w| w[0] / 8 <= w[1] / 8), "out of order");
    let grown = peak.saturating_sub(before);
    eprintln!(
        "GET /inbox/items of {} MiB of items ({} MiB answer): RSS {} MiB before, peak {} MiB, grown {} MiB",
        ITEMS * 100 / 1024,
        body.len() as u64 / MIB,
        before / 1024,
        peak / 1024,
        grown / 1024
    );
    assert!(
        grown < 16 * 1024,
        "answering the list grew the server by {} MiB",
        grown / 1024
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_client_does_not_read_is_dropped() {
    let (_data, _logs, server, alice) = start_with_alice(&["--body-timeout-secs", "1", "--log-level", "debug"]).await;
    // about 27 MiB of answer: more than the kernel buffers of both ends hold
    let data = b64(vec![b'y'; 2 * 1024 * 1024]);
    for _ in 0..10 {
        server
            .api
            .post("/inbox/item", &alice, &json!({"type": "text", "data": data}))
            .await
            .expect(200);
    }
    let Auth::Bearer(token) = &alice else { unreachable!() };
    let mut conn = Raw::connect(&server.api).await;
    conn.send(format!("GET /inbox/items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes())
        .await;
    // the client reads nothing: the server's writes stall, and after the timeout it gives up
    let deadline = Instant::now() + Duration::from_secs(15);
    while !server.log_text().contains("the client stopped reading the answer") {
        assert!(
            Instant::now() < deadline,
            "the stalled answer was not given up:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    let mut received = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let read_all = async {
        while let Ok(n) = conn.stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received += n;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read_all)
        .await
        .expect("the connection ends");
    let whole = 10 * (data.len() + 80);
    assert!(
        received < whole,
        "the whole answer ({received} bytes) was sent to a client that did not read"
    );
    // others are served meanwhile and afterwards
    assert_eq!(server.api.size(&alice).await, 10);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_a_request_in_flight_finish() {
    let (_data, _logs, mut server, alice) = start_with_alice(&["--body-timeout-secs", "2"]).await;
    let Auth::Bearer(token) = &alice else { unreachable!() };
    // a request in flight: its handler reads the body (the server says "100 Continue" then),
    // which stalls, so it is answered 408 after the body timeout
    let mut busy = Raw::connect(&server.api).await;
    busy.send(
        format!(
            "POST /inbox/item HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(busy.answer().await.0, 100);
    busy.send(b"{").await;
    // an idle connection and a half-open one do not hold the stop up
    let mut idle = Raw::connect(&server.api).await;
    idle.send(&get("/pricing")).await;
    assert_eq!(idle.answer().await.0, 200);
    let _half_open = Raw::connect(&server.api).await;
    server.signal(libc::SIGTERM);
    idle.closed_within(Duration::from_secs(5)).await;
    let (status, _) = tokio::time::timeout(Duration::from_secs(10), busy.answer())
        .await
        .expect("the request in flight is answered");
    assert_eq!(status, 408);
    let exit = server.wait_exit().await;
    assert_eq!(exit.code(), Some(0), "{}", server.log_text());
}
