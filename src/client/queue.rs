//! Capture never fails (issue 19 point 5): a note that `pigeonhole add` cannot hand to the
//! server waits in this machine's local queue, `<settings>.queue.json` next to the client
//! settings (mode 0600, written whole or not at all), and the next command that reaches the
//! server, or `pigeonhole sync`, delivers it through `POST /inbox/sync` (inbox.md §5).
//!
//! Each note is stored once. The sync endpoint does not deduplicate, so a note is marked
//! `sent` (durably) before a request carries it and removed only once the answer names the
//! item the server stored for it. A note still marked `sent` at the next delivery (its
//! answer was lost) is looked for first among the server's items by its `created` instant,
//! which the client chose to the nanosecond, and its text; only a note that is not there is
//! sent again.

use super::error::ClientError;
use super::settings::{self, ClientSettings};
use super::Client;
use crate::config::{ClientOpts, Command};
use crate::domain::wire::{self, Timestamp};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// At most this many notes wait in the queue.
pub const MAX_NOTES: usize = 1000;
/// At most this many bytes of notes wait in the queue.
pub const MAX_BYTES: usize = 16 << 20;
/// The queue file is read only up to this size: what [`MAX_BYTES`] of text can take as
/// JSON (every character escaped as `\uXXXX`), and the notes' keys and times. A larger file
/// is not this client's queue and is moved aside unread.
const MAX_FILE_BYTES: u64 = 6 * MAX_BYTES as u64 + MAX_NOTES as u64 * 256;
/// One sync request carries notes of at most this many bytes (or a single larger note).
const BATCH_BYTES: usize = 1 << 20;

/// The queue file.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct QueueFile {
    /// The inbox and account the notes are for (those of the settings when the first was
    /// queued).
    inbox_url: String,
    username: String,
    notes: Vec<Note>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Note {
    /// The note's key in the sync request's `added`.
    key: String,
    /// When it was captured: the item's `created`, unique in the queue.
    created: Timestamp,
    text: String,
    /// A request carrying it was sent and its answer did not arrive: it may be stored.
    #[serde(default)]
    sent: bool,
}

/// Why a delivery did not complete.
#[derive(Debug)]
enum Failure {
    /// No connection to the server: nothing was sent.
    Unreachable(reqwest::Error),
    /// The request went out and no (whole) answer came back: the notes may be stored.
    NoAnswer(reqwest::Error),
    /// A 5xx: the server is there but cannot store now.
    Server(StatusCode, String),
    /// A 4xx: the server refuses the request.
    Refused(StatusCode, String),
    /// A 2xx the client cannot read.
    BadAnswer(String),
    /// The account's free item limit: the server stored only some of the notes.
    Limit { left: usize },
    /// The local queue file.
    Local(String),
}

impl From<Failure> for ClientError {
    /// The queue's failure, as the command says it.
    fn from(e: Failure) -> ClientError {
        ClientError::local(e.to_string())
    }
}

impl Failure {
    /// The server was not reached (or did not answer): the notes wait.
    fn is_unreachable(&self) -> bool {
        matches!(
            self,
            Failure::Unreachable(_) | Failure::NoAnswer(_) | Failure::Server(..)
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Unreachable(e) => write!(f, "no connection ({})", root_cause(e)),
            Failure::NoAnswer(e) => write!(f, "no answer ({})", root_cause(e)),
            Failure::Server(status, reason) => write!(f, "the server answered {status}: {reason}"),
            Failure::Refused(StatusCode::UNAUTHORIZED, _) => f.write_str(super::api::KEY_NO_LONGER_VALID),
            Failure::Refused(status, reason) => write!(f, "the server refused the notes ({status}): {reason}"),
            Failure::BadAnswer(why) => write!(f, "the server's answer cannot be read: {why}"),
            Failure::Limit { left } => write!(
                f,
                "the account is at its free item limit: {left} note(s) not taken (delete items or subscribe)"
            ),
            Failure::Local(why) => f.write_str(why),
        }
    }
}

/// The innermost error of `e` (reqwest's own text is "error sending request").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The queue next to the settings `settings_path`: `client.toml` → `client.queue.json`.
fn queue_path(settings_path: &Path) -> PathBuf {
    settings_path.with_extension("queue.json")
}

/// What the queue file holds.
enum Read {
    Missing,
    Queue(QueueFile),
    /// Too big, not JSON, or not a queue: why.
    Unreadable(String),
}

