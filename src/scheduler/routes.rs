//! The scheduler service's route table (scheduler.md §0): 404 for unknown paths, 405 for a
//! known path with another method. `/tickler/...` answers like `/scheduler/...`, and
//! `POST /trigger/intray` like `POST /trigger/inbox`.

use crate::domain::permissions::{Access, Permission};
use crate::http::{pick, ApiError, BodyUse};
use warp::http::Method;

#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Root,
    /// `GET /healthz`: the process's health, no credentials (docs/operations.md).
    Health,
    /// `GET /openapi.json`: this service's OpenAPI document, no credentials (docs/api.md).
    OpenApi,
    ChangePassphrase,
    Register,
    Login,
    Pricing,
    Loopers,
    GetAccount,
    /// `GET /account/export`: the account as JSON (docs/backup.md).
    Export,
    /// `POST /account/import`: an export brought in.
    Import,
    DeleteAccount,
    GetSettings,
    PutSettings,
    AddItem,
    GetItem(String),
    EditItem(String),
    DeleteItem(String),
    DeleteTriggereds,
    Retry,
    Items,
    Uuids,
    Sync,
    Triggers,
    GetTrigger(String),
    DeleteTrigger(String),
    AddEmailTrigger,
    Verify(String, String),
    /// The page of the link in the verification e-mail (`GET`), and its button (`POST`):
    /// the key in the link is the credential.
    VerifyPage(String, String),
    VerifyByLink(String, String),
    Resend(String),
    AddInboxTrigger,
    /// `GET /push/key`: the server's application server key (§6.4), no credentials.
    PushKey,
    AddPushTrigger,
    AddWebhookTrigger,
    AdminStats,
    AdminAccounts,
    AdminDeleteAccount(String),
    Permissions,
    AddAccessKey,
    ListAccessKeys,
    GetAccessKey(String),
    DeleteAccessKey(String),
    /// `GET /app/<name>`: a page or file of the web interface (`/app/` is the scheduler page).
    App(String),
    /// `GET /app/config.json`: what the pages need to know of this server (the local inbox).
    AppConfig,
    /// `POST /app/token`: the web interface's login, answering the token as JSON.
    AppToken,
}

/// Who may call a route: public, or credentials (a bearer token, or the `Username` +
/// `Access-Key` headers) that carry the permission named after the endpoint.
pub fn access(route: &Route) -> Access {
    use Access::*;
    use Permission as P;
    match route {
        Route::Root
        | Route::Health
        | Route::OpenApi
        | Route::Register
        | Route::Login
        | Route::Pricing
        | Route::PushKey
        | Route::Loopers => Public,
        Route::VerifyPage(..) | Route::VerifyByLink(..) => Public,
        Route::App(_) | Route::AppConfig | Route::AppToken => Public,
        Route::ChangePassphrase => Needs(P::PermitPostChangePassphrase),
        Route::GetAccount => Needs(P::PermitGetAccountInfo),
        // and the other permissions of what they read or write (`also_needs`)
        Route::Export => Needs(P::PermitGetItems),
        Route::Import => Needs(P::PermitAddItem),
        Route::DeleteAccount => Needs(P::PermitDeleteAccount),
        Route::GetSettings => Needs(P::PermitGetSettings),
        Route::PutSettings => Needs(P::PermitPutSettings),
        Route::AddItem => Needs(P::PermitAddItem),
        Route::GetItem(_) => Needs(P::PermitGetItem),
        Route::EditItem(_) => Needs(P::PermitEditItem),
        Route::DeleteItem(_) => Needs(P::PermitDeleteItem),
        Route::DeleteTriggereds => Needs(P::PermitDeleteTriggereds),
        Route::Retry => Needs(P::PermitRetry),
        Route::Items => Needs(P::PermitGetItems),
        Route::Uuids => Needs(P::PermitGetItemUUIDs),
        Route::Sync => Needs(P::PermitSync),
        Route::Triggers | Route::GetTrigger(_) => Needs(P::PermitGetTriggers),
        Route::DeleteTrigger(_) => Needs(P::PermitDeleteTrigger),
        Route::AddEmailTrigger | Route::AddInboxTrigger | Route::AddPushTrigger | Route::AddWebhookTrigger => {
            Needs(P::PermitAddTrigger)
        }
        Route::Verify(..) => Needs(P::PermitVerifyTrigger),
        Route::Resend(_) => Needs(P::PermitResendVerification),
        Route::Permissions => Needs(P::PermitGetPermissions),
        Route::AddAccessKey => Needs(P::PermitPostAddAccessKey),
        Route::ListAccessKeys => Needs(P::PermitGetAccessKeys),
        Route::GetAccessKey(_) => Needs(P::PermitGetAccessKey),
        Route::DeleteAccessKey(_) => Needs(P::PermitDeleteAccessKey),
        Route::AdminStats => Admin(P::PermitAdminGetStats),
        Route::AdminAccounts => Admin(P::PermitAdminGetAccounts),
        Route::AdminDeleteAccount(_) => Admin(P::PermitAdminDeleteAccount),
    }
}

