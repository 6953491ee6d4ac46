//! The fixture generator: SQLite files of every layout the original Intray and Tickler
//! servers wrote, made from their own DDL ([`ddl`]) with values bound as `persistent-sqlite`
//! bound them (uuids as 16-byte BLOBs, `UTCTime` as `2021-03-04T05:06:07.123456`, `Day` and
//! `TimeOfDay` as text, `ByteString` and the hand-written enums as BLOBs, `Text` as TEXT,
//! `Set Permission` as persistent's JSON with the `s` tag of each text, the recurrence and
//! time zone as their JSON), and what the API must show of each after moving in.
//!
//! To look at the files themselves:
//! `ORIGINALS_FIXTURES=/tmp/f cargo test --test moving_in -- --ignored write_the_fixtures`.

#![allow(dead_code)]

pub mod ddl;

use ddl::{IntrayLayout, TicklerLayout};
use rusqlite::types::Value as Sql;
use rusqlite::Connection;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use uuid::Uuid;

pub fn id(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("uuid")
}

/// A uuid as typed-uuid bound it: 16 bytes.
pub fn blob(u: &str) -> Sql {
    Sql::Blob(id(u).as_bytes().to_vec())
}

fn t(s: &str) -> Sql {
    Sql::Text(s.into())
}

fn bytes(b: &[u8]) -> Sql {
    Sql::Blob(b.to_vec())
}

/// A bcrypt hash as Crypto.BCrypt made it, stored as the bytes of its text; computed once
/// per (secret, cost, version) for all the tests of the binary (cost 10 is slow on purpose).
pub fn bcrypt_hash(secret: &str, cost: u32, version: bcrypt::Version) -> Sql {
    static CACHE: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);
    let key = format!("{secret}\0{cost}\0{version:?}");
    if let Some(h) = CACHE.lock().unwrap().get_or_insert_with(HashMap::new).get(&key) {
        return Sql::Blob(h.clone().into_bytes());
    }
    let h = bcrypt::hash_with_result(secret, cost)
        .expect("bcrypt")
        .format_for_version(version);
    CACHE
        .lock()
        .unwrap()
        .get_or_insert_with(HashMap::new)
        .insert(key, h.clone());
    Sql::Blob(h.into_bytes())
}

