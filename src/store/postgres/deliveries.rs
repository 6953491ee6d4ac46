//! Deliveries: the target lists fixed when an item triggered (`delivery_targets`), the
//! pending inbox deliveries made of them (`deliveries`, in `seq` order), e-mail deliveries
//! through the e-mail queue, and the outcomes recorded on triggered items
//! (`trigger_attempts`). The operations of the sled store's `scheduler/deliveries.rs`, with
//! the same names, async.
//!
//! Target lists are taken with `FOR UPDATE SKIP LOCKED`, one list a transaction, so that
//! several processes expanding at once never expand one list twice (issue 21 point 3).
//! Pending deliveries (and queued e-mails) are claimed by the process that starts them, for
//! the store's lease (claims.rs); postponing or finishing ends the claim.

use super::claims::claimable;
use super::emails::{at_once, insert_email, keys_of, PgQueueKey};
use super::rows::{self, from_bigint, instant};
use super::scheduler::PgScheduler;
use super::sql::Sql;
use super::triggers::{trigger_from, TRIGGER_COLUMNS};
use super::{transaction, PgError, PgResult};
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::scheduler::models::{Attempt, Delivery, Outcome, Trigger, TriggerKind};
use crate::store::scheduler::QueueKey;
use crate::store::{Deliveries, Result, StoreError, Written};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

pub(super) const DELIVERY_COLUMNS: &str =
    "id, account, item, trigger, trigger_created_secs, trigger_created_nanos, email, \
     failures, not_before_secs, not_before_nanos";

/// Target lists expanded in one transaction at most.
const EXPAND_ROUND: i64 = 64;

pub(super) fn delivery_from(row: &Row) -> PgResult<Delivery> {
    Ok(Delivery {
        id: row.try_get("id")?,
        owner: row.try_get("account")?,
        item: row.try_get("item")?,
        trigger: row.try_get("trigger")?,
        trigger_created: instant(row, "trigger_created")?,
        email: row.try_get("email")?,
        failures: from_bigint(row.try_get("failures")?, "delivery failures")?,
        not_before: instant(row, "not_before")?,
    })
}

pub(super) async fn insert_delivery(tx: &Transaction<'_>, d: &Delivery) -> PgResult<()> {
    let created_nanos = rows::nanos(d.trigger_created)?;
    let not_before_nanos = rows::nanos(d.not_before)?;
    let failures = i64::from(d.failures);
    tx.run(
        &format!("INSERT INTO deliveries ({DELIVERY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"),
        &[
            &d.id,
            &d.owner,
            &d.item,
            &d.trigger,
            &d.trigger_created.secs,
            &created_nanos,
            &d.email,
            &failures,
            &d.not_before.secs,
            &not_before_nanos,
        ],
    )
    .await?;
    Ok(())
}

/// Inserts `deliveries` in one statement, in their order (the queue's).
async fn insert_deliveries(tx: &Transaction<'_>, deliveries: &[Delivery]) -> PgResult<()> {
    if deliveries.is_empty() {
        return Ok(());
    }
    let mut columns = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for d in deliveries {
        columns.0.push(d.id);
        columns.1.push(d.owner);
        columns.2.push(d.item);
        columns.3.push(d.trigger);
        columns.4.push(d.trigger_created.secs);
        columns.5.push(rows::nanos(d.trigger_created)?);
        columns.6.push(d.email);
        columns.7.push(i64::from(d.failures));
        columns.8.push(d.not_before.secs);
        columns.9.push(rows::nanos(d.not_before)?);
    }
    tx.run(
        &format!(
            "INSERT INTO deliveries ({DELIVERY_COLUMNS}) \
             SELECT c0, c1, c2, c3, c4, c5, c6, c7, c8, c9 FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], \
             $4::uuid[], $5::bigint[], $6::integer[], $7::boolean[], $8::bigint[], $9::bigint[], $10::integer[]) \
             WITH ORDINALITY AS d(c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, n) ORDER BY n"
        ),
        &[
            &columns.0, &columns.1, &columns.2, &columns.3, &columns.4, &columns.5, &columns.6, &columns.7, &columns.8,
            &columns.9,
        ],
    )
    .await?;
    Ok(())
}

