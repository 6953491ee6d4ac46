//! End-to-end delivery of due items (scheduler.md §5.2, §7, §8, §9): the real background
//! workers trigger items and deliver them by e-mail through a real SMTP conversation (lettre
//! talking to a small SMTP sink run by the test) and into inbox services over HTTP, recover
//! from a target that is down for a while, and neither lose nor duplicate anything when the
//! binary is killed in the middle of delivering.

use crate::common;

use base64::Engine;
use common::process::{Proc, Services};
use common::scheduler::add_inbox_trigger;
use common::scripted::{item_added, login_ok, Answer, ScriptedInbox, Seen};
use common::{test_settings, text_item, Api, Auth, Method, Server, Worker, EMAIL_DELIVERY, INBOX_DELIVERY};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::ops::AsyncFnMut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// The longest any single wait of these tests may take.
const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// waiting

/// Polls `probe` every 50 ms until it answers `Some`; panics naming `what` after `limit`.
async fn eventually_within<T>(limit: Duration, what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
}

async fn eventually<T>(what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    eventually_within(WAIT, what, probe).await
}

/// Binds `127.0.0.1:port`, retrying for a while (the port was in use a moment ago).
async fn bind_again(port: u16) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(("127.0.0.1", port)).await {
            Ok(l) => return l,
            Err(e) => {
                assert!(Instant::now() < deadline, "cannot bind 127.0.0.1:{port} again: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await; // retry
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// dates and scheduler calls

fn day(d: time::Date) -> String {
    format!("{:04}-{:02}-{:02}", d.year(), d.month() as u8, d.day())
}

fn today() -> String {
    day(time::OffsetDateTime::now_utc().date())
}

fn yesterday() -> String {
    day(time::OffsetDateTime::now_utc()
        .date()
        .previous_day()
        .expect("a day before today"))
}

/// Item contents due one minute ago (scheduled-day and scheduled-time in UTC; the account
/// keeps the default offset 0).
fn due_a_minute_ago(content: &str) -> Value {
    let t = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    json!({
        "content": content,
        "scheduled-day": day(t.date()),
        "scheduled-time": format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
        "recurrence": null,
    })
}

/// Item contents due since yesterday at midnight.
fn due_since_yesterday(content: &str) -> Value {
    json!({"content": content, "scheduled-day": yesterday(), "scheduled-time": null, "recurrence": null})
}

/// Settings of a scheduler whose workers react quickly.
fn fast_workers(s: &mut pigeonhole::config::Settings) {
    s.looper_period = 1;
    s.looper_retry_delay_us = 100_000;
}

/// A server with fast workers that sends its e-mails to `sink`.
async fn mailing_server(sink: &SmtpSink) -> Server {
    let smtp_url = sink.url();
    Server::start_with(|s| {
        fast_workers(s);
        s.smtp_url = Some(smtp_url);
    })
    .await
}

async fn add_item(api: &Api, auth: &Auth, contents: &Value) -> String {
    let v = api.post("/scheduler/item", auth, contents).await.expect_json(200);
    v.as_str()
        .unwrap_or_else(|| panic!("POST /scheduler/item answered {v}, not a UUID string"))
        .to_owned()
}

/// `GET /scheduler/items?filter=onlytriggered`.
async fn triggered_items(api: &Api, auth: &Auth) -> Vec<Value> {
    let v = api
        .get("/scheduler/items?filter=onlytriggered", auth)
        .await
        .expect_json(200);
    v.as_array()
        .unwrap_or_else(|| panic!("items answer is not an array: {v}"))
        .clone()
}

/// The finished delivery attempts of a triggered item.
#[track_caller]
fn attempts(item: &Value) -> Vec<Value> {
    item["triggered"]["triggeredInfoTriggerTriggerAttempts"]
        .as_array()
        .unwrap_or_else(|| panic!("not a triggered item with an attempt list: {item}"))
        .clone()
}

/// Waits until the account has `n` triggered items, each with `per_item` finished
/// attempts; answers the triggered items.
async fn wait_finished(api: &Api, auth: &Auth, n: usize, per_item: usize) -> Vec<Value> {
    eventually(
        &format!("{n} triggered items with {per_item} finished attempt(s) each"),
        async || {
            let items = triggered_items(api, auth).await;
            let done = items.len() == n && items.iter().all(|i| attempts(i).len() == per_item);
            done.then_some(items)
        },
    )
    .await
}

/// After a pass of each of the delivery `stages` (the target is down): the one item of
/// `auth` is triggered, and no attempt has finished.
async fn assert_tried_and_pending(server: &Server, auth: &Auth, stages: &[Worker]) {
    server.settle(stages).await;
    let items = triggered_items(&server.scheduler, auth).await;
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        attempts(&items[0]),
        Vec::<Value>::new(),
        "nothing can have finished while the target is down: {}",
        items[0]
    );
}

fn inbox_attempt(trigger: &str, inbox_item: &str) -> Value {
    json!({"tag": "InboxTriggerAttempt",
           "contents": [trigger, {"tag": "InboxAdditionSuccess", "contents": inbox_item}]})
}

fn email_attempt(trigger: &str) -> Value {
    json!({"tag": "EmailTriggerAttempt", "contents": [trigger, {"tag": "EmailResultSent"}]})
}

/// `GET /inbox/items` of an inbox account.
async fn inbox_items(api: &Api, auth: &Auth) -> Vec<Value> {
    let v = api.get("/inbox/items", auth).await.expect_json(200);
    v.as_array().expect("inbox items are an array").clone()
}

/// Creates an e-mail trigger for `address`, reads the key from the verification e-mail the
/// sink receives, verifies the trigger with it; answers the trigger UUID.
async fn add_verified_email_trigger(api: &Api, auth: &Auth, sink: &SmtpSink, address: &str) -> String {
    let v = api
        .post("/trigger/email", auth, &json!({"addEmailTrigger": address}))
        .await
        .expect_json(200);
    let trigger = v.as_str().expect("trigger UUID").to_owned();
    let needle = format!("/trigger/email/verify/{trigger}/");
    let mail = eventually("the verification e-mail", async || {
        sink.mails().into_iter().find(|m| m.text().contains(&needle))
    })
    .await;
    assert_eq!(mail.to, vec![address.to_owned()], "envelope recipient");
    assert_eq!(mail.from, "pigeonhole@localhost", "envelope sender");
    assert_eq!(
        mail.header("subject").as_deref(),
        Some("Please verify your e-mail trigger")
    );
    let text = mail.text();
    let at = text.find(&needle).unwrap() + needle.len();
    let key: String = text[at..].chars().take(32).collect();
    assert!(
        key.len() == 32 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "no 32-hex-digit key after the link: {text:?}"
    );
    assert!(text.contains(&format!("Key: {key}")), "{text:?}");
    api.post_raw(&format!("/trigger/email/verify/{trigger}/{key}"), auth, None, "")
        .await
        .expect_empty(200);
    let info = api
        .get(&format!("/trigger/info/{trigger}"), auth)
        .await
        .expect_json(200);
    assert_eq!(
        info["info"]["typedTriggerInfoValue"]["emailTriggerInfoVerified"],
        json!(true),
        "{info}"
    );
    trigger
}

// ---------------------------------------------------------------------------------------
// an SMTP sink

/// One message as the sink received it: envelope and the raw DATA (dot-unstuffed).
#[derive(Clone, Debug)]
struct Mail {
    from: String,
    to: Vec<String>,
    data: String,
}

type Mailbox = Arc<Mutex<Vec<Mail>>>;

impl Mail {
    /// A top-level header, unfolded.
    fn header(&self, name: &str) -> Option<String> {
        let (headers, _) = split_entity(&self.data);
        header(&headers, name).map(str::to_owned)
    }

    /// The decoded `text/plain` body with LF line ends ("" when there is none).
    fn text(&self) -> String {
        plain_text(&self.data).unwrap_or_default()
    }

    fn is_triggered_item(&self) -> bool {
        self.header("subject").is_some_and(|s| s.starts_with("[Pigeonhole] "))
    }
}

/// An SMTP server on 127.0.0.1 that accepts everything (no STARTTLS, no AUTH unless
/// asked to offer it) and keeps the messages; its rules can make it refuse or stall.
struct SmtpSink {
    port: u16,
    mails: Mailbox,
    rules: Arc<SinkRules>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

#[derive(Default)]
struct SinkRules {
    /// While set, every `RCPT TO` is refused with a permanent `550` (and counted).
    reject: AtomicBool,
    rejected: AtomicUsize,
    /// A `RCPT TO` an address of this domain is never answered (the client gives up after
    /// its timeout).
    stall_domain: Mutex<Option<String>>,
    /// Stalled `RCPT TO` commands so far.
    stalled: AtomicUsize,
    /// Offer `AUTH PLAIN LOGIN` in the `EHLO` answer (STARTTLS is never offered).
    offer_auth: AtomicBool,
    /// `AUTH` commands received.
    auths: AtomicUsize,
    /// Connections accepted.
    connections: AtomicUsize,
}

impl SmtpSink {
    async fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the SMTP sink");
        SmtpSink::serve(listener, Mailbox::default())
    }

    /// A new sink on the port of a stopped one.
    async fn start_on(port: u16) -> SmtpSink {
        SmtpSink::serve(bind_again(port).await, Mailbox::default())
    }

    fn serve(listener: TcpListener, mails: Mailbox) -> SmtpSink {
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = watch::channel(false);
        let rules = Arc::new(SinkRules::default());
        let task = tokio::spawn(smtp_accept(listener, mails.clone(), rules.clone(), stopped));
        SmtpSink {
            port,
            mails,
            rules,
            stop,
            task,
        }
    }

    fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap().clone()
    }

    fn item_mails(&self) -> Vec<Mail> {
        self.mails().into_iter().filter(Mail::is_triggered_item).collect()
    }

    /// Closes the listening socket and every open connection; answers what was received.
    async fn stop(self) -> Vec<Mail> {
        let _ = self.stop.send(true);
        self.task.await.expect("the SMTP sink task");
        let mails = self.mails.lock().unwrap().clone();
        mails
    }
}

async fn smtp_accept(listener: TcpListener, mails: Mailbox, rules: Arc<SinkRules>, mut stop: watch::Receiver<bool>) {
    let mut sessions = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    rules.connections.fetch_add(1, Ordering::SeqCst);
                    sessions.spawn(smtp_session(stream, mails.clone(), rules.clone()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await, // retry the accept
            },
            Some(_) = sessions.join_next(), if !sessions.is_empty() => {}
        }
    }
    // aborts the sessions (closing their connections); the listener closes on return
    sessions.shutdown().await;
}

