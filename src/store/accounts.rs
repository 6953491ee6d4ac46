//! Accounts, shared in shape by both services (each service keeps its own accounts in its
//! own tree). Keys:
//!
//! * `a` + account uuid → [`Account`]
//! * `n` + username (UTF-8) → account uuid (the username index); a username of more than
//!   200 bytes is indexed as `n` + `0xFF` + its SHA-256 (`0xFF` never occurs in UTF-8), so
//!   keys stay short whatever clients register (see [`super::chunks`])
//! * `u` + account uuid → the payment provider's customer id

use super::writer::{Batch, Tree};
use super::{decode, encode, key, lock, Result, Stripes};
use crate::domain::account::Account;
use crate::domain::wire::Timestamp;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

pub(crate) const ACCOUNT: u8 = b'a';
pub(crate) const USERNAME: u8 = b'n';
pub(crate) const CUSTOMER: u8 = b'u';

/// The username index key of `username`.
fn username_key(username: &str) -> Vec<u8> {
    if username.len() <= 200 {
        key(USERNAME, &[username.as_bytes()])
    } else {
        use sha2::Digest;
        key(USERNAME, &[&[0xFF], &sha2::Sha256::digest(username.as_bytes())])
    }
}

pub enum Registration {
    Created(Account),
    Taken,
}

/// Account records of one service's tree.
pub struct AccountStore {
    tree: Tree,
    stripes: Arc<Stripes>,
    registrations: Mutex<()>,
}

impl AccountStore {
    pub(crate) fn new(tree: Tree, stripes: Arc<Stripes>) -> AccountStore {
        AccountStore {
            tree,
            stripes,
            registrations: Mutex::new(()),
        }
    }

    pub(crate) fn lock(&self, id: Uuid) -> std::sync::MutexGuard<'_, ()> {
        self.stripes.lock(id.as_bytes())
    }

    pub fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Registration> {
        // Registrations are rare: one lock for all of them makes "exactly one of several
        // concurrent registrations of a username wins" trivially true.
        let _guard = lock(&self.registrations);
        let name_key = username_key(username);
        if self.tree.contains_key(&name_key)? {
            return Ok(Registration::Taken);
        }
        let account = Account {
            id: crate::domain::wire::new_uuid(),
            username: username.to_owned(),
            password_hash,
            created: now,
            last_login: None,
            epoch: 0,
        };
        let mut batch = Batch::default();
        batch.insert(name_key, account.id.as_bytes().to_vec());
        batch.insert(key(ACCOUNT, &[account.id.as_bytes()]), encode(&account));
        self.tree.apply_batch(batch);
        Ok(Registration::Created(account))
    }

    pub fn get(&self, id: Uuid) -> Result<Option<Account>> {
        match self.tree.get(key(ACCOUNT, &[id.as_bytes()]))? {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
    }

    pub fn by_username(&self, username: &str) -> Result<Option<Account>> {
        match self.tree.get(username_key(username))? {
            Some(id) => match Uuid::from_slice(&id) {
                Ok(id) => self.get(id),
                Err(_) => Ok(None),
            },
            None => Ok(None),
        }
    }

    /// Every account (admin listing and statistics).
    pub fn all(&self) -> Result<Vec<Account>> {
        self.tree.scan_prefix([ACCOUNT]).map(|kv| decode(&kv?.1)).collect()
    }

    pub fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<bool> {
        let _guard = self.lock(id);
        let Some(mut account) = self.get(id)? else {
            return Ok(false);
        };
        account.last_login = Some(match account.last_login {
            Some(prev) if prev > at => prev,
            _ => at,
        });
        self.tree.insert(key(ACCOUNT, &[id.as_bytes()]), encode(&account));
        Ok(true)
    }

    /// Replaces the password hash if it is still `expected` (the caller verified the old
    /// password against it) and starts a new credential epoch, which revokes every earlier
    /// token. `false` when the account is gone or the password changed meanwhile.
    pub fn change_password(&self, id: Uuid, expected: &str, new_hash: String) -> Result<bool> {
        let _guard = self.lock(id);
        let Some(mut account) = self.get(id)? else {
            return Ok(false);
        };
        if account.password_hash != expected {
            return Ok(false);
        }
        account.password_hash = new_hash;
        account.epoch += 1;
        self.tree.insert(key(ACCOUNT, &[id.as_bytes()]), encode(&account));
        Ok(true)
    }

    /// The payment customer recorded for the account.
    pub fn customer(&self, id: Uuid) -> Result<Option<String>> {
        Ok(self
            .tree
            .get(key(CUSTOMER, &[id.as_bytes()]))?
            .map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Records the payment customer of an existing account; `false` when there is none.
    pub fn set_customer(&self, id: Uuid, customer: &str) -> Result<bool> {
        let _guard = self.lock(id);
        if self.get(id)?.is_none() {
            return Ok(false);
        }
        self.tree.insert(key(CUSTOMER, &[id.as_bytes()]), customer.as_bytes());
        Ok(true)
    }

    /// Adds the removal of the account record, its username and customer to `batch`.
    pub(crate) fn delete_into(&self, account: &Account, batch: &mut Batch) {
        batch.remove(key(CUSTOMER, &[account.id.as_bytes()]));
        batch.remove(username_key(&account.username));
        batch.remove(key(ACCOUNT, &[account.id.as_bytes()]));
    }
}
