//! Issue 19 points 5 and 6, against the real server: `add` keeps a note locally while the
//! server cannot be reached and a later command delivers it, each note once; `defer` moves an
//! inbox item into the scheduler, never leaving it in neither.

use crate::common;

use common::process::{failed, run_client, succeeded, Proc, Services};
use common::Auth;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Output;

const PASSWORD: &str = "correct horse battery staple";

/// Runs `pigeonhole ARGS` with its client settings under `home`.
fn client(home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    run_client(home, args, stdin, &[])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The inbox items' (id, text), oldest first, from `pigeonhole inbox --json`.
fn inbox(home: &Path) -> Vec<(String, String)> {
    use base64::Engine;
    let items: Value = serde_json::from_str(&succeeded(&client(home, &["inbox", "--json"], None))).unwrap();
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let text = match &i["text"] {
                Value::String(t) => t.clone(),
                _ => {
                    let data = i["contents"]["data"].as_str().unwrap();
                    String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).unwrap()).unwrap()
                }
            };
            (i["id"].as_str().unwrap().to_owned(), text)
        })
        .collect()
}

fn texts(home: &Path) -> Vec<String> {
    inbox(home).into_iter().map(|(_, t)| t).collect()
}

fn queue_file(home: &Path) -> PathBuf {
    home.join("pigeonhole/client.queue.json")
}

/// The notes waiting in the local queue (none when there is no queue file).
fn queued(home: &Path) -> Vec<Value> {
    match std::fs::read(queue_file(home)) {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes).unwrap()["notes"]
            .as_array()
            .unwrap()
            .clone(),
        Err(_) => Vec::new(),
    }
}

fn setup(home: &Path, server: &Proc) {
    succeeded(&client(
        home,
        &[
            "setup",
            "--username",
            "alice",
            "--inbox-url",
            &server.api.base,
            "--scheduler-url",
            &server.scheduler.base,
        ],
        None,
    ));
}

/// A server on fresh directories, and this machine's client (under `home`) set up for alice
/// on it.
struct Machine {
    data: tempfile::TempDir,
    logs: tempfile::TempDir,
    home: tempfile::TempDir,
    server: Proc,
}

impl Machine {
    async fn set_up(server_args: &[&str]) -> Machine {
        let (data, logs, home) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        let server = Proc::start(data.path(), logs.path(), Services::Both, server_args).await;
        setup(home.path(), &server);
        Machine {
            data,
            logs,
            home,
            server,
        }
    }
}