/// The address between `<` and `>` of a `MAIL FROM:` / `RCPT TO:` line.
fn angle(line: &str) -> String {
    let start = line.find('<').map_or(0, |i| i + 1);
    let end = line[start..].find('>').map_or(line.len(), |i| start + i);
    line[start..end].to_owned()
}

async fn smtp_session(stream: TcpStream, mails: Mailbox, rules: Arc<SinkRules>) -> std::io::Result<()> {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    w.write_all(b"220 127.0.0.1 test sink ESMTP\r\n").await?;
    let (mut from, mut to) = (String::new(), Vec::new());
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).await? == 0 {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        let verb = text.split([' ', ':']).next().unwrap_or("").to_ascii_uppercase();
        let stalled = |address: &str| {
            let domain = address.rsplit_once('@').map_or("", |(_, d)| d).to_ascii_lowercase();
            rules.stall_domain.lock().unwrap().as_deref() == Some(domain.as_str())
        };
        let reply: &[u8] = match verb.as_str() {
            "EHLO" if rules.offer_auth.load(Ordering::SeqCst) => {
                b"250-127.0.0.1 greets you\r\n250-AUTH PLAIN LOGIN\r\n250 ok\r\n"
            }
            "EHLO" => b"250-127.0.0.1 greets you\r\n250 ok\r\n",
            "HELO" => b"250 ok\r\n",
            "AUTH" => {
                rules.auths.fetch_add(1, Ordering::SeqCst);
                b"235 2.7.0 authenticated\r\n"
            }
            "MAIL" => {
                from = angle(&text);
                to.clear();
                b"250 ok\r\n"
            }
            "RCPT" if rules.reject.load(Ordering::SeqCst) => {
                rules.rejected.fetch_add(1, Ordering::SeqCst);
                b"550 5.1.1 mailbox unavailable\r\n"
            }
            "RCPT" if stalled(&angle(&text)) => {
                rules.stalled.fetch_add(1, Ordering::SeqCst);
                std::future::pending().await
            }
            "RCPT" => {
                to.push(angle(&text));
                b"250 ok\r\n"
            }
            "DATA" => {
                w.write_all(b"354 end data with <CR><LF>.<CR><LF>\r\n").await?;
                let data = read_data(&mut r).await?;
                mails.lock().unwrap().push(Mail {
                    from: std::mem::take(&mut from),
                    to: std::mem::take(&mut to),
                    data,
                });
                b"250 ok: queued\r\n"
            }
            "RSET" => {
                from.clear();
                to.clear();
                b"250 ok\r\n"
            }
            "NOOP" => b"250 ok\r\n",
            "QUIT" => {
                w.write_all(b"221 bye\r\n").await?;
                return Ok(());
            }
            _ => b"502 command not implemented\r\n",
        };
        w.write_all(reply).await?;
    }
}

/// Reads DATA lines up to the line `.`; removes dot-stuffing.
async fn read_data(r: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<String> {
    let mut data = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if line == b".\r\n" || line == b".\n" {
            return Ok(String::from_utf8_lossy(&data).into_owned());
        }
        let unstuffed = line.strip_prefix(b".").unwrap_or(&line);
        data.extend_from_slice(unstuffed);
    }
}

// ---------------------------------------------------------------------------------------
// reading MIME messages (just enough for the messages lettre builds)

