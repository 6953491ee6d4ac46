//! The inbox service (inbox.md): items and sync, and the routes both services share
//! (`crate::shell`).

mod handlers;
mod routes;

use crate::context::Context;
use crate::domain::account::ServiceKind;
use crate::domain::wire::Timestamp;
use crate::http::routes::Row;
use crate::http::{app, ApiError, Reply};
use crate::shell::{Kind, Shell};
use serde_json::{json, Value};
use uuid::Uuid;
use warp::http::StatusCode;

/// The inbox service: the shell around the inbox, which has nothing else of its own.
pub struct Inbox;

/// The inbox's own pages of the web interface (the shared files are in
/// [`crate::http::app::COMMON`]); `share` is the target of the manifest's `share_target`.
static APP: &[app::Asset] = &[
    app::Asset::new("", app::HTML, include_bytes!("../../assets/app/inbox.html")),
    app::Asset::new("inbox.js", app::JS, include_bytes!("../../assets/app/inbox.js")),
    app::Asset::new("share", app::HTML, include_bytes!("../../assets/app/share.html")),
    app::Asset::new("share.js", app::JS, include_bytes!("../../assets/app/share.js")),
    app::Asset::new(
        "manifest.webmanifest",
        app::MANIFEST,
        include_bytes!("../../assets/app/inbox.webmanifest"),
    ),
];

impl Kind for Inbox {
    const SERVICE: ServiceKind = ServiceKind::Inbox;
    const API_PAGE: &'static str = include_str!("../../assets/inbox.html");
    const OPENAPI: &'static str = include_str!("../../assets/openapi/inbox.json");
    const APP: &'static [app::Asset] = APP;
    /// The inbox page ("Later…"), the login and the settings page.
    const CALLS_SIBLING: &'static [&'static str] = &["", "login", "settings"];
    const DELETED: StatusCode = StatusCode::NO_CONTENT;

    fn new(_ctx: &Context) -> Inbox {
        Inbox
    }

    fn rows() -> Vec<Row<Shell<Inbox>>> {
        routes::rows()
    }

    async fn counts(shell: &Shell<Inbox>, account: Uuid) -> Result<Vec<(&'static str, u64)>, ApiError> {
        Ok(vec![("count", shell.ctx.store.inbox.count(account).await?)])
    }

    async fn delete_account(shell: &Shell<Inbox>, account: Uuid) -> Result<bool, ApiError> {
        Ok(shell.ctx.store.inbox.delete_account(account).await?.durable().await?)
    }

    /// The scheduler's port and where browsers reach it: its public origin, or this host at
    /// its port.
    fn sibling_config(shell: &Shell<Inbox>, port: u16) -> Value {
        json!({ "port": port, "origin": shell.ctx.settings.web_origins.scheduler })
    }

    async fn admin_stats(shell: &Shell<Inbox>) -> Result<Reply, ApiError> {
        let store = &shell.ctx.store.inbox;
        let all = store.accounts.all().await?;
        let now = Timestamp::now();
        let mut items = 0u64;
        for a in &all {
            items += store.count(a.id).await?;
        }
        Ok(Reply::json(&json!({
            "accounts": all.len(),
            "items": items,
            "active-users": crate::domain::account::active_users(&all, now),
            "subscribed-users": shell.ctx.payments.subscribers(&*store.accounts, &all).await?,
        })))
    }
}
