//! Push and webhook triggers end to end (scheduler.md §6.4–§6.5, §7.6–§7.7): a push service
//! run by the test on loopback checks every message's VAPID JWT against the server's
//! public key and decrypts it with the subscriber's own private key (RFC 8291, with another
//! implementation than the server's); it answers 201, 410, 429 or 5xx as each test needs.
//! Webhooks reach a receiver of the test as text (ntfy) or JSON (Gotify).

use crate::common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use common::scheduler::{keys, tickle, utc_ago, wait_for};
use common::scripted::{Answer, ScriptedInbox, Seen};
use common::{Api, Auth, Server, Worker};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A browser's side of a subscription: its key pair and authentication secret.
struct Subscriber {
    secret: p256::SecretKey,
    auth: [u8; 16],
}

impl Subscriber {
    fn new() -> Subscriber {
        Subscriber {
            secret: p256::SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng),
            auth: rand_bytes(),
        }
    }

    /// `PushSubscription.toJSON()` for `endpoint`, as a browser gives it.
    fn subscription(&self, endpoint: &str) -> Value {
        let point = self.secret.public_key().to_encoded_point(false);
        json!({
            "endpoint": endpoint,
            "expirationTime": null,
            "keys": {"p256dh": URL_SAFE_NO_PAD.encode(point.as_bytes()), "auth": URL_SAFE_NO_PAD.encode(self.auth)},
        })
    }

    /// The plain text of a message pushed to this subscriber, decrypted as a browser does.
    fn decrypt(&self, body: &[u8]) -> Value {
        let auth = web_push_native::Auth::from(self.auth);
        let plain = web_push_native::decrypt(body.to_vec(), &self.secret, &auth).expect("the message decrypts");
        serde_json::from_slice(&plain).expect("the message is JSON")
    }
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::getrandom(&mut b).expect("random bytes");
    b
}

/// The server's application server key, as `GET /push/key` gives it.
async fn push_key(api: &Api) -> String {
    let v = api.get("/push/key", &Auth::None).await.expect_json(200);
    assert_eq!(keys(&v), ["publicKey"]);
    v["publicKey"].as_str().expect("a string").to_owned()
}

/// Checks what a push service checks (RFC 8292): `Authorization: vapid t=<JWT>, k=<key>`
/// with the server's key, an ES256 JWT under it for the endpoint's origin (port included),
/// expiring within 24 hours, with a contact.
fn assert_vapid(request: &Seen, server_key: &str, origin: &str) {
    let header = request.headers["authorization"].to_str().expect("ASCII");
    let (t, k) = header
        .strip_prefix("vapid t=")
        .and_then(|rest| rest.split_once(", k="))
        .unwrap_or_else(|| panic!("not a VAPID authorization: {header}"));
    assert_eq!(k, server_key, "k= is the key of GET /push/key");
    let point = URL_SAFE_NO_PAD.decode(k).expect("base64url");
    let key = jsonwebtoken::DecodingKey::from_ec_components(
        &URL_SAFE_NO_PAD.encode(&point[1..33]),
        &URL_SAFE_NO_PAD.encode(&point[33..]),
    )
    .expect("a P-256 key");
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[origin]);
    validation.set_required_spec_claims(&["exp", "aud", "sub"]);
    let claims = jsonwebtoken::decode::<Value>(t, &key, &validation)
        .unwrap_or_else(|e| panic!("the VAPID JWT does not verify: {e}"))
        .claims;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let exp = claims["exp"].as_u64().expect("exp");
    assert!(
        exp > now && exp <= now + 24 * 3600,
        "exp {exp} within 24 hours of {now}"
    );
    let sub = claims["sub"].as_str().expect("sub");
    assert!(sub.starts_with("mailto:") || sub.starts_with("https://"), "{sub}");
}

/// A push service answering `status(n)` to its n-th message (from 0).
async fn push_service(status: impl Fn(usize) -> Answer + Send + Sync + 'static) -> ScriptedInbox {
    let count = AtomicUsize::new(0);
    ScriptedInbox::start(move |_| status(count.fetch_add(1, Ordering::SeqCst))).await
}

fn created() -> Answer {
    Answer::Reply(201, vec![], String::new())
}

/// An item due a minute ago (UTC, the account's default zone).
async fn add_due_item(api: &Api, auth: &Auth, content: &str) -> String {
    let (day, time) = utc_ago(60);
    api.add_tickle(auth, &tickle(content, &day, Some(&time), None)).await
}

