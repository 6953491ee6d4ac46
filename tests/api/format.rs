//! The format of the whole database (issue 17, point 3; docs/operations.md, "Database
//! format"): a newer format stops the server with status 1 and touches nothing; an older one
//! is migrated after a backup next to it; a record that cannot be decoded at run time is a
//! JSON 500 naming its kind, logged once with its key, and `/healthz` says `degraded`.

use crate::common;

use common::process::{free_port, Proc, Services};
use common::scheduler::{future_tickle, read_outbox, tickle, utc_ago};
use common::Auth;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FORMAT_FILE: &str = "db/pigeonhole-format";

/// A data directory written by the server: `alice` with two inbox items and a scheduled
/// item, `bob` with one inbox item.
async fn a_data_directory(logs: &Path) -> tempfile::TempDir {
    let data = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs, Services::Both, &[]).await;
    let alice = server.api.user("alice").await;
    server.api.add_text(&alice, "one").await;
    server.api.add_text(&alice, "two").await;
    let bob = server.api.user("bob").await;
    server.api.add_text(&bob, "bob's").await;
    let alice_s = server.scheduler.user("alice").await;
    server.scheduler.add_tickle(&alice_s, &future_tickle("pay")).await;
    server.stop().await;
    data
}

#[tokio::test]
async fn a_new_data_directory_records_the_current_format() {
    let logs = tempfile::tempdir().unwrap();
    let data = a_data_directory(logs.path()).await;
    assert_eq!(std::fs::read_to_string(data.path().join(FORMAT_FILE)).unwrap(), "2\n");
}

#[tokio::test]
async fn a_newer_format_stops_the_server_with_status_1_and_touches_nothing() {
    let logs = tempfile::tempdir().unwrap();
    let data = a_data_directory(logs.path()).await;
    std::fs::write(data.path().join(FORMAT_FILE), "3\n").unwrap();
    let before = common::file_contents(data.path());
    let stderr = logs.path().join("newer.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .arg("serve")
        .arg("--data-dir")
        .arg(data.path())
        .args(["--host", "127.0.0.1", "--inbox-port", "0", "--scheduler-port", "0"])
        .env_remove("PIGEONHOLE_DATA_DIR")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("run pigeonhole");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the server did not stop:\n{}",
                std::fs::read_to_string(&stderr).unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await; // poll the child
    };
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("has format 3") && err.contains("newer version") && err.contains("up to 2"),
        "{err}"
    );
    assert!(
        common::file_contents(data.path()) == before,
        "the data directory changed"
    );
}

#[tokio::test]
async fn an_older_format_is_migrated_after_a_backup_next_to_it() {
    let logs = tempfile::tempdir().unwrap();
    let data = a_data_directory(logs.path()).await;
    // as the version before formats were recorded left it
    std::fs::remove_file(data.path().join(FORMAT_FILE)).unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let backups: Vec<PathBuf> = std::fs::read_dir(data.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("db-format-1-") && name.ends_with(".backup")
        })
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    let log = server.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("older than this version's 2"))
        .unwrap_or_else(|| panic!("no migration line:\n{log}"));
    assert!(line.contains(&backups[0].display().to_string()), "{line}");
    assert_eq!(std::fs::read_to_string(data.path().join(FORMAT_FILE)).unwrap(), "2\n");
    // the data is all there
    let alice = server.api.login_ok("alice", "alice-password").await;
    assert_eq!(server.api.size(&alice).await, 2);
    server.stop().await;
    // the backup restores
    let restored = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .arg("restore")
        .arg(&backups[0])
        .arg("--data-dir")
        .arg(restored.path())
        .output()
        .expect("run pigeonhole");
    common::process::succeeded(&out);
    // … as the older format it holds: migrated at the next start
    assert_eq!(
        std::fs::read_to_string(restored.path().join(FORMAT_FILE)).unwrap(),
        "1\n"
    );
}

/// Replaces, in the stopped server's database, the value of the first record of `tree`
/// whose key starts with `prefix` by `change` of it; answers the key.
fn damage(data: &Path, tree: &str, prefix: &[u8], change: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
    let db = sled::open(data.join("db")).expect("open the database");
    let t = db.open_tree(tree).unwrap();
    let (k, v) = t
        .scan_prefix(prefix)
        .next()
        .unwrap_or_else(|| panic!("no record with prefix {prefix:?} in {tree}"))
        .unwrap();
    let mut v = v.to_vec();
    change(&mut v);
    t.insert(&k, v).unwrap();
    db.flush().unwrap();
    k.to_vec()
}