/// Headers (unfolded) and body of a MIME entity with CRLF line ends.
fn split_entity(raw: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = if let Some(body) = raw.strip_prefix("\r\n") {
        ("", body)
    } else {
        match raw.find("\r\n\r\n") {
            Some(i) => (&raw[..i], &raw[i + 4..]),
            None => (raw, ""),
        }
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        if line.starts_with([' ', '\t']) {
            if let Some(last) = headers.last_mut() {
                last.1.push_str(line);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    (headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A parameter (`boundary`) of a header value, without quotes.
fn parameter(value: &str, name: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|p| {
        let (n, v) = p.split_once('=')?;
        n.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().trim_matches('"').to_owned())
    })
}

fn quoted_printable(body: &str) -> Vec<u8> {
    let b = body.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'=' {
            if b[i + 1..].starts_with(b"\r\n") {
                i += 3;
                continue;
            }
            if let Some(hex) = b.get(i + 1..i + 3) {
                if let Ok(byte) = u8::from_str_radix(&String::from_utf8_lossy(hex), 16) {
                    out.push(byte);
                    i += 3;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The first `text/plain` part, decoded, with LF line ends.
fn plain_text(raw: &str) -> Option<String> {
    let (headers, body) = split_entity(raw);
    let content_type = header(&headers, "content-type").unwrap_or("text/plain");
    let media = content_type.split(';').next().unwrap().trim().to_ascii_lowercase();
    if media.starts_with("multipart/") {
        let delimiter = format!("--{}", parameter(content_type, "boundary")?);
        for part in body.split(delimiter.as_str()).skip(1) {
            if part.starts_with("--") {
                break;
            }
            let part = part.strip_prefix("\r\n").unwrap_or(part);
            let part = part.strip_suffix("\r\n").unwrap_or(part);
            if let Some(text) = plain_text(part) {
                return Some(text);
            }
        }
        None
    } else if media == "text/plain" {
        let encoding = header(&headers, "content-transfer-encoding")
            .unwrap_or("7bit")
            .to_ascii_lowercase();
        let bytes = match encoding.as_str() {
            "base64" => {
                let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .expect("a base64 body")
            }
            "quoted-printable" => quoted_printable(body),
            _ => body.as_bytes().to_vec(),
        };
        Some(String::from_utf8_lossy(&bytes).replace("\r\n", "\n"))
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------
// an inbox-only server that can be stopped and started again on the same port

struct InboxService {
    api: Api,
    port: u16,
    dir: TempDir,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
}

impl InboxService {
    /// Runs only the inbox service of `pigeonhole::launch` on `dir`, on `port` (0: any).
    async fn start(mut dir: TempDir, port: u16) -> InboxService {
        let deadline = Instant::now() + WAIT;
        loop {
            let listener = if port == 0 {
                TcpListener::bind("127.0.0.1:0").await.expect("bind the inbox port")
            } else {
                bind_again(port).await
            };
            let port = listener.local_addr().unwrap().port();
            let (stop, stopped) = watch::channel(false);
            let task = tokio::spawn(pigeonhole::launch(
                test_settings(&dir),
                pigeonhole::Listeners {
                    inbox: Some(listener),
                    scheduler: None,
                },
                stopped,
            ));
            let service = InboxService {
                api: Api::new(format!("http://127.0.0.1:{port}")),
                port,
                dir,
                stop,
                task,
            };
            loop {
                if service.task.is_finished() {
                    break;
                }
                if let Ok(r) = service.api.http.get(service.api.url("/pricing")).send().await {
                    if r.status().is_success() {
                        return service;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await; // poll
            }
            // the database of a just-stopped run may not be released yet: try again
            let reason = service.task.await.expect("the inbox server task");
            assert!(
                Instant::now() < deadline,
                "the inbox service does not start: {reason:?}"
            );
            dir = service.dir;
            tokio::time::sleep(Duration::from_millis(100)).await; // retry
        }
    }

    /// Stops gracefully; answers the data directory.
    async fn stop(self) -> TempDir {
        let _ = self.stop.send(true);
        let result = tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the inbox service stops within a minute")
            .expect("the inbox service task did not panic");
        assert_eq!(result, Ok(()), "launch returned an error");
        self.dir
    }
}

// ---------------------------------------------------------------------------------------
// a TCP proxy that can hold back the answers of successful adds

/// Forwards connections to an inbox service. Requests always go through at once; while the
/// gate is closed, every answer `200` (the answer of a successful `POST /inbox/item`; a
/// login answers `204`) is held back until the gate opens. So the inbox stores items whose
/// answers the scheduler never sees.
struct GateProxy {
    port: u16,
    open: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl GateProxy {
    async fn start(target: String, open: bool) -> GateProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let (gate, gate_rx) = watch::channel(open);
        let task = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        if let Ok((client, _)) = accepted {
                            connections.spawn(gated_pipe(client, target.clone(), gate_rx.clone()));
                        }
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        GateProxy { port, open: gate, task }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn open(&self) {
        let _ = self.open.send(true);
    }
}

impl Drop for GateProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn gated_pipe(client: TcpStream, target: String, mut gate: watch::Receiver<bool>) -> std::io::Result<()> {
    let upstream = TcpStream::connect(target).await?;
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let requests = async {
        let _ = tokio::io::copy(&mut client_read, &mut upstream_write).await;
        let _ = upstream_write.shutdown().await;
    };
    let answers = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match upstream_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // answers are relayed in order, so a held-back head holds back its body too
            if buf[..n].starts_with(b"HTTP/1.1 200") && gate.wait_for(|open| *open).await.is_err() {
                break;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(requests, answers);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// the tests

/// §6.1, §6.2, §7.3, §8.1–8.3: verification and triggered-item e-mails go through a real
/// SMTP conversation; the item arrives once with the specified subject and text, and the
/// triggered copy records `EmailResultSent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn due_item_is_mailed_over_smtp() {
    let sink = SmtpSink::start().await;
    let server = mailing_server(&sink).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let address = "alice@example.org";
    let trigger = add_verified_email_trigger(api, &alice, &sink, address).await;
    assert_eq!(sink.mails().len(), 1, "only the verification e-mail so far");

    let content = "Water the plants\nthen\tcall the plumber about the leaking kitchen tap, END";
    let id = add_item(api, &alice, &due_a_minute_ago(content)).await;

    let items = wait_finished(api, &alice, 1, 1).await;
    assert_eq!(attempts(&items[0]), vec![email_attempt(&trigger)], "{}", items[0]);
    assert_ne!(items[0]["id"], json!(id), "the triggered copy has a new UUID");
    assert_eq!(items[0]["contents"]["content"], json!(content));
    let none: Vec<String> = serde_json::from_value(api.get("/scheduler/uuids", &alice).await.expect_json(200)).unwrap();
    assert!(
        none.is_empty(),
        "the non-recurring item is no longer scheduled: {none:?}"
    );

    // the e-mail was accepted by the sink before the attempt was recorded; the workers'
    // next passes send nothing more
    server.settle(&EMAIL_DELIVERY).await;
    let mails = sink.item_mails();
    assert_eq!(mails.len(), 1, "exactly one item e-mail: {mails:#?}");
    assert_eq!(sink.mails().len(), 2, "verification + item e-mail, nothing else");
    let mail = &mails[0];
    assert_eq!(mail.from, "pigeonhole@localhost", "envelope sender");
    assert_eq!(mail.to, vec![address.to_owned()], "envelope recipient");
    let to = mail.header("to").expect("a To header");
    assert!(to.contains(address), "To: {to}");
    let from = mail.header("from").expect("a From header");
    assert!(from.contains("pigeonhole@localhost"), "From: {from}");
    let expected_subject = format!(
        "[Pigeonhole] {}",
        content.chars().filter(|c| !c.is_control()).take(50).collect::<String>()
    );
    assert_eq!(mail.header("subject"), Some(expected_subject));
    for name in ["date", "message-id", "mime-version"] {
        assert!(mail.header(name).is_some(), "no {name} header in {:?}", mail.data);
    }
    let text = mail.text();
    assert!(
        text.contains(content),
        "the text does not contain the content: {text:?}"
    );
}

/// §6.3, §7.2: a due item becomes exactly one inbox item of the trigger's inbox account
/// (same server, other service), and the attempt names that inbox item.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn due_item_reaches_the_inbox() {
    let server = Server::start_with(fast_workers).await;
    let bob = server.api.user("bob").await;
    let (secret, _) = server.api.add_key(&bob, "scheduler", &["PermitAdd"]).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let trigger = add_inbox_trigger(api, &alice, &server.api.base, "bob", &secret).await;

    let content = "Buy milk on the way home";
    add_item(api, &alice, &due_a_minute_ago(content)).await;

    let items = wait_finished(api, &alice, 1, 1).await;
    let delivered = inbox_items(&server.api, &bob).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered[0]["contents"], text_item(content));
    let inbox_id = delivered[0]["id"].as_str().unwrap();
    assert_eq!(attempts(&items[0]), vec![inbox_attempt(&trigger, inbox_id)]);

    server.settle(&INBOX_DELIVERY).await;
    assert_eq!(inbox_items(&server.api, &bob).await.len(), 1, "delivered twice");
    assert_eq!(triggered_items(api, &alice).await.len(), 1, "triggered twice");
}

/// §5.2, §5.3: a recurring item triggers once for its missed occurrence (the copy keeps
/// that occurrence), stays scheduled, and moves to its first occurrence after now.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recurring_item_is_rescheduled() {
    let server = Server::start_with(fast_workers).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let today_before = today();
    let recurrence = json!({"every-x-days": {"days": 1, "time-of-day": null}});
    let mut contents = due_since_yesterday("Daily stand-up");
    contents["recurrence"] = recurrence.clone();
    let id = add_item(api, &alice, &contents).await;

    let copies = eventually("the triggered copy", async || {
        let items = triggered_items(api, &alice).await;
        (!items.is_empty()).then_some(items)
    })
    .await;
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy = &copies[0];
    assert_ne!(copy["id"], json!(id));
    assert_eq!(copy["contents"], contents, "the copy keeps the missed occurrence");
    assert_eq!(attempts(copy), Vec::<Value>::new(), "no triggers, no attempts");

    let item = api
        .get(&format!("/scheduler/item/info/{id}"), &alice)
        .await
        .expect_json(200);
    assert_eq!(item["triggered"], Value::Null, "still scheduled: {item}");
    assert_eq!(item["contents"]["content"], json!("Daily stand-up"));
    assert_eq!(item["contents"]["recurrence"], recurrence);
    assert_eq!(item["contents"]["scheduled-time"], Value::Null);
    let next = item["contents"]["scheduled-day"].as_str().unwrap().to_owned();
    assert!(next > today_before, "moved to {next}, not after {today_before}");
    let latest = day(time::OffsetDateTime::now_utc().date().next_day().unwrap());
    assert!(
        next <= latest,
        "moved to {next}, beyond the first occurrence after now ({latest})"
    );

    // another triggerer pass: no second copy, the item stays
    server.settle(&[Worker::Triggerer]).await;
    assert_eq!(triggered_items(api, &alice).await.len(), 1, "triggered twice");
    assert_eq!(api.get("/scheduler/uuids", &alice).await.expect_json(200), json!([id]));
    let again = api
        .get(&format!("/scheduler/item/info/{id}"), &alice)
        .await
        .expect_json(200);
    assert_eq!(again, item, "rescheduled once only");
}

/// §7.3, §7.4: the mail server is down when the item triggers; the transient failures are
/// retried and the e-mail arrives exactly once when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smtp_down_then_up_delivers_once() {
    let sink = SmtpSink::start().await;
    let port = sink.port;
    let smtp_url = sink.url();
    let server = Server::start_with(|s| {
        s.looper_period = 1;
        s.looper_retry_delay_us = 200_000;
        s.looper_retry_amount = 7;
        s.smtp_url = Some(smtp_url);
    })
    .await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let address = "alice@example.org";
    let trigger = add_verified_email_trigger(api, &alice, &sink, address).await;
    let before = sink.stop().await;
    assert_eq!(before.len(), 1, "only the verification e-mail: {before:#?}");

    let content = "Renew the passport";
    add_item(api, &alice, &due_a_minute_ago(content)).await;
    // triggered, rendered, tried and postponed
    assert_tried_and_pending(&server, &alice, &EMAIL_DELIVERY).await;

    let sink = SmtpSink::start_on(port).await;
    let items = wait_finished(api, &alice, 1, 1).await;
    assert_eq!(attempts(&items[0]), vec![email_attempt(&trigger)], "{}", items[0]);
    server.settle(&EMAIL_DELIVERY).await;
    let mails = sink.stop().await;
    assert_eq!(mails.len(), 1, "exactly one e-mail after the restart: {mails:#?}");
    assert!(mails[0].is_triggered_item(), "{:?}", mails[0].data);
    assert_eq!(mails[0].to, vec![address.to_owned()]);
    assert!(mails[0].text().contains(content), "{:?}", mails[0].text());
}

/// §7.3: a permanent rejection (SMTP 5xx) is recorded at once as `EmailResultError`, with
/// no automatic retry, even with retries left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permanent_smtp_rejection_is_recorded_without_retries() {
    let sink = SmtpSink::start().await;
    let smtp_url = sink.url();
    let server = Server::start_on_manual_clock(|s| {
        s.looper_period = 1;
        s.looper_retry_delay_us = 100_000;
        s.looper_retry_amount = 7;
        s.smtp_url = Some(smtp_url);
    })
    .await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let trigger = add_verified_email_trigger(api, &alice, &sink, "alice@example.org").await;
    sink.rules.reject.store(true, Ordering::SeqCst);

    add_item(api, &alice, &due_a_minute_ago("Refused by the mail server")).await;
    let items = wait_finished(api, &alice, 1, 1).await;
    let found = attempts(&items[0]);
    assert_eq!(found.len(), 1, "{}", items[0]);
    assert_eq!(found[0]["tag"], "EmailTriggerAttempt");
    assert_eq!(found[0]["contents"][0], json!(trigger));
    assert_eq!(found[0]["contents"][1]["tag"], "EmailResultError");
    let reason = found[0]["contents"][1]["contents"].as_str().unwrap_or("");
    assert!(reason.contains("550"), "the reason names the rejection: {reason:?}");
    // retries would come after 0.1 s, 0.2 s, 0.4 s …, at most 10 minutes: none happens
    // when the workers' clock is an hour later
    server.advance_clock(Duration::from_secs(3600));
    server.settle(&[Worker::Emailer]).await;
    assert_eq!(sink.rules.rejected.load(Ordering::SeqCst), 1, "one attempt, no retry");
    assert!(sink.item_mails().is_empty());
}

/// §7.2, §7.4: the target inbox service is down when the item triggers; the delivery is
/// retried and lands exactly once when the service is back on the same address.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_down_then_up_delivers_once() {
    let target = InboxService::start(tempfile::tempdir().unwrap(), 0).await;
    let port = target.port;
    let carol = target.api.user("carol").await;
    let (secret, _) = target.api.add_key(&carol, "scheduler", &["PermitAdd"]).await;

    let server = Server::start_with(|s| {
        s.looper_period = 1;
        s.looper_retry_delay_us = 200_000;
        s.looper_retry_amount = 7;
    })
    .await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let trigger = add_inbox_trigger(api, &alice, &target.api.base, "carol", &secret).await;
    let dir = target.stop().await;

    let content = "Book the train tickets";
    add_item(api, &alice, &due_a_minute_ago(content)).await;
    // triggered, tried and postponed
    assert_tried_and_pending(&server, &alice, &INBOX_DELIVERY).await;

    let target = InboxService::start(dir, port).await;
    let items = wait_finished(api, &alice, 1, 1).await;
    let delivered = inbox_items(&target.api, &carol).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered[0]["contents"], text_item(content));
    let inbox_id = delivered[0]["id"].as_str().unwrap();
    assert_eq!(attempts(&items[0]), vec![inbox_attempt(&trigger, inbox_id)]);

    server.settle(&INBOX_DELIVERY).await;
    assert_eq!(inbox_items(&target.api, &carol).await.len(), 1, "delivered twice");
    target.stop().await;
}

/// §5.2, §7.5, §16: the binary is killed while 50 inbox deliveries are in flight (the
/// target has stored items whose answers the scheduler has not seen yet); after a restart
/// every item is triggered exactly once and reaches the inbox exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_delivery_neither_loses_nor_duplicates() {
    const N: usize = 50;
    let target = InboxService::start(tempfile::tempdir().unwrap(), 0).await;
    let dana = target.api.user("dana").await;
    let (secret, _) = target.api.add_key(&dana, "scheduler", &["PermitAdd"]).await;
    let target_addr = target.api.base.strip_prefix("http://").unwrap().to_owned();
    let proxy = GateProxy::start(target_addr, false).await;

    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut scheduler = Proc::start(
        data.path(),
        logs.path(),
        Services::SchedulerOnly,
        &["--looper-period", "1", "--looper-retry-delay-us", "100000"],
    )
    .await;
    let alice = scheduler.api.user("alice").await;
    let trigger = add_inbox_trigger(&scheduler.api, &alice, &proxy.url(), "dana", &secret).await;

    let contents: Vec<String> = (0..N).map(|i| format!("crash test item {i:02}")).collect();
    let added: Map<String, Value> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                i.to_string(),
                json!({"contents": due_since_yesterday(c), "created": "2024-01-01T00:00:00Z"}),
            )
        })
        .collect();
    let answer = scheduler
        .api
        .post("/sync", &alice, &json!({"syncRequestTickles": {"added": added}}))
        .await
        .expect_json(200);
    let acked = answer["syncResponseTickles"]["client-added"]
        .as_object()
        .unwrap_or_else(|| panic!("no client-added in {answer}"));
    assert_eq!(acked.len(), N);

    // kill as soon as the first items are in the inbox: their answers are held back, so
    // the scheduler cannot have recorded them
    let deadline = Instant::now() + WAIT;
    while target.api.size(&dana).await == 0 {
        assert!(
            Instant::now() < deadline,
            "no delivery reached the inbox:\n{}",
            scheduler.log_text()
        );
        tokio::time::sleep(Duration::from_millis(5)).await; // poll
    }
    scheduler.kill_9();
    let status = scheduler.wait_exit().await;
    assert!(!status.success(), "killed, yet {status:?}");
    let at_kill = target.api.size(&dana).await;
    eprintln!("{at_kill} of {N} items were in the inbox when the scheduler was killed");
    proxy.open();

    // at `trace`, the workers log their passes
    let scheduler = Proc::start(
        data.path(),
        logs.path(),
        Services::SchedulerOnly,
        &[
            "--looper-period",
            "1",
            "--looper-retry-delay-us",
            "100000",
            "--log-level",
            "trace",
        ],
    )
    .await;
    let items = eventually_within(
        Duration::from_secs(40),
        &format!("{N} triggered items with one finished attempt each"),
        async || {
            let items = triggered_items(&scheduler.api, &alice).await;
            let done = items.len() == N && items.iter().all(|i| attempts(i).len() == 1);
            done.then_some(items)
        },
    )
    .await;
    scheduler.settle(&INBOX_DELIVERY).await;

    // every scheduled item triggered exactly once
    assert_eq!(
        scheduler.api.get("/scheduler/uuids", &alice).await.expect_json(200),
        json!([]),
        "every item triggered"
    );
    let items_now = triggered_items(&scheduler.api, &alice).await;
    assert_eq!(items_now.len(), N, "a second triggered copy appeared");
    let triggered_contents: HashSet<String> = items
        .iter()
        .map(|i| i["contents"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(triggered_contents, contents.iter().cloned().collect::<HashSet<_>>());

    // the inbox holds each content exactly once
    let delivered = inbox_items(&target.api, &dana).await;
    let by_id: HashMap<String, String> = delivered
        .iter()
        .map(|i| {
            let data = i["contents"]["data"].as_str().unwrap();
            let bytes = base64::engine::general_purpose::STANDARD.decode(data).unwrap();
            (i["id"].as_str().unwrap().to_owned(), String::from_utf8(bytes).unwrap())
        })
        .collect();
    let mut delivered_contents: Vec<&String> = by_id.values().collect();
    delivered_contents.sort();
    let mut expected: Vec<&String> = contents.iter().collect();
    expected.sort();
    assert_eq!(
        delivered.len(),
        N,
        "inbox items: {delivered_contents:?}\nscheduler log:\n{}",
        scheduler.log_text()
    );
    assert_eq!(delivered_contents, expected, "duplicates or losses in the inbox");

    // each attempt names the inbox item that carries its content
    for item in &items {
        let content = item["contents"]["content"].as_str().unwrap();
        let attempt = attempts(item).remove(0);
        let inbox_id = attempt["contents"][1]["contents"]
            .as_str()
            .unwrap_or_else(|| panic!("{attempt}"));
        assert_eq!(attempt, inbox_attempt(&trigger, inbox_id));
        assert_eq!(by_id.get(inbox_id).map(String::as_str), Some(content), "{attempt}");
    }
    drop(proxy);
    target.stop().await;
}

/// `POST /sync` adding `contents` as new items; asserts they were all accepted.
async fn sync_add(api: &Api, auth: &Auth, contents: &[Value]) {
    let added: Map<String, Value> = contents
        .iter()
        .enumerate()
        .map(|(i, c)| (i.to_string(), json!({"contents": c, "created": "2024-01-01T00:00:00Z"})))
        .collect();
    let answer = api
        .post("/sync", auth, &json!({"syncRequestTickles": {"added": added}}))
        .await
        .expect_json(200);
    let acked = answer["syncResponseTickles"]["client-added"]
        .as_object()
        .unwrap_or_else(|| panic!("no client-added in {answer}"));
    assert_eq!(acked.len(), contents.len());
}

/// Adds a due item to an account with one trigger and no other items; waits (at most a
/// minute) until its delivery finished; answers the triggered items and how long it took.
async fn add_and_time_delivery(api: &Api, auth: &Auth, content: &str) -> (Vec<Value>, Duration) {
    let started = Instant::now();
    add_item(api, auth, &due_a_minute_ago(content)).await;
    let items = eventually_within(Duration::from_secs(60), "the delivery", async || {
        let items = triggered_items(api, auth).await;
        (items.len() == 1 && attempts(&items[0]).len() == 1).then_some(items)
    })
    .await;
    let delay = started.elapsed();
    eprintln!("{content:?} was delivered {delay:?} after it was added");
    (items, delay)
}

/// A stranger's scheduler account with an inbox trigger, registered from an address of its
/// own (through the trusted proxy: registrations are limited per address).
async fn stranger(api: &Api, n: usize) -> Auth {
    let name = format!("stranger{n}");
    let register = api
        .request(Method::POST, "/register", &Auth::None)
        .header("X-Forwarded-For", format!("10.9.{}.{}", n / 200, n % 200 + 1))
        .json(&json!({"name": name, "password": "stranger-password"}));
    api.send(register).await.expect_registered();
    api.login_ok(&name, "stranger-password").await
}

/// Issue 29 point 4: bounds no stranger can fill. Slow targets that hold every request (the
/// client gives up after 10 s) never keep another account's delivery waiting: a stranger's
/// slow service on another port of the address of that account's inbox (per socket address,
/// not per address), and 4 or 10 strangers with 12 slow targets each (the overall bound
/// never keeps out an account with nothing in flight). Each time the other account's item
/// arrives while the strangers' requests are still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn strangers_slow_targets_never_keep_another_account_waiting() {
    for (strangers, same_address) in [(1, true), (4, false), (10, false)] {
        let counters: (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
        let hold = |r: &Seen| match r.path.ends_with("/login") {
            true => login_ok(),
            false => Answer::Hold,
        };
        let mut slow = Vec::new();
        for a in 0..12 {
            // beside the server's own inbox on 127.0.0.1, or on addresses of their own
            let ip = if same_address {
                "127.0.0.1".to_owned()
            } else {
                format!("127.0.0.{}", a + 2)
            };
            slow.push(ScriptedInbox::start_at(&ip, hold, counters.clone()).await);
        }
        let (holding, _) = counters;
        let server = Server::start_with(|s| {
            fast_workers(s);
            s.trusted_proxies = vec![pigeonhole::config::ProxyNet::parse("127.0.0.1").unwrap()];
        })
        .await;
        let api = &server.scheduler;
        let bob = server.api.user("bob").await;
        let (secret, _) = server.api.add_key(&bob, "scheduler", &["PermitAdd"]).await;
        let quick = api.user("quick").await;
        add_inbox_trigger(api, &quick, &server.api.base, "bob", &secret).await;
        // every stranger and trigger first (logins are slow in a debug build), then their
        // items together: a held request ends after 10 s, so all are held at once
        let mut auths = Vec::new();
        for n in 0..strangers {
            let auth = stranger(api, n).await;
            for (t, target) in slow.iter().enumerate() {
                add_inbox_trigger(api, &auth, &format!("{}/s{n}/t{t}", target.url()), "stranger", "00ff").await;
            }
            auths.push(auth);
        }
        for (n, auth) in auths.iter().enumerate() {
            let contents: Vec<Value> = (0..3).map(|i| due_since_yesterday(&format!("stuck {n}.{i}"))).collect();
            sync_add(api, auth, &contents).await;
        }
        // the strangers hold what they may: 4 per slow service, 8 per account, 32 overall
        let held = (strangers * 8).min(32).min(12 * 4);
        eventually("the strangers' slow targets holding their places", async || {
            (holding.load(Ordering::SeqCst) >= held).then_some(())
        })
        .await;
        let (items, delay) = add_and_time_delivery(api, &quick, "Not behind strangers").await;
        assert_eq!(inbox_items(&server.api, &bob).await.len(), 1, "{items:?}");
        eprintln!("{strangers} stranger(s), slow targets on the inbox's address: {same_address}: another account's delivery took {delay:?}");
        assert!(
            holding.load(Ordering::SeqCst) >= held,
            "delivered while the strangers' requests were held"
        );
    }
}

/// §7.4: a target that never answers its item POSTs (the client gives up after 10 s) holds
/// up neither another account's delivery nor more than a few connections: the other
/// account's item arrives within a few seconds while the slow target still has dozens of
/// deliveries pending. (Requests to one socket address are bounded too, whoever sends them:
/// `strangers_slow_targets_never_keep_another_account_waiting` puts the slow target beside
/// the other account's inbox.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_target_does_not_delay_another_account() {
    let hold = |r: &Seen| match r.path.as_str() {
        "/login" => login_ok(),
        _ => Answer::Hold,
    };
    let slow = ScriptedInbox::start_at("127.0.0.2", hold, Default::default()).await;
    let server = Server::start_with(fast_workers).await;
    let api = &server.scheduler;
    let bob = server.api.user("bob").await;
    let (secret, _) = server.api.add_key(&bob, "scheduler", &["PermitAdd"]).await;
    let quick = api.user("quick").await;
    let quick_trigger = add_inbox_trigger(api, &quick, &server.api.base, "bob", &secret).await;
    let stuck = api.user("stuck").await;
    add_inbox_trigger(api, &stuck, &slow.url(), "stuck", "00ff").await;

    // more deliveries than any batch: each of them hangs until the client's timeout
    let contents: Vec<Value> = (0..40).map(|i| due_since_yesterday(&format!("stuck {i}"))).collect();
    sync_add(api, &stuck, &contents).await;
    eventually("the slow target holding deliveries", async || {
        (slow.holding.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;

    let (items, delay) = add_and_time_delivery(api, &quick, "Not stuck behind anybody").await;
    let delivered = inbox_items(&server.api, &bob).await;
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    let inbox_id = delivered[0]["id"].as_str().unwrap();
    assert_eq!(attempts(&items[0]), vec![inbox_attempt(&quick_trigger, inbox_id)]);
    assert!(
        delay < Duration::from_secs(5),
        "delivered {delay:?} after it was added, behind a target that answers after 10 s"
    );
    assert!(
        triggered_items(api, &stuck)
            .await
            .iter()
            .all(|i| attempts(i).is_empty()),
        "the slow target's deliveries are all still pending"
    );
    let most = slow.most_held.load(Ordering::SeqCst);
    assert!(most <= 4, "{most} requests at once to one target");
}

/// §7.4: a mail exchange that never answers for one account's domain (the client gives up
/// after 10 s) does not delay another account's e-mail.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_mail_exchange_does_not_delay_another_account() {
    let sink = SmtpSink::start().await;
    let server = mailing_server(&sink).await;
    let api = &server.scheduler;
    let stuck = api.user("stuck").await;
    add_verified_email_trigger(api, &stuck, &sink, "stuck@stalled.example").await;
    let quick = api.user("quick").await;
    let quick_trigger = add_verified_email_trigger(api, &quick, &sink, "quick@example.org").await;
    *sink.rules.stall_domain.lock().unwrap() = Some("stalled.example".into());

    // more e-mails than any batch: each of them hangs until the client's timeout
    let contents: Vec<Value> = (0..20).map(|i| due_since_yesterday(&format!("stuck {i}"))).collect();
    sync_add(api, &stuck, &contents).await;
    eventually("the mail exchange stalling e-mails", async || {
        (sink.rules.stalled.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;

    let (items, delay) = add_and_time_delivery(api, &quick, "Not stuck behind anybody").await;
    assert_eq!(attempts(&items[0]), vec![email_attempt(&quick_trigger)]);
    let mails = sink.item_mails();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_eq!(mails[0].to, vec!["quick@example.org".to_owned()]);
    assert!(
        delay < Duration::from_secs(5),
        "sent {delay:?} after its item was added, behind a mail exchange that answers after 10 s"
    );
    let stalled = sink.rules.stalled.load(Ordering::SeqCst);
    assert!(stalled <= 4, "{stalled} e-mails at once to one domain");
}

/// §7.4: a 503 and a 429 with `Retry-After` (seconds, then an HTTP date) postpone the retry
/// at least that long, although the back-off alone would retry after 0.1 s and 0.2 s; every
/// attempt carries the same `Idempotency-Key` (§7.5). The workers run on a manual clock that
/// the test moves: the waits are measured on it, not waited for.
/// Issue 18: back-off is kept per destination host, not only per delivery. Ten deliveries
/// to a host that answers 503: after the first failures the host rests, and its other
/// deliveries wait for the rest instead of each trying it (at most the four in flight at
/// once were sent); when the rest is over, the host is tried again by at most four.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_host_rests_and_its_other_deliveries_wait_with_it() {
    let inbox = ScriptedInbox::start(|r| match r.path.as_str() {
        "/login" => login_ok(),
        _ => Answer::Reply(503, vec![("retry-after", "60".into())], String::new()),
    })
    .await;
    let server = Server::start_on_manual_clock(fast_workers).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    add_inbox_trigger(api, &alice, &inbox.url(), "alice", "00ff").await;
    let contents: Vec<Value> = (0..10).map(|i| due_a_minute_ago(&format!("item {i}"))).collect();
    sync_add(api, &alice, &contents).await;
    let tries = || inbox.requests("POST", "/inbox/item").len();
    server.settle(&INBOX_DELIVERY).await;
    let first = tries();
    assert!(
        (1..=4).contains(&first),
        "{first} of 10 deliveries tried a host that had failed"
    );
    // still resting a second before the minute is over
    server.advance_clock(Duration::from_secs(59));
    server.settle(&[Worker::TriggeredInboxItemSender]).await;
    assert_eq!(tries(), first, "tried again while the host rests");
    server.advance_clock(Duration::from_secs(2));
    server.settle(&[Worker::TriggeredInboxItemSender]).await;
    let second = tries() - first;
    assert!((1..=4).contains(&second), "{second} tries when the rest was over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retry_after_is_respected() {
    let posts = Arc::new(AtomicUsize::new(0));
    let p = posts.clone();
    let inbox = ScriptedInbox::start(move |r| match r.path.as_str() {
        "/login" => login_ok(),
        _ => match p.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::Reply(503, vec![("retry-after", "2".into())], String::new()),
            1 => {
                let at = std::time::SystemTime::now() + Duration::from_secs(3);
                Answer::Reply(429, vec![("retry-after", httpdate::fmt_http_date(at))], String::new())
            }
            _ => item_added(),
        },
    })
    .await;
    let server = Server::start_on_manual_clock(fast_workers).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let trigger = add_inbox_trigger(api, &alice, &inbox.url(), "alice", "00ff").await;
    add_item(api, &alice, &due_a_minute_ago("Come back later")).await;
    let tries = || inbox.requests("POST", "/inbox/item");
    // the clock moves on by `by`; answers the POSTs the sender's next pass has made by then
    let later = async |by: Duration| {
        server.advance_clock(by);
        server.settle(&[Worker::TriggeredInboxItemSender]).await;
        tries().len()
    };
    server.settle(&INBOX_DELIVERY).await;
    assert_eq!(tries().len(), 1, "the first attempt, answered 503 with Retry-After: 2");
    assert_eq!(later(Duration::from_millis(1900)).await, 1, "retried before 2 s");
    assert_eq!(later(Duration::from_millis(200)).await, 2, "not retried after 2 s");
    // the date has whole seconds: 2 to 3 s after the 429 was answered
    assert_eq!(later(Duration::from_millis(1900)).await, 2, "retried before the date");
    assert_eq!(
        later(Duration::from_millis(1200)).await,
        3,
        "not retried after the date"
    );
    let items = wait_finished(api, &alice, 1, 1).await;
    let found = attempts(&items[0]);
    assert_eq!(found[0]["contents"][0], json!(trigger), "{found:?}");
    assert_eq!(found[0]["contents"][1]["tag"], "InboxAdditionSuccess", "{found:?}");

    let tries = tries();
    assert_eq!(tries.len(), 3, "{tries:#?}");
    let keys: HashSet<_> = tries
        .iter()
        .map(|t| t.headers.get("idempotency-key").cloned())
        .collect();
    assert_eq!(keys.len(), 1, "one Idempotency-Key for every attempt: {keys:?}");
    for t in &tries {
        let body: Value = serde_json::from_str(&t.body).expect("a JSON body");
        assert_eq!(body, text_item("Come back later"));
    }
    assert!(keys.iter().all(Option::is_some), "{keys:?}");
}

/// README decision 17, §6.3, §7.4: redirects are never followed. A trigger whose login
/// answers 307 is refused (`Left`), and a delivery answered with 307 is a permanent failure;
/// the place the redirects point to never hears of the access key, the token or the item.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redirects_are_not_followed() {
    let elsewhere = ScriptedInbox::start(|r| match r.path.as_str() {
        "/login" => login_ok(),
        _ => item_added(),
    })
    .await;
    let away = elsewhere.url();
    let redirect = move |path: &str| Answer::Reply(307, vec![("location", format!("{away}{path}"))], String::new());
    let redirect_login = redirect.clone();
    let login_elsewhere = ScriptedInbox::start(move |r| redirect_login(&r.path)).await;
    let item_elsewhere = ScriptedInbox::start(move |r| match r.path.as_str() {
        "/login" => login_ok(),
        path => redirect(path),
    })
    .await;
    let server = Server::start_with(fast_workers).await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;

    let v = api
        .post(
            "/trigger/inbox",
            &alice,
            &json!({"addInboxTriggerUrl": login_elsewhere.url(), "addInboxTriggerUsername": "alice",
                    "addInboxTriggerAccessKey": "00ff"}),
        )
        .await
        .expect_json(200);
    let reason = v["Left"]
        .as_str()
        .unwrap_or_else(|| panic!("the trigger was stored: {v}"));
    // the owner is told only that this is no working inbox (the cause is in the log)
    assert_eq!(reason, format!("no working inbox service at {}", login_elsewhere.url()));
    assert_eq!(login_elsewhere.requests("POST", "/login").len(), 1);
    assert!(api.triggers(&alice).await.is_empty());

    let trigger = add_inbox_trigger(api, &alice, &item_elsewhere.url(), "alice", "00ff").await;
    add_item(api, &alice, &due_a_minute_ago("Stay where you are")).await;
    let items = wait_finished(api, &alice, 1, 1).await;
    let found = attempts(&items[0]);
    assert_eq!(found[0]["contents"][0], json!(trigger), "{found:?}");
    assert_eq!(found[0]["contents"][1]["tag"], "InboxAdditionFailure", "{found:?}");
    let reason = found[0]["contents"][1]["contents"].as_str().unwrap_or("");
    // on loopback the owner reads no cause (no oracle; outbound.rs's unit test `statuses`
    // shows the reason the log and a public target's owner read: "… (redirects are not
    // followed)")
    assert_eq!(
        reason, "not delivered to the inbox at 127.0.0.1 (this server's log has the cause)",
        "{found:?}"
    );
    assert_eq!(
        item_elsewhere.requests("POST", "/inbox/item").len(),
        1,
        "a redirect is a permanent failure, not retried"
    );
    assert!(
        elsewhere.all_requests().is_empty(),
        "the redirect target was contacted: {:#?}",
        elsewhere.all_requests()
    );
}

/// Issue 29 point 6: no oracle through inbox triggers either. Once a trigger exists, what its
/// owner reads of a failed delivery to a loopback or private address is one text whatever
/// the cause (a 403, a service that hangs up without answering); the log has the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inbox_delivery_failures_on_the_lan_read_alike() {
    let refusing = ScriptedInbox::start(|r| match r.path.as_str() {
        "/login" => login_ok(),
        _ => Answer::Reply(403, vec![], "go away".into()),
    })
    .await;
    // logs in, then hangs up on every item POST without an answer
    let hangs_up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hangs_up_url = format!("http://{}", hangs_up.local_addr().unwrap());
    let _hanging_up = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = hangs_up.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let n = stream.read(&mut request).await.unwrap_or(0);
                if String::from_utf8_lossy(&request[..n]).starts_with("POST /login") {
                    let answer =
                        "HTTP/1.1 204 No Content\r\nSet-Cookie: JWT-Cookie=t; Path=/\r\nConnection: close\r\n\r\n";
                    let _ = stream.write_all(answer.as_bytes()).await;
                }
            });
        }
    });
    let server = Server::start_with(|s| {
        fast_workers(s);
        s.looper_retry_amount = 1;
    })
    .await;
    let api = &server.scheduler;
    let mallory = api.user("mallory").await;
    add_inbox_trigger(api, &mallory, &refusing.url(), "mallory", "00ff").await;
    add_inbox_trigger(api, &mallory, &hangs_up_url, "mallory", "00ff").await;
    add_item(api, &mallory, &due_a_minute_ago("probe")).await;
    let items = wait_finished(api, &mallory, 1, 2).await;
    let reasons: Vec<String> = attempts(&items[0])
        .iter()
        .map(|a| {
            assert_eq!(a["contents"][1]["tag"], "InboxAdditionFailure", "{a}");
            a["contents"][1]["contents"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(
        reasons, ["not delivered to the inbox at 127.0.0.1 (this server's log has the cause)"; 2],
        "a 403 and a closed port read alike"
    );
}

/// The log without terminal colour codes.
fn plain_log(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI sequence: ESC [ parameters final-byte
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The lines of `log` at `level` that contain every one of `needles`.
fn log_lines<'a>(log: &'a str, level: &str, needles: &[&str]) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(level))
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .collect()
}

/// The verification key (32 hex digits after `Key: `) of the one `.eml` file in `outbox`.
fn outbox_key(outbox: &std::path::Path) -> Option<String> {
    let entries = std::fs::read_dir(outbox).ok()?;
    for entry in entries.flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if let Some(at) = text.find("Key: ") {
            return Some(text[at + 5..].chars().take(32).collect());
        }
    }
    None
}

/// §7, cli.md: the binary at `--log-level info` logs every trigger (item, owner), every
/// delivery attempt and its outcome (item, delivery, target) and every e-mail sent at
/// `INFO`, a delivery that fails for good at `WARN` with the reason, and no secret: no
/// access key, password, token or verification key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_and_triggers_are_logged_without_secrets() {
    let target = InboxService::start(tempfile::tempdir().unwrap(), 0).await;
    let carol = target.api.user("carol").await;
    let (can_add, _) = target.api.add_key(&carol, "scheduler", &["PermitAdd"]).await;
    let (cannot_add, _) = target.api.add_key(&carol, "read only", &["PermitShow"]).await;

    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let scheduler = Proc::start(
        data.path(),
        logs.path(),
        Services::SchedulerOnly,
        &[
            "--log-level",
            "info",
            "--looper-period",
            "1",
            "--looper-retry-delay-us",
            "100000",
        ],
    )
    .await;
    let api = &scheduler.api;
    let alice = api.user("alice").await;
    let account = api.get("/account", &alice).await.expect_json(200)["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = target.api.base.clone();
    let good = add_inbox_trigger(api, &alice, &url, "carol", &can_add).await;
    let bad = add_inbox_trigger(api, &alice, &url, "carol", &cannot_add).await;
    let email_trigger = api
        .post(
            "/trigger/email",
            &alice,
            &json!({"addEmailTrigger": "alice@example.org"}),
        )
        .await
        .expect_json(200);
    let email_trigger = email_trigger.as_str().unwrap().to_owned();
    let verification_key = eventually("the verification e-mail", async || {
        outbox_key(&data.path().join("outbox"))
    })
    .await;

    let item = add_item(api, &alice, &due_a_minute_ago("Log me")).await;
    let items = wait_finished(api, &alice, 1, 2).await;
    let copy = items[0]["id"].as_str().unwrap().to_owned();
    let found = attempts(&items[0]);
    let outcome = |trigger: &str| {
        found
            .iter()
            .find(|a| a["contents"][0] == json!(trigger))
            .unwrap_or_else(|| panic!("no attempt of {trigger}: {found:?}"))["contents"][1]
            .clone()
    };
    let added = outcome(&good);
    assert_eq!(added["tag"], "InboxAdditionSuccess", "{found:?}");
    let inbox_item = added["contents"].as_str().unwrap().to_owned();
    let failure = outcome(&bad);
    assert_eq!(failure["tag"], "InboxAdditionFailure", "{found:?}");
    let reason = failure["contents"].as_str().unwrap().to_owned();
    // the target is on loopback: the owner reads no cause (no oracle), the log has it
    assert_eq!(
        reason,
        "not delivered to the inbox at 127.0.0.1 (this server's log has the cause)"
    );

    // a verification e-mail line, and the lines written after the attempts finished
    let log = eventually("the log lines", async || {
        let log = plain_log(&scheduler.log_text());
        let wanted = [
            log_lines(&log, "INFO", &[&item, &account, &copy]),
            log_lines(&log, "INFO", &[&copy, &url, "delivering"]),
            log_lines(&log, "INFO", &[&copy, &url, &inbox_item]),
            log_lines(&log, "WARN", &[&copy, &url, "401 Unauthorized to POST /inbox/item"]),
            log_lines(&log, "INFO", &[&email_trigger, "alice@example.org", "sent"]),
        ];
        wanted.iter().all(|l| !l.is_empty()).then_some(log)
    })
    .await;
    let delivering = log_lines(&log, "INFO", &[&copy, &url, "delivering"]);
    assert!(
        delivering.iter().all(|l| l.contains("delivery ")),
        "the attempt lines name the delivery: {delivering:#?}"
    );
    let Auth::Bearer(token) = &alice else {
        panic!("a bearer token")
    };
    for (name, secret) in [
        ("access key", can_add.as_str()),
        ("access key", cannot_add.as_str()),
        ("password", "alice-password"),
        ("token", token.as_str()),
        ("verification key", verification_key.as_str()),
    ] {
        assert!(!log.contains(secret), "the log shows a {name}:\n{log}");
    }
    drop(scheduler);
    target.stop().await;
}

/// §8.1: with a user and password in `smtp://`, STARTTLS is required: against a mail server
/// that offers AUTH but not STARTTLS the credentials are never sent, nothing is mailed, and
/// the failure is transient (the e-mail is tried again).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn smtp_credentials_are_never_sent_without_tls() {
    let sink = SmtpSink::start().await;
    sink.rules.offer_auth.store(true, Ordering::SeqCst);
    let smtp_url = format!("smtp://mailer:s%40cret@127.0.0.1:{}", sink.port);
    let server = Server::start_with(|s| {
        fast_workers(s);
        s.smtp_url = Some(smtp_url);
    })
    .await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    api.post(
        "/trigger/email",
        &alice,
        &json!({"addEmailTrigger": "alice@example.org"}),
    )
    .await
    .expect_json(200);
    // the verification e-mail is attempted, fails, and is attempted again
    let auths = || sink.rules.auths.load(Ordering::SeqCst);
    let connections = || sink.rules.connections.load(Ordering::SeqCst);
    eventually("AUTH or a second attempt at the verification e-mail", async || {
        (auths() > 0 || connections() >= 2).then_some(())
    })
    .await;
    assert_eq!(auths(), 0, "AUTH was sent in clear");
    assert!(sink.mails().is_empty(), "{:#?}", sink.mails());
    assert!(connections() >= 2, "tried again: a transient failure");
}

