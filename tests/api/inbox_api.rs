//! The inbox service through real HTTP against the real server (inbox.md): every endpoint's
//! success and error paths, the order of checks, CORS, limits, payments and sync.

use crate::common;

use common::{b64, text_item, token_of, Api, Auth, Method, Server, ADMIN_ONLY_PERMISSIONS, USER_PERMISSIONS};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashSet};

fn is_canonical_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// RFC 3339 UTC output form: `YYYY-MM-DDTHH:MM:SS[.F]Z`, no trailing zeros in the fraction.
fn is_utc_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 || !s.ends_with('Z') || b[10] != b'T' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let base = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let rest = &s[19..s.len() - 1];
    let fraction_ok = match rest.strip_prefix('.') {
        None => rest.is_empty(),
        Some(f) => !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) && !f.ends_with('0'),
    };
    base && fraction_ok
}

fn instant(s: &str) -> time::OffsetDateTime {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}"))
}

fn keys_of(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().expect("string").to_owned())
        .collect()
}

fn user_permissions() -> Vec<String> {
    USER_PERMISSIONS.iter().map(|s| s.to_string()).collect()
}

async fn account(api: &Api, auth: &Auth) -> Value {
    api.get("/account", auth).await.expect_json(200)
}

// ---------------------------------------------------------------------------------------
// GET /, /pricing

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_page_is_html_naming_every_endpoint() {
    let s = Server::start().await;
    let r = s.get("/", &Auth::None).await.expect(200);
    assert_eq!(r.media_type(), "text/html");
    let text = r.page_text();
    for endpoint in [
        "GET /",
        "POST /register",
        "POST /login",
        "GET /pricing",
        "GET /permissions",
        "GET /account",
        "POST /account",
        "DELETE /account",
        "POST /access-key",
        "GET /access-key",
        "GET /access-key/:uuid",
        "DELETE /access-key/:uuid",
        "POST /inbox/item",
        "GET /inbox/item/:uuid",
        "DELETE /inbox/item/:uuid",
        "GET /inbox/items",
        "GET /inbox/uuids",
        "GET /inbox/show-item",
        "GET /inbox/size",
        "POST /inbox/sync",
        "GET /admin/stats",
        "GET /admin/accounts",
        "DELETE /admin/account/:uuid",
    ] {
        assert!(text.contains(endpoint), "GET / does not name {endpoint}");
    }
    // HEAD answers like GET, without a body
    let head = s.send(s.request(Method::HEAD, "/", &Auth::None)).await.expect(200);
    assert!(head.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pricing_is_null_in_free_mode() {
    let s = Server::start().await;
    let v = s.get("/pricing", &Auth::None).await.expect_json(200);
    assert_eq!(v, Value::Null);
    let alice = s.user("alice").await;
    assert_eq!(
        account(&s, &alice).await["status"],
        json!({"status": "no-payment-necessary"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pricing_shows_the_plan_in_paid_mode() {
    let s = Server::start_paid(5).await;
    let v = s.get("/pricing", &Auth::None).await.expect_json(200);
    assert_eq!(
        v,
        json!({"plan": "plan_test", "price": 1200, "currency": "chf", "trial-period": null,
               "publishable-key": "pk_test_example", "max-items-free": 5})
    );
    let s = Server::start_with(|st| {
        st.payment_plan = Some(pigeonhole::config::PaymentPlan {
            trial_days: Some(14),
            ..common::test_plan()
        });
        st.max_items_free = 3;
    })
    .await;
    let v = s.get("/pricing", &Auth::None).await.expect_json(200);
    assert_eq!(v["trial-period"], json!(14));
    assert_eq!(v["max-items-free"], json!(3));
}

// ---------------------------------------------------------------------------------------
// POST /register

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_creates_accounts_and_refuses_taken_names() {
    let s = Server::start().await;
    s.register("alice", "correct horse").await.expect_empty(204);
    s.register("alice", "other").await.expect_error(409);
    s.register("alice", "correct horse").await.expect_error(409);
    // usernames are case-sensitive
    s.register("Alice", "x").await.expect_empty(204);
    // Latin-1 letters and numbers, '-' and '_' are fine; an empty password is not, and
    // is refused before anything is stored
    s.register("ÀÖøÿ½", "").await.expect_error(400);
    s.login("ÀÖøÿ½", "").await.expect_error(401);
    s.register("ÀÖøÿ½", " ").await.expect_empty(204);
    s.register("a-_", "p").await.expect_empty(204);
    s.login_ok("ÀÖøÿ½", " ").await;
    // at most 64 characters (Latin-1 letters count as one each), on both services
    for (api, created) in [(&s.api, 204), (&s.scheduler, 200)] {
        api.register(&"é".repeat(64), "pw").await.expect_empty(created);
        api.login_ok(&"é".repeat(64), "pw").await;
        api.register(&"é".repeat(65), "pw").await.expect_error(400);
        api.register(&"x".repeat(1 << 20), "pw").await.expect_error(400);
        api.login(&"é".repeat(65), "pw").await.expect_error(401);
        api.register("empty-pass", "").await.expect_error(400);
        api.login("empty-pass", "").await.expect_error(401);
    }
    s.login_ok("alice", "correct horse").await;
    // the whole password counts
    s.register("nul-pass", "a\u{0}b").await.expect_empty(204);
    s.login("nul-pass", "a").await.expect_error(401);
    s.login_ok("nul-pass", "a\u{0}b").await;
    // extra keys are ignored
    s.post(
        "/register",
        &Auth::None,
        &json!({"name": "carol", "password": "p", "extra": 1}),
    )
    .await
    .expect_empty(204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_refuses_invalid_usernames_and_bodies() {
    let s = Server::start().await;
    for bad in [
        "",
        "ab",
        "a b",
        "a.b",
        "al@ce",
        "al+ce",
        "ab×",
        "ab÷",
        "abĀ",
        "ab\u{1}",
        "日本語",
    ] {
        s.register(bad, "p").await.expect_error(400);
    }
    for body in [
        json!({"password": "p"}),
        json!({"name": "alice"}),
        json!({"name": null, "password": "p"}),
        json!({"name": "alice", "password": null}),
        json!({"name": 5, "password": "p"}),
        json!({"name": "alice", "password": 5}),
        json!({"username": "alice", "password": "p"}),
    ] {
        s.post("/register", &Auth::None, &body).await.expect_error(400);
    }
    for raw in [
        "",
        "[]",
        "\"alice\"",
        "1",
        "null",
        "{",
        "{\"name\":\"alice\",\"password\":\"p\"} x",
    ] {
        s.post_raw("/register", &Auth::None, Some("application/json"), raw)
            .await
            .expect_error(400);
    }
    // none of these created the account
    s.register("alice", "p").await.expect_empty(204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_requires_a_json_content_type() {
    let s = Server::start().await;
    let body = r#"{"name":"alice","password":"p"}"#;
    s.post_raw("/register", &Auth::None, Some("text/plain"), body)
        .await
        .expect_error(415);
    s.post_raw("/register", &Auth::None, None, body).await.expect_error(415);
    s.post_raw("/register", &Auth::None, Some("application/jsonx"), body)
        .await
        .expect_error(415);
    // nothing was created by those
    s.login("alice", "p").await.expect_error(401);
    // parameters allowed, media type case-insensitive
    s.post_raw("/register", &Auth::None, Some("Application/JSON; charset=utf-8"), body)
        .await
        .expect_empty(204);
    s.login_ok("alice", "p").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_answers_403_when_closed() {
    let s = Server::start_with(|st| st.registration_open = false).await;
    s.register("alice", "p").await.expect_error(403);
    // the body is not looked at
    s.post_raw("/register", &Auth::None, Some("application/json"), "not json")
        .await
        .expect_error(403);
    s.post_raw("/register", &Auth::None, Some("text/plain"), "x")
        .await
        .expect_error(403);
    s.login("alice", "p").await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_registrations_of_one_name_yield_one_account() {
    let s = Server::start().await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let api = s.api.clone();
        tasks.push(tokio::spawn(async move {
            api.register("racer", &format!("pw{i}")).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 204).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 7, "{statuses:?}");
}

// ---------------------------------------------------------------------------------------
// POST /login and tokens

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_sets_exactly_one_token_cookie() {
    let s = Server::start().await;
    s.register("alice", "correct horse").await.expect_empty(204);
    let r = s.login("alice", "correct horse").await.expect_empty(204);
    let cookies: Vec<_> = r.headers.get_all("set-cookie").iter().collect();
    assert_eq!(cookies.len(), 1);
    let token = token_of(&r);
    assert_eq!(
        cookies[0].to_str().unwrap(),
        format!("JWT-Cookie={token}; Path=/; HttpOnly; Secure; SameSite=Lax")
    );
    // a compact JWS signed with HS512
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    use base64::Engine;
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[0])
        .expect("JWT header is base64url");
    let header: Value = serde_json::from_slice(&header).expect("JWT header is JSON");
    assert_eq!(header["alg"], "HS512");
    // the token works as a bearer token
    let auth = Auth::Bearer(token.clone());
    s.get("/inbox/size", &auth).await.expect_json(200);
    // "bearer" is case-insensitive
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Authorization", format!("bearer {token}")),
    )
    .await
    .expect_json(200);
    // last-login is set
    let info = account(&s, &auth).await;
    assert!(is_utc_timestamp(info["last-login"].as_str().expect("last-login set")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_and_cookies_are_refused() {
    let s = Server::start().await;
    let Auth::Bearer(token) = s.user("alice").await else {
        unreachable!()
    };
    // no credentials
    s.get("/inbox/size", &Auth::None).await.expect_error(401);
    // the cookie is not a credential
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Cookie", format!("JWT-Cookie={token}")),
    )
    .await
    .expect_error(401);
    // a tampered signature
    let mut tampered = token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    s.get("/inbox/size", &Auth::Bearer(tampered)).await.expect_error(401);
    // an unsigned token with the same claims
    let parts: Vec<&str> = token.split('.').collect();
    let none_header = b64(r#"{"alg":"none","typ":"JWT"}"#)
        .trim_end_matches('=')
        .replace('+', "-")
        .replace('/', "_");
    for forged in [
        format!("{none_header}.{}.", parts[1]),
        format!("{none_header}.{}.{}", parts[1], parts[2]),
    ] {
        s.get("/inbox/size", &Auth::Bearer(forged)).await.expect_error(401);
    }
    // garbage, other schemes
    s.get("/inbox/size", &Auth::Bearer("garbage".into()))
        .await
        .expect_error(401);
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Authorization", format!("Basic {token}")),
    )
    .await
    .expect_error(401);
    // a token of another server (another signing key)
    let other = Server::start().await;
    let foreign = other.user("alice").await;
    s.get("/inbox/size", &foreign).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_failures_look_the_same() {
    let s = Server::start().await;
    s.register("alice", "correct horse").await.expect_empty(204);
    let wrong = s.login("alice", "wrong").await;
    assert!(wrong.headers.get("set-cookie").is_none());
    let wrong_body = wrong.body.clone();
    wrong.expect_error(401);
    let unknown = s.login("nobody", "wrong").await;
    assert_eq!(
        unknown.body, wrong_body,
        "unknown user and wrong password must give the same body"
    );
    unknown.expect_error(401);
    // bad bodies are 400
    for body in [
        json!({"username": "alice"}),
        json!({"password": "correct horse"}),
        json!({"username": "a b", "password": "x"}),
        json!({"username": "al", "password": "x"}),
        json!({"username": "alice", "password": 1}),
        json!({"name": "alice", "password": "correct horse"}),
    ] {
        s.post("/login", &Auth::None, &body).await.expect_error(400);
    }
    s.post_raw("/login", &Auth::None, Some("application/json"), "[\"alice\"]")
        .await
        .expect_error(400);
    s.post_raw(
        "/login",
        &Auth::None,
        Some("text/plain"),
        r#"{"username":"alice","password":"correct horse"}"#,
    )
    .await
    .expect_error(415);
    // the account password is not case-insensitive
    s.login("alice", "Correct horse").await.expect_error(401);
    s.login_ok("alice", "correct horse").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_is_rate_limited_per_username() {
    let s = Server::start().await;
    s.register("alice", "pw").await.expect_empty(204);
    s.register("bob", "pw").await.expect_empty(204);
    // body errors are not failures
    for _ in 0..12 {
        s.post("/login", &Auth::None, &json!({"username": "alice"}))
            .await
            .expect_error(400);
    }
    for _ in 0..10 {
        s.login("alice", "wrong").await.expect_error(401);
    }
    // now even the right password is refused, with Retry-After
    for password in ["pw", "wrong"] {
        let r = s.login("alice", password).await;
        let retry: u64 = r
            .header("retry-after")
            .expect("429 carries Retry-After")
            .parse()
            .expect("Retry-After is whole seconds");
        assert!((1..=600).contains(&retry), "Retry-After {retry}");
        assert!(r.headers.get("set-cookie").is_none());
        r.expect_error(429);
    }
    // other usernames are not affected
    s.login_ok("bob", "pw").await;
    // an existing token and header authentication keep working
    let bob = s.login_ok("bob", "pw").await;
    let (secret, _) = s.add_key(&bob, "k", &["PermitSize"]).await;
    s.get("/inbox/size", &Auth::key("bob", &secret)).await.expect_json(200);
}

// ---------------------------------------------------------------------------------------
// GET /permissions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_of_users_and_admins() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let v = s.get("/permissions", &alice).await.expect_json(200);
    assert_eq!(strings(&v), user_permissions());
    let admin = s.user("admin").await;
    let v = s.get("/permissions", &admin).await.expect_json(200);
    let mut all = user_permissions();
    all.extend(ADMIN_ONLY_PERMISSIONS.iter().map(|p| p.to_string()));
    assert_eq!(strings(&v), all);
    assert_eq!(all.len(), 19);
    s.get("/permissions", &Auth::None).await.expect_error(401);
}

// ---------------------------------------------------------------------------------------
// /account

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn account_info_has_exactly_the_documented_keys() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let info = account(&s, &alice).await;
    assert_eq!(
        keys_of(&info),
        set(&["uuid", "username", "created", "last-login", "admin", "count", "status"])
    );
    assert!(is_canonical_uuid(info["uuid"].as_str().unwrap()), "{info}");
    assert_eq!(info["username"], "alice");
    assert!(is_utc_timestamp(info["created"].as_str().unwrap()), "{info}");
    assert!(is_utc_timestamp(info["last-login"].as_str().unwrap()), "{info}");
    assert_eq!(info["admin"], false);
    assert_eq!(info["count"], 0);
    assert_eq!(info["status"], json!({"status": "no-payment-necessary"}));
    s.add_text(&alice, "one").await;
    s.add_text(&alice, "two").await;
    let again = account(&s, &alice).await;
    assert_eq!(again["count"], 2);
    assert_eq!(again["uuid"], info["uuid"]);
    assert_eq!(again["created"], info["created"]);
    let admin = s.user("admin").await;
    assert_eq!(account(&s, &admin).await["admin"], true);
    s.get("/account", &Auth::None).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_passphrase_revokes_earlier_tokens() {
    let s = Server::start().await;
    s.register("alice", "correct horse").await.expect_empty(204);
    let alice = s.login_ok("alice", "correct horse").await;
    let second = s.login_ok("alice", "correct horse").await;
    let (secret, _) = s.add_key(&alice, "k", &["PermitSize", "PermitGetAccountInfo"]).await;
    let key_token = s.login_ok("alice", &secret).await;
    let change = |old: &str, new: &str| json!({"old-passphrase": old, "new-passphrase": new});

    // an empty new passphrase: 400, nothing changes (on the scheduler's path too)
    s.post("/account", &alice, &change("correct horse", ""))
        .await
        .expect_error(400);
    s.login("alice", "").await.expect_error(401);
    s.get("/inbox/size", &alice).await.expect_json(200);
    let sched = s.scheduler.user("alice").await;
    s.scheduler
        .post("/", &sched, &change("alice-password", ""))
        .await
        .expect_error(400);
    s.scheduler.login_ok("alice", "alice-password").await;
    // wrong old passphrase: 403, nothing changes
    s.post("/account", &alice, &change("wrong", "x"))
        .await
        .expect_error(403);
    // an access-key secret is not the passphrase either
    s.post("/account", &alice, &change(&secret, "x"))
        .await
        .expect_error(403);
    s.get("/inbox/size", &alice).await.expect_json(200);
    s.login_ok("alice", "correct horse").await;
    // bad bodies
    s.post("/account", &alice, &json!({"old-passphrase": "correct horse"}))
        .await
        .expect_error(400);
    s.post_raw(
        "/account",
        &alice,
        Some("text/plain"),
        change("correct horse", "x").to_string(),
    )
    .await
    .expect_error(415);
    // unauthenticated: 401 even with a right body
    s.post("/account", &Auth::None, &change("correct horse", "x"))
        .await
        .expect_error(401);

    s.post("/account", &alice, &change("correct horse", "battery staple"))
        .await
        .expect_empty(204);
    // every earlier token is revoked, including the one used and key-derived ones
    s.get("/inbox/size", &alice).await.expect_error(401);
    s.get("/inbox/size", &second).await.expect_error(401);
    s.get("/inbox/size", &key_token).await.expect_error(401);
    s.post("/account", &alice, &change("battery staple", "again"))
        .await
        .expect_error(401);
    // the old password no longer logs in, the new one does
    s.login("alice", "correct horse").await.expect_error(401);
    let fresh = s.login_ok("alice", "battery staple").await;
    s.get("/inbox/size", &fresh).await.expect_json(200);
    // access keys stay valid
    s.get("/inbox/size", &Auth::key("alice", &secret))
        .await
        .expect_json(200);
    let key_again = s.login_ok("alice", &secret).await;
    s.get("/inbox/size", &key_again).await.expect_json(200);
    // the originals' path for the same change
    s.post("/account/change-passphrase", &fresh, &change("wrong", "x"))
        .await
        .expect_error(403);
    s.post("/account/change-passphrase", &fresh, &change("battery staple", "third"))
        .await
        .expect_empty(204);
    s.get("/inbox/size", &fresh).await.expect_error(401);
    s.login_ok("alice", "third").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_account_revokes_everything() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let item = s.add_text(&alice, "mine").await;
    let bob_item = s.add_text(&bob, "bob's").await;
    let (secret, _) = s.add_key(&alice, "k", &["PermitSize"]).await;
    let key_token = s.login_ok("alice", &secret).await;
    let old_uuid = account(&s, &alice).await["uuid"].clone();

    s.delete("/account", &Auth::None).await.expect_error(401);
    s.delete("/account", &alice).await.expect_empty(204);
    s.delete("/account", &alice).await.expect_error(401);
    s.get("/account", &alice).await.expect_error(401);
    s.get("/inbox/size", &key_token).await.expect_error(401);
    s.get("/inbox/size", &Auth::key("alice", &secret))
        .await
        .expect_error(401);
    s.login("alice", "alice-password").await.expect_error(401);
    s.login("alice", &secret).await.expect_error(401);

    // the name is free again; the new account is a different one
    let again = s.user("alice").await;
    assert_ne!(account(&s, &again).await["uuid"], old_uuid);
    s.get("/inbox/size", &alice).await.expect_error(401);
    assert_eq!(s.size(&again).await, 0);
    s.get(&format!("/inbox/item/{item}"), &again).await.expect_error(404);
    // bob is untouched
    assert_eq!(s.uuids(&bob).await, vec![bob_item]);
}

// ---------------------------------------------------------------------------------------
// Access keys

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_keys_are_created_listed_and_read() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    assert_eq!(s.get("/access-key", &alice).await.expect_json(200), json!([]));
    let created = s
        .post(
            "/access-key",
            &alice,
            &json!({"addAccessKeyName": "phone",
                    "addAccessKeyPermissions": ["PermitSize", "PermitAdd", "PermitSize"]}),
        )
        .await
        .expect_json(200);
    assert_eq!(
        keys_of(&created),
        set(&[
            "accessKeyCreatedKey",
            "accessKeyCreatedCreatedTimestamp",
            "accessKeyCreatedUUID"
        ])
    );
    let secret = created["accessKeyCreatedKey"].as_str().unwrap();
    assert_eq!(secret.len(), 32);
    assert!(
        secret.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{secret}"
    );
    let key_uuid = created["accessKeyCreatedUUID"].as_str().unwrap();
    assert!(is_canonical_uuid(key_uuid));
    let stamp = created["accessKeyCreatedCreatedTimestamp"].as_str().unwrap();
    assert!(is_utc_timestamp(stamp));

    // an empty name and an empty permission set are fine
    let (_, second) = s.add_key(&alice, "", &[]).await;

    let list = s.get("/access-key", &alice).await.expect_json(200);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2);
    let first = &list[0];
    assert_eq!(keys_of(first), set(&["uuid", "name", "created", "permissions"]));
    assert_eq!(first["uuid"], key_uuid);
    assert_eq!(first["name"], "phone");
    assert_eq!(first["created"], stamp);
    // table order, no duplicates
    assert_eq!(first["permissions"], json!(["PermitAdd", "PermitSize"]));
    assert_eq!(list[1]["uuid"], second.as_str());
    assert_eq!(list[1]["permissions"], json!([]));
    assert!(!list.iter().any(|k| k.to_string().contains(secret)));

    let one = s.get(&format!("/access-key/{key_uuid}"), &alice).await.expect_json(200);
    assert_eq!(&one, first);
    let upper = s
        .get(&format!("/access-key/{}", key_uuid.to_uppercase()), &alice)
        .await
        .expect_json(200);
    assert_eq!(&upper, first);
    s.get("/access-key/00000000-0000-0000-0000-000000000000", &alice)
        .await
        .expect_error(404);
    s.get("/access-key/not-a-uuid", &alice).await.expect_error(400);
    s.delete("/access-key/not-a-uuid", &alice).await.expect_error(400);
    s.get("/access-key", &Auth::None).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_key_creation_errors() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let add = |perms: Value| json!({"addAccessKeyName": "k", "addAccessKeyPermissions": perms});
    // permissions the caller lacks
    s.post("/access-key", &alice, &add(json!(["PermitAdminGetStats"])))
        .await
        .expect_error(401);
    s.post(
        "/access-key",
        &alice,
        &add(json!(["PermitAdd", "PermitAdminDeleteAccount"])),
    )
    .await
    .expect_error(401);
    // unknown permission names
    for bad in [
        json!(["PermitFly"]),
        json!(["permitadd"]),
        json!([1]),
        json!("PermitAdd"),
    ] {
        s.post("/access-key", &alice, &add(bad)).await.expect_error(400);
    }
    s.post("/access-key", &alice, &json!({"addAccessKeyName": "k"}))
        .await
        .expect_error(400);
    s.post("/access-key", &alice, &json!({"addAccessKeyPermissions": []}))
        .await
        .expect_error(400);
    s.post_raw("/access-key", &alice, Some("text/plain"), add(json!([])).to_string())
        .await
        .expect_error(415);
    s.post("/access-key", &Auth::None, &add(json!([])))
        .await
        .expect_error(401);
    // nothing was created
    assert_eq!(s.get("/access-key", &alice).await.expect_json(200), json!([]));

    // a key-derived token may create keys only within its own permissions
    let (secret, _) = s
        .add_key(
            &alice,
            "limited",
            &[
                "PermitAdd",
                "PermitSize",
                "PermitPostAddAccessKey",
                "PermitGetPermissions",
            ],
        )
        .await;
    let limited = s.login_ok("alice", &secret).await;
    assert_eq!(
        s.get("/permissions", &limited).await.expect_json(200),
        json!([
            "PermitAdd",
            "PermitSize",
            "PermitPostAddAccessKey",
            "PermitGetPermissions"
        ])
    );
    s.post("/access-key", &limited, &add(json!(["PermitGetItems"])))
        .await
        .expect_error(401);
    let (sub, _) = s.add_key(&limited, "sub", &["PermitSize"]).await;
    s.get("/inbox/size", &Auth::key("alice", &sub)).await.expect_json(200);
    let keys = s.get("/access-key", &alice).await.expect_json(200);
    assert_eq!(keys.as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_keys_of_other_accounts_do_not_exist() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let (secret, key) = s.add_key(&alice, "k", &["PermitSize", "PermitAdd"]).await;
    s.get(&format!("/access-key/{key}"), &bob).await.expect_error(404);
    s.delete(&format!("/access-key/{key}"), &bob).await.expect_empty(200);
    assert_eq!(s.get("/access-key", &bob).await.expect_json(200), json!([]));
    // still there for alice, still working
    s.get(&format!("/access-key/{key}"), &alice).await.expect_json(200);
    s.get("/inbox/size", &Auth::key("alice", &secret))
        .await
        .expect_json(200);
    // an access key only logs in with its owner's username
    s.login("bob", &secret).await.expect_error(401);
    s.get("/inbox/size", &Auth::key("bob", &secret)).await.expect_error(401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_key_login_and_headers() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let (secret, key) = s
        .add_key(&alice, "script", &["PermitAdd", "PermitSize", "PermitGetPermissions"])
        .await;

    // login with the secret: a token with exactly the key's permissions
    let key_token = s.login_ok("alice", &secret).await;
    assert_eq!(
        s.get("/permissions", &key_token).await.expect_json(200),
        json!(["PermitAdd", "PermitSize", "PermitGetPermissions"])
    );
    s.add_text(&key_token, "via key token").await;
    s.get("/inbox/items", &key_token).await.expect_error(401);
    s.get("/account", &key_token).await.expect_error(401);
    // upper-case hex works too
    s.login_ok("alice", &secret.to_uppercase()).await;

    // the header pair
    let headers = Auth::key("alice", &secret);
    s.add_text(&headers, "via headers").await;
    assert_eq!(s.size(&headers).await, 2);
    s.get("/inbox/items", &headers).await.expect_error(401);
    assert_eq!(
        s.get("/permissions", &headers).await.expect_json(200),
        json!(["PermitAdd", "PermitSize", "PermitGetPermissions"])
    );
    s.get("/inbox/size", &Auth::key("alice", &secret.to_uppercase()))
        .await
        .expect_json(200);
    // wrong pairs
    s.get("/inbox/size", &Auth::key("alice", "alice-password"))
        .await
        .expect_error(401);
    s.get("/inbox/size", &Auth::key("alice", &"0".repeat(32)))
        .await
        .expect_error(401);
    s.get("/inbox/size", &Auth::key("nobody", &secret))
        .await
        .expect_error(401);
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Username", "alice"),
    )
    .await
    .expect_error(401);
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Access-Key", &secret),
    )
    .await
    .expect_error(401);
    // an Authorization header alone decides
    s.send(
        s.request(Method::GET, "/inbox/size", &headers)
            .header("Authorization", "Bearer garbage"),
    )
    .await
    .expect_error(401);

    // deleting the key revokes its token, its secret and its headers; others are unaffected
    let (other_secret, _) = s.add_key(&alice, "other", &["PermitSize"]).await;
    let other_token = s.login_ok("alice", &other_secret).await;
    s.delete(&format!("/access-key/{key}"), &alice).await.expect_empty(200);
    s.delete(&format!("/access-key/{key}"), &alice).await.expect_empty(200);
    s.get(&format!("/access-key/{key}"), &alice).await.expect_error(404);
    s.get("/inbox/size", &key_token).await.expect_error(401);
    s.get("/inbox/size", &headers).await.expect_error(401);
    s.login("alice", &secret).await.expect_error(401);
    s.get("/inbox/size", &other_token).await.expect_json(200);
    s.get("/inbox/size", &Auth::key("alice", &other_secret))
        .await
        .expect_json(200);
    s.get("/inbox/size", &alice).await.expect_json(200);
}

// ---------------------------------------------------------------------------------------
// Items

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_get_items() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let id = s
        .post(
            "/inbox/item",
            &alice,
            &json!({"type": "text", "data": "SGVsbG8gd29ybGQ="}),
        )
        .await
        .expect_json(200);
    let id = id.as_str().expect("the answer is a JSON string");
    assert!(is_canonical_uuid(id), "{id}");
    assert_eq!(&id[14..15], "4", "server UUIDs are version 4: {id}");

    let item = s.get(&format!("/inbox/item/{id}"), &alice).await.expect_json(200);
    assert_eq!(keys_of(&item), set(&["id", "contents", "created"]));
    assert_eq!(item["id"], id);
    assert_eq!(item["contents"], json!({"type": "text", "data": "SGVsbG8gd29ybGQ="}));
    assert!(is_utc_timestamp(item["created"].as_str().unwrap()), "{item}");
    // either case in the path
    let upper = s
        .get(&format!("/inbox/item/{}", id.to_uppercase()), &alice)
        .await
        .expect_json(200);
    assert_eq!(upper, item);

    // bytes are kept exactly, images and non-UTF-8 text included; extra keys are ignored
    let bytes: Vec<u8> = (0..=255u8).collect();
    for kind in ["image/png", "image/jpeg", "text"] {
        let body = json!({"type": kind, "data": b64(&bytes), "id": "x", "created": "nonsense"});
        let id = s.post("/inbox/item", &alice, &body).await.expect_json(200);
        let got = s
            .get(&format!("/inbox/item/{}", id.as_str().unwrap()), &alice)
            .await
            .expect_json(200);
        assert_eq!(got["contents"], json!({"type": kind, "data": b64(&bytes)}));
    }
    // empty data
    let id = s
        .post("/inbox/item", &alice, &json!({"type": "text", "data": ""}))
        .await
        .expect_json(200);
    let got = s
        .get(&format!("/inbox/item/{}", id.as_str().unwrap()), &alice)
        .await
        .expect_json(200);
    assert_eq!(got["contents"]["data"], "");
    // unused low bits of the last character are ignored; the output is canonical
    let id = s
        .post("/inbox/item", &alice, &json!({"type": "text", "data": "aGl="}))
        .await
        .expect_json(200);
    let got = s
        .get(&format!("/inbox/item/{}", id.as_str().unwrap()), &alice)
        .await
        .expect_json(200);
    assert_eq!(got["contents"]["data"], "aGk=");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_item_refuses_bad_contents() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    for body in [
        json!({"type": "text", "data": "SGVsbG8"}),
        json!({"type": "text", "data": "SGVs bG8="}),
        json!({"type": "text", "data": "SGVsbG8=\n"}),
        json!({"type": "text", "data": "SGVsbG8-"}),
        json!({"type": "text", "data": "SGVsbG_="}),
        json!({"type": "text", "data": "aGk=aGk="}),
        json!({"type": "text", "data": "===="}),
        json!({"type": "Text", "data": "aGk="}),
        json!({"type": "image/gif", "data": "aGk="}),
        json!({"type": "image/PNG", "data": "aGk="}),
        json!({"type": "text"}),
        json!({"data": "aGk="}),
        json!({"type": "text", "data": null}),
        json!({"type": null, "data": "aGk="}),
        json!({"type": "text", "data": 5}),
        json!({"contents": {"type": "text", "data": "aGk="}}),
    ] {
        s.post("/inbox/item", &alice, &body).await.expect_error(400);
    }
    for raw in [
        "",
        "   ",
        "[]",
        "\"text\"",
        "42",
        "null",
        "{\"type\":",
        "{\"type\":\"text\",\"data\":\"aGk=\"}{}",
    ] {
        s.post_raw("/inbox/item", &alice, Some("application/json"), raw)
            .await
            .expect_error(400);
    }
    s.post_raw("/inbox/item", &alice, Some("text/plain"), text_item("hi").to_string())
        .await
        .expect_error(415);
    s.post_raw("/inbox/item", &alice, None, text_item("hi").to_string())
        .await
        .expect_error(415);
    // surrounding whitespace is fine
    s.post_raw(
        "/inbox/item",
        &alice,
        Some("application/json"),
        format!(" \n{}\n ", text_item("hi")),
    )
    .await
    .expect_json(200);
    assert_eq!(s.size(&alice).await, 1, "failed adds stored nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_delete_items_by_uuid() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let mine = s.add_text(&alice, "mine").await;
    let bobs = s.add_text(&bob, "bob's").await;

    s.get("/inbox/item/00000000-0000-0000-0000-000000000000", &alice)
        .await
        .expect_error(404);
    // another account's item does not exist
    s.get(&format!("/inbox/item/{bobs}"), &alice).await.expect_error(404);
    s.delete(&format!("/inbox/item/{bobs}"), &alice).await.expect_empty(200);
    s.get(&format!("/inbox/item/{bobs}"), &bob).await.expect_json(200);

    // bad path captures
    let simple = mine.replace('-', "");
    for bad in [
        "not-a-uuid".to_string(),
        simple,
        format!("{{{mine}}}"),
        format!("urn:uuid:{mine}"),
        format!("{mine}0"),
        format!("%20{mine}"),
    ] {
        s.get(&format!("/inbox/item/{bad}"), &alice).await.expect_error(400);
        s.delete(&format!("/inbox/item/{bad}"), &alice).await.expect_error(400);
    }
    // 401 comes before the path check
    s.get("/inbox/item/not-a-uuid", &Auth::None).await.expect_error(401);

    s.delete(&format!("/inbox/item/{mine}"), &alice).await.expect_empty(200);
    s.get(&format!("/inbox/item/{mine}"), &alice).await.expect_error(404);
    // idempotent
    s.delete(&format!("/inbox/item/{mine}"), &alice).await.expect_empty(200);
    s.delete("/inbox/item/00000000-0000-0000-0000-000000000000", &alice)
        .await
        .expect_empty(200);
    assert_eq!(s.size(&alice).await, 0);
    assert_eq!(s.size(&bob).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_are_oldest_first() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    assert_eq!(s.get("/inbox/items", &alice).await.expect_json(200), json!([]));
    assert_eq!(s.get("/inbox/uuids", &alice).await.expect_json(200), json!([]));
    assert_eq!(s.get("/inbox/show-item", &alice).await.expect_json(200), Value::Null);
    assert_eq!(s.get("/inbox/size", &alice).await.expect_json(200), json!(0));

    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(s.add_text(&alice, &format!("item {i}")).await);
    }
    s.add_text(&bob, "not alice's").await;

    assert_eq!(s.uuids(&alice).await, ids);
    let items = s.get("/inbox/items", &alice).await.expect_json(200);
    let items = items.as_array().unwrap();
    assert_eq!(items.len(), 5);
    let mut previous = None;
    for (i, item) in items.iter().enumerate() {
        assert_eq!(keys_of(item), set(&["id", "contents", "created"]));
        assert_eq!(item["id"], ids[i].as_str());
        assert_eq!(item["contents"], text_item(&format!("item {i}")));
        let created = item["created"].as_str().unwrap();
        assert!(is_utc_timestamp(created), "{created}");
        let instant = instant(created);
        assert!(
            previous.is_none_or(|p| p <= instant),
            "items not oldest first: {items:?}"
        );
        previous = Some(instant);
    }
    let show = s.get("/inbox/show-item", &alice).await.expect_json(200);
    assert_eq!(&show, &items[0]);
    assert_eq!(s.size(&alice).await, 5);

    s.delete(&format!("/inbox/item/{}", ids[0]), &alice)
        .await
        .expect_empty(200);
    let show = s.get("/inbox/show-item", &alice).await.expect_json(200);
    assert_eq!(show["id"], ids[1].as_str());
    assert_eq!(s.size(&alice).await, 4);
    assert_eq!(s.uuids(&alice).await, ids[1..].to_vec());
    for id in &ids[1..] {
        s.delete(&format!("/inbox/item/{id}"), &alice).await.expect_empty(200);
    }
    assert_eq!(s.get("/inbox/show-item", &alice).await.expect_json(200), Value::Null);
    assert_eq!(s.size(&alice).await, 0);
    assert_eq!(s.size(&bob).await, 1);

    // HEAD is GET without a body; query strings are ignored
    let head = s.send(s.request(Method::HEAD, "/inbox/size", &alice)).await.expect(200);
    assert!(head.body.is_empty());
    assert_eq!(s.get("/inbox/size?x=1&y", &alice).await.expect_json(200), json!(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intray_aliases_behave_like_inbox_paths() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let id = s
        .post("/intray/item", &alice, &text_item("old client"))
        .await
        .expect_json(200);
    let id = id.as_str().unwrap().to_owned();
    let item = s.get(&format!("/intray/item/{id}"), &alice).await.expect_json(200);
    assert_eq!(item, s.get(&format!("/inbox/item/{id}"), &alice).await.expect_json(200));
    assert_eq!(
        s.get("/intray/items", &alice).await.expect_json(200),
        s.get("/inbox/items", &alice).await.expect_json(200)
    );
    assert_eq!(s.get("/intray/uuids", &alice).await.expect_json(200), json!([id]));
    assert_eq!(s.get("/intray/show-item", &alice).await.expect_json(200), item);
    assert_eq!(s.get("/intray/size", &alice).await.expect_json(200), json!(1));
    let sync = s.post("/intray/sync", &alice, &json!({})).await.expect_json(200);
    assert_eq!(sync["server-added"][&id]["contents"], text_item("old client"));
    s.get("/intray/item/not-a-uuid", &alice).await.expect_error(400);
    s.get("/intray/size", &Auth::None).await.expect_error(401);
    s.post("/intray/items", &alice, &json!({})).await.expect_error(405);
    s.delete(&format!("/intray/item/{id}"), &alice).await.expect_empty(200);
    assert_eq!(s.size(&alice).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn item_endpoints_need_their_permission() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let id = s.add_text(&alice, "x").await;
    let item_path = format!("/inbox/item/{id}");
    let (secret, _) = s.add_key(&alice, "nothing", &[]).await;
    let none = Auth::key("alice", &secret);
    let none_token = s.login_ok("alice", &secret).await;
    for auth in [&none, &none_token] {
        s.post("/inbox/item", auth, &text_item("y")).await.expect_error(401);
        s.get(&item_path, auth).await.expect_error(401);
        s.delete(&item_path, auth).await.expect_error(401);
        s.get("/inbox/items", auth).await.expect_error(401);
        s.get("/inbox/uuids", auth).await.expect_error(401);
        s.get("/inbox/show-item", auth).await.expect_error(401);
        s.get("/inbox/size", auth).await.expect_error(401);
        s.post("/inbox/sync", auth, &json!({})).await.expect_error(401);
        s.get("/permissions", auth).await.expect_error(401);
        s.get("/account", auth).await.expect_error(401);
        s.post(
            "/account",
            auth,
            &json!({"old-passphrase": "alice-password", "new-passphrase": "x"}),
        )
        .await
        .expect_error(401);
        s.post(
            "/access-key",
            auth,
            &json!({"addAccessKeyName": "k", "addAccessKeyPermissions": []}),
        )
        .await
        .expect_error(401);
        s.get("/access-key", auth).await.expect_error(401);
        s.delete("/account", auth).await.expect_error(401);
        // the permission is checked before the path capture
        s.get("/inbox/item/not-a-uuid", auth).await.expect_error(401);
        s.get("/access-key/not-a-uuid", auth).await.expect_error(401);
    }
    // nothing happened
    assert_eq!(s.uuids(&alice).await, vec![id]);
    s.login_ok("alice", "alice-password").await;
}

// ---------------------------------------------------------------------------------------
// Idempotency-Key

async fn add_with_key(s: &Api, auth: &Auth, key: &str, text: &str) -> common::Resp {
    s.send(
        s.request(Method::POST, "/inbox/item", auth)
            .header("Idempotency-Key", key)
            .json(&text_item(text)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_key_stores_once() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let first = add_with_key(&s, &alice, "delivery-1", "one").await.expect_json(200);
    let again = add_with_key(&s, &alice, "delivery-1", "different body")
        .await
        .expect_json(200);
    assert_eq!(first, again);
    assert_eq!(s.size(&alice).await, 1);
    let item = s
        .get(&format!("/inbox/item/{}", first.as_str().unwrap()), &alice)
        .await
        .expect_json(200);
    assert_eq!(item["contents"], text_item("one"));
    // another key stores another item
    let other = add_with_key(&s, &alice, "delivery-2", "two").await.expect_json(200);
    assert_ne!(other, first);
    // keys are per account
    let bobs = add_with_key(&s, &bob, "delivery-1", "bob").await.expect_json(200);
    assert_ne!(bobs, first);
    assert_eq!(s.size(&bob).await, 1);
    // still answered after the item was deleted, storing nothing
    s.delete(&format!("/inbox/item/{}", first.as_str().unwrap()), &alice)
        .await
        .expect_empty(200);
    let after = add_with_key(&s, &alice, "delivery-1", "one").await.expect_json(200);
    assert_eq!(after, first);
    assert_eq!(s.size(&alice).await, 1);
    // 200 printable ASCII characters are fine
    let long: String = (0..200).map(|i| (b' ' + (i % 95) as u8) as char).collect();
    let a = add_with_key(&s, &alice, &long, "long").await.expect_json(200);
    let b = add_with_key(&s, &alice, &long, "long").await.expect_json(200);
    assert_eq!(a, b);
    assert_eq!(s.size(&alice).await, 2);
    // a repeated key with an invalid body is still a 400
    s.send(
        s.request(Method::POST, "/inbox/item", &alice)
            .header("Idempotency-Key", "delivery-2")
            .json(&json!({"type": "nope", "data": ""})),
    )
    .await
    .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_idempotency_keys_are_refused() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let too_long = "k".repeat(201);
    for bad in [
        reqwest::header::HeaderValue::from_static(""),
        reqwest::header::HeaderValue::from_str(&too_long).unwrap(),
        reqwest::header::HeaderValue::from_str("tab\there").unwrap(),
        reqwest::header::HeaderValue::from_bytes("café".as_bytes()).unwrap(),
    ] {
        s.send(
            s.request(Method::POST, "/inbox/item", &alice)
                .header("Idempotency-Key", bad)
                .json(&text_item("x")),
        )
        .await
        .expect_error(400);
    }
    assert_eq!(s.size(&alice).await, 0, "invalid keys store nothing");
    // a key sent with an error answer is not recorded
    s.send(
        s.request(Method::POST, "/inbox/item", &alice)
            .header("Idempotency-Key", "retry-me")
            .json(&json!({"type": "text", "data": "???"})),
    )
    .await
    .expect_error(400);
    let id = add_with_key(&s, &alice, "retry-me", "now valid").await.expect_json(200);
    let item = s
        .get(&format!("/inbox/item/{}", id.as_str().unwrap()), &alice)
        .await
        .expect_json(200);
    assert_eq!(item["contents"], text_item("now valid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_with_one_idempotency_key_store_one_item() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let api = s.api.clone();
        let auth = alice.clone();
        tasks.push(tokio::spawn(async move {
            add_with_key(&api, &auth, "same", &format!("copy {i}"))
                .await
                .expect_json(200)
        }));
    }
    let mut answers = HashSet::new();
    for t in tasks {
        answers.insert(t.await.unwrap().as_str().unwrap().to_owned());
    }
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(s.uuids(&alice).await, answers.into_iter().collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_all_get_stored() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let api = s.api.clone();
        let auth = alice.clone();
        tasks.push(tokio::spawn(async move { api.add_text(&auth, &format!("n{i}")).await }));
    }
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.unwrap());
    }
    assert_eq!(ids.len(), 16);
    let stored: HashSet<String> = s.uuids(&alice).await.into_iter().collect();
    assert_eq!(stored, ids);
}

// ---------------------------------------------------------------------------------------
// Payments

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_item_limit_answers_402() {
    let s = Server::start_paid(3).await;
    let alice = s.user("alice").await;
    assert_eq!(
        account(&s, &alice).await["status"],
        json!({"status": "not-paid", "items-left": 3})
    );
    let first = add_with_key(&s, &alice, "k1", "1").await.expect_json(200);
    s.add_text(&alice, "2").await;
    s.add_text(&alice, "3").await;
    assert_eq!(
        account(&s, &alice).await["status"],
        json!({"status": "not-paid", "items-left": 0})
    );
    s.post("/inbox/item", &alice, &text_item("4")).await.expect_error(402);
    assert_eq!(s.size(&alice).await, 3);
    // an invalid body is a 400, not a 402
    s.post("/inbox/item", &alice, &json!({"type": "text"}))
        .await
        .expect_error(400);
    // a repeated Idempotency-Key is answered 200 at the limit and stores nothing
    assert_eq!(add_with_key(&s, &alice, "k1", "again").await.expect_json(200), first);
    // a new key at the limit is a 402 and is not recorded
    add_with_key(&s, &alice, "k-new", "x").await.expect_error(402);
    assert_eq!(s.size(&alice).await, 3);
    // deleting raises items-left again
    s.delete(&format!("/inbox/item/{}", first.as_str().unwrap()), &alice)
        .await
        .expect_empty(200);
    assert_eq!(
        account(&s, &alice).await["status"],
        json!({"status": "not-paid", "items-left": 1})
    );
    let fresh = add_with_key(&s, &alice, "k-new", "x").await.expect_json(200);
    assert_ne!(fresh, first);
    s.post("/inbox/item", &alice, &text_item("5")).await.expect_error(402);

    // admins never pay
    let admin = s.user("admin").await;
    for i in 0..5 {
        s.add_text(&admin, &format!("admin {i}")).await;
    }
    assert_eq!(
        account(&s, &admin).await["status"],
        json!({"status": "no-payment-necessary"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freeloaders_never_pay() {
    let s = Server::start_with(|st| {
        st.payment_plan = Some(common::test_plan());
        st.max_items_free = 1;
        st.freeloaders = vec!["friend".into()];
    })
    .await;
    let friend = s.user("friend").await;
    for i in 0..3 {
        s.add_text(&friend, &format!("{i}")).await;
    }
    assert_eq!(
        account(&s, &friend).await["status"],
        json!({"status": "no-payment-necessary"})
    );
    let sync = s
        .post(
            "/inbox/sync",
            &friend,
            &json!({"added": {"1": {"contents": text_item("a"), "created": "2024-01-01T00:00:00Z"}}}),
        )
        .await
        .expect_json(200);
    assert_eq!(sync["client-added"].as_object().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_truncates_at_the_free_limit() {
    let s = Server::start_paid(5).await;
    let alice = s.user("alice").await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(s.add_text(&alice, &format!("{i}")).await);
    }
    let entry = |text: &str| json!({"contents": text_item(text), "created": "2024-05-01T08:00:00Z"});
    // at the limit: 200 with an empty client-added
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"1": entry("a"), "2": entry("b"), "3": entry("c")}, "synced": ids}),
        )
        .await
        .expect_json(200);
    assert_eq!(r["client-added"], json!({}));
    assert_eq!(s.size(&alice).await, 5);
    // n is computed before the request's own deletions: nothing is accepted yet
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"1": entry("a")}, "synced": ids, "deleted": [ids[0]]}),
        )
        .await
        .expect_json(200);
    assert_eq!(r["client-added"], json!({}));
    assert_eq!(r["client-deleted"], json!([ids[0]]));
    assert_eq!(s.size(&alice).await, 4);
    // one free slot now: keys are ordered numerically, so "2" comes before "9" and "10"
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"10": entry("ten"), "9": entry("nine"), "2": entry("two")}, "synced": ids[1..]}),
        )
        .await
        .expect_json(200);
    let accepted = r["client-added"].as_object().unwrap();
    assert_eq!(accepted.keys().collect::<Vec<_>>(), vec!["2"], "{r}");
    let new_id = accepted["2"].as_str().unwrap();
    let item = s.get(&format!("/inbox/item/{new_id}"), &alice).await.expect_json(200);
    assert_eq!(item["contents"], text_item("two"));
    assert_eq!(s.size(&alice).await, 5);
    // non-integer keys are ordered by code points
    s.delete(&format!("/inbox/item/{new_id}"), &alice)
        .await
        .expect_empty(200);
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"b": entry("b"), "a1": entry("a1"), "10": entry("10")}}),
        )
        .await
        .expect_json(200);
    assert_eq!(
        r["client-added"].as_object().unwrap().keys().collect::<Vec<_>>(),
        vec!["10"],
        "{r}"
    );
    // over the limit the answer is still 200, never 402
    assert_eq!(s.size(&alice).await, 5);
}

// ---------------------------------------------------------------------------------------
// Sync

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_downloads_acknowledges_and_deletes() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let bob = s.user("bob").await;
    let a = s.add_text(&alice, "a").await;
    let b = s.add_text(&alice, "b").await;
    let bobs = s.add_text(&bob, "bob's").await;

    // {} downloads everything
    let r = s.post("/inbox/sync", &alice, &json!({})).await.expect_json(200);
    assert_eq!(
        keys_of(&r),
        set(&["client-added", "client-deleted", "server-added", "server-deleted"])
    );
    assert_eq!(r["client-added"], json!({}));
    assert_eq!(r["client-deleted"], json!([]));
    assert_eq!(r["server-deleted"], json!([]));
    let server_added = r["server-added"].as_object().unwrap();
    assert_eq!(server_added.len(), 2);
    for (id, text) in [(&a, "a"), (&b, "b")] {
        let entry = &server_added[id.as_str()];
        assert_eq!(keys_of(entry), set(&["contents", "created"]));
        assert_eq!(entry["contents"], text_item(text));
        let item = s.get(&format!("/inbox/item/{id}"), &alice).await.expect_json(200);
        assert_eq!(entry["created"], item["created"]);
    }
    // nulls are the same as missing keys
    let r2 = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": null, "synced": null, "deleted": null}),
        )
        .await
        .expect_json(200);
    assert_eq!(r2, r);

    // in sync: four empty fields
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"synced": [a, b], "added": {}, "deleted": []}),
        )
        .await
        .expect_json(200);
    assert_eq!(
        r,
        json!({"client-added": {}, "client-deleted": [], "server-added": {}, "server-deleted": []})
    );

    // the server deleted b; the client deleted a and added two items (§5.5)
    s.delete(&format!("/inbox/item/{b}"), &alice).await.expect_empty(200);
    let gone = "00000000-0000-4000-8000-000000000000";
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({
                "added": {
                    "1": {"contents": {"type": "text", "data": "YnV5IG1pbGs="}, "created": "2024-05-01T10:00:00+02:00"},
                    "2": {"contents": {"type": "image/png", "data": "iVBORw=="}, "created": "2024-05-01T08:00:01.25Z", "extra": 1},
                },
                "synced": [a, b, gone],
                "deleted": [a.to_uppercase()],
            }),
        )
        .await
        .expect_json(200);
    assert_eq!(r["client-deleted"], json!([a]));
    assert_eq!(r["server-deleted"], json!(sorted(vec![b.clone(), gone.to_string()])));
    assert_eq!(r["server-added"], json!({}));
    let client_added = r["client-added"].as_object().unwrap();
    assert_eq!(client_added.keys().collect::<Vec<_>>(), vec!["1", "2"]);
    let one = client_added["1"].as_str().unwrap().to_owned();
    let two = client_added["2"].as_str().unwrap().to_owned();
    assert!(is_canonical_uuid(&one) && is_canonical_uuid(&two) && one != two);
    s.get(&format!("/inbox/item/{a}"), &alice).await.expect_error(404);
    let items = s.get("/inbox/items", &alice).await.expect_json(200);
    assert_eq!(
        items,
        json!([
            {"id": one, "contents": {"type": "text", "data": "YnV5IG1pbGs="}, "created": "2024-05-01T08:00:00Z"},
            {"id": two, "contents": {"type": "image/png", "data": "iVBORw=="}, "created": "2024-05-01T08:00:01.25Z"},
        ])
    );

    // another account's items: in `deleted` echoed but untouched, in `synced` reported gone
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"synced": [one, two, bobs], "deleted": [bobs]}),
        )
        .await
        .expect_json(200);
    assert_eq!(r["client-deleted"], json!([bobs]));
    assert_eq!(r["server-deleted"], json!([bobs]));
    assert_eq!(r["server-added"], json!({}));
    assert_eq!(s.uuids(&bob).await, vec![bobs.clone()]);

    // identical entries give distinct items; synced items sort before newer ones; duplicates ignored
    let c = s.add_text(&alice, "c").await;
    let entry = json!({"contents": text_item("same"), "created": "2000-01-01T00:00:00.123456789Z"});
    let r = s
        .post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"x": entry, "y": entry}, "synced": [one, one, two, c], "deleted": [gone, gone]}),
        )
        .await
        .expect_json(200);
    assert_eq!(r["client-deleted"], json!([gone]));
    // only `synced` can produce server-deleted
    assert_eq!(r["server-deleted"], json!([]));
    assert_eq!(r["server-added"], json!({}));
    let x = r["client-added"]["x"].as_str().unwrap().to_owned();
    let y = r["client-added"]["y"].as_str().unwrap().to_owned();
    assert_ne!(x, y);
    let uuids = s.uuids(&alice).await;
    assert_eq!(uuids.len(), 5);
    assert_eq!(&uuids[2..], &[one.clone(), two.clone(), c.clone()]);
    assert_eq!(sorted(uuids[..2].to_vec()), sorted(vec![x.clone(), y.clone()]));
    let item = s.get(&format!("/inbox/item/{x}"), &alice).await.expect_json(200);
    assert_eq!(item["created"], "2000-01-01T00:00:00.123456789Z");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_applies_nothing_on_invalid_parts() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let a = s.add_text(&alice, "a").await;
    let good = json!({"contents": text_item("new"), "created": "2024-05-01T08:00:00Z"});
    let bad_requests = [
        json!({"added": {"1": good, "2": {"contents": {"type": "text", "data": "not base64!"}, "created": "2024-05-01T08:00:00Z"}}, "deleted": [a]}),
        json!({"added": {"1": good, "2": {"contents": {"type": "video", "data": ""}, "created": "2024-05-01T08:00:00Z"}}, "deleted": [a]}),
        json!({"added": {"1": good, "2": {"contents": text_item("x"), "created": "yesterday"}}, "deleted": [a]}),
        json!({"added": {"1": good, "2": {"contents": text_item("x"), "created": "2024-05-01T08:00:00"}}, "deleted": [a]}),
        json!({"added": {"1": good, "2": {"contents": text_item("x")}}, "deleted": [a]}),
        json!({"added": {"1": good, "2": {"created": "2024-05-01T08:00:00Z"}}, "deleted": [a]}),
        json!({"added": {"1": good}, "deleted": [a, "not-a-uuid"]}),
        json!({"added": {"1": good}, "deleted": [a], "synced": ["not-a-uuid"]}),
        json!({"added": {"1": good}, "deleted": [a], "synced": [a.replace('-', "")]}),
        json!({"added": {"1": good}, "deleted": [a], "synced": [1]}),
        json!({"added": {"1": good}, "deleted": a}),
        json!({"added": [good], "deleted": [a]}),
        json!({"added": {"1": good, "2": "not an object"}, "deleted": [a]}),
    ];
    for body in bad_requests {
        s.post("/inbox/sync", &alice, &body).await.expect_error(400);
        assert_eq!(s.uuids(&alice).await, vec![a.clone()], "partially applied: {body}");
    }
    for raw in ["", "[]", "null", "\"sync\"", "{\"added\":"] {
        s.post_raw("/inbox/sync", &alice, Some("application/json"), raw)
            .await
            .expect_error(400);
    }
    s.post_raw("/inbox/sync", &alice, Some("text/plain"), "{}")
        .await
        .expect_error(415);
    s.post("/inbox/sync", &Auth::None, &json!({})).await.expect_error(401);
    assert_eq!(s.uuids(&alice).await, vec![a]);
}

