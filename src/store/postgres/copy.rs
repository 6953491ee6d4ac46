//! PostgreSQL's side of moving between engines ([`crate::store::copy`]): a database dumped
//! as the stream of records ([`PgSource`]), and a stream loaded into an empty database
//! ([`PgTarget`]).
//!
//! * A dump reads one snapshot (a `REPEATABLE READ`, read-only transaction) through portals,
//!   a page of rows at a time, so memory stays bounded whatever the tables hold; the kinds
//!   come in [`crate::store::copy::Kind`] order, the queues in queue order.
//! * A load is one transaction: it locks the tables, refuses a database that holds data,
//!   inserts the records as they come, moves the access-key sequence past the keys loaded,
//!   and then dumps the database again inside the same transaction, for the tally the copy
//!   is checked by. It commits only when kept ([`Loaded::keep`]), so a copy that fails
//!   anywhere (a broken stream, a constraint, a mismatch) leaves the database as it was.
//! * Both refuse a database that a Pigeonhole server is connected to: a copy is of a stopped
//!   server's data.

use super::accounts::{account_from, key_from, password_columns, ACCOUNT_COLUMNS, KEY_COLUMNS};
use super::deliveries::{delivery_from, insert_attempt, insert_delivery, DELIVERY_COLUMNS};
use super::emails::{email_from, insert_email, stage_column, EMAIL_COLUMNS};
use super::inbox::{item_from, PgInbox, ITEM_COLUMNS};
use super::rows::{self, instant, to_bigint};
use super::scheduler::{
    attempt_from, scheduled_from, triggered_from, PgScheduler, SCHEDULED_COLUMNS, TRIGGERED_COLUMNS,
};
use super::sql::Sql;
use super::triggers::{put_trigger, trigger_from, TRIGGER_COLUMNS};
use super::{config_of, Connection, PgError, PgStore};
use crate::domain::account::KeySecret;
use crate::domain::scheduler::models::TimeZoneSetting;
use crate::store::copy::{CopyError, Dump, Load, Loaded, Record, Service, Tally, STAGES};
use deadpool_postgres::Transaction;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::Row;
use uuid::Uuid;

/// Where records go as they are dumped: on to a load, or only counted (a load's check).
enum Sink<'a> {
    Channel(&'a mpsc::Sender<Record>),
    Tally(&'a mut Tally),
}

impl Sink<'_> {
    async fn put(&mut self, record: Record) -> Result<(), CopyError> {
        match self {
            Sink::Channel(out) => out.send(record).await.map_err(|_| CopyError::Stopped),
            Sink::Tally(tally) => {
                tally.add(&record);
                Ok(())
            }
        }
    }
}

impl From<PgError> for CopyError {
    fn from(e: PgError) -> CopyError {
        CopyError::Store(e.into())
    }
}

/// Rows of a page of a table without bodies.
const PAGE: i32 = 500;
/// Rows of a page of a table with bodies (items of up to a few MiB each).
const BODY_PAGE: i32 = 16;

/// Every table that holds data (what a load locks and must find empty).
const DATA_TABLES: [&str; 15] = [
    "inbox_accounts",
    "scheduler_accounts",
    "inbox_access_keys",
    "scheduler_access_keys",
    "inbox_items",
    "inbox_idempotency_keys",
    "scheduler_settings",
    "scheduled_items",
    "triggered_items",
    "trigger_attempts",
    "triggers",
    "delivery_targets",
    "deliveries",
    "email_queue",
    "payment_events",
];

fn service_prefix(service: Service) -> &'static str {
    match service {
        Service::Inbox => "inbox",
        Service::Scheduler => "scheduler",
    }
}

/// Connects to a database to copy from: one that holds Pigeonhole's schema (a database
/// without it is refused rather than given one), migrated to this version's.
async fn connect_source(connection: &Connection) -> Result<PgStore, CopyError> {
    let (config, tls) = config_of(connection)?;
    let (client, driver) = config.connect(tls).await.map_err(PgError::from)?;
    let driver = tokio::spawn(driver);
    let found: Option<String> = client
        .query_one("SELECT to_regclass('schema_migrations')::text", &[])
        .await
        .map_err(PgError::from)?
        .try_get(0)
        .map_err(PgError::from)?;
    drop(client);
    driver.abort();
    if found.is_none() {
        return Err(CopyError::Invalid(format!(
            "the database {} holds no Pigeonhole data (it has no schema_migrations table)",
            connection.database
        )));
    }
    Ok(PgStore::connect(connection).await?.0)
}