/// Reads the queue file at `path`, at most [`MAX_FILE_BYTES`] of it.
fn read(path: &Path) -> std::io::Result<Read> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Ok(Read::Unreadable(format!("larger than {} MiB", MAX_FILE_BYTES >> 20)));
    }
    Ok(match serde_json::from_slice::<QueueFile>(&bytes) {
        Ok(queue) => Read::Queue(queue),
        Err(e) => Read::Unreadable(e.to_string()),
    })
}

/// Moves the queue file at `path` aside, to `<path>.<why>-<unix seconds>` (a free name), and
/// syncs the directory; the new path.
fn set_aside(path: &Path, why: &str) -> std::io::Result<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let aside = (0..)
        .map(|n| match n {
            0 => path.with_file_name(format!("{name}.{why}-{secs}")),
            n => path.with_file_name(format!("{name}.{why}-{secs}-{n}")),
        })
        .find(|p| !p.exists())
        .unwrap_or_default();
    std::fs::rename(path, &aside)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(aside)
}

/// The queue, locked against other `pigeonhole` processes of this user while it lives.
struct Queue {
    path: PathBuf,
    file: QueueFile,
    _lock: std::fs::File,
}

impl Queue {
    /// Locks and reads the queue (empty when there is none), bound to `settings`' account
    /// when it is empty.
    fn open(settings_path: &Path, settings: &ClientSettings) -> Result<Queue, Failure> {
        let path = queue_path(settings_path);
        let lock_path = path.with_extension("lock");
        let local = |e: std::io::Error| Failure::Local(format!("cannot use the local queue {}: {e}", path.display()));
        use std::os::unix::fs::OpenOptionsExt;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(local)?;
        lock.lock().map_err(local)?;
        let mut file = match read(&path).map_err(local)? {
            Read::Missing => QueueFile::default(),
            Read::Queue(file) => file,
            Read::Unreadable(why) => {
                let aside = set_aside(&path, "damaged").map_err(local)?;
                eprintln!(
                    "pigeonhole: the local queue was not readable ({why}): it was moved to {} and a new one begun",
                    aside.display()
                );
                QueueFile::default()
            }
        };
        if !file.notes.is_empty() && (file.inbox_url != settings.inbox_url || file.username != settings.username) {
            let aside = set_aside(&path, "other-account").map_err(local)?;
            eprintln!(
                "pigeonhole: the local queue held {} note(s) for {} at {}, not for the account this machine is set up \
                 for: they were moved to {}; to send them, set up that account, put the file back as {} and run \
                 `pigeonhole sync`",
                file.notes.len(),
                file.username,
                file.inbox_url,
                aside.display(),
                path.display()
            );
            file = QueueFile::default();
        }
        if file.notes.is_empty() {
            file.inbox_url = settings.inbox_url.clone();
            file.username = settings.username.clone();
        }
        Ok(Queue {
            path,
            file,
            _lock: lock,
        })
    }

    /// Writes the queue (mode 0600, whole or not at all).
    fn save(&self) -> Result<(), Failure> {
        let bytes = serde_json::to_vec_pretty(&self.file).map_err(|e| Failure::Local(e.to_string()))?;
        settings::write_private(&self.path, &bytes).map_err(|e| Failure::Local(e.to_string()))
    }

    fn bytes(&self) -> usize {
        self.file.notes.iter().map(|n| n.text.len()).sum()
    }

    /// Appends `text` as a new note, unless the queue is full; its key.
    fn push(&mut self, text: &str, sent: bool) -> Result<String, ClientError> {
        if self.file.notes.len() >= MAX_NOTES || self.bytes() + text.len() > MAX_BYTES {
            return Err(ClientError::local(format!(
                "the local queue is full (it holds at most {MAX_NOTES} notes and {} MiB; it has {} notes, {} bytes): \
                 the note was not saved; run `pigeonhole sync` once the server can be reached",
                MAX_BYTES >> 20,
                self.file.notes.len(),
                self.bytes()
            )));
        }
        let mut created = Timestamp::now();
        if let Some(last) = self.file.notes.iter().map(|n| n.created).max() {
            if created <= last {
                created = last.plus(Duration::from_nanos(1));
            }
        }
        let key = wire::new_uuid().to_string();
        self.file.notes.push(Note {
            key: key.clone(),
            created,
            text: text.to_owned(),
            sent,
        });
        Ok(key)
    }
}

/// The inbox service, as the queue's deliveries use it.
struct Remote {
    http: reqwest::Client,
    url: String,
    username: String,
    key: String,
}

