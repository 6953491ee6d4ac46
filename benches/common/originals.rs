//! Large SQLite databases of the original Intray and Tickler servers (the layouts since 2020
//! and since May 2022: their golden DDL, tests/originals/ddl.rs), for `import-intray` and
//! `import-tickler` at scale: tests/moving_in/import_memory.rs and `cargo bench --bench import --
//! --originals` include it. The rows are made by SQLite itself (a recursive `WITH` in one
//! transaction), so two million rows take seconds: the values are as persistent-sqlite
//! wrote them (uuids as 16-byte BLOBs, times and days as text).

#![allow(dead_code)]

use rusqlite::{params, Connection};
use std::path::Path;

/// The owner of every row: one account, `alice`.
pub const ALICE: [u8; 16] = *b"alice-account-id";

/// A bcrypt hash (cost 4) as Crypto.BCrypt made it: the import checks its form only.
const HASH: &[u8] = b"$2y$04$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0";

/// The uuid of row `x` of a table, as a 16-byte BLOB: `prefix` (2 characters) and `x` in
/// 14 digits.
fn uuid_sql(prefix: &str) -> String {
    format!("CAST(printf('{prefix}%014d', x) AS BLOB)")
}

fn numbers(rows: u64) -> String {
    format!("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {rows}) ")
}

/// An Intray database (`ddl`: the layout since 2020) with the account alice and `items`
/// text items of 200 bytes each.
pub fn intray_file(path: &Path, ddl: &str, items: u64) {
    let mut db = Connection::open(path).expect("create the Intray file");
    db.execute_batch(ddl).expect("schema");
    let tx = db.transaction().expect("transaction");
    tx.execute(
        "INSERT INTO user(identifier, username, hashed_password, created_timestamp, last_login) \
         VALUES (?1, 'alice', ?2, '2020-03-04T05:06:07', NULL)",
        params![ALICE.to_vec(), HASH.to_vec()],
    )
    .expect("user");
    if items > 0 {
        tx.execute(
            &format!(
                "{}INSERT INTO intray_item(identifier, user_id, type, contents, created) \
                 SELECT {}, ?1, 'text', CAST(printf('%0200d', x) AS BLOB), \
                 printf('2021-01-02T03:04:05.%06d', x % 1000000) FROM n",
                numbers(items),
                uuid_sql("it")
            ),
            params![ALICE.to_vec()],
        )
        .expect("items");
    }
    tx.commit().expect("commit");
}

/// How the rows of a Tickler file of [`tickler_file`] divide: scheduled items, triggered
/// items, and outcomes of their deliveries into the inbox (one per triggered item).
pub fn tickler_rows(rows: u64) -> (u64, u64, u64) {
    let triggered = rows / 10;
    (rows - 2 * triggered, triggered, triggered)
}

/// A Tickler database (`ddl`: the layout since May 2022) with the account alice (in
/// Europe/Zurich), one inbox trigger, and `rows` rows of items and outcomes divided as
/// [`tickler_rows`] says: scheduled items of 100 bytes (every tenth recurring), triggered
/// items each delivered by the trigger.
pub fn tickler_file(path: &Path, ddl: &str, rows: u64) {
    let (scheduled, triggered, outcomes) = tickler_rows(rows);
    let mut db = Connection::open(path).expect("create the Tickler file");
    db.execute_batch(ddl).expect("schema");
    let tx = db.transaction().expect("transaction");
    let alice = ALICE.to_vec();
    tx.execute(
        "INSERT INTO user(identifier, username, hashed_password, created, last_login) \
         VALUES (?1, 'alice', ?2, '2020-03-04T05:06:07', NULL)",
        params![alice, HASH.to_vec()],
    )
    .expect("user");
    tx.execute(
        "INSERT INTO user_settings(user_id, time_zone) \
         VALUES (?1, '{\"offset\":60,\"summer\":false,\"name\":\"Europe/Zurich\"}')",
        params![alice],
    )
    .expect("settings");
    let trigger = b"inbox-trigger-01".to_vec();
    tx.execute(
        "INSERT INTO intray_trigger(user, identifier, url, username, access_key, added) \
         VALUES (?1, ?2, 'https://intray.example.org', 'alice', ?3, '2021-01-01T00:00:00')",
        params![alice, trigger, vec![0xab_u8; 16]],
    )
    .expect("trigger");
    if scheduled > 0 {
        tx.execute(
            &format!(
                "{}INSERT INTO tickler_item(identifier, user_id, contents, created, scheduled_day, scheduled_time, \
                 recurrence) \
                 SELECT {}, ?1, printf('%0100d', x), '2021-02-03T04:05:06', \
                 printf('20%02d-%02d-%02d', 30 + x % 10, 1 + x % 12, 1 + x % 28), \
                 CASE WHEN x % 2 = 0 THEN '08:30:00' END, \
                 CASE WHEN x % 10 = 0 THEN '{{\"every-x-days\":{{\"days\":7}}}}' END FROM n",
                numbers(scheduled),
                uuid_sql("sc")
            ),
            params![alice],
        )
        .expect("scheduled items");
    }
    if triggered > 0 {
        tx.execute(
            &format!(
                "{}INSERT INTO triggered_item(identifier, user_id, contents, created, scheduled_day, scheduled_time, \
                 recurrence, triggered) \
                 SELECT {}, ?1, printf('%0100d', x), '2021-02-03T04:05:06', '2021-03-04', '09:00:00', NULL, \
                 '2021-03-04T08:00:00' FROM n",
                numbers(triggered),
                uuid_sql("tr")
            ),
            params![alice],
        )
        .expect("triggered items");
    }
    if outcomes > 0 {
        // in the reverse order of their items: the import matches them by uuid
        tx.execute(
            &format!(
                "{}INSERT INTO triggered_intray_item(item, trigger, intray_item_u_u_i_d, error) \
                 SELECT {}, ?1, {}, NULL FROM n ORDER BY x DESC",
                numbers(outcomes),
                uuid_sql("tr"),
                uuid_sql("in")
            ),
            params![trigger],
        )
        .expect("outcomes");
    }
    tx.commit().expect("commit");
}
