//! Crash test of the real binary (not a `cargo test`): acknowledged writes must survive
//! `kill -9` at any moment, and acknowledged deletions must not come back (README.md
//! decision 10, inbox.md §6, scheduler.md §16).
//!
//! Run with `cargo bench --bench crash` (a program of its own, no test harness). It runs the
//! release binary that `cargo bench` builds with it (`target/release/pigeonhole`), or the
//! binary named by `PIGEONHOLE_BIN`. On ONE data directory it repeatedly:
//!
//! 1. starts `pigeonhole serve` on free loopback ports and waits for `GET /pricing` on both;
//! 2. runs a concurrent write load on both services for a random 200–800 ms: inbox adds
//!    (some with `Idempotency-Key`, some with access-key headers), deletions, syncs with
//!    `added` and `deleted`, access-key creation and deletion, logins, registrations;
//!    scheduler adds (due in 2099, so they stay scheduled), edits, deletions, syncs with
//!    `added`/`changed`/`deleted`, settings changes;
//! 3. sends SIGKILL while requests are in flight;
//! 4. restarts and checks, with the tokens issued before the crashes, that every write
//!    answered 2xx is there (items with their latest acknowledged contents, server times,
//!    `created`, access keys and their secrets, `Idempotency-Key`s, tokens, accounts,
//!    settings) and that no acknowledged deletion came back.
//!
//! Each worker task owns the items it creates, so its requests on one item are sequential
//! and their order is known. A request without an answer (in flight at the kill) leaves its
//! item "uncertain": after the restart the item must be in its state from before the request
//! or in the state the request would have produced, nothing else; the observed state then
//! becomes the model. Items that nobody acknowledged (adds in flight at the kill) are
//! deleted after each check.
//!
//! Environment: `CRASH_KILLS` (default 50), `CRASH_SEED` (default random), `CRASH_WORKERS`
//! (default 6). The last line printed is `N kills, M acknowledged writes, L lost`; the exit
//! status is non-zero when something was lost, the server failed to start or to answer a
//! check, or an answer contradicted the model.

