//! The scheduler's items: the time-zone setting (`scheduler_settings`), scheduled items with
//! the due index (`scheduled_items`, indexed on `(due_secs, due_nanos)`), triggered items
//! (`triggered_items`, one per occurrence) and triggering. The operations of the sled
//! store's `SchedulerStore` in `scheduler/items.rs`, with the same names, async, each one
//! transaction; the closures are `&mut dyn FnMut` (the agreed form: a retried transaction
//! calls them again). Counts are counted, not kept.
//!
//! Writes that compute a due instant read the account's setting under the account's row
//! lock, so a concurrent setting change cannot leave an item due under the zone it replaced.

use super::accounts::{PgAccounts, Service};
use super::rows::{self, from_bigint, instant, to_bigint};
use super::sql::Sql;
use super::triggers::triggers_of;
use super::{transaction, PgError, PgResult};
use crate::domain::scheduler::models::{
    targets_now, Day, Recurrence, ScheduledItem, Tickle, TimeOfDay, TimeZoneSetting, TriggeredItem,
};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use crate::store::api::{Feed, NextOccurrence, PageSize, ScheduledItems};
use crate::store::scheduler::{AddOutcome, ImportIds, ImportOutcome};
use crate::store::{Result, WaitDurable, Written};
use deadpool_postgres::Pool;
use deadpool_postgres::Transaction;
use std::collections::HashMap;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

/// The columns of a Tickle (see the schema), in this order.
const TICKLE_COLUMNS: &str =
    "content, day, time_of_day, recurrence_kind, recurrence_every, recurrence_day, recurrence_time";
pub(super) const SCHEDULED_COLUMNS: &str =
    "id, account, content, day, time_of_day, recurrence_kind, recurrence_every, \
     recurrence_day, recurrence_time, created_secs, created_nanos, server_time, due_secs, due_nanos";
pub(super) const TRIGGERED_COLUMNS: &str =
    "id, account, content, day, time_of_day, recurrence_kind, recurrence_every, \
     recurrence_day, recurrence_time, created_secs, created_nanos, triggered_secs, triggered_nanos";
const SCHEDULED_ORDER: &str = "ORDER BY created_secs, created_nanos, seq";
const TRIGGERED_ORDER: &str = "ORDER BY created_secs, created_nanos, triggered_secs, triggered_nanos, seq";

/// A Tickle as column values.
struct TickleColumns {
    content: Vec<u8>,
    day: i64,
    time: Option<String>,
    kind: Option<&'static str>,
    every: Option<i64>,
    month_day: Option<i32>,
    recurrence_time: Option<String>,
}

impl TickleColumns {
    fn of(t: &Tickle) -> TickleColumns {
        let (kind, every, month_day, recurrence_time) = match t.recurrence {
            None => (None, None, None, None),
            Some(Recurrence::EveryDays { days, time }) => {
                (Some("days"), Some(i64::from(days)), None, time.map(|t| t.to_string()))
            }
            Some(Recurrence::EveryMonths { months, day, time }) => (
                Some("months"),
                Some(i64::from(months)),
                day.map(|d| d as i32),
                time.map(|t| t.to_string()),
            ),
        };
        TickleColumns {
            content: t.content.clone(),
            day: t.day.number(),
            time: t.time.map(|t| t.to_string()),
            kind,
            every,
            month_day,
            recurrence_time,
        }
    }

    /// The values in [`TICKLE_COLUMNS`] order.
    fn values(&self) -> [&(dyn ToSql + Sync); 7] {
        [
            &self.content,
            &self.day,
            &self.time,
            &self.kind,
            &self.every,
            &self.month_day,
            &self.recurrence_time,
        ]
    }
}

fn time_of_day(text: Option<String>, what: &str) -> PgResult<Option<TimeOfDay>> {
    text.map(|t| TimeOfDay::parse(&t).ok_or_else(|| PgError::Corrupt(format!("{what} {t:?}"))))
        .transpose()
}

fn tickle_from(row: &Row) -> PgResult<Tickle> {
    let day: i64 = row.try_get("day")?;
    let kind: Option<String> = row.try_get("recurrence_kind")?;
    let every: Option<i64> = row.try_get("recurrence_every")?;
    let month_day: Option<i32> = row.try_get("recurrence_day")?;
    let recurrence_time = time_of_day(row.try_get("recurrence_time")?, "recurrence time")?;
    let recurrence = match (kind.as_deref(), every) {
        (None, None) => None,
        (Some("days"), Some(n)) => Some(Recurrence::EveryDays {
            days: from_bigint(n, "recurrence days")?,
            time: recurrence_time,
        }),
        (Some("months"), Some(n)) => Some(Recurrence::EveryMonths {
            months: from_bigint(n, "recurrence months")?,
            day: month_day
                .map(|d| u32::try_from(d).map_err(|_| PgError::Corrupt(format!("recurrence day {d}"))))
                .transpose()?,
            time: recurrence_time,
        }),
        (k, n) => return Err(PgError::Corrupt(format!("recurrence {k:?} every {n:?}"))),
    };
    Ok(Tickle {
        content: row.try_get("content")?,
        day: Day::from_number(day).ok_or_else(|| PgError::Corrupt(format!("day number {day}")))?,
        time: time_of_day(row.try_get("time_of_day")?, "time of day")?,
        recurrence,
    })
}