/// Refuses a database another Pigeonhole process is connected to (waiting a little for the
/// sessions of a server that has just stopped to end).
async fn check_alone(client: &tokio_postgres::Client, database: &str) -> Result<(), CopyError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let others: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'pigeonhole' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .map_err(PgError::from)?
            .try_get(0)
            .map_err(PgError::from)?;
        if others == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CopyError::Invalid(format!(
                "{others} other Pigeonhole sessions are connected to the database {database}: stop its servers \
                 before copying"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A database to copy from: one that holds Pigeonhole's schema (migrated to this version's)
/// and that no Pigeonhole server is connected to (checked when it is dumped).
pub struct PgSource {
    pg: PgStore,
    database: String,
}

impl PgSource {
    pub async fn open(connection: &Connection) -> Result<PgSource, CopyError> {
        Ok(PgSource {
            pg: connect_source(connection).await?,
            database: connection.database.clone(),
        })
    }
}

/// Sends every record of the database to `out`, from one snapshot.
#[async_trait::async_trait]
impl Dump for PgSource {
    async fn dump(self: Box<Self>, out: mpsc::Sender<Record>) -> Result<(), CopyError> {
        let mut client = self.pg.pool.get().await.map_err(PgError::from)?;
        check_alone(&client, &self.database).await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(PgError::from)?;
        dump_in(&tx, &mut Sink::Channel(&out)).await
    }
}

/// Puts every row `sql` selects (with `params`), converted by `convert`, into `sink`, `page`
/// rows at a time.
async fn each(
    tx: &Transaction<'_>,
    sink: &mut Sink<'_>,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    page: i32,
    convert: impl Fn(&Row) -> Result<Record, PgError>,
) -> Result<(), CopyError> {
    let portal = tx.bind(sql, params).await.map_err(PgError::from)?;
    loop {
        let rows = tx.query_portal(&portal, page).await.map_err(PgError::from)?;
        for row in &rows {
            sink.put(convert(row)?).await?;
        }
        if rows.len() < page as usize {
            return Ok(());
        }
    }
}

/// Every record the transaction sees, in kind order.
async fn dump_in(tx: &Transaction<'_>, sink: &mut Sink<'_>) -> Result<(), CopyError> {
    if let Some(row) = tx
        .fetch_opt("SELECT secret FROM token_signing_key", &[])
        .await
        .map_err(PgError::from)?
    {
        sink.put(Record::SigningKey(row.try_get(0).map_err(PgError::from)?))
            .await?;
    }
    for service in [Service::Inbox, Service::Scheduler] {
        let sql = format!(
            "SELECT {ACCOUNT_COLUMNS}, payment_customer FROM {}_accounts ORDER BY id",
            service_prefix(service)
        );
        each(tx, sink, &sql, &[], PAGE, |row| {
            Ok(Record::Account {
                service,
                account: account_from(row)?,
                customer: row.try_get("payment_customer")?,
            })
        })
        .await?;
    }
    for service in [Service::Inbox, Service::Scheduler] {
        let sql = format!(
            "SELECT {KEY_COLUMNS} FROM {}_access_keys ORDER BY account, seq, id",
            service_prefix(service)
        );
        each(tx, sink, &sql, &[], PAGE, |row| {
            Ok(Record::AccessKey {
                service,
                account: row.try_get("account")?,
                key: key_from(row)?,
            })
        })
        .await?;
    }
    let sql =
        format!("SELECT account, {ITEM_COLUMNS} FROM inbox_items ORDER BY account, created_secs, created_nanos, seq");
    each(tx, sink, &sql, &[], BODY_PAGE, |row| {
        Ok(Record::InboxItem {
            account: row.try_get("account")?,
            item: item_from(row)?,
        })
    })
    .await?;
    let sql = "SELECT account, idempotency_key, item FROM inbox_idempotency_keys ORDER BY account, idempotency_key";
    each(tx, sink, sql, &[], PAGE, |row| {
        Ok(Record::Idempotency {
            account: row.try_get("account")?,
            key: row.try_get("idempotency_key")?,
            item: row.try_get("item")?,
        })
    })
    .await?;
    let sql = "SELECT account, utc_offset, name, summer FROM scheduler_settings ORDER BY account";
    each(tx, sink, sql, &[], PAGE, |row| {
        Ok(Record::Settings {
            account: row.try_get("account")?,
            setting: TimeZoneSetting {
                offset: row.try_get("utc_offset")?,
                name: super::rows::text_of_bytes(row, "name")?,
                summer: row.try_get("summer")?,
            },
        })
    })
    .await?;
    let sql =
        format!("SELECT {SCHEDULED_COLUMNS} FROM scheduled_items ORDER BY account, created_secs, created_nanos, seq");
    each(tx, sink, &sql, &[], BODY_PAGE, |row| {
        Ok(Record::Scheduled {
            item: scheduled_from(row)?,
            due: instant(row, "due")?,
        })
    })
    .await?;
    dump_triggered(tx, sink).await?;
    let sql = format!("SELECT {TRIGGER_COLUMNS} FROM triggers ORDER BY account, seq");
    each(tx, sink, &sql, &[], PAGE, |row| Ok(Record::Trigger(trigger_from(row)?))).await?;
    let sql = "SELECT triggered_item, kind, account, triggers FROM delivery_targets ORDER BY kind, seq";
    each(tx, sink, sql, &[], PAGE, |row| {
        let kind: String = row.try_get("kind")?;
        Ok(Record::Targets {
            item: row.try_get("triggered_item")?,
            owner: row.try_get("account")?,
            email: match kind.as_str() {
                "email" => true,
                "inbox" => false,
                other => return Err(PgError::Corrupt(format!("delivery targets of kind {other:?}"))),
            },
            triggers: row.try_get("triggers")?,
        })
    })
    .await?;
    let sql = format!("SELECT {DELIVERY_COLUMNS} FROM deliveries ORDER BY seq");
    each(tx, sink, &sql, &[], PAGE, |row| {
        Ok(Record::Delivery(delivery_from(row)?))
    })
    .await?;
    let sql = format!("SELECT {EMAIL_COLUMNS} FROM email_queue WHERE stage = $1 ORDER BY seq");
    for stage in STAGES {
        let column = stage_column(stage);
        each(tx, sink, &sql, &[&column], BODY_PAGE, |row| {
            Ok(Record::Email(email_from(row)?))
        })
        .await?;
    }
    let sql = "SELECT id, failed_event FROM payment_events ORDER BY id COLLATE \"C\"";
    each(tx, sink, sql, &[], PAGE, |row| {
        Ok(Record::PaymentEvent {
            id: row.try_get("id")?,
            failed: row.try_get("failed_event")?,
        })
    })
    .await?;
    Ok(())
}

/// Triggered items with their attempts (in the order recorded) and occurrences, a page at
/// a time.
async fn dump_triggered(tx: &Transaction<'_>, sink: &mut Sink<'_>) -> Result<(), CopyError> {
    let sql = format!(
        "SELECT {TRIGGERED_COLUMNS}, scheduled_id, occurrence_secs, occurrence_nanos FROM triggered_items \
         ORDER BY account, created_secs, created_nanos, triggered_secs, triggered_nanos, seq"
    );
    let portal = tx.bind(sql.as_str(), &[]).await.map_err(PgError::from)?;
    loop {
        let rows = tx.query_portal(&portal, BODY_PAGE).await.map_err(PgError::from)?;
        let ids: Vec<Uuid> = rows
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()
            .map_err(PgError::from)?;
        let attempts = tx
            .fetch_all(
                "SELECT triggered_item, trigger, trigger_created_secs, trigger_created_nanos, delivery, outcome, \
                 inbox_item, reason FROM trigger_attempts WHERE triggered_item = ANY($1) \
                 ORDER BY triggered_item, position",
                &[&ids],
            )
            .await
            .map_err(PgError::from)?;
        let mut by_item: std::collections::HashMap<Uuid, Vec<_>> = std::collections::HashMap::new();
        for row in &attempts {
            let item: Uuid = row.try_get("triggered_item").map_err(PgError::from)?;
            by_item.entry(item).or_default().push(attempt_from(row)?);
        }
        for row in &rows {
            let mut item = triggered_from(row)?;
            item.attempts = by_item.remove(&item.id).unwrap_or_default();
            let scheduled: Option<Uuid> = row.try_get("scheduled_id").map_err(PgError::from)?;
            let occurrence = match (scheduled, rows::optional_instant(row, "occurrence")?) {
                (Some(id), Some(at)) => Some((id, at)),
                (None, None) => None,
                _ => {
                    return Err(
                        PgError::Corrupt(format!("half an occurrence of the triggered item {}", item.id)).into(),
                    )
                }
            };
            sink.put(Record::Triggered { item, occurrence }).await?;
        }
        if rows.len() < BODY_PAGE as usize {
            return Ok(());
        }
    }
}

/// A database to copy into (the schema made or migrated): it must hold no data, and no
/// Pigeonhole server may be connected to it (both checked when it is loaded).
pub struct PgTarget {
    pg: PgStore,
    database: String,
}

impl PgTarget {
    pub async fn open(connection: &Connection) -> Result<PgTarget, CopyError> {
        Ok(PgTarget {
            pg: PgStore::connect(connection).await?.0,
            database: connection.database.clone(),
        })
    }

    /// The load's transaction: refuses a database with data, inserts what `records` gives,
    /// moves the access-key sequence on, dumps what it wrote and hands that tally over
    /// (`tallied`); then commits if `keep` says so (dropped: rolled back).
    async fn load_in(
        self,
        records: &mut mpsc::Receiver<Record>,
        tallied: oneshot::Sender<Tally>,
        keep: oneshot::Receiver<()>,
    ) -> Result<(), CopyError> {
        let mut client = self.pg.pool.get().await.map_err(PgError::from)?;
        check_alone(&client, &self.database).await?;
        let tx = client.transaction().await.map_err(PgError::from)?;
        tx.batch_execute(&format!(
            "LOCK TABLE {}, token_signing_key IN EXCLUSIVE MODE",
            DATA_TABLES.join(", ")
        ))
        .await
        .map_err(PgError::from)?;
        for table in DATA_TABLES {
            let rows: bool = tx
                .fetch_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
                .await
                .map_err(PgError::from)?
                .try_get(0)
                .map_err(PgError::from)?;
            if rows {
                return Err(CopyError::NotEmpty(format!(
                    "the database {} has rows in {table}",
                    self.database
                )));
            }
        }
        while let Some(record) = records.recv().await {
            // a record PostgreSQL refuses is named; the transaction is rolled back: nothing
            // of the copy is kept
            insert(&tx, &record).await.map_err(|e| match e {
                CopyError::Store(why) => CopyError::Refused {
                    kind: record.kind().name(),
                    record: record.key(),
                    why,
                },
                e => e,
            })?;
        }
        tx.run(
            "SELECT setval('access_key_seq', GREATEST((SELECT last_value FROM access_key_seq), \
             (SELECT coalesce(max(seq), 0) FROM (SELECT seq FROM inbox_access_keys UNION ALL \
             SELECT seq FROM scheduler_access_keys) AS keys)))",
            &[],
        )
        .await
        .map_err(PgError::from)?;
        let mut tally = Tally::default();
        dump_in(&tx, &mut Sink::Tally(&mut tally)).await?;
        if tallied.send(tally).is_err() || keep.await.is_err() {
            // not kept: the transaction is rolled back as it is dropped
            return Ok(());
        }
        tx.commit().await.map_err(PgError::from)?;
        Ok(())
    }
}

/// The load runs in a task of its own that holds its transaction open until the copy says
/// whether to keep it.
#[async_trait::async_trait]
impl Load for PgTarget {
    fn keeps_occurrences(&self) -> bool {
        true
    }

    async fn load(self: Box<Self>, mut records: mpsc::Receiver<Record>) -> Result<Box<dyn Loaded>, CopyError> {
        let (tallied, tally) = oneshot::channel();
        let (keep, kept) = oneshot::channel();
        let task = tokio::spawn(async move { self.load_in(&mut records, tallied, kept).await });
        match tally.await {
            Ok(tally) => Ok(Box::new(PgLoaded { tally, keep, task })),
            // the load ended before its tally: its error
            Err(_) => Err(joined(task.await).err().unwrap_or(CopyError::Stopped)),
        }
    }
}

/// A load written and read back inside its open transaction: kept, it commits; dropped, the
/// transaction is rolled back.
struct PgLoaded {
    tally: Tally,
    keep: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), CopyError>>,
}