use reqwest::header::HeaderMap;
use reqwest::{Client, Method, RequestBuilder};
use serde_json::{json, Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest wait for the server to answer after a start.
const START_LIMIT: Duration = Duration::from_secs(60);
/// Longest wait for the killed (or stopped) process to exit.
const EXIT_LIMIT: Duration = Duration::from_secs(30);
/// Timeout of every HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A worker deletes rather than adds once it owns this many items of one kind.
const OWN_ITEMS_HIGH: usize = 40;
/// Inbox permissions an access key may get, in the order of inbox.md §2.7.
const KEY_PERMISSIONS: [&str; 4] = ["PermitAdd", "PermitShow", "PermitSize", "PermitGetItemUUIDs"];
const PASSWORD: &str = "crash-test-password";

// ---------------------------------------------------------------------------------------
// small utilities

/// splitmix64: enough randomness for choosing operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// A random key of a map (`None` when empty).
    fn key_of<V>(&mut self, map: &HashMap<String, V>) -> Option<String> {
        if map.is_empty() {
            return None;
        }
        let i = self.index(map.len());
        map.keys().nth(i).cloned()
    }

    /// Up to `n` random elements of `items`.
    fn sample<T: Clone>(&mut self, items: &[T], n: usize) -> Vec<T> {
        let mut v = items.to_vec();
        for i in 0..v.len().min(n) {
            let j = i + self.index(v.len() - i);
            v.swap(i, j);
        }
        v.truncate(n);
        v
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A canonical timestamp (whole seconds, `Z`), as the server prints it back.
fn timestamp(rng: &mut Rng) -> String {
    format!(
        "20{:02}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        rng.between(10, 30),
        rng.between(1, 12),
        rng.between(1, 28),
        rng.below(24),
        rng.below(60),
        rng.below(60)
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// The binary to run: `PIGEONHOLE_BIN`, else the release build that `cargo bench` made
/// along with this program.
fn locate_binary() -> PathBuf {
    std::env::var_os("PIGEONHOLE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pigeonhole")), PathBuf::from)
}

// ---------------------------------------------------------------------------------------
// the server process

struct Server {
    child: Child,
    inbox: String,
    scheduler: String,
    log: PathBuf,
}

impl Server {
    /// Starts `pigeonhole serve` on free ports and waits until both services answer
    /// `GET /pricing`; tries other ports a few times.
    async fn start(bin: &Path, data: &Path, logs: &Path, http: &Client, run: usize) -> Result<Server, String> {
        let mut last = String::new();
        for attempt in 0..5 {
            let (inbox_port, scheduler_port) = (free_port(), free_port());
            if inbox_port == scheduler_port {
                continue;
            }
            let log = logs.join(format!("server-{run:03}-{attempt}.log"));
            let stderr = std::fs::File::create(&log).map_err(|e| format!("create {}: {e}", log.display()))?;
            let mut cmd = Command::new(bin);
            cmd.arg("serve")
                .arg("--data-dir")
                .arg(data)
                .args(["--host", "127.0.0.1"])
                .args(["--inbox-port", &inbox_port.to_string()])
                .args(["--scheduler-port", &scheduler_port.to_string()])
                .args(["--password-iterations", "1000", "--looper-period", "1"]);
            for (name, _) in std::env::vars_os() {
                let name = name.to_string_lossy();
                if name.starts_with("PIGEONHOLE_") && name != "PIGEONHOLE_LOG_LEVEL" {
                    cmd.env_remove(name.as_ref());
                }
            }
            let child = cmd
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
            let mut server = Server {
                child,
                inbox: format!("http://127.0.0.1:{inbox_port}"),
                scheduler: format!("http://127.0.0.1:{scheduler_port}"),
                log,
            };
            if server.wait_ready(http).await {
                return Ok(server);
            }
            last = server.log_text();
            server.signal(libc::SIGKILL);
            let _ = server.wait_exit().await;
        }
        Err(format!("the server did not start; last log:\n{last}"))
    }

    /// `true` once both services answer `GET /pricing` with 200 (at most [`START_LIMIT`]).
    async fn wait_ready(&mut self, http: &Client) -> bool {
        let deadline = Instant::now() + START_LIMIT;
        let mut ready = [false, false];
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return false;
            }
            for (i, base) in [&self.inbox, &self.scheduler].into_iter().enumerate() {
                if !ready[i] {
                    let probe = http.get(format!("{base}/pricing")).timeout(Duration::from_secs(2));
                    ready[i] = matches!(probe.send().await, Ok(r) if r.status().as_u16() == 200);
                }
            }
            if ready == [true, true] {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        #[expect(
            unsafe_code,
            reason = "std's Child::kill sends only SIGKILL; the crash test also sends SIGTERM"
        )]
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let _ = unsafe { libc::kill(pid, signal) };
    }

    /// Waits (at most [`EXIT_LIMIT`]) for the process to exit.
    async fn wait_exit(&mut self) -> Option<ExitStatus> {
        let deadline = Instant::now() + EXIT_LIMIT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP

fn http_client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

struct Resp {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    fn text(&self) -> String {
        let t = String::from_utf8_lossy(&self.body);
        t.chars().take(300).collect()
    }

    /// The token of a login answer (`Set-Cookie: JWT-Cookie=<token>; ...`).
    fn token(&self) -> Option<String> {
        let cookie = self.headers.get("set-cookie")?.to_str().ok()?;
        let token = cookie.split(';').next()?.strip_prefix("JWT-Cookie=")?;
        (!token.is_empty()).then(|| token.to_owned())
    }
}

/// What became of a request.
enum Outcome {
    /// 2xx, answer read in full: the write is acknowledged.
    Acked(Resp),
    /// An answer with another status.
    Refused(Resp),
    /// No complete answer (connection failed or reset, e.g. by the kill).
    NoAnswer(String),
}

async fn call(rb: RequestBuilder) -> Outcome {
    let response = match rb.send().await {
        Ok(r) => r,
        Err(e) => return Outcome::NoAnswer(e.to_string()),
    };
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    match response.bytes().await {
        Ok(body) => {
            let r = Resp {
                status,
                headers,
                body: body.to_vec(),
            };
            if (200..300).contains(&status) {
                Outcome::Acked(r)
            } else {
                Outcome::Refused(r)
            }
        }
        Err(e) => Outcome::NoAnswer(e.to_string()),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Service {
    Inbox,
    Scheduler,
}

enum Auth<'a> {
    None,
    Bearer(&'a str),
    Key(&'a str, &'a str),
}

/// Everything a request needs for the current server process.
struct Ctx {
    http: Client,
    inbox: String,
    scheduler: String,
    /// Unique per run (letters and digits): keeps names of accounts and keys apart.
    tag: String,
    round: usize,
    inbox_user: String,
    inbox_token: String,
    /// Secret of an access key with every user permission, for the header pair.
    inbox_key: String,
    inbox_key_uuid: String,
    scheduler_user: String,
    scheduler_token: String,
}

impl Ctx {
    fn request(&self, method: Method, service: Service, path: &str, auth: Auth) -> RequestBuilder {
        let base = match service {
            Service::Inbox => &self.inbox,
            Service::Scheduler => &self.scheduler,
        };
        let rb = self.http.request(method, format!("{base}{path}"));
        match auth {
            Auth::None => rb,
            Auth::Bearer(token) => rb.bearer_auth(token),
            Auth::Key(user, secret) => rb.header("Username", user).header("Access-Key", secret),
        }
    }

    fn inbox_bearer(&self) -> Auth<'_> {
        Auth::Bearer(&self.inbox_token)
    }

    fn scheduler_bearer(&self) -> Auth<'_> {
        Auth::Bearer(&self.scheduler_token)
    }

    /// A request of the checks, which must be answered with `status`.
    async fn expect(&self, rb: RequestBuilder, what: &str, status: u16) -> Result<Resp, String> {
        match call(rb).await {
            Outcome::Acked(r) | Outcome::Refused(r) if r.status == status => Ok(r),
            Outcome::Acked(r) | Outcome::Refused(r) => {
                Err(format!("{what}: expected {status}, got {} {}", r.status, r.text()))
            }
            Outcome::NoAnswer(e) => Err(format!("{what}: no answer: {e}")),
        }
    }

    async fn get_json(&self, service: Service, path: &str, auth: Auth<'_>) -> Result<Value, String> {
        let what = format!("GET {path}");
        let r = self
            .expect(self.request(Method::GET, service, path, auth), &what, 200)
            .await?;
        r.json()
            .ok_or_else(|| format!("{what}: answer is not JSON: {}", r.text()))
    }
}

// ---------------------------------------------------------------------------------------
// the model

#[derive(Clone, Debug)]
struct InboxItem {
    contents: Value,
    /// Known for synced items (sent by us) and after the first check (server clock).
    created: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct SchedItem {
    /// Contents in the server's output form.
    contents: Value,
    created: Option<String>,
    /// Server time (scheduler.md §10).
    time: u64,
}

#[derive(Clone, Debug)]
struct AccessKey {
    name: String,
    permissions: Vec<&'static str>,
    /// `None` for keys that were created without an answer and deleted by the checks.
    secret: Option<String>,
    round: usize,
}

struct Idem {
    key: String,
    uuid: String,
    round: usize,
}

struct Token {
    service: Service,
    token: String,
    round: usize,
}

struct Account {
    service: Service,
    name: String,
    round: usize,
}

/// One worker task and the state it owns. Requests of one worker are sequential, so the
/// model of its items follows the order in which they were acknowledged.
struct Worker {
    id: usize,
    rng: Rng,
    n: u64,
    inbox: HashMap<String, InboxItem>,
    /// Items whose deletion got no answer: present with these contents, or gone.
    inbox_maybe: HashMap<String, InboxItem>,
    inbox_deleted: HashSet<String>,
    idem: Vec<Idem>,
    keys: HashMap<String, AccessKey>,
    keys_maybe: HashMap<String, AccessKey>,
    keys_deleted: HashMap<String, AccessKey>,
    tokens: Vec<Token>,
    accounts: Vec<Account>,
    sched: HashMap<String, SchedItem>,
    /// Items with a request without an answer: one of these states (`None` = gone).
    sched_maybe: HashMap<String, Vec<Option<SchedItem>>>,
    sched_deleted: HashSet<String>,
    /// Only worker 0 changes the settings. `None` = never set (the default).
    settings: Option<Value>,
    settings_maybe: Option<Vec<Option<Value>>>,
    // this round
    acked: u64,
    unanswered: u64,
    unacked_inbox_adds: u64,
    unacked_sched_adds: u64,
    unacked_keys: u64,
    anomalies: Vec<String>,
}

impl Worker {
    fn new(id: usize, seed: u64) -> Worker {
        Worker {
            id,
            rng: Rng(seed ^ (id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)),
            n: 0,
            inbox: HashMap::new(),
            inbox_maybe: HashMap::new(),
            inbox_deleted: HashSet::new(),
            idem: Vec::new(),
            keys: HashMap::new(),
            keys_maybe: HashMap::new(),
            keys_deleted: HashMap::new(),
            tokens: Vec::new(),
            accounts: Vec::new(),
            sched: HashMap::new(),
            sched_maybe: HashMap::new(),
            sched_deleted: HashSet::new(),
            settings: None,
            settings_maybe: None,
            acked: 0,
            unanswered: 0,
            unacked_inbox_adds: 0,
            unacked_sched_adds: 0,
            unacked_keys: 0,
            anomalies: Vec::new(),
        }
    }

    /// Writes until `stop` or until a request gets no answer (the server is gone).
    async fn run(mut self, ctx: Arc<Ctx>, stop: Arc<AtomicBool>) -> Worker {
        while !stop.load(Ordering::SeqCst) {
            self.n += 1;
            let inbox_full = self.inbox.len() >= OWN_ITEMS_HIGH;
            let sched_full = self.sched.len() >= OWN_ITEMS_HIGH;
            let ops: [(u64, Op); 14] = [
                (if inbox_full { 2 } else { 20 }, Op::InboxAdd),
                (if inbox_full { 30 } else { 10 }, Op::InboxDelete),
                (6, Op::InboxSync),
                (if self.keys.len() >= 4 { 0 } else { 3 }, Op::KeyAdd),
                (if self.keys.len() >= 2 { 3 } else { 0 }, Op::KeyDelete),
                (1, Op::Login(Service::Inbox)),
                (1, Op::Login(Service::Scheduler)),
                (1, Op::Register(Service::Inbox)),
                (1, Op::Register(Service::Scheduler)),
                (if sched_full { 2 } else { 18 }, Op::SchedAdd),
                (12, Op::SchedEdit),
                (if sched_full { 25 } else { 8 }, Op::SchedDelete),
                (6, Op::SchedSync),
                (
                    if self.id == 0 && self.settings_maybe.is_none() {
                        4
                    } else {
                        0
                    },
                    Op::Settings,
                ),
            ];
            let total: u64 = ops.iter().map(|(w, _)| w).sum();
            let mut pick = self.rng.below(total);
            let mut op = Op::InboxAdd;
            for (w, o) in ops {
                if pick < w {
                    op = o;
                    break;
                }
                pick -= w;
            }
            let answered = match op {
                Op::InboxAdd => self.inbox_add(&ctx).await,
                Op::InboxDelete => self.inbox_delete(&ctx).await,
                Op::InboxSync => self.inbox_sync(&ctx).await,
                Op::KeyAdd => self.key_add(&ctx).await,
                Op::KeyDelete => self.key_delete(&ctx).await,
                Op::Login(service) => self.login(&ctx, service).await,
                Op::Register(service) => self.register(&ctx, service).await,
                Op::SchedAdd => self.sched_add(&ctx).await,
                Op::SchedEdit => self.sched_edit(&ctx).await,
                Op::SchedDelete => self.sched_delete(&ctx).await,
                Op::SchedSync => self.sched_sync(&ctx).await,
                Op::Settings => self.put_settings(&ctx).await,
            };
            if !answered {
                self.unanswered += 1;
                break;
            }
        }
        self
    }

    fn refused(&mut self, what: &str, r: &Resp) {
        self.anomalies
            .push(format!("worker {}: {what} answered {} {}", self.id, r.status, r.text()));
    }

    fn unexpected(&mut self, what: &str, r: &Resp) {
        self.anomalies
            .push(format!("worker {}: {what}: unexpected answer {}", self.id, r.text()));
    }

    fn inbox_contents(&mut self) -> Value {
        let kind = ["text", "text", "image/png", "image/jpeg"][self.rng.index(4)];
        let len = self.rng.below(64) as usize;
        let mut data = format!("w{} n{} ", self.id, self.n).into_bytes();
        data.extend((0..len).map(|_| self.rng.next() as u8));
        json!({"type": kind, "data": b64(&data)})
    }

    /// Scheduler item contents, in the server's output form; due in 2099.
    fn sched_contents(&mut self) -> Value {
        let rng = &mut self.rng;
        let time = if rng.chance(50) {
            json!(format!(
                "{:02}:{:02}:{:02}",
                rng.below(24),
                rng.below(60),
                rng.below(60)
            ))
        } else {
            Value::Null
        };
        let tod = if rng.chance(50) {
            json!(format!("{:02}:{:02}:00", rng.below(24), rng.below(60)))
        } else {
            Value::Null
        };
        let recurrence = match rng.below(3) {
            0 => Value::Null,
            1 => json!({"every-x-days": {"days": rng.between(1, 400), "time-of-day": tod}}),
            _ => {
                let day = if rng.chance(50) {
                    json!(rng.between(1, 31))
                } else {
                    Value::Null
                };
                json!({"every-x-months": {"months": rng.between(1, 24), "day": day, "time-of-day": tod}})
            }
        };
        let content = format!("worker {} op {} \u{1F426} {}", self.id, self.n, rng.next());
        json!({
            "content": content,
            "scheduled-day": format!("2099-{:02}-{:02}", rng.between(1, 12), rng.between(1, 28)),
            "scheduled-time": time,
            "recurrence": recurrence,
        })
    }

    async fn inbox_add(&mut self, ctx: &Ctx) -> bool {
        let contents = self.inbox_contents();
        let key = self
            .rng
            .chance(30)
            .then(|| format!("{}-w{}-n{}", ctx.tag, self.id, self.n));
        let auth = if self.rng.chance(30) {
            Auth::Key(&ctx.inbox_user, &ctx.inbox_key)
        } else {
            ctx.inbox_bearer()
        };
        let mut rb = ctx
            .request(Method::POST, Service::Inbox, "/inbox/item", auth)
            .json(&contents);
        if let Some(key) = &key {
            rb = rb.header("Idempotency-Key", key);
        }
        match call(rb).await {
            Outcome::Acked(r) => match r.json().as_ref().and_then(Value::as_str) {
                Some(uuid) => {
                    self.acked += 1;
                    let uuid = uuid.to_owned();
                    self.inbox.insert(
                        uuid.clone(),
                        InboxItem {
                            contents,
                            created: None,
                        },
                    );
                    if let Some(key) = key {
                        self.idem.push(Idem {
                            key,
                            uuid,
                            round: ctx.round,
                        });
                    }
                }
                None => {
                    self.unexpected("POST /inbox/item", &r);
                    self.unacked_inbox_adds += 1;
                }
            },
            Outcome::Refused(r) => {
                self.refused("POST /inbox/item", &r);
                self.unacked_inbox_adds += 1;
            }
            Outcome::NoAnswer(_) => {
                self.unacked_inbox_adds += 1;
                return false;
            }
        }
        true
    }

    async fn inbox_delete(&mut self, ctx: &Ctx) -> bool {
        let Some(id) = self.rng.key_of(&self.inbox) else {
            return true;
        };
        let item = self.inbox.remove(&id).expect("picked from the map");
        let auth = if self.rng.chance(30) {
            Auth::Key(&ctx.inbox_user, &ctx.inbox_key)
        } else {
            ctx.inbox_bearer()
        };
        let rb = ctx.request(Method::DELETE, Service::Inbox, &format!("/inbox/item/{id}"), auth);
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.inbox_deleted.insert(id);
            }
            Outcome::Refused(r) => {
                self.refused("DELETE /inbox/item", &r);
                self.inbox_maybe.insert(id, item);
            }
            Outcome::NoAnswer(_) => {
                self.inbox_maybe.insert(id, item);
                return false;
            }
        }
        true
    }

    async fn inbox_sync(&mut self, ctx: &Ctx) -> bool {
        let numeric = self.rng.chance(70);
        let mut added = Map::new();
        let mut sent = Vec::new();
        for i in 0..self.rng.between(0, 3) {
            let key = if numeric {
                i.to_string()
            } else {
                format!("k{i}-{}", self.n)
            };
            let item = InboxItem {
                contents: self.inbox_contents(),
                created: Some(timestamp(&mut self.rng)),
            };
            added.insert(key.clone(), json!({"contents": item.contents, "created": item.created}));
            sent.push((key, item));
        }
        let mut deleted = Vec::new();
        for _ in 0..self.rng.between(0, 2) {
            if let Some(id) = self.rng.key_of(&self.inbox) {
                let item = self.inbox.remove(&id).expect("picked from the map");
                deleted.push((id, item));
            }
        }
        let ids: Vec<&str> = deleted.iter().map(|(id, _)| id.as_str()).collect();
        let body = json!({"added": added, "synced": [], "deleted": ids});
        let rb = ctx
            .request(Method::POST, Service::Inbox, "/inbox/sync", ctx.inbox_bearer())
            .json(&body);
        let r = match call(rb).await {
            Outcome::Acked(r) => r,
            other => {
                self.unacked_inbox_adds += sent.len() as u64;
                self.inbox_maybe.extend(deleted);
                return match other {
                    Outcome::Refused(r) => {
                        self.refused("POST /inbox/sync", &r);
                        true
                    }
                    _ => false,
                };
            }
        };
        self.acked += 1;
        let answer = r.json().unwrap_or(Value::Null);
        for (key, item) in sent {
            match answer["client-added"][&key].as_str() {
                Some(uuid) => {
                    self.inbox.insert(uuid.to_owned(), item);
                }
                None => {
                    self.unexpected(&format!("POST /inbox/sync: key {key:?} not in client-added"), &r);
                    self.unacked_inbox_adds += 1;
                }
            }
        }
        let echoed: HashSet<&str> = answer["client-deleted"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (id, item) in deleted {
            if echoed.contains(id.as_str()) {
                self.inbox_deleted.insert(id);
            } else {
                self.unexpected(&format!("POST /inbox/sync: {id} not in client-deleted"), &r);
                self.inbox_maybe.insert(id, item);
            }
        }
        true
    }

    async fn key_add(&mut self, ctx: &Ctx) -> bool {
        let permissions: Vec<&'static str> = KEY_PERMISSIONS
            .into_iter()
            .filter(|p| *p == "PermitSize" || self.rng.chance(50))
            .collect();
        let name = format!("{}-w{}-k{}", ctx.tag, self.id, self.n);
        let body = json!({"addAccessKeyName": name, "addAccessKeyPermissions": permissions});
        let rb = ctx
            .request(Method::POST, Service::Inbox, "/access-key", ctx.inbox_bearer())
            .json(&body);
        match call(rb).await {
            Outcome::Acked(r) => {
                let v = r.json().unwrap_or(Value::Null);
                match (v["accessKeyCreatedUUID"].as_str(), v["accessKeyCreatedKey"].as_str()) {
                    (Some(uuid), Some(secret)) => {
                        self.acked += 1;
                        let key = AccessKey {
                            name,
                            permissions,
                            secret: Some(secret.to_owned()),
                            round: ctx.round,
                        };
                        self.keys.insert(uuid.to_owned(), key);
                    }
                    _ => {
                        self.unexpected("POST /access-key", &r);
                        self.unacked_keys += 1;
                    }
                }
            }
            Outcome::Refused(r) => {
                self.refused("POST /access-key", &r);
                self.unacked_keys += 1;
            }
            Outcome::NoAnswer(_) => {
                self.unacked_keys += 1;
                return false;
            }
        }
        true
    }

    async fn key_delete(&mut self, ctx: &Ctx) -> bool {
        let Some(uuid) = self.rng.key_of(&self.keys) else {
            return true;
        };
        let key = self.keys.remove(&uuid).expect("picked from the map");
        let rb = ctx.request(
            Method::DELETE,
            Service::Inbox,
            &format!("/access-key/{uuid}"),
            ctx.inbox_bearer(),
        );
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.keys_deleted.insert(uuid, key);
            }
            Outcome::Refused(r) => {
                self.refused("DELETE /access-key", &r);
                self.keys_maybe.insert(uuid, key);
            }
            Outcome::NoAnswer(_) => {
                self.keys_maybe.insert(uuid, key);
                return false;
            }
        }
        true
    }

    async fn login(&mut self, ctx: &Ctx, service: Service) -> bool {
        let user = match service {
            Service::Inbox => &ctx.inbox_user,
            Service::Scheduler => &ctx.scheduler_user,
        };
        let body = json!({"username": user, "password": PASSWORD});
        let rb = ctx.request(Method::POST, service, "/login", Auth::None).json(&body);
        match call(rb).await {
            Outcome::Acked(r) => match r.token() {
                Some(token) => {
                    self.acked += 1;
                    self.tokens.push(Token {
                        service,
                        token,
                        round: ctx.round,
                    });
                }
                None => self.unexpected("POST /login", &r),
            },
            Outcome::Refused(r) => self.refused("POST /login", &r),
            Outcome::NoAnswer(_) => return false,
        }
        true
    }

    async fn register(&mut self, ctx: &Ctx, service: Service) -> bool {
        let name = format!("{}w{}n{}", ctx.tag, self.id, self.n);
        let body = json!({"name": name, "password": PASSWORD});
        let rb = ctx.request(Method::POST, service, "/register", Auth::None).json(&body);
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.accounts.push(Account {
                    service,
                    name,
                    round: ctx.round,
                });
            }
            Outcome::Refused(r) => self.refused("POST /register", &r),
            Outcome::NoAnswer(_) => return false,
        }
        true
    }

    async fn sched_add(&mut self, ctx: &Ctx) -> bool {
        let contents = self.sched_contents();
        let rb = ctx
            .request(
                Method::POST,
                Service::Scheduler,
                "/scheduler/item",
                ctx.scheduler_bearer(),
            )
            .json(&contents);
        match call(rb).await {
            Outcome::Acked(r) => match r.json().as_ref().and_then(Value::as_str) {
                Some(uuid) => {
                    self.acked += 1;
                    let item = SchedItem {
                        contents,
                        created: None,
                        time: 0,
                    };
                    self.sched.insert(uuid.to_owned(), item);
                }
                None => {
                    self.unexpected("POST /scheduler/item", &r);
                    self.unacked_sched_adds += 1;
                }
            },
            Outcome::Refused(r) => {
                self.refused("POST /scheduler/item", &r);
                self.unacked_sched_adds += 1;
            }
            Outcome::NoAnswer(_) => {
                self.unacked_sched_adds += 1;
                return false;
            }
        }
        true
    }

    async fn sched_edit(&mut self, ctx: &Ctx) -> bool {
        let Some(id) = self.rng.key_of(&self.sched) else {
            return true;
        };
        let old = self.sched.remove(&id).expect("picked from the map");
        let new = SchedItem {
            contents: self.sched_contents(),
            created: old.created.clone(),
            time: old.time + 1,
        };
        let rb = ctx
            .request(
                Method::POST,
                Service::Scheduler,
                &format!("/scheduler/item/info/{id}"),
                ctx.scheduler_bearer(),
            )
            .json(&new.contents);
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.sched.insert(id, new);
            }
            Outcome::Refused(r) => {
                self.refused("POST /scheduler/item/info", &r);
                self.sched_maybe.insert(id, vec![Some(old), Some(new)]);
            }
            Outcome::NoAnswer(_) => {
                self.sched_maybe.insert(id, vec![Some(old), Some(new)]);
                return false;
            }
        }
        true
    }

    async fn sched_delete(&mut self, ctx: &Ctx) -> bool {
        let Some(id) = self.rng.key_of(&self.sched) else {
            return true;
        };
        let old = self.sched.remove(&id).expect("picked from the map");
        let rb = ctx.request(
            Method::DELETE,
            Service::Scheduler,
            &format!("/scheduler/item/delete/{id}"),
            ctx.scheduler_bearer(),
        );
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.sched_deleted.insert(id);
            }
            Outcome::Refused(r) => {
                self.refused("DELETE /scheduler/item/delete", &r);
                self.sched_maybe.insert(id, vec![Some(old), None]);
            }
            Outcome::NoAnswer(_) => {
                self.sched_maybe.insert(id, vec![Some(old), None]);
                return false;
            }
        }
        true
    }

    async fn sched_sync(&mut self, ctx: &Ctx) -> bool {
        let mut added = Map::new();
        let mut sent = Vec::new();
        for i in 0..self.rng.between(0, 2) {
            let item = SchedItem {
                contents: self.sched_contents(),
                created: Some(timestamp(&mut self.rng)),
                time: 0,
            };
            added.insert(
                i.to_string(),
                json!({"contents": item.contents, "created": item.created}),
            );
            sent.push((i.to_string(), item));
        }
        let mut changed = None;
        if self.rng.chance(70) {
            if let Some(id) = self.rng.key_of(&self.sched) {
                let old = self.sched.remove(&id).expect("picked from the map");
                let new = SchedItem {
                    contents: self.sched_contents(),
                    created: old.created.clone(),
                    time: old.time + 1,
                };
                changed = Some((id, old, new));
            }
        }
        let mut deleted = None;
        if self.rng.chance(50) {
            if let Some(id) = self.rng.key_of(&self.sched) {
                let old = self.sched.remove(&id).expect("picked from the map");
                deleted = Some((id, old));
            }
        }
        let mut changed_json = Map::new();
        if let Some((id, old, new)) = &changed {
            let created = old.created.clone().unwrap_or_else(|| "2024-01-01T00:00:00Z".into());
            changed_json.insert(
                id.clone(),
                json!({"value": {"contents": new.contents, "created": created}, "time": old.time}),
            );
        }
        let mut deleted_json = Map::new();
        if let Some((id, old)) = &deleted {
            deleted_json.insert(id.clone(), json!(old.time));
        }
        let body = json!({"syncRequestTickles": {
            "added": added, "synced": {}, "changed": changed_json, "deleted": deleted_json}});
        let rb = ctx
            .request(Method::POST, Service::Scheduler, "/sync", ctx.scheduler_bearer())
            .json(&body);
        let r = match call(rb).await {
            Outcome::Acked(r) => r,
            other => {
                self.unacked_sched_adds += sent.len() as u64;
                if let Some((id, old, new)) = changed {
                    self.sched_maybe.insert(id, vec![Some(old), Some(new)]);
                }
                if let Some((id, old)) = deleted {
                    self.sched_maybe.insert(id, vec![Some(old), None]);
                }
                return match other {
                    Outcome::Refused(r) => {
                        self.refused("POST /sync", &r);
                        true
                    }
                    _ => false,
                };
            }
        };
        self.acked += 1;
        let answer = r.json().unwrap_or(Value::Null);
        let answer = &answer["syncResponseTickles"];
        for (key, item) in sent {
            let entry = &answer["client-added"][&key];
            match (entry["id"].as_str(), entry["time"].as_u64()) {
                (Some(uuid), Some(0)) => {
                    self.sched.insert(uuid.to_owned(), item);
                }
                _ => {
                    self.unexpected(&format!("POST /sync: key {key} not in client-added"), &r);
                    self.unacked_sched_adds += 1;
                }
            }
        }
        if let Some((id, old, new)) = changed {
            if answer["client-changed"][&id].as_u64() == Some(new.time) {
                self.sched.insert(id, new);
            } else {
                self.unexpected(&format!("POST /sync: {id} not in client-changed at {}", new.time), &r);
                self.sched_maybe.insert(id, vec![Some(old), Some(new)]);
            }
        }
        if let Some((id, old)) = deleted {
            let echoed = answer["client-deleted"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(id.as_str())));
            if echoed {
                self.sched_deleted.insert(id);
            } else {
                self.unexpected(&format!("POST /sync: {id} not in client-deleted"), &r);
                self.sched_maybe.insert(id, vec![Some(old), None]);
            }
        }
        true
    }

    async fn put_settings(&mut self, ctx: &Ctx) -> bool {
        let names = ["UTC", "UTC+1", "", "Europe/Zurich", "America/New_York", "Asia/Tokyo"];
        let name = names[self.rng.index(names.len())];
        let offset = self.rng.between(0, 2 * 1439) as i64 - 1439;
        let new = json!({"timezone": {"offset": offset, "name": name, "summer": self.rng.chance(50)}});
        let rb = ctx
            .request(
                Method::PUT,
                Service::Scheduler,
                "/account/settings",
                ctx.scheduler_bearer(),
            )
            .json(&new);
        match call(rb).await {
            Outcome::Acked(_) => {
                self.acked += 1;
                self.settings = Some(new);
            }
            Outcome::Refused(r) => {
                self.refused("PUT /account/settings", &r);
                self.settings_maybe = Some(vec![self.settings.clone(), Some(new)]);
            }
            Outcome::NoAnswer(_) => {
                self.settings_maybe = Some(vec![self.settings.clone(), Some(new)]);
                return false;
            }
        }
        true
    }
}