/// The permissions a route needs besides the one [`access`] names: those of what its
/// handler also reads or writes (an export reads the account and its keys too). The
/// OpenAPI document lists both (`x-permissions`, tests/openapi.rs).
pub fn also_needs(route: &Route) -> &'static [Permission] {
    use Permission as P;
    match route {
        Route::Export => &[
            P::PermitGetSettings,
            P::PermitGetTriggers,
            P::PermitGetAccessKeys,
            P::PermitGetAccountInfo,
        ],
        Route::Import => &[P::PermitPutSettings, P::PermitAddTrigger],
        _ => &[],
    }
}

/// The endpoints that take a body (scheduler.md §0).
pub fn takes_body(route: &Route) -> BodyUse {
    let reads = matches!(
        route,
        Route::Register
            | Route::Login
            | Route::ChangePassphrase
            | Route::PutSettings
            | Route::AddItem
            | Route::EditItem(_)
            | Route::Retry
            | Route::Sync
            | Route::AddEmailTrigger
            | Route::AddInboxTrigger
            | Route::AddPushTrigger
            | Route::AddWebhookTrigger
            | Route::AddAccessKey
            | Route::AppToken
    );
    match route {
        Route::Import => BodyUse::Import,
        _ if reads => BodyUse::Read,
        _ => BodyUse::Discard,
    }
}

