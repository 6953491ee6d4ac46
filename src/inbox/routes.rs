//! The inbox service's own routes (inbox.md §0), added to those both services serve
//! (`crate::shell`); their handlers are in `handlers.rs`. `/intray/...` answers like
//! `/inbox/...`.

use super::Inbox;
use crate::domain::permissions::{Access::*, Permission as P};
use crate::http::routes::{handler, Row};
use crate::http::BodyUse::*;
use crate::shell::Shell;

#[rustfmt::skip]
pub(super) fn rows() -> Vec<Row<Shell<Inbox>>> {
    vec![
        // `POST /account` is the older path of the passphrase change, the originals' the other
        Row::post("/account",                   "ChangePassphrase", Needs(P::PermitPostChangePassphrase), Read, handler!(change_passphrase)),
        Row::post("/account/change-passphrase", "ChangePassphrase", Needs(P::PermitPostChangePassphrase), Read, handler!(change_passphrase)),
        // the account as JSON, and an export brought in (docs/backup.md)
        Row::get("/account/export",             "Export",           Needs(P::PermitGetItems).and(&[P::PermitGetAccessKeys, P::PermitGetAccountInfo]), Discard, handler!(export)),
        Row::post("/account/import",            "Import",           Needs(P::PermitAdd), Import, handler!(import)),
        Row::post("/inbox|intray/item",         "AddItem",          Needs(P::PermitAdd), Read, handler!(add_item)),
        // plain-text capture: the body, whatever its type, is a text item
        Row::post("/inbox|intray/text",         "AddText",          Needs(P::PermitAdd), Read, handler!(add_text)),
        Row::get("/inbox|intray/item/:id",      "GetItem",          Needs(P::PermitGetItem), Discard, handler!(item)),
        Row::delete("/inbox|intray/item/:id",   "DeleteItem",       Needs(P::PermitDelete), Discard, handler!(delete_item)),
        Row::get("/inbox|intray/items",         "Items",            Needs(P::PermitGetItems), Discard, handler!(items)),
        Row::get("/inbox|intray/uuids",         "Uuids",            Needs(P::PermitGetItemUUIDs), Discard, handler!(uuids)),
        Row::get("/inbox|intray/show-item",     "ShowItem",         Needs(P::PermitShow), Discard, handler!(show_item)),
        Row::get("/inbox|intray/size",          "Size",             Needs(P::PermitSize), Discard, handler!(size)),
        Row::post("/inbox|intray/sync",         "Sync",             Needs(P::PermitSync), Read, handler!(sync)),
    ]
}

#[cfg(test)]
mod tests {
    use crate::http::routes::Table;
    use crate::shell::{self, Shell};
    use warp::http::Method;

    fn r(method: Method, path: &str) -> Result<(&'static str, Option<String>), u16> {
        let segs: Vec<&str> = path.strip_prefix('/').unwrap().split('/').collect();
        let table: Table<Shell<super::Inbox>> = shell::table();
        table
            .find(&method, &segs)
            .map(|(row, captures)| (row.name, captures.into_iter().next().map(|(_, v)| v)))
            .map_err(|e| e.status().as_u16())
    }

    fn ok(name: &'static str) -> Result<(&'static str, Option<String>), u16> {
        Ok((name, None))
    }

    #[test]
    fn table() {
        assert_eq!(r(Method::GET, "/"), ok("Root"));
        assert_eq!(r(Method::GET, "/healthz"), ok("Health"));
        assert_eq!(r(Method::POST, "/healthz"), Err(405));
        assert_eq!(r(Method::GET, "/health"), Err(404));
        assert_eq!(r(Method::GET, "/openapi.json"), ok("OpenApi"));
        assert_eq!(r(Method::POST, "/openapi.json"), Err(405));
        assert_eq!(r(Method::POST, "/intray/item"), ok("AddItem"));
        assert_eq!(r(Method::POST, "/inbox/text"), ok("AddText"));
        assert_eq!(r(Method::GET, "/inbox/text"), Err(405));
        assert_eq!(r(Method::DELETE, "/inbox/item/x"), Ok(("DeleteItem", Some("x".into()))));
        assert_eq!(r(Method::GET, "/login"), Err(405));
        assert_eq!(r(Method::POST, "/account/change-passphrase"), ok("ChangePassphrase"));
        assert_eq!(r(Method::GET, "/account/change-passphrase"), Err(405));
        assert_eq!(r(Method::PUT, "/inbox/items"), Err(405));
        assert_eq!(r(Method::GET, "/inbox/items/"), Err(404));
        assert_eq!(r(Method::GET, "/inbox/nothing-here"), Err(404));
        assert_eq!(r(Method::GET, "/Inbox/items"), Err(404));
        assert_eq!(r(Method::GET, "/app/"), Ok(("App", Some("".into()))));
        assert_eq!(r(Method::GET, "/app/app.css"), Ok(("App", Some("app.css".into()))));
        assert_eq!(r(Method::POST, "/app/token"), ok("AppToken"));
        assert_eq!(r(Method::GET, "/app/a/b"), Err(404));
    }

    #[test]
    fn no_route_is_declared_twice() {
        let table: Table<Shell<super::Inbox>> = shell::table();
        assert_eq!(table.served_twice(), Vec::<String>::new());
    }
}
