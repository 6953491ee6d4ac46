//! The scheduler service through real HTTP against the real server (scheduler.md): every
//! endpoint of §0 with its success and error paths, the order of checks, sync, triggers
//! (e-mail verification through the outbox, inbox triggers against the same server's inbox
//! service), the workers' status, and triggering of due items.

use crate::common;

use common::scheduler::{
    every_days, future_tickle, keys, next_day, tickle, utc_ago, verification_key, wait_for, wait_for_emails,
    wait_for_verification_key,
};
use common::{Api, Auth, Method, Server, Worker, VERIFICATION};
use serde_json::{json, Value};

const NIL: &str = "00000000-0000-0000-0000-000000000000";

fn is_canonical_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// The same hex string with its first digit changed.
fn other_hex(hex: &str) -> String {
    let first = if hex.starts_with('0') { '1' } else { '0' };
    format!("{first}{}", &hex[1..])
}

fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn instant(s: &str) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn ids_of(items: &[Value]) -> Vec<String> {
    items.iter().map(|i| i["id"].as_str().expect("id").to_owned()).collect()
}

/// A request with any method, raw body and content type.
async fn send_raw(
    api: &Api,
    method: Method,
    path: &str,
    auth: &Auth,
    content_type: Option<&str>,
    body: &str,
) -> common::Resp {
    let mut rb = api.request(method, path, auth).body(body.to_owned());
    if let Some(ct) = content_type {
        rb = rb.header("Content-Type", ct);
    }
    api.send(rb).await
}

async fn put_json(api: &Api, path: &str, auth: &Auth, body: &Value) -> common::Resp {
    api.send(api.request(Method::PUT, path, auth).json(body)).await
}

async fn account(api: &Api, auth: &Auth) -> Value {
    api.get("/account", auth).await.expect_json(200)
}

/// The counts of `GET /account` agree with the listings.
async fn assert_counts(api: &Api, auth: &Auth) {
    let info = account(api, auth).await;
    let scheduled = api.tickles(auth, Some("onlyuntriggered")).await.len();
    let triggered = api.tickles(auth, Some("onlytriggered")).await.len();
    assert_eq!(info["scheduler-item-count"], json!(scheduled), "{info}");
    assert_eq!(info["triggered-item-count"], json!(triggered), "{info}");
}

/// Item contents due a minute ago (UTC accounts), optionally recurring every day at that
/// time; also answers the day and time used.
fn due_tickle(content: &str, recurring: bool) -> (Value, String, String) {
    let (day, time) = utc_ago(60);
    let recurrence = recurring.then(|| every_days(1, Some(&time)));
    (tickle(content, &day, Some(&time), recurrence), day, time)
}

/// Waits until the caller has `n` triggered items; returns them.
async fn wait_for_triggered(api: &Api, auth: &Auth, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} triggered item(s)"), || async {
        let items = api.tickles(auth, Some("onlytriggered")).await;
        (items.len() >= n).then_some(items)
    })
    .await
}

