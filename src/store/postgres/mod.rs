//! The PostgreSQL engine behind the traits of [`super::api`] (issue 21): connecting
//! (rustls or a Unix socket), a pool, the durability check, versioned migrations
//! ([`migrations`]) and the schema of every concern (`migrations/0001_schema.sql`), and each
//! trait implemented where its operations are: [`super::api::Accounts`] by [`PgAccounts`]
//! ([`accounts`]), [`super::api::InboxItems`] by [`PgInbox`] ([`inbox`]),
//! [`super::api::ScheduledItems`] by [`PgScheduler`] ([`scheduler`]; its imports in
//! `scheduler_import.rs`), `Triggers` and `PaymentEvents` (`triggers.rs`), `Deliveries`
//! (`deliveries.rs`), `Emails` ([`emails`]) and `Administration` by [`PgStore`]
//! ([`administration`]); what several processes share: the throttles ([`throttles`]), the
//! work that runs once ([`leader`]), wake-ups ([`notify`]), the signing key.
//!
//! Every write is one transaction and returns only after its COMMIT, with
//! `synchronous_commit` on: committed is durable, so a write answers a `Written` receipt
//! whose result is there at once (`Written::committed`). The read-check-write
//! sequences of one account are serialised by `SELECT … FOR NO KEY UPDATE` on the account's row,
//! and a transaction that fails with a serialization failure or a deadlock (SQLSTATE 40001,
//! 40P01) is run again, a bounded number of times ([`MAX_RETRIES`]). Imports are one
//! transaction each (blocking on the runtime of their blocking thread), so there are no
//! batches to wait for.
//!
//! Claims (several processes on one database, issue 21 point 3, issue 30 point 3, see
//! claims.rs): `due_items` claims the batch it answers; a pending delivery or queued e-mail
//! is claimed when its process starts on it (`claim_delivery`, `claim_email`: reading
//! claims nothing), for the store's short lease ([`PgStore::with_lease`]), which the
//! process's heartbeat renews while it lives; another process gets them once the lease ran
//! out. Postponing, finishing, removing and replacing end a claim. Queue keys are [`PgQueueKey`]s carried as the
//! store's opaque `QueueKey` bytes.
//!
//! No engine type leaves this module: errors are [`PgError`] (the store's `StoreError`
//! through the traits), rows become domain types here.

pub mod accounts;
pub mod administration;
mod claims;
mod connect;
pub(crate) mod copy;
mod deliveries;
pub mod emails;
mod imports;
pub mod inbox;
pub mod leader;
pub mod migrations;
pub mod notify;
mod open;
mod rows;
pub mod scheduler;
mod scheduler_import;
mod signing;
mod sql;
pub(crate) mod stats;
pub mod throttles;
mod tls;
mod triggers;

#[cfg(test)]
pub(crate) mod tests;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

pub use accounts::{PgAccounts, Service};
pub use connect::Bounds;
pub use copy::{PgSource, PgTarget};
pub use emails::PgQueueKey;
pub use inbox::PgInbox;
pub use notify::listen;
pub use open::{open, open_within};
pub use scheduler::PgScheduler;

/// Where and how to connect (made from `--database` by the launch code).
#[derive(Clone)]
pub struct Connection {
    pub user: String,
    pub password: Option<String>,
    /// The hosts, tried in order (failover: the first that answers and suits
    /// [`Connection::read_write`]), each with its port.
    pub hosts: Vec<(Host, u16)>,
    pub database: String,
    pub tls: TlsMode,
    /// `sslrootcert`, `sslcert` and `sslkey`.
    pub tls_files: TlsFiles,
    /// `target_session_attrs=read-write` (or `primary`): a host that takes no writes is
    /// passed over.
    pub read_write: bool,
    pub application_name: String,
    /// `options`: more of the session's settings (`-c name=value …`).
    pub options: Option<String>,
    pub bounds: Bounds,
}