impl Remote {
    fn new(settings: &ClientSettings) -> Result<Remote, Failure> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| Failure::Local(format!("cannot make an HTTP client: {e}")))?;
        Ok(Remote {
            http,
            url: settings.inbox_url.trim_end_matches('/').to_owned(),
            username: settings.username.clone(),
            key: settings.inbox_key.clone(),
        })
    }

    /// `POST /inbox/sync` with `body`; its answer.
    async fn sync(&self, body: &Value) -> Result<Value, Failure> {
        let response = self
            .http
            .post(format!("{}/inbox/sync", self.url))
            .header("Username", &self.username)
            .header("Access-Key", &self.key)
            .json(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    Failure::Unreachable(e)
                } else {
                    Failure::NoAnswer(e)
                }
            })?;
        let status = response.status();
        let bytes = response.bytes().await.map_err(Failure::NoAnswer)?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| Failure::BadAnswer(e.to_string()));
        }
        let reason = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_owned());
        if status.is_server_error() {
            Err(Failure::Server(status, reason))
        } else {
            Err(Failure::Refused(status, reason))
        }
    }
}

/// Sends the notes of `keys` in one sync request; the ids the server gave them.
/// A note is removed from the queue only once the answer names its item.
async fn send(queue: &mut Queue, remote: &Remote, keys: &[String]) -> Result<HashMap<String, String>, Failure> {
    let mut added = Map::new();
    for note in queue.file.notes.iter_mut().filter(|n| keys.contains(&n.key)) {
        note.sent = true;
        added.insert(
            note.key.clone(),
            json!({"contents": {"type": "text", "data": wire::encode_base64(note.text.as_bytes())}, "created": note.created}),
        );
    }
    queue.save()?;
    let unmark = |queue: &mut Queue| {
        for note in queue.file.notes.iter_mut().filter(|n| keys.contains(&n.key)) {
            note.sent = false;
        }
    };
    let answer = match remote.sync(&json!({ "added": added })).await {
        Ok(answer) => answer,
        // the notes may be stored: they stay marked, to be looked for
        Err(e @ (Failure::NoAnswer(_) | Failure::BadAnswer(_))) => return Err(e),
        Err(e) => {
            unmark(queue);
            queue.save()?;
            return Err(e);
        }
    };
    let stored: HashMap<String, String> = answer["client-added"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| keys.contains(key))
        .filter_map(|(key, id)| Some((key.clone(), id.as_str()?.to_owned())))
        .collect();
    queue.file.notes.retain(|n| !stored.contains_key(&n.key));
    unmark(queue); // what is left was not taken
    queue.save()?;
    let left = keys.len() - stored.len();
    if left > 0 {
        return Err(Failure::Limit { left });
    }
    Ok(stored)
}

/// Notes whose answer was lost: the ones the server has (same `created`, same text) leave
/// the queue, the others are sent again; the number found.
async fn settle_doubts(queue: &mut Queue, remote: &Remote) -> Result<usize, Failure> {
    if !queue.file.notes.iter().any(|n| n.sent) {
        return Ok(0);
    }
    let answer = remote.sync(&json!({})).await?; // the whole inbox
    let mut found = Vec::new();
    for item in answer["server-added"].as_object().into_iter().flat_map(|m| m.values()) {
        let created = item["created"].as_str().and_then(Timestamp::parse);
        let text = item["contents"]["data"]
            .as_str()
            .and_then(wire::decode_base64)
            .and_then(|b| String::from_utf8(b).ok());
        if let (Some(created), Some(text)) = (created, text) {
            if let Some(note) = queue
                .file
                .notes
                .iter()
                .find(|n| n.sent && n.created == created && n.text == text)
            {
                found.push(note.key.clone());
            }
        }
    }
    queue.file.notes.retain(|n| !found.contains(&n.key));
    for note in &mut queue.file.notes {
        note.sent = false;
    }
    queue.save()?;
    Ok(found.len())
}

/// Delivers the whole queue, oldest first; the number of notes now stored.
async fn deliver(queue: &mut Queue, settings: &ClientSettings) -> Result<usize, Failure> {
    if queue.file.notes.is_empty() {
        return Ok(0);
    }
    let remote = Remote::new(settings)?;
    let mut delivered = settle_doubts(queue, &remote).await?;
    while !queue.file.notes.is_empty() {
        let mut batch = Vec::new();
        let mut bytes = 0;
        for note in &queue.file.notes {
            if !batch.is_empty() && bytes + note.text.len() > BATCH_BYTES {
                break;
            }
            bytes += note.text.len();
            batch.push(note.key.clone());
        }
        delivered += send(queue, &remote, &batch).await?.len();
    }
    Ok(delivered)
}