pub fn route(method: &Method, segments: &[&str]) -> Result<Route, ApiError> {
    use Method as M;
    use Route::*;
    let own = |s: &str| s.to_owned();
    let options = match segments {
        [""] => vec![(M::GET, Root), (M::POST, ChangePassphrase)],
        ["register"] => vec![(M::POST, Register)],
        ["login"] => vec![(M::POST, Login)],
        ["pricing"] => vec![(M::GET, Pricing)],
        ["loopers"] => vec![(M::GET, Loopers)],
        ["healthz"] => vec![(M::GET, Health)],
        ["openapi.json"] => vec![(M::GET, OpenApi)],
        ["account"] => vec![(M::GET, GetAccount), (M::DELETE, DeleteAccount)],
        ["account", "export"] => vec![(M::GET, Export)],
        ["account", "import"] => vec![(M::POST, Import)],
        ["account", "settings"] => vec![(M::GET, GetSettings), (M::PUT, PutSettings)],
        ["scheduler" | "tickler", "item"] => vec![(M::POST, AddItem)],
        ["scheduler" | "tickler", "item", "info", id] => vec![(M::GET, GetItem(own(id))), (M::POST, EditItem(own(id)))],
        ["scheduler" | "tickler", "item", "delete", id] => vec![(M::DELETE, DeleteItem(own(id)))],
        ["scheduler" | "tickler", "item", "delete-triggereds"] => vec![(M::POST, DeleteTriggereds)],
        ["scheduler" | "tickler", "item", "retry"] => vec![(M::POST, Retry)],
        ["scheduler" | "tickler", "items"] => vec![(M::GET, Items)],
        ["scheduler" | "tickler", "uuids"] => vec![(M::GET, Uuids)],
        ["sync"] => vec![(M::POST, Sync)],
        ["trigger"] => vec![(M::GET, Triggers)],
        ["trigger", "info", id] => vec![(M::GET, GetTrigger(own(id)))],
        ["trigger", "delete", id] => vec![(M::DELETE, DeleteTrigger(own(id)))],
        ["trigger", "email"] => vec![(M::POST, AddEmailTrigger)],
        ["trigger", "email", "verify", id, key] => vec![(M::POST, Verify(own(id), own(key)))],
        ["verify-email", id, key] => vec![
            (M::GET, VerifyPage(own(id), own(key))),
            (M::POST, VerifyByLink(own(id), own(key))),
        ],
        ["trigger", "email", "resend", id] => vec![(M::POST, Resend(own(id)))],
        ["trigger", "inbox" | "intray"] => vec![(M::POST, AddInboxTrigger)],
        ["trigger", "push"] => vec![(M::POST, AddPushTrigger)],
        ["trigger", "webhook"] => vec![(M::POST, AddWebhookTrigger)],
        ["push", "key"] => vec![(M::GET, PushKey)],
        ["permissions"] => vec![(M::GET, Permissions)],
        ["access-key"] => vec![(M::GET, ListAccessKeys), (M::POST, AddAccessKey)],
        ["access-key", id] => vec![(M::GET, GetAccessKey(own(id))), (M::DELETE, DeleteAccessKey(own(id)))],
        ["admin", "stats"] => vec![(M::GET, AdminStats)],
        ["admin", "accounts"] => vec![(M::GET, AdminAccounts)],
        ["admin", "account", id] => vec![(M::DELETE, AdminDeleteAccount(own(id)))],
        ["app", "token"] => vec![(M::POST, AppToken)],
        ["app", "config.json"] => vec![(M::GET, AppConfig)],
        ["app"] => vec![(M::GET, App(String::new()))],
        ["app", name] => vec![(M::GET, App(own(name)))],
        _ => return Err(ApiError::unknown_path()),
    };
    pick(method, options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: Method, path: &str) -> Result<Route, u16> {
        let segs: Vec<&str> = path.strip_prefix('/').unwrap().split('/').collect();
        route(&method, &segs).map_err(|e| e.status.as_u16())
    }

    #[test]
    fn table() {
        assert_eq!(r(Method::POST, "/"), Ok(Route::ChangePassphrase));
        assert_eq!(r(Method::POST, "/tickler/item"), Ok(Route::AddItem));
        assert_eq!(r(Method::GET, "/openapi.json"), Ok(Route::OpenApi));
        assert_eq!(r(Method::DELETE, "/openapi.json"), Err(405));
        assert_eq!(r(Method::POST, "/trigger/intray"), Ok(Route::AddInboxTrigger));
        assert_eq!(r(Method::POST, "/trigger/push"), Ok(Route::AddPushTrigger));
        assert_eq!(r(Method::POST, "/trigger/webhook"), Ok(Route::AddWebhookTrigger));
        assert_eq!(r(Method::GET, "/push/key"), Ok(Route::PushKey));
        assert_eq!(r(Method::POST, "/push/key"), Err(405));
        assert_eq!(r(Method::PUT, "/account/settings"), Ok(Route::PutSettings));
        assert_eq!(r(Method::GET, "/trigger/email/verify/a/b"), Err(405));
        assert_eq!(r(Method::GET, "/scheduler/nothing-here"), Err(404));
        assert_eq!(r(Method::GET, "/scheduler/items/"), Err(404));
        assert_eq!(r(Method::POST, "/access-key"), Ok(Route::AddAccessKey));
        assert_eq!(
            r(Method::DELETE, "/access-key/x"),
            Ok(Route::DeleteAccessKey("x".into()))
        );
        assert_eq!(r(Method::GET, "/permissions"), Ok(Route::Permissions));
        assert_eq!(
            r(Method::GET, "/verify-email/a/b"),
            Ok(Route::VerifyPage("a".into(), "b".into()))
        );
        assert_eq!(r(Method::DELETE, "/verify-email/a/b"), Err(405));
    }
}