async fn uuid_of(api: &common::Api, auth: &Auth) -> uuid::Uuid {
    let v = api.get("/account", auth).await.expect_json(200);
    v["uuid"].as_str().unwrap().parse().unwrap()
}

async fn health(api: &common::Api) -> (u16, Value) {
    let r = api.get("/healthz", &Auth::None).await;
    (r.status, r.json())
}

/// Issue 17: a record written with a raised version byte made login answer 500 and
/// `GET /scheduler/items` close the connection, while `/healthz` said ok.
#[tokio::test]
async fn an_undecodable_record_is_a_json_500_naming_its_kind_logged_once_and_degrades_health() {
    let logs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let alice = server.api.user("alice").await;
    server.api.add_text(&alice, "one").await;
    let carol = server.api.user("carol").await;
    let bob = server.api.user("bob").await;
    server.api.add_text(&bob, "bob's").await;
    let alice_s = server.scheduler.user("alice").await;
    server.scheduler.add_tickle(&alice_s, &future_tickle("pay")).await;
    let (alice_id, carol_id, alice_s_id) = (
        uuid_of(&server.api, &alice).await,
        uuid_of(&server.api, &carol).await,
        uuid_of(&server.scheduler, &alice_s).await,
    );
    server.stop().await;

    let raise = |v: &mut Vec<u8>| v[0] = 99; // written by a newer version
    let account_key = damage(data.path(), "inbox", &[&b"a"[..], carol_id.as_bytes()].concat(), raise);
    let item_key = damage(data.path(), "inbox", &[&b"i"[..], alice_id.as_bytes()].concat(), raise);
    let scheduled_key = damage(
        data.path(),
        "scheduler",
        &[&b"s"[..], alice_s_id.as_bytes()].concat(),
        raise,
    );

    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let (status, body) = health(&server.api).await;
    assert_eq!((status, &body["status"]), (200, &Value::from("ok")), "{body}");

    let alice = server.api.login_ok("alice", "alice-password").await;
    let alice_s = server.scheduler.login_ok("alice", "alice-password").await;
    for _ in 0..2 {
        let r = server.api.login("carol", "carol-password").await;
        assert_eq!(r.media_type(), "application/json");
        assert!(r.expect_error(500).contains("account record"));
        let r = server.api.get("/inbox/items", &alice).await;
        assert_eq!(r.media_type(), "application/json");
        assert!(r.expect_error(500).contains("inbox item record"));
        let r = server.api.get("/inbox/show-item", &alice).await;
        assert!(r.expect_error(500).contains("inbox item record"));
        // this one used to close the connection without an answer (the list is streamed)
        let r = server.scheduler.get("/scheduler/items", &alice_s).await;
        assert_eq!(r.media_type(), "application/json");
        assert!(r.expect_error(500).contains("scheduled item record"));
    }
    // the rest works
    let bob = server.api.login_ok("bob", "bob-password").await;
    assert_eq!(
        server
            .api
            .get("/inbox/items", &bob)
            .await
            .expect_json(200)
            .as_array()
            .unwrap()
            .len(),
        1
    );

    for api in [&server.api, &server.scheduler] {
        let (status, body) = health(api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "degraded", "{body}");
        assert_eq!(body["database"]["undecodable-records"], 3, "{body}");
    }
    // each logged once, with its key
    let deadline = Instant::now() + Duration::from_secs(10);
    for (kind, key) in [
        ("account", &account_key),
        ("inbox item", &item_key),
        ("scheduled item", &scheduled_key),
    ] {
        let needle = format!("undecodable {kind} record (key {})", hex::encode(key));
        loop {
            let n = server.log_text().lines().filter(|l| l.contains(&needle)).count();
            if n >= 1 || Instant::now() > deadline {
                assert_eq!(n, 1, "{needle}:\n{}", server.log_text());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // poll the log file
        }
    }
    server.stop().await;
}

/// Issue 17: an undecodable item that was due made the triggerer fail every pass, for every
/// account, until it was `errored` and `/healthz` answered 503. Now it is set aside (noted,
/// logged once, counted), the other account's due item is triggered and delivered, and the
/// triggerer stays `running` without waking again and again for the item set aside.
#[tokio::test]
async fn the_triggerer_sets_an_undecodable_due_item_aside_and_triggers_the_others() {
    let logs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    // the same ports at both starts: bob's inbox trigger delivers to this server's inbox
    let ports = (free_port(), free_port());
    let server = Proc::start_on_ports(data.path(), logs.path(), ports, &["--disable-looper", "triggerer"]).await;
    let dana = server.api.user("dana").await;
    let (secret, _) = server.api.add_key(&dana, "scheduler", &["PermitAdd"]).await;
    let alice = server.scheduler.user("alice").await;
    // due first (two days ago), so that the triggerer meets it before bob's
    let (two_days_ago, _) = utc_ago(2 * 86_400);
    server
        .scheduler
        .add_tickle(&alice, &tickle("alice's", &two_days_ago, None, None))
        .await;
    let alice_id = uuid_of(&server.scheduler, &alice).await;
    let bob = server.scheduler.user("bob").await;
    let v = server
        .scheduler
        .post(
            "/trigger/inbox",
            &bob,
            &serde_json::json!({"addInboxTriggerUrl": server.api.base, "addInboxTriggerUsername": "dana",
                                "addInboxTriggerAccessKey": secret}),
        )
        .await
        .expect_json(200);
    assert!(v["Right"].is_string(), "the inbox trigger was refused: {v}");
    let (yesterday, _) = utc_ago(86_400);
    server
        .scheduler
        .add_tickle(&bob, &tickle("bob's", &yesterday, None, None))
        .await;
    server.stop().await;

    let scheduled_key = damage(
        data.path(),
        "scheduler",
        &[&b"s"[..], alice_id.as_bytes()].concat(),
        |v| v[0] = 99, // written by a newer version
    );

    let server = Proc::start_on_ports(
        data.path(),
        logs.path(),
        ports,
        &[
            "--looper-period",
            "1",
            "--looper-retry-delay-us",
            "100000",
            "--looper-retry-amount",
            "2",
        ],
    )
    .await;
    let dana = server.api.login_ok("dana", "dana-password").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.api.size(&dana).await == 0 {
        assert!(
            Instant::now() < deadline,
            "bob's item did not reach the inbox:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    assert_eq!(server.api.size(&dana).await, 1);

    // two more passes of the triggerer take the period (one second): it sleeps, it does
    // not wake again and again for the item set aside
    let passes = |body: &Value| body["workers"]["triggerer"]["passes"].as_u64().unwrap_or(0);
    let (_, body) = health(&server.api).await;
    let (first, since) = (passes(&body), Instant::now());
    loop {
        let (status, body) = health(&server.api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "degraded", "{body}");
        assert_eq!(body["database"]["undecodable-records"], 1, "{body}");
        assert_eq!(body["workers"]["triggerer"]["status"], "running", "{body}");
        assert_eq!(body["workers"]["triggerer"]["failed-passes"], 0, "{body}");
        assert_eq!(body["errored-workers"], serde_json::json!([]), "{body}");
        if passes(&body) >= first + 2 {
            assert!(since.elapsed() >= Duration::from_millis(900), "{body}");
            break;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(10), "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    // alice's item is still there, untriggered; logged once with its key
    let needle = format!(
        "undecodable scheduled item record (key {})",
        hex::encode(&scheduled_key)
    );
    let n = server.log_text().lines().filter(|l| l.contains(&needle)).count();
    assert_eq!(n, 1, "{needle}:\n{}", server.log_text());
    server.stop().await;
}

/// Issue 17: a pending inbox delivery that could not be decoded made every pass of the
/// inbox sender fail, until it was `errored` and `/healthz` answered 503. Now it is set
/// aside (noted, logged once, counted) and the other delivery goes through.
#[tokio::test]
async fn the_inbox_sender_sets_an_undecodable_delivery_aside_and_delivers_the_others() {
    let logs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let ports = (free_port(), free_port());
    let fast = ["--looper-period", "1", "--looper-retry-delay-us", "100000"];
    let first: Vec<&str> = fast
        .iter()
        .copied()
        .chain(["--disable-looper", "triggeredInboxItemSender", "--log-level", "trace"])
        .collect();
    let server = Proc::start_on_ports(data.path(), logs.path(), ports, &first).await;
    let dana = server.api.user("dana").await;
    let (secret, _) = server.api.add_key(&dana, "scheduler", &["PermitAdd"]).await;
    let (yesterday, _) = utc_ago(86_400);
    for name in ["alice", "bob"] {
        let auth = server.scheduler.user(name).await;
        let v = server
            .scheduler
            .post(
                "/trigger/inbox",
                &auth,
                &serde_json::json!({"addInboxTriggerUrl": server.api.base, "addInboxTriggerUsername": "dana",
                                    "addInboxTriggerAccessKey": secret}),
            )
            .await
            .expect_json(200);
        assert!(v["Right"].is_string(), "the inbox trigger was refused: {v}");
        server
            .scheduler
            .add_tickle(&auth, &tickle(name, &yesterday, None, None))
            .await;
    }
    // both items triggered, their deliveries pending (the sender does not run)
    server
        .settle(&[common::Worker::Triggerer, common::Worker::TriggeredInboxItemScheduler])
        .await;
    server.stop().await;
    let delivery_key = damage(data.path(), "scheduler", b"v", |v| v[0] = 99);

    let mut second: Vec<&str> = fast.to_vec();
    second.extend(["--looper-retry-amount", "2"]);
    let server = Proc::start_on_ports(data.path(), logs.path(), ports, &second).await;
    let dana = server.api.login_ok("dana", "dana-password").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.api.size(&dana).await == 0 {
        assert!(
            Instant::now() < deadline,
            "the other delivery did not reach the inbox:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    // a few more passes: the sender stays running, nothing else arrives
    let passes = |body: &Value| {
        body["workers"]["triggeredInboxItemSender"]["passes"]
            .as_u64()
            .unwrap_or(0)
    };
    let (_, body) = health(&server.api).await;
    let first_passes = passes(&body);
    loop {
        let (status, body) = health(&server.api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "degraded", "{body}");
        assert_eq!(body["database"]["undecodable-records"], 1, "{body}");
        assert_eq!(
            body["workers"]["triggeredInboxItemSender"]["status"], "running",
            "{body}"
        );
        assert_eq!(
            body["workers"]["triggeredInboxItemSender"]["failed-passes"], 0,
            "{body}"
        );
        if passes(&body) >= first_passes + 3 {
            break;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(10), "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    assert_eq!(server.api.size(&dana).await, 1);
    let needle = format!(
        "undecodable pending delivery record (key {})",
        hex::encode(&delivery_key)
    );
    let n = server.log_text().lines().filter(|l| l.contains(&needle)).count();
    assert_eq!(n, 1, "{needle}:\n{}", server.log_text());
    server.stop().await;
}

/// Issue 17: a queued e-mail that could not be decoded made every pass of its converter
/// fail, until it was `errored` and `/healthz` answered 503. Now it is set aside (noted,
/// logged once, counted) and the other e-mail is rendered and sent.
#[tokio::test]
async fn the_email_workers_set_an_undecodable_email_aside_and_send_the_others() {
    let logs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let server = Proc::start(
        data.path(),
        logs.path(),
        Services::Both,
        &["--disable-looper", "verificationEmailConverter"],
    )
    .await;
    for name in ["alice", "bob"] {
        let auth = server.scheduler.user(name).await;
        server
            .scheduler
            .add_email_trigger(&auth, &format!("{name}@example.com"))
            .await;
    }
    server.stop().await;
    // the first verification e-mail (alice's)
    let email_key = damage(data.path(), "scheduler", b"V", |v| v[0] = 99);

    let server = Proc::start(
        data.path(),
        logs.path(),
        Services::Both,
        &[
            "--looper-period",
            "1",
            "--looper-retry-delay-us",
            "100000",
            "--looper-retry-amount",
            "2",
        ],
    )
    .await;
    let outbox = data.path().join("outbox");
    let deadline = Instant::now() + Duration::from_secs(20);
    while read_outbox(&outbox).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the other e-mail was not sent:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    // a few more passes: the workers stay running, nothing else is sent
    let passes = |body: &Value| {
        body["workers"]["verificationEmailConverter"]["passes"]
            .as_u64()
            .unwrap_or(0)
    };
    let (_, body) = health(&server.api).await;
    let first_passes = passes(&body);
    loop {
        let (status, body) = health(&server.api).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["status"], "degraded", "{body}");
        assert_eq!(body["database"]["undecodable-records"], 1, "{body}");
        for worker in ["verificationEmailConverter", "emailer"] {
            assert_eq!(body["workers"][worker]["status"], "running", "{body}");
            assert_eq!(body["workers"][worker]["failed-passes"], 0, "{body}");
        }
        if passes(&body) >= first_passes + 3 {
            break;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(10), "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    let sent = read_outbox(&outbox);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].1.contains("bob@example.com"), "{}", sent[0].1);
    let needle = format!("undecodable queued e-mail record (key {})", hex::encode(&email_key));
    let n = server.log_text().lines().filter(|l| l.contains(&needle)).count();
    assert_eq!(n, 1, "{needle}:\n{}", server.log_text());
    server.stop().await;
}
