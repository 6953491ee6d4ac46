//! Triggers (`triggers`) and payment events (`payment_events`): the operations of the sled
//! store's `scheduler/triggers.rs` and `scheduler/payments.rs`, with the same names, async,
//! each one transaction. A trigger's e-mail (verification) is queued in the same
//! transaction ([`super::emails::insert_email`]).

use super::emails::insert_email;
use super::rows::{self, instant};
use super::scheduler::PgScheduler;
use super::{transaction, PgError, PgResult};
use crate::domain::email::QueuedEmail;
use crate::domain::scheduler::models::{Trigger, TriggerKind};
use crate::store::Written;
use tokio_postgres::{Row, Transaction};
use uuid::Uuid;

pub(super) const TRIGGER_COLUMNS: &str =
    "id, account, created_secs, created_nanos, kind, email_address, email_verified, \
     email_key_digest, inbox_url, inbox_username, inbox_access_key";

pub(super) fn trigger_from(row: &Row) -> PgResult<Trigger> {
    let kind: String = row.try_get("kind")?;
    let kind = match kind.as_str() {
        "email" => {
            let digest: Vec<u8> = row.try_get("email_key_digest")?;
            TriggerKind::Email {
                address: row.try_get("email_address")?,
                verified: row.try_get("email_verified")?,
                key_digest: digest
                    .try_into()
                    .map_err(|_| PgError::Corrupt("a trigger key digest of other than 32 bytes".into()))?,
            }
        }
        "inbox" => TriggerKind::Inbox {
            url: row.try_get("inbox_url")?,
            username: row.try_get("inbox_username")?,
            access_key: row.try_get("inbox_access_key")?,
        },
        other => return Err(PgError::Corrupt(format!("trigger kind {other:?}"))),
    };
    Ok(Trigger {
        id: row.try_get("id")?,
        owner: row.try_get("account")?,
        created: instant(row, "created")?,
        kind,
    })
}

/// Writes the trigger's kind columns (and created) over the row of `trigger.id`, or inserts it.
pub(super) async fn put_trigger(tx: &Transaction<'_>, trigger: &Trigger, insert: bool) -> PgResult<()> {
    let nanos = rows::nanos(trigger.created)?;
    let mut email: (Option<&str>, Option<bool>, Option<&[u8]>) = (None, None, None);
    let mut inbox: (Option<&str>, Option<&str>, Option<&str>) = (None, None, None);
    let kind = match &trigger.kind {
        TriggerKind::Email {
            address,
            verified,
            key_digest,
        } => {
            email = (Some(address), Some(*verified), Some(key_digest.as_slice()));
            "email"
        }
        TriggerKind::Inbox {
            url,
            username,
            access_key,
        } => {
            inbox = (Some(url), Some(username), Some(access_key));
            "inbox"
        }
    };
    let (address, verified, digest) = email;
    let (url, username, key) = inbox;
    let sql = if insert {
        format!("INSERT INTO triggers ({TRIGGER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)")
    } else {
        "UPDATE triggers SET created_secs = $3, created_nanos = $4, kind = $5, email_address = $6, \
         email_verified = $7, email_key_digest = $8, inbox_url = $9, inbox_username = $10, inbox_access_key = $11 \
         WHERE id = $1 AND account = $2"
            .to_owned()
    };
    tx.execute(
        &sql,
        &[
            &trigger.id,
            &trigger.owner,
            &trigger.created.secs,
            &nanos,
            &kind,
            &address,
            &verified,
            &digest,
            &url,
            &username,
            &key,
        ],
    )
    .await?;
    Ok(())
}

impl PgScheduler {
    /// Stores a new trigger of its owner, with the e-mail that goes with it (verification),
    /// in one transaction; `false` when the owner's account is gone.
    pub async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> PgResult<Written<bool>> {
        transaction!(self, |tx| {
            if !self.accounts.lock(&tx, trigger.owner).await? {
                return Ok(Written::unchanged(false));
            }
            put_trigger(&tx, trigger, true).await?;
            if let Some(email) = &email {
                insert_email(&tx, email).await?;
            }
            Ok(Written::committed(true))
        })
    }

