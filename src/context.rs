//! What the services and the workers share, made once in `launch`: the store, the settings,
//! the token keys, the decoy password hash, payments, the HTTP client, the workers' table and
//! the clock the workers decide by.
//! Also the answers both services give alike: `GET /account`, the admin listing, and
//! `GET /healthz`.

use crate::auth::passwords::Decoy;
use crate::auth::TokenKeys;
use crate::clock::Clock;
use crate::config::Settings;
use crate::domain::account::{sort_for_admin, Account, ServiceKind};
use crate::domain::worker::Worker;
use crate::http::{ApiError, JsonArray, Reply};
use crate::metrics::Metrics;
use crate::payments::Payments;
use crate::store::{Accounts, OnceWork, Store};
use crate::workers::Workers;
use serde_json::{json, Map, Value};
use std::future::Future;
use std::sync::Arc;

pub struct Context {
    pub settings: Arc<Settings>,
    pub store: Arc<Store>,
    pub tokens: Arc<TokenKeys>,
    /// The password hash that unknown usernames are checked against (same cost as a real one).
    pub decoy: Decoy,
    pub payments: Arc<Payments>,
    /// The process's client for outgoing HTTP to the operator's services (the payment
    /// provider).
    pub http: reqwest::Client,
    /// The client for inbox services that users name (deliveries, new inbox triggers), under
    /// the outbound policy (`--outbound-allow`).
    pub inbox_client: crate::outbound::InboxClient,
    pub workers: Arc<Workers>,
    /// What is due now and when back-offs end (real, or set by tests).
    pub clock: Clock,
    /// The process's metrics (recording nothing unless `--metrics`).
    pub metrics: Arc<Metrics>,
    /// When the server started (the health check's uptime).
    pub started: std::time::Instant,
}

/// How long `GET /healthz` waits for the database's answers (both asked at once), so that
/// it answers within a second.
pub const HEALTH_BOUND: std::time::Duration = std::time::Duration::from_millis(700);

impl Context {
    /// The accounts of `service`.
    pub fn accounts(&self, service: ServiceKind) -> &dyn Accounts {
        match service {
            ServiceKind::Inbox => &*self.store.inbox.accounts,
            ServiceKind::Scheduler => &*self.store.scheduler.accounts,
        }
    }

