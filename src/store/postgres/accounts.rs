//! Accounts and access keys of one service (tables `<service>_accounts` and
//! `<service>_access_keys`): the operations of the sled store's `AccountStore`, with the
//! same names and arguments, async, each one transaction.
//!
//! Single-statement writes are atomic by themselves (a conditional `UPDATE`, an
//! `INSERT … ON CONFLICT DO NOTHING`); a read-check-write sequence locks the account's row
//! (`SELECT … FOR NO KEY UPDATE`) first, as the sled store takes the account's stripe lock.

use super::rows::{self, from_bigint, instant, optional_instant, to_bigint};
use super::sql::Sql;
use super::{transaction, PgError, PgResult};
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::permissions::Permissions;
use crate::domain::wire::Timestamp;
use crate::store::{Accounts, Registration, Result, Written};
use deadpool_postgres::{Pool, Transaction};
use tokio_postgres::Row;
use uuid::Uuid;

/// Which service's accounts (each keeps its own, as each has its own tree in sled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    Inbox,
    Scheduler,
}

impl Service {
    /// The prefix of its tables' names.
    fn prefix(self) -> &'static str {
        match self {
            Service::Inbox => "inbox",
            Service::Scheduler => "scheduler",
        }
    }
}

pub(super) const ACCOUNT_COLUMNS: &str = "id, username, password_kind, password_hash, created_secs, created_nanos, \
                               last_login_secs, last_login_nanos, epoch";
pub(super) const KEY_COLUMNS: &str =
    "account, id, name, created_secs, created_nanos, seq, permissions, secret_digest, secret_bcrypt";

pub(super) fn password_columns(hash: &PasswordHash) -> (&'static str, &str) {
    match hash {
        PasswordHash::Pbkdf2(phc) => ("pbkdf2", phc),
        PasswordHash::LegacyBcrypt(h) => ("bcrypt", h),
    }
}

pub(super) fn account_from(row: &Row) -> PgResult<Account> {
    let kind: String = row.try_get("password_kind")?;
    let hash: String = row.try_get("password_hash")?;
    Ok(Account {
        id: row.try_get("id")?,
        username: row.try_get("username")?,
        password_hash: match kind.as_str() {
            "pbkdf2" => PasswordHash::Pbkdf2(hash),
            "bcrypt" => PasswordHash::LegacyBcrypt(hash),
            other => return Err(PgError::Corrupt(format!("unknown password kind {other:?}"))),
        },
        created: instant(row, "created")?,
        last_login: optional_instant(row, "last_login")?,
        epoch: from_bigint(row.try_get("epoch")?, "epoch")?,
    })
}

pub(super) fn key_from(row: &Row) -> PgResult<AccessKey> {
    let digest: Option<Vec<u8>> = row.try_get("secret_digest")?;
    let bcrypt: Option<String> = row.try_get("secret_bcrypt")?;
    let secret = match (digest, bcrypt) {
        (Some(d), None) => KeySecret::Digest(
            d.try_into()
                .map_err(|_| PgError::Corrupt("an access key digest of other than 32 bytes".into()))?,
        ),
        (None, Some(h)) => KeySecret::LegacyBcrypt(h),
        _ => return Err(PgError::Corrupt("an access key with both or neither secret".into())),
    };
    Ok(AccessKey {
        id: row.try_get("id")?,
        name: super::rows::text_of_bytes(row, "name")?,
        created: instant(row, "created")?,
        seq: from_bigint(row.try_get("seq")?, "access key seq")?,
        permissions: Permissions(from_bigint(row.try_get("permissions")?, "permissions")?),
        secret,
    })
}

/// Accounts of one service.
#[derive(Clone)]
pub struct PgAccounts {
    pub(super) pool: Pool,
    service: Service,
}

impl PgAccounts {
    pub(super) fn new(pool: Pool, service: Service) -> PgAccounts {
        PgAccounts { pool, service }
    }

    fn accounts(&self) -> String {
        format!("{}_accounts", self.service.prefix())
    }

    fn keys(&self) -> String {
        format!("{}_access_keys", self.service.prefix())
    }

    /// Locks the account's row until the end of `tx`; `false` when there is no such account.
    /// `FOR NO KEY UPDATE`: the account's read-check-write sequences (and its deletion) wait
    /// for each other, but a row that only refers to the account (its foreign key's `KEY
    /// SHARE`: a plain addition, a pending delivery of a triggered item) is not held up by
    /// them; with `FOR UPDATE` the expansion of a burst of reminders waited for each
    /// triggerer round's commit.
    pub(super) async fn lock(&self, tx: &Transaction<'_>, id: Uuid) -> PgResult<bool> {
        let sql = format!("SELECT 1 FROM {} WHERE id = $1 FOR NO KEY UPDATE", self.accounts());
        Ok(tx.fetch_opt(&sql, &[&id]).await?.is_some())
    }