    /// The account a trigger belongs to (`None`: there is no trigger `id`).
    pub async fn trigger_owner(&self, id: Uuid) -> PgResult<Option<Uuid>> {
        let client = self.pool.get().await?;
        match client
            .query_opt("SELECT account FROM triggers WHERE id = $1", &[&id])
            .await?
        {
            Some(row) => Ok(Some(row.try_get(0)?)),
            None => Ok(None),
        }
    }

    pub async fn trigger(&self, account: Uuid, id: Uuid) -> PgResult<Option<Trigger>> {
        let client = self.pool.get().await?;
        client
            .query_opt(
                &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?
            .as_ref()
            .map(trigger_from)
            .transpose()
    }

    /// The account's triggers in creation order.
    pub async fn triggers(&self, account: Uuid) -> PgResult<Vec<Trigger>> {
        let client = self.pool.get().await?;
        client
            .query(
                &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE account = $1 ORDER BY seq"),
                &[&account],
            )
            .await?
            .iter()
            .map(trigger_from)
            .collect()
    }

    /// Replaces a trigger of the account with what `update` makes of it (verification, a new
    /// key) and queues the e-mail it gives, in one transaction; `false` when the account has
    /// no such trigger or `update` answers `None`.
    pub async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> PgResult<Written<bool>> {
        transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let Some(row) = tx
                .query_opt(
                    &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE id = $1 AND account = $2"),
                    &[&id, &account],
                )
                .await?
            else {
                return Ok(Written::unchanged(false));
            };
            let Some((trigger, email)) = update(trigger_from(&row)?) else {
                return Ok(Written::unchanged(false));
            };
            if trigger.id != id || trigger.owner != account {
                return Err(PgError::Corrupt(
                    "an update that changes a trigger's id or owner".into(),
                ));
            }
            put_trigger(&tx, &trigger, false).await?;
            if let Some(email) = &email {
                insert_email(&tx, email).await?;
            }
            Ok(Written::committed(true))
        })
    }

    /// Deletes a trigger of the account with its pending deliveries and queued e-mails.
    pub async fn delete_trigger(&self, account: Uuid, id: Uuid) -> PgResult<Written<bool>> {
        transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let n = tx
                .execute("DELETE FROM triggers WHERE id = $1 AND account = $2", &[&id, &account])
                .await?;
            if n == 0 {
                return Ok(Written::unchanged(false));
            }
            tx.execute(
                "DELETE FROM deliveries WHERE account = $1 AND trigger = $2",
                &[&account, &id],
            )
            .await?;
            tx.execute(
                "DELETE FROM email_queue WHERE owner = $1 AND trigger = $2",
                &[&account, &id],
            )
            .await?;
            Ok(Written::committed(true))
        })
    }

    /// Whether the payment event was handled (successfully or kept for the retrier).
    pub async fn event_seen(&self, id: &str) -> PgResult<bool> {
        let client = self.pool.get().await?;
        Ok(client
            .query_opt("SELECT 1 FROM payment_events WHERE id = $1", &[&id])
            .await?
            .is_some())
    }

    /// Marks a payment event handled; `failed` keeps it (JSON) for the retrier instead.
    pub async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> PgResult<Written<()>> {
        let client = self.pool.get().await?;
        client
            .execute(
                "INSERT INTO payment_events (id, failed_event) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET failed_event = $2",
                &[&id, &failed],
            )
            .await?;
        Ok(Written::committed(()))
    }

    /// Payment events whose handling failed (JSON), oldest first.
    pub async fn failed_events(&self) -> PgResult<Vec<Vec<u8>>> {
        let client = self.pool.get().await?;
        client
            .query(
                "SELECT failed_event FROM payment_events WHERE failed_event IS NOT NULL ORDER BY seen_at, id",
                &[],
            )
            .await?
            .iter()
            .map(|row| Ok(row.try_get(0)?))
            .collect()
    }
}
