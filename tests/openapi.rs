//! The OpenAPI documents of both services (issue 20, docs/api.md): served at
//! `GET /openapi.json` without credentials, linked from `GET /`, OpenAPI 3.1, and listing
//! exactly the routes the server serves.
//!
//! How the server's routes are known without a second hand-kept list: the test reads the
//! route table itself, the `match segments { … }` of `pub fn route` in src/inbox/routes.rs and
//! src/scheduler/routes.rs, and expands each arm (`"inbox" | "intray"` alternatives, one
//! `{}` per captured segment, the methods of its `by_method(...)` or `vec![(M::…, …)]`). A
//! route added to the table without the document, or documented without the table, fails
//! here; a change to the table's layout that the reader no longer understands fails too
//! (it asserts that every arm yields methods). Then every documented operation is sent to
//! the running server without credentials: none may answer "no such path" or 405, the
//! protected ones (a `security` list) must answer 401 and the public ones must not.
//! `HEAD` is served wherever `GET` is and is not listed. The answers' bodies and statuses are
//! checked against the documents by Schemathesis (tests/openapi/run).

mod common;

use common::{Api, Auth, Method, Server};
use pigeonhole::domain::permissions::{Access, Permission};
use serde_json::Value;
use std::collections::BTreeSet;

type Routes = BTreeSet<(String, String)>;

/// The (method, path) pairs of a routes.rs source: paths with `{}` for captures.
fn routes_of_source(source: &str) -> Routes {
    let start = source.find("pub fn route(").expect("pub fn route in routes.rs");
    let body = &source[start..];
    let body = &body[body.find("match segments {").expect("match segments") + 16..];
    let end = body.find("\n        _ =>").expect("the catch-all arm");
    let body = &body[..end];
    // arms start on lines that begin with `[` (after indentation); comments are skipped
    let mut arms: Vec<String> = Vec::new();
    for line in body.lines() {
        let t = line.trim();
        if t.starts_with("//") || t.is_empty() {
            continue;
        }
        if t.starts_with('[') {
            arms.push(String::new());
        }
        arms.last_mut().expect("an arm starts with [").push_str(t);
        arms.last_mut().unwrap().push(' ');
    }
    let mut out = Routes::new();
    for arm in &arms {
        let close = arm.find(']').expect("pattern end");
        let pattern = &arm[1..close];
        let rhs = &arm[close..];
        let mut paths = vec![String::new()];
        for seg in pattern.split(',').map(str::trim) {
            let alternatives: Vec<String> = if seg.starts_with('"') {
                seg.split('|').map(|a| a.trim().trim_matches('"').to_owned()).collect()
            } else {
                vec!["{}".to_owned()]
            };
            paths = paths
                .iter()
                .flat_map(|p| alternatives.iter().map(move |a| format!("{p}/{a}")))
                .collect();
        }
        let methods = methods_of(rhs);
        assert!(!methods.is_empty(), "no methods read from the arm {arm}");
        for p in &paths {
            for m in &methods {
                out.insert((m.clone(), p.clone()));
            }
        }
    }
    out
}

/// The methods of an arm's right-hand side: `by_method(method, GET, POST, DELETE)` (each
/// `None` or `Some(..)`), or the `M::…` of a `vec![…]`.
fn methods_of(rhs: &str) -> Vec<String> {
    let rhs: String = rhs.split_whitespace().collect();
    if let Some(i) = rhs.find("by_method(method,") {
        let mut args = Vec::new();
        let mut depth = 0;
        let mut current = String::new();
        for c in rhs[i + "by_method(method,".len()..].chars() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => break,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    args.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        args.push(current);
        let args: Vec<&str> = args.iter().map(|a| a.trim()).filter(|a| !a.is_empty()).collect();
        assert_eq!(args.len(), 3, "by_method takes GET, POST, DELETE: {rhs}");
        ["GET", "POST", "DELETE"]
            .iter()
            .zip(args)
            .filter(|(_, a)| *a != "None")
            .map(|(m, _)| m.to_string())
            .collect()
    } else {
        rhs.split("M::")
            .skip(1)
            .map(|s| s.chars().take_while(|c| c.is_ascii_uppercase()).collect())
            .collect()
    }
}

