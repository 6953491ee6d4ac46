//! Test support: the real server started in-process on ephemeral ports, and a small HTTP
//! client over reqwest that speaks to it (bearer tokens, access-key headers, raw bodies).

#![allow(dead_code)]

pub mod postgres;
pub mod process;
pub mod scheduler;
pub mod scripted;

use base64::Engine;
use pigeonhole::clock::Clock;
use pigeonhole::config::{PaymentPlan, Settings};
use pigeonhole::domain::wire::Timestamp;
pub use pigeonhole::domain::worker::Worker;
use pigeonhole::workers::Workers;
use reqwest::header::{HeaderMap, HeaderValue};
pub use reqwest::Method;
use serde_json::{json, Value};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The 16 permissions of a password login of an ordinary user, in table order (§2.7).
pub const USER_PERMISSIONS: [&str; 16] = [
    "PermitAdd",
    "PermitShow",
    "PermitSize",
    "PermitDelete",
    "PermitGetItem",
    "PermitGetItems",
    "PermitGetItemUUIDs",
    "PermitSync",
    "PermitDeleteAccount",
    "PermitGetAccountInfo",
    "PermitPostChangePassphrase",
    "PermitPostAddAccessKey",
    "PermitGetAccessKey",
    "PermitGetAccessKeys",
    "PermitDeleteAccessKey",
    "PermitGetPermissions",
];

/// The three admin permissions, after the user ones in table order.
pub const ADMIN_ONLY_PERMISSIONS: [&str; 3] = [
    "PermitAdminDeleteAccount",
    "PermitAdminGetAccounts",
    "PermitAdminGetStats",
];

/// A reqwest client that never uses a proxy (rustls needs a crypto provider installed).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        // reqwest's default TCP user timeout (30 s of unacknowledged data) ends an upload
        // that waits for its turn at the server (imports run one at a time) whatever the
        // request's own limit: the tests give each request its limit instead
        .tcp_user_timeout(None)
        .build()
        .expect("build the HTTP client")
}

/// Standard padded base64.
pub fn b64(bytes: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Item contents of a text item.
pub fn text_item(text: &str) -> Value {
    json!({"type": "text", "data": b64(text)})
}

/// The settings every test server starts from: a fresh data directory, cheap password
/// hashing, and `admin` as the admin username.
pub fn test_settings(dir: &TempDir) -> Settings {
    let mut settings = Settings::with_data_dir(dir.path());
    settings.password_iterations = 1000;
    settings.admins = vec!["admin".into()];
    settings
}

/// A payment plan for monetised test servers.
pub fn test_plan() -> PaymentPlan {
    PaymentPlan {
        plan: "plan_test".into(),
        price: 1200,
        currency: "chf".into(),
        trial_days: None,
        publishable_key: "pk_test_example".into(),
    }
}

/// Credentials of a request.
#[derive(Clone, Debug)]
pub enum Auth {
    None,
    Bearer(String),
    Key { username: String, secret: String },
}

impl Auth {
    pub fn key(username: &str, secret: &str) -> Auth {
        Auth::Key {
            username: username.into(),
            secret: secret.into(),
        }
    }

    pub fn apply(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => rb,
            Auth::Bearer(token) => rb.header("Authorization", format!("Bearer {token}")),
            Auth::Key { username, secret } => rb.header("Username", username).header("Access-Key", secret),
        }
    }
}

