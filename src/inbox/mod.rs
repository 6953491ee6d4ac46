//! The inbox service (inbox.md): accounts, access keys, items, sync.

mod handlers;
pub mod routes;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::context::Context;
use crate::domain::account::Principal;
use crate::domain::account::ServiceKind;
use crate::http::{app, ApiError, Head, Reply, Request, Service};
use std::sync::Arc;
use warp::http::Method;

pub const API_PAGE: &str = include_str!("../../assets/inbox.html");
/// The OpenAPI 3.1 document of this service (`GET /openapi.json`, docs/api.md), written by
/// tools/openapi.py.
pub const OPENAPI: &str = include_str!("../../assets/openapi/inbox.json");

/// The inbox's own pages of the web interface (the shared files are in
/// [`crate::http::app::COMMON`]); `share` is the target of the manifest's `share_target`.
pub static APP: &[app::Asset] = &[
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

pub struct Inbox {
    pub ctx: Arc<Context>,
    pub flows: AccountFlows,
    /// The port of the scheduler service of this process, if it runs one (the web pages
    /// sign in to both and move items into it: docs/web.md).
    pub local_scheduler: Option<u16>,
}

impl Inbox {
    pub fn new(ctx: Arc<Context>) -> Inbox {
        let flows = AccountFlows::new(
            ServiceKind::Inbox,
            ctx.settings.clone(),
            ctx.tokens.clone(),
            ctx.decoy.clone(),
            ctx.store.throttles.clone(),
        )
        .with_metrics(ctx.metrics.clone());
        Inbox {
            ctx,
            flows,
            local_scheduler: None,
        }
    }
}

impl Service for Inbox {
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
