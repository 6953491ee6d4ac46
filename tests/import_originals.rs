//! Moving in from the original servers (issue 12 point 5): SQLite files made with the
//! schemas the original Intray and Tickler servers had in 2021 (the CREATE TABLE statements
//! Haskell's `persistent` made for their entity definitions, values stored as it stored
//! them), imported by the binary into a fresh data directory; then the server started
//! there shows every field through the API, and the old passwords and access keys log in.

mod common;

use common::process::{Proc, Services};
use common::{b64, Auth};
use pigeonhole::domain::account::{KeySecret, PasswordHash};
use pigeonhole::store::Store;
use rusqlite::{params, Connection};
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Command, Output};
use uuid::Uuid;

/// The tables of Intray's `intray-data/src/Intray/Data/DB.hs` (2021), as persistent-sqlite
/// created them.
const INTRAY_SCHEMA: &str = r#"
CREATE TABLE "user"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"username" VARCHAR NOT NULL,"hashed_password" BLOB NOT NULL,"created_timestamp" TIMESTAMP NOT NULL,"last_login" TIMESTAMP NULL,CONSTRAINT "unique_user_identifier" UNIQUE ("identifier"),CONSTRAINT "unique_username" UNIQUE ("username"));
CREATE TABLE "customer"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"stripe_customer" VARCHAR NOT NULL,CONSTRAINT "unique_stripe_customer" UNIQUE ("user","stripe_customer"));
CREATE TABLE "subscription"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"end" TIMESTAMP NOT NULL,CONSTRAINT "unique_subscription_user" UNIQUE ("user"));
CREATE TABLE "intray_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier","user_id"));
CREATE TABLE "access_key"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user" BLOB NOT NULL,"name" VARCHAR NOT NULL,"hashed_key" BLOB NOT NULL,"created_timestamp" TIMESTAMP NOT NULL,"permissions" VARCHAR NOT NULL,CONSTRAINT "unique_access_key_identifier" UNIQUE ("identifier","user"));
"#;

