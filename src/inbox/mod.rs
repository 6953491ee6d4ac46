//! The inbox service (inbox.md): accounts, access keys, items, sync.

mod handlers;
pub mod routes;

use crate::auth::flows::AccountFlows;
use crate::config::Settings;
use crate::domain::account::Principal;
use crate::http::{ApiError, Head, Reply, Request, Service};
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
    type Caller = Principal;

    fn name(&self) -> &'static str {
        "inbox"
    }

    fn route(&self, method: &Method, segments: &[&str]) -> Result<routes::Route, ApiError> {
        routes::route(method, segments)
    }

    fn authenticate(&self, route: &routes::Route, head: &Head) -> Result<Option<Principal>, ApiError> {
        self.admit(route, head)
    }

    fn takes_body(&self, route: &routes::Route) -> bool {
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
        &self.settings
    }
}
