//! The handlers of the routes both services serve ([`super::routes`]): the account flows of
//! `crate::auth::flows` on the service's accounts, the answers of `crate::context`, the
//! web interface's files; what differs between the services comes from their [`Kind`].

use super::{Kind, Shell};
use crate::domain::account::ServiceKind;
use crate::http::routes::Call;
use crate::http::{app, ApiError, Reply};
use crate::payments;
use serde_json::{json, Map, Value};

impl<K: Kind> Shell<K> {
    pub(super) async fn api_page(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::html(K::API_PAGE))
    }

    pub(super) async fn health(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(self.ctx.health().await)
    }

    pub(super) async fn openapi(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json_text(K::OPENAPI))
    }

    pub(super) async fn register(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows.register(self.accounts(), &call.request).await
    }

    pub(super) async fn login(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows.login(self.accounts(), &call.request).await
    }

    pub(super) async fn pricing(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(&payments::pricing(&self.ctx.settings)))
    }

    pub(super) async fn permissions(&self, call: Call) -> Result<Reply, ApiError> {
        Ok(self.flows.permissions(call.who()?))
    }

    /// `GET /account` (inbox.md §3.4, scheduler.md §2.7).
    pub(super) async fn account(&self, call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(&self.account_info(&call.who()?.account).await?))
    }

    /// The account as `GET /account` and the admin's listing show it.
    async fn account_info(&self, account: &crate::domain::account::Account) -> Result<Value, ApiError> {
        let counts = K::counts(self, account.id).await?;
        self.ctx.account_info(K::SERVICE, account, &counts).await
    }

    /// `POST /account` (inbox), `POST /` (scheduler): the rows are the services' own, the
    /// flow is shared.
    pub(crate) async fn change_passphrase(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows
            .change_passphrase(self.accounts(), &call.who()?.account, &call.request)
            .await
    }

    pub(super) async fn delete_account(&self, call: Call) -> Result<Reply, ApiError> {
        K::delete_account(self, call.who()?.account.id).await?;
        Ok(deleted::<K>())
    }

    pub(super) async fn access_keys(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows.access_keys(self.accounts(), call.who()?).await
    }

    pub(super) async fn add_access_key(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows
            .add_access_key(self.accounts(), call.who()?, &call.request)
            .await
    }

    pub(super) async fn access_key(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows
            .access_key(self.accounts(), call.who()?, call.uuid("id")?)
            .await
    }

    pub(super) async fn delete_access_key(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows
            .delete_access_key(self.accounts(), call.who()?, call.uuid("id")?)
            .await
    }

    pub(super) async fn admin_stats(&self, _call: Call) -> Result<Reply, ApiError> {
        K::admin_stats(self).await
    }

    pub(super) async fn admin_accounts(&self, _call: Call) -> Result<Reply, ApiError> {
        self.ctx
            .admin_accounts(K::SERVICE, |a| async move { self.account_info(&a).await })
            .await
    }

    pub(super) async fn admin_delete_account(&self, call: Call) -> Result<Reply, ApiError> {
        if !K::delete_account(self, call.uuid("id")?).await? {
            return Err(ApiError::not_found("account not found"));
        }
        Ok(deleted::<K>())
    }

    pub(super) async fn app_token(&self, call: Call) -> Result<Reply, ApiError> {
        self.flows.login_for_page(self.accounts(), &call.request).await
    }

    /// `GET /app/config.json`: the service, whether it takes registrations, and the other
    /// service of this process if it runs one (`null` otherwise).
    pub(super) async fn app_config(&self, _call: Call) -> Result<Reply, ApiError> {
        let mut config = Map::new();
        config.insert("service".into(), json!(K::SERVICE.name()));
        config.insert("registration".into(), json!(self.ctx.settings.registration_open));
        let port = self.sibling.map(|port| K::sibling_config(self, port));
        config.insert(sibling(K::SERVICE).name().into(), json!(port));
        Ok(app::config(&Value::Object(config)))
    }

    /// `GET /app/<name>`: a page or file of the web interface (`/app/` is the service's
    /// page); the pages that call the other service of this process may connect to it.
    pub(super) async fn app(&self, call: Call) -> Result<Reply, ApiError> {
        let name = call.capture("name").unwrap_or("");
        let origins = &self.ctx.settings.web_origins;
        let public = match K::SERVICE {
            ServiceKind::Inbox => origins.scheduler.as_deref(),
            ServiceKind::Scheduler => origins.inbox.as_deref(),
        };
        let connect = match self.sibling {
            Some(port) if K::CALLS_SIBLING.contains(&name) => app::sibling_connect(&call.request, port, public),
            _ => Vec::new(),
        };
        app::serve(&call.request, &[K::APP, app::COMMON], name, &connect)
    }
}

/// The other service.
fn sibling(service: ServiceKind) -> ServiceKind {
    match service {
        ServiceKind::Inbox => ServiceKind::Scheduler,
        ServiceKind::Scheduler => ServiceKind::Inbox,
    }
}

fn deleted<K: Kind>() -> Reply {
    Reply {
        status: K::DELETED,
        ..Reply::empty()
    }
}
