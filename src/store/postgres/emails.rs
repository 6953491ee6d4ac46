//! The e-mail queue (`email_queue`, every stage in one table, ordered by `seq`): the
//! operations of the sled store's `scheduler/emails.rs`, with the same names, async. A
//! queued e-mail or pending delivery is named by a [`PgQueueKey`] (the sled store's
//! `QueueKey` is its key bytes; the engine-neutral key is for the traits to settle).

use super::rows::{self, from_bigint, instant, optional_instant};
use super::scheduler::PgScheduler;
use super::sql::Sql;
use super::{PgError, PgResult};
use crate::domain::email::{EmailKind, Message, QueuedEmail, Stage};
use crate::domain::scheduler::models::Delivery;
use crate::domain::wire::Timestamp;
use crate::store::scheduler::QueueKey;
use crate::store::{Emails, Result, StoreError, Written};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

/// A queued e-mail (its `seq`) or a pending inbox delivery (its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PgQueueKey {
    Email(i64),
    Delivery(Uuid),
}

/// The tags of [`PgQueueKey`] as the store's [`QueueKey`] bytes (no sled key starts with
/// either: sled's begin with a letter).
const DELIVERY_TAG: u8 = 0xD1;
const EMAIL_TAG: u8 = 0xE1;

impl PgQueueKey {
    /// The engine-neutral key: a tag byte and the id (16 bytes) or sequence (8, big-endian).
    pub fn to_key(self) -> QueueKey {
        let mut bytes = Vec::with_capacity(17);
        match self {
            PgQueueKey::Delivery(id) => {
                bytes.push(DELIVERY_TAG);
                bytes.extend_from_slice(id.as_bytes());
            }
            PgQueueKey::Email(seq) => {
                bytes.push(EMAIL_TAG);
                bytes.extend_from_slice(&seq.to_be_bytes());
            }
        }
        QueueKey::from_bytes(bytes)
    }

    /// Its row of the queue tables: the table and key column as `"TABLE WHERE COLUMN"` (a
    /// statement follows it with ` = $n`), and the key's value.
    pub fn row(&self) -> (&'static str, &(dyn ToSql + Sync)) {
        match self {
            PgQueueKey::Delivery(id) => ("deliveries WHERE id", id),
            PgQueueKey::Email(seq) => ("email_queue WHERE seq", seq),
        }
    }

    /// Reads back a key made by [`PgQueueKey::to_key`]; any other key is
    /// [`PgError::ForeignQueueKey`].
    pub fn of(k: &QueueKey) -> PgResult<PgQueueKey> {
        match k.as_bytes().split_first() {
            Some((&DELIVERY_TAG, id)) => Uuid::from_slice(id)
                .map(PgQueueKey::Delivery)
                .map_err(|_| PgError::ForeignQueueKey("queue keys")),
            Some((&EMAIL_TAG, seq)) => <[u8; 8]>::try_from(seq)
                .map(|b| PgQueueKey::Email(i64::from_be_bytes(b)))
                .map_err(|_| PgError::ForeignQueueKey("queue keys")),
            _ => Err(PgError::ForeignQueueKey("queue keys")),
        }
    }
}

pub(super) fn stage_column(stage: Stage) -> &'static str {
    match stage {
        Stage::Verification => "verification",
        Stage::Triggered => "triggered",
        Stage::AdminNotice => "admin_notice",
        Stage::Rendered => "rendered",
    }
}

/// The columns of an e-mail after `seq`, in this order.
pub(super) const EMAIL_COLUMNS: &str = "owner, trigger, stage, failures, not_before_secs, not_before_nanos, \
     recipient, verification_key, notice_worker, notice_error, message_to, message_subject, message_text, \
     message_html, delivery_id, delivery_owner, delivery_item, delivery_trigger, delivery_trigger_created_secs, \
     delivery_trigger_created_nanos, delivery_email, delivery_failures, delivery_not_before_secs, \
     delivery_not_before_nanos";