/// An answer, read in full.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// An HTML body as text: tags removed, whitespace collapsed.
    pub fn page_text(&self) -> String {
        let mut text = String::new();
        let mut in_tag = false;
        for c in self.text().chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "answer is not JSON ({e}): status {} body {:?}",
                self.status,
                self.text()
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().expect("header is text"))
    }

    /// The media type of `Content-Type`, lower case, without parameters.
    pub fn media_type(&self) -> String {
        self.header("content-type")
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }

    /// Asserts the status (showing the body otherwise) and returns the answer.
    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(self.status, status, "unexpected status; body: {:?}", self.text());
        self
    }

    /// Asserts a JSON success answer with `status` and returns its value.
    #[track_caller]
    pub fn expect_json(self, status: u16) -> Value {
        let r = self.expect(status);
        assert_eq!(
            r.media_type(),
            "application/json",
            "JSON answer without JSON content type"
        );
        r.json()
    }

    /// Asserts an answer with `status` and an empty body.
    #[track_caller]
    pub fn expect_empty(self, status: u16) -> Resp {
        let r = self.expect(status);
        assert!(r.body.is_empty(), "expected an empty body, got {:?}", r.text());
        r
    }

    /// Asserts a successful registration: 204 on the inbox service (Intray's `Verb 'POST 204`),
    /// 200 on the scheduler (Tickler's `Post '[JSON] NoContent`), an empty body either way.
    #[track_caller]
    pub fn expect_registered(self) -> Resp {
        assert!(
            self.status == 204 || self.status == 200,
            "registration answered {}: {:?}",
            self.status,
            self.text()
        );
        assert!(self.body.is_empty(), "expected an empty body, got {:?}", self.text());
        self
    }

    /// Asserts an error answer: the status, `Content-Type: application/json` and a body
    /// `{"error": "<non-empty string>"}`. Returns the reason.
    #[track_caller]
    pub fn expect_error(self, status: u16) -> String {
        let r = self.expect(status);
        assert_eq!(
            r.media_type(),
            "application/json",
            "error answer {status} without JSON content type: {:?}",
            r.headers
        );
        let body = r.json();
        let reason = body
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("error answer {status} without an \"error\" string: {body}"));
        assert!(!reason.is_empty(), "error answer {status} with an empty reason");
        reason.to_owned()
    }
}

/// A client bound to one service's base URL.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: String) -> Api {
        Api {
            base,
            http: http_client(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A request to `path` with `auth` applied; add headers or a body, then [`Api::send`].
    pub fn request(&self, method: Method, path: &str, auth: &Auth) -> reqwest::RequestBuilder {
        auth.apply(self.http.request(method, self.url(path)))
    }

    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Resp {
        let response = rb.send().await.expect("request failed");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.bytes().await.expect("read the answer body").to_vec();
        Resp { status, headers, body }
    }

    pub async fn get(&self, path: &str, auth: &Auth) -> Resp {
        self.send(self.request(Method::GET, path, auth)).await
    }

    pub async fn delete(&self, path: &str, auth: &Auth) -> Resp {
        self.send(self.request(Method::DELETE, path, auth)).await
    }

    /// POST with a JSON body and `Content-Type: application/json`.
    pub async fn post(&self, path: &str, auth: &Auth, body: &Value) -> Resp {
        self.send(self.request(Method::POST, path, auth).json(body)).await
    }

    /// POST with raw bytes and the given content type (none when `None`).
    pub async fn post_raw(
        &self,
        path: &str,
        auth: &Auth,
        content_type: Option<&str>,
        body: impl Into<Vec<u8>>,
    ) -> Resp {
        let mut rb = self.request(Method::POST, path, auth).body(body.into());
        if let Some(ct) = content_type {
            rb = rb.header("Content-Type", ct);
        }
        self.send(rb).await
    }

    pub async fn register(&self, name: &str, password: &str) -> Resp {
        self.post("/register", &Auth::None, &json!({"name": name, "password": password}))
            .await
    }

    pub async fn login(&self, username: &str, password: &str) -> Resp {
        self.post(
            "/login",
            &Auth::None,
            &json!({"username": username, "password": password}),
        )
        .await
    }

    /// Logs in (asserting 204) and returns the bearer credentials.
    pub async fn login_ok(&self, username: &str, password: &str) -> Auth {
        let r = self.login(username, password).await.expect_empty(204);
        Auth::Bearer(token_of(&r))
    }

    /// Registers and logs in a new account with password `<name>-password`.
    pub async fn user(&self, name: &str) -> Auth {
        let password = format!("{name}-password");
        self.register(name, &password).await.expect_registered();
        self.login_ok(name, &password).await
    }

    /// Adds a text item (asserting 200) and returns its UUID.
    pub async fn add_text(&self, auth: &Auth, text: &str) -> String {
        let v = self.post("/inbox/item", auth, &text_item(text)).await.expect_json(200);
        v.as_str()
            .unwrap_or_else(|| panic!("add answered {v}, not a UUID string"))
            .to_owned()
    }

    pub async fn uuids(&self, auth: &Auth) -> Vec<String> {
        let v = self.get("/inbox/uuids", auth).await.expect_json(200);
        v.as_array()
            .expect("uuids is an array")
            .iter()
            .map(|u| u.as_str().expect("uuid string").to_owned())
            .collect()
    }

    pub async fn size(&self, auth: &Auth) -> u64 {
        self.get("/inbox/size", auth)
            .await
            .expect_json(200)
            .as_u64()
            .expect("size is an integer")
    }

    /// Creates an access key; returns `(secret, uuid)`.
    pub async fn add_key(&self, auth: &Auth, name: &str, permissions: &[&str]) -> (String, String) {
        let v = self
            .post(
                "/access-key",
                auth,
                &json!({"addAccessKeyName": name, "addAccessKeyPermissions": permissions}),
            )
            .await
            .expect_json(200);
        (
            v["accessKeyCreatedKey"].as_str().expect("secret").to_owned(),
            v["accessKeyCreatedUUID"].as_str().expect("key uuid").to_owned(),
        )
    }

    /// Sends raw bytes on a fresh TCP connection and returns the status code and the whole
    /// answer text (the request should carry `Connection: close`).
    pub async fn raw(&self, request: &[u8]) -> (u16, String) {
        let addr = self.base.strip_prefix("http://").expect("http base URL");
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request).await.expect("write the request");
        let mut answer = Vec::new();
        // The server may answer (and close) before the whole request was written.
        let _ = stream.read_to_end(&mut answer).await;
        let text = String::from_utf8_lossy(&answer).into_owned();
        let status = text
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status line in {text:?}"));
        (status, text)
    }
}

