//! Accounts, shared in shape by both services (each service keeps its own accounts in its
//! own tree): the account records (`a`), the username index (`n` → account uuid), the
//! payment customer (`u`) and access keys (`k`, with the secret digest index `h`); layouts
//! in [`super::keys`].

use super::records::{self, raw};
use super::writer::{Batch, Tree};
use super::{keys, lock, Registration, Result, Stripes, Written};
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::wire::Timestamp;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// What moving an account in from another server does (see [`super::moving_in`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// New here: it is written.
    Moved,
    /// The same account (uuid and username) is here already, from an earlier run: skipped.
    AlreadyHere,
    /// Its username or uuid belongs to another account here: nothing is written.
    Conflict(String),
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

    /// The account `id` (what the operations below read under the lock).
    pub(super) fn account(&self, id: Uuid) -> Result<Option<Account>> {
        let k = keys::account(id);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some(records::account::decode(&k, &v)?)),
            None => Ok(None),
        }
    }

    /// The account's access key `id`.
    fn key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        let k = keys::access_key(account, id);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some(records::access_key::decode(&k, &v)?)),
            None => Ok(None),
        }
    }

    /// The account's access keys, oldest first.
    fn keys_of(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let mut found = self
            .tree
            .scan_prefix(keys::access_keys_of(account))
            .map(|kv| {
                let (k, v) = kv?;
                records::access_key::decode(&k, &v)
            })
            .collect::<Result<Vec<_>>>()?;
        found.sort_by_key(|k| (k.created, k.seq));
        Ok(found)
    }

    fn by_name(&self, username: &str) -> Result<Option<Account>> {
        let k = keys::username(username);
        match self.tree.get(&k)? {
            Some(id) => self.account(raw::to_uuid("username index", &k, &id)?),
            None => Ok(None),
        }
    }

    /// Replaces the password hash if it is still `expected` (the caller verified the
    /// password against it); a new credential epoch when `revoke`.
    fn replace_password(
        &self,
        id: Uuid,
        expected: &PasswordHash,
        new_hash: String,
        revoke: bool,
    ) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        let Some(mut account) = self.account(id)? else {
            return Ok(Written::unchanged(false));
        };
        if account.password_hash != *expected {
            return Ok(Written::unchanged(false));
        }
        account.password_hash = PasswordHash::Pbkdf2(new_hash);
        if revoke {
            account.epoch += 1;
        }
        let ticket = self.tree.insert(keys::account(id), records::account::encode(&account));
        Ok(Written::new(true, ticket))
    }

    /// Whether `account`, moved in from another server, is new here, here already (same
    /// uuid and username) or in conflict with an account here.
    pub(in crate::store) fn arrival(&self, account: &Account) -> Result<Arrival> {
        let by_name = self.by_name(&account.username)?;
        let by_id = self.account(account.id)?;
        Ok(match (by_name, by_id) {
            (None, None) => Arrival::Moved,
            (Some(a), Some(_)) if a.id == account.id => Arrival::AlreadyHere,
            (Some(a), _) => Arrival::Conflict(format!(
                "the username {:?} belongs to another account here ({})",
                account.username, a.id
            )),
            (None, Some(a)) => Arrival::Conflict(format!(
                "the account {} is here already under the username {:?}",
                account.id, a.username
            )),
        })
    }

    /// Adds an arriving account with its access keys to `batch` (in the order given, which
    /// is the order they list in).
    #[cfg(test)]
    pub(in crate::store) fn put_arriving(&self, batch: &mut Batch, account: &Account, access_keys: &[AccessKey]) {
        batch.insert(keys::username(&account.username), raw::uuid(account.id));
        batch.insert(keys::account(account.id), records::account::encode(account));
        for key in access_keys {
            batch.insert(keys::access_key(account.id, key.id), records::access_key::encode(key));
            if let Some(digest) = key.secret.digest() {
                batch.insert(keys::key_digest(digest), keys::key_owner(account.id, key.id));
            }
        }
    }

    /// [`AccountStore::put_arriving`] as writes of an import (journalled: see
    /// [`super::imports::Batches`]; it needs no store: a move-in closes and opens the
    /// database again while it writes).
    pub(in crate::store) fn put_arriving_into(
        batches: &mut super::imports::Batches<'_>,
        account: &Account,
        access_keys: &[AccessKey],
    ) -> Result<()> {
        batches.insert(keys::username(&account.username), raw::uuid(account.id))?;
        batches.insert(keys::account(account.id), records::account::encode(account))?;
        for key in access_keys {
            batches.insert(keys::access_key(account.id, key.id), records::access_key::encode(key))?;
            if let Some(digest) = key.secret.digest() {
                batches.insert(keys::key_digest(digest), keys::key_owner(account.id, key.id))?;
            }
        }
        Ok(())
    }

    /// Adds the removal of the account record, its username, customer and access keys to
    /// `batch`.
    pub(crate) fn delete_into(&self, account: &Account, batch: &mut Batch) -> Result<()> {
        for access_key in self.keys_of(account.id)? {
            batch.remove(keys::access_key(account.id, access_key.id));
            if let Some(digest) = access_key.secret.digest() {
                batch.remove(keys::key_digest(digest));
            }
        }
        batch.remove(keys::customer(account.id));
        batch.remove(keys::username(&account.username));
        batch.remove(keys::account(account.id));
        Ok(())
    }
}