/// The tables of Tickler's `tickler-data/src/Tickler/Data/DB.hs` (2021).
const TICKLER_SCHEMA: &str = r#"
CREATE TABLE "user"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"username" VARCHAR NOT NULL,"hashed_password" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"last_login" TIMESTAMP NULL,CONSTRAINT "unique_user_identifier" UNIQUE ("identifier"),CONSTRAINT "unique_username" UNIQUE ("username"));
CREATE TABLE "customer"("id" INTEGER PRIMARY KEY,"user" BLOB NOT NULL,"stripe_customer" VARCHAR NOT NULL,CONSTRAINT "unique_customer_user" UNIQUE ("user"),CONSTRAINT "unique_user_customer" UNIQUE ("stripe_customer"));
CREATE TABLE "stripe_event"("id" INTEGER PRIMARY KEY,"event" VARCHAR NOT NULL,"error" VARCHAR NULL,CONSTRAINT "unique_stripe_event" UNIQUE ("event"));
CREATE TABLE "user_settings"("id" INTEGER PRIMARY KEY,"user_id" BLOB NOT NULL,"time_zone" VARCHAR NOT NULL,CONSTRAINT "unique_user_settings" UNIQUE ("user_id"));
CREATE TABLE "tickler_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"server_time" INTEGER NOT NULL DEFAULT 0,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,CONSTRAINT "unique_item_identifier" UNIQUE ("identifier"));
CREATE TABLE "triggered_item"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"user_id" BLOB NOT NULL,"type" VARCHAR NOT NULL,"contents" BLOB NOT NULL,"created" TIMESTAMP NOT NULL,"scheduled_day" DATE NOT NULL,"scheduled_time" TIME NULL,"recurrence" VARCHAR NULL,"triggered" TIMESTAMP NOT NULL,CONSTRAINT "unique_triggered_item_identifier" UNIQUE ("identifier"));
CREATE TABLE "user_trigger"("id" INTEGER PRIMARY KEY,"user_id" BLOB NOT NULL,"trigger_type" VARCHAR NOT NULL,"trigger_id" BLOB NOT NULL);
CREATE TABLE "intray_trigger"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"url" VARCHAR NOT NULL,"username" VARCHAR NOT NULL,"access_key" BLOB NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_intray_trigger" UNIQUE ("identifier"));
CREATE TABLE "email_trigger"("id" INTEGER PRIMARY KEY,"identifier" BLOB NOT NULL,"address" VARCHAR NOT NULL,"verification_key" BLOB NOT NULL,"verified" BOOLEAN NOT NULL,"added" TIMESTAMP NOT NULL,CONSTRAINT "unique_email_trigger" UNIQUE ("identifier"));
CREATE TABLE "email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"from" VARCHAR NOT NULL,"from_name" VARCHAR NOT NULL,"subject" VARCHAR NOT NULL,"text_content" VARCHAR NOT NULL,"html_content" VARCHAR NOT NULL,"status" VARCHAR NOT NULL,"send_error" VARCHAR NULL,"ses_id" VARCHAR NULL,"scheduled" TIMESTAMP NOT NULL,"send_attempt" TIMESTAMP NULL);
CREATE TABLE "verification_email"("id" INTEGER PRIMARY KEY,"to" VARCHAR NOT NULL,"key" BLOB NOT NULL,"trigger" BLOB NOT NULL,"scheduled" TIMESTAMP NOT NULL,"email" INTEGER NULL REFERENCES "email");
CREATE TABLE "admin_notification_email"("id" INTEGER PRIMARY KEY,"contents" VARCHAR NOT NULL,"email" INTEGER NULL REFERENCES "email");
CREATE TABLE "triggered_intray_item"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"intray_item_uuid" BLOB NULL,"error" VARCHAR NULL,CONSTRAINT "unique_triggered_intray_item" UNIQUE ("item","trigger"));
CREATE TABLE "triggered_email"("id" INTEGER PRIMARY KEY,"item" BLOB NOT NULL,"trigger" BLOB NOT NULL,"email" INTEGER NULL REFERENCES "email","error" VARCHAR NULL,CONSTRAINT "unique_triggered_email" UNIQUE ("item","trigger"));
"#;

fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("uuid")
}

/// A uuid as typed-uuid stored it: 16 bytes.
fn blob(u: Uuid) -> Vec<u8> {
    u.as_bytes().to_vec()
}

/// A bcrypt hash as Intray and Tickler made it (Crypto.BCrypt's fast policy: `$2y$`, cost
/// 4), stored as the bytes of its text.
fn old_hash(secret: &str) -> Vec<u8> {
    bcrypt::hash_with_result(secret, 4)
        .expect("bcrypt")
        .format_for_version(bcrypt::Version::TwoY)
        .into_bytes()
}

const ALICE: &str = "0a11ce00-0000-4000-8000-000000000001";
const NOTE: &str = "17e40000-0000-4000-8000-000000000001";
const PICTURE: &str = "17e40000-0000-4000-8000-000000000002";
const PHONE_KEY: &str = "6e400000-0000-4000-8000-000000000001";
/// The phone key's secret, as Intray showed it (hex of 16 random bytes).
const PHONE_SECRET: &str = "00112233445566778899aabbccddeeff";

fn intray_file(path: &Path) {
    let db = Connection::open(path).expect("create the Intray database");
    db.execute_batch(INTRAY_SCHEMA).expect("schema");
    db.execute(
        r#"INSERT INTO "user"("identifier","username","hashed_password","created_timestamp","last_login") VALUES (?1,?2,?3,?4,?5)"#,
        params![blob(id(ALICE)), "alice", old_hash("old password"), "2021-03-04T05:06:07.123456", "2021-06-01T10:00:00"],
    )
    .expect("user");
    let item = |uuid: &str, kind: &[u8], contents: &[u8], created: &str| {
        db.execute(
            r#"INSERT INTO "intray_item"("identifier","user_id","type","contents","created") VALUES (?1,?2,?3,?4,?5)"#,
            params![blob(id(uuid)), blob(id(ALICE)), kind, contents, created],
        )
        .expect("item");
    };
    item(NOTE, b"text", "Buy milk 🥛".as_bytes(), "2021-04-05T06:07:08.5");
    item(
        PICTURE,
        b"image/png",
        &[0x89, b'P', b'N', b'G', 0, 1],
        "2021-04-05T06:07:09",
    );
    db.execute(
        r#"INSERT INTO "access_key"("identifier","user","name","hashed_key","created_timestamp","permissions") VALUES (?1,?2,?3,?4,?5,?6)"#,
        params![
            blob(id(PHONE_KEY)),
            blob(id(ALICE)),
            "phone",
            old_hash(PHONE_SECRET),
            "2021-05-06T07:08:09",
            r#"["PermitAdd","PermitShow","PermitGetItems","PermitInitiateCheckout"]"#
        ],
    )
    .expect("access key");
}