pub(super) fn scheduled_from(row: &Row) -> PgResult<ScheduledItem> {
    Ok(ScheduledItem {
        id: row.try_get("id")?,
        owner: row.try_get("account")?,
        tickle: tickle_from(row)?,
        created: instant(row, "created")?,
        server_time: from_bigint(row.try_get("server_time")?, "server time")?,
    })
}

/// A triggered item without its attempts (read separately).
pub(super) fn triggered_from(row: &Row) -> PgResult<TriggeredItem> {
    Ok(TriggeredItem {
        id: row.try_get("id")?,
        owner: row.try_get("account")?,
        tickle: tickle_from(row)?,
        created: instant(row, "created")?,
        triggered: instant(row, "triggered")?,
        attempts: Vec::new(),
    })
}

/// The attempt in a row of `trigger_attempts`.
pub(super) fn attempt_from(row: &Row) -> PgResult<crate::domain::scheduler::models::Attempt> {
    use crate::domain::scheduler::models::{Attempt, Outcome};
    let outcome: String = row.try_get("outcome")?;
    let inbox_item: Option<Uuid> = row.try_get("inbox_item")?;
    let reason: Option<Vec<u8>> = row.try_get("reason")?;
    let reason = reason
        .map(String::from_utf8)
        .transpose()
        .map_err(|_| PgError::Corrupt("attempt reason: not UTF-8".into()))?;
    let outcome = match (outcome.as_str(), inbox_item, reason) {
        ("inbox_added", Some(id), None) => Outcome::InboxAdded(id),
        ("inbox_failed", None, Some(why)) => Outcome::InboxFailed(why),
        ("email_sent", None, None) => Outcome::EmailSent,
        ("email_failed", None, Some(why)) => Outcome::EmailFailed(why),
        ("push_sent", None, None) => Outcome::PushSent,
        ("push_failed", None, Some(why)) => Outcome::PushFailed(why),
        ("webhook_sent", None, None) => Outcome::WebhookSent,
        ("webhook_failed", None, Some(why)) => Outcome::WebhookFailed(why),
        (o, _, _) => return Err(PgError::Corrupt(format!("attempt outcome {o:?}"))),
    };
    Ok(Attempt {
        trigger: row.try_get("trigger")?,
        trigger_created: instant(row, "trigger_created")?,
        delivery: row.try_get("delivery")?,
        outcome,
    })
}

/// Items triggered in one transaction at most (a round of the triggerer is cut into such).
const TRIGGER_ROUND: usize = 64;

/// What triggering needs of an owner, read once per transaction: the ids of its triggers
/// receiving now (over HTTP, by e-mail) and its time zone.
struct OwnerNow {
    inbox: Vec<Uuid>,
    email: Vec<Uuid>,
    settings: TimeZoneSetting,
}

/// The scheduler service's items (and its accounts).
#[derive(Clone)]
pub struct PgScheduler {
    pub(super) pool: Pool,
    pub accounts: PgAccounts,
    /// Who claims due items, deliveries and e-mails: one id per [`super::PgStore`] (per
    /// process).
    pub(super) claimant: String,
    /// How long a claim holds unless renewed.
    pub(super) lease: std::time::Duration,
}

impl PgScheduler {
    pub(super) fn new(pool: Pool, claimant: String, lease: std::time::Duration) -> PgScheduler {
        PgScheduler {
            accounts: PgAccounts::new(pool.clone(), Service::Scheduler),
            pool,
            claimant,
            lease,
        }
    }

    pub(super) async fn settings_in(tx: &Transaction<'_>, account: Uuid) -> PgResult<TimeZoneSetting> {
        let row = tx
            .fetch_opt(
                "SELECT utc_offset, name, summer FROM scheduler_settings WHERE account = $1",
                &[&account],
            )
            .await?;
        Ok(match row {
            Some(row) => TimeZoneSetting {
                offset: row.try_get(0)?,
                name: super::rows::text_of_bytes(&row, "name")?,
                summer: row.try_get(2)?,
            },
            None => TimeZoneSetting::default(),
        })
    }