/// §16, §7.5: a graceful stop does not wait for deliveries that hang (they are abandoned and
/// stay pending); after a restart each resumes with its own `Idempotency-Key` and is
/// delivered exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stopping_abandons_hanging_deliveries_which_resume_once() {
    const N: usize = 10;
    let released = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(Mutex::new(Vec::new()));
    let (r, a) = (released.clone(), answered.clone());
    let inbox = ScriptedInbox::start(move |req| match req.path.as_str() {
        "/login" => login_ok(),
        _ if r.load(Ordering::SeqCst) => {
            let key = req
                .headers
                .get("idempotency-key")
                .map(|k| k.to_str().unwrap().to_owned());
            a.lock().unwrap().push(key);
            item_added()
        }
        _ => Answer::Hold,
    })
    .await;
    let server = Server::start_with(fast_workers).await;
    let alice = server.scheduler.user("alice").await;
    add_inbox_trigger(&server.scheduler, &alice, &inbox.url(), "alice", "00ff").await;
    let contents: Vec<Value> = (0..N).map(|i| due_since_yesterday(&format!("held {i}"))).collect();
    sync_add(&server.scheduler, &alice, &contents).await;
    // all four deliveries one target gets at once hang: no other starts before the stop (one
    // that was still logging in when the target began to answer would be accepted, and
    // perhaps not recorded before the stop, then sent again after it)
    eventually("four deliveries hanging at the target", async || {
        (inbox.holding.load(Ordering::SeqCst) == 4).then_some(())
    })
    .await;

    // from now on the target answers; the requests it holds stay unanswered
    released.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let server = server.restart_with(|_| {}).await;
    let stopped_in = started.elapsed();
    assert!(
        stopped_in < Duration::from_secs(5),
        "stopping and starting again took {stopped_in:?}: the stop waited for hanging deliveries"
    );
    let items = wait_finished(&server.scheduler, &alice, N, 1).await;
    for item in &items {
        assert_eq!(
            attempts(item)[0]["contents"][1]["tag"],
            "InboxAdditionSuccess",
            "{item}"
        );
    }
    let keys: Vec<Option<String>> = answered.lock().unwrap().clone();
    let distinct: HashSet<&Option<String>> = keys.iter().collect();
    // A delivery whose answer arrived as the stop abandoned it is sent again after the
    // restart (scheduler.md §7.5), with the same key: a Pigeonhole inbox stores it once.
    assert!(keys.len() >= N, "every item accepted: {keys:?}");
    assert_eq!(distinct.len(), N, "one Idempotency-Key per delivery: {keys:?}");
    let sent: HashSet<_> = inbox
        .requests("POST", "/inbox/item")
        .iter()
        .map(|r| r.headers.get("idempotency-key").cloned())
        .collect();
    assert_eq!(sent.len(), N, "a resumed delivery keeps its Idempotency-Key");
}

