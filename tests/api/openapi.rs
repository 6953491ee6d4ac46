//! The OpenAPI documents of both services (issue 20, docs/api.md): served at
//! `GET /openapi.json` without credentials, linked from `GET /`, OpenAPI 3.1, and listing
//! exactly the routes the server serves.
//!
//! How the server's routes are known without a second hand-kept list: the test reads the
//! route table itself (`pigeonhole::shell::listing`: every row of the service, each
//! `inbox|intray` alternative spelt out, one `{}` per capture), the same rows the server
//! matches requests against. A route added to the table without the document, or documented
//! without the table, fails here; so does a documented permission that is not the row's
//! (access and `also_needs`). Then every documented operation is sent to
//! the running server without credentials: none may answer "no such path" or 405, the
//! protected ones (a `security` list) must answer 401 and the public ones must not.
//! `HEAD` is served wherever `GET` is and is not listed. The answers' bodies and statuses are
//! checked against the documents by Schemathesis (tests/openapi/run).

use crate::common;

use common::{Api, Auth, Method, Server};
use pigeonhole::domain::permissions::{Access, Permission};
use pigeonhole::http::BodyUse;
use pigeonhole::inbox::Inbox;
use pigeonhole::scheduler::Scheduler;
use pigeonhole::shell::{listing, table, Kind};
use serde_json::Value;
use std::collections::BTreeSet;

type Routes = BTreeSet<(String, String)>;

/// The (method, path) pairs the service `K` serves, from its route table
/// (`pigeonhole::shell::listing`), captures as `{}`.
fn served<K: Kind>() -> Routes {
    listing::<K>()
        .into_iter()
        .map(|route| (route.method.to_string(), captures_blank(&route.path)))
        .collect()
}

/// A path with each `{capture}` written `{}`.
fn captures_blank(path: &str) -> String {
    captures_filled(path, "{}")
}

/// A path with each `{capture}` replaced by `with`.
fn captures_filled(path: &str, with: &str) -> String {
    let mut filled = String::new();
    let mut in_capture = false;
    for c in path.chars() {
        match c {
            '{' => in_capture = true,
            '}' => {
                in_capture = false;
                filled.push_str(with);
            }
            _ if !in_capture => filled.push(c),
            _ => {}
        }
    }
    filled
}

/// The (method, path) pairs a document lists, captures as `{}`.
fn routes_of_document(doc: &Value) -> Routes {
    let mut out = Routes::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let normal = captures_blank(path);
        for method in item.as_object().expect("path item").keys() {
            out.insert((method.to_uppercase(), normal.clone()));
        }
    }
    out
}

async fn document(api: &Api) -> Value {
    let r = api.get("/openapi.json", &Auth::None).await.expect(200);
    assert_eq!(r.media_type(), "application/json");
    let doc = r.json();
    let version = doc["openapi"].as_str().expect("an openapi version");
    assert!(version.starts_with("3.1."), "OpenAPI 3.1, not {version}");
    // HEAD like every GET
    let head = api.send(api.request(Method::HEAD, "/openapi.json", &Auth::None)).await;
    assert_eq!(head.status, 200);
    doc
}

/// Sends every documented operation without credentials (captures filled with a UUID that
/// names nothing): a served path, the documented protection.
async fn probe(api: &Api, doc: &Value) {
    let uuid = "3f2b8a52-6f0e-4c1e-9d3a-0b7c5e1d2a44";
    for (path, item) in doc["paths"].as_object().unwrap() {
        let concrete = captures_filled(path, uuid);
        for (method, op) in item.as_object().unwrap() {
            let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = api.send(api.request(m, &concrete, &Auth::None)).await;
            let what = format!("{method} {concrete}: {} {}", r.status, r.text());
            assert_ne!(r.status, 405, "{what}");
            if r.status == 404 && r.media_type() == "application/json" {
                assert_ne!(r.json()["error"], "no such path", "{what}");
            }
            let security = op["security"].as_array().expect("every operation says its security");
            if security.is_empty() {
                assert_ne!(r.status, 401, "documented public: {what}");
            } else {
                assert_eq!(r.status, 401, "documented protected: {what}");
                let schemes: BTreeSet<String> = security
                    .iter()
                    .map(|s| s.as_object().unwrap().keys().cloned().collect::<Vec<_>>().join("+"))
                    .collect();
                let expected: BTreeSet<String> = ["bearer", "accessKey+username"].map(String::from).into();
                assert_eq!(schemes, expected, "{what}");
            }
            // every error status answers the error shape
            for (status, response) in op["responses"].as_object().unwrap() {
                if status.as_str() >= "400" && response["content"].get("application/json").is_some() {
                    let schema = &response["content"]["application/json"]["schema"];
                    assert!(
                        schema["$ref"] == "#/components/schemas/Error" || status == "503",
                        "{method} {path} {status}"
                    );
                }
            }
        }
    }
}

async fn check<K: Kind>(api: &Api) {
    let doc = document(api).await;
    let served = served::<K>();
    let documented = routes_of_document(&doc);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not documented: {undocumented:?}; documented but not served: {unserved:?}"
    );
    probe(api, &doc).await;
    // linked from GET /
    let root = api.get("/", &Auth::None).await.expect(200);
    assert!(
        root.text().contains("href=\"/openapi.json\""),
        "GET / links the document"
    );
}