/// An e-mail as owned column values.
struct EmailColumns {
    owner: Uuid,
    trigger: Option<Uuid>,
    stage: &'static str,
    failures: i64,
    not_before_secs: i64,
    not_before_nanos: i32,
    recipient: Option<String>,
    verification_key: Option<String>,
    notice_worker: Option<String>,
    notice_error: Option<String>,
    message: [Option<String>; 4],
    delivery_id: Option<Uuid>,
    delivery_owner: Option<Uuid>,
    delivery_item: Option<Uuid>,
    delivery_trigger: Option<Uuid>,
    delivery_trigger_created_secs: Option<i64>,
    delivery_trigger_created_nanos: Option<i32>,
    delivery_email: Option<bool>,
    delivery_failures: Option<i64>,
    delivery_not_before_secs: Option<i64>,
    delivery_not_before_nanos: Option<i32>,
}

impl EmailColumns {
    fn of(e: &QueuedEmail) -> PgResult<EmailColumns> {
        let mut c = EmailColumns {
            owner: e.owner,
            trigger: e.trigger,
            stage: stage_column(e.kind.stage()),
            failures: i64::from(e.failures),
            not_before_secs: e.not_before.secs,
            not_before_nanos: rows::nanos(e.not_before)?,
            recipient: None,
            verification_key: None,
            notice_worker: None,
            notice_error: None,
            message: [None, None, None, None],
            delivery_id: None,
            delivery_owner: None,
            delivery_item: None,
            delivery_trigger: None,
            delivery_trigger_created_secs: None,
            delivery_trigger_created_nanos: None,
            delivery_email: None,
            delivery_failures: None,
            delivery_not_before_secs: None,
            delivery_not_before_nanos: None,
        };
        let delivery = match &e.kind {
            EmailKind::Verification { to, key } => {
                c.recipient = Some(to.clone());
                c.verification_key = Some(key.clone());
                None
            }
            EmailKind::Triggered { delivery, to } => {
                c.recipient = Some(to.clone());
                Some(delivery)
            }
            EmailKind::AdminNotice { worker, error } => {
                c.notice_worker = Some(worker.clone());
                c.notice_error = Some(error.clone());
                None
            }
            EmailKind::Rendered { message, delivery } => {
                c.message = [
                    Some(message.to.clone()),
                    Some(message.subject.clone()),
                    Some(message.text.clone()),
                    Some(message.html.clone()),
                ];
                delivery.as_ref()
            }
        };
        if let Some(d) = delivery {
            c.delivery_id = Some(d.id);
            c.delivery_owner = Some(d.owner);
            c.delivery_item = Some(d.item);
            c.delivery_trigger = Some(d.trigger);
            c.delivery_trigger_created_secs = Some(d.trigger_created.secs);
            c.delivery_trigger_created_nanos = Some(rows::nanos(d.trigger_created)?);
            c.delivery_email = Some(d.email);
            c.delivery_failures = Some(i64::from(d.failures));
            c.delivery_not_before_secs = Some(d.not_before.secs);
            c.delivery_not_before_nanos = Some(rows::nanos(d.not_before)?);
        }
        Ok(c)
    }

    /// The values in [`EMAIL_COLUMNS`] order.
    fn values(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.owner,
            &self.trigger,
            &self.stage,
            &self.failures,
            &self.not_before_secs,
            &self.not_before_nanos,
            &self.recipient,
            &self.verification_key,
            &self.notice_worker,
            &self.notice_error,
            &self.message[0],
            &self.message[1],
            &self.message[2],
            &self.message[3],
            &self.delivery_id,
            &self.delivery_owner,
            &self.delivery_item,
            &self.delivery_trigger,
            &self.delivery_trigger_created_secs,
            &self.delivery_trigger_created_nanos,
            &self.delivery_email,
            &self.delivery_failures,
            &self.delivery_not_before_secs,
            &self.delivery_not_before_nanos,
        ]
    }
}

fn text(row: &Row, column: &str) -> PgResult<String> {
    let value: Option<String> = row.try_get(column)?;
    value.ok_or_else(|| PgError::Corrupt(format!("a queued e-mail without {column}")))
}

