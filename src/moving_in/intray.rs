//! An Intray server's database → inbox accounts. Tables of the 2021 schema
//! (`intray-data/src/Intray/Data/DB.hs`): `user`, `intray_item`, `access_key` (the payment
//! tables `customer` and `subscription` are not read).

use super::sqlite::{OldDatabase, Row};
use super::values::{self, bytes, opt_time, text, time, uuid};
use super::Notes;
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::permissions::{Permission, Permissions, Table};
use crate::domain::wire;
use crate::store::moving_in::InboxArrival;
use std::collections::HashMap;
use uuid::Uuid;

const USER: &[&str] = &[
    "identifier",
    "username",
    "hashed_password",
    "created_timestamp",
    "last_login",
];
const ITEM: &[&str] = &["identifier", "user_id", "type", "contents", "created"];
const ACCESS_KEY: &[&str] = &[
    "identifier",
    "user",
    "name",
    "hashed_key",
    "created_timestamp",
    "permissions",
];

/// Reads and checks everything (nothing is written here).
pub fn read(db: &OldDatabase, notes: &mut Notes) -> Result<Vec<InboxArrival>, String> {
    db.require("user", USER)?;
    db.require("intray_item", ITEM)?;
    db.require("access_key", ACCESS_KEY)?;
    let mut accounts = Vec::new();
    let mut index = HashMap::new();
    for (n, row) in db.rows("user", USER)?.iter().enumerate() {
        let account = user(row).map_err(|e| format!("user row {}: {e}", n + 1))?;
        index.insert(account.id, accounts.len());
        accounts.push(InboxArrival {
            account,
            access_keys: Vec::new(),
            items: Vec::new(),
        });
    }
    for (n, row) in db.rows("intray_item", ITEM)?.iter().enumerate() {
        let (owner, item) = item(row).map_err(|e| format!("intray_item row {}: {e}", n + 1))?;
        match index.get(&owner) {
            Some(&i) => accounts[i].items.push(item),
            None => notes.orphans += 1,
        }
    }
    for (n, row) in db.rows("access_key", ACCESS_KEY)?.iter().enumerate() {
        let seq = n as u64;
        let (owner, key, unknown) = access_key(row, seq).map_err(|e| format!("access_key row {}: {e}", n + 1))?;
        notes.unknown_permissions.extend(unknown);
        match index.get(&owner) {
            Some(&i) => accounts[i].access_keys.push(key),
            None => notes.orphans += 1,
        }
    }
    for a in &mut accounts {
        a.access_keys.sort_by_key(|k| (k.created, k.seq));
    }
    notes.unknown_permissions.sort();
    notes.unknown_permissions.dedup();
    Ok(accounts)
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
        return Err(format!("the username {username:?} is not valid here"));
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

/// (owner, item) of an `intray_item` row.
pub fn item(row: &Row) -> Result<(Uuid, InboxItem), String> {
    let item = InboxItem {
        id: uuid(row.get("identifier"))?,
        kind: item_type(row.get("type"))?,
        data: bytes(row.get("contents"))?,
        created: time(row.get("created"))?,
    };
    Ok((uuid(row.get("user_id"))?, item))
}

/// (owner, key, permission names this server does not have) of an `access_key` row. The
/// permissions are a JSON list of constructor names (`["PermitAdd","PermitShow"]`).
pub fn access_key(row: &Row, seq: u64) -> Result<(Uuid, AccessKey, Vec<String>), String> {
    let names = values::opt_json(row.get("permissions"))?.unwrap_or_default();
    let names = names.as_array().ok_or("the permissions are not a list")?;
    let mut permissions = Permissions::default();
    let mut unknown = Vec::new();
    for name in names {
        let name = name.as_str().ok_or("a permission is not a name")?;
        match Permission::parse(name).filter(|p| Table::Inbox.all().contains(p)) {
            Some(p) => permissions.insert(p),
            None => unknown.push(name.to_owned()),
        }
    }
    let key = AccessKey {
        id: uuid(row.get("identifier"))?,
        name: text(row.get("name"))?,
        created: time(row.get("created_timestamp"))?,
        seq,
        permissions,
        secret: KeySecret::LegacyBcrypt(bcrypt_hash(row.get("hashed_key"))?),
    };
    Ok((uuid(row.get("user"))?, key, unknown))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value;

    fn row(pairs: &[(&str, Value)]) -> Row {
        Row(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
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
        bad.0[2].1 = Value::Text("$pbkdf2$…".into());
        assert!(user(&bad).unwrap_err().contains("not bcrypt"));
        let mut bad = r;
        bad.0[1].1 = Value::Text("a b".into());
        assert!(user(&bad).is_err());
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
        let (owner, it) = item(&r).unwrap();
        assert_eq!(owner, Uuid::from_bytes([1; 16]));
        assert_eq!(
            (it.id, it.kind, it.data.as_slice()),
            (Uuid::from_bytes([2; 16]), ItemType::Png, &[0x89, b'P'][..])
        );
        assert_eq!(it.created.to_string(), "2021-01-02T03:04:05Z");
        let mut bad = r;
        bad.0[2].1 = Value::Blob(b"video/mp4".to_vec());
        assert!(item(&bad).unwrap_err().contains("video/mp4"));
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
                Value::Text(r#"["PermitAdd","PermitShow","PermitInitiateCheckout"]"#.into()),
            ),
        ]);
        let (owner, key, unknown) = access_key(&r, 4).unwrap();
        assert_eq!(owner, Uuid::from_bytes([1; 16]));
        assert_eq!(Table::Inbox.names(key.permissions), ["PermitAdd", "PermitShow"]);
        assert_eq!(unknown, ["PermitInitiateCheckout"]);
        assert_eq!(key.secret, KeySecret::LegacyBcrypt(HASH.into()));
        assert_eq!((key.name.as_str(), key.seq), ("phone", 4));
    }
}