    /// Locks the rows of the accounts `ids` (sorted: two such locks never wait for each
    /// other) as [`Self::lock`] locks one, in one statement.
    pub(super) async fn lock_all(&self, tx: &Transaction<'_>, ids: &[Uuid]) -> PgResult<()> {
        let sql = format!(
            "SELECT 1 FROM {} WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE",
            self.accounts()
        );
        tx.run(&sql, &[&ids]).await?;
        Ok(())
    }

    async fn replace_password(
        &self,
        id: Uuid,
        expected: &PasswordHash,
        new_hash: String,
        revoke: bool,
    ) -> PgResult<Written<bool>> {
        let (kind, hash) = password_columns(expected);
        let epoch = if revoke { "epoch + 1" } else { "epoch" };
        let sql = format!(
            "UPDATE {} SET password_kind = 'pbkdf2', password_hash = $4, epoch = {epoch}
             WHERE id = $1 AND password_kind = $2 AND password_hash = $3",
            self.accounts()
        );
        let client = self.pool.get().await?;
        let n = client.run(&sql, &[&id, &kind, &hash, &new_hash]).await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }
}

/// Each operation one statement, or one transaction that locks the account's row first.
#[async_trait::async_trait]
impl Accounts for PgAccounts {
    /// Registers `username` with a PBKDF2 `password_hash`; `Taken` when the username is an
    /// account's already (the unique constraint decides between concurrent registrations,
    /// also across processes).
    async fn register(&self, username: &str, password_hash: String, now: Timestamp) -> Result<Written<Registration>> {
        let account = Account {
            id: crate::domain::wire::new_uuid(),
            username: username.to_owned(),
            password_hash: PasswordHash::Pbkdf2(password_hash),
            created: now,
            last_login: None,
            epoch: 0,
        };
        let (kind, hash) = password_columns(&account.password_hash);
        let sql = format!(
            "INSERT INTO {} (id, username, password_kind, password_hash, created_secs, created_nanos, epoch) \
             VALUES ($1, $2, $3, $4, $5, $6, 0) ON CONFLICT (username) DO NOTHING RETURNING id",
            self.accounts()
        );
        let nanos = rows::nanos(now)?;
        let client = self.pool.get().await?;
        let inserted = client
            .fetch_opt(&sql, &[&account.id, &account.username, &kind, &hash, &now.secs, &nanos])
            .await?;
        Ok(match inserted {
            Some(_) => Written::committed(Registration::Created(account)),
            None => Written::unchanged(Registration::Taken),
        })
    }