    async fn scheduled_in(
        tx: &Transaction<'_>,
        account: Uuid,
        id: Uuid,
    ) -> PgResult<Option<(ScheduledItem, Timestamp)>> {
        let row = tx
            .fetch_opt(
                &format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?;
        match row {
            Some(row) => Ok(Some((scheduled_from(&row)?, instant(&row, "due")?))),
            None => Ok(None),
        }
    }

    /// Triggers in `tx` (their owners' rows locked) each entry of `round` whose item is still
    /// due at `now`, in order: the triggered copy, the delivery targets of this moment, and the
    /// item deleted or, when `next` gives its next occurrence, moved there; `None` for an
    /// entry whose item is gone or no longer due. In a few statements whatever the round's
    /// length (issue 30 point 7): the items read together, the copies inserted together, each
    /// owner's targets and time zone read once and its targets of a kind inserted together,
    /// the items that do not recur deleted together (one that recurs is moved on its own).
    async fn trigger_round_in(
        tx: &Transaction<'_>,
        round: &[(Timestamp, Uuid, Uuid)],
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> PgResult<Vec<Option<TriggeredItem>>> {
        let ids: Vec<Uuid> = round.iter().map(|&(_, _, id)| id).collect();
        let mut found: HashMap<Uuid, (ScheduledItem, Timestamp)> = HashMap::with_capacity(ids.len());
        let rows = tx
            .fetch_all(
                &format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items WHERE id = ANY($1)"),
                &[&ids],
            )
            .await?;
        for row in &rows {
            let item = scheduled_from(row)?;
            found.insert(item.id, (item, instant(row, "due")?));
        }
        // each owner's targets and time zone, in the order the owners first appear
        let mut owners: Vec<(Uuid, OwnerNow)> = Vec::new();
        let mut copies = Vec::with_capacity(round.len());
        let mut occurrences = Vec::with_capacity(round.len());
        let mut done = Vec::new();
        let mut moved = Vec::new();
        for &(_, owner, id) in round {
            let Some((item, due)) = found
                .remove(&id)
                .filter(|(item, due)| item.owner == owner && *due <= now)
            else {
                copies.push(None);
                continue;
            };
            let at = match owners.iter().position(|(o, _)| *o == owner) {
                Some(at) => at,
                None => {
                    // the target list of kind 'inbox' holds every trigger delivered over HTTP
                    let (inbox, email) = targets_now(&triggers_of(tx, owner).await?);
                    let settings = Self::settings_in(tx, owner).await?;
                    owners.push((owner, OwnerNow { inbox, email, settings }));
                    owners.len() - 1
                }
            };
            match next(&item, &owners[at].1.settings) {
                Some(next) => moved.push(next),
                None => done.push(id),
            }
            occurrences.push((id, due));
            copies.push(Some(TriggeredItem::copy_of(&item, now)));
        }
        let triggered: Vec<(&TriggeredItem, Option<(Uuid, Timestamp)>)> = copies
            .iter()
            .flatten()
            .zip(occurrences)
            .map(|(copy, occurrence)| (copy, Some(occurrence)))
            .collect();
        Self::insert_triggered_all(tx, &triggered).await?;
        for (owner, now_of) in &owners {
            let items: Vec<Uuid> = triggered
                .iter()
                .filter(|(copy, _)| copy.owner == *owner)
                .map(|(copy, _)| copy.id)
                .collect();
            for (kind, list) in [("inbox", &now_of.inbox), ("email", &now_of.email)] {
                if !list.is_empty() {
                    tx.run(
                        "INSERT INTO delivery_targets (triggered_item, kind, account, triggers) \
                         SELECT t.item, $2, $3, $4 FROM unnest($1::uuid[]) WITH ORDINALITY AS t(item, n) ORDER BY t.n",
                        &[&items, &kind, owner, list],
                    )
                    .await?;
                }
            }
        }
        if !done.is_empty() {
            tx.run("DELETE FROM scheduled_items WHERE id = ANY($1)", &[&done])
                .await?;
        }
        for (item, due) in &moved {
            Self::put_scheduled(tx, item, *due).await?;
        }
        Ok(copies)
    }

    /// Stores `item` (new, or replacing its earlier version, keeping its place in the
    /// listing) due at `due`; answers whether it is new.
    pub(super) async fn put_scheduled(tx: &Transaction<'_>, item: &ScheduledItem, due: Timestamp) -> PgResult<bool> {
        let t = TickleColumns::of(&item.tickle);
        let created_nanos = rows::nanos(item.created)?;
        let server_time = to_bigint(item.server_time, "server time")?;
        let due_nanos = rows::nanos(due)?;
        let mut values: Vec<&(dyn ToSql + Sync)> = vec![&item.id, &item.owner];
        values.extend(t.values());
        values.extend([
            &item.created.secs as &(dyn ToSql + Sync),
            &created_nanos,
            &server_time,
            &due.secs,
            &due_nanos,
        ]);
        // `xmax = 0` is true of a row this statement inserted (not of one it updated)
        let row = tx
            .fetch_opt(
                &format!(
                    "INSERT INTO scheduled_items ({SCHEDULED_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                     ON CONFLICT (id) DO UPDATE SET content = $3, day = $4, time_of_day = $5, recurrence_kind = $6, \
                     recurrence_every = $7, recurrence_day = $8, recurrence_time = $9, created_secs = $10, \
                     created_nanos = $11, server_time = $12, due_secs = $13, due_nanos = $14, \
                     claimed_by = NULL, lease_until = NULL \
                     WHERE scheduled_items.account = $2 \
                     RETURNING (xmax = 0)"
                ),
                &values,
            )
            .await?;
        match row {
            Some(row) => Ok(row.try_get(0)?),
            // the id is another account's item: nothing was written
            None => Err(PgError::Corrupt(format!(
                "the scheduled item id {} belongs to another account",
                item.id
            ))),
        }
    }

    /// Inserts a triggered item (without its attempts); `occurrence` is the scheduled item
    /// and due instant it is the copy of (`None` for a copy from elsewhere: an import).
    pub(super) async fn insert_triggered(
        tx: &Transaction<'_>,
        copy: &TriggeredItem,
        occurrence: Option<(Uuid, Timestamp)>,
    ) -> PgResult<()> {
        Self::insert_triggered_all(tx, &[(copy, occurrence)]).await
    }

    /// Inserts triggered items as [`Self::insert_triggered`] inserts one, in order, in one
    /// statement (each column as an array).
    async fn insert_triggered_all(
        tx: &Transaction<'_>,
        copies: &[(&TriggeredItem, Option<(Uuid, Timestamp)>)],
    ) -> PgResult<()> {
        if copies.is_empty() {
            return Ok(());
        }
        let n = copies.len();
        let (mut ids, mut accounts) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let mut tickles = Vec::with_capacity(n);
        let (mut created_secs, mut created_nanos) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut triggered_secs, mut triggered_nanos) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut scheduled, mut occurrence_secs, mut occurrence_nanos) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for (copy, occurrence) in copies {
            ids.push(copy.id);
            accounts.push(copy.owner);
            tickles.push(TickleColumns::of(&copy.tickle));
            created_secs.push(copy.created.secs);
            created_nanos.push(rows::nanos(copy.created)?);
            triggered_secs.push(copy.triggered.secs);
            triggered_nanos.push(rows::nanos(copy.triggered)?);
            scheduled.push(occurrence.map(|(id, _)| id));
            occurrence_secs.push(occurrence.map(|(_, due)| due.secs));
            occurrence_nanos.push(occurrence.map(|(_, due)| rows::nanos(due)).transpose()?);
        }
        let content: Vec<&[u8]> = tickles.iter().map(|t| t.content.as_slice()).collect();
        let day: Vec<i64> = tickles.iter().map(|t| t.day).collect();
        let time: Vec<Option<&str>> = tickles.iter().map(|t| t.time.as_deref()).collect();
        let kind: Vec<Option<&str>> = tickles.iter().map(|t| t.kind).collect();
        let every: Vec<Option<i64>> = tickles.iter().map(|t| t.every).collect();
        let month_day: Vec<Option<i32>> = tickles.iter().map(|t| t.month_day).collect();
        let recurrence_time: Vec<Option<&str>> = tickles.iter().map(|t| t.recurrence_time.as_deref()).collect();
        tx.run(
            &format!(
                "INSERT INTO triggered_items (id, account, {TICKLE_COLUMNS}, created_secs, created_nanos, \
                 triggered_secs, triggered_nanos, scheduled_id, occurrence_secs, occurrence_nanos) \
                 SELECT id, account, {TICKLE_COLUMNS}, created_secs, created_nanos, triggered_secs, \
                 triggered_nanos, scheduled_id, occurrence_secs, occurrence_nanos \
                 FROM unnest($1::uuid[], $2::uuid[], $3::bytea[], $4::bigint[], $5::text[], $6::text[], \
                 $7::bigint[], $8::integer[], $9::text[], $10::bigint[], $11::integer[], $12::bigint[], \
                 $13::integer[], $14::uuid[], $15::bigint[], $16::integer[]) WITH ORDINALITY \
                 AS t(id, account, {TICKLE_COLUMNS}, created_secs, created_nanos, triggered_secs, \
                 triggered_nanos, scheduled_id, occurrence_secs, occurrence_nanos, n) ORDER BY t.n"
            ),
            &[
                &ids,
                &accounts,
                &content,
                &day,
                &time,
                &kind,
                &every,
                &month_day,
                &recurrence_time,
                &created_secs,
                &created_nanos,
                &triggered_secs,
                &triggered_nanos,
                &scheduled,
                &occurrence_secs,
                &occurrence_nanos,
            ],
        )
        .await?;
        Ok(())
    }