#[derive(Clone, Copy)]
enum Op {
    InboxAdd,
    InboxDelete,
    InboxSync,
    KeyAdd,
    KeyDelete,
    Login(Service),
    Register(Service),
    SchedAdd,
    SchedEdit,
    SchedDelete,
    SchedSync,
    Settings,
}

// ---------------------------------------------------------------------------------------
// the checks after a restart

/// Findings of one check.
#[derive(Default)]
struct Findings {
    /// Acknowledged writes that are missing, or acknowledged deletions that came back.
    lost: Vec<String>,
    /// Answers that contradict the model in other ways.
    anomalies: Vec<String>,
    /// Writes done by the checks themselves (deleting unacknowledged leftovers).
    acked: u64,
    resolved: u64,
    strays: u64,
}

fn default_settings() -> Value {
    json!({"timezone": {"offset": 0, "name": "UTC", "summer": false}})
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Checks everything the workers acknowledged against the restarted server, resolves the
/// uncertain items, and deletes leftovers nobody acknowledged. `Err` = the server could not
/// be checked (no answer, unexpected status on a read).
async fn check(ctx: &Ctx, workers: &mut [Worker], rng: &mut Rng) -> Result<Findings, String> {
    let mut f = Findings::default();
    let round = ctx.round;

    // ---- inbox items
    let items = ctx.get_json(Service::Inbox, "/inbox/items", ctx.inbox_bearer()).await?;
    let mut server: HashMap<String, (Value, String)> = HashMap::new();
    for item in items.as_array().ok_or("GET /inbox/items: not an array")? {
        let id = item["id"].as_str().ok_or("inbox item without id")?.to_owned();
        let created = item["created"].as_str().ok_or("inbox item without created")?.to_owned();
        server.insert(id, (item["contents"].clone(), created));
    }
    let uuids: HashSet<String> = strings(&ctx.get_json(Service::Inbox, "/inbox/uuids", ctx.inbox_bearer()).await?)
        .into_iter()
        .collect();
    if uuids.len() != server.len() || !server.keys().all(|id| uuids.contains(id)) {
        f.anomalies.push(format!(
            "GET /inbox/uuids ({} ids) and GET /inbox/items ({} items) disagree",
            uuids.len(),
            server.len()
        ));
    }
    let mut known: HashSet<String> = HashSet::new();
    let mut inbox_cleanup: Vec<String> = Vec::new();
    for w in workers.iter_mut() {
        let mut gone = Vec::new();
        for (id, item) in w.inbox.iter_mut() {
            known.insert(id.clone());
            match server.get(id) {
                None => {
                    f.lost
                        .push(format!("inbox item {id} (acknowledged, worker {}) is missing", w.id));
                    gone.push(id.clone());
                }
                Some((contents, created)) => {
                    if *contents != item.contents {
                        f.lost.push(format!(
                            "inbox item {id}: contents {contents} instead of {}",
                            item.contents
                        ));
                    }
                    match &item.created {
                        Some(c) if c != created => f
                            .lost
                            .push(format!("inbox item {id}: created {created} instead of {c}")),
                        Some(_) => {}
                        None => item.created = Some(created.clone()),
                    }
                }
            }
        }
        for id in gone {
            w.inbox.remove(&id);
        }
        for id in &w.inbox_deleted {
            known.insert(id.clone());
            if server.contains_key(id) {
                f.lost
                    .push(format!("deleted inbox item {id} (worker {}) is back", w.id));
                inbox_cleanup.push(id.clone());
            }
        }
        for (id, mut item) in std::mem::take(&mut w.inbox_maybe) {
            known.insert(id.clone());
            f.resolved += 1;
            match server.get(&id) {
                None => {
                    w.inbox_deleted.insert(id);
                }
                Some((contents, created)) => {
                    if *contents != item.contents {
                        f.lost
                            .push(format!("inbox item {id} (deletion in flight): contents {contents}"));
                    }
                    item.created = Some(created.clone());
                    w.inbox.insert(id, item);
                }
            }
        }
    }
    let unacked_adds: u64 = workers.iter().map(|w| w.unacked_inbox_adds).sum();
    let strays: Vec<String> = server.keys().filter(|id| !known.contains(*id)).cloned().collect();
    if strays.len() as u64 > unacked_adds {
        f.anomalies.push(format!(
            "{} unknown inbox items, but only {unacked_adds} adds went unanswered",
            strays.len()
        ));
    }
    f.strays += strays.len() as u64;
    inbox_cleanup.extend(strays);

    // single reads: some present items, some deleted ones
    let present: Vec<(String, Value)> = workers
        .iter()
        .flat_map(|w| w.inbox.iter().map(|(id, i)| (id.clone(), i.contents.clone())))
        .collect();
    for (id, contents) in rng.sample(&present, 10) {
        let v = ctx
            .get_json(Service::Inbox, &format!("/inbox/item/{id}"), ctx.inbox_bearer())
            .await?;
        if v["contents"] != contents {
            f.lost
                .push(format!("GET /inbox/item/{id}: {v} instead of contents {contents}"));
        }
    }
    let deleted: Vec<String> = workers.iter().flat_map(|w| w.inbox_deleted.iter().cloned()).collect();
    for id in rng.sample(&deleted, 10) {
        let path = format!("/inbox/item/{id}");
        let r = call(ctx.request(Method::GET, Service::Inbox, &path, ctx.inbox_bearer())).await;
        match r {
            Outcome::Refused(r) if r.status == 404 => {}
            Outcome::Acked(_) => f.lost.push(format!("GET {path}: a deleted item is back")),
            Outcome::Refused(r) => return Err(format!("GET {path}: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("GET {path}: {e}")),
        }
    }

    // Idempotency-Keys: a repeat answers the first UUID and stores nothing
    let mut idems: Vec<(String, String)> = Vec::new();
    let mut older: Vec<(String, String)> = Vec::new();
    for w in workers.iter() {
        for i in &w.idem {
            let pair = (i.key.clone(), i.uuid.clone());
            if i.round == round {
                idems.push(pair);
            } else {
                older.push(pair);
            }
        }
    }
    idems.extend(rng.sample(&older, 10));
    for (key, uuid) in idems {
        let rb = ctx
            .request(Method::POST, Service::Inbox, "/inbox/item", ctx.inbox_bearer())
            .header("Idempotency-Key", &key)
            .json(&json!({"type": "text", "data": b64(b"repeated key")}));
        let r = ctx
            .expect(rb, "POST /inbox/item with a used Idempotency-Key", 200)
            .await?;
        let again = r.json().and_then(|v| v.as_str().map(str::to_owned));
        if again.as_deref() != Some(uuid.as_str()) {
            f.lost.push(format!(
                "Idempotency-Key {key:?} (acknowledged with {uuid}) now answers {again:?}"
            ));
            if let Some(new) = again {
                inbox_cleanup.push(new);
            }
        }
    }

    // ---- access keys
    let listed = ctx.get_json(Service::Inbox, "/access-key", ctx.inbox_bearer()).await?;
    let mut keys: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for k in listed.as_array().ok_or("GET /access-key: not an array")? {
        let uuid = k["uuid"].as_str().ok_or("access key without uuid")?.to_owned();
        let name = k["name"].as_str().ok_or("access key without name")?.to_owned();
        keys.insert(uuid, (name, strings(&k["permissions"])));
    }
    let mut known_keys: HashSet<String> = HashSet::from([ctx.inbox_key_uuid.clone()]);
    if !keys.contains_key(&ctx.inbox_key_uuid) {
        f.lost.push("the access key created at set-up is missing".into());
    }
    let mut key_cleanup: Vec<String> = Vec::new();
    let mut secrets_alive: Vec<(String, String)> = Vec::new();
    let mut secrets_older: Vec<(String, String)> = Vec::new();
    let mut secrets_dead: Vec<(String, String)> = Vec::new();
    for w in workers.iter_mut() {
        let mut gone = Vec::new();
        for (uuid, key) in &w.keys {
            known_keys.insert(uuid.clone());
            match keys.get(uuid) {
                None => {
                    f.lost.push(format!("access key {uuid} ({}) is missing", key.name));
                    gone.push(uuid.clone());
                }
                Some((name, perms)) => {
                    if *name != key.name || *perms != key.permissions {
                        f.lost.push(format!(
                            "access key {uuid}: {name:?} {perms:?} instead of {:?} {:?}",
                            key.name, key.permissions
                        ));
                    }
                    if let Some(secret) = &key.secret {
                        let pair = (uuid.clone(), secret.clone());
                        if key.round == round {
                            secrets_alive.push(pair);
                        } else {
                            secrets_older.push(pair);
                        }
                    }
                }
            }
        }
        for uuid in gone {
            w.keys.remove(&uuid);
        }
        for (uuid, key) in &w.keys_deleted {
            known_keys.insert(uuid.clone());
            if keys.contains_key(uuid) {
                f.lost.push(format!("deleted access key {uuid} ({}) is back", key.name));
                key_cleanup.push(uuid.clone());
            } else if let (Some(secret), true) = (&key.secret, key.round == round) {
                secrets_dead.push((uuid.clone(), secret.clone()));
            }
        }
        for (uuid, key) in std::mem::take(&mut w.keys_maybe) {
            known_keys.insert(uuid.clone());
            f.resolved += 1;
            if keys.contains_key(&uuid) {
                w.keys.insert(uuid, key);
            } else {
                w.keys_deleted.insert(uuid, key);
            }
        }
    }
    let unacked_keys: u64 = workers.iter().map(|w| w.unacked_keys).sum();
    let stray_keys: Vec<String> = keys.keys().filter(|k| !known_keys.contains(*k)).cloned().collect();
    if stray_keys.len() as u64 > unacked_keys {
        f.anomalies.push(format!(
            "{} unknown access keys, but only {unacked_keys} creations went unanswered",
            stray_keys.len()
        ));
    }
    f.strays += stray_keys.len() as u64;
    key_cleanup.extend(stray_keys);
    secrets_alive.extend(rng.sample(&secrets_older, 5));
    for (uuid, secret) in &secrets_alive {
        let rb = ctx.request(
            Method::GET,
            Service::Inbox,
            "/inbox/size",
            Auth::Key(&ctx.inbox_user, secret),
        );
        match call(rb).await {
            Outcome::Acked(_) => {}
            Outcome::Refused(r) if r.status == 401 => {
                f.lost.push(format!("the secret of access key {uuid} no longer works"))
            }
            Outcome::Refused(r) => return Err(format!("GET /inbox/size with a key: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("GET /inbox/size with a key: {e}")),
        }
    }
    for (uuid, secret) in &secrets_dead {
        let rb = ctx.request(
            Method::GET,
            Service::Inbox,
            "/inbox/size",
            Auth::Key(&ctx.inbox_user, secret),
        );
        match call(rb).await {
            Outcome::Refused(r) if r.status == 401 => {}
            Outcome::Acked(_) => f
                .lost
                .push(format!("the secret of deleted access key {uuid} works again")),
            Outcome::Refused(r) => return Err(format!("GET /inbox/size with a key: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("GET /inbox/size with a key: {e}")),
        }
    }

    // ---- tokens from logins, accounts from registrations
    let mut tokens: Vec<(Service, String)> = Vec::new();
    let mut older_tokens: Vec<(Service, String)> = Vec::new();
    let mut accounts: Vec<(Service, String)> = Vec::new();
    let mut older_accounts: Vec<(Service, String)> = Vec::new();
    for w in workers.iter() {
        for t in &w.tokens {
            let list = if t.round == round {
                &mut tokens
            } else {
                &mut older_tokens
            };
            list.push((t.service, t.token.clone()));
        }
        for a in &w.accounts {
            let list = if a.round == round {
                &mut accounts
            } else {
                &mut older_accounts
            };
            list.push((a.service, a.name.clone()));
        }
    }
    tokens.extend(rng.sample(&older_tokens, 4));
    accounts.extend(rng.sample(&older_accounts, 3));
    for (service, token) in &tokens {
        let path = match service {
            Service::Inbox => "/inbox/size",
            Service::Scheduler => "/account",
        };
        match call(ctx.request(Method::GET, *service, path, Auth::Bearer(token))).await {
            Outcome::Acked(_) => {}
            Outcome::Refused(r) if r.status == 401 => f
                .lost
                .push(format!("a token of an acknowledged {service:?} login answers 401")),
            Outcome::Refused(r) => return Err(format!("GET {path}: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("GET {path}: {e}")),
        }
    }
    for (service, name) in &accounts {
        let body = json!({"username": name, "password": PASSWORD});
        match call(ctx.request(Method::POST, *service, "/login", Auth::None).json(&body)).await {
            Outcome::Acked(_) => {}
            Outcome::Refused(r) if r.status == 401 => f.lost.push(format!(
                "{service:?} account {name} (acknowledged registration) cannot log in"
            )),
            Outcome::Refused(r) => return Err(format!("POST /login: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("POST /login: {e}")),
        }
    }

    // ---- scheduler items: contents from GET /scheduler/items, server times from a
    // read-only sync that claims time 0 for every item (server-changed names the others)
    let listed = ctx
        .get_json(Service::Scheduler, "/scheduler/items", ctx.scheduler_bearer())
        .await?;
    let mut sched: HashMap<String, (Value, String)> = HashMap::new();
    for item in listed.as_array().ok_or("GET /scheduler/items: not an array")? {
        let id = item["id"].as_str().ok_or("scheduler item without id")?.to_owned();
        if !item["triggered"].is_null() {
            f.anomalies
                .push(format!("scheduler item {id} (due in 2099) was triggered: {item}"));
            continue;
        }
        let created = item["created"]
            .as_str()
            .ok_or("scheduler item without created")?
            .to_owned();
        sched.insert(id, (item["contents"].clone(), created));
    }
    let sched_uuids = strings(
        &ctx.get_json(Service::Scheduler, "/scheduler/uuids", ctx.scheduler_bearer())
            .await?,
    );
    if sched_uuids.len() != sched.len() || !sched_uuids.iter().all(|id| sched.contains_key(id)) {
        f.anomalies.push(format!(
            "GET /scheduler/uuids ({} ids) and GET /scheduler/items ({} scheduled) disagree",
            sched_uuids.len(),
            sched.len()
        ));
    }
    let mut synced = Map::new();
    for id in sched.keys() {
        synced.insert(id.clone(), json!(0));
    }
    let probe = json!({"syncRequestTickles": {"synced": synced}});
    let rb = ctx
        .request(Method::POST, Service::Scheduler, "/sync", ctx.scheduler_bearer())
        .json(&probe);
    let answer = ctx
        .expect(rb, "POST /sync (probe)", 200)
        .await?
        .json()
        .ok_or("POST /sync (probe): not JSON")?;
    let answer = &answer["syncResponseTickles"];
    let changed = answer["server-changed"].as_object().cloned().unwrap_or_default();
    for key in ["server-added", "server-deleted", "conflict"] {
        if !answer[key].is_null() {
            f.anomalies
                .push(format!("POST /sync (probe): unexpected {key}: {}", answer[key]));
        }
    }
    let observed = |id: &str| -> Option<SchedItem> {
        let (contents, created) = sched.get(id)?;
        let time = changed.get(id).and_then(|c| c["time"].as_u64()).unwrap_or(0);
        Some(SchedItem {
            contents: contents.clone(),
            created: Some(created.clone()),
            time,
        })
    };
    let mut known: HashSet<String> = HashSet::new();
    let mut sched_cleanup: Vec<String> = Vec::new();
    for w in workers.iter_mut() {
        let mut gone = Vec::new();
        for (id, item) in w.sched.iter_mut() {
            known.insert(id.clone());
            let Some(now) = observed(id) else {
                f.lost.push(format!(
                    "scheduler item {id} (acknowledged, worker {}) is missing",
                    w.id
                ));
                gone.push(id.clone());
                continue;
            };
            if now.contents != item.contents {
                f.lost.push(format!(
                    "scheduler item {id}: contents {} instead of {}",
                    now.contents, item.contents
                ));
            }
            if now.time != item.time {
                f.lost.push(format!(
                    "scheduler item {id}: server time {} instead of {}",
                    now.time, item.time
                ));
            }
            if item.created.is_some() && now.created != item.created {
                f.lost.push(format!(
                    "scheduler item {id}: created {:?} instead of {:?}",
                    now.created, item.created
                ));
            }
            *item = now;
        }
        for id in gone {
            w.sched.remove(&id);
        }
        for id in &w.sched_deleted {
            known.insert(id.clone());
            if sched.contains_key(id) {
                f.lost
                    .push(format!("deleted scheduler item {id} (worker {}) is back", w.id));
                sched_cleanup.push(id.clone());
            }
        }
        for (id, candidates) in std::mem::take(&mut w.sched_maybe) {
            known.insert(id.clone());
            f.resolved += 1;
            let now = observed(&id);
            let matches = |c: &Option<SchedItem>| match (c, &now) {
                (None, None) => true,
                (Some(c), Some(n)) => {
                    c.contents == n.contents && c.time == n.time && (c.created.is_none() || c.created == n.created)
                }
                _ => false,
            };
            if !candidates.iter().any(matches) {
                f.lost.push(format!(
                    "scheduler item {id} (request in flight at the kill) is {now:?}, neither of {candidates:?}"
                ));
            }
            match now {
                Some(now) => {
                    w.sched.insert(id, now);
                }
                None => {
                    w.sched_deleted.insert(id);
                }
            }
        }
    }
    let unacked_adds: u64 = workers.iter().map(|w| w.unacked_sched_adds).sum();
    let strays: Vec<String> = sched.keys().filter(|id| !known.contains(*id)).cloned().collect();
    if strays.len() as u64 > unacked_adds {
        f.anomalies.push(format!(
            "{} unknown scheduler items, but only {unacked_adds} adds went unanswered",
            strays.len()
        ));
    }
    f.strays += strays.len() as u64;
    sched_cleanup.extend(strays);

    let present: Vec<(String, Value)> = workers
        .iter()
        .flat_map(|w| w.sched.iter().map(|(id, i)| (id.clone(), i.contents.clone())))
        .collect();
    for (id, contents) in rng.sample(&present, 5) {
        let path = format!("/scheduler/item/info/{id}");
        let v = ctx.get_json(Service::Scheduler, &path, ctx.scheduler_bearer()).await?;
        if v["contents"] != contents {
            f.lost.push(format!("GET {path}: {v} instead of contents {contents}"));
        }
    }
    let deleted: Vec<String> = workers.iter().flat_map(|w| w.sched_deleted.iter().cloned()).collect();
    for id in rng.sample(&deleted, 5) {
        let path = format!("/scheduler/item/info/{id}");
        match call(ctx.request(Method::GET, Service::Scheduler, &path, ctx.scheduler_bearer())).await {
            Outcome::Refused(r) if r.status == 404 => {}
            Outcome::Acked(_) => f.lost.push(format!("GET {path}: a deleted item is back")),
            Outcome::Refused(r) => return Err(format!("GET {path}: {} {}", r.status, r.text())),
            Outcome::NoAnswer(e) => return Err(format!("GET {path}: {e}")),
        }
    }

    // ---- settings (changed only by worker 0)
    let now = ctx
        .get_json(Service::Scheduler, "/account/settings", ctx.scheduler_bearer())
        .await?;
    let w0 = &mut workers[0];
    let as_value = |s: &Option<Value>| s.clone().unwrap_or_else(default_settings);
    match w0.settings_maybe.take() {
        Some(candidates) => {
            f.resolved += 1;
            if !candidates.iter().any(|c| as_value(c) == now) {
                f.lost
                    .push(format!("settings (change in flight at the kill) are {now}"));
            }
        }
        None => {
            let expected = as_value(&w0.settings);
            if now != expected {
                f.lost.push(format!("settings are {now} instead of {expected}"));
            }
        }
    }
    w0.settings = Some(now);

    // ---- delete what nobody acknowledged (and what came back), so that it cannot be
    // mistaken for anything later and the data stays small
    for id in inbox_cleanup {
        let path = format!("/inbox/item/{id}");
        ctx.expect(
            ctx.request(Method::DELETE, Service::Inbox, &path, ctx.inbox_bearer()),
            &format!("DELETE {path}"),
            200,
        )
        .await?;
        f.acked += 1;
        workers[0].inbox_deleted.insert(id);
    }
    for id in sched_cleanup {
        let path = format!("/scheduler/item/delete/{id}");
        ctx.expect(
            ctx.request(Method::DELETE, Service::Scheduler, &path, ctx.scheduler_bearer()),
            &format!("DELETE {path}"),
            200,
        )
        .await?;
        f.acked += 1;
        workers[0].sched_deleted.insert(id);
    }
    for uuid in key_cleanup {
        let path = format!("/access-key/{uuid}");
        ctx.expect(
            ctx.request(Method::DELETE, Service::Inbox, &path, ctx.inbox_bearer()),
            &format!("DELETE {path}"),
            200,
        )
        .await?;
        f.acked += 1;
        let key = AccessKey {
            name: String::new(),
            permissions: Vec::new(),
            secret: None,
            round,
        };
        workers[0].keys_deleted.insert(uuid, key);
    }
    Ok(f)
}

// ---------------------------------------------------------------------------------------
// set-up and the main loop

/// Registers and logs in the two accounts the load uses and creates the access key for the
/// header pair.
async fn set_up(ctx: &mut Ctx) -> Result<(), String> {
    for service in [Service::Inbox, Service::Scheduler] {
        let name = match service {
            Service::Inbox => ctx.inbox_user.clone(),
            Service::Scheduler => ctx.scheduler_user.clone(),
        };
        let body = json!({"name": name, "password": PASSWORD});
        let rb = ctx.request(Method::POST, service, "/register", Auth::None).json(&body);
        // the originals' statuses: Intray's registration 204, Tickler's 200
        let created = match service {
            Service::Inbox => 204,
            Service::Scheduler => 200,
        };
        ctx.expect(rb, "POST /register", created).await?;
        let body = json!({"username": name, "password": PASSWORD});
        let rb = ctx.request(Method::POST, service, "/login", Auth::None).json(&body);
        let token = ctx
            .expect(rb, "POST /login", 204)
            .await?
            .token()
            .ok_or("login without a token")?;
        match service {
            Service::Inbox => ctx.inbox_token = token,
            Service::Scheduler => ctx.scheduler_token = token,
        }
    }
    let permissions = [
        "PermitAdd",
        "PermitShow",
        "PermitSize",
        "PermitDelete",
        "PermitGetItem",
        "PermitGetItems",
        "PermitGetItemUUIDs",
        "PermitSync",
    ];
    let body = json!({"addAccessKeyName": "crash-test", "addAccessKeyPermissions": permissions});
    let rb = ctx
        .request(Method::POST, Service::Inbox, "/access-key", ctx.inbox_bearer())
        .json(&body);
    let v = ctx
        .expect(rb, "POST /access-key", 200)
        .await?
        .json()
        .ok_or("POST /access-key: not JSON")?;
    ctx.inbox_key = v["accessKeyCreatedKey"].as_str().ok_or("no key secret")?.to_owned();
    ctx.inbox_key_uuid = v["accessKeyCreatedUUID"].as_str().ok_or("no key uuid")?.to_owned();
    Ok(())
}

struct Totals {
    kills: u64,
    acked: u64,
    lost: Vec<String>,
    anomalies: Vec<String>,
    /// Set when the run could not go on (server did not start, a check got no answer).
    fatal: Option<String>,
}

async fn run(bin: &Path, kills: u64, seed: u64, workers_n: usize, data: &Path, logs: &Path) -> Totals {
    let mut totals = Totals {
        kills: 0,
        acked: 0,
        lost: Vec::new(),
        anomalies: Vec::new(),
        fatal: None,
    };
    let mut rng = Rng(seed);
    let tag = format!("c{:08x}", rng.next() as u32);
    let http = http_client();
    let mut server = match Server::start(bin, data, logs, &http, 0).await {
        Ok(s) => s,
        Err(e) => {
            totals.fatal = Some(e);
            return totals;
        }
    };
    let mut ctx = Ctx {
        http: http.clone(),
        inbox: server.inbox.clone(),
        scheduler: server.scheduler.clone(),
        tag: tag.clone(),
        round: 0,
        inbox_user: format!("{tag}inbox"),
        inbox_token: String::new(),
        inbox_key: String::new(),
        inbox_key_uuid: String::new(),
        scheduler_user: format!("{tag}sched"),
        scheduler_token: String::new(),
    };
    if let Err(e) = set_up(&mut ctx).await {
        totals.fatal = Some(format!("set-up failed: {e}\n{}", server.log_text()));
        return totals;
    }
    let mut workers: Vec<Worker> = (0..workers_n).map(|i| Worker::new(i, rng.next())).collect();

    for kill in 1..=kills {
        ctx.round = kill as usize;
        let ctx_arc = Arc::new(Ctx {
            http: ctx.http.clone(),
            inbox: server.inbox.clone(),
            scheduler: server.scheduler.clone(),
            tag: ctx.tag.clone(),
            round: ctx.round,
            inbox_user: ctx.inbox_user.clone(),
            inbox_token: ctx.inbox_token.clone(),
            inbox_key: ctx.inbox_key.clone(),
            inbox_key_uuid: ctx.inbox_key_uuid.clone(),
            scheduler_user: ctx.scheduler_user.clone(),
            scheduler_token: ctx.scheduler_token.clone(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = workers
            .drain(..)
            .map(|mut w| {
                w.acked = 0;
                w.unanswered = 0;
                w.unacked_inbox_adds = 0;
                w.unacked_sched_adds = 0;
                w.unacked_keys = 0;
                tokio::spawn(w.run(ctx_arc.clone(), stop.clone()))
            })
            .collect();
        let load = Duration::from_millis(rng.between(200, 800));
        tokio::time::sleep(load).await;
        server.signal(libc::SIGKILL);
        let status = server.wait_exit().await;
        stop.store(true, Ordering::SeqCst);
        for h in handles {
            match tokio::time::timeout(REQUEST_TIMEOUT + Duration::from_secs(10), h).await {
                Ok(Ok(w)) => workers.push(w),
                Ok(Err(e)) => {
                    totals.fatal = Some(format!("a worker task failed: {e}"));
                    return totals;
                }
                Err(_) => {
                    totals.fatal = Some("a worker did not stop after the kill".into());
                    return totals;
                }
            }
        }
        match status {
            Some(s) if s.success() => totals
                .anomalies
                .push(format!("kill {kill}: killed, yet exit status {s}")),
            Some(_) => {}
            None => {
                totals.fatal = Some(format!("kill {kill}: the process did not exit after SIGKILL"));
                return totals;
            }
        }
        totals.kills += 1;
        let round_acked: u64 = workers.iter().map(|w| w.acked).sum();
        let in_flight: u64 = workers.iter().map(|w| w.unanswered).sum();
        totals.acked += round_acked;
        for w in workers.iter_mut() {
            totals.anomalies.append(&mut w.anomalies);
        }

        server = match Server::start(bin, data, logs, &http, kill as usize).await {
            Ok(s) => s,
            Err(e) => {
                totals.fatal = Some(format!("restart after kill {kill}: {e}"));
                return totals;
            }
        };
        ctx.inbox = server.inbox.clone();
        ctx.scheduler = server.scheduler.clone();
        let findings = match check(&ctx, &mut workers, &mut rng).await {
            Ok(f) => f,
            Err(e) => {
                totals.fatal = Some(format!("check after kill {kill}: {e}\n{}", server.log_text()));
                return totals;
            }
        };
        totals.acked += findings.acked;
        for l in &findings.lost {
            println!("  LOST after kill {kill}: {l}");
        }
        for a in &findings.anomalies {
            println!("  ANOMALY after kill {kill}: {a}");
        }
        totals.lost.extend(findings.lost);
        totals.anomalies.extend(findings.anomalies);
        let inbox_items: usize = workers.iter().map(|w| w.inbox.len()).sum();
        let sched_items: usize = workers.iter().map(|w| w.sched.len()).sum();
        println!(
            "kill {kill}/{kills}: load {} ms, {round_acked} acknowledged ({} in total), {in_flight} in flight, \
             {} uncertain resolved, {} unacknowledged leftovers; {inbox_items} inbox / {sched_items} scheduler \
             items; {} lost so far",
            load.as_millis(),
            totals.acked,
            findings.resolved,
            findings.strays,
            totals.lost.len()
        );
    }

    // a clean stop at the end: SIGTERM flushes and exits 0
    server.signal(libc::SIGTERM);
    match server.wait_exit().await {
        Some(s) if s.success() => {}
        Some(s) => totals.anomalies.push(format!("SIGTERM at the end: exit status {s}")),
        None => totals
            .anomalies
            .push("SIGTERM at the end: the process did not exit".into()),
    }
    totals
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let started = Instant::now();
    let kills = env_number("CRASH_KILLS", 50);
    let workers = env_number("CRASH_WORKERS", 6).max(1) as usize;
    let seed = match std::env::var("CRASH_SEED") {
        Ok(_) => env_number("CRASH_SEED", 0),
        Err(_) => {
            let mut b = [0u8; 8];
            getrandom::getrandom(&mut b).expect("OS randomness");
            u64::from_le_bytes(b)
        }
    };
    let bin = locate_binary();
    let data = tempfile::Builder::new()
        .prefix("pigeonhole-crash-data-")
        .tempdir()
        .expect("a temporary data directory");
    let logs = tempfile::Builder::new()
        .prefix("pigeonhole-crash-logs-")
        .tempdir()
        .expect("a temporary directory for the server logs");
    println!(
        "crash test: {} with {kills} kills, {workers} workers, CRASH_SEED={seed}",
        bin.display()
    );

    let totals = run(&bin, kills, seed, workers, data.path(), logs.path()).await;

    let failed = totals.fatal.is_some() || !totals.lost.is_empty() || !totals.anomalies.is_empty();
    if !totals.anomalies.is_empty() {
        println!("{} anomalies:", totals.anomalies.len());
        for a in totals.anomalies.iter().take(50) {
            println!("  {a}");
        }
    }
    if let Some(fatal) = &totals.fatal {
        println!("FAILED: {fatal}");
    }
    if failed {
        println!("data directory kept in {}", data.keep().display());
        println!("server logs kept in {}", logs.keep().display());
    }
    println!("run time {:.1} s", started.elapsed().as_secs_f64());
    println!(
        "{} kills, {} acknowledged writes, {} lost",
        totals.kills,
        totals.acked,
        totals.lost.len()
    );
    if failed {
        std::process::exit(1);
    }
}