// ---------------------------------------------------------------------------------------
// Admin endpoints

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints() {
    let s = Server::start().await;
    // bob and carol never log in
    s.register("bob", "pw").await.expect_empty(204);
    s.register("carol", "pw").await.expect_empty(204);
    let alice = s.user("alice").await;
    s.add_text(&alice, "1").await;
    s.add_text(&alice, "2").await;
    let admin = s.user("admin").await;
    s.add_text(&admin, "3").await;

    let stats = s.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(
        stats,
        json!({"accounts": 4, "items": 3,
               "active-users": {"daily": 2, "weekly": 2, "monthly": 2, "yearly": 2},
               "subscribed-users": 0})
    );

    let accounts = s.get("/admin/accounts", &admin).await.expect_json(200);
    let accounts = accounts.as_array().unwrap();
    let names: Vec<&str> = accounts.iter().map(|a| a["username"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["admin", "alice", "bob", "carol"],
        "latest login first, never-logged-in last (oldest registration first)"
    );
    for a in accounts {
        assert_eq!(
            keys_of(a),
            set(&["uuid", "username", "created", "last-login", "admin", "count", "status"])
        );
    }
    assert_eq!(accounts[2]["last-login"], Value::Null);
    assert_eq!(accounts[3]["last-login"], Value::Null);
    assert_eq!(accounts[0]["admin"], true);
    assert_eq!(accounts[1]["admin"], false);
    assert_eq!(accounts[1]["count"], 2);
    assert_eq!(accounts[1], account(&s, &alice).await);

    // non-admins get 401 everywhere, even with an existing account UUID
    let alice_uuid = accounts[1]["uuid"].as_str().unwrap().to_owned();
    let admin_uuid = accounts[0]["uuid"].as_str().unwrap().to_owned();
    for auth in [&alice, &Auth::None] {
        s.get("/admin/stats", auth).await.expect_error(401);
        s.get("/admin/accounts", auth).await.expect_error(401);
        s.delete(&format!("/admin/account/{admin_uuid}"), auth)
            .await
            .expect_error(401);
        s.delete("/admin/account/not-a-uuid", auth).await.expect_error(401);
    }
    // an admin's access key without the admin permission
    let (secret, _) = s.add_key(&admin, "no-admin", &["PermitSize"]).await;
    s.get("/admin/stats", &Auth::key("admin", &secret))
        .await
        .expect_error(401);
    // with it, header authentication works for the admin
    let (secret, _) = s.add_key(&admin, "stats", &["PermitAdminGetStats"]).await;
    s.get("/admin/stats", &Auth::key("admin", &secret))
        .await
        .expect_json(200);

    // DELETE /admin/account/:uuid
    s.delete("/admin/account/not-a-uuid", &admin).await.expect_error(400);
    s.delete("/admin/account/00000000-0000-0000-0000-000000000000", &admin)
        .await
        .expect_error(404);
    s.delete(&format!("/admin/account/{alice_uuid}"), &admin)
        .await
        .expect_empty(204);
    s.get("/inbox/size", &alice).await.expect_error(401);
    s.login("alice", "alice-password").await.expect_error(401);
    s.delete(&format!("/admin/account/{alice_uuid}"), &admin)
        .await
        .expect_error(404);
    let stats = s.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(stats["accounts"], 3);
    assert_eq!(stats["items"], 1);
}

// ---------------------------------------------------------------------------------------
// General errors, order of checks, limits

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_and_methods() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    for path in ["/nope", "/inbox/items/", "/Inbox/items", "/inbox", "/access-key/x/y"] {
        s.get(path, &alice).await.expect_error(404);
        s.get(path, &Auth::None).await.expect_error(404);
        s.post(path, &Auth::None, &json!({})).await.expect_error(404);
    }
    for (method, path) in [
        (Method::GET, "/login"),
        (Method::GET, "/register"),
        (Method::DELETE, "/register"),
        (Method::POST, "/pricing"),
        (Method::PUT, "/inbox/items"),
        (Method::PATCH, "/account"),
        (Method::POST, "/"),
        (Method::GET, "/inbox/item"),
        (Method::POST, "/inbox/uuids"),
        (Method::GET, "/inbox/sync"),
        (Method::POST, "/access-key/00000000-0000-0000-0000-000000000000"),
        (Method::GET, "/admin/account/00000000-0000-0000-0000-000000000000"),
        (Method::DELETE, "/admin/stats"),
    ] {
        // 405 comes before credentials
        s.send(s.request(method.clone(), path, &Auth::None))
            .await
            .expect_error(405);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_checked_before_the_body() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    for path in ["/inbox/item", "/inbox/sync", "/access-key", "/account"] {
        s.post_raw(path, &Auth::None, Some("application/json"), "{not json")
            .await
            .expect_error(401);
        s.post_raw(path, &Auth::None, Some("text/plain"), "{not json")
            .await
            .expect_error(401);
        s.post_raw(path, &Auth::Bearer("bad".into()), Some("application/json"), "[]")
            .await
            .expect_error(401);
        // authenticated: the content type (415), then the body (400)
        s.post_raw(path, &alice, Some("text/plain"), "{not json")
            .await
            .expect_error(415);
        s.post_raw(path, &alice, Some("application/json"), "{not json")
            .await
            .expect_error(400);
        for non_object in ["[]", "[{}]", "\"x\"", "1", "true", "null", ""] {
            s.post_raw(path, &alice, Some("application/json"), non_object)
                .await
                .expect_error(400);
        }
    }
    // body-less endpoints ignore any body and its content type
    s.send(
        s.request(Method::GET, "/inbox/size", &alice)
            .header("Content-Type", "text/plain")
            .body("garbage"),
    )
    .await
    .expect_json(200);
    s.send(
        s.request(
            Method::DELETE,
            "/inbox/item/00000000-0000-0000-0000-000000000000",
            &alice,
        )
        .header("Content-Type", "text/plain")
        .body("garbage"),
    )
    .await
    .expect_empty(200);
    // the account is untouched
    s.get("/inbox/size", &alice).await.expect_json(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_answer_413() {
    let limit = 1024usize;
    let s = Server::start_with(|st| st.max_body_bytes = limit as u64).await;
    let alice = s.user("alice").await;
    // a body of exactly the limit is accepted (padded with whitespace)
    let item = text_item("fits").to_string();
    let exact = format!("{item}{}", " ".repeat(limit - item.len()));
    assert_eq!(exact.len(), limit);
    s.post_raw("/inbox/item", &alice, Some("application/json"), exact.clone())
        .await
        .expect_json(200);
    let over = format!("{exact} ");
    s.post_raw("/inbox/item", &alice, Some("application/json"), over.clone())
        .await
        .expect_error(413);
    // before credentials, before the content type and the body
    s.post_raw("/inbox/item", &Auth::None, Some("application/json"), over.clone())
        .await
        .expect_error(413);
    s.post_raw("/inbox/item", &Auth::None, Some("text/plain"), "x".repeat(limit + 1))
        .await
        .expect_error(413);
    s.post_raw("/register", &Auth::None, Some("application/json"), over.clone())
        .await
        .expect_error(413);
    assert_eq!(s.size(&alice).await, 1);

    // without Content-Length (chunked)
    let Auth::Bearer(token) = &alice else { unreachable!() };
    let chunk = " ".repeat(600);
    let request = format!(
        "POST /inbox/item HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         {:x}\r\n{item}\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        item.len(),
        chunk.len(),
        chunk.len()
    );
    let (status, answer) = s.raw(request.as_bytes()).await;
    assert_eq!(status, 413, "{answer}");
    assert!(answer.to_ascii_lowercase().contains("application/json"), "{answer}");
    assert!(answer.contains("\"error\""), "{answer}");
    // a chunked body within the limit is fine
    let request = format!(
        "POST /inbox/item HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         {:x}\r\n{item}\r\n0\r\n\r\n",
        item.len()
    );
    let (status, answer) = s.raw(request.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(s.size(&alice).await, 2);
}

// ---------------------------------------------------------------------------------------
// CORS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_is_answered_on_any_path() {
    let s = Server::start().await;
    for path in ["/inbox/item", "/login", "/no/such/path", "/inbox/item/not-a-uuid"] {
        let r = s
            .send(
                s.request(Method::OPTIONS, path, &Auth::None)
                    .header("Origin", "https://app.example")
                    .header("Access-Control-Request-Method", "POST")
                    .header(
                        "Access-Control-Request-Headers",
                        "Authorization, content-type, Username, access-key, X-Custom-Thing",
                    ),
            )
            .await;
        assert!(r.status == 200 || r.status == 204, "{path}: {}", r.status);
        assert!(r.body.is_empty(), "{path}: preflight body {:?}", r.text());
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "{path}");
        assert!(r.headers.get("access-control-allow-credentials").is_none());
        let methods: HashSet<String> = r
            .header("access-control-allow-methods")
            .expect("Allow-Methods")
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .collect();
        for m in ["GET", "HEAD", "POST", "DELETE"] {
            assert!(methods.contains(m), "{path}: {methods:?} lacks {m}");
        }
        let allowed: HashSet<String> = r
            .headers
            .get_all("access-control-allow-headers")
            .iter()
            .flat_map(|v| v.to_str().unwrap().split(','))
            .map(|h| h.trim().to_ascii_lowercase())
            .collect();
        for h in [
            "authorization",
            "content-type",
            "username",
            "access-key",
            "x-custom-thing",
        ] {
            assert!(allowed.contains(h), "{path}: {allowed:?} lacks {h}");
        }
    }
    // without Access-Control-Request-Headers the essential ones are still allowed
    let r = s
        .send(
            s.request(Method::OPTIONS, "/inbox/items", &Auth::None)
                .header("Origin", "https://app.example")
                .header("Access-Control-Request-Method", "GET"),
        )
        .await;
    assert!(r.status == 200 || r.status == 204);
    let allowed = r
        .header("access-control-allow-headers")
        .unwrap_or("")
        .to_ascii_lowercase();
    for h in ["authorization", "content-type", "username", "access-key"] {
        assert!(allowed.contains(h), "{allowed} lacks {h}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_origin_header_on_normal_and_error_answers() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let with_origin = |rb: reqwest::RequestBuilder| rb.header("Origin", "https://app.example");
    let cases: Vec<(reqwest::RequestBuilder, u16)> = vec![
        (s.request(Method::GET, "/pricing", &Auth::None), 200),
        (s.request(Method::GET, "/", &Auth::None), 200),
        (s.request(Method::GET, "/inbox/size", &alice), 200),
        (
            s.request(Method::POST, "/inbox/item", &alice).json(&text_item("x")),
            200,
        ),
        (
            s.request(Method::POST, "/login", &Auth::None)
                .json(&json!({"username": "alice", "password": "alice-password"})),
            204,
        ),
        (s.request(Method::GET, "/inbox/size", &Auth::None), 401),
        (s.request(Method::GET, "/nope", &Auth::None), 404),
        (s.request(Method::GET, "/login", &Auth::None), 405),
        (s.request(Method::GET, "/inbox/item/bad", &alice), 400),
        (
            s.request(Method::POST, "/inbox/item", &alice)
                .header("Content-Type", "text/plain")
                .body("x"),
            415,
        ),
        (
            s.request(Method::POST, "/register", &Auth::None)
                .json(&json!({"name": "alice", "password": "p"})),
            409,
        ),
    ];
    for (rb, status) in cases {
        let r = s.send(with_origin(rb)).await;
        assert_eq!(r.status, status, "{:?}", r.text());
        assert_eq!(r.header("access-control-allow-origin"), Some("*"), "status {status}");
        assert!(r.headers.get("access-control-allow-credentials").is_none());
        if status >= 400 {
            r.expect_error(status);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Restart

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_and_tokens_survive_a_restart() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let item = add_with_key(&s, &alice, "restart-key", "kept").await.expect_json(200);
    let (secret, _) = s.add_key(&alice, "k", &["PermitSize"]).await;
    let s = s.restart().await;
    assert_eq!(s.uuids(&alice).await, vec![item.as_str().unwrap().to_owned()]);
    assert_eq!(
        add_with_key(&s, &alice, "restart-key", "again").await.expect_json(200),
        item
    );
    assert_eq!(s.size(&Auth::key("alice", &secret)).await, 1);
    s.login_ok("alice", "alice-password").await;
    s.register("alice", "x").await.expect_error(409);
    s.stop().await;
}

// ---------------------------------------------------------------------------------------
// More: timestamps, key order, header details, expiry, limits under concurrency

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_timestamps_are_normalised_to_utc() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let cases = [
        ("2024-05-01T10:00:00+02:00", "2024-05-01T08:00:00Z"),
        ("2024-05-01 10:00:00-01:30", "2024-05-01T11:30:00Z"),
        ("2024-05-01t10:00:00.500z", "2024-05-01T10:00:00.5Z"),
        ("2024-05-01T10:00:00.000Z", "2024-05-01T10:00:00Z"),
        ("2024-05-01T10:00:00.1234567891Z", "2024-05-01T10:00:00.123456789Z"),
        ("2016-12-31T23:59:60Z", "2016-12-31T23:59:60Z"),
        ("2017-01-01T00:59:60.25+01:00", "2016-12-31T23:59:60.25Z"),
        ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"),
    ];
    let mut added = serde_json::Map::new();
    for (i, (input, _)) in cases.iter().enumerate() {
        added.insert(i.to_string(), json!({"contents": text_item(input), "created": input}));
    }
    let r = s
        .post("/inbox/sync", &alice, &json!({"added": added}))
        .await
        .expect_json(200);
    for (i, (input, output)) in cases.iter().enumerate() {
        let id = r["client-added"][i.to_string()].as_str().expect("accepted");
        let item = s.get(&format!("/inbox/item/{id}"), &alice).await.expect_json(200);
        assert_eq!(item["created"], *output, "input {input}");
    }
    for bad in [
        "2024-05-01T10:00Z",
        "2024-05-01T10:00:00",
        "2024-05-01",
        "2024-13-01T10:00:00Z",
        "2024-02-30T10:00:00Z",
        "2024-05-01T24:00:00Z",
        "2024-05-01T10:00:61Z",
        "2024-05-01T10:00:00.Z",
        "2024-05-01T10:00:00+0200",
        "2024-05-01T10:00:00 Z",
        "2024-05-01X10:00:00Z",
        "10000-05-01T10:00:00Z",
        " 2024-05-01T10:00:00Z",
    ] {
        s.post(
            "/inbox/sync",
            &alice,
            &json!({"added": {"1": {"contents": text_item("x"), "created": bad}}}),
        )
        .await
        .expect_error(400);
    }
    assert_eq!(s.size(&alice).await, cases.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_orders_added_keys_numerically_or_by_code_points() {
    let s = Server::start_paid(1).await;
    let alice = s.user("alice").await;
    let entry = json!({"contents": text_item("x"), "created": "2024-05-01T08:00:00Z"});
    let huge = "99999999999999999999999999999999";
    let mut keys = vec!["7", "07", huge, "-5", "10"];
    // with room for one item, each sync accepts the first remaining key in order
    for expected in ["-5", "07", "7", "10", huge] {
        let added: serde_json::Map<String, Value> = keys.iter().map(|k| (k.to_string(), entry.clone())).collect();
        let r = s
            .post("/inbox/sync", &alice, &json!({"added": added}))
            .await
            .expect_json(200);
        let accepted = r["client-added"].as_object().unwrap();
        assert_eq!(accepted.keys().collect::<Vec<_>>(), vec![expected], "{r}");
        let id = accepted[expected].as_str().unwrap();
        s.delete(&format!("/inbox/item/{id}"), &alice).await.expect_empty(200);
        keys.retain(|k| *k != expected);
    }
    // one non-integer key: all keys by code points ("" first, "Z" before "a", "é" last)
    let mut keys = vec!["é", "a", "Z", "", "1", "-1"];
    for expected in ["", "-1", "1", "Z", "a", "é"] {
        let added: serde_json::Map<String, Value> = keys.iter().map(|k| (k.to_string(), entry.clone())).collect();
        let r = s
            .post("/inbox/sync", &alice, &json!({"added": added}))
            .await
            .expect_json(200);
        let accepted = r["client-added"].as_object().unwrap();
        assert_eq!(accepted.keys().collect::<Vec<_>>(), vec![expected], "{r}");
        let id = accepted[expected].as_str().unwrap();
        s.delete(&format!("/inbox/item/{id}"), &alice).await.expect_empty(200);
        keys.retain(|k| *k != expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_item_limit_holds_under_concurrency() {
    let s = Server::start_paid(3).await;
    let alice = s.user("alice").await;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let api = s.api.clone();
        let auth = alice.clone();
        tasks.push(tokio::spawn(async move {
            api.post("/inbox/item", &auth, &text_item(&format!("{i}"))).await.status
        }));
    }
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 3, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 402).count(), 7, "{statuses:?}");
    assert_eq!(s.size(&alice).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_authentication_details() {
    let s = Server::start().await;
    // a Latin-1 username, sent as UTF-8 or as ISO-8859-1 bytes
    s.register("Jürg", "pw").await.expect_empty(204);
    let jurg = s.login_ok("Jürg", "pw").await;
    let (secret, _) = s.add_key(&jurg, "k", &["PermitSize", "PermitGetAccountInfo"]).await;
    s.get("/inbox/size", &Auth::key("Jürg", &secret)).await.expect_json(200);
    let latin1 = reqwest::header::HeaderValue::from_bytes(b"J\xfcrg").unwrap();
    s.send(
        s.request(Method::GET, "/inbox/size", &Auth::None)
            .header("Username", latin1)
            .header("Access-Key", &secret),
    )
    .await
    .expect_json(200);
    // header authentication does not change last-login; a key login does
    let before = s.get("/account", &jurg).await.expect_json(200)["last-login"].clone();
    let via_headers = s.get("/account", &Auth::key("Jürg", &secret)).await.expect_json(200);
    assert_eq!(via_headers["last-login"], before);
    let key_token = s.login_ok("Jürg", &secret).await;
    let after = s.get("/account", &key_token).await.expect_json(200)["last-login"].clone();
    assert_ne!(after, before);
    assert!(instant(after.as_str().unwrap()) >= instant(before.as_str().unwrap()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_expire_with_a_lifetime() {
    let long = Server::start_with(|st| st.token_lifetime = Some(3600)).await;
    let alice = long.user("alice").await;
    long.get("/inbox/size", &alice).await.expect_json(200);

    let short = Server::start_with(|st| st.token_lifetime = Some(1)).await;
    let alice = short.user("alice").await;
    // `exp` is a whole second at most one second after the login: refused from then on
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while short.get("/inbox/size", &alice).await.status == 200 {
        assert!(std::time::Instant::now() < deadline, "the token still works after 3 s");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await; // poll
    }
    short.get("/inbox/size", &alice).await.expect_error(401);
    // a new login gives a new token
    let fresh = short.login_ok("alice", "alice-password").await;
    let Auth::Bearer(token) = &fresh else { unreachable!() };
    assert!(!token.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_checks_come_before_body_size_and_options_without_preflight() {
    let s = Server::start_with(|st| st.max_body_bytes = 64).await;
    let big = "x".repeat(65);
    // unknown path and wrong method win over the body size
    s.post_raw("/nope", &Auth::None, Some("application/json"), big.clone())
        .await
        .expect_error(404);
    s.post_raw("/pricing", &Auth::None, Some("application/json"), big.clone())
        .await
        .expect_error(405);
    // 413 carries CORS headers too
    let r = s
        .send(
            s.request(Method::POST, "/login", &Auth::None)
                .header("Origin", "https://app.example")
                .header("Content-Type", "application/json")
                .body(big),
        )
        .await;
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    r.expect_error(413);
    // OPTIONS that is not a preflight is just a method the path does not serve
    s.send(s.request(Method::OPTIONS, "/inbox/items", &Auth::None))
        .await
        .expect_error(405);
    s.send(s.request(Method::OPTIONS, "/nope", &Auth::None))
        .await
        .expect_error(404);
}

/// Plain-text capture: `POST /inbox/text` takes the body as the note, whatever its type (a
/// phone shortcut, `curl --data-binary`), while `POST /inbox/item` keeps requiring JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_capture() {
    let s = Server::start().await;
    let alice = s.user("alice").await;
    let text_of = |item: &serde_json::Value| {
        let data = item["contents"]["data"].as_str().expect("data");
        assert_eq!(item["contents"]["type"], "text");
        String::from_utf8(base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).unwrap()).unwrap()
    };
    for (content_type, body, stored) in [
        (Some("text/plain; charset=utf-8"), "buy milk\n", "buy milk"),
        (Some("application/x-www-form-urlencoded"), "call mum", "call mum"),
        (None, "two\nlines\r\n", "two\nlines"),
        (
            Some("application/json"),
            "{\"not\": \"parsed\"}",
            "{\"not\": \"parsed\"}",
        ),
    ] {
        let id = s
            .post_raw("/inbox/text", &alice, content_type, body)
            .await
            .expect_json(200);
        let item = s
            .get(&format!("/inbox/item/{}", id.as_str().unwrap()), &alice)
            .await
            .expect_json(200);
        assert_eq!(text_of(&item), stored, "{content_type:?}");
    }
    assert_eq!(s.size(&alice).await, 4);
    // bad input gets a clear error and changes nothing
    s.post_raw("/inbox/text", &alice, Some("text/plain"), "\n")
        .await
        .expect_error(400);
    s.post_raw("/inbox/text", &Auth::None, Some("text/plain"), "x")
        .await
        .expect_error(401);
    let (reader, _) = s.add_key(&alice, "reader", &["PermitGetItems"]).await;
    s.post_raw("/inbox/text", &Auth::key("alice", &reader), Some("text/plain"), "x")
        .await
        .expect_error(401);
    s.get("/inbox/text", &alice).await.expect_error(405);
    s.post_raw("/inbox/item", &alice, Some("text/plain"), "buy milk")
        .await
        .expect_error(415);
    assert_eq!(s.size(&alice).await, 4);
    // a repeated Idempotency-Key stores nothing new
    let first = s
        .send(
            s.request(Method::POST, "/inbox/text", &alice)
                .header("Idempotency-Key", "shortcut-1")
                .body("once"),
        )
        .await
        .expect_json(200);
    let again = s
        .send(
            s.request(Method::POST, "/inbox/text", &alice)
                .header("Idempotency-Key", "shortcut-1")
                .body("once"),
        )
        .await
        .expect_json(200);
    assert_eq!(first, again);
    assert_eq!(s.size(&alice).await, 5);
}
