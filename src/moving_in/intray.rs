//! An Intray server's database → inbox accounts: `user`, `intray_item` and, when the file
//! has it, `access_key` (the payment tables `customer`, `subscription` and `stripe_event`
//! are not read). Every layout that `intray-data/src/Intray/Data/DB.hs` ever had reads
//! (docs/moving-in.md lists them): the layout is told by the tables and columns present.

use super::error::FileError;
use super::sqlite::{OldDatabase, Row};
use super::values::{bytes, opt_time, text, time, uuid};
use super::Notes;
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::permissions::{Permission, Permissions, Table};
use crate::domain::wire;
use crate::store::moving_in::InboxMoving;
use std::collections::HashMap;
use uuid::Uuid;

const USER: &[&str] = &[
    "identifier",
    "username",
    "hashed_password",
    "created_timestamp",
    "last_login",
];
const ITEM: &[&str] = &["identifier", "user_id", "type", "contents"];
const ACCESS_KEY: &[&str] = &["identifier", "user", "hashed_key", "created_timestamp", "permissions"];

/// The permissions the originals had and Pigeonhole has not (checkout and the admin's
/// subscription handling): dropped, and named in the report.
const ORIGINALS_ONLY: &[&str] = &[
    "PermitInitiateCheckout",
    "PermitAdminGetAccount",
    "PermitAdminPutUserSubscription",
    "PermitAdminPutAccountSubscription",
];

/// Which of the layouts an Intray file has (docs/moving-in.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `intray_item.created` (since 2018-06-07), else `timestamp`.
    pub item_created: &'static str,
    /// `intray_item.synced` (2018-06-07 to 2020-02-10; not read).
    pub synced: bool,
    /// The `access_key` table (since 2018-05-22), and whether it has `name` (since
    /// 2018-05-23).
    pub keys: Option<bool>,
}

impl Layout {
    pub fn detect(db: &OldDatabase) -> Result<Layout, FileError> {
        db.require("user", USER)?;
        db.require("intray_item", ITEM)?;
        // `created` since 2018-06-07, `timestamp` before
        let item_created = match (
            db.has_column("intray_item", "created"),
            db.has_column("intray_item", "timestamp"),
        ) {
            (true, _) => "created",
            (false, true) => "timestamp",
            (false, false) => return Err(db.missing("intray_item", "created")),
        };
        let keys = match db.has_table("access_key") {
            true => Some(db.has_column("access_key", "name")),
            false => None,
        };
        Ok(Layout {
            item_created,
            synced: db.has_column("intray_item", "synced"),
            keys,
        })
    }

    /// The columns of `intray_item` an import reads.
    fn item_columns(self) -> Vec<&'static str> {
        ITEM.iter().copied().chain([self.item_created]).collect()
    }

    /// The layout's name and the originals' commits that wrote it.
    pub fn describe(self) -> &'static str {
        match (self.item_created, self.synced, self.keys) {
            ("created", false, Some(true)) => "Intray since 2020-02-10 (c9299fc; golden migration.sql of 8ce2c5d)",
            ("created", true, Some(true)) => "Intray 2018-06-07 to 2020-02-10 (b6da725..c9299fc)",
            ("timestamp", false, Some(true)) => "Intray 2018-05-23 to 2018-06-07 (aee0532..b6da725)",
            ("timestamp", false, Some(false)) => "Intray 2018-05-22 (d4241ce..aee0532)",
            ("timestamp", false, None) => "Intray 2018-04-18 to 2018-05-22 (9c97617..d4241ce)",
            _ => "Intray, a mixture of its layouts (read by the columns present)",
        }
    }
}

/// What the first pass keeps of a file: its accounts with their access keys (few), and
/// for each how many items the file has (the items themselves are read again to be
/// written).
#[derive(Debug)]
pub struct Checked {
    pub layout: Layout,
    pub accounts: Vec<InboxMoving>,
    pub items: Vec<u64>,
}