impl Connection {
    /// A connection to `database` on one host, with every other part as by default.
    pub fn new(user: &str, host: Host, port: u16, database: &str, tls: TlsMode) -> Connection {
        Connection {
            user: user.to_owned(),
            password: None,
            hosts: vec![(host, port)],
            database: database.to_owned(),
            tls,
            tls_files: TlsFiles::default(),
            read_write: false,
            application_name: "pigeonhole".to_owned(),
            options: None,
            bounds: Bounds::default(),
        }
    }
}

/// Files of TLS: a private root (instead of the public ones) and a client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificates of the roots the server's certificate must chain to.
    pub root_cert: Option<PathBuf>,
    /// PEM client certificate (chain) and its PEM private key.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    /// A host name or address (TCP).
    Tcp(String),
    /// The directory of the server's Unix socket (never TLS).
    Unix(PathBuf),
}

/// `sslmode` (see [`tls`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Never prints the password.
impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("hosts", &self.hosts)
            .field("database", &self.database)
            .field("tls", &self.tls)
            .field("tls_files", &self.tls_files)
            .field("read_write", &self.read_write)
            .field("application_name", &self.application_name)
            .field("options", &self.options)
            .field("bounds", &self.bounds)
            .finish()
    }
}

/// What went wrong with the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgError {
    /// The server could not be reached, or refused the connection (or the pool gave none in
    /// time).
    Connect(String),
    /// TLS could not be set up.
    Tls(String),
    /// A statement failed: the SQLSTATE, when the server said one, and the message.
    Query { code: Option<String>, message: String },
    /// The server would not make commits durable (`fsync` or `synchronous_commit` off).
    NotDurable(String),
    /// The database takes no writes (a standby, or read-only sessions): why.
    ReadOnly(String),
    /// The database has a schema written by a newer version of Pigeonhole.
    NewerSchema { found: i64, known: i64 },
    /// A migration failed (nothing of it stays: it ran in the migration transaction).
    Migration { version: i64, reason: String },
    /// A stored value does not fit its domain type.
    Corrupt(String),
    /// Serialization failures or deadlocks, retried [`MAX_RETRIES`] times.
    Contention(String),
    /// A queue key that this engine did not make (another engine's, or of the other queue):
    /// what was expected.
    ForeignQueueKey(&'static str),
}

impl PgError {
    /// The SQLSTATE of a failed statement, when the server said one.
    pub fn code(&self) -> Option<&str> {
        match self {
            PgError::Query { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// A serialization failure or a deadlock: the transaction may succeed when run again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PgError::Query { code: Some(c), .. } if c == "40001" || c == "40P01")
    }

    /// The database cannot be used now but may be soon, without a restart: no connection
    /// (refused, closed, broken, or none from the pool in time), the server shutting down,
    /// crashed or still starting (SQLSTATE class 08, 57P01 to 57P03), taking no writes (a
    /// standby not yet promoted: 25006), or too slow to answer within the bounds (the
    /// statement or lock timeout: 57014, 55P03).
    pub fn is_unavailable(&self) -> bool {
        match self {
            PgError::Connect(_) | PgError::ReadOnly(_) => true,
            PgError::Query { code: Some(c), .. } => {
                c.starts_with("08") || matches!(c.as_str(), "57P01" | "57P02" | "57P03" | "25006" | "57014" | "55P03")
            }
            _ => false,
        }
    }

    /// A unique constraint refused the write (SQLSTATE 23505).
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, PgError::Query { code: Some(c), .. } if c == "23505")
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Connect(e) => write!(f, "cannot connect to the database: {e}"),
            PgError::Tls(e) => write!(f, "cannot set up TLS to the database: {e}"),
            PgError::Query { code: Some(c), message } => write!(f, "database error {c}: {message}"),
            PgError::Query { code: None, message } => write!(f, "database error: {message}"),
            PgError::NotDurable(why) => write!(
                f,
                "the database does not make commits durable ({why}); Pigeonhole answers a write only once it \
                 is on disk, so it does not start on this database"
            ),
            PgError::ReadOnly(why) => write!(
                f,
                "the database takes no writes ({why}); Pigeonhole needs the primary, not a standby"
            ),
            PgError::NewerSchema { found, known } => write!(
                f,
                "the database has schema version {found}, written by a newer version of Pigeonhole; this \
                 version ({}) knows versions up to {known}. Nothing was changed: run the newer version, or \
                 move the data with the newer version's tools",
                env!("CARGO_PKG_VERSION")
            ),
            PgError::Migration { version, reason } => {
                write!(
                    f,
                    "migration {version} of the database schema failed (nothing of it was kept): {reason}"
                )
            }
            PgError::Corrupt(why) => write!(f, "a stored value is not valid: {why}"),
            PgError::ForeignQueueKey(expected) => {
                write!(f, "a queue key that is not one of this database's {expected}")
            }
            PgError::Contention(why) => {
                write!(
                    f,
                    "the database kept refusing a transaction as conflicting ({MAX_RETRIES} retries): {why}"
                )
            }
        }
    }
}