/// The delivery in the `delivery_*` columns, if any.
fn delivery_of(row: &Row) -> PgResult<Option<Delivery>> {
    let Some(id) = row.try_get::<_, Option<Uuid>>("delivery_id")? else {
        return Ok(None);
    };
    let failures: Option<i64> = row.try_get("delivery_failures")?;
    let missing = || PgError::Corrupt("a queued e-mail with half a delivery".into());
    Ok(Some(Delivery {
        id,
        owner: row.try_get::<_, Option<Uuid>>("delivery_owner")?.ok_or_else(missing)?,
        item: row.try_get::<_, Option<Uuid>>("delivery_item")?.ok_or_else(missing)?,
        trigger: row
            .try_get::<_, Option<Uuid>>("delivery_trigger")?
            .ok_or_else(missing)?,
        trigger_created: optional_instant(row, "delivery_trigger_created")?.ok_or_else(missing)?,
        email: row.try_get::<_, Option<bool>>("delivery_email")?.ok_or_else(missing)?,
        failures: from_bigint(failures.ok_or_else(missing)?, "delivery failures")?,
        not_before: optional_instant(row, "delivery_not_before")?.ok_or_else(missing)?,
    }))
}

pub(super) fn email_from(row: &Row) -> PgResult<QueuedEmail> {
    let stage: String = row.try_get("stage")?;
    let kind = match stage.as_str() {
        "verification" => EmailKind::Verification {
            to: text(row, "recipient")?,
            key: text(row, "verification_key")?,
        },
        "triggered" => EmailKind::Triggered {
            delivery: delivery_of(row)?
                .ok_or_else(|| PgError::Corrupt("a triggered e-mail without its delivery".into()))?,
            to: text(row, "recipient")?,
        },
        "admin_notice" => EmailKind::AdminNotice {
            worker: text(row, "notice_worker")?,
            error: text(row, "notice_error")?,
        },
        "rendered" => EmailKind::Rendered {
            message: Message {
                to: text(row, "message_to")?,
                subject: text(row, "message_subject")?,
                text: text(row, "message_text")?,
                html: text(row, "message_html")?,
            },
            delivery: delivery_of(row)?,
        },
        other => return Err(PgError::Corrupt(format!("e-mail stage {other:?}"))),
    };
    Ok(QueuedEmail {
        owner: row.try_get("owner")?,
        trigger: row.try_get("trigger")?,
        kind,
        failures: from_bigint(row.try_get("failures")?, "e-mail failures")?,
        not_before: instant(row, "not_before")?,
    })
}

/// Queues `email` in `tx`; its key.
pub(super) async fn insert_email(tx: &Transaction<'_>, email: &QueuedEmail) -> PgResult<PgQueueKey> {
    let c = EmailColumns::of(email)?;
    let placeholders: Vec<String> = (1..=24).map(|i| format!("${i}")).collect();
    let row = tx
        .fetch_one(
            &format!(
                "INSERT INTO email_queue ({EMAIL_COLUMNS}) VALUES ({}) RETURNING seq",
                placeholders.join(", ")
            ),
            &c.values(),
        )
        .await?;
    Ok(PgQueueKey::Email(row.try_get(0)?))
}

impl PgScheduler {
    /// Ends this process's claims on the rows of the queue table `table` (`deliveries`,
    /// `email_queue`) whose `column` is one of `keys` (read, not started): the next process
    /// to pass over them may take them.
    pub(super) async fn give_back<T: tokio_postgres::types::ToSql + Sync>(
        &self,
        table: &str,
        column: &str,
        keys: &[T],
    ) -> PgResult<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let client = self.pool.get().await?;
        client
            .run(
                &format!(
                    "UPDATE {table} SET claimed_by = NULL, lease_until = NULL WHERE {column} = ANY($1) \
                     AND claimed_by = $2"
                ),
                &[&keys, &self.claimant],
            )
            .await?;
        Ok(())
    }
}

/// A lease in microseconds (the claims' SQL makes an interval of it).
pub(super) fn lease_micros(lease: std::time::Duration) -> i64 {
    i64::try_from(lease.as_micros()).unwrap_or(i64::MAX)
}