/// The first pass: reads and decodes every row of the file (a bad value or a missing column
/// is an error naming it), keeping only the accounts, their keys and item counts; an item
/// uuid that two rows have is an error too (SQLite finds it: see [`OldDatabase::repeated`]).
/// Nothing is written here.
pub fn check(db: &OldDatabase, notes: &mut Notes) -> Result<Checked, FileError> {
    let layout = Layout::detect(db)?;
    notes.layout = layout.describe().to_owned();
    let mut accounts = Vec::new();
    let mut index = HashMap::new();
    db.each_row("user", USER, &[], |n, row| {
        let account = user(&row).map_err(|e| FileError::row("user", n, e))?;
        index.insert(account.id, accounts.len());
        accounts.push(InboxMoving {
            account,
            access_keys: Vec::new(),
        });
        Ok::<(), FileError>(())
    })?;
    let mut items = vec![0u64; accounts.len()];
    db.each_row("intray_item", &layout.item_columns(), &[], |n, row| {
        let (owner, _) = item(&row, layout.item_created).map_err(|e| FileError::row("intray_item", n, e))?;
        match index.get(&owner) {
            Some(&i) => items[i] += 1,
            None => notes.orphans += 1,
        }
        Ok::<(), FileError>(())
    })?;
    if let Some(id) = db.repeated("intray_item", "identifier")? {
        let id = uuid(&id).map(|u| u.to_string()).unwrap_or_else(|_| format!("{id:?}"));
        return Err(FileError::Other(format!(
            "intray_item: the item uuid {id} is in the file twice"
        )));
    }
    if layout.keys.is_some() {
        db.each_row("access_key", ACCESS_KEY, &["name"], |n, row| {
            let seq = n as u64 - 1;
            let (owner, key, dropped) = access_key(&row, seq).map_err(|e| FileError::row("access_key", n, e))?;
            notes.unknown_permissions.extend(dropped);
            match index.get(&owner) {
                Some(&i) => accounts[i].access_keys.push(key),
                None => notes.orphans += 1,
            }
            Ok::<(), FileError>(())
        })?;
    }
    for a in &mut accounts {
        a.access_keys.sort_by_key(|k| (k.created, k.seq));
    }
    notes.unknown_permissions.sort();
    notes.unknown_permissions.dedup();
    Ok(Checked {
        layout,
        accounts,
        items,
    })
}

/// The owner and uuid of each item of the file, one row at a time (reads no contents).
pub fn each_item_id<E: From<FileError>>(
    db: &OldDatabase,
    mut each: impl FnMut(Uuid, Uuid) -> Result<(), E>,
) -> Result<(), E> {
    db.each_row("intray_item", &["identifier", "user_id"], &[], |n, row| {
        let at = |e: String| E::from(FileError::row("intray_item", n, e));
        let id = uuid(row.get("identifier")).map_err(at)?;
        let owner = uuid(row.get("user_id")).map_err(at)?;
        each(owner, id)
    })
}

/// Each item of the file with its owner, one row at a time (the second pass).
pub fn each_item<E: From<FileError>>(
    db: &OldDatabase,
    layout: Layout,
    mut each: impl FnMut(Uuid, InboxItem) -> Result<(), E>,
) -> Result<(), E> {
    db.each_row("intray_item", &layout.item_columns(), &[], |n, row| {
        let (owner, item) =
            item(&row, layout.item_created).map_err(|e| E::from(FileError::row("intray_item", n, e)))?;
        each(owner, item)
    })
}

/// A bcrypt hash as the originals kept it (`Crypto.BCrypt`, `$2y$`/`$2a$`/`$2b$`).
pub fn bcrypt_hash(v: &rusqlite::types::Value) -> Result<String, String> {
    let h = text(v)?;
    let ok = h.len() == 60 && ["$2y$", "$2a$", "$2b$", "$2x$"].iter().any(|p| h.starts_with(p));
    match ok {
        true => Ok(h),
        false => Err("the password hash is not bcrypt".into()),
    }
}

/// The account of a `user` row (of Intray or Tickler: the same shape but for the name of
/// the creation time's column).
pub fn account_of(row: &Row, created_column: &str) -> Result<Account, String> {
    let username = text(row.get("username"))?;
    if !wire::is_valid_username(&username) {
        let shown: String = username.chars().take(64).collect();
        return Err(format!("the username {shown:?} is not valid here"));
    }
    // the limit of a new account (issue 29 point 3): the originals had none
    let chars = username.chars().count();
    if chars > crate::domain::account::MAX_NEW_USERNAME_CHARS {
        let shown: String = username.chars().take(20).collect();
        return Err(format!(
            "the username {shown:?}… has {chars} characters; at most {} are accepted here (rename the account \
             in the file first)",
            crate::domain::account::MAX_NEW_USERNAME_CHARS
        ));
    }
    Ok(Account {
        id: uuid(row.get("identifier"))?,
        username,
        password_hash: PasswordHash::LegacyBcrypt(bcrypt_hash(row.get("hashed_password"))?),
        created: time(row.get(created_column))?,
        last_login: opt_time(row.get("last_login"))?,
        epoch: 0,
    })
}