#[async_trait::async_trait]
impl Loaded for PgLoaded {
    fn tally(&self) -> &Tally {
        &self.tally
    }

    async fn keep(self: Box<Self>) -> Result<(), CopyError> {
        let _ = self.keep.send(());
        joined(self.task.await)
    }
}

fn joined(r: Result<Result<(), CopyError>, tokio::task::JoinError>) -> Result<(), CopyError> {
    r.unwrap_or_else(|e| Err(CopyError::Invalid(format!("the load's task failed: {e}"))))
}

/// Inserts one record (a constraint the record breaks fails the load, naming it).
async fn insert(tx: &Transaction<'_>, record: &Record) -> Result<(), CopyError> {
    match record {
        Record::SigningKey(key) => {
            tx.run("DELETE FROM token_signing_key", &[])
                .await
                .map_err(PgError::from)?;
            tx.run("INSERT INTO token_signing_key (secret) VALUES ($1)", &[key])
                .await
                .map_err(PgError::from)?;
        }
        Record::Account {
            service,
            account,
            customer,
        } => {
            let (kind, hash) = password_columns(&account.password_hash);
            let created_nanos = rows::nanos(account.created)?;
            let last_login_secs = account.last_login.map(|t| t.secs);
            let last_login_nanos = account.last_login.map(rows::nanos).transpose()?;
            let epoch = to_bigint(account.epoch, "epoch")?;
            tx.run(
                &format!(
                    "INSERT INTO {}_accounts ({ACCOUNT_COLUMNS}, payment_customer) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                    service_prefix(*service)
                ),
                &[
                    &account.id,
                    &account.username,
                    &kind,
                    &hash,
                    &account.created.secs,
                    &created_nanos,
                    &last_login_secs,
                    &last_login_nanos,
                    &epoch,
                    customer,
                ],
            )
            .await
            .map_err(PgError::from)?;
        }
        Record::AccessKey { service, account, key } => {
            let nanos = rows::nanos(key.created)?;
            let seq = to_bigint(key.seq, "access key seq")?;
            let permissions = i64::from(key.permissions.0);
            let (digest, bcrypt): (Option<&[u8]>, Option<&str>) = match &key.secret {
                KeySecret::Digest(d) => (Some(d.as_slice()), None),
                KeySecret::LegacyBcrypt(h) => (None, Some(h.as_str())),
            };
            tx.run(
                &format!(
                    "INSERT INTO {}_access_keys ({KEY_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                    service_prefix(*service)
                ),
                &[
                    account,
                    &key.id,
                    &key.name.as_bytes(),
                    &key.created.secs,
                    &nanos,
                    &seq,
                    &permissions,
                    &digest,
                    &bcrypt,
                ],
            )
            .await
            .map_err(PgError::from)?;
        }
        Record::InboxItem { account, item } => PgInbox::insert(tx, *account, item).await?,
        Record::Idempotency { account, key, item } => {
            tx.run(
                "INSERT INTO inbox_idempotency_keys (account, idempotency_key, item) VALUES ($1, $2, $3)",
                &[account, key, item],
            )
            .await
            .map_err(PgError::from)?;
        }
        Record::Settings { account, setting } => {
            tx.run(
                "INSERT INTO scheduler_settings (account, utc_offset, name, summer) VALUES ($1, $2, $3, $4)",
                &[account, &setting.offset, &setting.name.as_bytes(), &setting.summer],
            )
            .await
            .map_err(PgError::from)?;
        }
        Record::Scheduled { item, due } => {
            if !PgScheduler::put_scheduled(tx, item, *due).await? {
                return Err(CopyError::Invalid(format!(
                    "the scheduled item {} is in the stream twice",
                    item.id
                )));
            }
        }
        Record::Triggered { item, occurrence } => {
            PgScheduler::insert_triggered(tx, item, *occurrence).await?;
            for (position, attempt) in item.attempts.iter().enumerate() {
                let position = i32::try_from(position)
                    .map_err(|_| CopyError::Invalid(format!("the triggered item {} has too many attempts", item.id)))?;
                insert_attempt(tx, item.id, position, attempt).await?;
            }
        }
        Record::Trigger(trigger) => put_trigger(tx, trigger, true).await?,
        Record::Targets {
            item,
            owner,
            email,
            triggers,
        } => {
            let kind = if *email { "email" } else { "inbox" };
            tx.run(
                "INSERT INTO delivery_targets (triggered_item, kind, account, triggers) VALUES ($1, $2, $3, $4)",
                &[item, &kind, owner, triggers],
            )
            .await
            .map_err(PgError::from)?;
        }
        Record::Delivery(delivery) => insert_delivery(tx, delivery).await?,
        Record::Email(email) => {
            insert_email(tx, email).await?;
        }
        Record::PaymentEvent { id, failed } => {
            tx.run(
                "INSERT INTO payment_events (id, failed_event) VALUES ($1, $2)",
                &[id, failed],
            )
            .await
            .map_err(PgError::from)?;
        }
    }
    Ok(())
}