/// The (method, path) pairs a document lists, captures as `{}`.
fn routes_of_document(doc: &Value) -> Routes {
    let mut out = Routes::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let mut normal = String::new();
        let mut in_capture = false;
        for c in path.chars() {
            match c {
                '{' => in_capture = true,
                '}' => {
                    in_capture = false;
                    normal.push_str("{}");
                }
                _ if !in_capture => normal.push(c),
                _ => {}
            }
        }
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
        let mut concrete = String::new();
        let mut in_capture = false;
        for c in path.chars() {
            match c {
                '{' => in_capture = true,
                '}' => {
                    in_capture = false;
                    concrete.push_str(uuid);
                }
                _ if !in_capture => concrete.push(c),
                _ => {}
            }
        }
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

async fn check(api: &Api, source: &str) {
    let doc = document(api).await;
    let served = routes_of_source(source);
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
    check(&server.api, include_str!("../src/inbox/routes.rs")).await;
}

#[tokio::test]
async fn scheduler_document_lists_exactly_the_served_routes() {
    let server = Server::start().await;
    check(&server.scheduler, include_str!("../src/scheduler/routes.rs")).await;
}

#[test]
fn the_route_reader_reads_both_layouts() {
    let source = r#"
pub fn route(method: &Method, segments: &[&str]) -> Result<Route, ApiError> {
    match segments {
        [""] => by_method(method, Some(Root), None, None),
        // a comment
        ["inbox" | "intray", "item", id] => by_method(method, Some(GetItem(own(id))), None, Some(DeleteItem(own(id)))),
        ["access-key", id] => by_method(
            method,
            None,
            Some(Add(own(id))),
            None,
        ),
        ["verify-email", id, key] => vec![
            (M::GET, VerifyPage(own(id), own(key))),
            (M::PUT, VerifyByLink(own(id), own(key))),
        ],
        _ => Err(ApiError::unknown_path()),
    }
}"#;
    let got: Vec<String> = routes_of_source(source)
        .into_iter()
        .map(|(m, p)| format!("{m} {p}"))
        .collect();
    assert_eq!(
        got,
        [
            "DELETE /inbox/item/{}",
            "DELETE /intray/item/{}",
            "GET /",
            "GET /inbox/item/{}",
            "GET /intray/item/{}",
            "GET /verify-email/{}/{}",
            "POST /access-key/{}",
            "PUT /verify-email/{}/{}",
        ]
    );
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
/// a public one) are exactly those the route table asks for: `access(route)` and then
/// `also_needs(route)`.
fn check_permissions<R>(
    doc: &Value,
    route: impl Fn(&warp::http::Method, &[&str]) -> Option<R>,
    access: impl Fn(&R) -> Access,
    also_needs: impl Fn(&R) -> &'static [Permission],
) {
    let mut protected = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        let segments = segments_of(path, "3f2b8a52-6f0e-4c1e-9d3a-0b7c5e1d2a44");
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        for (method, op) in item.as_object().unwrap() {
            let m = warp::http::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let r = route(&m, &segments).unwrap_or_else(|| panic!("{method} {path} is not routed"));
            let (expected, admin): (Vec<&str>, bool) = match access(&r) {
                Access::Public => (vec![], false),
                Access::Needs(p) => (
                    std::iter::once(p)
                        .chain(also_needs(&r).iter().copied())
                        .map(Permission::name)
                        .collect(),
                    false,
                ),
                Access::Admin(p) => (
                    std::iter::once(p)
                        .chain(also_needs(&r).iter().copied())
                        .map(Permission::name)
                        .collect(),
                    true,
                ),
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
    use pigeonhole::{inbox::routes as inbox, scheduler::routes as scheduler};
    let doc: Value = serde_json::from_str(include_str!("../assets/openapi/inbox.json")).unwrap();
    check_permissions(&doc, |m, s| inbox::route(m, s).ok(), inbox::access, inbox::also_needs);
    let doc: Value = serde_json::from_str(include_str!("../assets/openapi/scheduler.json")).unwrap();
    check_permissions(
        &doc,
        |m, s| scheduler::route(m, s).ok(),
        scheduler::access,
        scheduler::also_needs,
    );
}