/// `not_before` of an e-mail that may go at once.
pub(super) fn at_once() -> Timestamp {
    Timestamp::from_unix(0, 0)
}

/// What `pick` takes of each of `keys` (the ids of one queue); a key of another queue or
/// engine is refused as not one of `expected`.
pub(super) fn keys_of<T>(
    keys: &[QueueKey],
    expected: &'static str,
    pick: impl Fn(PgQueueKey) -> Option<T>,
) -> Result<Vec<T>> {
    keys.iter()
        .map(|k| pick(PgQueueKey::of(k)?).ok_or(PgError::ForeignQueueKey(expected).into()))
        .collect()
}

/// Rendering or sending an e-mail claims it for this process; replacing it ends the claim.
#[async_trait::async_trait]
impl Emails for PgScheduler {
    /// Queues an e-mail (admin notifications).
    async fn queue_email(&self, email: &QueuedEmail) -> Result<Written<()>> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        insert_email(&tx, email).await?;
        tx.commit().await?;
        Ok(Written::committed(()))
    }

    /// Up to `limit` queued e-mails of one stage, oldest first, with their keys, a row that
    /// cannot be read being an error of its own. Only those no other process holds; reading
    /// claims nothing: each e-mail is claimed when its rendering or sending starts
    /// ([`Emails::claim_email`]).
    async fn queued_emails_each(&self, stage: Stage, limit: usize) -> Result<Vec<(QueueKey, Result<QueuedEmail>)>> {
        let limit = rows::limit(limit);
        let client = self.pool.get().await?;
        let rows = client
            .fetch_all(
                &format!(
                    "SELECT seq, {EMAIL_COLUMNS} FROM email_queue WHERE stage = $1 AND {} ORDER BY seq LIMIT $2",
                    super::claims::claimable(3)
                ),
                &[&stage_column(stage), &limit, &self.claimant],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let key = PgQueueKey::Email(row.try_get("seq")?).to_key();
                Ok((key, email_from(row).map_err(StoreError::from)))
            })
            .collect::<PgResult<_>>()?)
    }

    /// Claims the e-mail for this process ([`PgScheduler::lease`] long, renewed by the
    /// process's heartbeat) unless another process holds it.
    async fn claim_email(&self, k: &QueueKey) -> Result<bool> {
        let PgQueueKey::Email(seq) = &PgQueueKey::of(k)? else {
            return Err(PgError::Corrupt("a delivery's key where an e-mail's was expected".into()).into());
        };
        Ok(self.claim("email_queue", "seq", seq).await?)
    }

    /// Replaces a queued e-mail if it is still queued: rendered (it moves on to the rendered
    /// stage, keeping its place in the order) or postponed.
    async fn replace_email(&self, k: &QueueKey, email: &QueuedEmail) -> Result<Written<()>> {
        let PgQueueKey::Email(seq) = &PgQueueKey::of(k)? else {
            return Err(PgError::Corrupt("a delivery's key where an e-mail's was expected".into()).into());
        };
        let c = EmailColumns::of(email)?;
        let sets: Vec<String> = EMAIL_COLUMNS
            .split(',')
            .enumerate()
            .map(|(i, column)| format!("{} = ${}", column.trim(), i + 2))
            .collect();
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![seq];
        values.extend(c.values());
        let client = self.pool.get().await?;
        let n = client
            .run(
                &format!(
                    "UPDATE email_queue SET {}, claimed_by = NULL, lease_until = NULL WHERE seq = $1",
                    sets.join(", ")
                ),
                &values,
            )
            .await?;
        Ok(if n == 1 {
            Written::committed(())
        } else {
            Written::unchanged(())
        })
    }

    async fn release_emails(&self, keys: &[QueueKey]) -> Result<()> {
        let seqs = keys_of(keys, "queued e-mails", |k| match k {
            PgQueueKey::Email(seq) => Some(seq),
            PgQueueKey::Delivery(_) => None,
        })?;
        Ok(self.give_back("email_queue", "seq", &seqs).await?)
    }
}