pub fn user(row: &Row) -> Result<Account, String> {
    account_of(row, "created_timestamp")
}

/// `text`, `image/jpeg` or `image/png`.
pub fn item_type(v: &rusqlite::types::Value) -> Result<ItemType, String> {
    match text(v)?.as_str() {
        "text" => Ok(ItemType::Text),
        "image/jpeg" => Ok(ItemType::Jpeg),
        "image/png" => Ok(ItemType::Png),
        other => Err(format!("unknown item type {other:?}")),
    }
}

/// (owner, item) of an `intray_item` row; its creation time is in `created` (or, before
/// 2018-06-07, `timestamp`).
pub fn item(row: &Row, created: &str) -> Result<(Uuid, InboxItem), String> {
    let item = InboxItem {
        id: uuid(row.get("identifier"))?,
        kind: item_type(row.get("type"))?,
        data: bytes(row.get("contents"))?,
        created: time(row.get(created))?,
    };
    Ok((uuid(row.get("user_id"))?, item))
}

/// The permissions of an access key as persistent kept a `Set Permission` (or, on
/// 2018-05-22, a `[Permission]`): the JSON list of its values, each a text tagged `s`
/// (`["sPermitAdd","sPermitShow"]`). Answers the set and the names the originals had that
/// Pigeonhole has not (dropped); any other name is an error naming it.
pub fn permissions(v: &rusqlite::types::Value) -> Result<(Permissions, Vec<String>), String> {
    let list = text(v)?;
    let names: Vec<serde_json::Value> =
        serde_json::from_str(&list).map_err(|_| format!("the permissions are not a JSON list: {list:?}"))?;
    let mut set = Permissions::default();
    let mut dropped = Vec::new();
    for name in &names {
        let tagged = name
            .as_str()
            .ok_or_else(|| format!("a permission is not a text: {name}"))?;
        let name = tagged
            .strip_prefix('s')
            .ok_or_else(|| format!("the permission {tagged:?} is not a text as persistent writes it (\"s…\")"))?;
        match Permission::parse(name).filter(|p| Table::Inbox.all().contains(p)) {
            Some(p) => set.insert(p),
            None if ORIGINALS_ONLY.contains(&name) => dropped.push(name.to_owned()),
            None => return Err(format!("unknown permission {name:?}")),
        }
    }
    Ok((set, dropped))
}

