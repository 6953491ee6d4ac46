//! The scheduler service (scheduler.md). Until its API lands it serves `GET /pricing` (so
//! that clients and the conformance harness see the port up) and answers JSON 404s.

use crate::config::Settings;
use crate::http::{ApiError, Reply, Request, Service};
use crate::payments;
use std::sync::Arc;
use warp::http::Method;

pub struct Scheduler {
    pub settings: Arc<Settings>,
}

pub enum Route {
    Pricing,
}

impl Service for Scheduler {
    type Route = Route;

    fn route(&self, method: &Method, segments: &[&str]) -> Result<Route, ApiError> {
        match segments {
            ["pricing"] if method == Method::GET => Ok(Route::Pricing),
            ["pricing"] => Err(ApiError::method_not_allowed()),
            _ => Err(ApiError::unknown_path()),
        }
    }

    async fn handle(self: Arc<Self>, route: Route, _request: Request) -> Result<Reply, ApiError> {
        match route {
            Route::Pricing => Ok(Reply::json(&payments::pricing(&self.settings))),
        }
    }

    fn max_body_bytes(&self) -> u64 {
        self.settings.max_body_bytes
    }
}