/// The outbound policy (`--outbound-allow`, issue 18): without `loopback`, neither a new
/// inbox trigger nor a delivery reaches an inbox on this machine, by its address or by a name
/// that resolves to it; the trigger's owner is told only that there is no working inbox
/// there, and the delivery fails for good with the policy's reason. Nothing is sent: the
/// inbox sees no request. (Special ranges such as link-local are refused whatever the policy:
/// unit tests of `outbound::classify`, since tests send nothing beyond loopback.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outbound_policy_refuses_an_address_before_connecting() {
    let inbox = ScriptedInbox::start(|r| match r.path.as_str() {
        "/login" => login_ok(),
        _ => item_added(),
    })
    .await;
    let server = Server::start_with(|s| {
        fast_workers(s);
        s.outbound_resolve = vec![("inbox.test".into(), "127.0.0.1".parse().unwrap())];
    })
    .await;
    let alice = server.scheduler.user("alice").await;
    // allowed by default (a home server's inbox may be on this machine): a trigger by name
    let named = inbox.url().replace("127.0.0.1", "inbox.test");
    add_inbox_trigger(&server.scheduler, &alice, &named, "alice", "00ff").await;
    let logins = inbox.requests("POST", "/login").len();
    assert_eq!(logins, 1, "the trigger's check logged in through the name");

    let server = server
        .restart_with(|s| {
            s.outbound_allow = pigeonhole::config::OutboundAllow::parse(&["private,public".into()]).unwrap()
        })
        .await;
    let api = &server.scheduler;
    let alice = api.login_ok("alice", "alice-password").await;
    for url in [inbox.url(), named.clone()] {
        let v = api
            .post(
                "/trigger/inbox",
                &alice,
                &json!({"addInboxTriggerUrl": url, "addInboxTriggerUsername": "alice",
                        "addInboxTriggerAccessKey": "00ff"}),
            )
            .await
            .expect_json(200);
        assert_eq!(v["Left"], format!("no working inbox service at {url}"), "{v}");
    }
    assert_eq!(api.triggers(&alice).await.len(), 1);
    add_item(api, &alice, &due_a_minute_ago("Not through the policy")).await;
    let items = wait_finished(api, &alice, 1, 1).await;
    let found = attempts(&items[0]);
    assert_eq!(found[0]["contents"][1]["tag"], "InboxAdditionFailure", "{found:?}");
    let reason = found[0]["contents"][1]["contents"].as_str().unwrap_or("");
    assert!(reason.contains("outbound policy"), "{reason:?}");
    assert_eq!(inbox.requests("POST", "/login").len(), logins, "nothing was sent");
    assert!(inbox.requests("POST", "/inbox/item").is_empty());
}