/// The settings and their path for `opts`.
fn settings_of(opts: &ClientOpts) -> Result<(PathBuf, ClientSettings), ClientError> {
    let path = settings::path(opts.client_config.as_deref())?;
    let settings = ClientSettings::require(&path)?;
    Ok((path, settings))
}

/// Before a command that talks to the server: delivers what waits in the queue, saying so on
/// standard error. The command runs whatever comes of it.
pub async fn deliver_before(command: &Command) {
    // `add` and `sync` deliver themselves; `setup` has no account yet, and the notes of an
    // account about to be deleted would go with it
    let opts = match command {
        Command::Add(_) | Command::Sync(_) | Command::Setup(_) | Command::DeleteAccount(_) => return,
        other => match other.client_opts() {
            Some(opts) => opts,
            None => return,
        },
    };
    let Ok(path) = settings::path(opts.client_config.as_deref()) else {
        return;
    };
    if !queue_path(&path).exists() {
        return;
    }
    let Ok(settings) = ClientSettings::require(&path) else {
        return;
    };
    let result = match Queue::open(&path, &settings) {
        Ok(mut queue) => deliver(&mut queue, &settings)
            .await
            .map(|n| (n, queue.file.notes.len()))
            .map_err(|e| (e, queue.file.notes.len())),
        Err(e) => Err((e, 0)),
    };
    match result {
        Ok((0, _)) => {}
        Ok((n, _)) => eprintln!("pigeonhole: sent {n} note(s) saved locally to the inbox."),
        Err((e, _)) if e.is_unreachable() => {}
        Err((e, waiting)) => eprintln!("pigeonhole: {waiting} note(s) saved locally were not sent: {e}"),
    }
}

/// Removes the local queue next to the settings at `settings_path` (the account it was for
/// is gone): the number of notes it held.
pub(super) fn discard(settings_path: &Path) -> Result<usize, ClientError> {
    let path = queue_path(settings_path);
    let notes = match read(&path) {
        Ok(Read::Queue(q)) => q.notes.len(),
        Ok(Read::Unreadable(_)) => 0,
        Ok(Read::Missing) => return Ok(0),
        Err(e) => return Err(ClientError::file("cannot read the local queue", path, e)),
    };
    std::fs::remove_file(&path).map_err(|e| ClientError::file("cannot remove the local queue", &path, e))?;
    let _ = std::fs::remove_file(path.with_extension("lock"));
    Ok(notes)
}

/// `pigeonhole sync`: delivers the queue; an error when notes are left.
pub async fn sync(opts: ClientOpts) -> Result<(), ClientError> {
    let (path, settings) = settings_of(&opts)?;
    let mut queue = Queue::open(&path, &settings)?;
    let result = deliver(&mut queue, &settings).await;
    let waiting = queue.file.notes.len();
    match result {
        Ok(sent) => {
            if opts.json {
                println!("{}", json!({"sent": sent, "waiting": waiting}));
            } else if sent == 0 {
                println!("Nothing to send: no notes are saved locally.");
            } else {
                println!("Sent {sent} note(s) saved locally to the inbox.");
            }
            Ok(())
        }
        Err(e) if e.is_unreachable() => Err(ClientError::local(format!(
            "the server at {} cannot be reached ({e}): {waiting} note(s) stay saved locally",
            settings.inbox_url
        ))),
        Err(e) => Err(ClientError::local(format!("{e}: {waiting} note(s) stay saved locally"))),
    }
}

