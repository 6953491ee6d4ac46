//! The scheduler service (scheduler.md): accounts and settings, scheduled and triggered
//! items, triggers, sync; its background workers live in `crate::loopers`.

mod handlers;
pub mod resend_limit;
pub mod routes;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::context::Context;
use crate::domain::account::Principal;
use crate::domain::account::ServiceKind;
use crate::http::{app, ApiError, Head, Reply, Request, Service};
use std::sync::Arc;
use warp::http::Method;

pub const API_PAGE: &str = include_str!("../../assets/scheduler.html");
/// The OpenAPI 3.1 document of this service (`GET /openapi.json`, docs/api.md), written by
/// tools/openapi.py.
pub const OPENAPI: &str = include_str!("../../assets/openapi/scheduler.json");

/// The scheduler's own pages of the web interface (the shared files are in
/// [`crate::http::app::COMMON`]).
pub static APP: &[app::Asset] = &[
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

pub struct Scheduler {
    pub ctx: Arc<Context>,
    pub flows: AccountFlows,
    /// Verification e-mails per trigger (resends), per destination address and per account.
    pub verifications: resend_limit::VerificationLimits,
    /// The port of the inbox service of this process, if it runs one (the web interface
    /// offers it as a trigger).
    pub local_inbox: Option<u16>,
}

impl Scheduler {
    pub fn new(ctx: Arc<Context>) -> Scheduler {
        let flows = AccountFlows::new(
            ServiceKind::Scheduler,
            ctx.settings.clone(),
            ctx.tokens.clone(),
            ctx.decoy.clone(),
            ctx.store.throttles.clone(),
        )
        .with_metrics(ctx.metrics.clone());
        let verifications = resend_limit::VerificationLimits::new(ctx.store.throttles.clone());
        Scheduler {
            ctx,
            flows,
            verifications,
            local_inbox: None,
        }
    }
}

impl Service for Scheduler {
    type Route = routes::Route;
    type Caller = Principal;

    fn name(&self) -> &'static str {
        self.flows.service.name()
    }

    fn route(&self, method: &Method, segments: &[&str]) -> Result<routes::Route, ApiError> {
        routes::route(method, segments)
    }

    async fn authenticate(&self, route: &routes::Route, head: &Head) -> Result<Option<Principal>, ApiError> {
        self.admit(route, head).await
    }

    fn takes_body(&self, route: &routes::Route) -> crate::http::BodyUse {
        routes::takes_body(route)
    }

    async fn handle(
        self: Arc<Self>,
        route: routes::Route,
        caller: Option<Principal>,
        request: Request,
    ) -> Result<Reply, ApiError> {
        self.dispatch(route, caller, request).await
    }

    fn settings(&self) -> &Settings {
        &self.ctx.settings
    }
}