fn ports(server: &Proc) -> (u16, u16) {
    let port = |base: &str| base.rsplit(':').next().unwrap().parse().unwrap();
    (port(&server.api.base), port(&server.scheduler.base))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_added_while_the_server_is_down_arrives_once_when_it_is_back() {
    let Machine {
        data,
        logs,
        home,
        server,
    } = Machine::set_up(&[]).await;
    let home = home.path();
    let url = server.api.base.clone();
    let ports = ports(&server);
    succeeded(&client(home, &["add", "before the outage"], None));
    server.stop().await;

    // the server is down: capture still works
    let said = succeeded(&client(home, &["add", "first", "thought"], None));
    assert!(
        said.contains(&format!(
            "saved locally: the server at {url} cannot be reached; it will be sent by the next command \
             that reaches it, or `pigeonhole sync`"
        )),
        "{said}"
    );
    succeeded(&client(home, &["add"], Some("second thought\n")));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(queue_file(home)).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(queued(home).len(), 2);
    let err = failed(&client(home, &["sync"], None));
    assert!(
        err.contains("cannot be reached") && err.contains("2 note(s) stay saved locally"),
        "{err}"
    );
    failed(&client(home, &["inbox"], None));
    assert_eq!(queued(home).len(), 2, "a failed delivery keeps every note");

    // back: the next command that reaches it delivers the queue, each note once
    let server = Proc::start_on_ports(data.path(), logs.path(), ports, &[]).await;
    let out = client(home, &["inbox"], None);
    succeeded(&out);
    assert!(
        stderr(&out).contains("sent 2 note(s) saved locally"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        texts(home),
        ["before the outage", "first thought", "second thought"],
        "in capture order, once"
    );
    assert!(queued(home).is_empty());
    let said = succeeded(&client(home, &["sync"], None));
    assert!(said.contains("Nothing to send"), "{said}");
    assert!(succeeded(&client(home, &["add", "third"], None)).contains("Added"));
    assert_eq!(texts(home).len(), 4);

    // `pigeonhole sync` delivers too
    let ports = (ports.0, ports.1);
    server.stop().await;
    succeeded(&client(home, &["add", "fourth"], None));
    let _server = Proc::start_on_ports(data.path(), logs.path(), ports, &[]).await;
    let said = succeeded(&client(home, &["sync"], None));
    assert!(said.contains("Sent 1 note(s)"), "{said}");
    assert_eq!(texts(home).last().unwrap(), "fourth");
    assert_eq!(texts(home).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_whose_answer_was_lost_is_stored_once() {
    let Machine {
        data: _data,
        logs: _logs,
        home,
        server,
    } = Machine::set_up(&[]).await;
    let home = home.path();
    // a delivery the server stored but whose answer never came back: the note is still
    // queued, marked as sent
    let auth: Auth = server.api.login_ok("alice", PASSWORD).await;
    let created = "2026-11-26T10:00:00.123456789Z";
    let b64 = |t: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(t)
    };
    server
        .api
        .post(
            "/inbox/sync",
            &auth,
            &json!({"added": {"k1": {"contents": {"type": "text", "data": b64("stored, answer lost")}, "created": created}}}),
        )
        .await
        .expect_json(200);
    let queue = json!({
        "inbox-url": server.api.base,
        "username": "alice",
        "notes": [
            {"key": "k1", "created": created, "text": "stored, answer lost", "sent": true},
            {"key": "k2", "created": "2026-11-26T10:00:01.5Z", "text": "sent, never arrived", "sent": true},
            {"key": "k3", "created": "2026-11-26T10:00:02Z", "text": "never sent", "sent": false},
        ]
    });
    std::fs::write(queue_file(home), serde_json::to_vec(&queue).unwrap()).unwrap();

    let said = succeeded(&client(home, &["sync"], None));
    assert!(said.contains("Sent 3 note(s)"), "{said}");
    assert_eq!(
        texts(home),
        ["stored, answer lost", "sent, never arrived", "never sent"],
        "each note once, at its capture time"
    );
    assert!(queued(home).is_empty());
    succeeded(&client(home, &["sync"], None));
    assert_eq!(texts(home).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_note_is_not_kept_and_the_queue_is_bounded() {
    let Machine {
        data: _data,
        logs: _logs,
        home,
        server,
    } = Machine::set_up(&["--max-body-bytes", "4000"]).await;
    let home = home.path();
    // the server is there and refuses (413): an error, nothing kept
    let big = "x".repeat(10_000);
    let err = failed(&client(home, &["add", &big], None));
    assert!(err.contains("not added") && err.contains("413"), "{err}");
    assert!(queued(home).is_empty());
    assert!(texts(home).is_empty());

    // a full queue refuses the next note, saying so
    let notes: Vec<Value> = (0..1000)
        .map(|i| json!({"key": format!("k{i}"), "created": format!("2026-11-26T10:00:00.{i:09}Z"), "text": "n"}))
        .collect();
    let queue = json!({"inbox-url": server.api.base, "username": "alice", "notes": notes});
    std::fs::write(queue_file(home), serde_json::to_vec(&queue).unwrap()).unwrap();
    server.stop().await;
    let err = failed(&client(home, &["add", "one too many"], None));
    assert!(
        err.contains("the local queue is full") && err.contains("at most 1000 notes"),
        "{err}"
    );
    assert_eq!(queued(home).len(), 1000);
}

/// Issue 29 point 7: a damaged queue file, or one for another account, never loses a capture:
/// it is moved aside (kept whole, named in the message) and the note goes to the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_foreign_queue_is_moved_aside_and_capture_goes_on() {
    let machine = Machine::set_up(&[]).await;
    let home = machine.home.path();
    let foreign = serde_json::to_vec(&json!({"inbox-url": "http://127.0.0.1:9", "username": "bob",
        "notes": [{"key": "k", "created": "2026-11-26T10:00:00Z", "text": "bob's"}]}))
    .unwrap();
    for (content, note, aside) in [
        (b"{\"inbox-url\": tru".to_vec(), "after damage", "damaged"),
        (foreign, "after another account's", "other-account"),
    ] {
        std::fs::write(queue_file(home), &content).unwrap();
        let out = client(home, &["add", note], None);
        let said = stderr(&out);
        succeeded(&out);
        let moved = std::fs::read_dir(home.join("pigeonhole"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains(&format!("client.queue.json.{aside}-")))
            .unwrap_or_else(|| panic!("no queue moved aside: {said}"));
        assert!(said.contains(&moved.display().to_string()), "{said}");
        assert_eq!(std::fs::read(&moved).unwrap(), content);
        std::fs::remove_file(moved).unwrap();
        assert!(texts(home).contains(&note.to_owned()), "{said}");
    }
}

/// The scheduled items (untriggered) as (content, day, time).
fn scheduled(home: &Path) -> Vec<(String, String, String)> {
    let items: Value = serde_json::from_str(&succeeded(&client(home, &["scheduled", "--json"], None))).unwrap();
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            // the client's own JSON shape (docs/cli.md)
            (
                i["text"].as_str().unwrap().to_owned(),
                i["scheduled-day"].as_str().unwrap().to_owned(),
                i["scheduled-time"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// Replaces `key = "…"` in the client settings.
fn set_setting(home: &Path, key: &str, value: &str) {
    let path = home.join("pigeonhole/client.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with(&format!("{key} =")) {
                format!("{key} = \"{value}\"")
            } else {
                l.to_owned()
            }
        })
        .collect();
    std::fs::write(&path, text.join("\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defer_moves_an_inbox_item_into_the_scheduler() {
    let Machine {
        data: _data,
        logs: _logs,
        home,
        server,
    } = Machine::set_up(&[]).await;
    let home = home.path();
    for note in ["call the plumber", "read the paper", "renew the passport"] {
        succeeded(&client(home, &["add", note], None));
    }

    // without ID: the oldest, the one `next` shows; the account is on UTC
    let day = |d: i64| {
        let now = pigeonhole::domain::wire::Timestamp::now();
        let (y, m, day) =
            pigeonhole::domain::wire::civil_from_days((now.secs + d * 86_400).div_euclid(86_400)).unwrap();
        format!("{y:04}-{m:02}-{day:02}")
    };
    let before = day(3);
    let said = succeeded(&client(home, &["defer", "--in", "3d"], None));
    assert!(said.contains("Deferred") && said.contains("call the plumber"), "{said}");
    assert_eq!(texts(home), ["read the paper", "renew the passport"]);
    let s = scheduled(home);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].0, "call the plumber");
    assert!(s[0].1 == before || s[0].1 == day(3), "{s:?}");

    // with ID (its start) and --at
    let id = inbox(home)[1].0.clone();
    let out: Value = serde_json::from_str(&succeeded(&client(
        home,
        &["defer", &id[..8], "--at", "2030-01-02 09:00", "--json"],
        None,
    )))
    .unwrap();
    assert_eq!(out["inbox-id"], id.as_str());
    assert_eq!(texts(home), ["read the paper"]);
    assert!(scheduled(home).contains(&("renew the passport".into(), "2030-01-02".into(), "09:00:00".into())));

    // the scheduler refuses: the item stays in the inbox
    let settings = std::fs::read_to_string(home.join("pigeonhole/client.toml")).unwrap();
    set_setting(home, "scheduler-key", "00000000000000000000000000000000");
    failed(&client(home, &["defer", "--in", "1h"], None));
    assert_eq!(texts(home), ["read the paper"], "nothing deferred, nothing lost");
    std::fs::write(home.join("pigeonhole/client.toml"), &settings).unwrap();

    // the removal fails after the scheduled item is stored: in both, and said so
    let auth = server.api.login_ok("alice", PASSWORD).await;
    let (no_delete, _) = server.api.add_key(&auth, "no delete", &["PermitGetItems"]).await;
    set_setting(home, "inbox-key", &no_delete);
    let err = failed(&client(home, &["defer", "--in", "1h"], None));
    assert!(
        err.contains("the item is now in both") && err.contains("pigeonhole done"),
        "{err}"
    );
    std::fs::write(home.join("pigeonhole/client.toml"), &settings).unwrap();
    assert_eq!(texts(home), ["read the paper"]);
    assert!(scheduled(home).iter().any(|s| s.0 == "read the paper"));

    // an empty inbox: nothing to defer
    succeeded(&client(home, &["done"], None));
    let err = failed(&client(home, &["defer", "--in", "1h"], None));
    assert!(err.contains("the inbox is empty"), "{err}");
}
