//! The inbox service (inbox.md): accounts, access keys, items, sync.

mod handlers;
pub mod models;
pub mod routes;
pub mod sync;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::http::{ApiError, Reply, Request, Service};
use crate::store::Store;
use std::sync::Arc;
use warp::http::Method;

pub const API_PAGE: &str = include_str!("../../assets/inbox.html");

pub struct Inbox {
    pub store: Arc<Store>,
    pub settings: Arc<Settings>,
    pub flows: AccountFlows,
    pub payments: Arc<crate::payments::Payments>,
}

impl Inbox {
    pub fn new(
        store: Arc<Store>,
        settings: Arc<Settings>,
        tokens: Arc<crate::auth::TokenKeys>,
        payments: Arc<crate::payments::Payments>,
        decoy: crate::auth::passwords::Decoy,
    ) -> Result<Inbox, String> {
        let flows = AccountFlows::new("inbox", settings.clone(), tokens, store.clone(), decoy)?;
        Ok(Inbox {
            store,
            settings,
            flows,
            payments,
        })
    }
}

impl Service for Inbox {
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