/// The token of a login answer: its single `Set-Cookie: JWT-Cookie=<token>; ...` header.
#[track_caller]
pub fn token_of(r: &Resp) -> String {
    let cookies: Vec<&HeaderValue> = r.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies.len(), 1, "expected exactly one Set-Cookie, got {cookies:?}");
    let cookie = cookies[0].to_str().expect("cookie is text");
    let first = cookie.split(';').next().unwrap();
    let token = first
        .strip_prefix("JWT-Cookie=")
        .unwrap_or_else(|| panic!("not a JWT-Cookie: {cookie}"));
    assert!(!token.is_empty(), "empty token in {cookie}");
    token.to_owned()
}

/// How long a test waits at most for a worker to finish a pass.
pub const PASS_WAIT: Duration = Duration::from_secs(20);

/// The real server, running in-process on ephemeral ports until stopped.
pub struct Server {
    pub api: Api,
    pub scheduler: Api,
    pub settings: Settings,
    /// The workers' table of the running server (see [`Server::settle`]).
    pub workers: Arc<Workers>,
    /// The workers' clock: real, or manual for [`Server::start_on_manual_clock`].
    pub clock: Clock,
    dir: TempDir,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
}

impl Deref for Server {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Server {
    /// The default test server (free mode, open registration, admin `admin`).
    pub async fn start() -> Server {
        Server::start_with(|_| {}).await
    }

    /// A test server with extra settings applied on top of [`test_settings`].
    pub async fn start_with(adjust: impl FnOnce(&mut Settings)) -> Server {
        Server::start_on(Clock::real(), adjust).await
    }

    /// A test server whose workers decide by a manual clock, standing at the real time of
    /// the start until the test moves it ([`Server::clock`]).
    pub async fn start_on_manual_clock(adjust: impl FnOnce(&mut Settings)) -> Server {
        Server::start_on(Clock::manual(Timestamp::now()), adjust).await
    }

