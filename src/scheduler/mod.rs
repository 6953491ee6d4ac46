//! The scheduler service (scheduler.md): settings, scheduled and triggered items, triggers,
//! sync, and the routes both services share (`crate::shell`); its background workers live in
//! `crate::loopers`.

mod handlers;
pub mod resend_limit;
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

/// What only the scheduler service has (the rest is its [`Shell`]).
pub struct Scheduler {
    /// Verification e-mails per trigger (resends), per destination address and per account.
    pub verifications: resend_limit::VerificationLimits,
}

/// The scheduler's own pages of the web interface (the shared files are in
/// [`crate::http::app::COMMON`]).
static APP: &[app::Asset] = &[
    app::Asset::new("", app::HTML, include_bytes!("../../assets/app/scheduler.html")),
    app::Asset::new("scheduler.js", app::JS, include_bytes!("../../assets/app/scheduler.js")),
    app::Asset::new(
        "triggered",
        app::HTML,
        include_bytes!("../../assets/app/triggered.html"),
    ),
    app::Asset::new("triggered.js", app::JS, include_bytes!("../../assets/app/triggered.js")),
    app::Asset::new("triggers", app::HTML, include_bytes!("../../assets/app/triggers.html")),
    app::Asset::new("triggers.js", app::JS, include_bytes!("../../assets/app/triggers.js")),
    app::Asset::new(
        "manifest.webmanifest",
        app::MANIFEST,
        include_bytes!("../../assets/app/scheduler.webmanifest"),
    ),
];

impl Kind for Scheduler {
    const SERVICE: ServiceKind = ServiceKind::Scheduler;
    const API_PAGE: &'static str = include_str!("../../assets/scheduler.html");
    const OPENAPI: &'static str = include_str!("../../assets/openapi/scheduler.json");
    const APP: &'static [app::Asset] = APP;
    /// The triggers, login and settings pages (the inbox as a trigger, one passphrase).
    const CALLS_SIBLING: &'static [&'static str] = &["triggers", "login", "settings"];
    const DELETED: StatusCode = StatusCode::OK;

    fn new(ctx: &Context) -> Scheduler {
        Scheduler {
            verifications: resend_limit::VerificationLimits::new(ctx.store.throttles.clone()),
        }
    }

    fn rows() -> Vec<Row<Shell<Scheduler>>> {
        routes::rows()
    }

    async fn counts(shell: &Shell<Scheduler>, account: Uuid) -> Result<Vec<(&'static str, u64)>, ApiError> {
        let (scheduled, triggered) = shell.ctx.store.scheduler.counts(account).await?;
        Ok(vec![
            ("scheduler-item-count", scheduled),
            ("triggered-item-count", triggered),
        ])
    }

    async fn delete_account(shell: &Shell<Scheduler>, account: Uuid) -> Result<bool, ApiError> {
        Ok(shell
            .ctx
            .store
            .scheduler
            .delete_account(account)
            .await?
            .durable()
            .await?)
    }

    /// The inbox's port (the page reaches it on the host it was loaded from), its public
    /// origin when the operator gave one (`--inbox-web-host`), and the URL the scheduler
    /// delivers to (loopback when the services listen on every address).
    fn sibling_config(shell: &Shell<Scheduler>, port: u16) -> Value {
        let settings = &shell.ctx.settings;
        let host = match settings.host {
            h if h.is_unspecified() && h.is_ipv6() => std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST),
            h if h.is_unspecified() => std::net::IpAddr::from(std::net::Ipv4Addr::LOCALHOST),
            h => h,
        };
        let url = match host {
            std::net::IpAddr::V6(a) => format!("http://[{a}]:{port}"),
            std::net::IpAddr::V4(a) => format!("http://{a}:{port}"),
        };
        json!({"port": port, "url": url, "origin": settings.web_origins.inbox})
    }

    async fn admin_stats(shell: &Shell<Scheduler>) -> Result<Reply, ApiError> {
        let store = &shell.ctx.store.scheduler;
        let all = store.accounts.all().await?;
        let now = Timestamp::now();
        let (mut scheduled, mut triggered) = (0u64, 0u64);
        for a in &all {
            let (s, t) = store.counts(a.id).await?;
            scheduled += s;
            triggered += t;
        }
        Ok(Reply::json(&json!({
            "users": all.len(),
            "subscribers": shell.ctx.payments.subscribers(&*store.accounts, &all).await?,
            "scheduler-items": scheduled,
            "triggered-items": triggered,
            "active-users": crate::domain::account::active_users(&all, now),
        })))
    }
}