impl std::error::Error for PgError {}

/// The server's message and detail, without the driver's wrapping; for an error of the
/// driver itself (connection, TLS), its message and the causes under it.
fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({d})", db.message()),
            None => db.message().to_owned(),
        },
        None => {
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(e);
            while let Some(c) = cause {
                let more = c.to_string();
                if !text.contains(&more) {
                    text = format!("{text}: {more}");
                }
                cause = c.source();
            }
            text
        }
    }
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> PgError {
        match e.code() {
            Some(code) => PgError::Query {
                code: Some(code.code().to_owned()),
                message: describe(&e),
            },
            None if e.is_closed() => PgError::Connect(describe(&e)),
            None => PgError::Query {
                code: None,
                message: describe(&e),
            },
        }
    }
}

impl From<deadpool_postgres::PoolError> for PgError {
    fn from(e: deadpool_postgres::PoolError) -> PgError {
        match e {
            deadpool_postgres::PoolError::Backend(e) => match PgError::from(e) {
                PgError::Query { code, message } if code.is_none() => PgError::Connect(message),
                other => other,
            },
            other => PgError::Connect(other.to_string()),
        }
    }
}

impl From<PgError> for super::StoreError {
    /// The engine's error kept whole; one that says the database cannot be reached right now
    /// is [`super::StoreError::Unreachable`] (the server answers 503, and the pool connects
    /// again by itself once the database is back).
    fn from(e: PgError) -> super::StoreError {
        if e.is_unavailable() {
            super::StoreError::Unreachable(Box::new(e))
        } else {
            super::StoreError::Engine(Box::new(e))
        }
    }
}

/// The driver's errors as the store's (through [`PgError`], as the engine words them), so
/// that the traits' implementations answer them with `?`.
impl From<tokio_postgres::Error> for super::StoreError {
    fn from(e: tokio_postgres::Error) -> super::StoreError {
        PgError::from(e).into()
    }
}

impl From<deadpool_postgres::PoolError> for super::StoreError {
    fn from(e: deadpool_postgres::PoolError) -> super::StoreError {
        PgError::from(e).into()
    }
}

pub type PgResult<T> = std::result::Result<T, PgError>;

/// How many times a transaction refused as conflicting is run again.
pub const MAX_RETRIES: u32 = 8;

/// After `e`, a conflict that ended try number `attempt` (from 0) of a transaction or
/// statement: a short pause growing with the tries, then `Ok` to run it again; after
/// [`MAX_RETRIES`] tries again, [`PgError::Contention`] instead.
pub(crate) async fn pause_to_retry(attempt: &mut u32, e: PgError) -> PgResult<()> {
    if *attempt >= MAX_RETRIES {
        return Err(PgError::Contention(e.to_string()));
    }
    *attempt += 1;
    tokio::time::sleep(std::time::Duration::from_millis(u64::from(*attempt) * 5)).await;
    Ok(())
}