/// The sled implementation: each operation one batch under the account's stripe lock
/// (registrations under one lock of their own).
#[async_trait::async_trait]
impl crate::store::api::Accounts for AccountStore {
    async fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Written<Registration>> {
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
            password_hash: PasswordHash::Pbkdf2(password_hash),
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

    async fn get(&self, id: Uuid) -> Result<Option<Account>> {
        self.account(id)
    }

    async fn by_username(&self, username: &str) -> Result<Option<Account>> {
        self.by_name(username)
    }

    async fn all(&self) -> Result<Vec<Account>> {
        self.tree
            .scan_prefix(keys::accounts())
            .map(|kv| {
                let (k, v) = kv?;
                records::account::decode(&k, &v)
            })
            .collect()
    }

    async fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        let Some(mut account) = self.account(id)? else {
            return Ok(Written::unchanged(false));
        };
        account.last_login = Some(match account.last_login {
            Some(prev) if prev > at => prev,
            _ => at,
        });
        let ticket = self.tree.insert(keys::account(id), records::account::encode(&account));
        Ok(Written::new(true, ticket))
    }

    /// A new credential epoch, which revokes every earlier token.
    async fn change_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        self.replace_password(id, expected, new_hash, true)
    }

    /// A hash brought from another server replaced by the PBKDF2 hash of the same password:
    /// tokens stay valid (no new epoch).
    async fn upgrade_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        self.replace_password(id, expected, new_hash, false)
    }

    async fn customer(&self, id: Uuid) -> Result<Option<String>> {
        Ok(self.tree.get(keys::customer(id))?.map(|v| raw::to_customer(&v)))
    }

    async fn set_customer(&self, id: Uuid, customer: &str) -> Result<Written<bool>> {
        let _guard = self.lock(id);
        if self.account(id)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let ticket = self.tree.insert(keys::customer(id), raw::customer(customer));
        Ok(Written::new(true, ticket))
    }

    async fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<Written<bool>> {
        let _guard = self.lock(account);
        if self.account(account)?.is_none() {
            return Ok(Written::unchanged(false));
        }
        let mut batch = Batch::default();
        batch.insert(
            keys::access_key(account, access_key.id),
            records::access_key::encode(access_key),
        );
        if let Some(digest) = access_key.secret.digest() {
            batch.insert(keys::key_digest(digest), keys::key_owner(account, access_key.id));
        }
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    async fn legacy_access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let mut keys = self.keys_of(account)?;
        keys.retain(|k| matches!(k.secret, KeySecret::LegacyBcrypt(_)));
        Ok(keys)
    }

    /// The bcrypt hash of an imported access key replaced by the digest of its secret,
    /// indexed like any other key.
    async fn upgrade_access_key(
        &self,
        account: Uuid,
        id: Uuid,
        expected: &KeySecret,
        digest: [u8; 32],
    ) -> Result<Written<bool>> {
        let _guard = self.lock(account);
        let Some(mut key) = self.key(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        if key.secret != *expected {
            return Ok(Written::unchanged(false));
        }
        key.secret = KeySecret::Digest(digest);
        let mut batch = Batch::default();
        batch.insert(keys::access_key(account, id), records::access_key::encode(&key));
        batch.insert(keys::key_digest(&digest), keys::key_owner(account, id));
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    async fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        self.keys_of(account)
    }

    async fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        self.key(account, id)
    }

    async fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>> {
        let Some(v) = self.tree.get(keys::key_digest(digest))? else {
            return Ok(None);
        };
        let (Some(account), Some(id)) = (keys::uuid_at(&v, 0), keys::uuid_at(&v, 16)) else {
            return Ok(None);
        };
        Ok(self.key(account, id)?.map(|k| (account, k)))
    }

    async fn next_key_seq(&self) -> Result<u64> {
        self.tree.next_id()
    }

    async fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let _guard = self.lock(account);
        let Some(k) = self.key(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        batch.remove(keys::access_key(account, id));
        if let Some(digest) = k.secret.digest() {
            batch.remove(keys::key_digest(digest));
        }
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }
}
