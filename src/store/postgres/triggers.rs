//! Triggers (`triggers`) and payment events (`payment_events`): the operations of the sled
//! store's `scheduler/triggers.rs` and `scheduler/payments.rs`, with the same names, async,
//! each one transaction. A trigger's e-mail (verification) is queued in the same
//! transaction ([`super::emails::insert_email`]).

use super::emails::insert_email;
use super::rows::{self, instant};
use super::scheduler::PgScheduler;
use super::sql::Sql;
use super::{transaction, PgError, PgResult};
use crate::domain::email::QueuedEmail;
use crate::domain::scheduler::models::{Trigger, TriggerKind};
use crate::domain::scheduler::push::{PushSubscription, WebhookFormat};
use crate::store::{PaymentEvents, Result, Triggers, Written};
use deadpool_postgres::Transaction;
use tokio_postgres::Row;
use uuid::Uuid;

pub(super) const TRIGGER_COLUMNS: &str =
    "id, account, created_secs, created_nanos, kind, email_address, email_verified, \
     email_key_digest, inbox_url, inbox_username, inbox_access_key, push_endpoint, push_p256dh, \
     push_auth, push_expired, webhook_url, webhook_format";

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
        "push" => {
            let p256dh: Vec<u8> = row.try_get("push_p256dh")?;
            let auth: Vec<u8> = row.try_get("push_auth")?;
            TriggerKind::Push {
                subscription: PushSubscription {
                    endpoint: row.try_get("push_endpoint")?,
                    p256dh: p256dh
                        .try_into()
                        .map_err(|_| PgError::Corrupt("a push key of other than 65 bytes".into()))?,
                    auth: auth
                        .try_into()
                        .map_err(|_| PgError::Corrupt("a push secret of other than 16 bytes".into()))?,
                },
                expired: row.try_get("push_expired")?,
            }
        }
        "webhook" => {
            let format: String = row.try_get("webhook_format")?;
            TriggerKind::Webhook {
                url: row.try_get("webhook_url")?,
                format: WebhookFormat::parse(&format)
                    .ok_or_else(|| PgError::Corrupt(format!("webhook format {format:?}")))?,
            }
        }
        other => return Err(PgError::Corrupt(format!("trigger kind {other:?}"))),
    };
    Ok(Trigger {
        id: row.try_get("id")?,
        owner: row.try_get("account")?,
        created: instant(row, "created")?,
        kind,
    })
}

/// The account's triggers in creation order, read through `client` (a transaction's too).
pub(super) async fn triggers_of(client: &impl Sql, account: Uuid) -> PgResult<Vec<Trigger>> {
    client
        .fetch_all(
            &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE account = $1 ORDER BY seq"),
            &[&account],
        )
        .await?
        .iter()
        .map(trigger_from)
        .collect()
}

/// The kind columns of a trigger's row: those of its kind set, every other one NULL.
#[derive(Default)]
struct KindColumns<'a> {
    email_address: Option<&'a str>,
    email_verified: Option<bool>,
    email_key_digest: Option<&'a [u8]>,
    inbox_url: Option<&'a str>,
    inbox_username: Option<&'a str>,
    inbox_access_key: Option<&'a str>,
    push_endpoint: Option<&'a str>,
    push_p256dh: Option<&'a [u8]>,
    push_auth: Option<&'a [u8]>,
    push_expired: Option<bool>,
    webhook_url: Option<&'a str>,
    webhook_format: Option<&'static str>,
}

impl KindColumns<'_> {
    /// The `kind` column and the kind columns of `kind`.
    fn of(kind: &TriggerKind) -> (&'static str, KindColumns<'_>) {
        match kind {
            TriggerKind::Email {
                address,
                verified,
                key_digest,
            } => (
                "email",
                KindColumns {
                    email_address: Some(address),
                    email_verified: Some(*verified),
                    email_key_digest: Some(key_digest),
                    ..Default::default()
                },
            ),
            TriggerKind::Inbox {
                url,
                username,
                access_key,
            } => (
                "inbox",
                KindColumns {
                    inbox_url: Some(url),
                    inbox_username: Some(username),
                    inbox_access_key: Some(access_key),
                    ..Default::default()
                },
            ),
            TriggerKind::Push { subscription, expired } => (
                "push",
                KindColumns {
                    push_endpoint: Some(&subscription.endpoint),
                    push_p256dh: Some(&subscription.p256dh),
                    push_auth: Some(&subscription.auth),
                    push_expired: Some(*expired),
                    ..Default::default()
                },
            ),
            TriggerKind::Webhook { url, format } => (
                "webhook",
                KindColumns {
                    webhook_url: Some(url),
                    webhook_format: Some(format.name()),
                    ..Default::default()
                },
            ),
        }
    }
}