    async fn get(&self, id: Uuid) -> Result<Option<Account>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM {} WHERE id = $1", self.accounts());
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(&sql, &[&id])
            .await?
            .as_ref()
            .map(account_from)
            .transpose()?)
    }

    async fn by_username(&self, username: &str) -> Result<Option<Account>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM {} WHERE username = $1", self.accounts());
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(&sql, &[&username])
            .await?
            .as_ref()
            .map(account_from)
            .transpose()?)
    }

    /// Every account (admin listing and statistics), in id order.
    async fn all(&self) -> Result<Vec<Account>> {
        let sql = format!("SELECT {ACCOUNT_COLUMNS} FROM {} ORDER BY id", self.accounts());
        let client = self.pool.get().await?;
        Ok(client
            .fetch_all(&sql, &[])
            .await?
            .iter()
            .map(account_from)
            .collect::<PgResult<Vec<_>>>()?)
    }

    /// Records a login (never moving the last login back); `false` when the account is gone.
    async fn set_last_login(&self, id: Uuid, at: Timestamp) -> Result<Written<bool>> {
        let sql = format!(
            "UPDATE {} SET
                 last_login_secs = CASE WHEN last_login_secs IS NULL OR (last_login_secs, last_login_nanos) < ($2, $3)
                                        THEN $2 ELSE last_login_secs END,
                 last_login_nanos = CASE WHEN last_login_secs IS NULL OR (last_login_secs, last_login_nanos) < ($2, $3)
                                         THEN $3 ELSE last_login_nanos END
             WHERE id = $1",
            self.accounts()
        );
        let nanos = rows::nanos(at)?;
        let client = self.pool.get().await?;
        let n = client.run(&sql, &[&id, &at.secs, &nanos]).await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// Replaces the password hash if it is still `expected` and starts a new credential
    /// epoch (revoking earlier tokens). `false` when the account is gone or the password
    /// changed meanwhile.
    async fn change_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        Ok(self.replace_password(id, expected, new_hash, true).await?)
    }

    /// Replaces a password hash brought from another server by the PBKDF2 hash of the same
    /// password (no new epoch). `false` when the account is gone or its password changed.
    async fn upgrade_password(&self, id: Uuid, expected: &PasswordHash, new_hash: String) -> Result<Written<bool>> {
        Ok(self.replace_password(id, expected, new_hash, false).await?)
    }

    /// The payment customer recorded for the account.
    async fn customer(&self, id: Uuid) -> Result<Option<String>> {
        let sql = format!("SELECT payment_customer FROM {} WHERE id = $1", self.accounts());
        let client = self.pool.get().await?;
        match client.fetch_opt(&sql, &[&id]).await? {
            Some(row) => Ok(row.try_get(0)?),
            None => Ok(None),
        }
    }

    /// Records the payment customer of an existing account; `false` when there is none.
    async fn set_customer(&self, id: Uuid, customer: &str) -> Result<Written<bool>> {
        let sql = format!("UPDATE {} SET payment_customer = $2 WHERE id = $1", self.accounts());
        let client = self.pool.get().await?;
        let n = client.run(&sql, &[&id, &customer]).await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// Stores a new access key of the account; `false` when the account is gone.
    async fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<Written<bool>> {
        let sql = format!(
            "INSERT INTO {} ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            self.keys()
        );
        let nanos = rows::nanos(access_key.created)?;
        let seq = to_bigint(access_key.seq, "access key seq")?;
        let permissions = i64::from(access_key.permissions.0);
        let (digest, bcrypt): (Option<&[u8]>, Option<&str>) = match &access_key.secret {
            KeySecret::Digest(d) => (Some(d.as_slice()), None),
            KeySecret::LegacyBcrypt(h) => (None, Some(h.as_str())),
        };
        Ok(transaction!(self, |tx| {
            if !self.lock(&tx, account).await? {
                return Ok(Written::unchanged(false));
            }
            tx.run(
                &sql,
                &[
                    &account,
                    &access_key.id,
                    &access_key.name.as_bytes(),
                    &access_key.created.secs,
                    &nanos,
                    &seq,
                    &permissions,
                    &digest,
                    &bcrypt,
                ],
            )
            .await?;
            Ok(Written::committed(true))
        })?)
    }

    /// The account's access keys still kept as a hash from another server.
    async fn legacy_access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let mut keys = self.access_keys(account).await?;
        keys.retain(|k| matches!(k.secret, KeySecret::LegacyBcrypt(_)));
        Ok(keys)
    }

    /// Replaces the secret of an access key, if it is still `expected`, by the digest of its
    /// secret; `false` when the key is gone or no longer has that secret.
    async fn upgrade_access_key(
        &self,
        account: Uuid,
        id: Uuid,
        expected: &KeySecret,
        digest: [u8; 32],
    ) -> Result<Written<bool>> {
        let condition = match expected {
            KeySecret::Digest(_) => "secret_digest = $4",
            KeySecret::LegacyBcrypt(_) => "secret_bcrypt = $4",
        };
        let sql = format!(
            "UPDATE {} SET secret_digest = $3, secret_bcrypt = NULL WHERE account = $1 AND id = $2 AND {condition}",
            self.keys()
        );
        let digest = digest.as_slice();
        let client = self.pool.get().await?;
        let n = match expected {
            KeySecret::Digest(d) => client.run(&sql, &[&account, &id, &digest, &d.as_slice()]).await?,
            KeySecret::LegacyBcrypt(h) => client.run(&sql, &[&account, &id, &digest, h]).await?,
        };
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// The account's access keys, oldest first.
    async fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM {} WHERE account = $1 ORDER BY created_secs, created_nanos, seq",
            self.keys()
        );
        let client = self.pool.get().await?;
        Ok(client
            .fetch_all(&sql, &[&account])
            .await?
            .iter()
            .map(key_from)
            .collect::<PgResult<Vec<_>>>()?)
    }

    async fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM {} WHERE account = $1 AND id = $2",
            self.keys()
        );
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(&sql, &[&account, &id])
            .await?
            .as_ref()
            .map(key_from)
            .transpose()?)
    }

    /// The access key whose secret has this SHA-256 digest: (owner, key).
    async fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>> {
        let sql = format!("SELECT {KEY_COLUMNS} FROM {} WHERE secret_digest = $1", self.keys());
        let client = self.pool.get().await?;
        match client.fetch_opt(&sql, &[&digest.as_slice()]).await? {
            Some(row) => Ok(Some((row.try_get("account")?, key_from(&row)?))),
            None => Ok(None),
        }
    }

    /// The next access key sequence number (shared by every process).
    async fn next_key_seq(&self) -> Result<u64> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .fetch_one("SELECT nextval('access_key_seq')", &[])
            .await?
            .try_get(0)?;
        Ok(from_bigint(n, "access key seq")?)
    }

    async fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let sql = format!("DELETE FROM {} WHERE account = $1 AND id = $2", self.keys());
        let client = self.pool.get().await?;
        let n = client.run(&sql, &[&account, &id]).await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }
}
