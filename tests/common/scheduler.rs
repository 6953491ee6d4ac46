//! Scheduler-service test support: a test server with fast workers, item contents, the
//! outbox of `.eml` files, bounded waits and UTC clock helpers.

#![allow(dead_code)]

use super::{Api, Auth, Server};
use pigeonhole::config::Settings;
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the bounded waits of these tests wait at most.
pub const WAIT: Duration = Duration::from_secs(20);

/// Settings of a scheduler test server: workers wake every second and retry quickly.
pub fn fast_loopers(settings: &mut Settings) {
    settings.looper_period = 1;
    settings.looper_retry_delay_us = 100_000;
}

impl Server {
    /// A test server (see [`Server::start`]) with fast workers.
    pub async fn start_scheduler() -> Server {
        Server::start_with(fast_loopers).await
    }

    /// A test server with fast workers and further settings applied.
    pub async fn start_scheduler_with(adjust: impl FnOnce(&mut Settings)) -> Server {
        Server::start_with(|s| {
            fast_loopers(s);
            adjust(s);
        })
        .await
    }

    /// The directory of written e-mails (outbox mode, no `--smtp-url`).
    pub fn outbox(&self) -> PathBuf {
        self.settings.data_dir.join("outbox")
    }
}

/// Item contents (scheduler.md §2.2) with a text content.
pub fn tickle(content: &str, day: &str, time: Option<&str>, recurrence: Option<Value>) -> Value {
    json!({"content": content, "scheduled-day": day, "scheduled-time": time, "recurrence": recurrence})
}

/// Item contents far in the future (never due during a test).
pub fn future_tickle(content: &str) -> Value {
    tickle(content, "2099-01-01", Some("08:00"), None)
}

/// `{"every-x-days": {"days": n, "time-of-day": t}}`.
pub fn every_days(days: u64, time: Option<&str>) -> Value {
    json!({"every-x-days": {"days": days, "time-of-day": time}})
}

/// Scheduler calls on an [`Api`] bound to the scheduler port.
impl Api {
    /// Adds an item (asserting 200) and returns its UUID.
    pub async fn add_tickle(&self, auth: &Auth, contents: &Value) -> String {
        let v = self.post("/scheduler/item", auth, contents).await.expect_json(200);
        v.as_str()
            .unwrap_or_else(|| panic!("add answered {v}, not a UUID string"))
            .to_owned()
    }

    /// `GET /scheduler/items` with an optional filter (asserting 200).
    pub async fn tickles(&self, auth: &Auth, filter: Option<&str>) -> Vec<Value> {
        let path = match filter {
            Some(f) => format!("/scheduler/items?filter={f}"),
            None => "/scheduler/items".to_owned(),
        };
        let v = self.get(&path, auth).await.expect_json(200);
        v.as_array()
            .unwrap_or_else(|| panic!("items is not an array: {v}"))
            .clone()
    }

    /// `GET /scheduler/item/info/:id` (asserting 200).
    pub async fn tickle_info(&self, auth: &Auth, id: &str) -> Value {
        self.get(&format!("/scheduler/item/info/{id}"), auth)
            .await
            .expect_json(200)
    }

    /// `POST /sync` with `{"syncRequestTickles": tickles}` (asserting 200); the inner
    /// `syncResponseTickles` object.
    pub async fn sync_tickles(&self, auth: &Auth, tickles: Value) -> Value {
        let v = self
            .post("/sync", auth, &json!({"syncRequestTickles": tickles}))
            .await
            .expect_json(200);
        v.get("syncResponseTickles")
            .unwrap_or_else(|| panic!("sync answered without syncResponseTickles: {v}"))
            .clone()
    }

    /// `GET /trigger` (asserting 200).
    pub async fn triggers(&self, auth: &Auth) -> Vec<Value> {
        let v = self.get("/trigger", auth).await.expect_json(200);
        v.as_array()
            .unwrap_or_else(|| panic!("triggers is not an array: {v}"))
            .clone()
    }