const BOB: &str = "0b0b0000-0000-4000-8000-000000000001";
const RENT: &str = "7e470000-0000-4000-8000-000000000001";
const PLANTS: &str = "7e470000-0000-4000-8000-000000000002";
const DONE: &str = "7e470000-0000-4000-8000-000000000003";
const INBOX_TRIGGER: &str = "7e166e00-0000-4000-8000-000000000001";
const EMAIL_TRIGGER: &str = "7e166e00-0000-4000-8000-000000000002";
const UNVERIFIED: &str = "7e166e00-0000-4000-8000-000000000003";
const ADDED_UUID: &str = "add00000-0000-4000-8000-000000000001";

fn tickler_file(path: &Path) {
    let db = Connection::open(path).expect("create the Tickler database");
    db.execute_batch(TICKLER_SCHEMA).expect("schema");
    db.execute(
        r#"INSERT INTO "user"("identifier","username","hashed_password","created","last_login") VALUES (?1,?2,?3,?4,NULL)"#,
        params![blob(id(BOB)), "bob", old_hash("tickle me"), "2020-12-24 18:00:00.25 UTC"],
    )
    .expect("user");
    db.execute(
        r#"INSERT INTO "user_settings"("user_id","time_zone") VALUES (?1,?2)"#,
        params![blob(id(BOB)), r#"{"offset":60,"summer":false,"name":"Europe/Zurich"}"#],
    )
    .expect("settings");
    let scheduled = |uuid: &str,
                     text: &str,
                     day: &str,
                     time: Option<&str>,
                     recurrence: Option<&str>,
                     server_time: i64| {
        db.execute(
            r#"INSERT INTO "tickler_item"("identifier","user_id","type","contents","created","server_time","scheduled_day","scheduled_time","recurrence") VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)"#,
            params![blob(id(uuid)), blob(id(BOB)), b"text".to_vec(), text.as_bytes(), "2021-01-02T03:04:05", server_time, day, time, recurrence],
        )
        .expect("tickler item");
    };
    scheduled(
        RENT,
        "Pay rent",
        "2099-01-01",
        Some("08:30:00"),
        Some(r#"{"every-x-months":{"months":1,"day":1,"time-of-day":"08:30:00"}}"#),
        3,
    );
    scheduled(
        PLANTS,
        "Water the plants",
        "2099-02-03",
        None,
        Some(r#"{"every-x-days":{"days":3,"time-of-day":null}}"#),
        0,
    );
    db.execute(
        r#"INSERT INTO "triggered_item"("identifier","user_id","type","contents","created","scheduled_day","scheduled_time","recurrence","triggered") VALUES (?1,?2,?3,?4,?5,?6,?7,NULL,?8)"#,
        params![blob(id(DONE)), blob(id(BOB)), b"text".to_vec(), b"Call mum".to_vec(), "2021-01-01T00:00:00", "2021-01-10", "12:00:00", "2021-01-10T11:00:00.5"],
    )
    .expect("triggered item");
    for (trigger, kind) in [
        (INBOX_TRIGGER, &b"intray"[..]),
        (EMAIL_TRIGGER, &b"email"[..]),
        (UNVERIFIED, &b"email"[..]),
    ] {
        db.execute(
            r#"INSERT INTO "user_trigger"("user_id","trigger_type","trigger_id") VALUES (?1,?2,?3)"#,
            params![blob(id(BOB)), kind, blob(id(trigger))],
        )
        .expect("user trigger");
    }
    db.execute(
        r#"INSERT INTO "intray_trigger"("identifier","url","username","access_key","added") VALUES (?1,?2,?3,?4,?5)"#,
        params![
            blob(id(INBOX_TRIGGER)),
            "https://intray.example.org",
            "bob",
            vec![0xab_u8; 16],
            "2021-01-05T00:00:00"
        ],
    )
    .expect("intray trigger");
    db.execute(
        r#"INSERT INTO "email_trigger"("identifier","address","verification_key","verified","added") VALUES (?1,?2,?3,?4,?5)"#,
        params![blob(id(EMAIL_TRIGGER)), "bob@example.org", vec![0x01_u8; 16], true, "2021-01-06T00:00:00"],
    )
    .expect("email trigger");
    db.execute(
        r#"INSERT INTO "email_trigger"("identifier","address","verification_key","verified","added") VALUES (?1,?2,?3,?4,?5)"#,
        params![blob(id(UNVERIFIED)), "bob.work@example.org", vec![0x02_u8; 16], false, "2021-01-07T00:00:00"],
    )
    .expect("unverified email trigger");
    db.execute(
        r#"INSERT INTO "email"("to","from","from_name","subject","text_content","html_content","status","send_error","ses_id","scheduled","send_attempt") VALUES ('bob@example.org','t@example.org','Tickler','Call mum','Call mum','<p>Call mum</p>',?1,NULL,NULL,'2021-01-10T11:00:01','2021-01-10T11:00:02')"#,
        params![b"sent".to_vec()],
    )
    .expect("email");
    db.execute(
        r#"INSERT INTO "triggered_intray_item"("item","trigger","intray_item_uuid","error") VALUES (?1,?2,?3,NULL)"#,
        params![blob(id(DONE)), blob(id(INBOX_TRIGGER)), blob(id(ADDED_UUID))],
    )
    .expect("triggered intray item");
    db.execute(
        r#"INSERT INTO "triggered_email"("item","trigger","email","error") VALUES (?1,?2,1,NULL)"#,
        params![blob(id(DONE)), blob(id(EMAIL_TRIGGER))],
    )
    .expect("triggered email");
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intray_database_moves_in_and_its_passwords_and_keys_log_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("intray.sqlite3");
    let data = dir.path().join("data");
    intray_file(&file);

    let out = import("import-intray", &file, &data);
    assert!(out.status.success(), "import failed: {}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("moved in 1 inbox account(s) with 2 item(s): alice"),
        "{said}"
    );
    assert!(
        said.contains("PermitInitiateCheckout"),
        "the dropped permission is named: {said}"
    );

    let server = Proc::start(&data, dir.path(), Services::Both, &[]).await;
    let api = &server.api;
    // the old password logs in; so does it a second time (after its hash was replaced)
    let auth = api.login_ok("alice", "old password").await;
    api.login("alice", "old passwort").await.expect_error(401);
    let again = api.login_ok("alice", "old password").await;
    let items = api.get("/inbox/items", &again).await.expect_json(200);
    assert_eq!(
        items,
        json!([
            {"id": NOTE, "created": "2021-04-05T06:07:08.5Z",
             "contents": {"type": "text", "data": b64("Buy milk 🥛")}},
            {"id": PICTURE, "created": "2021-04-05T06:07:09Z",
             "contents": {"type": "image/png", "data": b64([0x89, b'P', b'N', b'G', 0, 1])}},
        ])
    );
    let account = api.get("/account", &auth).await.expect_json(200);
    assert_eq!(account["uuid"], json!(ALICE), "{account}");
    assert_eq!(account["created"], json!("2021-03-04T05:06:07.123456Z"), "{account}");
    let keys = api.get("/access-key", &auth).await.expect_json(200);
    assert_eq!(
        keys,
        json!([{"uuid": PHONE_KEY, "name": "phone", "created": "2021-05-06T07:08:09Z",
                "permissions": ["PermitAdd", "PermitShow", "PermitGetItems"]}])
    );
    // the old access key: first through a login (then kept as a digest), then in headers
    // (which check digests only: before that first login they do not know the key)
    let headers = Auth::key("alice", PHONE_SECRET);
    api.get("/inbox/items", &headers).await.expect_error(401);
    let by_key = api.login_ok("alice", &PHONE_SECRET.to_uppercase()).await;
    // the key's own permissions, no more
    assert_eq!(api.get("/inbox/items", &by_key).await.expect_json(200), items);
    api.get("/access-key", &by_key).await.expect_error(401);
    assert_eq!(api.get("/inbox/items", &headers).await.expect_json(200), items);
    api.login("alice", "ffeeddccbbaa99887766554433221100")
        .await
        .expect_error(401);

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
        text(&out.stdout).contains("already here, skipped: alice"),
        "{}",
        text(&out.stdout)
    );

    // another account under the name alice: a conflict, and nothing of that file is written
    let other = dir.path().join("other.sqlite3");
    intray_file(&other);
    let db = Connection::open(&other).expect("open");
    db.execute(
        r#"UPDATE "user" SET "identifier" = ?1"#,
        params![blob(Uuid::from_bytes([9; 16]))],
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

    // what is on disk: PBKDF2 now, the key as a digest
    let store = Store::open(&data).expect("open the store");
    let alice = store.inbox.accounts.by_username("alice").expect("read").expect("alice");
    assert!(
        matches!(&alice.password_hash, PasswordHash::Pbkdf2(phc) if phc.starts_with("$pbkdf2-sha256$")),
        "{:?}",
        alice.password_hash
    );
    assert_eq!(store.inbox.count(alice.id).expect("count"), 2);
    let keys = store.inbox.accounts.access_keys(alice.id).expect("keys");
    assert!(matches!(keys[0].secret, KeySecret::Digest(_)), "{:?}", keys[0].secret);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tickler_database_moves_in_with_schedules_triggers_and_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("tickler.sqlite3");
    let data = dir.path().join("data");
    tickler_file(&file);

    let out = import("import-tickler", &file, &data);
    assert!(out.status.success(), "import failed: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("moved in 1 scheduler account(s) with 3 item(s): bob"),
        "{}",
        text(&out.stdout)
    );

    let server = Proc::start(&data, dir.path(), Services::Both, &[]).await;
    let api = &server.scheduler;
    let auth = api.login_ok("bob", "tickle me").await;
    let _ = api.login_ok("bob", "tickle me").await;
    api.login("bob", "tickle you").await.expect_error(401);
    // inbox and scheduler accounts are separate: bob has no inbox account
    server.api.login("bob", "tickle me").await.expect_error(401);

    let settings = api.get("/account/settings", &auth).await.expect_json(200);
    assert_eq!(
        settings,
        json!({"timezone": {"offset": 60, "name": "Europe/Zurich", "summer": false}})
    );

    let items = api.get("/scheduler/items", &auth).await.expect_json(200);
    let items = items.as_array().expect("a list");
    let find = |uuid: &str| -> Value {
        items
            .iter()
            .find(|i| i["id"] == json!(uuid))
            .unwrap_or_else(|| panic!("{uuid} is not among {items:?}"))
            .clone()
    };
    assert_eq!(items.len(), 3, "{items:?}");
    assert_eq!(
        find(RENT),
        json!({"id": RENT, "created": "2021-01-02T03:04:05Z", "triggered": null,
               "contents": {"content": "Pay rent", "scheduled-day": "2099-01-01", "scheduled-time": "08:30:00",
                            "recurrence": {"every-x-months": {"months": 1, "day": 1, "time-of-day": "08:30:00"}}}})
    );
    assert_eq!(
        find(PLANTS)["contents"],
        json!({"content": "Water the plants", "scheduled-day": "2099-02-03", "scheduled-time": null,
               "recurrence": {"every-x-days": {"days": 3, "time-of-day": null}}})
    );
    let done = find(DONE);
    assert_eq!(done["created"], json!("2021-01-01T00:00:00Z"));
    assert_eq!(
        done["contents"],
        json!({"content": "Call mum", "scheduled-day": "2021-01-10", "scheduled-time": "12:00:00", "recurrence": null})
    );
    assert_eq!(
        done["triggered"],
        json!({"triggeredInfoTriggered": "2021-01-10T11:00:00.5Z",
        "triggeredInfoTriggerTriggerAttempts": [
            {"tag": "InboxTriggerAttempt", "contents": [INBOX_TRIGGER, {"tag": "InboxAdditionSuccess", "contents": ADDED_UUID}]},
            {"tag": "EmailTriggerAttempt", "contents": [EMAIL_TRIGGER, {"tag": "EmailResultSent"}]},
        ]})
    );

    let triggers = api.get("/trigger", &auth).await.expect_json(200);
    assert_eq!(
        triggers,
        json!([
            {"uuid": INBOX_TRIGGER, "info": {"typedTriggerInfoType": "inbox",
                "typedTriggerInfoValue": {"inboxTriggerInfoUrl": "https://intray.example.org"}}},
            {"uuid": EMAIL_TRIGGER, "info": {"typedTriggerInfoType": "email",
                "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "bob@example.org", "emailTriggerInfoVerified": true}}},
            {"uuid": UNVERIFIED, "info": {"typedTriggerInfoType": "email",
                "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "bob.work@example.org", "emailTriggerInfoVerified": false}}},
        ])
    );
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
    let bob = store.scheduler.accounts.by_username("bob").expect("read").expect("bob");
    assert_eq!(bob.id, id(BOB));
    assert!(
        matches!(bob.password_hash, PasswordHash::Pbkdf2(_)),
        "{:?}",
        bob.password_hash
    );
    let rent = store
        .scheduler
        .scheduled(bob.id, id(RENT))
        .expect("read")
        .expect("rent");
    assert_eq!(rent.server_time, 3);
    let trigger = store
        .scheduler
        .trigger(bob.id, id(INBOX_TRIGGER))
        .expect("read")
        .expect("trigger");
    assert_eq!(
        trigger.kind,
        pigeonhole::domain::scheduler::models::TriggerKind::Inbox {
            url: "https://intray.example.org".into(),
            username: "bob".into(),
            access_key: "ab".repeat(16),
        }
    );
}

#[test]
fn a_file_of_another_schema_is_one_clear_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");

    // a Tickler file given to import-intray
    let tickler = dir.path().join("tickler.sqlite3");
    tickler_file(&tickler);
    let out = import("import-intray", &tickler, &data);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("not an Intray database"), "{err}");
    assert!(err.contains("nothing was written"), "{err}");
    assert!(!data.exists(), "the data directory was not even made");

    // a schema of an unknown version: a column missing
    let odd = dir.path().join("odd.sqlite3");
    let db = Connection::open(&odd).expect("create");
    db.execute_batch(&INTRAY_SCHEMA.replace(r#","last_login" TIMESTAMP NULL"#, ""))
        .expect("schema");
    drop(db);
    let err = text(&import("import-intray", &odd, &data).stderr);
    assert!(err.contains("has no column \"last_login\""), "{err}");

    // a row that does not read: nothing of the file arrives
    let bad = dir.path().join("bad.sqlite3");
    intray_file(&bad);
    let db = Connection::open(&bad).expect("open");
    db.execute(r#"UPDATE "intray_item" SET "created" = 'yesterday' WHERE "id" = 2"#, [])
        .expect("spoil a row");
    drop(db);
    let out = import("import-intray", &bad, &data);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("intray_item row 2") && err.contains("yesterday"), "{err}");
    assert!(!data.exists());

    // not SQLite at all, and no file
    let junk = dir.path().join("junk.sqlite3");
    std::fs::write(&junk, b"this is not a database, it is a text file of some length....").expect("write");
    let err = text(&import("import-tickler", &junk, &data).stderr);
    assert!(err.contains("not a SQLite database"), "{err}");
    let err = text(&import("import-tickler", &dir.path().join("missing.sqlite3"), &data).stderr);
    assert!(err.contains("is not a file"), "{err}");
    assert!(!data.exists());
}