/// Runs `$body` (a block using the transaction `$tx`, answering `PgResult<T>`) in a
/// transaction on a pooled connection and commits it; runs it again, with a short growing
/// pause, when the body or the commit fails with a serialization failure or a deadlock, at
/// most [`MAX_RETRIES`] times. The body must be safe to run again (it reads what it needs
/// inside the transaction).
macro_rules! transaction {
    ($store:expr, |$tx:ident| $body:block) => {{
        let mut attempt = 0u32;
        let began = std::time::Instant::now();
        let result = loop {
            let waiting = std::time::Instant::now();
            let got = $store.pool.get().await;
            $crate::store::postgres::stats::pool_waited(waiting);
            let mut client = match got {
                Ok(client) => client,
                Err(e) => break Err($crate::store::postgres::PgError::from(e)),
            };
            let $tx = match client.transaction().await {
                Ok(tx) => tx,
                Err(e) => break Err($crate::store::postgres::PgError::from(e)),
            };
            let result: $crate::store::postgres::PgResult<_> = async { $body }.await;
            let result = match result {
                Ok(value) => $tx
                    .commit()
                    .await
                    .map(|()| value)
                    .map_err($crate::store::postgres::PgError::from),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.is_retryable() => {
                    if let Err(e) = $crate::store::postgres::pause_to_retry(&mut attempt, e).await {
                        break Err(e);
                    }
                }
                other => break other,
            }
        };
        $crate::store::postgres::stats::transaction_took(began);
        result
    }};
}
pub(crate) use transaction;

/// The client configuration and TLS connector of `connection` (every session commits
/// durably, whatever the role's or database's default, under the bounds of
/// [`Connection::bounds`]).
pub(crate) fn config_of(
    connection: &Connection,
) -> PgResult<(tokio_postgres::Config, tokio_postgres_rustls::MakeRustlsConnect)> {
    let mut config = tokio_postgres::Config::new();
    config
        .user(&connection.user)
        .dbname(&connection.database)
        .application_name(&connection.application_name)
        .connect_timeout(connection.bounds.connect)
        .options(connect::session_options(connection))
        .target_session_attrs(match connection.read_write {
            true => tokio_postgres::config::TargetSessionAttrs::ReadWrite,
            false => tokio_postgres::config::TargetSessionAttrs::Any,
        });
    if let Some(p) = &connection.password {
        config.password(p);
    }
    connect::add_hosts(&mut config, connection);
    use tokio_postgres::config::SslMode;
    // TLS is never negotiated over a Unix socket (the URL's parser refuses to ask for it)
    let over_tcp = connection.hosts.iter().any(|(h, _)| matches!(h, Host::Tcp(_)));
    config.ssl_mode(match (over_tcp, connection.tls) {
        (false, _) | (true, TlsMode::Disable) => SslMode::Disable,
        (true, TlsMode::Prefer) => SslMode::Prefer,
        (true, TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull) => SslMode::Require,
    });
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(
        tls::client_config(connection.tls, &connection.tls_files).map_err(|e| PgError::Tls(e.to_string()))?,
    );
    Ok((config, tls))
}

/// The PostgreSQL store: a pool of connections to one database with the current schema.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// This process's name in claims: `host:pid:` and 8 random hex digits per store.
    claimant: String,
    /// How long a claim on a due item, delivery or e-mail holds unless renewed.
    lease: Duration,
    /// Whether the schema last read was newer than this binary's (so that it is logged
    /// once, not at every check).
    newer_schema: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The lease of claims unless [`PgStore::with_lease`] says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(20);