/// Issue 18: the bounds on deliveries in flight count destination hosts, addresses and
/// accounts, not URL strings. A stranger's 12 inbox triggers on one slow host (12 paths) hold
/// at most 4 requests there; on 12 names of one address, at most 4 (the bound per address);
/// on 12 names of 12 addresses (loopback addresses 127.0.0.2–13), at most 8 (the account's
/// share of 32). The other account's inbox is on 127.0.0.1. Each time another account's
/// delivery is done while the stranger's are all still held, with none of them finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strangers_slow_hosts_take_a_bounded_share_of_the_deliveries() {
    for (names, addresses, bound) in [(1, 1, 4), (12, 1, 4), (12, 12, 8)] {
        let counters: (Arc<AtomicUsize>, Arc<AtomicUsize>) = Default::default();
        let mut slow = Vec::new();
        for a in 0..addresses {
            let hold = |r: &Seen| match r.path.ends_with("/login") {
                true => login_ok(),
                false => Answer::Hold,
            };
            slow.push(ScriptedInbox::start_at(&format!("127.0.0.{}", a + 2), hold, counters.clone()).await);
        }
        let (holding, most_held) = counters;
        let names: Vec<(String, std::net::IpAddr)> = (0..names)
            .map(|h| {
                let ip = format!("127.0.0.{}", h % addresses + 2);
                (format!("slow{h}.test"), ip.parse().unwrap())
            })
            .collect();
        let hosts = names.len();
        let server = Server::start_with(|s| {
            fast_workers(s);
            s.outbound_resolve = names;
        })
        .await;
        let api = &server.scheduler;
        let bob = server.api.user("bob").await;
        let (secret, _) = server.api.add_key(&bob, "scheduler", &["PermitAdd"]).await;
        let quick = api.user("quick").await;
        add_inbox_trigger(api, &quick, &server.api.base, "bob", &secret).await;
        let stranger = api.user("stranger").await;
        for t in 0..12 {
            let h = t % hosts;
            let url = format!("http://slow{h}.test:{}/p{t}", slow[h % addresses].port);
            add_inbox_trigger(api, &stranger, &url, "stranger", "00ff").await;
        }
        let contents: Vec<Value> = (0..10).map(|i| due_since_yesterday(&format!("stuck {i}"))).collect();
        sync_add(api, &stranger, &contents).await;
        eventually("the slow hosts holding their bound", async || {
            (holding.load(Ordering::SeqCst) >= bound).then_some(())
        })
        .await;

        let (items, delay) = add_and_time_delivery(api, &quick, "Not behind a stranger").await;
        assert_eq!(inbox_items(&server.api, &bob).await.len(), 1, "{items:?}");
        eprintln!("{hosts} slow name(s) of {addresses} address(es): another account's delivery took {delay:?}");
        assert!(
            holding.load(Ordering::SeqCst) > 0,
            "done while the stranger's were held"
        );
        assert!(
            triggered_items(api, &stranger)
                .await
                .iter()
                .all(|i| attempts(i).is_empty()),
            "none of the stranger's deliveries finished"
        );
        let most = most_held.load(Ordering::SeqCst);
        assert_eq!(
            most, bound,
            "{most} requests at once to {hosts} slow name(s) of {addresses} address(es)"
        );
    }
}