    async fn start_on(clock: Clock, adjust: impl FnOnce(&mut Settings)) -> Server {
        let dir = tempfile::tempdir().expect("temporary data directory");
        let mut settings = test_settings(&dir);
        adjust(&mut settings);
        Server::launch(dir, settings, clock).await
    }

    /// A test server on the data directory `dir` (one prepared beforehand, e.g. restored).
    pub async fn start_in(dir: TempDir) -> Server {
        let settings = test_settings(&dir);
        Server::launch(dir, settings, Clock::real()).await
    }

    /// A monetised test server with `max_items_free` free items.
    pub async fn start_paid(max_items_free: u64) -> Server {
        Server::start_with(|s| {
            s.payment_plan = Some(test_plan());
            s.max_items_free = max_items_free;
        })
        .await
    }

    /// Starts the server on `dir` (new ports). The database of a server stopped a moment
    /// ago may not be released yet: a start that fails is tried again for a while.
    async fn launch(dir: TempDir, mut settings: Settings, clock: Clock) -> Server {
        settings.data_dir = dir.path().to_path_buf();
        on_test_database(&mut settings);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let inbox = TcpListener::bind("127.0.0.1:0").await.expect("bind the inbox port");
            let scheduler = TcpListener::bind("127.0.0.1:0").await.expect("bind the scheduler port");
            let inbox_addr = inbox.local_addr().unwrap();
            let scheduler_addr = scheduler.local_addr().unwrap();
            let (shutdown, stopped) = watch::channel(false);
            let listeners = pigeonhole::Listeners {
                inbox: Some(inbox),
                scheduler: Some(scheduler),
            };
            match pigeonhole::launch::start(settings.clone(), listeners, clock.clone(), stopped).await {
                Ok(running) => {
                    return Server {
                        api: Api::new(format!("http://{inbox_addr}")),
                        scheduler: Api::new(format!("http://{scheduler_addr}")),
                        settings,
                        workers: running.workers.clone(),
                        clock,
                        dir,
                        shutdown,
                        task: tokio::spawn(running.finish()),
                    }
                }
                Err(e) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the server does not start on its data directory: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await; // retry
                }
            }
        }
    }

    /// Stops the server gracefully (asserting that `launch` returned `Ok`) and hands back
    /// its data directory and settings.
    pub async fn stop(self) -> (TempDir, Settings) {
        let _ = self.shutdown.send(true);
        let result = tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the server stops within a minute")
            .expect("the server task did not panic");
        assert_eq!(result, Ok(()), "launch returned an error");
        (self.dir, self.settings)
    }

    /// Stops the server and starts it again on the same data directory (new ports, the
    /// same clock).
    pub async fn restart(self) -> Server {
        self.restart_with(|_| {}).await
    }

    /// Stops the server and starts it again on the same data directory with `adjust`
    /// applied to its settings (new ports, the same clock).
    pub async fn restart_with(self, adjust: impl FnOnce(&mut Settings)) -> Server {
        let clock = self.clock.clone();
        let (dir, mut settings) = self.stop().await;
        adjust(&mut settings);
        Server::launch(dir, settings, clock).await
    }

    /// Waits until each of `workers` in turn has finished a pass that started after the
    /// previous one's (the first: after this call) and has no delivery in flight; each is
    /// woken, so that it need not wait for its period. Then whatever the workers would do
    /// about the state of the call has been done: this is how a test shows that nothing
    /// more happens (no second trigger, no duplicate delivery, no e-mail) rather than by
    /// sleeping a while, which also passes when a worker simply has not run yet. Panics
    /// after [`PASS_WAIT`] (a worker that does not run never finishes a pass).
    pub async fn settle(&self, workers: &[Worker]) {
        for &worker in workers {
            let settled = self.workers.settled(worker);
            self.workers.wake(worker);
            tokio::time::timeout(PASS_WAIT, settled).await.unwrap_or_else(|_| {
                panic!(
                    "worker {} finished no pass within {PASS_WAIT:?} ({:?})",
                    worker.name(),
                    *self.workers.activity(worker).borrow()
                )
            });
        }
    }

    /// Moves the workers' manual clock forward by `by`; every worker takes a look.
    pub fn advance_clock(&self, by: Duration) {
        self.clock.advance(by);
    }
}