// ---------------------------------------------------------------------------------------
// GET /, /pricing, 404/405, order of checks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_page_is_html_naming_every_endpoint() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let r = api.get("/", &Auth::None).await.expect(200);
    assert_eq!(r.media_type(), "text/html");
    let text = r.page_text();
    for endpoint in [
        "GET /",
        "POST /register",
        "POST /login",
        "GET /pricing",
        "GET /loopers",
        "POST /",
        "GET /account",
        "DELETE /account",
        "GET /account/settings",
        "PUT /account/settings",
        "POST /scheduler/item",
        "GET /scheduler/item/info/:id",
        "POST /scheduler/item/info/:id",
        "DELETE /scheduler/item/delete/:id",
        "POST /scheduler/item/delete-triggereds",
        "POST /scheduler/item/retry",
        "GET /scheduler/items",
        "GET /scheduler/uuids",
        "POST /sync",
        "GET /trigger",
        "GET /trigger/info/:id",
        "DELETE /trigger/delete/:id",
        "POST /trigger/email",
        "POST /trigger/email/verify/:id/:key",
        "POST /trigger/email/resend/:id",
        "POST /trigger/inbox",
        "GET /admin/stats",
        "GET /admin/accounts",
        "DELETE /admin/account/:id",
    ] {
        assert!(text.contains(endpoint), "GET / does not name {endpoint}");
    }
    let head = api.send(api.request(Method::HEAD, "/", &Auth::None)).await.expect(200);
    assert!(head.body.is_empty());
    // the inbox service has its own page
    assert_ne!(s.get("/", &Auth::None).await.expect(200).body, r.body);
    // pricing: null in free mode
    assert_eq!(api.get("/pricing", &Auth::None).await.expect_json(200), Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods_are_json_errors() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    for path in [
        "/nope",
        "/scheduler",
        "/scheduler/items/",
        "/Scheduler/items",
        "/scheduler/item/info",
        "/scheduler/item/info/a/b",
        "/trigger/email/verify/x",
        "/intray/items",
        "/inbox/items",
        "/trigger/",
    ] {
        api.get(path, &alice).await.expect_error(404);
        api.get(path, &Auth::None).await.expect_error(404);
        api.post(path, &Auth::None, &json!({})).await.expect_error(404);
    }
    for (method, path) in [
        (Method::GET, "/login"),
        (Method::GET, "/register"),
        (Method::POST, "/pricing"),
        (Method::POST, "/loopers"),
        (Method::PUT, "/"),
        (Method::POST, "/account"),
        (Method::POST, "/account/settings"),
        (Method::DELETE, "/account/settings"),
        (Method::GET, "/scheduler/item"),
        (Method::PUT, "/scheduler/item/info/x"),
        (Method::GET, "/scheduler/item/delete/x"),
        (Method::POST, "/scheduler/item/delete/x"),
        (Method::GET, "/scheduler/item/delete-triggereds"),
        (Method::GET, "/scheduler/item/retry"),
        (Method::POST, "/scheduler/items"),
        (Method::DELETE, "/scheduler/uuids"),
        (Method::GET, "/sync"),
        (Method::POST, "/trigger"),
        (Method::POST, "/trigger/info/x"),
        (Method::GET, "/trigger/delete/x"),
        (Method::GET, "/trigger/email"),
        (Method::GET, "/trigger/email/verify/a/b"),
        (Method::GET, "/trigger/email/resend/a"),
        (Method::GET, "/trigger/inbox"),
        (Method::GET, "/trigger/intray"),
        (Method::POST, "/admin/stats"),
        (Method::POST, "/admin/accounts"),
        (Method::GET, "/admin/account/x"),
        (Method::GET, "/tickler/item"),
    ] {
        // 405 comes before credentials
        api.send(api.request(method.clone(), path, &Auth::None))
            .await
            .expect_error(405);
        api.send(api.request(method.clone(), path, &alice))
            .await
            .expect_error(405);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_before_the_path_and_the_body() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let body_paths = [
        (Method::POST, "/"),
        (Method::PUT, "/account/settings"),
        (Method::POST, "/scheduler/item"),
        (Method::POST, "/tickler/item"),
        (Method::POST, &format!("/scheduler/item/info/{NIL}")),
        (Method::POST, "/scheduler/item/retry"),
        (Method::POST, "/sync"),
        (Method::POST, "/trigger/email"),
        (Method::POST, "/trigger/inbox"),
        (Method::POST, "/trigger/intray"),
    ];
    for (method, path) in &body_paths {
        for auth in [&Auth::None, &Auth::Bearer("not-a-token".into())] {
            send_raw(api, method.clone(), path, auth, Some("application/json"), "{not json")
                .await
                .expect_error(401);
            send_raw(api, method.clone(), path, auth, Some("text/plain"), "{not json")
                .await
                .expect_error(401);
            send_raw(api, method.clone(), path, auth, None, "")
                .await
                .expect_error(401);
        }
        // authenticated: the content type (415), then the body (400)
        send_raw(api, method.clone(), path, &alice, Some("text/plain"), "{}")
            .await
            .expect_error(415);
        send_raw(api, method.clone(), path, &alice, None, "{}")
            .await
            .expect_error(415);
        send_raw(api, method.clone(), path, &alice, Some("application/json"), "{not json")
            .await
            .expect_error(400);
        // a content type with parameters is fine (the body is still wrong)
        send_raw(
            api,
            method.clone(),
            path,
            &alice,
            Some("application/json; charset=utf-8"),
            "{not json",
        )
        .await
        .expect_error(400);
    }
    // token-only endpoints without a token
    for (method, path) in [
        (Method::GET, "/account".to_owned()),
        (Method::DELETE, "/account".to_owned()),
        (Method::GET, "/account/settings".to_owned()),
        (Method::GET, format!("/scheduler/item/info/{NIL}")),
        (Method::GET, "/scheduler/item/info/not-a-uuid".to_owned()),
        (Method::DELETE, "/scheduler/item/delete/not-a-uuid".to_owned()),
        (Method::POST, "/scheduler/item/delete-triggereds".to_owned()),
        (Method::GET, "/scheduler/items".to_owned()),
        (Method::GET, "/scheduler/items?filter=bogus".to_owned()),
        (Method::GET, "/scheduler/uuids".to_owned()),
        (Method::GET, "/trigger".to_owned()),
        (Method::GET, "/trigger/info/not-a-uuid".to_owned()),
        (Method::DELETE, format!("/trigger/delete/{NIL}")),
        (Method::POST, "/trigger/email/verify/x/y".to_owned()),
        (Method::POST, format!("/trigger/email/resend/{NIL}")),
        (Method::GET, "/admin/stats".to_owned()),
    ] {
        api.send(api.request(method, &path, &Auth::None))
            .await
            .expect_error(401);
    }
    // the path capture is checked before the content type and the body
    send_raw(
        api,
        Method::POST,
        "/scheduler/item/info/not-a-uuid",
        &alice,
        Some("text/plain"),
        "x",
    )
    .await
    .expect_error(400);
    send_raw(
        api,
        Method::POST,
        "/scheduler/item/info/not-a-uuid",
        &Auth::None,
        Some("text/plain"),
        "x",
    )
    .await
    .expect_error(401);
    // body-less endpoints ignore any body and content type
    api.send(
        api.request(Method::POST, "/scheduler/item/delete-triggereds", &alice)
            .header("Content-Type", "text/plain")
            .body("garbage"),
    )
    .await
    .expect_empty(200);
    api.send(
        api.request(Method::GET, "/scheduler/uuids", &alice)
            .header("Content-Type", "text/plain")
            .body("garbage"),
    )
    .await
    .expect_json(200);
    // the inbox service's header credentials are not accepted here
    let inbox_alice = s.user("alice").await;
    let (secret, _) = s.add_key(&inbox_alice, "k", &["PermitGetAccountInfo"]).await;
    api.get("/account", &Auth::key("alice", &secret))
        .await
        .expect_error(401);
    // nor an inbox token
    api.get("/account", &inbox_alice).await.expect_error(401);
    // and a scheduler token is unknown at the inbox
    s.get("/account", &alice).await.expect_error(401);
}

// ---------------------------------------------------------------------------------------
// Accounts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_login_and_change_passphrase() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    api.register("alice", "old pass").await.expect_empty(200);
    api.register("alice", "other").await.expect_error(409);
    api.register("ab", "x").await.expect_error(400);
    api.register("a b", "x").await.expect_error(400);
    api.post("/register", &Auth::None, &json!({"name": "bob"}))
        .await
        .expect_error(400);
    // accounts are separate from the inbox service's
    s.login("alice", "old pass").await.expect_error(401);
    s.register("alice", "inbox pass").await.expect_empty(204);
    api.login("alice", "inbox pass").await.expect_error(401);

    api.login("alice", "wrong").await.expect_error(401);
    api.login("nobody", "old pass").await.expect_error(401);
    api.post("/login", &Auth::None, &json!({"username": "alice"}))
        .await
        .expect_error(400);
    let r = api.login("alice", "old pass").await.expect_empty(204);
    let cookie = r.header("set-cookie").unwrap().to_owned();
    assert!(cookie.starts_with("JWT-Cookie="), "{cookie}");
    for attr in ["Path=/", "HttpOnly", "Secure", "SameSite=Lax"] {
        assert!(cookie.contains(attr), "{cookie} lacks {attr}");
    }
    let first = Auth::Bearer(common::token_of(&r));
    let second = api.login_ok("alice", "old pass").await;
    let info = account(api, &first).await;
    assert_eq!(info["username"], "alice");
    assert!(info["last-login"].is_string());

    // wrong old passphrase: 403, nothing changes
    api.post(
        "/",
        &first,
        &json!({"old-passphrase": "nope", "new-passphrase": "new pass"}),
    )
    .await
    .expect_error(403);
    account(api, &first).await;
    api.login_ok("alice", "old pass").await;
    // missing key: 400
    api.post("/", &first, &json!({"old-passphrase": "old pass"}))
        .await
        .expect_error(400);

    api.post(
        "/",
        &first,
        &json!({"old-passphrase": "old pass", "new-passphrase": "new pass"}),
    )
    .await
    .expect_empty(204);
    // every earlier token is revoked, the used one included
    api.get("/account", &first).await.expect_error(401);
    api.get("/account", &second).await.expect_error(401);
    api.login("alice", "old pass").await.expect_error(401);
    let fresh = api.login_ok("alice", "new pass").await;
    assert_eq!(account(api, &fresh).await["username"], "alice");
    // the inbox account of the same name is untouched
    s.login_ok("alice", "inbox pass").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_info_counts_and_delete() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    api.register("bob", "pw").await.expect_empty(200);
    let info = api
        .get("/account", &api.login_ok("bob", "pw").await)
        .await
        .expect_json(200);
    let alice = api.user("alice").await;
    let v = account(api, &alice).await;
    assert_eq!(
        keys(&v),
        strs(&[
            "admin",
            "created",
            "last-login",
            "scheduler-item-count",
            "status",
            "triggered-item-count",
            "username",
            "uuid"
        ])
    );
    assert!(is_canonical_uuid(v["uuid"].as_str().unwrap()));
    assert_ne!(v["uuid"], info["uuid"]);
    assert_eq!(v["username"], "alice");
    assert_eq!(v["admin"], false);
    assert_eq!(v["scheduler-item-count"], 0);
    assert_eq!(v["triggered-item-count"], 0);
    assert_eq!(v["status"], json!({"status": "no-payment-necessary"}));
    assert!(instant(v["created"].as_str().unwrap()) <= instant(v["last-login"].as_str().unwrap()));

    // two scheduled items and one that triggers at once
    api.add_tickle(&alice, &future_tickle("one")).await;
    api.add_tickle(&alice, &future_tickle("two")).await;
    api.add_tickle(&alice, &due_tickle("due", false).0).await;
    wait_for_triggered(api, &alice, 1).await;
    let v = account(api, &alice).await;
    assert_eq!(v["scheduler-item-count"], 2);
    assert_eq!(v["triggered-item-count"], 1);
    api.add_email_trigger(&alice, "alice@example.org").await;
    let admin = api.user("admin").await;
    let stats = api.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(
        (stats["scheduler-items"].clone(), stats["triggered-items"].clone()),
        (json!(2), json!(1))
    );

    // delete: the token stops working, the name becomes free, the new account is empty
    let other = api.login_ok("alice", "alice-password").await;
    send_raw(api, Method::DELETE, "/account", &alice, Some("text/plain"), "junk")
        .await
        .expect_empty(200);
    api.get("/account", &alice).await.expect_error(401);
    api.get("/account", &other).await.expect_error(401);
    api.delete("/account", &alice).await.expect_error(401);
    api.get("/scheduler/items", &other).await.expect_error(401);
    api.login("alice", "alice-password").await.expect_error(401);
    api.register("alice", "again").await.expect_empty(200);
    let again = api.login_ok("alice", "again").await;
    api.get("/account", &alice).await.expect_error(401);
    let v = account(api, &again).await;
    assert_eq!(v["scheduler-item-count"], 0);
    assert_eq!(v["triggered-item-count"], 0);
    assert!(api.tickles(&again, None).await.is_empty());
    assert!(api.triggers(&again).await.is_empty());
    assert_eq!(
        api.get("/account/settings", &again).await.expect_json(200),
        json!({"timezone": {"offset": 0, "name": "UTC", "summer": false}})
    );
    // the items are gone from the server, not only from view
    let stats = api.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(
        (stats["scheduler-items"].clone(), stats["triggered-items"].clone()),
        (json!(0), json!(0))
    );
    // bob is untouched
    assert_eq!(
        account(api, &api.login_ok("bob", "pw").await).await["uuid"],
        info["uuid"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_default_roundtrip_and_invalid_bodies() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let default = json!({"timezone": {"offset": 0, "name": "UTC", "summer": false}});
    assert_eq!(api.get("/account/settings", &alice).await.expect_json(200), default);

    let brisbane = json!({"timezone": {"offset": 600, "name": "Australia/Brisbane", "summer": false}});
    put_json(api, "/account/settings", &alice, &brisbane)
        .await
        .expect_empty(200);
    assert_eq!(api.get("/account/settings", &alice).await.expect_json(200), brisbane);
    // other accounts keep theirs
    assert_eq!(api.get("/account/settings", &bob).await.expect_json(200), default);
    // PUT replaces; extra keys are ignored; any name is kept as given
    for ok in [
        json!({"timezone": {"offset": -1439, "name": "", "summer": true}, "extra": 1}),
        json!({"timezone": {"offset": 1439, "name": "UTC+23:59", "summer": false, "x": null}}),
        json!({"timezone": {"offset": 60, "name": "Europe/Zurich", "summer": true}}),
    ] {
        put_json(api, "/account/settings", &alice, &ok).await.expect_empty(200);
        let mut expected = ok.clone();
        expected.as_object_mut().unwrap().remove("extra");
        expected["timezone"].as_object_mut().unwrap().remove("x");
        assert_eq!(api.get("/account/settings", &alice).await.expect_json(200), expected);
    }
    let stored = api.get("/account/settings", &alice).await.expect_json(200);
    for bad in [
        json!({"timezone": {"offset": 1440, "name": "x", "summer": false}}),
        json!({"timezone": {"offset": -1440, "name": "x", "summer": false}}),
        json!({"timezone": {"offset": 1.5, "name": "x", "summer": false}}),
        json!({"timezone": {"offset": "60", "name": "x", "summer": false}}),
        json!({"timezone": {"name": "x", "summer": false}}),
        json!({"timezone": {"offset": 0, "summer": false}}),
        json!({"timezone": {"offset": 0, "name": "x"}}),
        json!({"timezone": {"offset": 0, "name": 5, "summer": false}}),
        json!({"timezone": {"offset": 0, "name": "x", "summer": "no"}}),
        json!({"timezone": null}),
        json!({"timezone": "UTC"}),
        json!({}),
        json!([]),
        json!(null),
    ] {
        put_json(api, "/account/settings", &alice, &bad).await.expect_error(400);
        assert_eq!(
            api.get("/account/settings", &alice).await.expect_json(200),
            stored,
            "{bad} changed the settings"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Items

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_item_normalises_and_reads_back() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let before = time::OffsetDateTime::now_utc();
    let id = api
        .add_tickle(
            &alice,
            &json!({"content": "Pay the rent", "scheduled-day": "2099-07-01", "scheduled-time": "08:30",
                    "recurrence": {"every-x-months": {"months": 1, "day": 1}}, "extra": true}),
        )
        .await;
    assert!(is_canonical_uuid(&id), "{id}");
    let item = api.tickle_info(&alice, &id).await;
    assert_eq!(keys(&item), strs(&["contents", "created", "id", "triggered"]));
    assert_eq!(item["id"], id);
    assert_eq!(item["triggered"], Value::Null);
    assert_eq!(
        item["contents"],
        json!({"content": "Pay the rent", "scheduled-day": "2099-07-01", "scheduled-time": "08:30:00",
               "recurrence": {"every-x-months": {"months": 1, "day": 1, "time-of-day": null}}})
    );
    let created = instant(item["created"].as_str().unwrap());
    assert!(created >= before - time::Duration::seconds(1) && created <= time::OffsetDateTime::now_utc());

    // the optional keys default to null; the either-case UUID reads the same item
    let id2 = api
        .add_tickle(&alice, &json!({"content": "", "scheduled-day": "2099-01-02"}))
        .await;
    assert_ne!(id, id2);
    assert_eq!(
        api.tickle_info(&alice, &id2.to_uppercase()).await["contents"],
        json!({"content": "", "scheduled-day": "2099-01-02", "scheduled-time": null, "recurrence": null})
    );
    // base64 contents: UTF-8 comes back as a string, other bytes as the base64 object
    let id3 = api
        .add_tickle(
            &alice,
            &json!({"content": {"type": "text", "data": common::b64("héllo")}, "scheduled-day": "2099-01-03",
                    "scheduled-time": "07:05:03.250", "recurrence": {"every-x-days": {"days": 3, "time-of-day": "09:00"}}}),
        )
        .await;
    assert_eq!(
        api.tickle_info(&alice, &id3).await["contents"],
        json!({"content": "héllo", "scheduled-day": "2099-01-03", "scheduled-time": "07:05:03.25",
               "recurrence": {"every-x-days": {"days": 3, "time-of-day": "09:00:00"}}})
    );
    let id4 = api
        .add_tickle(
            &alice,
            &json!({"content": {"type": "text", "data": "/w=="}, "scheduled-day": "2099-01-04", "scheduled-time": null, "recurrence": null}),
        )
        .await;
    assert_eq!(
        api.tickle_info(&alice, &id4).await["contents"]["content"],
        json!({"type": "text", "data": "/w=="})
    );
    let id5 = api
        .add_tickle(
            &alice,
            &tickle(
                "leap",
                "2099-12-31",
                Some("23:59:60"),
                Some(json!({"every-x-months": {"months": 4294967295u64, "day": 31, "time-of-day": null}})),
            ),
        )
        .await;
    assert_eq!(
        api.tickle_info(&alice, &id5).await["contents"],
        json!({"content": "leap", "scheduled-day": "2099-12-31", "scheduled-time": "23:59:60",
               "recurrence": {"every-x-months": {"months": 4294967295u64, "day": 31, "time-of-day": null}}})
    );
    assert_eq!(account(api, &alice).await["scheduler-item-count"], 5);
    // listed in creation order
    let ids: Vec<String> = [&id, &id2, &id3, &id4, &id5].iter().map(|s| s.to_string()).collect();
    assert_eq!(ids_of(&api.tickles(&alice, None).await), ids);
    // fractions: digits after the 9th dropped, zero fractions not printed
    for (input, output) in [
        ("12:00:00.1234567891", "12:00:00.123456789"),
        ("00:00:00.000", "00:00:00"),
        ("23:59", "23:59:00"),
    ] {
        let id = api
            .add_tickle(&alice, &tickle("f", "2099-01-01", Some(input), None))
            .await;
        assert_eq!(api.tickle_info(&alice, &id).await["contents"]["scheduled-time"], output);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_item_refuses_bad_contents() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let ok = |k: &str, v: Value| {
        let mut t = json!({"content": "x", "scheduled-day": "2099-01-01", "scheduled-time": null, "recurrence": null});
        t[k] = v;
        t
    };
    let mut bad = vec![
        json!([]),
        json!("x"),
        json!(null),
        json!({"scheduled-day": "2099-01-01"}),
    ];
    for day in [
        json!("2023-02-29"),
        json!("2024-13-01"),
        json!("2024-00-10"),
        json!("2024-1-01"),
        json!("24-01-01"),
        json!("2024-01-01T00:00:00Z"),
        json!(""),
        json!(20240101),
        json!(null),
    ] {
        bad.push(ok("scheduled-day", day));
    }
    for time in [
        json!("9:00"),
        json!("24:00"),
        json!("12:60"),
        json!("12:00:61"),
        json!("12:00:00."),
        json!("12"),
        json!("12:00Z"),
        json!(""),
        json!(900),
        json!(true),
    ] {
        bad.push(ok("scheduled-time", time));
    }
    for recurrence in [
        json!({"every-x-days": {"days": 0}}),
        json!({"every-x-days": {"days": -1}}),
        json!({"every-x-days": {"days": 4294967296u64}}),
        json!({"every-x-days": {"days": "1"}}),
        json!({"every-x-days": {}}),
        json!({"every-x-days": {"days": 1, "time-of-day": "9:00"}}),
        json!({"every-x-months": {"months": 0}}),
        json!({"every-x-months": {"months": 1, "day": 0}}),
        json!({"every-x-months": {"months": 1, "day": 32}}),
        json!({"every-x-months": {"months": 1, "time-of-day": "25:00"}}),
        json!({"every-x-days": {"days": 1}, "every-x-months": {"months": 1}}),
        json!({}),
        json!({"every-x-weeks": {"weeks": 1}}),
        json!("daily"),
        json!([]),
    ] {
        bad.push(ok("recurrence", recurrence));
    }
    for content in [
        json!({"type": "png", "data": common::b64("x")}),
        json!({"type": "text", "data": "not base64!"}),
        json!({"type": "text", "data": "eA"}),
        json!({"type": "text"}),
        json!({"data": "eA=="}),
        json!(5),
        json!(null),
        json!(["x"]),
    ] {
        bad.push(ok("content", content));
    }
    let mut missing = ok("content", json!("x"));
    missing.as_object_mut().unwrap().remove("content");
    bad.push(missing);
    for body in &bad {
        api.post("/scheduler/item", &alice, body).await.expect_error(400);
    }
    assert!(api.tickles(&alice, None).await.is_empty(), "nothing was stored");
    // the boundaries that are fine
    for good in [
        ok("scheduled-day", json!("0000-01-01")),
        ok("scheduled-day", json!("2024-02-29")),
        ok(
            "recurrence",
            json!({"every-x-months": {"months": 1, "day": null, "time-of-day": null}}),
        ),
        ok(
            "recurrence",
            json!({"every-x-days": {"days": 4294967295u64}, "other": 1}),
        ),
    ] {
        api.add_tickle(&alice, &good).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paid_mode_limits_adds_with_402() {
    let s = Server::start_scheduler_with(|st| {
        st.payment_plan = Some(pigeonhole::config::PaymentPlan {
            plan: "plan_test".into(),
            price: 500,
            currency: "eur".into(),
            trial_days: None,
            publishable_key: "pk_test".into(),
        });
        st.max_items_free = 2;
    })
    .await;
    let api = &s.scheduler;
    assert_eq!(
        api.get("/pricing", &Auth::None).await.expect_json(200),
        json!({"plan": "plan_test", "price": 500, "currency": "eur", "trial-period": null,
               "publishable-key": "pk_test", "max-items-free": 2})
    );
    let alice = api.user("alice").await;
    assert_eq!(
        account(api, &alice).await["status"],
        json!({"status": "not-paid", "items-left": 2})
    );
    let a = api.add_tickle(&alice, &future_tickle("a")).await;
    api.add_tickle(&alice, &future_tickle("b")).await;
    api.post("/scheduler/item", &alice, &future_tickle("c"))
        .await
        .expect_error(402);
    // an invalid body is still a 400 (body before endpoint rules)
    api.post("/scheduler/item", &alice, &json!({})).await.expect_error(400);
    assert_eq!(api.tickles(&alice, None).await.len(), 2);
    assert_eq!(
        account(api, &alice).await["status"],
        json!({"status": "not-paid", "items-left": 0})
    );
    // editing is never limited
    api.post(&format!("/scheduler/item/info/{a}"), &alice, &future_tickle("a2"))
        .await
        .expect_empty(200);
    // sync truncates added silently, in numeric key order
    let r = api
        .sync_tickles(
            &alice,
            json!({"added": {"1": {"contents": future_tickle("x"), "created": "2024-01-01T00:00:00Z"}}}),
        )
        .await;
    assert_eq!(r.get("client-added"), None, "{r}");
    // a deletion frees a slot
    api.delete(&format!("/scheduler/item/delete/{a}"), &alice)
        .await
        .expect_empty(200);
    let added = json!({
        "10": {"contents": future_tickle("ten"), "created": "2024-01-01T00:00:00Z"},
        "9": {"contents": future_tickle("nine"), "created": "2024-01-01T00:00:00Z"},
        "2": {"contents": future_tickle("two"), "created": "2024-01-01T00:00:00Z"},
    });
    let r = api.sync_tickles(&alice, json!({"added": added})).await;
    assert_eq!(keys(&r["client-added"]), strs(&["2"]), "{r}");
    api.post("/scheduler/item", &alice, &future_tickle("d"))
        .await
        .expect_error(402);
    // triggered items do not count
    let carol = api.user("carol").await;
    api.add_tickle(&carol, &due_tickle("due", false).0).await;
    api.add_tickle(&carol, &future_tickle("kept")).await;
    wait_for_triggered(api, &carol, 1).await;
    assert_eq!(
        account(api, &carol).await["status"],
        json!({"status": "not-paid", "items-left": 1})
    );
    api.add_tickle(&carol, &future_tickle("fits")).await;
    api.post("/scheduler/item", &carol, &future_tickle("full"))
        .await
        .expect_error(402);
    // admins never pay
    let admin = api.user("admin").await;
    assert_eq!(
        account(api, &admin).await["status"],
        json!({"status": "no-payment-necessary"})
    );
    for i in 0..3 {
        api.add_tickle(&admin, &future_tickle(&i.to_string())).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_edit_items() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let id = api.add_tickle(&alice, &future_tickle("old")).await;
    let bobs = api.add_tickle(&bob, &future_tickle("bob's")).await;
    let before = api.tickle_info(&alice, &id).await;

    // edit: only the contents change
    let new_contents = json!({"content": "new", "scheduled-day": "2098-05-06", "scheduled-time": "10:11",
                              "recurrence": {"every-x-days": {"days": 2}}});
    api.post(&format!("/scheduler/item/info/{id}"), &alice, &new_contents)
        .await
        .expect_empty(200);
    let after = api.tickle_info(&alice, &id).await;
    assert_eq!(after["id"], before["id"]);
    assert_eq!(after["created"], before["created"]);
    assert_eq!(after["triggered"], Value::Null);
    assert_eq!(
        after["contents"],
        json!({"content": "new", "scheduled-day": "2098-05-06", "scheduled-time": "10:11:00",
               "recurrence": {"every-x-days": {"days": 2, "time-of-day": null}}})
    );
    // the edit bumped the server time: a client synced at 0 sees it as server-changed
    let r = api.sync_tickles(&alice, json!({"synced": {&id: 0}})).await;
    assert_eq!(
        r,
        json!({"server-changed": {&id: {"value": {"contents": after["contents"], "created": after["created"]}, "time": 1}}})
    );
    // editing with the uppercase id works too
    api.post(
        &format!("/scheduler/item/info/{}", id.to_uppercase()),
        &alice,
        &future_tickle("upper"),
    )
    .await
    .expect_empty(200);
    assert_eq!(api.tickle_info(&alice, &id).await["contents"]["content"], "upper");
    let r = api.sync_tickles(&alice, json!({"synced": {&id: 1}})).await;
    assert_eq!(r["server-changed"][&id]["time"], 2);

    // invalid bodies: 400, nothing changes
    let stored = api.tickle_info(&alice, &id).await;
    for bad in [
        json!({}),
        json!({"content": "x", "scheduled-day": "2023-02-29"}),
        json!({"content": "x", "scheduled-day": "2099-01-01", "recurrence": {"every-x-days": {"days": 0}}}),
        json!([]),
    ] {
        api.post(&format!("/scheduler/item/info/{id}"), &alice, &bad)
            .await
            .expect_error(400);
    }
    assert_eq!(api.tickle_info(&alice, &id).await, stored);

    // unknown, another account's: 404 for read and edit, nothing changes
    for (who, other) in [(&alice, NIL.to_owned()), (&alice, bobs.clone()), (&bob, id.clone())] {
        api.get(&format!("/scheduler/item/info/{other}"), who)
            .await
            .expect_error(404);
        api.post(&format!("/scheduler/item/info/{other}"), who, &future_tickle("hijack"))
            .await
            .expect_error(404);
    }
    assert_eq!(api.tickle_info(&bob, &bobs).await["contents"]["content"], "bob's");
    assert_eq!(api.tickle_info(&alice, &id).await, stored);
    // not a UUID: 400
    for bad in ["not-a-uuid", "1234", "00000000-0000-0000-0000-00000000000g"] {
        api.get(&format!("/scheduler/item/info/{bad}"), &alice)
            .await
            .expect_error(400);
        api.post(&format!("/scheduler/item/info/{bad}"), &alice, &future_tickle("x"))
            .await
            .expect_error(400);
        api.delete(&format!("/scheduler/item/delete/{bad}"), &alice)
            .await
            .expect_error(400);
    }

    // a triggered item reads (200) but cannot be edited (404)
    api.add_tickle(&alice, &due_tickle("due now", false).0).await;
    let triggered = wait_for_triggered(api, &alice, 1).await;
    let tid = triggered[0]["id"].as_str().unwrap().to_owned();
    let read = api.tickle_info(&alice, &tid).await;
    assert_eq!(read, triggered[0]);
    assert!(read["triggered"].is_object());
    api.post(&format!("/scheduler/item/info/{tid}"), &alice, &future_tickle("edit"))
        .await
        .expect_error(404);
    api.get(&format!("/scheduler/item/info/{tid}"), &bob)
        .await
        .expect_error(404);
    assert_eq!(api.tickle_info(&alice, &tid).await, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_items_and_triggereds() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let a = api.add_tickle(&alice, &future_tickle("a")).await;
    let b = api.add_tickle(&alice, &future_tickle("b")).await;
    let bobs = api.add_tickle(&bob, &future_tickle("bob")).await;

    api.delete(&format!("/scheduler/item/delete/{a}"), &alice)
        .await
        .expect_empty(200);
    api.get(&format!("/scheduler/item/info/{a}"), &alice)
        .await
        .expect_error(404);
    // again, unknown, another account's: 200, nothing happens
    api.delete(&format!("/scheduler/item/delete/{a}"), &alice)
        .await
        .expect_empty(200);
    api.delete(&format!("/scheduler/item/delete/{NIL}"), &alice)
        .await
        .expect_empty(200);
    api.delete(&format!("/scheduler/item/delete/{bobs}"), &alice)
        .await
        .expect_empty(200);
    api.tickle_info(&bob, &bobs).await;
    assert_eq!(ids_of(&api.tickles(&alice, None).await), std::slice::from_ref(&b));
    // uppercase id
    api.delete(&format!("/scheduler/item/delete/{}", b.to_uppercase()), &alice)
        .await
        .expect_empty(200);
    assert!(api.tickles(&alice, None).await.is_empty());

    // triggered items: deleted one by one, or all at once (scheduled items stay)
    let keep = api.add_tickle(&alice, &future_tickle("keep")).await;
    for i in 0..3 {
        api.add_tickle(&alice, &due_tickle(&format!("due {i}"), false).0).await;
    }
    api.add_tickle(&bob, &due_tickle("bob due", false).0).await;
    let triggered = wait_for_triggered(api, &alice, 3).await;
    wait_for_triggered(api, &bob, 1).await;
    let first = triggered[0]["id"].as_str().unwrap().to_owned();
    api.delete(&format!("/scheduler/item/delete/{first}"), &alice)
        .await
        .expect_empty(200);
    api.get(&format!("/scheduler/item/info/{first}"), &alice)
        .await
        .expect_error(404);
    assert_eq!(api.tickles(&alice, Some("onlytriggered")).await.len(), 2);
    assert_eq!(account(api, &alice).await["triggered-item-count"], 2);
    // no body, no content type
    api.send(api.request(Method::POST, "/scheduler/item/delete-triggereds", &alice))
        .await
        .expect_empty(200);
    assert!(api.tickles(&alice, Some("onlytriggered")).await.is_empty());
    assert_eq!(ids_of(&api.tickles(&alice, None).await), [keep]);
    assert_eq!(account(api, &alice).await["triggered-item-count"], 0);
    // bob's triggered item stays
    assert_eq!(api.tickles(&bob, Some("onlytriggered")).await.len(), 1);
    // once more with nothing to delete
    api.send(api.request(Method::POST, "/tickler/item/delete-triggereds", &alice))
        .await
        .expect_empty(200);
    assert_counts(api, &alice).await;
    assert_counts(api, &bob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_accepts_arrays_of_uuids_only() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let scheduled = api.add_tickle(&alice, &future_tickle("s")).await;
    api.add_tickle(&alice, &due_tickle("due", false).0).await;
    let triggered = wait_for_triggered(api, &alice, 1).await;
    let tid = triggered[0]["id"].as_str().unwrap().to_owned();
    for ok in [json!([]), json!([NIL]), json!([&tid, &scheduled, tid.to_uppercase()])] {
        api.post("/scheduler/item/retry", &alice, &ok).await.expect_empty(200);
        api.post("/tickler/item/retry", &alice, &ok).await.expect_empty(200);
    }
    for bad in [
        json!({}),
        json!({"ids": []}),
        json!("x"),
        json!(1),
        json!(null),
        json!(["not-a-uuid"]),
        json!([1]),
        json!([[NIL]]),
    ] {
        api.post("/scheduler/item/retry", &alice, &bad).await.expect_error(400);
    }
    // nothing changed
    assert_eq!(api.tickles(&alice, Some("onlytriggered")).await, triggered);
    api.tickle_info(&alice, &scheduled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_filters_uuids_and_tickler_aliases() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let a = api.add_tickle(&alice, &future_tickle("a")).await;
    let b = api.add_tickle(&alice, &tickle("b", "2098-01-01", None, None)).await;
    api.add_tickle(&bob, &future_tickle("bob")).await;
    api.add_tickle(&alice, &due_tickle("t1", false).0).await;
    wait_for_triggered(api, &alice, 1).await;
    api.add_tickle(&alice, &due_tickle("t2", false).0).await;
    let triggered = wait_for_triggered(api, &alice, 2).await;
    let contents: Vec<&str> = triggered
        .iter()
        .map(|t| t["contents"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["t1", "t2"], "triggered items by created ascending");
    let tids = ids_of(&triggered);

    let all = api.tickles(&alice, None).await;
    assert_eq!(ids_of(&all), [a.clone(), b.clone(), tids[0].clone(), tids[1].clone()]);
    for item in &all[..2] {
        assert_eq!(item["triggered"], Value::Null);
    }
    for filter in ["", "onlyuntriggered", "OnlyUntriggered", "ONLYUNTRIGGERED"] {
        let got = api.tickles(&alice, Some(filter)).await;
        if filter.is_empty() {
            assert_eq!(got, all);
        } else {
            assert_eq!(got, all[..2].to_vec(), "filter {filter}");
        }
    }
    for filter in ["onlytriggered", "onlyTriggered", "OnlyTriggered"] {
        assert_eq!(api.tickles(&alice, Some(filter)).await, all[2..].to_vec());
    }
    // other query parameters are ignored
    assert_eq!(
        api.get("/scheduler/items?x=1&filter=onlytriggered&y", &alice)
            .await
            .expect_json(200),
        json!(all[2..].to_vec())
    );
    assert_eq!(
        api.get("/scheduler/items?x=1", &alice).await.expect_json(200),
        json!(all)
    );
    for bad in ["bogus", "onlyuntriggered2", "all", "only%20triggered", "triggered"] {
        api.get(&format!("/scheduler/items?filter={bad}"), &alice)
            .await
            .expect_error(400);
    }
    // uuids: the scheduled items only, in the same order
    assert_eq!(
        api.get("/scheduler/uuids", &alice).await.expect_json(200),
        json!([a.clone(), b.clone()])
    );
    assert_eq!(
        api.get("/scheduler/uuids", &bob)
            .await
            .expect_json(200)
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // /tickler/... answers exactly like /scheduler/...
    assert_eq!(api.get("/tickler/items", &alice).await.expect_json(200), json!(all));
    assert_eq!(
        api.get("/tickler/items?filter=onlytriggered", &alice)
            .await
            .expect_json(200),
        json!(all[2..].to_vec())
    );
    api.get("/tickler/items?filter=nope", &alice).await.expect_error(400);
    assert_eq!(
        api.get("/tickler/uuids", &alice).await.expect_json(200),
        json!([a.clone(), b.clone()])
    );
    assert_eq!(
        api.get(&format!("/tickler/item/info/{a}"), &alice)
            .await
            .expect_json(200),
        all[0]
    );
    let c = api
        .post("/tickler/item", &alice, &future_tickle("c"))
        .await
        .expect_json(200);
    let c = c.as_str().unwrap().to_owned();
    api.post(&format!("/tickler/item/info/{c}"), &alice, &future_tickle("c2"))
        .await
        .expect_empty(200);
    assert_eq!(api.tickle_info(&alice, &c).await["contents"]["content"], "c2");
    api.get(&format!("/tickler/item/info/{NIL}"), &alice)
        .await
        .expect_error(404);
    api.delete(&format!("/tickler/item/delete/{c}"), &alice)
        .await
        .expect_empty(200);
    api.get(&format!("/scheduler/item/info/{c}"), &alice)
        .await
        .expect_error(404);
    api.get("/tickler/items", &Auth::None).await.expect_error(401);
}

// ---------------------------------------------------------------------------------------
// Triggering

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_item_is_triggered() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let (contents, day, time) = due_tickle("due a minute ago", false);
    let id = api.add_tickle(&alice, &contents).await;
    let created = api.get(&format!("/scheduler/item/info/{id}"), &alice).await;
    let triggered = wait_for_triggered(api, &alice, 1).await;
    assert_eq!(triggered.len(), 1);
    let t = &triggered[0];
    assert_eq!(keys(t), strs(&["contents", "created", "id", "triggered"]));
    let tid = t["id"].as_str().unwrap();
    assert!(is_canonical_uuid(tid));
    assert_ne!(tid, id, "the triggered copy has a new UUID");
    assert_eq!(
        t["contents"],
        json!({"content": "due a minute ago", "scheduled-day": day, "scheduled-time": time, "recurrence": null})
    );
    if created.status == 200 {
        assert_eq!(t["created"], created.json()["created"], "created of the original");
    }
    assert_eq!(
        keys(&t["triggered"]),
        strs(&["triggeredInfoTriggerTriggerAttempts", "triggeredInfoTriggered"])
    );
    assert_eq!(t["triggered"]["triggeredInfoTriggerTriggerAttempts"], json!([]));
    let at = instant(t["triggered"]["triggeredInfoTriggered"].as_str().unwrap());
    let now = time::OffsetDateTime::now_utc();
    assert!(at <= now && at > now - time::Duration::seconds(60), "triggered at {at}");
    // the scheduled item is gone (sync clients see server-deleted)
    assert!(api.tickles(&alice, Some("onlyuntriggered")).await.is_empty());
    api.get(&format!("/scheduler/item/info/{id}"), &alice)
        .await
        .expect_error(404);
    assert_eq!(api.get("/scheduler/uuids", &alice).await.expect_json(200), json!([]));
    let r = api.sync_tickles(&alice, json!({"synced": {&id: 0}})).await;
    assert_eq!(r, json!({"server-deleted": [id]}));
    // a triggered item does not take part in sync
    assert_eq!(api.sync_tickles(&alice, json!({})).await, json!({}));
    let r = api
        .sync_tickles(
            &alice,
            json!({"changed": {tid: {"value": {"contents": future_tickle("x"), "created": "2024-01-01T00:00:00Z"}, "time": 0}}}),
        )
        .await;
    assert_eq!(r, json!({"conflict-server-deleted": [tid]}));
    let r = api.sync_tickles(&alice, json!({"deleted": {tid: 0}})).await;
    assert_eq!(r, json!({"client-deleted": [tid]}));
    assert_eq!(
        api.tickle_info(&alice, tid).await,
        *t,
        "sync left the triggered item alone"
    );
    let info = account(api, &alice).await;
    assert_eq!(info["scheduler-item-count"], 0);
    assert_eq!(info["triggered-item-count"], 1);
    // exactly one copy, also after the triggerer's next pass
    s.settle(&[Worker::Triggerer]).await;
    assert_eq!(api.tickles(&alice, Some("onlytriggered")).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_due_recurring_item_moves_to_its_next_occurrence() {
    // the workers' clock is moved a day ahead to make the next occurrence due
    let s = Server::start_on_manual_clock(common::scheduler::fast_loopers).await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let (contents, day, time) = due_tickle("every day", true);
    let id = api.add_tickle(&alice, &contents).await;
    let triggered = wait_for_triggered(api, &alice, 1).await;
    let t = &triggered[0];
    assert_ne!(t["id"], id);
    assert_eq!(t["contents"], contents, "the copy carries the due occurrence");
    // the item stays scheduled, moved to tomorrow at its recurrence's time of day
    let item = wait_for("the item to be rescheduled", || async {
        let item = api.tickle_info(&alice, &id).await;
        (item["contents"]["scheduled-day"] != json!(day)).then_some(item)
    })
    .await;
    assert_eq!(item["triggered"], Value::Null);
    assert_eq!(item["created"], t["created"]);
    let tomorrow = next_day(&day);
    assert_eq!(
        item["contents"],
        json!({"content": "every day", "scheduled-day": tomorrow, "scheduled-time": time,
               "recurrence": {"every-x-days": {"days": 1, "time-of-day": time}}})
    );
    assert_eq!(api.get("/scheduler/uuids", &alice).await.expect_json(200), json!([&id]));
    // sync shows the move as server-changed with the bumped server time
    let r = api.sync_tickles(&alice, json!({"synced": {&id: 0}})).await;
    assert_eq!(
        r,
        json!({"server-changed": {&id: {"value": {"contents": item["contents"], "created": item["created"]}, "time": 1}}})
    );
    assert_eq!(api.sync_tickles(&alice, json!({"synced": {&id: 1}})).await, json!({}));
    // a client that does not know it yet gets it as server-added with that time
    let r = api.sync_tickles(&alice, json!({})).await;
    assert_eq!(r["server-added"][&id]["time"], 1);
    // not triggered again before the next occurrence (tomorrow)
    s.settle(&[Worker::Triggerer]).await;
    assert_eq!(api.tickles(&alice, Some("onlytriggered")).await.len(), 1);
    // a day later it is: once, and the item moves on to the day after
    s.advance_clock(std::time::Duration::from_secs(86_400));
    let triggered = wait_for_triggered(api, &alice, 2).await;
    s.settle(&[Worker::Triggerer]).await;
    let triggered_now = api.tickles(&alice, Some("onlytriggered")).await;
    assert_eq!(triggered_now, triggered, "triggered once for tomorrow");
    let days: Vec<&Value> = triggered.iter().map(|t| &t["contents"]["scheduled-day"]).collect();
    assert!(days.contains(&&json!(tomorrow)), "{days:?}");
    let moved = api.tickle_info(&alice, &id).await;
    assert_eq!(moved["contents"]["scheduled-day"], json!(next_day(&tomorrow)));
    assert_counts(api, &alice).await;
}

// ---------------------------------------------------------------------------------------
// Sync

fn value(contents: Value, created: &str) -> Value {
    json!({"contents": contents, "created": created})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_spec_example() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    // A at server time 3 (three edits), B at 0, C unknown
    let a = api.add_tickle(&alice, &future_tickle("A")).await;
    for i in 1..=3 {
        api.post(
            &format!("/scheduler/item/info/{a}"),
            &alice,
            &future_tickle(&format!("A{i}")),
        )
        .await
        .expect_empty(200);
    }
    let b = api.add_tickle(&alice, &future_tickle("B")).await;
    let c = random_uuid();
    let a_item = api.tickle_info(&alice, &a).await;
    let b_item = api.tickle_info(&alice, &b).await;
    let new_contents =
        json!({"content": "new", "scheduled-day": "2099-01-01", "scheduled-time": null, "recurrence": null});
    let b2 = json!({"content": "B2", "scheduled-day": "2099-02-01", "scheduled-time": null, "recurrence": null});
    let r = api
        .sync_tickles(
            &alice,
            json!({
                "added": {"0": value(new_contents.clone(), "2024-06-01T10:00:00Z")},
                "synced": {&a: 2},
                "changed": {&b: {"value": value(b2.clone(), "2024-01-01T00:00:00Z"), "time": 0}},
                "deleted": {&c: 5},
            }),
        )
        .await;
    assert_eq!(
        keys(&r),
        strs(&["client-added", "client-changed", "client-deleted", "server-changed"]),
        "{r}"
    );
    assert_eq!(keys(&r["client-added"]), strs(&["0"]));
    let new_id = r["client-added"]["0"]["id"].as_str().unwrap().to_owned();
    assert!(is_canonical_uuid(&new_id));
    assert_eq!(r["client-added"]["0"], json!({"id": &new_id, "time": 0}));
    assert_eq!(r["client-changed"], json!({&b: 1}));
    assert_eq!(r["client-deleted"], json!([&c]));
    assert_eq!(
        r["server-changed"],
        json!({&a: {"value": {"contents": a_item["contents"], "created": a_item["created"]}, "time": 3}})
    );
    // B got the contents, not the created; the new item got its created
    let b_now = api.tickle_info(&alice, &b).await;
    assert_eq!(b_now["contents"], b2);
    assert_eq!(b_now["created"], b_item["created"]);
    let n = api.tickle_info(&alice, &new_id).await;
    assert_eq!(n["contents"], new_contents);
    assert_eq!(n["created"], "2024-06-01T10:00:00Z");
    // the merged client syncs again: nothing to say
    let r = api
        .sync_tickles(&alice, json!({"synced": {&a: 3, &b: 1, &new_id: 0}}))
        .await;
    assert_eq!(r, json!({}));
    let whole = api
        .post(
            "/sync",
            &alice,
            &json!({"syncRequestTickles": {"synced": {&a: 3, &b: 1, &new_id: 0}}}),
        )
        .await
        .expect_json(200);
    assert_eq!(whole, json!({"syncResponseTickles": {}}));
    assert_counts(api, &alice).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_rules_conflicts_and_ownership() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let bobs = api.add_tickle(&bob, &future_tickle("bob")).await;
    // an empty account and an empty request
    assert_eq!(api.sync_tickles(&alice, json!({})).await, json!({}));
    assert_eq!(
        api.sync_tickles(
            &alice,
            json!({"added": null, "synced": null, "changed": null, "deleted": null})
        )
        .await,
        json!({})
    );
    // server-added: everything not mentioned, with value and time
    let x = api.add_tickle(&alice, &future_tickle("x")).await;
    let y = api.add_tickle(&alice, &future_tickle("y")).await;
    let x_item = api.tickle_info(&alice, &x).await;
    let r = api.sync_tickles(&alice, json!({"synced": {&y: 0}})).await;
    assert_eq!(
        r,
        json!({"server-added": {&x: {"value": {"contents": x_item["contents"], "created": x_item["created"]}, "time": 0}}})
    );
    // synced ahead of the server: nothing
    assert_eq!(
        api.sync_tickles(&alice, json!({"synced": {&x: 7, &y: 0}})).await,
        json!({})
    );
    // bump x to time 1 on the server
    api.post(&format!("/scheduler/item/info/{x}"), &alice, &future_tickle("x1"))
        .await
        .expect_empty(200);
    let x_item = api.tickle_info(&alice, &x).await;
    let x_entry = json!({"value": {"contents": x_item["contents"], "created": x_item["created"]}, "time": 1});
    let stale = json!({"value": value(future_tickle("mine"), "2020-01-01T00:00:00Z"), "time": 0});
    // changed based on an old time: conflict, nothing changes
    let r = api
        .sync_tickles(&alice, json!({"changed": {&x: &stale}, "synced": {&y: 0}}))
        .await;
    assert_eq!(r, json!({"conflict": {&x: &x_entry}}));
    assert_eq!(api.tickle_info(&alice, &x).await, x_item);
    // deleted based on an old time: conflict-client-deleted, nothing changes
    let r = api
        .sync_tickles(&alice, json!({"deleted": {&x: 0}, "synced": {&y: 0}}))
        .await;
    assert_eq!(r, json!({"conflict-client-deleted": {&x: &x_entry}}));
    assert_eq!(api.tickle_info(&alice, &x).await, x_item);
    // changed at the current time: applied, time + 1
    let r = api
        .sync_tickles(
            &alice,
            json!({"changed": {&x: {"value": value(future_tickle("x2"), "2020-01-01T00:00:00Z"), "time": 1}}, "synced": {&y: 0}}),
        )
        .await;
    assert_eq!(r, json!({"client-changed": {&x: 2}}));
    assert_eq!(api.tickle_info(&alice, &x).await["contents"]["content"], "x2");
    assert_eq!(api.tickle_info(&alice, &x).await["created"], x_item["created"]);
    // changed based on a newer time than the server's: applied, server time + 1
    let r = api
        .sync_tickles(
            &alice,
            json!({"changed": {&x: {"value": value(future_tickle("x3"), "2020-01-01T00:00:00Z"), "time": 9}}, "synced": {&y: 0}}),
        )
        .await;
    assert_eq!(r, json!({"client-changed": {&x: 3}}));
    // deleted at the current time: gone
    let r = api
        .sync_tickles(&alice, json!({"deleted": {&x: 3}, "synced": {&y: 0}}))
        .await;
    assert_eq!(r, json!({"client-deleted": [&x]}));
    api.get(&format!("/scheduler/item/info/{x}"), &alice)
        .await
        .expect_error(404);
    // unknown ids: synced → server-deleted, changed → conflict-server-deleted,
    // deleted → client-deleted; another account's items count as unknown and stay
    let (u1, u2, u3) = (random_uuid(), random_uuid(), random_uuid());
    let r = api
        .sync_tickles(
            &alice,
            json!({
                "synced": {&y: 0, &u1: 0, &x: 3, &bobs: 0},
                "changed": {&u2: &stale},
                "deleted": {&u3: 0},
            }),
        )
        .await;
    assert_eq!(
        r["server-deleted"],
        json!(sorted(vec![u1.clone(), x.clone(), bobs.clone()]))
    );
    assert_eq!(r["conflict-server-deleted"], json!([&u2]));
    assert_eq!(r["client-deleted"], json!([&u3]));
    assert_eq!(
        keys(&r),
        strs(&["client-deleted", "conflict-server-deleted", "server-deleted"])
    );
    let r = api
        .sync_tickles(
            &alice,
            json!({"changed": {&bobs: {"value": value(future_tickle("stolen"), "2020-01-01T00:00:00Z"), "time": 99}}, "synced": {&y: 0}}),
        )
        .await;
    assert_eq!(r, json!({"conflict-server-deleted": [&bobs]}));
    let r = api
        .sync_tickles(&alice, json!({"deleted": {&bobs: 99}, "synced": {&y: 0}}))
        .await;
    assert_eq!(r, json!({"client-deleted": [&bobs]}));
    assert_eq!(api.tickle_info(&bob, &bobs).await["contents"]["content"], "bob");
    // arrays are sorted ascending
    let mut many: Vec<String> = (0..6).map(|_| random_uuid()).collect();
    let deleted: serde_json::Map<String, Value> = many.iter().map(|u| (u.clone(), json!(0))).collect();
    let r = api
        .sync_tickles(&alice, json!({"deleted": deleted, "synced": {&y: 0}}))
        .await;
    many.sort();
    assert_eq!(r["client-deleted"], json!(many));
    // the legacy key `new` is read as `added` when `added` is absent, ignored otherwise
    let r = api
        .sync_tickles(
            &alice,
            json!({"new": {"n": value(future_tickle("legacy"), "2024-01-01T00:00:00+02:00")}, "synced": {&y: 0}}),
        )
        .await;
    assert_eq!(keys(&r), strs(&["client-added"]));
    let legacy = r["client-added"]["n"]["id"].as_str().unwrap().to_owned();
    let item = api.tickle_info(&alice, &legacy).await;
    assert_eq!(item["contents"]["content"], "legacy");
    assert_eq!(item["created"], "2023-12-31T22:00:00Z", "created converted to UTC");
    // fractions: printed only when non-zero, trailing zeros removed; binary contents
    let other = api.login_ok("alice", "alice-password").await;
    let r = api
        .sync_tickles(
            &other,
            json!({"added": {"b": value(json!({"content": {"type": "text", "data": "/w=="}, "scheduled-day": "2099-01-01"}),
                                        "2024-01-01T00:00:00.500000000Z")},
                   "synced": {&y: 0, &legacy: 0}}),
        )
        .await;
    let bin = r["client-added"]["b"]["id"].as_str().unwrap().to_owned();
    let r = api.sync_tickles(&alice, json!({"synced": {&y: 0, &legacy: 0}})).await;
    assert_eq!(
        r,
        json!({"server-added": {&bin: {"value": {"contents": {"content": {"type": "text", "data": "/w=="},
            "scheduled-day": "2099-01-01", "scheduled-time": null, "recurrence": null},
            "created": "2024-01-01T00:00:00.5Z"}, "time": 0}}})
    );
    api.delete(&format!("/scheduler/item/delete/{bin}"), &alice)
        .await
        .expect_empty(200);
    let r = api
        .sync_tickles(
            &alice,
            json!({"added": {"a": value(future_tickle("a"), "2024-01-01T00:00:00Z")},
                   "new": {"b": value(future_tickle("b"), "2024-01-01T00:00:00Z")},
                   "synced": {&y: 0, &legacy: 0}}),
        )
        .await;
    assert_eq!(keys(&r), strs(&["client-added"]));
    assert_eq!(keys(&r["client-added"]), strs(&["a"]));
    assert_eq!(api.tickles(&alice, None).await.len(), 3);
    assert_counts(api, &alice).await;
    assert_counts(api, &bob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_applies_nothing_on_invalid_requests() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let x = api.add_tickle(&alice, &future_tickle("x")).await;
    let before = api.tickles(&alice, None).await;
    let good_added = json!({"0": value(future_tickle("new"), "2024-01-01T00:00:00Z")});
    let good_value = value(future_tickle("changed"), "2024-01-01T00:00:00Z");
    let bad_requests = [
        json!({}),
        json!({"syncRequestTickles": null}),
        json!({"syncRequestTickles": []}),
        json!({"syncRequestTickles": {"added": []}}),
        json!({"syncRequestTickles": {"synced": [&x]}}),
        // an id in two sections
        json!({"syncRequestTickles": {"added": good_added, "synced": {&x: 0}, "deleted": {&x: 0}}}),
        json!({"syncRequestTickles": {"added": good_added, "synced": {&x: 0}, "changed": {&x: {"value": good_value, "time": 0}}}}),
        json!({"syncRequestTickles": {"added": good_added, "changed": {&x: {"value": good_value, "time": 0}}, "deleted": {&x: 0}}}),
        // bad times
        json!({"syncRequestTickles": {"added": good_added, "deleted": {&x: -1}}}),
        json!({"syncRequestTickles": {"added": good_added, "deleted": {&x: 1.5}}}),
        json!({"syncRequestTickles": {"added": good_added, "deleted": {&x: "0"}}}),
        json!({"syncRequestTickles": {"added": good_added, "synced": {&x: null}}}),
        json!({"syncRequestTickles": {"added": good_added, "changed": {&x: {"value": good_value, "time": -3}}}}),
        json!({"syncRequestTickles": {"added": good_added, "changed": {&x: {"value": good_value}}}}),
        json!({"syncRequestTickles": {"added": good_added, "changed": {&x: {"time": 0}}}}),
        // bad UUIDs
        json!({"syncRequestTickles": {"added": good_added, "deleted": {"not-a-uuid": 0, &x: 0}}}),
        json!({"syncRequestTickles": {"added": good_added, "synced": {"123": 0}}}),
        // bad values
        json!({"syncRequestTickles": {"added": {"0": value(future_tickle("x"), "2024-01-01")}, "deleted": {&x: 0}}}),
        json!({"syncRequestTickles": {"added": {"0": value(future_tickle("x"), "2024-01-01T00:00:00")}, "deleted": {&x: 0}}}),
        json!({"syncRequestTickles": {"added": {"0": {"contents": future_tickle("x")}}, "deleted": {&x: 0}}}),
        json!({"syncRequestTickles": {"added": {"0": value(json!({"content": "x", "scheduled-day": "2023-02-29"}), "2024-01-01T00:00:00Z")}, "deleted": {&x: 0}}}),
        json!({"syncRequestTickles": {"added": good_added, "changed": {&x: {"value": value(json!({"content": 1, "scheduled-day": "2099-01-01"}), "2024-01-01T00:00:00Z"), "time": 0}}}}),
        json!({"syncRequestTickles": {"new": {"0": {"contents": null, "created": "2024-01-01T00:00:00Z"}}, "deleted": {&x: 0}}}),
    ];
    for body in bad_requests {
        api.post("/sync", &alice, &body).await.expect_error(400);
        assert_eq!(api.tickles(&alice, None).await, before, "{body} changed something");
    }
    // the same shapes, valid, do apply
    let r = api
        .sync_tickles(&alice, json!({"added": good_added, "deleted": {&x: 0}}))
        .await;
    assert_eq!(keys(&r), strs(&["client-added", "client-deleted"]));
}

// ---------------------------------------------------------------------------------------
// Triggers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_triggers_verify_and_resend() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    for bad in [
        json!({"addEmailTrigger": "no-at"}),
        json!({"addEmailTrigger": "a@b@c"}),
        json!({"addEmailTrigger": "@x.org"}),
        json!({"addEmailTrigger": "a@"}),
        json!({"addEmailTrigger": ".a@x.org"}),
        json!({"addEmailTrigger": "a..b@x.org"}),
        json!({"addEmailTrigger": "a b@x.org"}),
        json!({"addEmailTrigger": "a@-x.org"}),
        json!({"addEmailTrigger": "a@x..org"}),
        json!({"addEmailTrigger": ""}),
        json!({"addEmailTrigger": 5}),
        json!({"email": "me@example.org"}),
        json!(["me@example.org"]),
    ] {
        api.post("/trigger/email", &alice, &bad).await.expect_error(400);
    }
    assert!(api.triggers(&alice).await.is_empty());

    let id = api.add_email_trigger(&alice, "Me+tag@Example.org").await;
    assert!(is_canonical_uuid(&id));
    let unverified = json!({"uuid": &id, "info": {"typedTriggerInfoType": "email",
        "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "Me+tag@Example.org", "emailTriggerInfoVerified": false}}});
    assert_eq!(api.triggers(&alice).await, std::slice::from_ref(&unverified));
    assert_eq!(
        api.get(&format!("/trigger/info/{id}"), &alice).await.expect_json(200),
        unverified
    );
    assert!(api.triggers(&bob).await.is_empty());

    // the verification e-mail in the outbox
    let emails = wait_for_emails(&s.outbox(), &format!("Trigger: {id}"), 1).await;
    let email = &emails[0];
    assert!(email.contains("Please verify your e-mail trigger"), "{email}");
    assert!(email.contains(&format!("/trigger/email/verify/{id}/")), "{email}");
    let key = common::scheduler::verification_key(email);
    assert_eq!(key, key.to_lowercase());

    // malformed keys: 400; wrong key: 400; unknown or not own: 404
    let verify = |tid: &str, k: &str| format!("/trigger/email/verify/{tid}/{k}");
    for bad in [
        &key[..31],
        &format!("{key}0"),
        "zz",
        &format!("{}g", &key[..31]),
        "not-a-key",
    ] {
        api.post_raw(&verify(&id, bad), &alice, None, "")
            .await
            .expect_error(400);
    }
    api.post_raw(&verify("not-a-uuid", &key), &alice, None, "")
        .await
        .expect_error(400);
    let wrong = other_hex(&key);
    api.post_raw(&verify(&id, &wrong), &alice, None, "")
        .await
        .expect_error(400);
    api.post_raw(&verify(NIL, &key), &alice, None, "")
        .await
        .expect_error(404);
    api.post_raw(&verify(&id, &key), &bob, None, "").await.expect_error(404);
    assert_eq!(
        api.triggers(&alice).await,
        std::slice::from_ref(&unverified),
        "still unverified"
    );

    // the right key, either case
    api.post_raw(&verify(&id, &key.to_uppercase()), &alice, None, "")
        .await
        .expect_empty(200);
    let verified = json!({"uuid": &id, "info": {"typedTriggerInfoType": "email",
        "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": "Me+tag@Example.org", "emailTriggerInfoVerified": true}}});
    assert_eq!(
        api.get(&format!("/trigger/info/{id}"), &alice).await.expect_json(200),
        verified
    );
    // again: 200; resend of a verified trigger: 400
    api.post_raw(&verify(&id, &key), &alice, None, "")
        .await
        .expect_empty(200);
    api.post_raw(&format!("/trigger/email/resend/{id}"), &alice, None, "")
        .await
        .expect_error(400);

    // resend: a new key replaces the old one
    let id2 = api.add_email_trigger(&alice, "second@example.org").await;
    let old_key = wait_for_verification_key(&s, &id2, 1).await;
    api.post_raw(&format!("/trigger/email/resend/{id2}"), &bob, None, "")
        .await
        .expect_error(404);
    api.post_raw(&format!("/trigger/email/resend/{NIL}"), &alice, None, "")
        .await
        .expect_error(404);
    api.post_raw("/trigger/email/resend/not-a-uuid", &alice, None, "")
        .await
        .expect_error(400);
    api.send(api.request(Method::POST, &format!("/trigger/email/resend/{id2}"), &alice))
        .await
        .expect_empty(200);
    let new_key = wait_for_verification_key(&s, &id2, 2).await;
    assert_ne!(old_key, new_key);
    api.post_raw(&verify(&id2, &old_key), &alice, None, "")
        .await
        .expect_error(400);
    api.send(api.request(Method::POST, &verify(&id2, &new_key), &alice))
        .await
        .expect_empty(200);
    let triggers = api.triggers(&alice).await;
    assert_eq!(triggers.len(), 2);
    assert_eq!(triggers[0], verified, "creation order");
    assert_eq!(triggers[1]["uuid"], id2);
    assert_eq!(
        triggers[1]["info"]["typedTriggerInfoValue"]["emailTriggerInfoVerified"],
        true
    );
    // duplicates are allowed
    let dup = api.add_email_trigger(&alice, "second@example.org").await;
    assert_ne!(dup, id2);
    assert_eq!(api.triggers(&alice).await.len(), 3);
    // length limits: local part 64, domain 253
    let label = "a".repeat(63);
    let domain253 = format!("{label}.{label}.{label}.{}", "a".repeat(61));
    assert_eq!(domain253.len(), 253);
    api.add_email_trigger(&alice, &format!("{}@x.org", "l".repeat(64)))
        .await;
    api.add_email_trigger(&alice, &format!("me@{domain253}")).await;
    for bad in [format!("{}@x.org", "l".repeat(65)), format!("me@{domain253}a")] {
        api.post("/trigger/email", &alice, &json!({"addEmailTrigger": bad}))
            .await
            .expect_error(400);
    }
    assert_eq!(api.triggers(&alice).await.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_are_read_and_deleted_by_their_owner_only() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let a = api.add_email_trigger(&alice, "a@example.org").await;
    let b = api.add_email_trigger(&alice, "b@example.org").await;
    let bobs = api.add_email_trigger(&bob, "bob@example.org").await;
    api.get(&format!("/trigger/info/{bobs}"), &alice)
        .await
        .expect_error(404);
    api.get(&format!("/trigger/info/{NIL}"), &alice).await.expect_error(404);
    api.get("/trigger/info/not-a-uuid", &alice).await.expect_error(400);
    api.delete("/trigger/delete/not-a-uuid", &alice).await.expect_error(400);
    // deleting another account's or an unknown trigger: 200, nothing happens
    api.delete(&format!("/trigger/delete/{bobs}"), &alice)
        .await
        .expect_empty(200);
    api.delete(&format!("/trigger/delete/{NIL}"), &alice)
        .await
        .expect_empty(200);
    assert_eq!(api.triggers(&bob).await.len(), 1);
    api.get(&format!("/trigger/info/{bobs}"), &bob).await.expect_json(200);
    // own trigger
    api.delete(&format!("/trigger/delete/{a}"), &alice)
        .await
        .expect_empty(200);
    api.get(&format!("/trigger/info/{a}"), &alice).await.expect_error(404);
    let left: Vec<Value> = api.triggers(&alice).await.iter().map(|t| t["uuid"].clone()).collect();
    assert_eq!(left, [json!(b)]);
    api.delete(&format!("/trigger/delete/{a}"), &alice)
        .await
        .expect_empty(200);
    // a deleted trigger cannot be verified or resent
    api.post_raw(&format!("/trigger/email/resend/{a}"), &alice, None, "")
        .await
        .expect_error(404);
    api.post_raw(
        &format!("/trigger/email/verify/{a}/{}", "0".repeat(32)),
        &alice,
        None,
        "",
    )
    .await
    .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_triggers_check_credentials_at_the_inbox() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    // an inbox account with an access key on the same server's inbox service
    let inbox = s.user("inboxuser").await;
    let (secret, _) = s.add_key(&inbox, "scheduler", &["PermitAdd"]).await;
    let base = s.api.base.clone();
    let body = |url: &str, user: &str, key: &str| json!({"addInboxTriggerUrl": url, "addInboxTriggerUsername": user, "addInboxTriggerAccessKey": key});

    // success: Right with the trigger's UUID; the URL normalised
    let v = api
        .post(
            "/trigger/inbox",
            &alice,
            &body(&format!("{base}/"), "inboxuser", &secret),
        )
        .await
        .expect_json(200);
    assert_eq!(keys(&v), strs(&["Right"]), "{v}");
    let id = v["Right"].as_str().unwrap().to_owned();
    assert!(is_canonical_uuid(&id));
    let expected = json!({"uuid": &id, "info": {"typedTriggerInfoType": "inbox",
        "typedTriggerInfoValue": {"inboxTriggerInfoUrl": &base}}});
    assert_eq!(
        api.get(&format!("/trigger/info/{id}"), &alice).await.expect_json(200),
        expected
    );
    assert_eq!(api.triggers(&alice).await, std::slice::from_ref(&expected));
    // the key's hex digits in upper case and the URL without a scheme work too
    let host = base.strip_prefix("http://").unwrap();
    let v = api
        .post(
            "/trigger/inbox",
            &alice,
            &body(&host.to_uppercase(), "inboxuser", &secret.to_uppercase()),
        )
        .await
        .expect_json(200);
    let id2 = v["Right"].as_str().unwrap_or_else(|| panic!("{v}")).to_owned();
    assert_eq!(
        api.get(&format!("/trigger/info/{id2}"), &alice).await.expect_json(200)["info"]["typedTriggerInfoValue"]
            ["inboxTriggerInfoUrl"],
        base
    );
    // the alias and the old key spellings
    let v = api
        .post(
            "/trigger/intray",
            &alice,
            &json!({"addIntrayTriggerUrl": &base, "addIntrayTriggerUsername": "inboxuser", "addIntrayTriggerAccessKey": &secret}),
        )
        .await
        .expect_json(200);
    assert!(v["Right"].is_string(), "{v}");
    let v = api
        .post(
            "/trigger/inbox",
            &alice,
            &json!({"addIntrayTriggerUrl": &base, "addInboxTriggerUsername": "inboxuser", "addIntrayTriggerAccessKey": &secret}),
        )
        .await
        .expect_json(200);
    assert!(v["Right"].is_string(), "{v}");
    // the new spelling wins when both are given
    let v = api
        .post(
            "/trigger/inbox",
            &alice,
            &json!({"addInboxTriggerUrl": &base, "addIntrayTriggerUrl": "http://127.0.0.1:1",
                    "addInboxTriggerUsername": "inboxuser", "addIntrayTriggerUsername": "nobody",
                    "addInboxTriggerAccessKey": &secret, "addIntrayTriggerAccessKey": "00"}),
        )
        .await
        .expect_json(200);
    assert!(v["Right"].is_string(), "{v}");
    // login success suffices: the key's permissions are not inspected
    let (weak, _) = s.add_key(&inbox, "weak", &["PermitShow"]).await;
    let v = api
        .post("/trigger/inbox", &alice, &body(&base, "inboxuser", &weak))
        .await
        .expect_json(200);
    assert!(v["Right"].is_string(), "{v}");
    assert_eq!(api.triggers(&alice).await.len(), 6);
    let weak_id = api.triggers(&alice).await[5]["uuid"].as_str().unwrap().to_owned();
    api.delete(&format!("/trigger/delete/{weak_id}"), &alice)
        .await
        .expect_empty(200);
    assert_eq!(api.triggers(&alice).await.len(), 5);
    // a key deleted at the inbox no longer logs in: Left
    let (gone, gone_uuid) = s.add_key(&inbox, "gone", &["PermitAdd"]).await;
    s.delete(&format!("/access-key/{gone_uuid}"), &inbox)
        .await
        .expect_empty(200);

    // failed credential checks: 200 Left, nothing stored
    let wrong_key = other_hex(&secret);
    for b in [
        body(&base, "inboxuser", &wrong_key),
        body(&base, "inboxuser", &gone),
        body(&base, "inboxuser", "abcd"),
        body(&base, "nobody", &secret),
        body("http://127.0.0.1:1", "inboxuser", &secret),
        body(&format!("{base}/nothing-here"), "inboxuser", &secret),
        // the scheduler's own port is no inbox for this user
        body(&api.base, "inboxuser", &secret),
    ] {
        let v = api.post("/trigger/inbox", &alice, &b).await.expect_json(200);
        assert_eq!(keys(&v), strs(&["Left"]), "{b} answered {v}");
        // one answer whatever the cause: a wrong key, a refused port, a 404 (no oracle)
        let url = b["addInboxTriggerUrl"].as_str().unwrap();
        assert_eq!(v["Left"], format!("no working inbox service at {url}"), "{b}");
        let v = api.post("/trigger/intray", &alice, &b).await.expect_json(200);
        assert!(v["Left"].is_string(), "{v}");
    }
    assert_eq!(api.triggers(&alice).await.len(), 5);

    // invalid fields: 400
    for b in [
        body("ftp://127.0.0.1:1", "inboxuser", &secret),
        body("http://", "inboxuser", &secret),
        body("http://u:p@127.0.0.1:1", "inboxuser", &secret),
        body(&format!("{base}/?q=1"), "inboxuser", &secret),
        body(&format!("{base}/#f"), "inboxuser", &secret),
        body("", "inboxuser", &secret),
        body(&base, "ab", &secret),
        body(&base, "a b", &secret),
        body(&base, "", &secret),
        body(&base, "inboxuser", ""),
        body(&base, "inboxuser", "abc"),
        body(&base, "inboxuser", "zz"),
        body(&base, "inboxuser", &format!("{secret} ")),
        json!({"addInboxTriggerUrl": &base, "addInboxTriggerUsername": "inboxuser"}),
        json!({"addInboxTriggerUrl": &base, "addInboxTriggerAccessKey": &secret}),
        json!({"addInboxTriggerUsername": "inboxuser", "addInboxTriggerAccessKey": &secret}),
        json!({"addInboxTriggerUrl": 1, "addInboxTriggerUsername": "inboxuser", "addInboxTriggerAccessKey": &secret}),
        json!([]),
    ] {
        api.post("/trigger/inbox", &alice, &b).await.expect_error(400);
        api.post("/trigger/intray", &alice, &b).await.expect_error(400);
    }
    assert_eq!(api.triggers(&alice).await.len(), 5);
    // an inbox trigger is not an e-mail trigger
    api.post_raw(&format!("/trigger/email/resend/{id}"), &alice, None, "")
        .await
        .expect_error(404);
    api.post_raw(
        &format!("/trigger/email/verify/{id}/{}", "0".repeat(32)),
        &alice,
        None,
        "",
    )
    .await
    .expect_error(404);
    // deletion
    api.delete(&format!("/trigger/delete/{id}"), &alice)
        .await
        .expect_empty(200);
    api.get(&format!("/trigger/info/{id}"), &alice).await.expect_error(404);
    assert_eq!(api.triggers(&alice).await.len(), 4);
}

// ---------------------------------------------------------------------------------------
// Workers, admin

const LOOPERS: [&str; 10] = [
    "triggererLooperInfo",
    "triggeredInboxItemSchedulerLooperInfo",
    "triggeredInboxItemSenderLooperInfo",
    "triggeredEmailSchedulerLooperInfo",
    "triggeredEmailConverterLooperInfo",
    "verificationEmailConverterLooperInfo",
    "emailerLooperInfo",
    "adminNotificationEmailConverterLooperInfo",
    "paymentsEventsFetcherLooperInfo",
    "paymentsEventsRetrierLooperInfo",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopers_show_running_and_disabled_workers() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let running = json!({"looperInfoStatus": {"tag": "LooperStatusRunning"},
        "looperInfoPeriod": 1, "looperInfoRetryDelay": 100000, "looperInfoRetryAmount": 7});
    let disabled = json!({"looperInfoStatus": {"tag": "LooperStatusDisabled"},
        "looperInfoPeriod": null, "looperInfoRetryDelay": null, "looperInfoRetryAmount": null});
    let v = api.get("/loopers", &Auth::None).await.expect_json(200);
    assert_eq!(keys(&v), sorted(strs(&LOOPERS)));
    for name in &LOOPERS[..7] {
        assert_eq!(v[name], running, "{name}");
    }
    for name in &LOOPERS[7..] {
        assert_eq!(v[name], disabled, "{name}");
    }
    // credentials are not needed but do no harm
    let alice = api.user("alice").await;
    assert_eq!(api.get("/loopers", &alice).await.expect_json(200), v);

    // disabled workers, other numbers
    let s = Server::start_scheduler_with(|st| {
        st.disabled_loopers = vec![
            pigeonhole::domain::worker::Worker::Emailer,
            pigeonhole::domain::worker::Worker::Triggerer,
        ];
        st.looper_period = 60;
        st.looper_retry_amount = 3;
        st.admin_email = Some("root@example.org".into());
    })
    .await;
    let v = s.scheduler.get("/loopers", &Auth::None).await.expect_json(200);
    assert_eq!(keys(&v), sorted(strs(&LOOPERS)));
    let running = json!({"looperInfoStatus": {"tag": "LooperStatusRunning"},
        "looperInfoPeriod": 60, "looperInfoRetryDelay": 100000, "looperInfoRetryAmount": 3});
    for name in LOOPERS {
        let expected = match name {
            "emailerLooperInfo"
            | "triggererLooperInfo"
            | "paymentsEventsFetcherLooperInfo"
            | "paymentsEventsRetrierLooperInfo" => &disabled,
            _ => &running,
        };
        assert_eq!(&v[name], expected, "{name}");
    }
    // with the triggerer disabled, a due item stays scheduled: the triggerer never runs a
    // pass while the next stage does
    let api = &s.scheduler;
    let bob = api.user("bob").await;
    let id = api.add_tickle(&bob, &due_tickle("due", false).0).await;
    s.settle(&[Worker::TriggeredInboxItemScheduler]).await;
    assert_eq!(s.workers.activity(Worker::Triggerer).borrow().started, 0);
    assert_eq!(ids_of(&api.tickles(&bob, None).await), [id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    api.register("bob", "pw").await.expect_empty(200);
    let alice = api.user("alice").await;
    api.add_tickle(&alice, &future_tickle("1")).await;
    api.add_tickle(&alice, &future_tickle("2")).await;
    api.add_tickle(&alice, &due_tickle("due", false).0).await;
    wait_for_triggered(api, &alice, 1).await;
    let admin = api.user("admin").await;
    api.add_tickle(&admin, &future_tickle("3")).await;
    // an inbox admin is not a scheduler account
    let inbox_admin = s.user("admin").await;
    api.get("/admin/stats", &inbox_admin).await.expect_error(401);

    let stats = api.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(
        stats,
        json!({"users": 3, "subscribers": 0, "scheduler-items": 3, "triggered-items": 1,
               "active-users": {"daily": 2, "weekly": 2, "monthly": 2, "yearly": 2}})
    );
    let accounts = api.get("/admin/accounts", &admin).await.expect_json(200);
    let accounts = accounts.as_array().unwrap();
    let names: Vec<&str> = accounts.iter().map(|a| a["username"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["admin", "alice", "bob"],
        "latest login first, never-logged-in last"
    );
    assert_eq!(accounts[0]["admin"], true);
    assert_eq!(accounts[1], account(api, &alice).await);
    assert_eq!(accounts[2]["last-login"], Value::Null);
    assert_eq!(account(api, &admin).await["admin"], true);
    let alice_uuid = accounts[1]["uuid"].as_str().unwrap().to_owned();

    for auth in [&alice, &Auth::None, &Auth::Bearer("x".into())] {
        api.get("/admin/stats", auth).await.expect_error(401);
        api.get("/admin/accounts", auth).await.expect_error(401);
        api.delete(&format!("/admin/account/{alice_uuid}"), auth)
            .await
            .expect_error(401);
        api.delete("/admin/account/not-a-uuid", auth).await.expect_error(401);
    }
    api.delete("/admin/account/not-a-uuid", &admin).await.expect_error(400);
    api.delete(&format!("/admin/account/{NIL}"), &admin)
        .await
        .expect_error(404);
    api.delete(&format!("/admin/account/{alice_uuid}"), &admin)
        .await
        .expect_empty(200);
    api.get("/account", &alice).await.expect_error(401);
    api.login("alice", "alice-password").await.expect_error(401);
    api.delete(&format!("/admin/account/{alice_uuid}"), &admin)
        .await
        .expect_error(404);
    let stats = api.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(stats["users"], 2);
    assert_eq!(stats["scheduler-items"], 1);
    assert_eq!(stats["triggered-items"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_syncs_and_timezone_changes_make_items_due_at_once() {
    let s = Server::start_scheduler_with(|st| st.looper_period = 60).await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    // two hours ahead in UTC: not due
    let (day, time) = utc_ago(-2 * 3600);
    let later = api.add_tickle(&alice, &tickle("later", &day, Some(&time), None)).await;
    let edited = api.add_tickle(&alice, &future_tickle("edited")).await;
    let synced = api.add_tickle(&alice, &future_tickle("synced")).await;
    s.settle(&[Worker::Triggerer]).await;
    assert!(api.tickles(&alice, Some("onlytriggered")).await.is_empty());

    // an edit that makes the item due triggers it (the worker's period is a minute)
    api.post(
        &format!("/scheduler/item/info/{edited}"),
        &alice,
        &due_tickle("edited", false).0,
    )
    .await
    .expect_empty(200);
    let t = wait_for_triggered(api, &alice, 1).await;
    assert_eq!(t[0]["contents"]["content"], "edited");
    // a sync change too
    let r = api
        .sync_tickles(
            &alice,
            json!({"changed": {&synced: {"value": value(due_tickle("synced", false).0, "2024-01-01T00:00:00Z"), "time": 0}}}),
        )
        .await;
    assert_eq!(r["client-changed"], json!({&synced: 1}));
    wait_for_triggered(api, &alice, 2).await;
    // and a sync addition
    let r = api
        .sync_tickles(
            &alice,
            json!({"added": {"0": value(due_tickle("added", false).0, "2024-01-01T00:00:00Z")}, "synced": {&later: 0}}),
        )
        .await;
    assert_eq!(keys(&r), strs(&["client-added"]), "{r}");
    wait_for_triggered(api, &alice, 3).await;
    // UTC+3 makes the item two hours ahead in UTC one hour overdue
    put_json(
        api,
        "/account/settings",
        &alice,
        &json!({"timezone": {"offset": 180, "name": "UTC+3", "summer": false}}),
    )
    .await
    .expect_empty(200);
    let t = wait_for_triggered(api, &alice, 4).await;
    let contents: Vec<&str> = t.iter().map(|t| t["contents"]["content"].as_str().unwrap()).collect();
    assert!(contents.contains(&"later"), "{contents:?}");
    assert!(api.tickles(&alice, Some("onlyuntriggered")).await.is_empty());

    // a named IANA zone wins over the offset: Tokyo wall time a minute ago is due
    let bob = api.user("bob").await;
    let (day, time) = utc_ago(60 - 9 * 3600);
    let tokyo = api.add_tickle(&bob, &tickle("tokyo", &day, Some(&time), None)).await;
    // a name without a '/' leaves the offset (0) in charge
    put_json(
        api,
        "/account/settings",
        &bob,
        &json!({"timezone": {"offset": 0, "name": "Tokyo", "summer": false}}),
    )
    .await
    .expect_empty(200);
    s.settle(&[Worker::Triggerer]).await;
    assert!(api.tickles(&bob, Some("onlytriggered")).await.is_empty());
    put_json(
        api,
        "/account/settings",
        &bob,
        &json!({"timezone": {"offset": 0, "name": "Asia/Tokyo", "summer": false}}),
    )
    .await
    .expect_empty(200);
    let t = wait_for_triggered(api, &bob, 1).await;
    assert_eq!(t[0]["contents"]["content"], "tokyo");
    api.get(&format!("/scheduler/item/info/{tokyo}"), &bob)
        .await
        .expect_error(404);
    assert_counts(api, &alice).await;
    assert_counts(api, &bob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_registration_and_login_rate() {
    let s = Server::start_scheduler_with(|st| st.max_body_bytes = 1000).await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let big = format!(
        "{{\"content\": \"{}\", \"scheduled-day\": \"2099-01-01\"}}",
        "x".repeat(2000)
    );
    // the body size comes before the token
    api.post_raw("/scheduler/item", &Auth::None, Some("application/json"), big.clone())
        .await
        .expect_error(413);
    api.post_raw("/scheduler/item", &alice, Some("application/json"), big)
        .await
        .expect_error(413);
    assert!(api.tickles(&alice, None).await.is_empty());
    // failed logins are limited per username, separately from the inbox service
    for _ in 0..10 {
        api.login("alice", "wrong").await.expect_error(401);
    }
    let r = api.login("alice", "alice-password").await;
    assert_eq!(r.status, 429, "{:?}", r.text());
    assert!(r.header("retry-after").is_some());
    s.register("alice", "pw").await.expect_empty(204);
    s.login_ok("alice", "pw").await;
    // the token in hand keeps working
    account(api, &alice).await;

    let s = Server::start_scheduler_with(|st| st.registration_open = false).await;
    s.scheduler.register("bob", "pw").await.expect_error(403);
    // closed registration is refused before the body is looked at
    s.scheduler
        .post_raw("/register", &Auth::None, Some("text/plain"), "junk")
        .await
        .expect_error(403);
    s.scheduler.login("bob", "pw").await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_follow_created_and_missed_occurrences_trigger_once() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let a = api.add_tickle(&alice, &future_tickle("A")).await;
    // sync-added items are ordered by the `created` they bring
    let r = api
        .sync_tickles(
            &alice,
            json!({"added": {"0": value(future_tickle("old"), "2020-01-01T00:00:00Z"),
                             "1": value(future_tickle("new"), "2098-01-01T00:00:00Z")},
                   "synced": {&a: 0}}),
        )
        .await;
    let (old, new) = (
        r["client-added"]["0"]["id"].as_str().unwrap().to_owned(),
        r["client-added"]["1"]["id"].as_str().unwrap().to_owned(),
    );
    let order = [old.clone(), a.clone(), new.clone()];
    assert_eq!(ids_of(&api.tickles(&alice, None).await), order);
    assert_eq!(api.get("/scheduler/uuids", &alice).await.expect_json(200), json!(order));

    // triggered items: by the original's created, not by when they triggered
    let b = api.add_tickle(&alice, &due_tickle("B", false).0).await;
    wait_for_triggered(api, &alice, 1).await;
    api.post(&format!("/scheduler/item/info/{a}"), &alice, &due_tickle("A", false).0)
        .await
        .expect_empty(200);
    wait_for_triggered(api, &alice, 2).await;
    api.post(
        &format!("/scheduler/item/info/{old}"),
        &alice,
        &due_tickle("old", false).0,
    )
    .await
    .expect_empty(200);
    let t = wait_for_triggered(api, &alice, 3).await;
    let contents: Vec<&str> = t.iter().map(|t| t["contents"]["content"].as_str().unwrap()).collect();
    assert_eq!(contents, ["old", "A", "B"]);
    assert_eq!(t[0]["created"], "2020-01-01T00:00:00Z");
    assert_ne!(json!(b), t[2]["id"]);
    assert_eq!(ids_of(&api.tickles(&alice, None).await)[0], new);

    // an item of 1900 repeating daily: one copy with the oldest occurrence, then the first
    // occurrence strictly after the triggering instant
    let bob = api.user("bob").await;
    let id = api
        .add_tickle(
            &bob,
            &tickle("old", "1900-01-01", Some("08:00"), Some(every_days(1, Some("08:00")))),
        )
        .await;
    let t = wait_for_triggered(api, &bob, 1).await;
    assert_eq!(t[0]["contents"]["scheduled-day"], "1900-01-01");
    assert_eq!(t[0]["contents"]["scheduled-time"], "08:00:00");
    let at = instant(t[0]["triggered"]["triggeredInfoTriggered"].as_str().unwrap());
    let day = format!("{:04}-{:02}-{:02}", at.year(), at.month() as u8, at.day());
    let expected = if at.hour() < 8 { day } else { next_day(&day) };
    let item = api.tickle_info(&bob, &id).await;
    assert_eq!(item["contents"]["scheduled-day"], json!(expected));
    assert_eq!(item["contents"]["scheduled-time"], "08:00:00");
    s.settle(&[Worker::Triggerer]).await;
    assert_eq!(api.tickles(&bob, Some("onlytriggered")).await.len(), 1);
    assert_counts(api, &alice).await;
    assert_counts(api, &bob).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_accounts_and_triggers_get_no_queued_emails() {
    // with the emailer disabled, verification e-mails queue up in the database
    let s = Server::start_scheduler_with(|st| st.disabled_loopers = vec![pigeonhole::domain::worker::Worker::Emailer])
        .await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let carol = api.user("carol").await;
    let a = api.add_email_trigger(&alice, "alice@example.org").await;
    let b = api.add_email_trigger(&bob, "bob@example.org").await;
    let c = api.add_email_trigger(&carol, "carol@example.org").await;
    let c2 = api.add_email_trigger(&carol, "carol2@example.org").await;
    // rendered, and never sent: the emailer does not run
    s.settle(&[Worker::VerificationEmailConverter]).await;
    assert_eq!(s.workers.activity(Worker::Emailer).borrow().started, 0);
    assert!(common::scheduler::read_outbox(&s.outbox()).is_empty());
    api.delete("/account", &alice).await.expect_empty(200);
    api.delete(&format!("/trigger/delete/{c}"), &carol)
        .await
        .expect_empty(200);
    // sent after a restart without the flag: only what still exists
    let s = s.restart_with(|st| st.disabled_loopers.clear()).await;
    wait_for_emails(&s.outbox(), &format!("Trigger: {b}"), 1).await;
    wait_for_emails(&s.outbox(), &format!("Trigger: {c2}"), 1).await;
    s.settle(&VERIFICATION).await;
    let all = common::scheduler::read_outbox(&s.outbox());
    assert_eq!(all.len(), 2, "{all:?}");
    for (_, text) in &all {
        assert!(!text.contains(&a) && !text.contains(&c), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_and_head() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    for path in ["/account/settings", "/scheduler/item/info/x", "/nope"] {
        let r = api
            .send(
                api.request(Method::OPTIONS, path, &Auth::None)
                    .header("Origin", "https://app.example.org")
                    .header("Access-Control-Request-Method", "PUT")
                    .header("Access-Control-Request-Headers", "authorization, content-type"),
            )
            .await;
        assert!(r.status == 200 || r.status == 204, "{path}: {}", r.status);
        assert!(r.body.is_empty());
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
        let methods = r
            .header("access-control-allow-methods")
            .unwrap_or("")
            .to_ascii_uppercase();
        for m in ["GET", "HEAD", "POST", "DELETE", "PUT"] {
            assert!(methods.contains(m), "{path}: {methods} lacks {m}");
        }
        let headers = r
            .header("access-control-allow-headers")
            .unwrap_or("")
            .to_ascii_lowercase();
        for h in ["authorization", "content-type"] {
            assert!(headers.contains(h), "{path}: {headers} lacks {h}");
        }
        assert_eq!(r.header("access-control-allow-credentials"), None);
    }
    // the origin header on normal and error answers
    for (auth, status) in [(&alice, 200), (&Auth::None, 401)] {
        let r = api
            .send(
                api.request(Method::GET, "/scheduler/items", auth)
                    .header("Origin", "https://x.org"),
            )
            .await
            .expect(status);
        assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    }
    // HEAD is answered like GET, without a body
    for path in [
        "/scheduler/items",
        "/scheduler/uuids",
        "/account",
        "/account/settings",
        "/trigger",
    ] {
        let r = api.send(api.request(Method::HEAD, path, &alice)).await.expect(200);
        assert!(r.body.is_empty(), "{path}");
        api.send(api.request(Method::HEAD, path, &Auth::None)).await.expect(401);
    }
    let r = api
        .send(api.request(Method::HEAD, "/loopers", &Auth::None))
        .await
        .expect(200);
    assert!(r.body.is_empty());
}

/// The time zones the race test switches between; the last one is where it ends.
fn race_zones() -> [Value; 2] {
    [
        json!({"timezone": {"offset": 0, "name": "UTC", "summer": false}}),
        json!({"timezone": {"offset": 600, "name": "Australia/Brisbane", "summer": false}}),
    ]
}

/// One account of the race test: 3000 items, then four writers adding, editing, syncing and
/// adding due recurring items while the zone changes eight times; answers the account's
/// UUID once the writers have stopped.
async fn race_zone_changes(api: &Api, name: &str) -> String {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let alice = api.user(name).await;
    let account = api.get("/account", &alice).await.expect_json(200)["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let at = |n: usize| format!("{:02}:{:02}", n % 24, n % 60);
    let added: serde_json::Map<String, Value> = (0..3000)
        .map(|n| {
            let contents = tickle(&format!("item {n}"), "2099-06-01", Some(&at(n)), None);
            (
                n.to_string(),
                json!({"contents": contents, "created": "2024-01-01T00:00:00Z"}),
            )
        })
        .collect();
    let answer = api.sync_tickles(&alice, json!({"added": added})).await;
    let ids: Vec<String> = answer["client-added"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3000);

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..4usize {
        let (api, alice, stop, ids) = (api.clone(), alice.clone(), stop.clone(), ids.clone());
        writers.spawn(async move {
            let mut n = w;
            while !stop.load(Ordering::SeqCst) {
                n += 4;
                let contents = tickle(&format!("write {n}"), "2099-07-01", Some(&at(n)), None);
                match n % 16 {
                    // a recurring item that is due: the triggerer moves it to tomorrow
                    4 => {
                        let due = tickle("daily", "2024-01-01", Some(&at(n)), Some(every_days(1, Some("07:30"))));
                        api.add_tickle(&alice, &due).await;
                    }
                    8 | 12 => {
                        let value = json!({"contents": contents, "created": "2024-01-01T00:00:00Z"});
                        api.sync_tickles(&alice, json!({"added": {"0": value}})).await;
                    }
                    0 | 2 | 6 | 10 | 14 => {
                        let id = &ids[n % ids.len()];
                        api.post(&format!("/scheduler/item/info/{id}"), &alice, &contents)
                            .await
                            .expect_empty(200);
                    }
                    _ => {
                        api.add_tickle(&alice, &contents).await;
                    }
                }
            }
        });
    }
    let zones = race_zones();
    for round in 0..8 {
        api.send(
            api.request(Method::PUT, "/account/settings", &alice)
                .json(&zones[round % 2]),
        )
        .await
        .expect_empty(200);
    }
    stop.store(true, Ordering::SeqCst);
    while let Some(done) = writers.join_next().await {
        done.expect("a writer");
    }
    assert_eq!(api.get("/account/settings", &alice).await.expect_json(200), zones[1]);
    account
}

/// §3.3, §5.1, §5.2, §16: every due instant is computed with the zone read under the same
/// account lock as its write. In three accounts at once, adds, edits, syncs and the
/// triggerer's rescheduling of recurring items race with settings changes that re-index
/// thousands of items (so each change holds the account's lock for a while); afterwards
/// every item is indexed at its due instant under its account's final zone (checked in the
/// database itself, with the server stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_instants_follow_the_final_zone_despite_concurrent_writes() {
    use pigeonhole::domain::scheduler::schedule::{due, Zone};
    use pigeonhole::domain::wire::Timestamp;

    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let accounts =
        futures_util::future::join_all(["alice", "bob", "carol"].map(|name| race_zone_changes(api, name))).await;

    let (_dir, settings) = s.stop().await;
    let store = common::open_store(&settings).await;
    let index: std::collections::HashMap<uuid::Uuid, Timestamp> = store
        .scheduler
        .upcoming(usize::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|(at, _, id)| (id, at))
        .collect();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for account in accounts {
        let account: uuid::Uuid = account.parse().unwrap();
        let zone = Zone::of(&store.scheduler.settings(account).await.unwrap());
        for item in store.scheduler.scheduled_items(account).await.unwrap() {
            let (expected, indexed) = (due(&item.tickle, &zone), index[&item.id]);
            if indexed != expected {
                wrong.push((item.tickle, indexed, expected));
            }
            checked += 1;
        }
    }
    assert!(checked > 9000, "{checked} items");
    assert_eq!(index.len(), checked, "one index entry per scheduled item");
    assert!(
        wrong.is_empty(),
        "{} of {checked} items indexed under another zone, e.g. {:?}",
        wrong.len(),
        wrong.first()
    );
}

/// §6.2, README decision 17: verification e-mails are resent at most three times per trigger
/// and hour; the next resend answers 429 with `Retry-After` and a JSON error and changes
/// nothing (the key of the last e-mail still verifies the trigger); other triggers are not
/// affected, and a verified trigger still answers 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_are_limited_per_trigger() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let id = api.add_email_trigger(&alice, "me@example.org").await;
    let other = api.add_email_trigger(&alice, "other@example.org").await;
    let resend = |tid: &str| {
        let path = format!("/trigger/email/resend/{tid}");
        let alice = alice.clone();
        async move { api.post_raw(&path, &alice, None, "").await }
    };
    let mut key = wait_for_verification_key(&s, &id, 1).await;
    for n in 2..=4 {
        resend(&id).await.expect_empty(200);
        key = wait_for_verification_key(&s, &id, n).await;
    }
    let refused = resend(&id).await;
    let retry_after = refused.header("retry-after").map(str::to_owned);
    refused.expect_error(429);
    let secs: u64 = retry_after
        .expect("a Retry-After header")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=3600).contains(&secs), "Retry-After: {secs}");

    resend(&other).await.expect_empty(200);
    api.post_raw(&format!("/trigger/email/verify/{id}/{key}"), &alice, None, "")
        .await
        .expect_empty(200);
    resend(&id).await.expect_error(400);
}

/// Scheduler access keys work like the inbox's (inbox.md §2.5, §3.9), with permissions named
/// after the scheduler's endpoints: a script can schedule without a password or a token.
#[tokio::test]
async fn scheduler_access_keys() {
    let s = Server::start().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let everything = api.get("/permissions", &alice).await.expect_json(200);
    let names: Vec<&str> = everything
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 24, "{names:?}");
    assert_eq!((names[0], names[23]), ("PermitAddItem", "PermitGetPermissions"));

    let created = api
        .post(
            "/access-key",
            &alice,
            &json!({"addAccessKeyName": "remind script",
                    "addAccessKeyPermissions": ["PermitGetSettings", "PermitAddItem", "PermitAddItem"]}),
        )
        .await
        .expect_json(200);
    let secret = created["accessKeyCreatedKey"].as_str().unwrap().to_owned();
    let key_id = created["accessKeyCreatedUUID"].as_str().unwrap().to_owned();
    let listed = api.get("/access-key", &alice).await.expect_json(200);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["name"], "remind script");
    assert_eq!(listed[0]["permissions"], json!(["PermitAddItem", "PermitGetSettings"]));
    api.get(&format!("/access-key/{key_id}"), &alice).await.expect_json(200);

    // the header pair: what the key allows, and nothing else
    let script = Auth::key("alice", &secret.to_uppercase());
    api.get("/account/settings", &script).await.expect_json(200);
    let item = json!({"content": "from a script", "scheduled-day": "2099-01-01"});
    api.post("/scheduler/item", &script, &item).await.expect_json(200);
    api.get("/scheduler/items", &script).await.expect_error(401);
    api.get("/permissions", &script).await.expect_error(401);
    api.get("/account/settings", &Auth::key("bob", &secret))
        .await
        .expect_error(401);
    // a key cannot make a key with more than it has
    api.post(
        "/access-key",
        &script,
        &json!({"addAccessKeyName": "x", "addAccessKeyPermissions": []}),
    )
    .await
    .expect_error(401);
    // names of the inbox's table are not the scheduler's permissions
    api.post(
        "/access-key",
        &alice,
        &json!({"addAccessKeyName": "x", "addAccessKeyPermissions": ["PermitAdd"]}),
    )
    .await
    .expect_error(400);
    // a login with the key's secret gets a token with the key's permissions
    let key_token = api.login_ok("alice", &secret).await;
    assert_eq!(
        api.get("/permissions", &key_token).await.status,
        401,
        "the key has no PermitGetPermissions"
    );
    api.get("/account/settings", &key_token).await.expect_json(200);
    assert_eq!(
        api.get("/scheduler/items", &alice)
            .await
            .expect_json(200)
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // deleting the key ends the header pair and the key's tokens; the password token lives on
    api.delete(&format!("/access-key/{key_id}"), &alice)
        .await
        .expect_empty(200);
    api.get("/account/settings", &script).await.expect_error(401);
    api.get("/account/settings", &key_token).await.expect_error(401);
    api.get("/account/settings", &alice).await.expect_json(200);
    // the inbox's keys are the inbox's: the same account name there has none of these
    s.api.register("alice", "alice-password").await.expect_empty(204);
    let other = api
        .post(
            "/access-key",
            &alice,
            &json!({"addAccessKeyName": "y", "addAccessKeyPermissions": ["PermitGetItems"]}),
        )
        .await
        .expect_json(200);
    let other_secret = other["accessKeyCreatedKey"].as_str().unwrap();
    s.api
        .get("/inbox/size", &Auth::key("alice", other_secret))
        .await
        .expect_error(401);
    // deleting the account deletes its keys
    api.delete("/account", &alice).await.expect_empty(200);
    let again = api.user("alice").await;
    api.get("/account/settings", &Auth::key("alice", other_secret))
        .await
        .expect_error(401);
    assert_eq!(api.get("/access-key", &again).await.expect_json(200), json!([]));
}

/// Verification by a click (issue 11): the e-mail links a page on the scheduler whose button
/// (a `POST`, so link scanners that prefetch cannot confirm) verifies the address; the key
/// in the link is the credential. Bad links get a clear error and change nothing.
#[tokio::test]
async fn an_e_mail_trigger_is_verified_with_the_link_of_its_e_mail() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let id = api.add_email_trigger(&alice, "alice@example.org").await;
    let email = wait_for_emails(&s.outbox(), &format!("Trigger: {id}"), 1)
        .await
        .remove(0);
    let key = verification_key(&email);
    let link = format!("/verify-email/{id}/{key}");
    assert!(
        email.contains(&format!("http://{}{link}", s.settings.web_host)),
        "{email}"
    );
    let verified = || async {
        api.get(&format!("/trigger/info/{id}"), &alice).await.expect_json(200)["info"]["typedTriggerInfoValue"]
            ["emailTriggerInfoVerified"]
            .clone()
    };
    let page = |path: String| {
        api.http
            .get(api.url(&path))
            .header("Accept", "text/html,application/xhtml+xml")
    };

    // the page shows the address and a button; looking at it confirms nothing
    let shown = api.send(page(link.clone())).await;
    assert_eq!(shown.status, 200);
    assert!(shown.header("content-type").unwrap().starts_with("text/html"));
    let csp = shown.header("content-security-policy").unwrap().to_owned();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(shown.header("x-frame-options"), Some("DENY"));
    assert_eq!(shown.header("x-content-type-options"), Some("nosniff"));
    let text = shown.text();
    assert!(
        text.contains("alice@example.org") && text.contains("<form method=\"post\">"),
        "{text}"
    );
    assert_eq!(verified().await, false);

    // bad links: clear errors, nothing changes
    let wrong = format!("/verify-email/{id}/{}", "0".repeat(32));
    api.send(api.http.post(api.url(&wrong))).await.expect_error(400);
    api.send(api.http.post(api.url(&format!("/verify-email/{id}/nothex"))))
        .await
        .expect_error(400);
    api.send(api.http.post(api.url(&format!("/verify-email/not-a-uuid/{key}"))))
        .await
        .expect_error(400);
    let unknown = format!("/verify-email/{}/{key}", uuid::Uuid::new_v4());
    api.send(api.http.post(api.url(&unknown))).await.expect_error(404);
    let bad_page = api.send(page(wrong.clone()).header("X-Test", "1")).await;
    assert_eq!(bad_page.status, 400);
    assert!(bad_page.text().contains("This link does not work"));
    assert_eq!(verified().await, false);

    // the button: a POST of the same link, without any token
    let done = api
        .send(api.http.post(api.url(&link)).header("Accept", "text/html"))
        .await;
    assert_eq!(done.status, 200);
    assert!(done.text().contains("Address confirmed"));
    assert_eq!(verified().await, true);
    // again: still fine
    api.send(api.http.post(api.url(&link))).await.expect_empty(200);
    assert!(api.send(page(link)).await.text().contains("Already confirmed"));
    // an address's characters are shown as text, not markup
    let odd = api.add_email_trigger(&alice, "o'neil&co@example.org").await;
    let email = wait_for_emails(&s.outbox(), &format!("Trigger: {odd}"), 1)
        .await
        .remove(0);
    let link = format!("/verify-email/{odd}/{}", verification_key(&email));
    let text = api.send(page(link)).await.text();
    assert!(text.contains("o&#39;neil&amp;co@example.org"), "{text}");
}

/// The `Retry-After` seconds of a 429 (asserting the JSON error).
fn refused_for(r: common::Resp) -> u64 {
    let wait = r
        .headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .expect("a Retry-After in seconds");
    r.expect_error(429);
    wait
}

/// Issue 18: verification e-mails cannot be used to spam an address. At most 5 go to one
/// address a day, whatever the triggers and accounts (also through resends); an account has
/// at most 5 unverified e-mail triggers at once and sends at most 10 verification e-mails a
/// day. Refusals are 429 with `Retry-After`, and send nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_emails_are_limited_per_address_and_per_account() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let alice = api.user("alice").await;
    let bob = api.user("bob").await;
    let target = "target@example.org";
    let mut first = None;
    for _ in 0..5 {
        first.get_or_insert(api.add_email_trigger(&alice, target).await);
    }
    let wait = refused_for(
        api.post("/trigger/email", &alice, &json!({"addEmailTrigger": target}))
            .await,
    );
    assert!((3500..=86_400).contains(&wait), "{wait}");
    // another account, another spelling: the same address
    refused_for(
        api.post(
            "/trigger/email",
            &bob,
            &json!({"addEmailTrigger": "TARGET@example.org"}),
        )
        .await,
    );
    let first = first.unwrap();
    refused_for(
        api.post_raw(&format!("/trigger/email/resend/{first}"), &alice, None, "")
            .await,
    );
    wait_for_emails(&s.outbox(), "To: target@example.org", 5).await;
    s.settle(&[Worker::VerificationEmailConverter, Worker::Emailer]).await;
    let sent = common::scheduler::read_outbox(&s.outbox())
        .iter()
        .filter(|(_, t)| t.to_lowercase().contains("to: target@example.org"))
        .count();
    assert_eq!(sent, 5, "refusals send nothing");
    assert_eq!(api.triggers(&alice).await.len(), 5);
    assert!(api.triggers(&bob).await.is_empty());

    // unverified triggers per account: 5 at once (alice has hers)
    refused_for(
        api.post("/trigger/email", &alice, &json!({"addEmailTrigger": "new@example.org"}))
            .await,
    );
    let carol = api.user("carol").await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(api.add_email_trigger(&carol, &format!("carol{n}@example.org")).await);
    }
    refused_for(
        api.post(
            "/trigger/email",
            &carol,
            &json!({"addEmailTrigger": "carol5@example.org"}),
        )
        .await,
    );
    api.delete(&format!("/trigger/delete/{}", ids[0]), &carol)
        .await
        .expect_empty(200);
    api.add_email_trigger(&carol, "carol5@example.org").await;
    // verification e-mails per account: 10 a day (6 so far, then 4 more)
    for id in &ids[1..5] {
        api.delete(&format!("/trigger/delete/{id}"), &carol)
            .await
            .expect_empty(200);
    }
    for n in 6..10 {
        api.add_email_trigger(&carol, &format!("carol{n}@example.org")).await;
    }
    let r = api
        .post(
            "/trigger/email",
            &carol,
            &json!({"addEmailTrigger": "carol10@example.org"}),
        )
        .await;
    assert!(r.text().contains("per account"), "{}", r.text());
    refused_for(r);
}

/// Issue 29 point 5: sub-addresses reach one mailbox. `target+1@…` … `target+15@…` through
/// three accounts (at most 5 unverified triggers each): 5 verification e-mails reach the
/// mailbox in a day, the other 10 are refused (429) and send nothing; for a domain known to
/// ignore dots, dotted spellings count as one mailbox too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_emails_are_limited_per_mailbox() {
    let s = Server::start_scheduler().await;
    let api = &s.scheduler;
    let mut accepted = 0;
    for a in 0..3 {
        let auth = api.user(&format!("user{a}")).await;
        for n in 1..=5 {
            let address = format!("target+{}@example.org", a * 5 + n);
            let r = api
                .post("/trigger/email", &auth, &json!({"addEmailTrigger": address}))
                .await;
            if r.status == 200 {
                accepted += 1;
            } else {
                refused_for(r);
            }
        }
    }
    assert_eq!(accepted, 5, "sub-addresses counted apart");
    let plain = api.user("plain").await;
    refused_for(
        api.post(
            "/trigger/email",
            &plain,
            &json!({"addEmailTrigger": "target@example.org"}),
        )
        .await,
    );
    wait_for_emails(&s.outbox(), "To: target+", 5).await;
    s.settle(&[Worker::VerificationEmailConverter, Worker::Emailer]).await;
    let sent = common::scheduler::read_outbox(&s.outbox())
        .iter()
        .filter(|(_, t)| t.to_lowercase().contains("to: target"))
        .count();
    assert_eq!(sent, 5, "refusals send nothing");

    let dotted = api.user("dotted").await;
    for local in ["ann", "a.nn", "an.n", "a.n.n", "ann+5"] {
        api.add_email_trigger(&plain, &format!("{local}@gmail.com")).await;
    }
    refused_for(
        api.post(
            "/trigger/email",
            &dotted,
            &json!({"addEmailTrigger": "A.N.N+x@googlemail.com"}),
        )
        .await,
    );
}