#[tokio::test]
async fn inbox_document_lists_exactly_the_served_routes() {
    let server = Server::start().await;
    check::<Inbox>(&server.api).await;
}

#[tokio::test]
async fn scheduler_document_lists_exactly_the_served_routes() {
    let server = Server::start().await;
    check::<Scheduler>(&server.scheduler).await;
}

#[test]
fn the_listing_spells_every_alternative_of_a_path() {
    let inbox = served::<Inbox>();
    for path in ["/inbox/item/{}", "/intray/item/{}"] {
        assert!(inbox.contains(&("GET".to_owned(), path.to_owned())), "{path}");
        assert!(inbox.contains(&("DELETE".to_owned(), path.to_owned())), "{path}");
    }
    assert!(inbox.contains(&("GET".to_owned(), "/".to_owned())));
    let scheduler = served::<Scheduler>();
    for method in ["GET", "POST"] {
        assert!(scheduler.contains(&(method.to_owned(), "/verify-email/{}/{}".to_owned())));
    }
    assert!(scheduler.contains(&("POST".to_owned(), "/trigger/intray".to_owned())));
}

/// A documented path with each `{capture}` replaced by `with`, as the route table's
/// segments.
fn segments_of(path: &str, with: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(|s| {
            if s.starts_with('{') {
                with.to_owned()
            } else {
                s.to_owned()
            }
        })
        .collect()
}

/// The permissions of every documented operation (`x-permissions`, `x-admin-only`; none for
/// a public one) are exactly those the route table asks for: the row's access and then its
/// `also_needs`.
fn check_permissions<K: Kind>(doc: &Value) {
    let table = table::<K>();
    let mut protected = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let segments = segments_of(path, "3f2b8a52-6f0e-4c1e-9d3a-0b7c5e1d2a44");
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        for (method, op) in item.as_object().unwrap() {
            let m = warp::http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (row, _) = table
                .find(&m, &segments)
                .unwrap_or_else(|_| panic!("{method} {path} is not routed"));
            let needs = |p: Permission| {
                std::iter::once(p)
                    .chain(row.also_needs.iter().copied())
                    .map(Permission::name)
                    .collect()
            };
            let (expected, admin): (Vec<&str>, bool) = match row.access {
                Access::Public | Access::Registration => (vec![], false),
                Access::Needs(p) => (needs(p), false),
                Access::Admin(p) => (needs(p), true),
            };
            let documented: Vec<&str> = op["x-permissions"]
                .as_array()
                .map(|a| a.iter().map(|p| p.as_str().expect("a permission name")).collect())
                .unwrap_or_default();
            assert_eq!(documented, expected, "the permissions of {method} {path}");
            assert_eq!(
                op["x-admin-only"].as_bool().unwrap_or(false),
                admin,
                "admin only: {method} {path}"
            );
            protected += usize::from(!expected.is_empty());
        }
    }
    assert!(protected > 10, "only {protected} protected operations read");
}

#[test]
fn every_documented_permission_is_the_route_tables() {
    let doc: Value = serde_json::from_str(include_str!("../../assets/openapi/inbox.json")).unwrap();
    check_permissions::<Inbox>(&doc);
    let doc: Value = serde_json::from_str(include_str!("../../assets/openapi/scheduler.json")).unwrap();
    check_permissions::<Scheduler>(&doc);
}

/// The order of checks (inbox.md §1.2) on every route of the service `K`'s table, as the
/// table declares it: a body over the cap is a 413 before anything (credentials, body use);
/// a protected route without credentials is a 401 before its body is read (a body that is
/// not JSON); with credentials, a route that reads its body answers on the body: 400 for
/// one that is not JSON, except plain-text capture (`AddText`), whose item it becomes.
async fn check_order<K: Kind>(api: &Api, cap: usize) {
    let caller = api.user("admin").await;
    let uuid = "3f2b8a52-6f0e-4c1e-9d3a-0b7c5e1d2a44";
    let over = " ".repeat(cap + 1);
    let mut protected_reading = 0;
    for route in listing::<K>() {
        let path = captures_filled(&route.path, uuid);
        let what = format!("{} {path}", route.method);
        let send = |auth: &Auth, body: Vec<u8>| {
            api.send(
                api.request(route.method.clone(), &path, auth)
                    .header("Content-Type", "application/json")
                    .body(body),
            )
        };
        assert_eq!(send(&Auth::None, over.clone().into()).await.status, 413, "{what}");
        assert_eq!(send(&caller, over.clone().into()).await.status, 413, "{what}");
        if matches!(route.access, Access::Public | Access::Registration) {
            continue;
        }
        send(&Auth::None, b"{not json".to_vec()).await.expect_error(401);
        if route.body != BodyUse::Discard {
            protected_reading += 1;
            let r = send(&caller, b"{not json".to_vec()).await;
            let read = if route.name == "AddText" { 200 } else { 400 };
            assert_eq!(r.status, read, "{what}: {}", r.text());
        }
    }
    assert!(
        protected_reading >= 5,
        "only {protected_reading} protected routes read a body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_checks_the_size_then_the_credentials_then_the_body() {
    let cap = 1024;
    let server = Server::start_with(|s| s.max_body_bytes = cap as u64).await;
    check_order::<Inbox>(&server.api, cap).await;
    check_order::<Scheduler>(&server.scheduler, cap).await;
}