/// The outcome's columns: (outcome, inbox item, reason).
fn outcome_columns(outcome: &Outcome) -> (&'static str, Option<Uuid>, Option<&[u8]>) {
    let (kind, item, why) = match outcome {
        Outcome::InboxAdded(id) => ("inbox_added", Some(*id), None),
        Outcome::InboxFailed(why) => ("inbox_failed", None, Some(why)),
        Outcome::EmailSent => ("email_sent", None, None),
        Outcome::EmailFailed(why) => ("email_failed", None, Some(why)),
        Outcome::PushSent => ("push_sent", None, None),
        Outcome::PushFailed(why) => ("push_failed", None, Some(why)),
        Outcome::WebhookSent => ("webhook_sent", None, None),
        Outcome::WebhookFailed(why) => ("webhook_failed", None, Some(why)),
    };
    (kind, item, why.map(|w| w.as_bytes()))
}

/// Records `attempt` on the triggered item `item` at `position`.
pub(super) async fn insert_attempt(tx: &Transaction<'_>, item: Uuid, position: i32, attempt: &Attempt) -> PgResult<()> {
    let (kind, inbox_item, reason) = outcome_columns(&attempt.outcome);
    let nanos = rows::nanos(attempt.trigger_created)?;
    tx.run(
        "INSERT INTO trigger_attempts (triggered_item, position, trigger, trigger_created_secs, \
         trigger_created_nanos, delivery, outcome, inbox_item, reason) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &item,
            &position,
            &attempt.trigger,
            &attempt.trigger_created.secs,
            &nanos,
            &attempt.delivery,
            &kind,
            &inbox_item,
            &reason,
        ],
    )
    .await?;
    Ok(())
}

impl PgScheduler {
    /// Deletes the pending delivery or queued e-mail `k` in `tx`; whether it was there.
    async fn remove_pending_in(tx: &Transaction<'_>, k: &PgQueueKey) -> PgResult<bool> {
        let (pending, key) = k.row();
        Ok(tx.run(&format!("DELETE FROM {pending} = $1"), &[key]).await? > 0)
    }
}

/// Starting a delivery claims it for this process; postponing, finishing and removing end
/// the claim.
#[async_trait::async_trait]
impl Deliveries for PgScheduler {
    /// Turns up to `limit` waiting target lists of one kind (`email` or inbox) into pending
    /// deliveries (inbox) or queued e-mails to render (e-mail), up to [`EXPAND_ROUND`] lists
    /// in a transaction (lists another transaction holds are left to it); triggers deleted
    /// meanwhile, and e-mail triggers no longer verified, are skipped. Answers how many
    /// lists it took.
    async fn expand_targets(&self, email: bool, limit: usize) -> Result<Written<usize>> {
        let kind = if email { "email" } else { "inbox" };
        let mut total = 0;
        loop {
            let round = EXPAND_ROUND.min(rows::limit(limit - total));
            let took = transaction!(self, |tx| {
                let lists = tx
                    .fetch_all(
                        "SELECT triggered_item, account, triggers FROM delivery_targets WHERE kind = $1 \
                         ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED",
                        &[&kind, &round],
                    )
                    .await?;
                if lists.is_empty() {
                    return Ok(0);
                }
                // the round in a few statements: its lists removed together, every trigger
                // they name read once, its deliveries inserted together
                let items = lists
                    .iter()
                    .map(|row| row.try_get("triggered_item"))
                    .collect::<std::result::Result<Vec<Uuid>, _>>()?;
                tx.run(
                    "DELETE FROM delivery_targets WHERE kind = $1 AND triggered_item = ANY($2)",
                    &[&kind, &items],
                )
                .await?;
                let mut named = Vec::new();
                for row in &lists {
                    named.extend(row.try_get::<_, Vec<Uuid>>("triggers")?);
                }
                named.sort_unstable();
                named.dedup();
                let triggers = tx
                    .fetch_all(
                        &format!("SELECT {TRIGGER_COLUMNS} FROM triggers WHERE id = ANY($1)"),
                        &[&named],
                    )
                    .await?
                    .iter()
                    .map(|row| trigger_from(row).map(|t| (t.id, t)))
                    .collect::<PgResult<std::collections::HashMap<Uuid, Trigger>>>()?;
                let mut deliveries = Vec::new();
                for row in &lists {
                    let item: Uuid = row.try_get("triggered_item")?;
                    let owner: Uuid = row.try_get("account")?;
                    let listed: Vec<Uuid> = row.try_get("triggers")?;
                    for trigger_id in listed {
                        // deleted (or not the owner's), no longer verified or expired
                        // meanwhile: skipped
                        let Some(trigger) = triggers.get(&trigger_id).filter(|t| t.owner == owner) else {
                            continue;
                        };
                        if !trigger.kind.receives() || trigger.kind.channel().by_email() != email {
                            continue;
                        }
                        let delivery = Delivery {
                            id: crate::domain::wire::new_uuid(),
                            owner,
                            item,
                            trigger: trigger_id,
                            trigger_created: trigger.created,
                            email,
                            failures: 0,
                            not_before: at_once(),
                        };
                        match &trigger.kind {
                            TriggerKind::Email { address, .. } => {
                                let to = address.clone();
                                let queued =
                                    QueuedEmail::new(owner, Some(trigger_id), EmailKind::Triggered { delivery, to });
                                insert_email(&tx, &queued).await?;
                            }
                            _ => deliveries.push(delivery),
                        }
                    }
                }
                insert_deliveries(&tx, &deliveries).await?;
                Ok(lists.len())
            })?;
            total += took;
            if took == 0 || total == limit {
                let value = Written::committed(total);
                return Ok(if total == 0 { Written::unchanged(0) } else { value });
            }
        }
    }