/// The attempts of the account's triggered items, once there are `n` items with one
/// finished attempt each.
async fn finished(api: &Api, auth: &Auth, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} triggered items with one attempt"), || async {
        let items = api.tickles(auth, Some("onlytriggered")).await;
        let attempts: Vec<Value> = items.iter().filter_map(|i| one_attempt(i, 1)).flatten().collect();
        (items.len() == n && attempts.len() == n).then_some(attempts)
    })
    .await
}

/// The finished attempts of a triggered item, when there are `n` of them.
fn one_attempt(item: &Value, n: usize) -> Option<Vec<Value>> {
    item["triggered"]["triggeredInfoTriggerTriggerAttempts"]
        .as_array()
        .filter(|a| a.len() == n)
        .cloned()
}

/// The finished attempts of the account's one triggered item, once there are `n`.
async fn attempts_of_the_item(api: &Api, auth: &Auth, n: usize) -> (Value, Vec<Value>) {
    wait_for(&format!("one triggered item with {n} finished attempts"), || async {
        let items = api.tickles(auth, Some("onlytriggered")).await;
        let [item] = &items[..] else { return None };
        one_attempt(item, n).map(|a| (item.clone(), a))
    })
    .await
}

async fn subscribe(api: &Api, auth: &Auth, subscription: &Value) -> String {
    let v = api.post("/trigger/push", auth, subscription).await.expect_json(200);
    v.as_str()
        .unwrap_or_else(|| panic!("not a UUID string: {v}"))
        .to_owned()
}

/// §6.4, §7.6: the message reaches the push service once, with the specified headers, a
/// VAPID JWT that verifies under `GET /push/key`, and a body that the subscriber decrypts
/// (one record of size 4096) to the reminder; the attempt reads `PushResultSent`; the
/// trigger shows only the endpoint's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_due_item_is_pushed_encrypted_and_signed() {
    let service = push_service(|_| created()).await;
    let server = Server::start_scheduler().await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let key = push_key(api).await;
    assert_eq!(URL_SAFE_NO_PAD.decode(&key).expect("base64url").len(), 65);
    let phone = Subscriber::new();
    let endpoint = format!("{}/push/v1/abc", service.url());
    let trigger = subscribe(api, &alice, &phone.subscription(&endpoint)).await;
    let info = api
        .get(&format!("/trigger/info/{trigger}"), &alice)
        .await
        .expect_json(200);
    assert_eq!(
        info,
        json!({"uuid": trigger, "info": {"typedTriggerInfoType": "push",
               "typedTriggerInfoValue": {"pushTriggerInfoHost": "127.0.0.1", "pushTriggerInfoExpired": false}}})
    );
    assert!(!info.to_string().contains("abc"), "the endpoint is never shown again");

    add_due_item(api, &alice, "Call the dentist ☎").await;
    let attempts = finished(api, &alice, 1).await;
    assert_eq!(
        attempts[0],
        json!({"tag": "PushTriggerAttempt", "contents": [trigger, {"tag": "PushResultSent"}]})
    );
    let sent = service.requests("POST", "/push/v1/abc");
    assert_eq!(sent.len(), 1, "pushed once");
    let m = &sent[0];
    let header = |name: &str| m.headers.get(name).map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(header("content-encoding").as_deref(), Some("aes128gcm"));
    assert_eq!(header("content-type").as_deref(), Some("application/octet-stream"));
    assert_eq!(header("ttl").as_deref(), Some("86400"));
    assert_eq!(header("urgency").as_deref(), Some("high"));
    let topic = header("topic").expect("a Topic");
    assert!(
        topic.len() == 32 && topic.bytes().all(|c| c.is_ascii_hexdigit()),
        "{topic}"
    );
    assert_vapid(m, &key, &service.url());
    // one record of size 4096: salt (16), rs (4), idlen, the sender's key (65)
    assert_eq!(&m.bytes[16..20], &4096u32.to_be_bytes());
    assert_eq!(m.bytes[20], 65);
    let message = phone.decrypt(&m.bytes);
    let items = api.tickles(&alice, Some("onlytriggered")).await;
    assert_eq!(message["title"], "Reminder");
    assert_eq!(message["body"], "Call the dentist ☎");
    assert_eq!(message["item"], items[0]["id"]);
    let due = message["due"].as_str().expect("due");
    assert!(due.ends_with('Z') && due.len() == 20, "{due}");
    assert!(message["url"].as_str().expect("url").ends_with("/app/triggered"));
    assert!(
        uuid::Uuid::try_parse(&topic).is_ok(),
        "the delivery's id without dashes: {topic}"
    );
}

