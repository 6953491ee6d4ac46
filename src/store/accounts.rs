//! Accounts, shared in shape by both services (each service keeps its own accounts in its
//! own tree): the account records (`a`), the username index (`n` → account uuid), the
//! payment customer (`u`) and access keys (`k`, with the secret digest index `h`); layouts
//! in [`super::keys`].

use super::records::{self, raw};
use super::writer::{Batch, Tree};
use super::{keys, lock, Result, Stripes, Written};
use crate::domain::account::{AccessKey, Account};
use crate::domain::wire::Timestamp;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

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

    pub fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Written<Registration>> {
        // Registrations are rare: one lock for all of them makes "exactly one of several
        // concurrent registrations of a username wins" trivially true.
        let _guard = lock(&self.registrations);
        let name_key = keys::username(username);
        if self.tree.contains_key(&name_key)? {
            return Ok(Written::unchanged(Registration::Taken));
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
        batch.insert(name_key, raw::uuid(account.id));
        batch.insert(keys::account(account.id), records::account::encode(&account));
        let ticket = self.tree.apply_batch(batch);
        Ok(Written::new(Registration::Created(account), ticket))
    }

    pub fn get(&self, id: Uuid) -> Result<Option<Account>> {
        match self.tree.get(keys::account(id))? {
            Some(v) => Ok(Some(records::account::decode(&v)?)),
            None => Ok(None),
        }
    }

    pub fn by_username(&self, username: &str) -> Result<Option<Account>> {
        match self.tree.get(keys::username(username))? {
            Some(id) => self.get(raw::to_uuid("username index", &id)?),
            None => Ok(None),
        }
    }

    /// Every account (admin listing and statistics).
    pub fn all(&self) -> Result<Vec<Account>> {
        self.tree
            .scan_prefix(keys::accounts())
            .map(|kv| records::account::decode(&kv?.1))
            .collect()
    }

    /// Records a login; `false` when the account is gone.
    pub fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        let Some(mut account) = self.get(id)? else {
            return Ok(Written::unchanged(false));
        };
        account.last_login = Some(match account.last_login {
            Some(prev) if prev > at => prev,
            _ => at,
        });
        let ticket = self.tree.insert(keys::account(id), records::account::encode(&account));
        Ok(Written::new(true, ticket))
    }

    /// Replaces the password hash if it is still `expected` (the caller verified the old
    /// password against it) and starts a new credential epoch, which revokes every earlier
    /// token. `false` when the account is gone or the password changed meanwhile.
    pub fn change_password(&self, id: Uuid, expected: &str, new_hash: String) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        let Some(mut account) = self.get(id)? else {
            return Ok(Written::unchanged(false));
        };
        if account.password_hash != expected {
            return Ok(Written::unchanged(false));
        }
        account.password_hash = new_hash;
        account.epoch += 1;
        let ticket = self.tree.insert(keys::account(id), records::account::encode(&account));
        Ok(Written::new(true, ticket))
    }

    /// The payment customer recorded for the account.
    pub fn customer(&self, id: Uuid) -> Result<Option<String>> {
        Ok(self.tree.get(keys::customer(id))?.map(|v| raw::to_customer(&v)))
    }

    /// Records the payment customer of an existing account; `false` when there is none.
    pub fn set_customer(&self, id: Uuid, customer: &str) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        if self.get(id)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let ticket = self.tree.insert(keys::customer(id), raw::customer(customer));
        Ok(Written::new(true, ticket))
    }

    /// Stores a new access key of the account; `false` when the account is gone.
    pub fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<Written<bool>> {
        let _guard = self.lock(account);
        if self.get(account)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let mut batch = Batch::default();
        batch.insert(
            keys::access_key(account, access_key.id),
            records::access_key::encode(access_key),
        );
        batch.insert(
            keys::key_digest(&access_key.digest),
            keys::key_owner(account, access_key.id),
        );
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// The account's access keys, oldest first.
    pub fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let mut found = self
            .tree
            .scan_prefix(keys::access_keys_of(account))
            .map(|kv| records::access_key::decode(&kv?.1))
            .collect::<Result<Vec<_>>>()?;
        found.sort_by_key(|k| (k.created, k.seq));
        Ok(found)
    }

    pub fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        match self.tree.get(keys::access_key(account, id))? {
            Some(v) => Ok(Some(records::access_key::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The access key whose secret has this SHA-256 digest: (owner, key).
    pub fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>> {
        let Some(v) = self.tree.get(keys::key_digest(digest))? else {
            return Ok(None);
        };
        let (Some(account), Some(id)) = (keys::uuid_at(&v, 0), keys::uuid_at(&v, 16)) else {
            return Ok(None);
        };
        Ok(self.access_key(account, id)?.map(|k| (account, k)))
    }

    pub fn next_key_seq(&self) -> Result<u64> {
        self.tree.next_id()
    }

    pub fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let _guard = self.lock(account);
        let Some(k) = self.access_key(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        batch.remove(keys::access_key(account, id));
        batch.remove(keys::key_digest(&k.digest));
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// Adds the removal of the account record, its username, customer and access keys to
    /// `batch`.
    pub(crate) fn delete_into(&self, account: &Account, batch: &mut Batch) -> Result<()> {
        for access_key in self.access_keys(account.id)? {
            batch.remove(keys::access_key(account.id, access_key.id));
            batch.remove(keys::key_digest(&access_key.digest));
        }
        batch.remove(keys::customer(account.id));
        batch.remove(keys::username(&account.username));
        batch.remove(keys::account(account.id));
        Ok(())
    }
}
