//! A PostgreSQL database that goes away while the server runs (issue 30 point 4): requests
//! answer 503 with `Retry-After` and a JSON error, not 500, and the same requests succeed
//! once the database is back, without restarting the server.

mod common;

use common::postgres::Cluster;
use common::{text_item, Resp, Server};
use std::time::Duration;

/// How long the server may take to connect again once the database is back.
const RECONNECT: Duration = Duration::from_secs(30);

#[track_caller]
fn assert_unreachable(answer: Resp, what: &str) {
    let retry_after = answer.header("retry-after").map(str::to_owned);
    let reason = answer.expect_error(503);
    assert_eq!(
        reason, "the database cannot be reached at the moment: try again later",
        "{what}"
    );
    let secs: u64 = retry_after
        .unwrap_or_else(|| panic!("{what}: a 503 without Retry-After"))
        .parse()
        .expect("Retry-After in seconds");
    assert!(secs > 0 && secs <= 60, "{what}: Retry-After {secs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stops_answers_503_with_retry_after_until_it_is_back() {
    let test = "a_database_that_stops_answers_503_with_retry_after_until_it_is_back";
    let Some(cluster) = Cluster::start_or_skip(test) else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let server = Server::start_with(|s| {
        s.database = Some(pigeonhole::config::DatabaseUrl::parse(&url).expect("the cluster's URL"));
    })
    .await;
    let alice = server.user("alice").await;
    let kept = server.add_text(&alice, "written before the outage").await;

    cluster.stop_now().expect("stop the database");
    // an authenticated read and a write, each twice (the second on whatever the pool has
    // left after the first found its connections broken)
    for _ in 0..2 {
        assert_unreachable(server.get("/inbox/uuids", &alice).await, "a read");
        assert_unreachable(
            server
                .post("/inbox/item", &alice, &text_item("during the outage"))
                .await,
            "a write",
        );
    }

    cluster.restart().expect("start the database again");
    // the same server connects again by itself: the first read that does not find the
    // database unreachable answers the data, and the write then succeeds
    let deadline = tokio::time::Instant::now() + RECONNECT;
    let listed = loop {
        let answer = server.get("/inbox/uuids", &alice).await;
        if answer.status != 503 {
            break answer.expect_json(200);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server did not reach the database again within {RECONNECT:?}: {}",
            answer.text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed, serde_json::json!([kept]), "the read after the outage");
    let added = server.add_text(&alice, "written after the outage").await;
    let mut all = server.uuids(&alice).await;
    all.sort();
    let mut expected = vec![kept, added];
    expected.sort();
    assert_eq!(all, expected, "nothing written during the outage, the later write kept");
    server.stop().await;
}