/// Inserts a row of the given columns that `table` has (a column a layout lacks is left
/// out; one it needs and is not given fails on its NOT NULL).
pub fn insert(db: &Connection, table: &str, values: &[(&str, Sql)]) {
    let have: Vec<String> = db
        .prepare("SELECT name FROM pragma_table_info(?1)")
        .and_then(|mut s| s.query_map([table], |r| r.get(0))?.collect())
        .expect("columns");
    let used: Vec<&(&str, Sql)> = values.iter().filter(|(c, _)| have.iter().any(|h| h == c)).collect();
    let columns = used
        .iter()
        .map(|(c, _)| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(",");
    let marks = (1..=used.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(",");
    let sql = format!("INSERT INTO \"{table}\"({columns}) VALUES ({marks})");
    db.execute(&sql, rusqlite::params_from_iter(used.iter().map(|(_, v)| v)))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

// ---------------------------------------------------------------------------------------
// Intray

pub const ALICE: &str = "0a11ce00-0000-4000-8000-000000000001";
pub const BOB: &str = "0b0b0000-0000-4000-8000-000000000001";
pub const NOTE: &str = "17e40000-0000-4000-8000-000000000001";
pub const BOB_NOTE: &str = "17e40000-0000-4000-8000-000000000002";
pub const PHOTO: &str = "17e40000-0000-4000-8000-000000000003";
pub const PICTURE: &str = "17e40000-0000-4000-8000-000000000004";
pub const BANK: &str = "17e40000-0000-4000-8000-000000000005";
pub const PHONE_KEY: &str = "6e400000-0000-4000-8000-000000000001";
pub const LAPTOP_KEY: &str = "6e400000-0000-4000-8000-000000000002";
pub const BOB_KEY: &str = "6e400000-0000-4000-8000-000000000003";
/// The keys' secrets, as Intray showed them (hex of 16 random bytes).
pub const PHONE_SECRET: &str = "00112233445566778899aabbccddeeff";
pub const LAPTOP_SECRET: &str = "0123456789abcdef0123456789abcdef";
pub const BOB_SECRET: &str = "fedcba9876543210fedcba9876543210";
pub const ALICE_PASSWORD: &str = "old password";
pub const BOB_PASSWORD: &str = "bobs secret";

/// The laptop key's permissions: every user permission of 2018-05-22 (d4241ce), and in
/// the newest layout those added since, and checkout (dropped on the way in).
fn laptop_permissions(layout: IntrayLayout) -> Vec<&'static str> {
    let mut p = vec![
        "PermitAdd",
        "PermitShow",
        "PermitSize",
        "PermitDelete",
        "PermitGetItem",
        "PermitGetItems",
        "PermitGetItemUUIDs",
        "PermitSync",
        "PermitGetAccountInfo",
        "PermitPostAddAccessKey",
        "PermitGetAccessKey",
        "PermitGetAccessKeys",
        "PermitDeleteAccessKey",
    ];
    if layout == IntrayLayout::Since2020 {
        p.insert(9, "PermitPostChangePassphrase");
        p.push("PermitGetPermissions");
    }
    p
}

const BOB_PERMISSIONS: &[&str] = &["PermitShow", "PermitSize", "PermitGetItem", "PermitGetItems"];

/// persistent's JSON of a `Set Permission`: each text tagged `s`, in the set's order.
fn persistent_set(names: &[&str]) -> Sql {
    let tagged: Vec<String> = names.iter().map(|n| format!("s{n}")).collect();
    Sql::Text(serde_json::to_string(&tagged).expect("json"))
}

/// One inbox item of a fixture: (uuid, owner, type as bound, API type, contents, created).
struct IntrayItem {
    id: &'static str,
    owner: &'static str,
    stored_type: Sql,
    api_type: &'static str,
    contents: &'static [u8],
    created: &'static str,
    api_created: &'static str,
}

fn intray_items(layout: IntrayLayout) -> Vec<IntrayItem> {
    // `type` was a `PersistByteString "text"` until the image items (2020-05-28), then
    // persistent's Text
    let mut items = vec![
        IntrayItem {
            id: NOTE,
            owner: ALICE,
            stored_type: bytes(b"text"),
            api_type: "text",
            contents: "Buy milk 🥛".as_bytes(),
            created: "2018-04-05T06:07:08.5",
            api_created: "2018-04-05T06:07:08.5Z",
        },
        IntrayItem {
            id: BOB_NOTE,
            owner: BOB,
            stored_type: bytes(b"text"),
            api_type: "text",
            contents: b"Bob's note",
            created: "2018-04-05T06:07:09",
            api_created: "2018-04-05T06:07:09Z",
        },
    ];
    if layout == IntrayLayout::Since2020 {
        items.extend([
            IntrayItem {
                id: PHOTO,
                owner: ALICE,
                stored_type: t("image/jpeg"),
                api_type: "image/jpeg",
                contents: &[0xff, 0xd8, 0xff, 0xe0, 0, 1],
                created: "2021-04-06T00:00:00",
                api_created: "2021-04-06T00:00:00Z",
            },
            IntrayItem {
                id: PICTURE,
                owner: ALICE,
                stored_type: t("image/png"),
                api_type: "image/png",
                contents: &[0x89, b'P', b'N', b'G', 0, 1],
                created: "2021-04-06T00:00:01.25",
                api_created: "2021-04-06T00:00:01.25Z",
            },
            IntrayItem {
                id: BANK,
                owner: ALICE,
                stored_type: t("text"),
                api_type: "text",
                contents: b"Call the bank\nabout the card",
                created: "2022-01-01T00:00:00.000001",
                api_created: "2022-01-01T00:00:00.000001Z",
            },
        ]);
    }
    items
}

/// Writes an Intray database of `layout` at `path`.
pub fn intray_file(layout: IntrayLayout, path: &Path) {
    use bcrypt::Version::{TwoB, TwoY};
    let db = Connection::open(path).expect("create the Intray database");
    db.execute_batch(&layout.ddl()).expect("schema");
    insert(
        &db,
        "user",
        &[
            ("identifier", blob(ALICE)),
            ("username", t("alice")),
            ("hashed_password", bcrypt_hash(ALICE_PASSWORD, 4, TwoY)),
            ("created_timestamp", t("2018-03-04T05:06:07.123456")),
            ("last_login", t("2021-06-01T10:00:00")),
        ],
    );
    insert(
        &db,
        "user",
        &[
            ("identifier", blob(BOB)),
            ("username", t("bob")),
            ("hashed_password", bcrypt_hash(BOB_PASSWORD, 10, TwoB)),
            ("created_timestamp", t("2018-03-05T00:00:00")),
            ("last_login", Sql::Null),
        ],
    );
    for item in intray_items(layout) {
        insert(
            &db,
            "intray_item",
            &[
                ("identifier", blob(item.id)),
                ("user_id", blob(item.owner)),
                ("type", item.stored_type.clone()),
                ("contents", bytes(item.contents)),
                ("created", t(item.created)),
                ("timestamp", t(item.created)),
                ("synced", t(item.created)),
            ],
        );
    }
    if !matches!(layout, IntrayLayout::April2018) {
        let mut laptop = laptop_permissions(layout);
        if layout == IntrayLayout::Since2020 {
            laptop.insert(15, "PermitInitiateCheckout");
        }
        for (key, owner, name, hash, created, permissions) in [
            (
                PHONE_KEY,
                ALICE,
                "phone",
                bcrypt_hash(PHONE_SECRET, 4, TwoB),
                "2018-05-22T07:08:09",
                vec!["PermitAdd"],
            ),
            (
                LAPTOP_KEY,
                ALICE,
                "laptop",
                bcrypt_hash(LAPTOP_SECRET, 4, TwoY),
                "2018-05-22T07:08:10.5",
                laptop,
            ),
            (
                BOB_KEY,
                BOB,
                "reader",
                bcrypt_hash(BOB_SECRET, 10, TwoY),
                "2018-05-23T00:00:00",
                BOB_PERMISSIONS.to_vec(),
            ),
        ] {
            insert(
                &db,
                "access_key",
                &[
                    ("identifier", blob(key)),
                    ("user", blob(owner)),
                    ("name", t(name)),
                    ("hashed_key", hash),
                    ("created_timestamp", t(created)),
                    ("permissions", persistent_set(&permissions)),
                ],
            );
        }
    }
}

/// What `GET /inbox/items` shows `owner` after moving in (items of the file in order).
pub fn intray_items_json(layout: IntrayLayout, owner: &str) -> Value {
    Value::Array(
        intray_items(layout)
            .into_iter()
            .filter(|i| i.owner == owner)
            .map(|i| {
                json!({"id": i.id, "created": i.api_created,
                       "contents": {"type": i.api_type, "data": super::common::b64(i.contents)}})
            })
            .collect(),
    )
}

/// What `GET /access-key` shows `owner` (empty before access keys existed).
pub fn intray_keys_json(layout: IntrayLayout, owner: &str) -> Value {
    if layout == IntrayLayout::April2018 {
        return json!([]);
    }
    let name = |n: &str| match layout {
        IntrayLayout::May2018NoKeyName => "access key".to_owned(),
        _ => n.to_owned(),
    };
    match owner {
        ALICE => json!([
            {"uuid": PHONE_KEY, "name": name("phone"), "created": "2018-05-22T07:08:09Z",
             "permissions": ["PermitAdd"]},
            {"uuid": LAPTOP_KEY, "name": name("laptop"), "created": "2018-05-22T07:08:10.5Z",
             "permissions": laptop_permissions(layout)},
        ]),
        _ => json!([
            {"uuid": BOB_KEY, "name": name("reader"), "created": "2018-05-23T00:00:00Z",
             "permissions": BOB_PERMISSIONS},
        ]),
    }
}

// ---------------------------------------------------------------------------------------
// Tickler

pub const CAROL: &str = "0ca20000-0000-4000-8000-000000000001";
pub const DAVE: &str = "0da40000-0000-4000-8000-000000000001";
pub const CAROL_PASSWORD: &str = "tickle me";
pub const DAVE_PASSWORD: &str = "dave's words";
pub const RENT: &str = "7e470000-0000-4000-8000-000000000001";
pub const PLANTS: &str = "7e470000-0000-4000-8000-000000000002";
pub const STRETCH: &str = "7e470000-0000-4000-8000-000000000003";
pub const REVIEW: &str = "7e470000-0000-4000-8000-000000000004";
pub const DENTIST: &str = "7e470000-0000-4000-8000-000000000005";
pub const DAVES: &str = "7e470000-0000-4000-8000-000000000006";
pub const CALL: &str = "7e470000-0000-4000-8000-0000000000a1";
pub const PASSPORT: &str = "7e470000-0000-4000-8000-0000000000a2";
pub const PENDING: &str = "7e470000-0000-4000-8000-0000000000a3";
pub const INBOX_TRIGGER: &str = "7e166e00-0000-4000-8000-000000000001";
pub const EMAIL_TRIGGER: &str = "7e166e00-0000-4000-8000-000000000002";
pub const UNVERIFIED: &str = "7e166e00-0000-4000-8000-000000000003";
pub const ADDED_UUID: &str = "add00000-0000-4000-8000-000000000001";
pub const EMAIL_ERROR: &str = "the e-mail could not be sent";
pub const INBOX_ERROR: &str = "401 Unauthorized";

/// One item of a Tickler fixture.
struct Tickle {
    id: &'static str,
    owner: &'static str,
    content: &'static str,
    day: &'static str,
    time: Option<&'static str>,
    /// As the originals wrote it before autodocodec (2022-05-03: every field, `null`s too)
    /// and since (missing optional fields).
    recurrence: Option<(&'static str, &'static str)>,
    /// As Pigeonhole shows it.
    api_recurrence: Value,
    created: &'static str,
    server_time: i64,
    /// A triggered item's triggering time.
    triggered: Option<&'static str>,
}

fn tickles() -> Vec<Tickle> {
    let item = |id, owner, content, day, time, recurrence, api_recurrence, server_time| Tickle {
        id,
        owner,
        content,
        day,
        time,
        recurrence,
        api_recurrence,
        created: "2018-06-15T01:02:03.5",
        server_time,
        triggered: None,
    };
    vec![
        item(
            RENT,
            CAROL,
            "Pay rent",
            "2099-01-01",
            Some("08:30:00"),
            Some((
                r#"{"every-x-months":{"months":1,"day":1,"time-of-day":"08:30:00"}}"#,
                r#"{"every-x-months":{"months":1,"day":1,"time-of-day":"08:30:00"}}"#,
            )),
            json!({"every-x-months": {"months": 1, "day": 1, "time-of-day": "08:30:00"}}),
            3,
        ),
        item(
            PLANTS,
            CAROL,
            "Water the plants",
            "2099-02-03",
            None,
            Some((
                r#"{"every-x-days":{"days":3,"time-of-day":null}}"#,
                r#"{"every-x-days":{"days":3}}"#,
            )),
            json!({"every-x-days": {"days": 3, "time-of-day": null}}),
            0,
        ),
        item(
            STRETCH,
            CAROL,
            "Stretch",
            "2099-03-04",
            Some("07:00:00"),
            Some((
                r#"{"every-x-days":{"time-of-day":"07:00:00","days":1}}"#,
                r#"{"every-x-days":{"days":1,"time-of-day":"07:00:00"}}"#,
            )),
            json!({"every-x-days": {"days": 1, "time-of-day": "07:00:00"}}),
            1,
        ),
        item(
            REVIEW,
            CAROL,
            "Review the year",
            "2099-04-05",
            None,
            Some((
                r#"{"every-x-months":{"months":12,"day":null,"time-of-day":null}}"#,
                r#"{"every-x-months":{"months":12}}"#,
            )),
            json!({"every-x-months": {"months": 12, "day": null, "time-of-day": null}}),
            0,
        ),
        item(
            DENTIST,
            CAROL,
            "Dentist 🦷",
            "2099-05-06",
            Some("18:45:00"),
            None,
            Value::Null,
            2,
        ),
        item(DAVES, DAVE, "Dave's reminder", "2099-06-07", None, None, Value::Null, 0),
        Tickle {
            id: CALL,
            owner: CAROL,
            content: "Call mum",
            day: "2021-01-10",
            time: Some("12:00:00"),
            recurrence: None,
            api_recurrence: Value::Null,
            created: "2021-01-01T00:00:00",
            server_time: 0,
            triggered: Some("2021-01-10T11:00:00.5"),
        },
        Tickle {
            id: PASSPORT,
            owner: CAROL,
            content: "Renew the passport",
            day: "2021-02-01",
            time: None,
            recurrence: Some((
                r#"{"every-x-days":{"days":7,"time-of-day":"09:00:00"}}"#,
                r#"{"every-x-days":{"days":7,"time-of-day":"09:00:00"}}"#,
            )),
            api_recurrence: json!({"every-x-days": {"days": 7, "time-of-day": "09:00:00"}}),
            created: "2021-01-02T00:00:00",
            server_time: 0,
            triggered: Some("2021-02-01T00:00:01"),
        },
        Tickle {
            id: PENDING,
            owner: CAROL,
            content: "Still on its way",
            day: "2021-03-01",
            time: Some("08:00:00"),
            recurrence: None,
            api_recurrence: Value::Null,
            created: "2021-01-03T00:00:00",
            server_time: 0,
            triggered: Some("2021-03-01T08:00:01"),
        },
    ]
}

/// Writes a Tickler database of `layout` at `path`.
pub fn tickler_file(layout: TicklerLayout, path: &Path) {
    use bcrypt::Version::{TwoB, TwoY};
    use TicklerLayout::*;
    let db = Connection::open(path).expect("create the Tickler database");
    db.execute_batch(&layout.ddl()).expect("schema");
    for (user, name, hash, created) in [
        (
            CAROL,
            "carol",
            bcrypt_hash(CAROL_PASSWORD, 4, TwoY),
            "2018-06-11T18:00:00.25",
        ),
        (
            DAVE,
            "dave",
            bcrypt_hash(DAVE_PASSWORD, 10, TwoB),
            "2018-06-12T00:00:00",
        ),
    ] {
        insert(
            &db,
            "user",
            &[
                ("identifier", blob(user)),
                ("username", t(name)),
                ("hashed_password", hash),
                ("created", t(created)),
                ("last_login", Sql::Null),
            ],
        );
    }
    insert(
        &db,
        "user_settings",
        &[
            ("user_id", blob(CAROL)),
            ("time_zone", t(r#"{"offset":60,"summer":false,"name":"Europe/Zurich"}"#)),
        ],
    );
    let typed = matches!(layout, June2018 | Y2018 | Y2020);
    let new_json = matches!(layout, April2022 | May2022Both | Since2022);
    for tickle in tickles() {
        let table = match tickle.triggered {
            Some(_) => "triggered_item",
            None => "tickler_item",
        };
        // `contents ByteString` with its `type` until 2022-04-16, then `Text`
        let contents = match typed {
            true => bytes(tickle.content.as_bytes()),
            false => t(tickle.content),
        };
        let instant = format!("{}T{}", tickle.day, tickle.time.unwrap_or("00:00:00"));
        let recurrence = tickle
            .recurrence
            .map(|(old, new)| t(if new_json { new } else { old }))
            .unwrap_or(Sql::Null);
        insert(
            &db,
            table,
            &[
                ("identifier", blob(tickle.id)),
                ("user_id", blob(tickle.owner)),
                ("type", bytes(b"text")),
                ("contents", contents),
                ("created", t(tickle.created)),
                ("synced", t(tickle.created)),
                ("server_time", Sql::Integer(tickle.server_time)),
                ("scheduled", t(&instant)),
                ("scheduled_day", t(tickle.day)),
                ("scheduled_time", tickle.time.map(t).unwrap_or(Sql::Null)),
                ("recurrence", recurrence),
                ("triggered", tickle.triggered.map(t).unwrap_or(Sql::Null)),
            ],
        );
    }
    // triggers, and whose they are: `user_trigger` until 2022-05-07, their own `user` since
    // (on 2022-05-07 both, the column nullable)
    let triggers: [(&str, &[u8]); 3] = [
        (INBOX_TRIGGER, b"intray"),
        (EMAIL_TRIGGER, b"email"),
        (UNVERIFIED, b"email"),
    ];
    let user_column = |trigger: &str| match layout {
        Since2022 => blob(CAROL),
        May2022Both if trigger == INBOX_TRIGGER => blob(CAROL),
        _ => Sql::Null,
    };
    if layout != Since2022 {
        for (trigger, kind) in triggers {
            if layout == May2022Both && trigger == INBOX_TRIGGER {
                continue;
            }
            insert(
                &db,
                "user_trigger",
                &[
                    ("user_id", blob(CAROL)),
                    ("trigger_type", bytes(kind)),
                    ("trigger_id", blob(trigger)),
                ],
            );
        }
    }
    insert(
        &db,
        "intray_trigger",
        &[
            ("user", user_column(INBOX_TRIGGER)),
            ("identifier", blob(INBOX_TRIGGER)),
            ("url", t("https://intray.example.org")),
            ("username", t("carol")),
            ("access_key", bytes(&[0xab; 16])),
            ("added", t("2021-01-05T00:00:00")),
        ],
    );
    for (trigger, address, key, verified, added) in [
        (
            EMAIL_TRIGGER,
            "carol@example.org",
            [0x01_u8; 16],
            1,
            "2021-01-06T00:00:00",
        ),
        (
            UNVERIFIED,
            "carol.work@example.org",
            [0x02_u8; 16],
            0,
            "2021-01-07T00:00:00",
        ),
    ] {
        insert(
            &db,
            "email_trigger",
            &[
                ("user", user_column(trigger)),
                ("identifier", blob(trigger)),
                ("address", t(address)),
                ("verification_key", bytes(&key)),
                ("verified", Sql::Integer(verified)),
                ("added", t(added)),
            ],
        );
    }
    // the e-mails: 1 sent, 2 not yet, 3 failed
    for (status, error) in [
        (&b"sent"[..], None),
        (&b"unsent"[..], None),
        (&b"error"[..], Some(EMAIL_ERROR)),
    ] {
        insert(
            &db,
            "email",
            &[
                ("to", t("carol@example.org")),
                ("from", t("tickler@example.org")),
                ("from_name", t("Tickler")),
                ("subject", t("A tickle")),
                ("text_content", t("A tickle")),
                ("html_content", t("<p>A tickle</p>")),
                ("status", bytes(status)),
                ("send_error", error.map(t).unwrap_or(Sql::Null)),
                ("ses_id", Sql::Null),
                ("scheduled", t("2021-01-10T11:00:01")),
                ("send_attempt", Sql::Null),
            ],
        );
    }
    // `intrayItemUUID Text` until 2018-06-12 (d1794c9), then the item's uuid
    let added = match layout {
        June2018 => t(ADDED_UUID),
        _ => blob(ADDED_UUID),
    };
    for (item, uuid, error) in [
        (CALL, added, Sql::Null),
        (PASSPORT, Sql::Null, t(INBOX_ERROR)),
        (PENDING, Sql::Null, Sql::Null),
    ] {
        insert(
            &db,
            "triggered_intray_item",
            &[
                ("item", blob(item)),
                ("trigger", blob(INBOX_TRIGGER)),
                ("intray_item_u_u_i_d", uuid),
                ("error", error),
            ],
        );
    }
    // a failed e-mail: its own `error` since 2018-06-28 (41d9c3f), before that only the
    // e-mail's status
    let (failed_email, failed_error) = match layout {
        June2018 => (Sql::Integer(3), Sql::Null),
        _ => (Sql::Null, t(EMAIL_ERROR)),
    };
    for (item, email, error) in [
        (CALL, Sql::Integer(1), Sql::Null),
        (PASSPORT, failed_email, failed_error),
        (PENDING, Sql::Integer(2), Sql::Null),
    ] {
        insert(
            &db,
            "triggered_email",
            &[
                ("item", blob(item)),
                ("trigger", blob(EMAIL_TRIGGER)),
                ("email", email),
                ("error", error),
            ],
        );
    }
}

/// What `GET /scheduler/items` shows `owner` after moving in, by uuid.
pub fn tickler_items_json(layout: TicklerLayout, owner: &str) -> Vec<Value> {
    let instant = layout == TicklerLayout::June2018;
    tickles()
        .into_iter()
        .filter(|t| t.owner == owner)
        .map(|t| {
            // June 2018: one instant, shown as its UTC day and time, and no recurrence
            let (time, recurrence) = match instant {
                true => (Some(t.time.unwrap_or("00:00:00")), Value::Null),
                false => (t.time, t.api_recurrence.clone()),
            };
            let triggered = match t.id {
                CALL => json!({"triggeredInfoTriggered": "2021-01-10T11:00:00.5Z",
                    "triggeredInfoTriggerTriggerAttempts": [
                        {"tag": "InboxTriggerAttempt", "contents": [INBOX_TRIGGER, {"tag": "InboxAdditionSuccess", "contents": ADDED_UUID}]},
                        {"tag": "EmailTriggerAttempt", "contents": [EMAIL_TRIGGER, {"tag": "EmailResultSent"}]},
                    ]}),
                PASSPORT => json!({"triggeredInfoTriggered": "2021-02-01T00:00:01Z",
                    "triggeredInfoTriggerTriggerAttempts": [
                        {"tag": "InboxTriggerAttempt", "contents": [INBOX_TRIGGER, {"tag": "InboxAdditionFailure", "contents": INBOX_ERROR}]},
                        {"tag": "EmailTriggerAttempt", "contents": [EMAIL_TRIGGER, {"tag": "EmailResultError", "contents": EMAIL_ERROR}]},
                    ]}),
                PENDING => json!({"triggeredInfoTriggered": "2021-03-01T08:00:01Z",
                    "triggeredInfoTriggerTriggerAttempts": []}),
                _ => Value::Null,
            };
            json!({"id": t.id, "created": format!("{}Z", t.created), "triggered": triggered,
                   "contents": {"content": t.content, "scheduled-day": t.day, "scheduled-time": time,
                                "recurrence": recurrence}})
        })
        .collect()
}

/// What `GET /trigger` shows carol.
pub fn tickler_triggers_json() -> Value {
    json!([
        {"uuid": INBOX_TRIGGER, "info": {"typedTriggerInfoType": "inbox",
            "typedTriggerInfoValue": {"inboxTriggerInfoUrl": "https://intray.example.org"}}},
        {"uuid": EMAIL_TRIGGER, "info": {"typedTriggerInfoType": "email",
            "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "carol@example.org", "emailTriggerInfoVerified": true}}},
        {"uuid": UNVERIFIED, "info": {"typedTriggerInfoType": "email",
            "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "carol.work@example.org", "emailTriggerInfoVerified": false}}},
    ])
}