/// §7.6: 404 or 410 (the subscription is gone) is a permanent failure and expires the
/// trigger: the next item is not pushed there; subscribing the same endpoint again renews
/// the same trigger, and the item after that is pushed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gone_subscription_expires_until_renewed() {
    let service = push_service(|n| match n {
        0 => Answer::Reply(410, vec![], "gone".into()),
        _ => created(),
    })
    .await;
    let server = Server::start_scheduler().await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let phone = Subscriber::new();
    let subscription = phone.subscription(&format!("{}/push/gone", service.url()));
    let trigger = subscribe(api, &alice, &subscription).await;
    add_due_item(api, &alice, "first").await;
    let attempts = finished(api, &alice, 1).await;
    assert_eq!(attempts[0]["tag"], "PushTriggerAttempt");
    assert_eq!(attempts[0]["contents"][1]["tag"], "PushResultError");
    let info = api
        .get(&format!("/trigger/info/{trigger}"), &alice)
        .await
        .expect_json(200);
    assert_eq!(info["info"]["typedTriggerInfoValue"]["pushTriggerInfoExpired"], true);
    assert_eq!(service.all_requests().len(), 1, "no retry of a gone subscription");

    add_due_item(api, &alice, "second").await;
    wait_for("the second item triggered", || async {
        (api.tickles(&alice, Some("onlytriggered")).await.len() == 2).then_some(())
    })
    .await;
    server
        .settle(&[Worker::TriggeredInboxItemScheduler, Worker::TriggeredInboxItemSender])
        .await;
    assert_eq!(service.all_requests().len(), 1, "an expired trigger receives nothing");
    let items = api.tickles(&alice, Some("onlytriggered")).await;
    let second = items
        .iter()
        .find(|i| i["contents"]["content"] == "second")
        .expect("second");
    assert_eq!(second["triggered"]["triggeredInfoTriggerTriggerAttempts"], json!([]));

    // the device subscribes again: the same trigger, no longer expired
    let renewed = Subscriber::new();
    let again = subscribe(
        api,
        &alice,
        &renewed.subscription(&format!("{}/push/gone", service.url())),
    )
    .await;
    assert_eq!(again, trigger);
    let info = api
        .get(&format!("/trigger/info/{trigger}"), &alice)
        .await
        .expect_json(200);
    assert_eq!(info["info"]["typedTriggerInfoValue"]["pushTriggerInfoExpired"], false);
    add_due_item(api, &alice, "third").await;
    wait_for("the third item pushed", || async {
        (service.all_requests().len() == 2).then_some(())
    })
    .await;
    let message = renewed.decrypt(&service.all_requests()[1].bytes);
    assert_eq!(message["body"], "third", "with the new keys");
}

/// §7.4, §7.6: 429 (with `Retry-After`) and 5xx are retried with the same `Topic` (the push
/// service replaces the earlier copy), then the success is recorded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn throttled_and_failing_push_services_are_retried() {
    let service = push_service(|n| match n {
        0 => Answer::Reply(429, vec![("retry-after", "1".into())], String::new()),
        1 => Answer::Reply(503, vec![], String::new()),
        _ => created(),
    })
    .await;
    let server = Server::start_scheduler().await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let phone = Subscriber::new();
    let trigger = subscribe(api, &alice, &phone.subscription(&format!("{}/p", service.url()))).await;
    add_due_item(api, &alice, "retried").await;
    let attempts = finished(api, &alice, 1).await;
    assert_eq!(
        attempts[0],
        json!({"tag": "PushTriggerAttempt", "contents": [trigger, {"tag": "PushResultSent"}]})
    );
    let sent = service.all_requests();
    assert_eq!(sent.len(), 3);
    let topics: Vec<_> = sent
        .iter()
        .map(|r| r.headers["topic"].to_str().unwrap().to_owned())
        .collect();
    assert!(topics.iter().all(|t| *t == topics[0]), "one Topic: {topics:?}");
    for r in &sent {
        assert_eq!(phone.decrypt(&r.bytes)["body"], "retried");
    }
}