/// `pigeonhole add`: the note goes to the inbox through the queue: sent at once when the
/// server can be reached, else kept.
pub async fn add(opts: &ClientOpts, client: &Client, text: &str) -> Result<(), ClientError> {
    let (path, settings) = settings_of(opts)?;
    let mut queue = Queue::open(&path, &settings)?;
    let saved_locally = |queue: &Queue, key: &str, why: &Failure| {
        client.print(
            &json!({"saved-locally": key, "waiting": queue.file.notes.len(), "reason": why.to_string()}),
            || {
                format!(
                    "saved locally: the server at {} cannot be reached; it will be sent by the next command that \
                     reaches it, or `pigeonhole sync`",
                    settings.inbox_url
                )
            },
        )
    };
    // the notes that wait go first
    match deliver(&mut queue, &settings).await {
        Ok(0) => {}
        Ok(n) => eprintln!("pigeonhole: sent {n} note(s) saved locally to the inbox."),
        Err(e) if e.is_unreachable() => {
            let key = queue.push(text, false)?;
            queue.save()?;
            saved_locally(&queue, &key, &e);
            return Ok(());
        }
        Err(e) => eprintln!(
            "pigeonhole: {} note(s) saved locally were not sent: {e}",
            queue.file.notes.len()
        ),
    }
    let key = queue.push(text, true)?;
    match send(&mut queue, &Remote::new(&settings)?, std::slice::from_ref(&key)).await {
        Ok(stored) => {
            let id = Value::String(stored.get(&key).cloned().unwrap_or_default());
            client.print(&json!({ "id": id }), || format!("Added {}.", super::short(&id)));
            Ok(())
        }
        Err(e) if e.is_unreachable() || matches!(e, Failure::BadAnswer(_)) => {
            saved_locally(&queue, &key, &e);
            Ok(())
        }
        Err(e) => {
            // refused: the note is not kept
            queue.file.notes.retain(|n| n.key != key);
            queue.save()?;
            Err(match e {
                Failure::Refused(StatusCode::UNAUTHORIZED, _) => ClientError::from(e).noted("the note was not added"),
                e => ClientError::local(format!("the note was not added: {e}")),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn settings() -> ClientSettings {
        ClientSettings {
            inbox_url: "http://127.0.0.1:9".into(),
            scheduler_url: "http://127.0.0.1:9".into(),
            username: "alice".into(),
            inbox_key: "k".into(),
            scheduler_key: "k".into(),
            key_name: None,
            inbox_key_id: None,
            scheduler_key_id: None,
            zone_notice: None,
        }
    }

    #[test]
    fn the_queue_is_private_bounded_and_keeps_capture_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        let mut q = Queue::open(&path, &settings()).unwrap();
        let a = q.push("one", false).unwrap();
        let b = q.push("two", false).unwrap();
        assert_ne!(a, b);
        assert!(q.file.notes[0].created < q.file.notes[1].created);
        q.save().unwrap();
        let file = dir.path().join("client.queue.json");
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        drop(q);
        let mut q = Queue::open(&path, &settings()).unwrap();
        assert_eq!(q.file.notes.len(), 2);
        assert_eq!(q.file.username, "alice");
        while q.file.notes.len() < MAX_NOTES {
            q.push("x", false).unwrap();
        }
        let err = q.push("one too many", false).unwrap_err().to_string();
        assert!(
            err.contains("the local queue is full") && err.contains("1000 notes"),
            "{err}"
        );
        let big = "x".repeat(MAX_BYTES);
        q.file.notes.clear();
        q.push(&big, false).unwrap();
        assert!(q.push("y", false).unwrap_err().to_string().contains("16 MiB"));
    }

    /// The files in `dir` whose names begin with `prefix`, and their contents.
    fn aside(dir: &Path, prefix: &str) -> Vec<Vec<u8>> {
        let mut found: Vec<Vec<u8>> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        found.sort();
        found
    }

    #[test]
    fn a_damaged_foreign_or_huge_queue_is_moved_aside_and_capture_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("client.toml");
        let file = dir.path().join("client.queue.json");
        let huge = {
            let f = std::fs::File::create(&file).unwrap();
            f.set_len(MAX_FILE_BYTES + 1).unwrap(); // sparse: nothing is written, and never read whole
            std::fs::rename(&file, dir.path().join("huge")).unwrap();
            dir.path().join("huge")
        };
        for (content, why) in [
            (b"{not json".to_vec(), "damaged"),
            (br#"{"something": "else"}"#.to_vec(), "damaged"),
            (b"\xff\xfe".to_vec(), "damaged"),
        ] {
            std::fs::write(&file, &content).unwrap();
            let mut q = Queue::open(&path, &settings()).expect("a new queue begun");
            assert!(q.file.notes.is_empty());
            q.push("captured", false).unwrap();
            q.save().unwrap();
            assert!(
                aside(dir.path(), &format!("client.queue.json.{why}-")).contains(&content),
                "{content:?} kept"
            );
            std::fs::remove_file(&file).unwrap();
        }
        std::fs::rename(&huge, &file).unwrap();
        let q = Queue::open(&path, &settings()).expect("a new queue begun");
        assert!(q.file.notes.is_empty());
        drop(q);
        assert!(!file.exists());
        assert_eq!(aside(dir.path(), "client.queue.json.damaged-").len(), 4);

        // another account's notes: kept aside, whole
        let mut q = Queue::open(&path, &settings()).unwrap();
        q.push("bob's note", false).unwrap();
        q.file.username = "bob".into();
        q.save().unwrap();
        drop(q);
        let bobs = std::fs::read(&file).unwrap();
        let q = Queue::open(&path, &settings()).unwrap();
        assert!(q.file.notes.is_empty());
        assert_eq!(q.file.username, "alice");
        assert_eq!(aside(dir.path(), "client.queue.json.other-account-"), vec![bobs]);
    }
}