    /// The account's scheduled items, in `tx`.
    pub(super) async fn scheduled_in_tx(tx: &Transaction<'_>, account: Uuid) -> PgResult<Vec<ScheduledItem>> {
        tx.fetch_all(
            &format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items WHERE account = $1 {SCHEDULED_ORDER}"),
            &[&account],
        )
        .await?
        .iter()
        .map(scheduled_from)
        .collect()
    }

    /// The attempts recorded on triggered items, in the order the sled store keeps them
    /// (`Attempt::order`: inbox, e-mail, push, webhook, then by the trigger's creation and
    /// id, then as recorded).
    async fn attempts_of(client: &impl Sql, items: &mut [TriggeredItem]) -> PgResult<()> {
        if items.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = items.iter().map(|i| i.id).collect();
        let rows = Self::attempt_rows(client, &ids).await?;
        Self::give_attempts(items, &rows)
    }

    /// The rows of the attempts recorded on the triggered items `ids`, in the order of
    /// [`Self::attempts_of`].
    async fn attempt_rows(client: &impl Sql, ids: &[Uuid]) -> PgResult<Vec<Row>> {
        Ok(client
            .fetch_all(
                "SELECT triggered_item, trigger, trigger_created_secs, trigger_created_nanos, delivery, outcome, \
                 inbox_item, reason FROM trigger_attempts WHERE triggered_item = ANY($1) \
                 ORDER BY triggered_item, CASE WHEN outcome IN ('inbox_added', 'inbox_failed') THEN 0 \
                 WHEN outcome IN ('email_sent', 'email_failed') THEN 1 WHEN outcome IN ('push_sent', 'push_failed') \
                 THEN 2 ELSE 3 END, trigger_created_secs, trigger_created_nanos, trigger, position",
                &[&ids],
            )
            .await?)
    }

