//! The scheduler service's own routes (scheduler.md §0), added to those both services serve
//! (`crate::shell`); their handlers are in `handlers.rs`. `/tickler/...` answers like
//! `/scheduler/...`, and `POST /trigger/intray` like `POST /trigger/inbox`.

use super::Scheduler;
use crate::domain::permissions::{Access::*, Permission as P};
use crate::http::routes::{handler, Row};
use crate::http::BodyUse::*;
use crate::shell::Shell;

#[rustfmt::skip]
pub(super) fn rows() -> Vec<Row<Shell<Scheduler>>> {
    vec![
        Row::post("/",                                  "ChangePassphrase",  Needs(P::PermitPostChangePassphrase), Read, handler!(change_passphrase)),
        // the workers' status, no credentials
        Row::get("/loopers",                            "Loopers",           Public, Discard, handler!(loopers)),
        // the account as JSON, and an export brought in (docs/backup.md)
        Row::get("/account/export",                     "Export",            Needs(P::PermitGetItems).and(&[P::PermitGetSettings, P::PermitGetTriggers, P::PermitGetAccessKeys, P::PermitGetAccountInfo]), Discard, handler!(export)),
        Row::post("/account/import",                    "Import",            Needs(P::PermitAddItem).and(&[P::PermitPutSettings, P::PermitAddTrigger]), Import, handler!(import)),
        Row::get("/account/settings",                   "GetSettings",       Needs(P::PermitGetSettings), Discard, handler!(get_settings)),
        Row::put("/account/settings",                   "PutSettings",       Needs(P::PermitPutSettings), Read, handler!(put_settings)),
        Row::post("/scheduler|tickler/item",            "AddItem",           Needs(P::PermitAddItem), Read, handler!(add_item)),
        Row::get("/scheduler|tickler/item/info/:id",    "GetItem",           Needs(P::PermitGetItem), Discard, handler!(item)),
        Row::post("/scheduler|tickler/item/info/:id",   "EditItem",          Needs(P::PermitEditItem), Read, handler!(edit_item)),
        Row::delete("/scheduler|tickler/item/delete/:id", "DeleteItem",      Needs(P::PermitDeleteItem), Discard, handler!(delete_item)),
        Row::post("/scheduler|tickler/item/delete-triggereds", "DeleteTriggereds", Needs(P::PermitDeleteTriggereds), Discard, handler!(delete_triggereds)),
        Row::post("/scheduler|tickler/item/retry",      "Retry",             Needs(P::PermitRetry), Read, handler!(retry)),
        Row::get("/scheduler|tickler/items",            "Items",             Needs(P::PermitGetItems), Discard, handler!(items)),
        Row::get("/scheduler|tickler/uuids",            "Uuids",             Needs(P::PermitGetItemUUIDs), Discard, handler!(uuids)),
        Row::post("/sync",                              "Sync",              Needs(P::PermitSync), Read, handler!(sync)),
        Row::get("/trigger",                            "Triggers",          Needs(P::PermitGetTriggers), Discard, handler!(triggers)),
        Row::get("/trigger/info/:id",                   "GetTrigger",        Needs(P::PermitGetTriggers), Discard, handler!(trigger)),
        Row::delete("/trigger/delete/:id",              "DeleteTrigger",     Needs(P::PermitDeleteTrigger), Discard, handler!(delete_trigger)),
        Row::post("/trigger/email",                     "AddEmailTrigger",   Needs(P::PermitAddTrigger), Read, handler!(add_email_trigger)),
        Row::post("/trigger/email/verify/:id/:key",     "Verify",            Needs(P::PermitVerifyTrigger), Discard, handler!(verify_trigger)),
        // the link of the verification e-mail: its page (`GET`) and its button (`POST`); the
        // key in the link is the credential
        Row::get("/verify-email/:id/:key",              "VerifyPage",        Public, Discard, handler!(verify_page)),
        Row::post("/verify-email/:id/:key",             "VerifyByLink",      Public, Discard, handler!(verify_by_link)),
        Row::post("/trigger/email/resend/:id",          "Resend",            Needs(P::PermitResendVerification), Discard, handler!(resend)),
        Row::post("/trigger/inbox|intray",              "AddInboxTrigger",   Needs(P::PermitAddTrigger), Read, handler!(add_inbox_trigger)),
        Row::post("/trigger/push",                      "AddPushTrigger",    Needs(P::PermitAddTrigger), Read, handler!(add_push_trigger)),
        Row::post("/trigger/webhook",                   "AddWebhookTrigger", Needs(P::PermitAddTrigger), Read, handler!(add_webhook_trigger)),
        // the server's application server key (§6.4), no credentials
        Row::get("/push/key",                           "PushKey",           Public, Discard, handler!(push_key)),
    ]
}

#[cfg(test)]
mod tests {
    use crate::http::routes::Table;
    use crate::shell::{self, Shell};
    use warp::http::Method;

    fn r(method: Method, path: &str) -> Result<(&'static str, Vec<String>), u16> {
        let segs: Vec<&str> = path.strip_prefix('/').unwrap().split('/').collect();
        let table: Table<Shell<super::Scheduler>> = shell::table();
        table
            .find(&method, &segs)
            .map(|(row, captures)| (row.name, captures.into_iter().map(|(_, v)| v).collect()))
            .map_err(|e| e.status().as_u16())
    }

    fn ok(name: &'static str) -> Result<(&'static str, Vec<String>), u16> {
        Ok((name, vec![]))
    }

    #[test]
    fn table() {
        assert_eq!(r(Method::POST, "/"), ok("ChangePassphrase"));
        assert_eq!(r(Method::POST, "/tickler/item"), ok("AddItem"));
        assert_eq!(r(Method::GET, "/openapi.json"), ok("OpenApi"));
        assert_eq!(r(Method::DELETE, "/openapi.json"), Err(405));
        assert_eq!(r(Method::POST, "/trigger/intray"), ok("AddInboxTrigger"));
        assert_eq!(r(Method::POST, "/trigger/push"), ok("AddPushTrigger"));
        assert_eq!(r(Method::POST, "/trigger/webhook"), ok("AddWebhookTrigger"));
        assert_eq!(r(Method::GET, "/push/key"), ok("PushKey"));
        assert_eq!(r(Method::POST, "/push/key"), Err(405));
        assert_eq!(r(Method::PUT, "/account/settings"), ok("PutSettings"));
        assert_eq!(r(Method::GET, "/trigger/email/verify/a/b"), Err(405));
        assert_eq!(r(Method::GET, "/scheduler/nothing-here"), Err(404));
        assert_eq!(r(Method::GET, "/scheduler/items/"), Err(404));
        assert_eq!(r(Method::POST, "/access-key"), ok("AddAccessKey"));
        assert_eq!(
            r(Method::DELETE, "/access-key/x"),
            Ok(("DeleteAccessKey", vec!["x".into()]))
        );
        assert_eq!(r(Method::GET, "/permissions"), ok("Permissions"));
        assert_eq!(
            r(Method::GET, "/verify-email/a/b"),
            Ok(("VerifyPage", vec!["a".into(), "b".into()]))
        );
        assert_eq!(r(Method::DELETE, "/verify-email/a/b"), Err(405));
        // the inbox's passphrase paths are not the scheduler's
        assert_eq!(r(Method::POST, "/account"), Err(405));
        assert_eq!(r(Method::POST, "/account/change-passphrase"), Err(404));
    }

    #[test]
    fn no_route_is_declared_twice() {
        let table: Table<Shell<super::Scheduler>> = shell::table();
        assert_eq!(table.served_twice(), Vec::<String>::new());
    }
}
