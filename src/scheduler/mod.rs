//! The scheduler service (scheduler.md): accounts and settings, scheduled and triggered
//! items, triggers, sync; its background workers live in `crate::loopers`.

mod handlers;
pub mod inbox_client;
pub mod models;
pub mod resend_limit;
pub mod routes;
pub mod schedule;
pub mod sync;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::http::{ApiError, Reply, Request, Service};
use crate::loopers::Loopers;
use crate::store::Store;
use std::sync::Arc;
use warp::http::Method;

pub const API_PAGE: &str = include_str!("../../assets/scheduler.html");

pub struct Scheduler {
    pub store: Arc<Store>,
    pub settings: Arc<Settings>,
    pub flows: AccountFlows,
    pub payments: Arc<crate::payments::Payments>,
    pub loopers: Arc<Loopers>,
    pub http: reqwest::Client,
    /// Verification e-mail resends per trigger (`POST /trigger/email/resend/:id`).
    pub resends: resend_limit::ResendLimiter,
}

impl Scheduler {
    pub fn new(
        store: Arc<Store>,
        settings: Arc<Settings>,
        tokens: Arc<crate::auth::TokenKeys>,
        loopers: Arc<Loopers>,
        payments: Arc<crate::payments::Payments>,
        decoy: crate::auth::passwords::Decoy,
        http: reqwest::Client,
    ) -> Result<Scheduler, String> {
        let flows = AccountFlows::new("scheduler", settings.clone(), tokens, store.clone(), decoy)?;
        Ok(Scheduler {
            store,
            settings,
            flows,
            payments,
            loopers,
            http,
            resends: resend_limit::ResendLimiter::default(),
        })
    }
}

impl Service for Scheduler {
    type Route = routes::Route;

    fn route(&self, method: &Method, segments: &[&str]) -> Result<routes::Route, ApiError> {
        routes::route(method, segments)
    }

    async fn handle(self: Arc<Self>, route: routes::Route, request: Request) -> Result<Reply, ApiError> {
        self.dispatch(route, request).await
    }

    fn max_body_bytes(&self) -> u64 {
        self.settings.max_body_bytes
    }

    fn trusted_proxies(&self) -> &[crate::config::ProxyNet] {
        &self.settings.trusted_proxies
    }
}