    /// Gives each of `items` its attempts among `rows` (of [`Self::attempt_rows`]).
    fn give_attempts(items: &mut [TriggeredItem], rows: &[Row]) -> PgResult<()> {
        use crate::domain::scheduler::models::Attempt;
        let mut by_item: HashMap<Uuid, Vec<Attempt>> = HashMap::new();
        for row in rows {
            by_item
                .entry(row.try_get("triggered_item")?)
                .or_default()
                .push(attempt_from(row)?);
        }
        for item in items {
            item.attempts = by_item.remove(&item.id).unwrap_or_default();
        }
        Ok(())
    }
}

impl PgScheduler {}

/// Each write one transaction, under the account's row lock where it reads what it changes.
#[async_trait::async_trait]
impl ScheduledItems for PgScheduler {
    async fn settings(&self, account: Uuid) -> Result<TimeZoneSetting> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        Ok(Self::settings_in(&tx, account).await?)
    }

    /// Stores the settings and moves every scheduled item of the account to the due instant
    /// `due_of` computes under them, in one transaction.
    async fn put_settings(
        &self,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: &(dyn for<'a> Fn(&'a ScheduledItem) -> Timestamp + Send + Sync),
    ) -> Result<Written<()>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            tx.run(
                "INSERT INTO scheduler_settings (account, utc_offset, name, summer) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (account) DO UPDATE SET utc_offset = $2, name = $3, summer = $4",
                &[&account, &settings.offset, &settings.name.as_bytes(), &settings.summer],
            )
            .await?;
            let rows = tx
                .fetch_all(
                    &format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items WHERE account = $1"),
                    &[&account],
                )
                .await?;
            for row in &rows {
                let item = scheduled_from(row)?;
                let due = due_of(&item);
                if due != instant(row, "due")? {
                    let nanos = rows::nanos(due)?;
                    tx.run(
                        "UPDATE scheduled_items SET due_secs = $2, due_nanos = $3 WHERE id = $1",
                        &[&item.id, &due.secs, &nanos],
                    )
                    .await?;
                }
            }
            Ok(Written::committed(()))
        })?)
    }

    /// Stores a new scheduled item unless the account has `cap` scheduled items already;
    /// `due_of` gives its due instant under the account's settings.
    async fn add_scheduled(
        &self,
        item: &ScheduledItem,
        due_of: &(dyn for<'a> Fn(&'a TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, item.owner).await?;
            if let Some(cap) = cap {
                let n: i64 = tx
                    .fetch_one(
                        "SELECT count(*) FROM scheduled_items WHERE account = $1",
                        &[&item.owner],
                    )
                    .await?
                    .try_get(0)?;
                if from_bigint::<u64>(n, "count")? >= cap {
                    return Ok(Written::unchanged(AddOutcome::LimitReached));
                }
            }
            let due = due_of(&Self::settings_in(&tx, item.owner).await?);
            Self::put_scheduled(&tx, item, due).await?;
            Ok(Written::committed(AddOutcome::Added))
        })?)
    }

    async fn scheduled(&self, account: Uuid, id: Uuid) -> Result<Option<ScheduledItem>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(
                &format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?
            .as_ref()
            .map(scheduled_from)
            .transpose()?)
    }

    /// Replaces a scheduled item with what `edit` makes of it (and its due instant under the
    /// account's settings); `false` when the account has no such scheduled item.
    async fn edit_scheduled(
        &self,
        account: Uuid,
        id: Uuid,
        edit: &mut (dyn for<'a> FnMut(ScheduledItem, &'a TimeZoneSetting) -> (ScheduledItem, Timestamp) + Send),
    ) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let Some((item, _)) = Self::scheduled_in(&tx, account, id).await? else {
                return Ok(Written::unchanged(false));
            };
            let settings = Self::settings_in(&tx, account).await?;
            let (item, due) = edit(item, &settings);
            Self::put_scheduled(&tx, &item, due).await?;
            Ok(Written::committed(true))
        })?)
    }

    async fn triggered(&self, account: Uuid, id: Uuid) -> Result<Option<TriggeredItem>> {
        let client = self.pool.get().await?;
        // the item and its attempts asked for together (pipelined: one round trip, as each
        // delivery reads its item)
        let sql = format!("SELECT {TRIGGERED_COLUMNS} FROM triggered_items WHERE id = $1 AND account = $2");
        let ids = [id];
        let (row, attempts) = tokio::try_join!(
            async { Ok::<_, PgError>(client.fetch_opt(&sql, &[&id, &account]).await?) },
            Self::attempt_rows(&client, &ids),
        )?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut items = [triggered_from(&row)?];
        Self::give_attempts(&mut items, &attempts)?;
        let [item] = items;
        Ok(Some(item))
    }

    /// Deletes the account's scheduled or triggered item `id` (a triggered item with its
    /// pending deliveries, e-mails and target lists: by the foreign keys' cascades).
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let n = tx
                .run(
                    "DELETE FROM scheduled_items WHERE id = $1 AND account = $2",
                    &[&id, &account],
                )
                .await?;
            let n = match n {
                0 => {
                    tx.run(
                        "DELETE FROM triggered_items WHERE id = $1 AND account = $2",
                        &[&id, &account],
                    )
                    .await?
                }
                n => n,
            };
            Ok(if n > 0 {
                Written::committed(true)
            } else {
                Written::unchanged(false)
            })
        })?)
    }

    /// Deletes all triggered items of the account, with their pending deliveries.
    async fn delete_triggered_items(&self, account: Uuid) -> Result<Written<bool>> {
        let client = self.pool.get().await?;
        let n = client
            .run("DELETE FROM triggered_items WHERE account = $1", &[&account])
            .await?;
        Ok(if n > 0 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// The account's scheduled items in creation order.
    async fn scheduled_items(&self, account: Uuid) -> Result<Vec<ScheduledItem>> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        Ok(Self::scheduled_in_tx(&tx, account).await?)
    }

    /// One page of the account's scheduled items after the item `after`, in creation
    /// order (empty when `after` is no longer there).
    async fn scheduled_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<ScheduledItem>> {
        let client = self.pool.get().await?;
        let keys = "created_secs, created_nanos, seq";
        let rows = rows::page(
            &client,
            "scheduled_items",
            SCHEDULED_COLUMNS,
            keys,
            "content",
            account,
            after,
            size,
        )
        .await?;
        Ok(size.fill(rows.iter().map(scheduled_from))?)
    }

    /// The account's triggered items by original `created`, then by triggering time.
    async fn triggered_items(&self, account: Uuid) -> Result<Vec<TriggeredItem>> {
        let client = self.pool.get().await?;
        let mut items = client
            .fetch_all(
                &format!("SELECT {TRIGGERED_COLUMNS} FROM triggered_items WHERE account = $1 {TRIGGERED_ORDER}"),
                &[&account],
            )
            .await?
            .iter()
            .map(triggered_from)
            .collect::<PgResult<Vec<_>>>()?;
        Self::attempts_of(&client, &mut items).await?;
        Ok(items)
    }

    /// One page of the account's triggered items after the item `after`, in the order
    /// of [`PgScheduler::triggered_items`] (empty when `after` is no longer there).
    async fn triggered_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<TriggeredItem>> {
        let client = self.pool.get().await?;
        let keys = "created_secs, created_nanos, triggered_secs, triggered_nanos, seq";
        let rows = rows::page(
            &client,
            "triggered_items",
            TRIGGERED_COLUMNS,
            keys,
            "content",
            account,
            after,
            size,
        )
        .await?;
        let mut items = size.fill(rows.iter().map(triggered_from))?;
        Self::attempts_of(&client, &mut items).await?;
        Ok(items)
    }

    /// Runs one sync atomically: `decide` sees the account's scheduled items and settings
    /// as they are (under the account's row lock) and says what to delete and store.
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a, 'b> FnMut(&'a [ScheduledItem], &'b TimeZoneSetting) -> ScheduledChanges + Send),
    ) -> Result<Written<()>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let items = Self::scheduled_in_tx(&tx, account).await?;
            let settings = Self::settings_in(&tx, account).await?;
            let changes = decide(&items, &settings);
            if changes.delete.is_empty() && changes.put.is_empty() {
                return Ok(Written::unchanged(()));
            }
            if !changes.delete.is_empty() {
                tx.run(
                    "DELETE FROM scheduled_items WHERE account = $1 AND id = ANY($2)",
                    &[&account, &changes.delete],
                )
                .await?;
            }
            for (item, due) in &changes.put {
                if item.owner != account {
                    return Err(PgError::Corrupt(format!(
                        "a sync of {account} stores an item of {}",
                        item.owner
                    )));
                }
                Self::put_scheduled(&tx, item, *due).await?;
            }
            Ok(Written::committed(()))
        })?)
    }

    /// The earliest due instant (the triggerer sleeps until then).
    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(
                "SELECT due_secs, due_nanos FROM scheduled_items ORDER BY due_secs, due_nanos, id LIMIT 1",
                &[],
            )
            .await?
            .map(|row| instant(&row, "due"))
            .transpose()?)
    }

    /// How many scheduled items are due at `now`, counting at most `limit`.
    async fn due_count(&self, now: Timestamp, limit: usize) -> Result<usize> {
        let nanos = rows::nanos(now)?;
        let limit = rows::limit(limit);
        let client = self.pool.get().await?;
        let n: i64 = client
            .fetch_one(
                "SELECT count(*) FROM (SELECT 1 FROM scheduled_items WHERE (due_secs, due_nanos) <= ($1, $2) \
                 LIMIT $3) AS due",
                &[&now.secs, &nanos, &limit],
            )
            .await?
            .try_get(0)?;
        Ok(from_bigint(n, "due count")?)
    }

    /// Up to `limit` of the earliest entries of the due index (due instant, account, id)
    /// that no other process holds (what another process is triggering is not this one's
    /// next wake-up: the end of that claim is, `Coordination::claims_elsewhere_end`).
    async fn upcoming(&self, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        let limit = rows::limit(limit);
        let client = self.pool.get().await?;
        client
            .fetch_all(
                &format!(
                    "SELECT due_secs, due_nanos, account, id FROM scheduled_items WHERE {} \
                     ORDER BY due_secs, due_nanos, id LIMIT $1",
                    super::claims::claimable(2)
                ),
                &[&limit, &self.claimant],
            )
            .await?
            .iter()
            .map(|row| Ok((instant(row, "due")?, row.try_get("account")?, row.try_get("id")?)))
            .collect()
    }

    /// Triggers the item (`at`, `owner`, `id`, as [`Self::due_items`] read it) if it is still
    /// due at `now`, in one transaction: the triggered copy, the delivery targets of this
    /// moment, and the item deleted or, when `next` gives its next occurrence, moved there.
    /// `None` when the item is gone or no longer due. The copy is unique per (item,
    /// occurrence) in the database: a second process triggering the same occurrence fails
    /// with a unique violation (it waited on the row lock, so it normally sees the item moved
    /// and answers `None` instead).
    async fn trigger_item(
        &self,
        due: (Timestamp, Uuid, Uuid),
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> Result<Written<Option<TriggeredItem>>> {
        // a round of one
        let mut results = self.trigger_items(&[due], now, next).await;
        results.pop().unwrap_or(Ok(Written::unchanged(None)))
    }

    /// The entries in transactions of up to [`TRIGGER_ROUND`] items each, every owner's row
    /// locked once (in the order of their ids, so that two rounds never wait for each other):
    /// one commit for a round instead of one per item.
    async fn trigger_items(
        &self,
        due: &[(Timestamp, Uuid, Uuid)],
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> Vec<Result<Written<Option<TriggeredItem>>>> {
        let mut results = Vec::with_capacity(due.len());
        for round in due.chunks(TRIGGER_ROUND) {
            let copies = transaction!(self, |tx| {
                let mut owners: Vec<Uuid> = round.iter().map(|&(_, owner, _)| owner).collect();
                owners.sort_unstable();
                owners.dedup();
                self.accounts.lock_all(&tx, &owners).await?;
                Self::trigger_round_in(&tx, round, now, next).await
            });
            match copies {
                Ok(copies) => results.extend(copies.into_iter().map(|copy| {
                    Ok(match copy {
                        Some(copy) => Written::committed(Some(copy)),
                        None => Written::unchanged(None),
                    })
                })),
                Err(e) => {
                    results.push(Err(e.into()));
                    break;
                }
            }
        }
        results
    }

    /// (scheduled, triggered) items of the account.
    async fn counts(&self, account: Uuid) -> Result<(u64, u64)> {
        let client = self.pool.get().await?;
        let row = client
            .fetch_one(
                "SELECT (SELECT count(*) FROM scheduled_items WHERE account = $1), \
                        (SELECT count(*) FROM triggered_items WHERE account = $1)",
                &[&account],
            )
            .await?;
        Ok((
            from_bigint(row.try_get(0)?, "count")?,
            from_bigint(row.try_get(1)?, "count")?,
        ))
    }

    /// (scheduled, triggered) items of every account together.
    async fn total_counts(&self) -> Result<(u64, u64)> {
        let client = self.pool.get().await?;
        let row = client
            .fetch_one(
                "SELECT (SELECT count(*) FROM scheduled_items), (SELECT count(*) FROM triggered_items)",
                &[],
            )
            .await?;
        Ok((
            from_bigint(row.try_get(0)?, "count")?,
            from_bigint(row.try_get(1)?, "count")?,
        ))
    }

    /// Deletes the account and everything of it (items, triggers, settings, keys, pending
    /// deliveries and target lists by the cascades; its queued e-mails, which name it as
    /// their owner without a reference) in one transaction.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        Ok(transaction!(self, |tx| {
            let n = tx
                .run("DELETE FROM scheduler_accounts WHERE id = $1", &[&account])
                .await?;
            if n == 0 {
                return Ok(Written::unchanged(false));
            }
            tx.run("DELETE FROM email_queue WHERE owner = $1", &[&account]).await?;
            Ok(Written::committed(true))
        })?)
    }

    /// Up to `limit` (due instant, owner, item id) due at or before `now`, earliest first,
    /// for one of several processes (issue 21 point 3): entries that no other claimant holds
    /// (its own claims it gets again, renewed), claimed by this store's claimant until the
    /// database's clock passes its lease from now. Rows another transaction has locked are
    /// skipped (`FOR UPDATE SKIP LOCKED`), so concurrent claimants get disjoint entries; a
    /// claimant that dies loses its claims when their leases run out. Triggering the item
    /// ([`Self::trigger_item`]) moves or deletes it, which ends the claim.
    async fn due_items(&self, now: Timestamp, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        let nanos = rows::nanos(now)?;
        let limit = rows::limit(limit);
        let (claimant, lease) = (&self.claimant, super::emails::lease_micros(self.lease));
        let client = self.pool.get().await?;
        let mut claimed = client
            .fetch_all(
                "UPDATE scheduled_items SET claimed_by = $4, \
                 lease_until = now() + make_interval(secs => $5::bigint / 1e6) \
                 WHERE id IN (SELECT id FROM scheduled_items \
                              WHERE (due_secs, due_nanos) <= ($1, $2) \
                              AND (lease_until IS NULL OR lease_until < now() OR claimed_by = $4) \
                              ORDER BY due_secs, due_nanos, id LIMIT $3 FOR UPDATE SKIP LOCKED) \
                 RETURNING due_secs, due_nanos, account, id",
                &[&now.secs, &nanos, &limit, &claimant, &lease],
            )
            .await?
            .iter()
            .map(|row| Ok((instant(row, "due")?, row.try_get("account")?, row.try_get("id")?)))
            .collect::<PgResult<Vec<(Timestamp, Uuid, Uuid)>>>()?;
        super::stats::claimed(claimed.len() as u64, 0);
        claimed.sort();
        Ok(claimed)
    }

    fn check_import(&self, account: Uuid, ids: &ImportIds, cap: Option<u64>, new_before: u64) -> Result<ImportOutcome> {
        let runtime = tokio::runtime::Handle::current();
        Ok(runtime.block_on(self.check_entries(account, ids, cap, new_before))?)
    }

    /// One transaction: committed whole or not at all, so there are no batches to wait for
    /// (scheduler_import.rs).
    fn import(
        &self,
        account: Uuid,
        ids: &ImportIds,
        settings: Option<&TimeZoneSetting>,
        due_of: &(dyn Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
        entries: Feed<'_, SchedulerEntry>,
        _wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        Ok(self.import_entries(account, ids, settings, due_of, cap, entries)?)
    }
}