/// Writes the trigger's kind columns (and created) over the row of `trigger.id`, or inserts it.
pub(super) async fn put_trigger(tx: &Transaction<'_>, trigger: &Trigger, insert: bool) -> PgResult<()> {
    let nanos = rows::nanos(trigger.created)?;
    let (kind, c) = KindColumns::of(&trigger.kind);
    let sql = if insert {
        format!(
            "INSERT INTO triggers ({TRIGGER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, \
             $13, $14, $15, $16, $17)"
        )
    } else {
        "UPDATE triggers SET created_secs = $3, created_nanos = $4, kind = $5, email_address = $6, \
         email_verified = $7, email_key_digest = $8, inbox_url = $9, inbox_username = $10, inbox_access_key = $11, \
         push_endpoint = $12, push_p256dh = $13, push_auth = $14, push_expired = $15, webhook_url = $16, \
         webhook_format = $17 WHERE id = $1 AND account = $2"
            .to_owned()
    };
    tx.run(
        &sql,
        &[
            &trigger.id,
            &trigger.owner,
            &trigger.created.secs,
            &nanos,
            &kind,
            &c.email_address,
            &c.email_verified,
            &c.email_key_digest,
            &c.inbox_url,
            &c.inbox_username,
            &c.inbox_access_key,
            &c.push_endpoint,
            &c.push_p256dh,
            &c.push_auth,
            &c.push_expired,
            &c.webhook_url,
            &c.webhook_format,
        ],
    )
    .await?;
    Ok(())
}

/// Each write one transaction under the account's row lock.
#[async_trait::async_trait]
impl Triggers for PgScheduler {
    /// Stores a new trigger of its owner, with the e-mail that goes with it (verification),
    /// in one transaction; `false` when the owner's account is gone.
    async fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            if !self.accounts.lock(&tx, trigger.owner).await? {
                return Ok(Written::unchanged(false));
            }
            put_trigger(&tx, trigger, true).await?;
            if let Some(email) = &email {
                insert_email(&tx, email).await?;
            }
            Ok(Written::committed(true))
        })?)
    }

    /// The account a trigger belongs to (`None`: there is no trigger `id`).
    async fn trigger_owner(&self, id: Uuid) -> Result<Option<Uuid>> {
        let client = self.pool.get().await?;
        match client
            .fetch_opt("SELECT account FROM triggers WHERE id = $1", &[&id])
            .await?
        {
            Some(row) => Ok(Some(row.try_get(0)?)),
            None => Ok(None),
        }
    }

    async fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(
                &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?
            .as_ref()
            .map(trigger_from)
            .transpose()?)
    }

    /// The account's triggers in creation order.
    async fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>> {
        let client = self.pool.get().await?;
        Ok(triggers_of(&client, account).await?)
    }

    /// Replaces a trigger of the account with what `update` makes of it (verification, a new
    /// key) and queues the e-mail it gives, in one transaction; `false` when the account has
    /// no such trigger or `update` answers `None`.
    async fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: &mut (dyn FnMut(Trigger) -> Option<(Trigger, Option<QueuedEmail>)> + Send),
    ) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let Some(row) = tx
                .fetch_opt(
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
        })?)
    }

    /// Stores the trigger that `decide` makes of the account's triggers (all of them, read
    /// in the transaction that holds the account's lock): a new one, or one of them renewed
    /// (same id); nothing when it answers `None`. `false` when the account is gone or nothing
    /// was stored. `decide` may be called again (a retried transaction).
    async fn add_or_renew_trigger(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [Trigger]) -> Option<Trigger> + Send),
    ) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            if !self.accounts.lock(&tx, account).await? {
                return Ok(Written::unchanged(false));
            }
            let triggers = triggers_of(&tx, account).await?;
            let Some(trigger) = decide(&triggers).filter(|t| t.owner == account) else {
                return Ok(Written::unchanged(false));
            };
            let exists = triggers.iter().any(|t| t.id == trigger.id);
            put_trigger(&tx, &trigger, !exists).await?;
            Ok(Written::committed(true))
        })?)
    }

    /// Deletes a trigger of the account with its pending deliveries and queued e-mails.
    async fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let n = tx
                .run("DELETE FROM triggers WHERE id = $1 AND account = $2", &[&id, &account])
                .await?;
            if n == 0 {
                return Ok(Written::unchanged(false));
            }
            tx.run(
                "DELETE FROM deliveries WHERE account = $1 AND trigger = $2",
                &[&account, &id],
            )
            .await?;
            tx.run(
                "DELETE FROM email_queue WHERE owner = $1 AND trigger = $2",
                &[&account, &id],
            )
            .await?;
            Ok(Written::committed(true))
        })?)
    }
}

#[async_trait::async_trait]
impl PaymentEvents for PgScheduler {
    /// Whether the payment event was handled (successfully or kept for the retrier).
    async fn event_seen(&self, id: &str) -> Result<bool> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt("SELECT 1 FROM payment_events WHERE id = $1", &[&id])
            .await?
            .is_some())
    }

    /// Marks a payment event handled; `failed` keeps it (JSON) for the retrier instead.
    async fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<Written<()>> {
        let client = self.pool.get().await?;
        client
            .run(
                "INSERT INTO payment_events (id, failed_event) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET failed_event = $2",
                &[&id, &failed],
            )
            .await?;
        Ok(Written::committed(()))
    }

    /// Payment events whose handling failed (JSON), oldest first.
    async fn failed_events(&self) -> Result<Vec<Vec<u8>>> {
        let client = self.pool.get().await?;
        client
            .fetch_all(
                "SELECT failed_event FROM payment_events WHERE failed_event IS NOT NULL ORDER BY seen_at, id",
                &[],
            )
            .await?
            .iter()
            .map(|row| Ok(row.try_get(0)?))
            .collect()
    }
}
