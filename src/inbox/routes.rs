//! The inbox service's route table (inbox.md §0): method and path → [`Route`], with 404 for
//! unknown paths and 405 for a known path with another method. `/intray/...` answers like
//! `/inbox/...`. Every route also knows who may call it and whether it reads a body.

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
    Register,
    Login,
    Pricing,
    Permissions,
    GetAccount,
    /// `GET /account/export`: the account as JSON (docs/backup.md).
    Export,
    /// `POST /account/import`: an export brought in.
    Import,
    ChangePassphrase,
    DeleteAccount,
    AddAccessKey,
    ListAccessKeys,
    GetAccessKey(String),
    DeleteAccessKey(String),
    AddItem,
    /// `POST /inbox/text`: the body, whatever its type, is a text item (plain-text capture).
    AddText,
    GetItem(String),
    DeleteItem(String),
    Items,
    Uuids,
    ShowItem,
    Size,
    Sync,
    AdminStats,
    AdminAccounts,
    AdminDeleteAccount(String),
    /// `GET /app/<name>`: a page or file of the web interface (`/app/` is the inbox page).
    App(String),
    /// `GET /app/config.json`: what the pages need to know of this server.
    AppConfig,
    /// `POST /app/token`: the web interface's login, answering the token as JSON.
    AppToken,
}

fn by_method(
    method: &Method,
    get: Option<Route>,
    post: Option<Route>,
    delete: Option<Route>,
) -> Result<Route, ApiError> {
    let options = [(Method::GET, get), (Method::POST, post), (Method::DELETE, delete)];
    pick(
        method,
        options.into_iter().filter_map(|(m, r)| r.map(|r| (m, r))).collect(),
    )
}

pub fn access(route: &Route) -> Access {
    use Access::*;
    use Permission as P;
    match route {
        Route::Root | Route::Health | Route::OpenApi | Route::Register | Route::Login | Route::Pricing => Public,
        Route::App(_) | Route::AppConfig | Route::AppToken => Public,
        Route::Permissions => Needs(P::PermitGetPermissions),
        Route::GetAccount => Needs(P::PermitGetAccountInfo),
        // and the other permissions of what they read or write (`also_needs`)
        Route::Export => Needs(P::PermitGetItems),
        Route::Import => Needs(P::PermitAdd),
        Route::ChangePassphrase => Needs(P::PermitPostChangePassphrase),
        Route::DeleteAccount => Needs(P::PermitDeleteAccount),
        Route::AddAccessKey => Needs(P::PermitPostAddAccessKey),
        Route::ListAccessKeys => Needs(P::PermitGetAccessKeys),
        Route::GetAccessKey(_) => Needs(P::PermitGetAccessKey),
        Route::DeleteAccessKey(_) => Needs(P::PermitDeleteAccessKey),
        Route::AddItem | Route::AddText => Needs(P::PermitAdd),
        Route::GetItem(_) => Needs(P::PermitGetItem),
        Route::DeleteItem(_) => Needs(P::PermitDelete),
        Route::Items => Needs(P::PermitGetItems),
        Route::Uuids => Needs(P::PermitGetItemUUIDs),
        Route::ShowItem => Needs(P::PermitShow),
        Route::Size => Needs(P::PermitSize),
        Route::Sync => Needs(P::PermitSync),
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
        Route::Export => &[P::PermitGetAccessKeys, P::PermitGetAccountInfo],
        _ => &[],
    }
}

/// The six endpoints that take a body (inbox.md §1.1), and plain-text capture.
pub fn takes_body(route: &Route) -> BodyUse {
    let reads = matches!(
        route,
        Route::Register
            | Route::Login
            | Route::ChangePassphrase
            | Route::AddAccessKey
            | Route::AddItem
            | Route::AddText
            | Route::Sync
            | Route::AppToken
    );
    match route {
        Route::Import => BodyUse::Import,
        _ if reads => BodyUse::Read,
        _ => BodyUse::Discard,
    }
}

