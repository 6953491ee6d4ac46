//! The routes both services serve alike (inbox.md §2–3, scheduler.md §2), declared once;
//! their handlers are in `handlers.rs`. Each service adds its own rows (its `routes.rs`).

use super::{Kind, Shell};
use crate::domain::permissions::{Access::*, Permission as P};
use crate::http::routes::{handler, Row};
use crate::http::BodyUse::*;

#[rustfmt::skip]
pub(super) fn shared<K: Kind>() -> Vec<Row<Shell<K>>> {
    vec![
        Row::get("/",                  "Root",               Public, Discard, handler!(api_page)),
        // the process's health and this service's OpenAPI document, no credentials
        // (docs/operations.md, docs/api.md)
        Row::get("/healthz",           "Health",             Public, Discard, handler!(health)),
        Row::get("/openapi.json",      "OpenApi",            Public, Discard, handler!(openapi)),
        Row::post("/register",         "Register",           Registration, Read, handler!(register)),
        Row::post("/login",            "Login",              Public, Read, handler!(login)),
        Row::get("/pricing",           "Pricing",            Public, Discard, handler!(pricing)),
        Row::get("/permissions",       "Permissions",        Needs(P::PermitGetPermissions), Discard, handler!(permissions)),
        Row::get("/account",           "GetAccount",         Needs(P::PermitGetAccountInfo), Discard, handler!(account)),
        Row::delete("/account",        "DeleteAccount",      Needs(P::PermitDeleteAccount), Discard, handler!(delete_account)),
        Row::get("/access-key",        "ListAccessKeys",     Needs(P::PermitGetAccessKeys), Discard, handler!(access_keys)),
        Row::post("/access-key",       "AddAccessKey",       Needs(P::PermitPostAddAccessKey), Read, handler!(add_access_key)),
        Row::get("/access-key/:id",    "GetAccessKey",       Needs(P::PermitGetAccessKey), Discard, handler!(access_key)),
        Row::delete("/access-key/:id", "DeleteAccessKey",    Needs(P::PermitDeleteAccessKey), Discard, handler!(delete_access_key)),
        Row::get("/admin/stats",       "AdminStats",         Admin(P::PermitAdminGetStats), Discard, handler!(admin_stats)),
        Row::get("/admin/accounts",    "AdminAccounts",      Admin(P::PermitAdminGetAccounts), Discard, handler!(admin_accounts)),
        Row::delete("/admin/account/:id", "AdminDeleteAccount", Admin(P::PermitAdminDeleteAccount), Discard, handler!(admin_delete_account)),
        // the web interface (docs/web.md): its login answers the token as JSON, its
        // configuration says what the pages need to know of this server, `/app/` is the
        // service's page
        Row::post("/app/token",        "AppToken",           Public, Read, handler!(app_token)),
        Row::get("/app/config.json",   "AppConfig",          Public, Discard, handler!(app_config)),
        Row::get("/app",               "App",                Public, Discard, handler!(app)),
        Row::get("/app/:name",         "App",                Public, Discard, handler!(app)),
    ]
}
