//! Moving in from the original servers (issue 17 points 1, 2 and 5): SQLite files of every
//! layout the original Intray and Tickler servers wrote, made by the generator in
//! tests/originals/ from the originals' own DDL (their migration golden files, and the
//! layouts before those derived by the changes of their DB.hs: see tests/originals/ddl.rs),
//! imported by the binary into a fresh data directory; then the server started there shows
//! every row through the API, and the old passwords and access keys log in. And the files
//! that are refused: views, triggers, a value over the cap, a missing column, an unknown
//! permission, each with nothing written.

use crate::common;
use crate::originals;

use common::process::{Proc, Services};
use common::Auth;
use originals::ddl::{IntrayLayout, TicklerLayout};
use originals::*;
use pigeonhole::domain::account::{KeySecret, PasswordHash};
use pigeonhole::store::Store;
use rusqlite::{params, Connection};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use uuid::Uuid;

fn pigeonhole(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args(args)
        .env_remove("PIGEONHOLE_DATA_DIR")
        .output()
        .expect("run pigeonhole")
}

fn import(command: &str, file: &Path, data_dir: &Path) -> Output {
    pigeonhole(&[
        command,
        file.to_str().expect("path"),
        "--data-dir",
        data_dir.to_str().expect("path"),
    ])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Moves an Intray file of `layout` in, starts the server and compares every row.
async fn intray_moves_in(layout: IntrayLayout) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("intray.sqlite3");
    let data = dir.path().join("data");
    intray_file(layout, &file);

    let out = import("import-intray", &file, &data);
    assert!(out.status.success(), "import failed: {}", text(&out.stderr));
    let said = text(&out.stdout);
    let items = if layout == IntrayLayout::Since2020 { 5 } else { 2 };
    assert!(
        said.contains(&format!("moved in 2 inbox account(s) with {items} item(s): alice, bob")),
        "{said}"
    );
    assert_eq!(
        said.contains("dropped access-key permissions unknown here: PermitInitiateCheckout"),
        layout == IntrayLayout::Since2020,
        "{said}"
    );

    let server = Proc::start(&data, dir.path(), Services::Both, &[]).await;
    let api = &server.api;
    for (user, name, password) in [(ALICE, "alice", ALICE_PASSWORD), (BOB, "bob", BOB_PASSWORD)] {
        // the old password logs in ($2y$ cost 4 and $2b$ cost 10), again after its hash was
        // replaced, and a wrong one does not
        let _ = api.login_ok(name, password).await;
        api.login(name, "not the password").await.expect_error(401);
        let auth = api.login_ok(name, password).await;
        assert_eq!(
            api.get("/inbox/items", &auth).await.expect_json(200),
            intray_items_json(layout, user),
            "{name}'s items"
        );
        let account = api.get("/account", &auth).await.expect_json(200);
        assert_eq!(
            (&account["uuid"], &account["username"]),
            (&json!(user), &json!(name)),
            "{account}"
        );
        let created = if user == ALICE {
            "2018-03-04T05:06:07.123456Z"
        } else {
            "2018-03-05T00:00:00Z"
        };
        assert_eq!(account["created"], json!(created), "{account}");
        assert_eq!(
            api.get("/access-key", &auth).await.expect_json(200),
            intray_keys_json(layout, user),
            "{name}'s keys"
        );
    }
    if layout != IntrayLayout::April2018 {
        // the old access keys: first through a login (then kept as a digest), then in
        // headers; each with its own permissions, no more
        let alices = intray_items_json(layout, ALICE);
        let headers = Auth::key("alice", LAPTOP_SECRET);
        api.get("/inbox/items", &headers).await.expect_error(401);
        let laptop = api.login_ok("alice", &LAPTOP_SECRET.to_uppercase()).await;
        assert_eq!(api.get("/inbox/items", &laptop).await.expect_json(200), alices);
        assert_eq!(api.get("/inbox/items", &headers).await.expect_json(200), alices);
        let phone = api.login_ok("alice", PHONE_SECRET).await;
        api.get("/inbox/items", &phone).await.expect_error(401);
        let reader = api.login_ok("bob", BOB_SECRET).await;
        assert_eq!(
            api.get("/inbox/items", &reader).await.expect_json(200),
            intray_items_json(layout, BOB)
        );
        api.get("/access-key", &reader).await.expect_error(401);
        api.login("bob", PHONE_SECRET).await.expect_error(401);
    }

    let commit = match layout {
        IntrayLayout::April2018 => "9c97617..d4241ce",
        IntrayLayout::May2018NoKeyName => "d4241ce..aee0532",
        IntrayLayout::May2018 => "aee0532..b6da725",
        IntrayLayout::June2018 => "b6da725..c9299fc",
        IntrayLayout::Since2020 => "golden migration.sql of 8ce2c5d",
    };
    // (checked after the rows, so that on the old code the test fails on them)
    assert!(said.contains(commit), "the layout is named: {said}");
    if layout != IntrayLayout::Since2020 {
        server.stop().await;
        return;
    }
    // while the server runs, the data directory is not moved into
    let busy = import("import-intray", &file, &data);
    assert!(!busy.status.success());
    let err = text(&busy.stderr);
    assert!(err.contains("in use by a running pigeonhole server"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    server.stop().await;

    // the second import of the same file changes nothing
    let out = import("import-intray", &file, &data);
    assert!(out.status.success(), "second import failed: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("already here, skipped: alice, bob"),
        "{}",
        text(&out.stdout)
    );

    // another account under the name alice: a conflict, and nothing of that file is written
    let other = dir.path().join("other.sqlite3");
    intray_file(layout, &other);
    let db = Connection::open(&other).expect("open");
    db.execute(
        r#"UPDATE "user" SET "identifier" = ?1 WHERE "username" = 'alice'"#,
        params![Uuid::from_bytes([9; 16]).as_bytes().to_vec()],
    )
    .expect("another account");
    drop(db);
    let out = import("import-intray", &other, &data);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("belongs to another account here") && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // what is on disk: PBKDF2 now, the keys that logged in as digests
    let store = Store::open(&data).expect("open the store");
    let alice = store
        .inbox
        .accounts
        .by_username("alice")
        .await
        .expect("read")
        .expect("alice");
    assert!(
        matches!(&alice.password_hash, PasswordHash::Pbkdf2(phc) if phc.starts_with("$pbkdf2-sha256$")),
        "{:?}",
        alice.password_hash
    );
    assert_eq!(store.inbox.count(alice.id).await.expect("count"), 4);
    let keys = store.inbox.accounts.access_keys(alice.id).await.expect("keys");
    assert!(
        keys.iter().all(|k| matches!(k.secret, KeySecret::Digest(_))),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_of_april_2018_moves_in() {
    intray_moves_in(IntrayLayout::April2018).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_of_may_22_2018_moves_in() {
    intray_moves_in(IntrayLayout::May2018NoKeyName).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_of_may_2018_moves_in() {
    intray_moves_in(IntrayLayout::May2018).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_of_2018_to_2020_moves_in() {
    intray_moves_in(IntrayLayout::June2018).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_since_2020_moves_in() {
    intray_moves_in(IntrayLayout::Since2020).await;
}

fn by_id(mut items: Vec<Value>) -> Vec<Value> {
    items.sort_by_key(|i| i["id"].as_str().unwrap_or_default().to_owned());
    items
}

/// Moves a Tickler file of `layout` in, starts the server and compares every row.
async fn tickler_moves_in(layout: TicklerLayout) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tickler.sqlite3");
    let data = dir.path().join("data");
    tickler_file(layout, &file);

    let out = import("import-tickler", &file, &data);
    assert!(out.status.success(), "import failed: {}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("moved in 2 scheduler account(s) with 9 item(s): carol, dave"),
        "{said}"
    );
    assert!(
        said.contains("2 unfinished delivery(ies) of triggered items are not sent again"),
        "the pending inbox delivery and the unsent e-mail: {said}"
    );
    assert!(!said.contains("left out"), "no row is an orphan: {said}");

    let server = Proc::start(&data, dir.path(), Services::Both, &[]).await;
    let api = &server.scheduler;
    let _ = api.login_ok("carol", CAROL_PASSWORD).await;
    let auth = api.login_ok("carol", CAROL_PASSWORD).await;
    api.login("carol", "tickle you").await.expect_error(401);
    let dave = api.login_ok("dave", DAVE_PASSWORD).await;
    // inbox and scheduler accounts are separate: carol has no inbox account
    server.api.login("carol", CAROL_PASSWORD).await.expect_error(401);

    assert_eq!(
        api.get("/account/settings", &auth).await.expect_json(200),
        json!({"timezone": {"offset": 60, "name": "Europe/Zurich", "summer": false}})
    );
    let account = api.get("/account", &dave).await.expect_json(200);
    assert_eq!(
        (&account["uuid"], &account["created"]),
        (&json!(DAVE), &json!("2018-06-12T00:00:00Z")),
        "{account}"
    );
    for (owner, who) in [(CAROL, &auth), (DAVE, &dave)] {
        let items = api.get("/scheduler/items", who).await.expect_json(200);
        let items = items.as_array().expect("a list").clone();
        assert_eq!(by_id(items), by_id(tickler_items_json(layout, owner)), "{layout:?}");
    }
    assert_eq!(
        api.get("/trigger", &auth).await.expect_json(200),
        tickler_triggers_json()
    );
    assert_eq!(api.get("/trigger", &dave).await.expect_json(200), json!([]));
    let commit = match layout {
        TicklerLayout::June2018 => "5b1350f..93d50c8",
        TicklerLayout::Y2018 => "93d50c8..1d854bb",
        TicklerLayout::Y2020 => "69c7053..fc70109",
        TicklerLayout::April2022 => "golden migration.sql of ec78709",
        TicklerLayout::May2022Both => "golden migration.sql of d5f0f7e",
        TicklerLayout::Since2022 => "golden migration.sql of 79a68ed",
    };
    assert!(said.contains(commit), "the layout is named: {said}");
    // the key of the old verification e-mail still verifies the address
    let path = format!("/trigger/email/verify/{UNVERIFIED}/{}", "03".repeat(16));
    api.post(&path, &auth, &json!(null)).await.expect_error(400);
    let path = format!("/trigger/email/verify/{UNVERIFIED}/{}", "02".repeat(16));
    api.post(&path, &auth, &json!(null)).await.expect(200);
    let triggers = api.get("/trigger", &auth).await.expect_json(200);
    assert_eq!(
        triggers[2]["info"]["typedTriggerInfoValue"]["emailTriggerInfoVerified"],
        json!(true)
    );
    server.stop().await;

    let store = Store::open(&data).expect("open the store");
    let carol = store
        .scheduler
        .accounts
        .by_username("carol")
        .await
        .expect("read")
        .expect("carol");
    assert_eq!(carol.id, id(CAROL));
    assert!(
        matches!(carol.password_hash, PasswordHash::Pbkdf2(_)),
        "{:?}",
        carol.password_hash
    );
    let rent = store
        .scheduler
        .scheduled(carol.id, id(RENT))
        .await
        .expect("read")
        .expect("rent");
    let server_time = if layout == TicklerLayout::Y2020 { 3 } else { 0 };
    assert_eq!(rent.server_time, server_time);
    let trigger = store
        .scheduler
        .triggers
        .trigger(carol.id, id(INBOX_TRIGGER))
        .await
        .expect("read")
        .expect("trigger");
    assert_eq!(
        trigger.kind,
        pigeonhole::domain::scheduler::models::TriggerKind::Inbox {
            url: "https://intray.example.org".into(),
            username: "carol".into(),
            access_key: "ab".repeat(16),
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_of_june_2018_moves_in() {
    tickler_moves_in(TicklerLayout::June2018).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_of_2018_to_2020_moves_in() {
    tickler_moves_in(TicklerLayout::Y2018).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_of_2020_to_2022_moves_in() {
    tickler_moves_in(TicklerLayout::Y2020).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_of_april_2022_moves_in() {
    tickler_moves_in(TicklerLayout::April2022).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_of_may_7_2022_moves_in() {
    tickler_moves_in(TicklerLayout::May2022Both).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickler_since_may_2022_moves_in() {
    tickler_moves_in(TicklerLayout::Since2022).await;
}

/// Runs the import of a file that must be refused: one line naming `what`, exit status 1,
/// done within a few seconds, and no data directory made.
fn refused(command: &str, file: &Path, data: &Path, what: &[&str]) {
    // within a deadline: the old code ran for ever on a recursive view
    let mut child = Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args([command, file.to_str().expect("path"), "--data-dir"])
        .arg(data)
        .env_remove("PIGEONHOLE_DATA_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run pigeonhole");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command} {} still ran after 30 s", file.display());
        }
        std::thread::sleep(Duration::from_millis(20)); // poll until it exits, within the deadline
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for w in what {
        assert!(err.contains(w), "{w:?} is not in {err}");
    }
    assert!(!data.exists(), "nothing was written: {err}");
}

fn altered(dir: &Path, name: &str, make: impl Fn(&Path), sql: &str) -> std::path::PathBuf {
    let file = dir.join(name);
    make(&file);
    Connection::open(&file).expect("open").execute_batch(sql).expect(sql);
    file
}

#[test]
fn hostile_files_are_refused_before_anything_is_read_or_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let intray = |p: &Path| intray_file(IntrayLayout::Since2020, p);

    // a recursive view where a table should be: refused at once, before any query runs
    let view = altered(
        dir.path(),
        "view.sqlite3",
        intray,
        r#"DROP TABLE "intray_item";
           CREATE VIEW "intray_item"("id","identifier","user_id","type","contents","created") AS
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)
             SELECT x, randomblob(16), randomblob(16), 'text', randomblob(1000), '2021-01-01T00:00:00' FROM c;"#,
    );
    refused("import-intray", &view, &data, &["\"intray_item\" is a view", "refused"]);

    // a trigger (the originals made none)
    let trigger = altered(
        dir.path(),
        "trigger.sqlite3",
        intray,
        r#"CREATE TRIGGER "spy" AFTER INSERT ON "user" BEGIN SELECT 1; END;"#,
    );
    refused("import-intray", &trigger, &data, &["trigger (\"spy\"", "refused"]);

    // a value over the cap: a clear error naming the table, row and column
    // (src/moving_in/sqlite.rs VALUE_CAP, written out so that this test builds on the old code)
    let cap = 64 * 1024 * 1024;
    let big = altered(
        dir.path(),
        "big.sqlite3",
        intray,
        &format!(
            r#"INSERT INTO "intray_item"("identifier","user_id","type","contents","created")
               VALUES (randomblob(16), x'0a11ce00000040008000000000000001', 'text', zeroblob({}), '2021-01-01T00:00:00');"#,
            cap + 1
        ),
    );
    refused(
        "import-intray",
        &big,
        &data,
        &["intray_item row 6 (id 6)", "\"contents\"", "larger than 64 MiB"],
    );
    std::fs::remove_file(&big).expect("remove the big file");

    // a column the import needs: named with its table, never read as NULL
    let renamed = altered(
        dir.path(),
        "renamed.sqlite3",
        |p| tickler_file(TicklerLayout::Since2022, p),
        r#"ALTER TABLE "triggered_intray_item" RENAME COLUMN "intray_item_u_u_i_d" TO "intray_item_uuid";"#,
    );
    refused(
        "import-tickler",
        &renamed,
        &data,
        &["the table \"triggered_intray_item\" has no column \"intray_item_u_u_i_d\""],
    );
    let no_login = altered(
        dir.path(),
        "no-login.sqlite3",
        intray,
        r#"ALTER TABLE "user" DROP COLUMN "last_login";"#,
    );
    refused(
        "import-intray",
        &no_login,
        &data,
        &["the table \"user\" has no column \"last_login\""],
    );
    let timeless = altered(
        dir.path(),
        "timeless.sqlite3",
        intray,
        r#"ALTER TABLE "intray_item" RENAME COLUMN "created" TO "made";"#,
    );
    refused(
        "import-intray",
        &timeless,
        &data,
        &["the table \"intray_item\" has no column \"created\""],
    );
    let ownerless = altered(
        dir.path(),
        "ownerless.sqlite3",
        |p| tickler_file(TicklerLayout::Since2022, p),
        r#"ALTER TABLE "intray_trigger" DROP COLUMN "user";"#,
    );
    refused(
        "import-tickler",
        &ownerless,
        &data,
        &["the table \"intray_trigger\" has no column \"user\""],
    );

    // an unknown permission is named; so is a name without persistent's tag
    let unknown = altered(
        dir.path(),
        "unknown.sqlite3",
        intray,
        r#"UPDATE "access_key" SET "permissions" = '["sPermitAdd","sPermitTeleport"]' WHERE "id" = 2;"#,
    );
    refused(
        "import-intray",
        &unknown,
        &data,
        &["access_key row 2", "unknown permission \"PermitTeleport\""],
    );
    let untagged = altered(
        dir.path(),
        "untagged.sqlite3",
        intray,
        r#"UPDATE "access_key" SET "permissions" = '["PermitAdd"]' WHERE "id" = 1;"#,
    );
    refused(
        "import-intray",
        &untagged,
        &data,
        &["access_key row 1", "\"PermitAdd\""],
    );

    // into a data directory that has accounts already: a refused file changes none of it
    let good = dir.path().join("good.sqlite3");
    intray_file(IntrayLayout::April2018, &good);
    let out = import("import-intray", &good, &data);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listing = |d: &Path| {
        let mut all: Vec<(String, u64)> = walk(d);
        all.sort();
        all
    };
    let before = listing(&data);
    let out = import("import-intray", &unknown, &data);
    assert!(!out.status.success());
    assert_eq!(listing(&data), before, "{}", text(&out.stderr));
}

/// Every file under `dir` with its size and modification time (as nanoseconds).
fn walk(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let meta = entry.metadata().expect("metadata");
        if meta.is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            let modified = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as u64);
            out.push((entry.path().display().to_string(), meta.len() ^ modified));
        }
    }
    out
}

#[test]
fn a_file_of_another_schema_is_one_clear_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");

    // a Tickler file given to import-intray, and the other way round
    let tickler = dir.path().join("tickler.sqlite3");
    tickler_file(TicklerLayout::Since2022, &tickler);
    refused(
        "import-intray",
        &tickler,
        &data,
        &["not an Intray database", "nothing was written"],
    );
    let intray = dir.path().join("intray.sqlite3");
    intray_file(IntrayLayout::Since2020, &intray);
    refused("import-tickler", &intray, &data, &["not a Tickler database"]);

    // a row that does not read: nothing of the file arrives
    let bad = altered(
        dir.path(),
        "bad.sqlite3",
        |p| intray_file(IntrayLayout::Since2020, p),
        r#"UPDATE "intray_item" SET "created" = 'yesterday' WHERE "id" = 2"#,
    );
    refused("import-intray", &bad, &data, &["intray_item row 2", "yesterday"]);

    // not SQLite at all, and no file
    let junk = dir.path().join("junk.sqlite3");
    std::fs::write(&junk, b"this is not a database, it is a text file of some length....").expect("write");
    refused("import-tickler", &junk, &data, &["not a SQLite database"]);
    refused(
        "import-tickler",
        &dir.path().join("missing.sqlite3"),
        &data,
        &["is not a file"],
    );
}

/// Writes every layout's fixture into `$ORIGINALS_FIXTURES`, to look at them with sqlite3.
#[test]
#[ignore]
fn write_the_fixtures() {
    let dir = std::path::PathBuf::from(std::env::var("ORIGINALS_FIXTURES").expect("ORIGINALS_FIXTURES"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    for layout in IntrayLayout::ALL {
        let path = dir.join(format!("intray-{layout:?}.sqlite3"));
        let _ = std::fs::remove_file(&path);
        intray_file(layout, &path);
    }
    for layout in TicklerLayout::ALL {
        let path = dir.join(format!("tickler-{layout:?}.sqlite3"));
        let _ = std::fs::remove_file(&path);
        tickler_file(layout, &path);
    }
}