/// §6.4: what a subscription must be (400 otherwise, nothing stored), an `http` endpoint
/// only to a loopback or private address, the same endpoint renewing its trigger, and at
/// most 20 push triggers (429 for the 21st).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subscriptions_are_checked_renewed_and_bounded() {
    let server = Server::start_scheduler_with(|s| {
        s.outbound_resolve = vec![("push.public.test".into(), "8.8.8.8".parse().unwrap())];
    })
    .await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let phone = Subscriber::new();
    let good = phone.subscription("https://push.example.net/wpush/1");
    let mut bad = Vec::new();
    for endpoint in [
        "ftp://push.example.net/x",
        "https://user:pw@push.example.net/x",
        "https://push.example.net/x#f",
        "push.example.net/x",
        "http://push.public.test/x",
    ] {
        bad.push(phone.subscription(endpoint));
    }
    let mut with_keys = |p256dh: Value, auth: Value| {
        bad.push(json!({"endpoint": "https://push.example.net/x", "keys": {"p256dh": p256dh, "auth": auth}}));
    };
    with_keys(json!("BAAA"), good["keys"]["auth"].clone());
    with_keys(json!(URL_SAFE_NO_PAD.encode([4u8; 65])), good["keys"]["auth"].clone());
    with_keys(good["keys"]["p256dh"].clone(), json!("AAAA"));
    with_keys(good["keys"]["p256dh"].clone(), json!(null));
    bad.push(json!({"endpoint": "https://push.example.net/x"}));
    bad.push(json!(["not", "an", "object"]));
    for body in &bad {
        let error = api.post("/trigger/push", &alice, body).await.expect_error(400);
        assert!(!error.is_empty(), "{body}");
    }
    assert_eq!(
        api.get("/trigger", &alice).await.expect_json(200),
        json!([]),
        "nothing stored"
    );
    api.post("/trigger/push", &Auth::None, &good).await.expect_error(401);

    let first = subscribe(api, &alice, &good).await;
    // padded base64url too, and an http endpoint on loopback
    let mut padded = phone.subscription("http://127.0.0.1:9/push");
    padded["keys"]["auth"] = json!(format!("{}==", padded["keys"]["auth"].as_str().unwrap()));
    subscribe(api, &alice, &padded).await;
    assert_eq!(subscribe(api, &alice, &good).await, first, "the same endpoint renews");
    for n in 2..20 {
        subscribe(
            api,
            &alice,
            &phone.subscription(&format!("https://push.example.net/more/{n}")),
        )
        .await;
    }
    let over = api
        .post(
            "/trigger/push",
            &alice,
            &phone.subscription("https://push.example.net/21st"),
        )
        .await
        .expect_error(429);
    assert!(over.contains("20"), "{over}");
    assert_eq!(subscribe(api, &alice, &good).await, first, "a renewal is not one more");
    let all = api.get("/trigger", &alice).await.expect_json(200);
    assert_eq!(all.as_array().unwrap().len(), 20);
    // another account has its own 20
    let bob = api.user("bob").await;
    subscribe(api, &bob, &good).await;
}

/// The key pair is made once and kept: the same public key after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_push_key_stays_across_restarts() {
    let server = Server::start_scheduler().await;
    let before = push_key(&server.scheduler).await;
    let server = server.restart().await;
    assert_eq!(push_key(&server.scheduler).await, before);
}

