//! The service shell: what both HTTP services are made of — the context, the service's
//! account flows, the port of the other service of this process — and the routes they both
//! serve alike (accounts, logins, access keys, the web interface, admin: [`routes`]),
//! declared once. A service is a [`Shell`] around what only it has (a [`Kind`]:
//! [`crate::inbox::Inbox`], [`crate::scheduler::Scheduler`]), whose own rows are added to
//! the shared ones in one [`Table`].

mod handlers;
mod routes;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::context::Context;
use crate::domain::account::{Principal, ServiceKind};
use crate::http::routes::{Listed, Row, Table};
use crate::http::{app, ApiError, Head, Reply, Service};
use crate::store::Accounts;
use serde_json::Value;
use std::future::Future;
use std::sync::Arc;
use uuid::Uuid;
use warp::http::StatusCode;

/// A service: the shell around what only it has (`own`).
pub struct Shell<K> {
    pub ctx: Arc<Context>,
    pub flows: AccountFlows,
    /// The port of the other service of this process, if it runs one: the pages of the
    /// web interface call it (docs/web.md).
    pub sibling: Option<u16>,
    pub own: K,
    table: Table<Shell<K>>,
}

/// What makes a service of the shell: its name, its pages and documents, its own routes, and
/// what the shared routes ask of it.
pub trait Kind: Send + Sync + Sized + 'static {
    const SERVICE: ServiceKind;
    /// `GET /`: the page that describes the API.
    const API_PAGE: &'static str;
    /// `GET /openapi.json`: the OpenAPI 3.1 document (docs/api.md), written by
    /// tools/openapi.py.
    const OPENAPI: &'static str;
    /// The service's own pages of the web interface (the shared files are in
    /// [`app::COMMON`]).
    const APP: &'static [app::Asset];
    /// The pages of the web interface that call the other service of this process.
    const CALLS_SIBLING: &'static [&'static str];
    /// The answer to an account's deletion, by its owner or an admin: the originals'
    /// (Intray declares 204, Tickler 200).
    const DELETED: StatusCode;

    /// What only this service has, made once.
    fn new(ctx: &Context) -> Self;

    /// The service's own routes (the shared ones are added to them).
    fn rows() -> Vec<Row<Shell<Self>>>;

    /// The item counts of `GET /account`, the first being what the free item limit counts.
    fn counts(
        shell: &Shell<Self>,
        account: Uuid,
    ) -> impl Future<Output = Result<Vec<(&'static str, u64)>, ApiError>> + Send;

    /// Deletes an account and everything it has, durably; whether it was there.
    fn delete_account(shell: &Shell<Self>, account: Uuid) -> impl Future<Output = Result<bool, ApiError>> + Send;

    /// What `GET /app/config.json` says of the other service of this process, at `port`.
    fn sibling_config(shell: &Shell<Self>, port: u16) -> Value;

    /// `GET /admin/stats`.
    fn admin_stats(shell: &Shell<Self>) -> impl Future<Output = Result<Reply, ApiError>> + Send;
}

/// The routes of the service `K`: the shared ones and its own.
pub fn table<K: Kind>() -> Table<Shell<K>> {
    Table::new(routes::shared().into_iter().chain(K::rows()))
}

/// Every route the service `K` serves, with its access and body use (tests/api/openapi.rs
/// checks the OpenAPI documents against it).
pub fn listing<K: Kind>() -> Vec<Listed> {
    table::<K>().listing()
}

impl<K: Kind> Shell<K> {
    /// The service on `ctx`; `sibling`: the port of the other service of this process.
    pub fn new(ctx: Arc<Context>, sibling: Option<u16>) -> Shell<K> {
        // one person, one password (spec README decision 18): a passphrase change follows
        // on the other service's account of the same name
        let twin = match K::SERVICE {
            ServiceKind::Inbox => ctx.store.scheduler.accounts.clone(),
            ServiceKind::Scheduler => ctx.store.inbox.accounts.clone(),
        };
        let flows = AccountFlows::new(
            K::SERVICE,
            ctx.settings.clone(),
            ctx.tokens.clone(),
            ctx.decoy.clone(),
            ctx.store.throttles.clone(),
        )
        .with_metrics(ctx.metrics.clone())
        .with_twin(twin);
        Shell {
            own: K::new(&ctx),
            flows,
            sibling,
            table: table(),
            ctx,
        }
    }

    /// The accounts of this service.
    pub fn accounts(&self) -> &dyn Accounts {
        self.ctx.accounts(K::SERVICE)
    }
}

impl<K: Kind> Service for Shell<K> {
    fn name(&self) -> &'static str {
        K::SERVICE.name()
    }

    fn table(&self) -> &Table<Self> {
        &self.table
    }

    async fn admit(&self, row: &Row<Self>, head: &Head) -> Result<Option<Principal>, ApiError> {
        self.flows
            .admit(self.accounts(), row.access, row.also_needs, head)
            .await
    }

    fn settings(&self) -> &Settings {
        &self.ctx.settings
    }
}