impl PgStore {
    /// Connects, checks that commits are durable, and migrates the schema (under the
    /// migration lock, see [`migrations`]). Answers the store and the migrations applied.
    pub async fn connect(connection: &Connection) -> PgResult<(PgStore, Vec<i64>)> {
        let (config, tls) = config_of(connection)?;
        let bounds = connection.bounds;
        let manager = Manager::from_connect(
            config,
            connect::Connector {
                tls,
                silence: bounds.silence(),
            },
            ManagerConfig {
                // with target_session_attrs=read-write, a connection given back is checked
                // before it is handed out again: one to a host that takes no writes any more
                // (demoted without a restart, or made read-only) fails the check and is
                // dropped, and the next is made to whichever host takes writes now (one
                // round trip per use; without failover, only a closed connection is dropped)
                recycling_method: match connection.read_write {
                    true => RecyclingMethod::Custom(connect::STILL_WRITABLE.to_owned()),
                    false => RecyclingMethod::Fast,
                },
            },
        );
        // every wait on the pool is bounded: for a free connection, for a new one (every
        // host tried once), for the check of one given back
        let pool = Pool::builder(manager)
            .max_size(bounds.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(bounds.pool_wait()))
            .create_timeout(Some(bounds.create(connection.hosts.len()) + Duration::from_secs(1)))
            .recycle_timeout(Some(Duration::from_secs(2)))
            .build()
            .map_err(|e| PgError::Connect(e.to_string()))?;
        let store = PgStore {
            pool,
            // the process's name (host and pid, as the health check says it) and a random
            // part: unique per store, and an operator reading claimed_by sees who holds it
            claimant: format!(
                "{}:{}",
                crate::store::api::process_name(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
            lease: DEFAULT_LEASE,
            newer_schema: std::sync::Arc::default(),
        };
        let mut client = store.pool.get().await?;
        check_durable(&client).await?;
        let applied = migrations::migrate(&mut client).await?;
        drop(client);
        Ok((store, applied))
    }

    /// The accounts of one service.
    pub fn accounts(&self, service: Service) -> PgAccounts {
        PgAccounts::new(self.pool.clone(), service)
    }

    /// The login, registration and e-mail counts every process shares.
    pub fn throttles(&self) -> throttles::PgThrottles {
        throttles::PgThrottles::new(self.pool.clone())
    }

    /// The inbox service's items (and its accounts).
    pub fn inbox(&self) -> PgInbox {
        PgInbox::new(self.pool.clone())
    }

    /// The scheduler service's items (and its accounts).
    pub fn scheduler(&self) -> PgScheduler {
        PgScheduler::new(self.pool.clone(), self.claimant.clone(), self.lease)
    }

    /// The store with claims held for `lease` (unless renewed): a process killed mid-work
    /// loses its claims that long after its last pass, then another process takes them.
    pub fn with_lease(mut self, lease: Duration) -> PgStore {
        self.lease = lease;
        self
    }

    /// How long claims hold.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The schema version of the database.
    pub async fn schema_version(&self) -> PgResult<i64> {
        let client = self.pool.get().await?;
        Ok(client
            .query_one("SELECT coalesce(max(version), 0) FROM schema_migrations", &[])
            .await?
            .try_get(0)?)
    }
}

/// Refuses a server that would acknowledge commits before they are on disk, or that takes
/// no writes at all (a standby, read-only sessions).
async fn check_durable(client: &tokio_postgres::Client) -> PgResult<()> {
    for (setting, off) in [("fsync", "off"), ("synchronous_commit", "off")] {
        let row = client.query_one(&format!("SHOW {setting}"), &[]).await?;
        let value: String = row.try_get(0)?;
        if value == off {
            return Err(PgError::NotDurable(format!("{setting} is {value}")));
        }
    }
    let row = client
        .query_one(
            "SELECT pg_is_in_recovery(), current_setting('transaction_read_only')",
            &[],
        )
        .await?;
    let (recovering, read_only): (bool, String) = (row.try_get(0)?, row.try_get(1)?);
    if recovering {
        return Err(PgError::ReadOnly("it is a standby, in recovery".into()));
    }
    if read_only == "on" {
        return Err(PgError::ReadOnly("its sessions are read-only".into()));
    }
    Ok(())
}