    /// `GET /healthz` of both services (docs/operations.md): 200 when the database answers
    /// reads and takes writes and no worker is errored, else 503; the same small JSON body
    /// either way. "Database writable" is [`Store::writable`]: the writer thread runs, no
    /// sync of the database files ever failed and the latest write cycle reached the disk;
    /// nothing is written to find out, so a probe never costs a sync. "Answers" is one read
    /// of the first key of the due index. A worker is errored when it stopped after too
    /// many failed passes or its last pass failed.
    ///
    /// It names the process (`process.id`: host name and pid, and on PostgreSQL the
    /// claimant id its claims carry), the engine, and whether it leads (exports the
    /// database-wide metrics; always on sled). On PostgreSQL `database` has the schema's
    /// version and the binary's, read at each probe: a database migrated by a newer binary
    /// while this one runs makes the answer 503 with an `error` naming both versions.
    ///
    /// Records that requests met and could not decode (written by a newer version, or
    /// damaged) make the status `degraded`, still 200, with their count in
    /// `database.undecodable-records` (docs/decisions.md: a restart does not repair a
    /// record, so a supervisor must not restart-loop on it; the rest keeps working).
    ///
    /// The answer comes within [`HEALTH_BOUND`] whatever the database does: a probe that
    /// has not answered by then counts as failed (a frozen or unreachable database is
    /// unhealthy, and a supervisor's probe is not held up).
    pub async fn health(&self) -> Reply {
        let bounded = |probe| async move {
            tokio::time::timeout(HEALTH_BOUND, probe)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} ms", HEALTH_BOUND.as_millis())))
        };
        // the schema and the leadership are read alongside, within the same bound (a frozen
        // database makes them wait too): not known in time, the schema counts as unknown
        // and the process as not leading
        let (readable, writable, schema, leads) = tokio::join!(
            bounded(Box::pin(async {
                self.store
                    .scheduler
                    .next_due()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
                as std::pin::Pin<
                    Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>,
                >),
            bounded(self.store.admin.writable()),
            tokio::time::timeout(HEALTH_BOUND, self.store.admin.schema()),
            tokio::time::timeout(HEALTH_BOUND, self.store.coordination.leads(OnceWork::Overview)),
        );
        let (schema, leads) = (schema.ok().flatten(), leads.unwrap_or(false));
        let errored: Vec<&str> = Worker::ALL
            .into_iter()
            .filter(|w| self.workers.errored(*w))
            .map(|w| w.name())
            .collect();
        // PostgreSQL: the schema read now, so that a newer binary's migration while this
        // process runs makes it unhealthy (it may misread what the newer one writes)
        let newer = match &schema {
            Some(Ok(v)) if v.newer() => Some(v.reason()),
            _ => None,
        };
        let healthy = readable.is_ok() && writable.is_ok() && errored.is_empty() && newer.is_none();
        let (undecodable, more) = self.store.undecodable().count();
        let mut database = Map::new();
        database.insert("readable".into(), json!(readable.is_ok()));
        database.insert("writable".into(), json!(writable.is_ok()));
        database.insert("undecodable-records".into(), json!(undecodable));
        if more {
            // more than could be remembered: the count is a lower bound
            database.insert("undecodable-records-at-least".into(), json!(true));
        }
        database.insert("engine".into(), json!(self.store.admin.engine()));
        if let Some(Ok(v)) = &schema {
            database.insert("schema-version".into(), json!(v.database));
            database.insert("binary-schema-version".into(), json!(v.binary));
        }
        if let Some(e) = readable.err().or(writable.err()).or(newer) {
            database.insert("error".into(), json!(e));
        }
        let body = json!({
            "status": match (healthy, undecodable) {
                (false, _) => "unhealthy",
                (true, 0) => "ok",
                (true, _) => "degraded",
            },
            "version": env!("CARGO_PKG_VERSION"),
            "uptime-seconds": self.started.elapsed().as_secs(),
            "process": {
                "id": self.store.admin.process(),
                "engine": self.store.admin.engine(),
                "leads": leads,
            },
            "database": database,
            "errored-workers": errored,
            "workers": self.workers.health_json(),
        });
        let mut reply = Reply::json(&body).with_header(
            warp::http::header::CACHE_CONTROL,
            warp::http::HeaderValue::from_static("no-store"),
        );
        if !healthy {
            reply.status = warp::http::StatusCode::SERVICE_UNAVAILABLE;
        }
        reply
    }

    /// `GET /account` of both services (inbox.md §3.4, scheduler.md §2.7): the common keys,
    /// the service's item `counts` (the first is the one the free item limit counts) and
    /// the payment status.
    pub async fn account_info(
        &self,
        service: ServiceKind,
        account: &Account,
        counts: &[(&str, u64)],
    ) -> Result<Value, ApiError> {
        let items = counts.first().map_or(0, |(_, n)| *n);
        let status = self.payments.status_of(self.accounts(service), account, items).await?;
        let mut info = Map::new();
        info.insert("uuid".into(), json!(account.id));
        info.insert("username".into(), json!(account.username));
        info.insert("created".into(), json!(account.created.to_string()));
        info.insert("last-login".into(), json!(account.last_login.map(|t| t.to_string())));
        info.insert("admin".into(), json!(self.settings.is_admin(&account.username)));
        for (key, n) in counts {
            info.insert((*key).into(), json!(n));
        }
        info.insert("status".into(), status.to_json());
        Ok(Value::Object(info))
    }

    /// `GET /admin/accounts`: every account of `service` (latest login first), each as
    /// `info` makes it, written out one by one.
    pub async fn admin_accounts<F, Fut>(&self, service: ServiceKind, info: F) -> Result<Reply, ApiError>
    where
        F: Fn(Account) -> Fut,
        Fut: Future<Output = Result<Value, ApiError>>,
    {
        let mut all = self.accounts(service).all().await?;
        sort_for_admin(&mut all);
        let mut infos = JsonArray::default();
        for a in all {
            infos.push(&info(a).await?);
        }
        Ok(infos.into_reply())
    }
}
