//! Payments with a payment provider (inbox.md §4.4, scheduler.md §11): a fake
//! Stripe-compatible API on 127.0.0.1 (warp), the events fetcher recording customers, paid
//! accounts without the free-item limit, and 503 when the provider cannot be reached.

use crate::common;

use common::{test_plan, Auth, Server, Worker};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use warp::Filter;

/// The fake provider's state: events to list and whether subscriptions are active.
#[derive(Default)]
struct Provider {
    events: Vec<Value>,
    active: bool,
    /// Answer 500 to everything.
    down: bool,
    seen_auth: Vec<String>,
}

async fn start_provider(state: Arc<Mutex<Provider>>) -> (String, tokio::task::JoinHandle<()>) {
    let s1 = state.clone();
    let events = warp::path!("v1" / "events")
        .and(warp::header::optional::<String>("authorization"))
        .map(move |auth: Option<String>| {
            let mut st = s1.lock().unwrap();
            st.seen_auth.push(auth.unwrap_or_default());
            warp::reply::json(&json!({"data": st.events, "has_more": false}))
        });
    let s2 = state.clone();
    let subs = warp::path!("v1" / "subscriptions")
        .and(warp::query::raw())
        .map(move |q: String| {
            let st = s2.lock().unwrap();
            if st.down {
                let body = warp::reply::json(&json!({"error": {"message": "down"}}));
                return warp::reply::with_status(body, warp::http::StatusCode::INTERNAL_SERVER_ERROR);
            }
            let data = if st.active && q.contains("customer=cus_1") {
                json!([{"status": "active", "current_period_end": 4102444800i64, "plan": {"id": "plan_test"}},
                       {"status": "active", "current_period_end": 4200000000i64, "plan": {"id": "other_plan"}}])
            } else {
                json!([])
            };
            warp::reply::with_status(
                warp::reply::json(&json!({"data": data, "has_more": false})),
                warp::http::StatusCode::OK,
            )
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(warp::serve(events.or(subs)).incoming(listener).run());
    (format!("http://{addr}"), task)
}

async fn account(server: &Server, auth: &Auth) -> Value {
    server.get("/account", auth).await.expect_json(200)
}

#[tokio::test]
async fn a_paying_account_is_found_through_the_events_and_has_no_limit() {
    let state = Arc::new(Mutex::new(Provider::default()));
    let (url, _provider) = start_provider(state.clone()).await;
    let server = Server::start_with(|s| {
        s.payment_plan = Some(test_plan());
        s.max_items_free = 2;
        s.payment_secret_key = Some("sk_test_secret".into());
        s.payment_api_url = url.clone();
        s.looper_period = 1;
    })
    .await;
    let loopers = server.scheduler.get("/loopers", &Auth::None).await.expect_json(200);
    assert_eq!(
        loopers["paymentsEventsFetcherLooperInfo"]["looperInfoStatus"]["tag"],
        "LooperStatusRunning"
    );

    let payer = server.user("payer").await;
    let other = server.user("nonpayer").await;
    let payer_id = account(&server, &payer).await["uuid"].as_str().unwrap().to_owned();
    for i in 0..2 {
        server.add_text(&payer, &format!("free {i}")).await;
    }
    server
        .post("/inbox/item", &payer, &common::text_item("third"))
        .await
        .expect_error(402);
    assert_eq!(
        account(&server, &payer).await["status"],
        json!({"status": "not-paid", "items-left": 0})
    );

    {
        let mut st = state.lock().unwrap();
        st.active = true;
        st.events = vec![
            json!({"id": "evt_2", "data": {"object": {"mode": "payment", "client_reference_id": payer_id, "customer": "cus_9"}}}),
            json!({"id": "evt_1", "data": {"object": {"mode": "subscription", "client_reference_id": payer_id, "customer": "cus_1"}}}),
        ];
    }
    // a fetcher pass that starts now reads the events
    server.settle(&[Worker::PaymentsEventsFetcher]).await;
    let status = account(&server, &payer).await["status"].clone();
    assert_eq!(status, json!({"status": "paid", "until": "2100-01-01T00:00:00Z"}));
    server.add_text(&payer, "no longer limited").await;
    assert_eq!(
        account(&server, &other).await["status"],
        json!({"status": "not-paid", "items-left": 2})
    );
    assert!(state
        .lock()
        .unwrap()
        .seen_auth
        .iter()
        .all(|a| a == "Bearer sk_test_secret"));

    // the admin statistics count the subscriber
    let admin = server.user("admin").await;
    let stats = server.get("/admin/stats", &admin).await.expect_json(200);
    assert_eq!(stats["subscribed-users"], 1);

    // a subscription that ends makes the account limited again
    state.lock().unwrap().active = false;
    assert_eq!(
        account(&server, &payer).await["status"],
        json!({"status": "not-paid", "items-left": -1})
    );
    server
        .post("/inbox/item", &payer, &common::text_item("over"))
        .await
        .expect_error(402);
    server.stop().await;
}

#[tokio::test]
async fn a_failing_provider_is_503_for_accounts_with_a_customer() {
    let state = Arc::new(Mutex::new(Provider::default()));
    let (url, _provider) = start_provider(state.clone()).await;
    let server = Server::start_with(|s| {
        s.payment_plan = Some(test_plan());
        s.payment_secret_key = Some("sk".into());
        s.payment_api_url = url.clone();
        s.looper_period = 1;
    })
    .await;
    let payer = server.user("payer").await;
    let payer_id = account(&server, &payer).await["uuid"].as_str().unwrap().to_owned();
    state.lock().unwrap().events = vec![
        json!({"id": "evt_1", "data": {"object": {"mode": "subscription", "client_reference_id": payer_id, "customer": "cus_1"}}}),
    ];
    state.lock().unwrap().active = true;
    server.settle(&[Worker::PaymentsEventsFetcher]).await;
    assert_eq!(account(&server, &payer).await["status"]["status"], "paid");
    state.lock().unwrap().down = true;
    server.get("/account", &payer).await.expect_error(503);
    server
        .post("/inbox/item", &payer, &common::text_item("x"))
        .await
        .expect_error(503);
    assert_eq!(server.size(&payer).await, 0, "nothing was stored");
    // accounts without a customer do not need the provider
    let other = server.user("other").await;
    assert_eq!(account(&server, &other).await["status"]["status"], "not-paid");
    server.stop().await;
}