/// (owner, key, permission names of the originals that Pigeonhole has not) of an
/// `access_key` row. A key of 2018-05-22 had no name: it gets "access key".
pub fn access_key(row: &Row, seq: u64) -> Result<(Uuid, AccessKey, Vec<String>), String> {
    let (permissions, dropped) = permissions(row.get("permissions"))?;
    let name = match row.has("name") {
        true => text(row.get("name"))?,
        false => "access key".to_owned(),
    };
    let key = AccessKey {
        id: uuid(row.get("identifier"))?,
        name,
        created: time(row.get("created_timestamp"))?,
        seq,
        permissions,
        secret: KeySecret::LegacyBcrypt(bcrypt_hash(row.get("hashed_key"))?),
    };
    Ok((uuid(row.get("user"))?, key, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value;

    fn row(pairs: &[(&str, Value)]) -> Row {
        Row::of(pairs)
    }

    fn blob_id(b: u8) -> Value {
        Value::Blob(vec![b; 16])
    }

    const HASH: &str = "$2y$04$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0";

    #[test]
    fn a_user_row_is_an_account_with_its_bcrypt_hash() {
        let r = row(&[
            ("identifier", blob_id(1)),
            ("username", Value::Text("alice".into())),
            ("hashed_password", Value::Blob(HASH.as_bytes().to_vec())),
            ("created_timestamp", Value::Text("2021-03-04T05:06:07.5".into())),
            ("last_login", Value::Null),
        ]);
        let a = user(&r).unwrap();
        assert_eq!(a.id, Uuid::from_bytes([1; 16]));
        assert_eq!(a.username, "alice");
        assert_eq!(a.password_hash, PasswordHash::LegacyBcrypt(HASH.into()));
        assert_eq!(a.created.to_string(), "2021-03-04T05:06:07.5Z");
        assert_eq!(a.last_login, None);
        let mut bad = r.clone();
        bad.0[2].1 = Some(Value::Text("$pbkdf2$…".into()));
        assert!(user(&bad).unwrap_err().contains("not bcrypt"));
        let mut bad = r.clone();
        bad.0[1].1 = Some(Value::Text("a b".into()));
        assert!(user(&bad).is_err());
        // a new account's limit (issue 29 point 3): 64 characters, the rest refused by name
        let mut long = r.clone();
        long.0[1].1 = Some(Value::Text("a".repeat(64)));
        assert!(user(&long).is_ok());
        let mut longer = r;
        longer.0[1].1 = Some(Value::Text("a".repeat(1_000_000)));
        let err = user(&longer).unwrap_err();
        assert!(
            err.contains("has 1000000 characters; at most 64") && err.len() < 200,
            "{err}"
        );
    }

    #[test]
    fn item_rows_keep_type_contents_and_created() {
        let r = row(&[
            ("identifier", blob_id(2)),
            ("user_id", blob_id(1)),
            ("type", Value::Blob(b"image/png".to_vec())),
            ("contents", Value::Blob(vec![0x89, b'P'])),
            ("created", Value::Text("2021-01-02 03:04:05 UTC".into())),
        ]);
        let (owner, it) = item(&r, "created").unwrap();
        assert_eq!(owner, Uuid::from_bytes([1; 16]));
        assert_eq!(
            (it.id, it.kind, it.data.as_slice()),
            (Uuid::from_bytes([2; 16]), ItemType::Png, &[0x89, b'P'][..])
        );
        assert_eq!(it.created.to_string(), "2021-01-02T03:04:05Z");
        let mut bad = r;
        bad.0[2].1 = Some(Value::Blob(b"video/mp4".to_vec()));
        assert!(item(&bad, "created").unwrap_err().contains("video/mp4"));
    }

    #[test]
    fn access_key_rows_keep_their_permissions_and_hash() {
        let r = row(&[
            ("identifier", blob_id(3)),
            ("user", blob_id(1)),
            ("name", Value::Text("phone".into())),
            ("hashed_key", Value::Blob(HASH.as_bytes().to_vec())),
            ("created_timestamp", Value::Text("2021-05-06T07:08:09".into())),
            (
                "permissions",
                Value::Text(r#"["sPermitAdd","sPermitShow","sPermitInitiateCheckout"]"#.into()),
            ),
        ]);
        let (owner, key, unknown) = access_key(&r, 4).unwrap();
        assert_eq!(owner, Uuid::from_bytes([1; 16]));
        assert_eq!(Table::Inbox.names(key.permissions), ["PermitAdd", "PermitShow"]);
        assert_eq!(unknown, ["PermitInitiateCheckout"]);
        assert_eq!(key.secret, KeySecret::LegacyBcrypt(HASH.into()));
        assert_eq!((key.name.as_str(), key.seq), ("phone", 4));
    }

    #[test]
    fn permissions_are_persistents_tagged_texts_and_unknown_names_are_errors() {
        let p = |s: &str| permissions(&Value::Text(s.into()));
        let (set, dropped) = p(r#"["sPermitAdd","sPermitAdminGetStats","sPermitAdminGetAccount"]"#).unwrap();
        assert_eq!(Table::Inbox.names(set), ["PermitAdd", "PermitAdminGetStats"]);
        assert_eq!(dropped, ["PermitAdminGetAccount"]);
        assert_eq!(p("[]").unwrap().0, Permissions::default());
        // untagged names are not what persistent wrote
        assert!(p(r#"["PermitAdd"]"#).unwrap_err().contains("\"PermitAdd\""));
        assert!(p(r#"["sPermitFly"]"#)
            .unwrap_err()
            .contains("unknown permission \"PermitFly\""));
        assert!(p(r#"["sPermitAddItem"]"#).unwrap_err().contains("PermitAddItem"));
        assert!(p(r#"{"a":1}"#).is_err());
        assert!(p(r#"[1]"#).is_err());
    }
}