/// The test binaries whose servers stay on sled whatever `PIGEONHOLE_TEST_POSTGRES` says:
/// they test what only the sled engine has (its backups of the data directory).
const SLED_ONLY: &[&str] = &["backup"];

/// With `PIGEONHOLE_TEST_POSTGRES=<admin URL>` (as the conformance suite takes it), the
/// in-process test servers keep their data in PostgreSQL: each data directory gets a
/// database of its own, named after it (so a server restarted on the same directory finds
/// its data again), made with `psql` if missing. Unset, or in a [`SLED_ONLY`] binary: sled.
fn on_test_database(settings: &mut Settings) {
    use std::hash::{Hash, Hasher};
    let admin = match std::env::var("PIGEONHOLE_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => url,
        _ => return,
    };
    let binary = std::env::current_exe().expect("the test binary's path");
    let stem = binary.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let name = stem.rsplit_once('-').map_or(stem, |(name, _hash)| name);
    if settings.database.is_some() || SLED_ONLY.contains(&name) {
        return;
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    settings.data_dir.hash(&mut hasher);
    let db = format!("rt_{:016x}", hasher.finish());
    let psql = |sql: &str| {
        let out = std::process::Command::new("psql")
            .args([admin.as_str(), "-tAc", sql])
            .output()
            .expect("psql runs (PIGEONHOLE_TEST_POSTGRES needs the PostgreSQL client)");
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    if psql(&format!("SELECT 1 FROM pg_database WHERE datname = '{db}'")) != "1" {
        psql(&format!("CREATE DATABASE {db}"));
    }
    // the admin URL with the database's name in place of its own
    let (scheme, rest) = admin.split_once("://").expect("PIGEONHOLE_TEST_POSTGRES is a URL");
    let (authority, after) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let query = after.find('?').map_or("", |i| &after[i..]);
    let url = format!("{scheme}://{authority}/{db}{query}");
    settings.database = Some(
        pigeonhole::config::DatabaseUrl::parse(&url)
            .unwrap_or_else(|e| panic!("PIGEONHOLE_TEST_POSTGRES {admin} makes a bad URL {url}: {e}")),
    );
}

/// The database of a stopped server, opened as the server opens it (sled in its data
/// directory, or its PostgreSQL database), to look at what it stored.
pub async fn open_store(settings: &Settings) -> Arc<pigeonhole::store::Store> {
    match &settings.database {
        Some(url) => {
            let connection = pigeonhole::launch::database::connection(url);
            let (store, _) = pigeonhole::store::postgres::open(&connection, settings.database_lease)
                .await
                .expect("open the PostgreSQL database");
            Arc::new(store)
        }
        None => pigeonhole::store::Store::open(&settings.data_dir).expect("open the database"),
    }
}

/// The workers that turn a due item into an inbox delivery, in order: [`Server::settle`]
/// on them shows that everything due at the call was triggered and delivered.
pub const INBOX_DELIVERY: [Worker; 3] = [
    Worker::Triggerer,
    Worker::TriggeredInboxItemScheduler,
    Worker::TriggeredInboxItemSender,
];

/// The workers that turn a due item into a sent e-mail, in order.
pub const EMAIL_DELIVERY: [Worker; 4] = [
    Worker::Triggerer,
    Worker::TriggeredEmailScheduler,
    Worker::TriggeredEmailConverter,
    Worker::Emailer,
];

/// The workers that send a queued verification e-mail, in order.
pub const VERIFICATION: [Worker; 2] = [Worker::VerificationEmailConverter, Worker::Emailer];

/// Every file under `dir` with its bytes (to show that a refused command changed nothing).
pub fn file_contents(dir: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                all.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    all
}