    /// Up to `limit` pending inbox deliveries, oldest first, with their keys; a row that
    /// cannot be read is an error of its own. Only those no other process holds (its lease
    /// ran out: that process died); reading claims nothing: the pass claims each delivery it
    /// starts ([`Deliveries::claim_delivery`]). The delivery's id is its Idempotency-Key, so a
    /// delivery taken over after a crash lands once in its inbox.
    async fn pending_deliveries(&self, limit: usize) -> Result<Vec<(QueueKey, Result<Delivery>)>> {
        let limit = rows::limit(limit);
        let client = self.pool.get().await?;
        let rows = client
            .fetch_all(
                &format!(
                    "SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE {} ORDER BY seq LIMIT $1",
                    claimable(2)
                ),
                &[&limit, &self.claimant],
            )
            .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let key = PgQueueKey::Delivery(row.try_get("id")?).to_key();
                Ok((key, delivery_from(row).map_err(StoreError::from)))
            })
            .collect::<PgResult<_>>()?)
    }

    /// Claims the delivery for this process ([`PgScheduler::lease`] long, renewed by the
    /// process's heartbeat) unless another process holds it.
    async fn claim_delivery(&self, k: &QueueKey) -> Result<bool> {
        let PgQueueKey::Delivery(id) = &PgQueueKey::of(k)? else {
            return Err(PgError::Corrupt("an e-mail's key where a delivery's was expected".into()).into());
        };
        Ok(self.claim("deliveries", "id", id).await?)
    }

    /// Replaces a pending delivery (after a transient failure) if it is still pending.
    async fn postpone_delivery(&self, k: &QueueKey, delivery: &Delivery) -> Result<Written<()>> {
        let PgQueueKey::Delivery(id) = &PgQueueKey::of(k)? else {
            return Err(PgError::Corrupt("an e-mail's key where a delivery's was expected".into()).into());
        };
        let nanos = rows::nanos(delivery.not_before)?;
        let failures = i64::from(delivery.failures);
        let client = self.pool.get().await?;
        let n = client
            .run(
                "UPDATE deliveries SET failures = $2, not_before_secs = $3, not_before_nanos = $4, \
                 claimed_by = NULL, lease_until = NULL WHERE id = $1",
                &[id, &failures, &delivery.not_before.secs, &nanos],
            )
            .await?;
        Ok(if n == 1 {
            Written::committed(())
        } else {
            Written::unchanged(())
        })
    }

    /// Records the final outcome of a delivery on its triggered item and removes the pending
    /// record `k`, in one statement (one round trip: issue 30 point 7). Nothing happens when
    /// the record was dropped meanwhile; nothing is recorded on an item deleted meanwhile.
    /// The attempt is numbered after the item's others under the item's row lock (not the
    /// account's: its other items and writes go on); a finish of the same item committed
    /// while this one waited for that lock is not in this statement's snapshot, so their
    /// numbers collide (a unique violation of the attempts' key, the only one the statement
    /// can meet) and the statement runs again, seeing it.
    async fn finish_delivery(&self, k: &QueueKey, delivery: &Delivery, outcome: Outcome) -> Result<Written<()>> {
        let k = PgQueueKey::of(k)?;
        let (pending, key) = k.row();
        let (kind, inbox_item, reason) = outcome_columns(&outcome);
        let nanos = rows::nanos(delivery.trigger_created)?;
        let sql = format!(
            "WITH gone AS (DELETE FROM {pending} = $9 RETURNING 1), \
             item AS (SELECT id FROM triggered_items WHERE id = $1 AND account = $10 FOR NO KEY UPDATE), \
             added AS (INSERT INTO trigger_attempts (triggered_item, position, trigger, trigger_created_secs, \
             trigger_created_nanos, delivery, outcome, inbox_item, reason) \
             SELECT $1, coalesce((SELECT max(position) + 1 FROM trigger_attempts WHERE triggered_item = $1), 0), \
             $2, $3, $4, $5, $6, $7, $8 FROM gone, item RETURNING 1) \
             SELECT count(*) FROM gone"
        );
        let params: [&(dyn ToSql + Sync); 10] = [
            &delivery.item,
            &delivery.trigger,
            &delivery.trigger_created.secs,
            &nanos,
            &delivery.id,
            &kind,
            &inbox_item,
            &reason,
            key,
            &delivery.owner,
        ];
        let mut attempt = 0;
        let removed: i64 = loop {
            let client = self.pool.get().await?;
            match client.fetch_one(&sql, &params).await {
                Ok(row) => break row.try_get(0)?,
                Err(e) => {
                    let e = PgError::from(e);
                    // a collision of attempt numbers is run again as a conflict is
                    if !(e.is_retryable() || e.code() == Some("23505")) {
                        return Err(e.into());
                    }
                    super::pause_to_retry(&mut attempt, e).await?;
                }
            }
        };
        Ok(if removed > 0 {
            Written::committed(())
        } else {
            Written::unchanged(())
        })
    }

    /// Removes a pending delivery or queued e-mail without recording anything.
    async fn remove_pending(&self, k: &QueueKey) -> Result<Written<()>> {
        let k = &PgQueueKey::of(k)?;
        Ok(transaction!(self, |tx| {
            Ok(if Self::remove_pending_in(&tx, k).await? {
                Written::committed(())
            } else {
                Written::unchanged(())
            })
        })?)
    }

    /// The failed deliveries of the account's triggered items `ids` become pending again
    /// (same delivery id, fresh budget), unless their trigger is gone; the failed attempts
    /// are taken off the items.
    async fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<Written<()>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            // the items' rows too: a delivery of one of them finishing now waits (it numbers
            // its attempt under that lock)
            tx.run(
                "SELECT 1 FROM triggered_items WHERE account = $1 AND id = ANY($2) ORDER BY id FOR NO KEY UPDATE",
                &[&account, &ids],
            )
            .await?;
            let failed = tx
                .fetch_all(
                    "SELECT a.triggered_item, a.position, a.delivery, t.id AS trigger, t.created_secs, \
                     t.created_nanos, t.kind, t.email_address \
                     FROM trigger_attempts a JOIN triggered_items i ON i.id = a.triggered_item \
                     JOIN triggers t ON t.id = a.trigger AND t.account = i.account \
                     WHERE i.account = $1 AND i.id = ANY($2) \
                     AND a.outcome IN ('inbox_failed', 'email_failed', 'push_failed', 'webhook_failed') \
                     ORDER BY a.triggered_item, a.position",
                    &[&account, &ids],
                )
                .await?;
            if failed.is_empty() {
                return Ok(Written::unchanged(()));
            }
            for row in &failed {
                let item: Uuid = row.try_get("triggered_item")?;
                let position: i32 = row.try_get("position")?;
                let trigger: Uuid = row.try_get("trigger")?;
                let kind: String = row.try_get("kind")?;
                let delivery = Delivery {
                    id: row.try_get("delivery")?,
                    owner: account,
                    item,
                    trigger,
                    trigger_created: instant(row, "created")?,
                    email: kind == "email",
                    failures: 0,
                    not_before: at_once(),
                };
                tx.run(
                    "DELETE FROM trigger_attempts WHERE triggered_item = $1 AND position = $2",
                    &[&item, &position],
                )
                .await?;
                if delivery.email {
                    let to: String = row.try_get("email_address")?;
                    let queued = QueuedEmail::new(account, Some(trigger), EmailKind::Triggered { delivery, to });
                    insert_email(&tx, &queued).await?;
                } else {
                    insert_delivery(&tx, &delivery).await?;
                }
            }
            Ok(Written::committed(()))
        })?)
    }

    async fn release_deliveries(&self, keys: &[QueueKey]) -> Result<()> {
        let ids = keys_of(keys, "pending deliveries", |k| match k {
            PgQueueKey::Delivery(id) => Some(id),
            PgQueueKey::Email(_) => None,
        })?;
        Ok(self.give_back("deliveries", "id", &ids).await?)
    }
}