    /// `POST /trigger/email` (asserting 200); the trigger UUID.
    pub async fn add_email_trigger(&self, auth: &Auth, address: &str) -> String {
        let v = self
            .post("/trigger/email", auth, &json!({"addEmailTrigger": address}))
            .await
            .expect_json(200);
        v.as_str()
            .unwrap_or_else(|| panic!("e-mail trigger answered {v}, not a UUID string"))
            .to_owned()
    }
}

/// Polls `check` every 50 ms until it yields `Some`, at most `WAIT`; panics naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_within(WAIT, what, check).await
}

/// [`wait_for`] with a deadline of `within` (work that takes longer than [`WAIT`] allows).
pub async fn wait_for_within<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
}

/// The texts of every complete `.eml` file in `dir` (none when it does not exist yet).
pub fn read_outbox(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, String)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "eml"))
        .filter_map(|p| {
            std::fs::read(&p)
                .ok()
                .map(|b| (p, String::from_utf8_lossy(&b).into_owned()))
        })
        .collect();
    out.sort();
    out
}

/// The text of an e-mail with quoted-printable soft line breaks joined.
pub fn unfold_qp(text: &str) -> String {
    text.replace("=\r\n", "").replace("=\n", "")
}

/// Waits for the `.eml` files in `dir` that contain `needle` until there are `count` of
/// them; their texts (soft line breaks joined), oldest name first.
pub async fn wait_for_emails(dir: &Path, needle: &str, count: usize) -> Vec<String> {
    wait_for(
        &format!("{count} e-mail(s) containing {needle:?} in {}", dir.display()),
        || async {
            let found: Vec<String> = read_outbox(dir)
                .into_iter()
                .map(|(_, t)| unfold_qp(&t))
                .filter(|t| t.contains(needle))
                .collect();
            (found.len() >= count).then_some(found)
        },
    )
    .await
}

/// The verification key (32 hex digits after `Key: `) of a verification e-mail.
pub fn verification_key(email: &str) -> String {
    let at = email
        .find("Key: ")
        .unwrap_or_else(|| panic!("no \"Key: \" line in the e-mail:\n{email}"));
    let key: String = email[at + 5..].chars().take(32).collect();
    assert!(
        key.len() == 32 && key.bytes().all(|c| c.is_ascii_hexdigit()),
        "the key {key:?} is not 32 hex digits"
    );
    key
}

/// Waits for the verification e-mail number `n` (1-based) of trigger `id`; its key.
pub async fn wait_for_verification_key(s: &Server, id: &str, n: usize) -> String {
    wait_for_verification_key_in(&s.outbox(), id, n).await
}

/// [`wait_for_verification_key`] for the outbox directory `outbox`.
pub async fn wait_for_verification_key_in(outbox: &Path, id: &str, n: usize) -> String {
    let emails = wait_for_emails(outbox, &format!("Trigger: {id}"), n).await;
    // names start with the UTC write time, so the newest is last
    verification_key(&emails[n - 1])
}

/// The UTC wall clock `secs_ago` seconds ago as (`YYYY-MM-DD`, `HH:MM:SS`).
pub fn utc_ago(secs_ago: i64) -> (String, String) {
    let t = time::OffsetDateTime::now_utc() - time::Duration::seconds(secs_ago);
    (
        format!("{:04}-{:02}-{:02}", t.year(), t.month() as u8, t.day()),
        format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
    )
}

/// The day after `day` (`YYYY-MM-DD`).
pub fn next_day(day: &str) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let d = time::Date::parse(day, &format).expect("a YYYY-MM-DD day");
    let n = d.next_day().expect("a next day");
    n.format(&format).expect("format a day")
}

/// Keys of a JSON object, sorted.
pub fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

/// Creates an inbox trigger (the scheduler logs in at `url` to check the credentials).
pub async fn add_inbox_trigger(api: &Api, auth: &Auth, url: &str, username: &str, key: &str) -> String {
    let v = api
        .post(
            "/trigger/inbox",
            auth,
            &json!({"addInboxTriggerUrl": url, "addInboxTriggerUsername": username,
                    "addInboxTriggerAccessKey": key}),
        )
        .await
        .expect_json(200);
    v["Right"]
        .as_str()
        .unwrap_or_else(|| panic!("the inbox trigger was refused: {v}"))
        .to_owned()
}