/// §6.5, §7.7: a `text` webhook (ntfy) gets the content as the body with a `Title`, a
/// `json` one (Gotify) the JSON object, both with the delivery's `Idempotency-Key`; the
/// trigger shows its URL with the query (a token) hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn webhooks_get_text_or_json() {
    let receiver = ScriptedInbox::start(|_| Answer::Reply(200, vec![], "{}".into())).await;
    let server = Server::start_scheduler().await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let text_url = format!("{}/my-reminders", receiver.url());
    let json_url = format!("{}/message?token=s3cret", receiver.url());
    let text = api
        .post("/trigger/webhook", &alice, &json!({"addWebhookTriggerUrl": text_url}))
        .await
        .expect_json(200);
    let gotify = api
        .post(
            "/trigger/webhook",
            &alice,
            &json!({"addWebhookTriggerUrl": json_url, "addWebhookTriggerFormat": "json"}),
        )
        .await
        .expect_json(200);
    let listed = api.get("/trigger", &alice).await.expect_json(200);
    assert_eq!(
        listed[1],
        json!({"uuid": gotify, "info": {"typedTriggerInfoType": "webhook", "typedTriggerInfoValue": {
            "webhookTriggerInfoUrl": format!("{}/message?…", receiver.url()), "webhookTriggerInfoFormat": "json"}}})
    );
    assert!(!listed.to_string().contains("s3cret"), "the token is never shown");
    assert_eq!(
        listed[0]["info"]["typedTriggerInfoValue"]["webhookTriggerInfoFormat"],
        "text"
    );
    for bad in [
        json!({"addWebhookTriggerUrl": "ftp://x.org/a"}),
        json!({"addWebhookTriggerUrl": "http://u:p@x.org/a"}),
        json!({"addWebhookTriggerUrl": "http://x.org/a#f"}),
        json!({"addWebhookTriggerUrl": format!("http://x.org/{}", "a".repeat(2048))}),
        json!({"addWebhookTriggerUrl": "http://x.org/a", "addWebhookTriggerFormat": "xml"}),
        json!({"addWebhookTriggerUrl": 5}),
        json!({}),
    ] {
        api.post("/trigger/webhook", &alice, &bad).await.expect_error(400);
    }

    add_due_item(api, &alice, "Take out the bins").await;
    let (item, attempts) = attempts_of_the_item(api, &alice, 2).await;
    assert_eq!(
        attempts,
        [
            json!({"tag": "WebhookTriggerAttempt", "contents": [text, {"tag": "WebhookResultSent"}]}),
            json!({"tag": "WebhookTriggerAttempt", "contents": [gotify, {"tag": "WebhookResultSent"}]}),
        ]
    );
    let ntfy = receiver.requests("POST", "/my-reminders");
    assert_eq!(ntfy.len(), 1);
    let h = |r: &Seen, name: &str| r.headers[name].to_str().unwrap().to_owned();
    assert_eq!(h(&ntfy[0], "content-type"), "text/plain; charset=utf-8");
    assert_eq!(h(&ntfy[0], "title"), "Reminder");
    assert_eq!(ntfy[0].body, "Take out the bins");
    assert!(uuid::Uuid::parse_str(&h(&ntfy[0], "idempotency-key")).is_ok());
    let got = receiver.requests("POST", "/message");
    assert_eq!(got.len(), 1);
    assert_eq!(h(&got[0], "content-type"), "application/json");
    let body: Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(keys(&body), ["due", "item", "message", "title"]);
    assert_eq!(
        (body["title"].as_str(), body["message"].as_str()),
        (Some("Reminder"), Some("Take out the bins"))
    );
    assert_eq!(body["item"], item["id"]);
}

/// The no-oracle rule (§7.6–§7.7): what the owner reads of a failed webhook on a loopback or
/// private address does not tell its services apart (no status, no cause); a closed port
/// and a 404 read alike but for the host, and nothing says which is which.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failures_on_the_lan_tell_a_stranger_nothing() {
    let not_found = ScriptedInbox::start(|_| Answer::Reply(404, vec![], "not here".into())).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let server = Server::start_scheduler_with(|s| s.looper_retry_amount = 1).await;
    let api = &server.scheduler;
    let mallory = api.user("mallory").await;
    for url in [
        format!("{}/probe", not_found.url()),
        format!("http://127.0.0.1:{closed}/probe"),
    ] {
        api.post("/trigger/webhook", &mallory, &json!({"addWebhookTriggerUrl": url}))
            .await
            .expect_json(200);
    }
    add_due_item(api, &mallory, "probe").await;
    let (_, attempts) = attempts_of_the_item(api, &mallory, 2).await;
    let reasons: Vec<String> = attempts
        .iter()
        .map(|a| {
            assert_eq!(a["contents"][1]["tag"], "WebhookResultError");
            a["contents"][1]["contents"].as_str().unwrap().to_owned()
        })
        .collect();
    for reason in &reasons {
        for told in ["404", "Not Found", "refused", "onnection", "not here"] {
            assert!(!reason.contains(told), "{reason:?} tells {told:?}");
        }
    }
    assert_eq!(reasons[0], reasons[1], "a 404 and a closed port read the same");
}

/// Decrypting needs the subscriber's own keys: another subscriber cannot read the message
/// (the push service cannot either).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_subscriber_can_read_the_message() {
    let service = push_service(|_| created()).await;
    let server = Server::start_scheduler().await;
    let api = &server.scheduler;
    let alice = api.user("alice").await;
    let phone = Subscriber::new();
    subscribe(api, &alice, &phone.subscription(&format!("{}/p", service.url()))).await;
    add_due_item(api, &alice, "secret plans").await;
    finished(api, &alice, 1).await;
    let body = &service.all_requests()[0].bytes;
    assert!(!String::from_utf8_lossy(body).contains("secret plans"));
    let stranger = Subscriber {
        auth: phone.auth,
        ..Subscriber::new()
    };
    let auth = web_push_native::Auth::from(stranger.auth);
    assert!(web_push_native::decrypt(body.clone(), &stranger.secret, &auth).is_err());
}