pub fn route(method: &Method, segments: &[&str]) -> Result<Route, ApiError> {
    use Route::*;
    let own = |s: &str| s.to_owned();
    match segments {
        [""] => by_method(method, Some(Root), None, None),
        ["healthz"] => by_method(method, Some(Health), None, None),
        ["openapi.json"] => by_method(method, Some(OpenApi), None, None),
        ["register"] => by_method(method, None, Some(Register), None),
        ["login"] => by_method(method, None, Some(Login), None),
        ["pricing"] => by_method(method, Some(Pricing), None, None),
        ["permissions"] => by_method(method, Some(Permissions), None, None),
        ["account"] => by_method(method, Some(GetAccount), Some(ChangePassphrase), Some(DeleteAccount)),
        // the originals' path for the passphrase change (`POST /account` is the older one)
        ["account", "change-passphrase"] => by_method(method, None, Some(ChangePassphrase), None),
        ["account", "export"] => by_method(method, Some(Export), None, None),
        ["account", "import"] => by_method(method, None, Some(Import), None),
        ["access-key"] => by_method(method, Some(ListAccessKeys), Some(AddAccessKey), None),
        ["access-key", id] => by_method(
            method,
            Some(GetAccessKey(own(id))),
            None,
            Some(DeleteAccessKey(own(id))),
        ),
        ["inbox" | "intray", "item"] => by_method(method, None, Some(AddItem), None),
        ["inbox" | "intray", "text"] => by_method(method, None, Some(AddText), None),
        ["inbox" | "intray", "item", id] => by_method(method, Some(GetItem(own(id))), None, Some(DeleteItem(own(id)))),
        ["inbox" | "intray", "items"] => by_method(method, Some(Items), None, None),
        ["inbox" | "intray", "uuids"] => by_method(method, Some(Uuids), None, None),
        ["inbox" | "intray", "show-item"] => by_method(method, Some(ShowItem), None, None),
        ["inbox" | "intray", "size"] => by_method(method, Some(Size), None, None),
        ["inbox" | "intray", "sync"] => by_method(method, None, Some(Sync), None),
        ["admin", "stats"] => by_method(method, Some(AdminStats), None, None),
        ["admin", "accounts"] => by_method(method, Some(AdminAccounts), None, None),
        ["admin", "account", id] => by_method(method, None, None, Some(AdminDeleteAccount(own(id)))),
        ["app", "token"] => by_method(method, None, Some(AppToken), None),
        ["app", "config.json"] => by_method(method, Some(AppConfig), None, None),
        ["app"] => by_method(method, Some(App(String::new())), None, None),
        ["app", name] => by_method(method, Some(App(own(name))), None, None),
        _ => Err(ApiError::unknown_path()),
    }
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
        assert_eq!(r(Method::GET, "/"), Ok(Route::Root));
        assert_eq!(r(Method::GET, "/healthz"), Ok(Route::Health));
        assert_eq!(r(Method::POST, "/healthz"), Err(405));
        assert_eq!(r(Method::GET, "/health"), Err(404));
        assert_eq!(r(Method::GET, "/openapi.json"), Ok(Route::OpenApi));
        assert_eq!(r(Method::POST, "/openapi.json"), Err(405));
        assert_eq!(r(Method::POST, "/intray/item"), Ok(Route::AddItem));
        assert_eq!(r(Method::POST, "/inbox/text"), Ok(Route::AddText));
        assert_eq!(r(Method::GET, "/inbox/text"), Err(405));
        assert_eq!(r(Method::DELETE, "/inbox/item/x"), Ok(Route::DeleteItem("x".into())));
        assert_eq!(r(Method::GET, "/login"), Err(405));
        assert_eq!(
            r(Method::POST, "/account/change-passphrase"),
            Ok(Route::ChangePassphrase)
        );
        assert_eq!(r(Method::GET, "/account/change-passphrase"), Err(405));
        assert_eq!(r(Method::PUT, "/inbox/items"), Err(405));
        assert_eq!(r(Method::GET, "/inbox/items/"), Err(404));
        assert_eq!(r(Method::GET, "/inbox/nothing-here"), Err(404));
        assert_eq!(r(Method::GET, "/Inbox/items"), Err(404));
        assert_eq!(r(Method::GET, "/app/"), Ok(Route::App("".into())));
        assert_eq!(r(Method::GET, "/app/app.css"), Ok(Route::App("app.css".into())));
        assert_eq!(r(Method::POST, "/app/token"), Ok(Route::AppToken));
        assert_eq!(r(Method::GET, "/app/a/b"), Err(404));
    }
}
