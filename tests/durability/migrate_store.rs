//! `pigeonhole migrate-store` (issue 21 point 4): a person who outgrows the Pi moves the
//! whole database from sled into PostgreSQL and back, keeping every item, key and
//! password, checked by counts and a digest; a target with data is refused; a copy that
//! fails midway leaves the target without a database. Real binaries on a throwaway cluster;
//! without PostgreSQL the tests skip loudly (CI requires it).

use crate::common;

use common::postgres::Cluster;
use common::process::{failed, succeeded, Proc, Services};
use common::scheduler::{add_inbox_trigger, tickle, utc_ago, wait_for};
use common::Auth;
use serde_json::Value;
use std::path::Path;
use std::process::Output;

const FAST: [&str; 4] = ["--looper-period", "1", "--looper-retry-delay-us", "100000"];

fn migrate(from: &str, to: &str) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args(["migrate-store", "--from", from, "--to", to])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pigeonhole migrate-store")
}

/// A server on the data directory `dir`, on sled or on `--database url`.
async fn server(dir: &Path, logs: &Path, database: Option<&str>) -> Proc {
    let mut args: Vec<&str> = FAST.to_vec();
    if let Some(url) = database {
        args.extend(["--database", url]);
    }
    Proc::start(dir, logs, Services::Both, &args).await
}

/// Both services' exports of one person's accounts.
async fn exports(p: &Proc, inbox: &Auth, scheduler: &Auth) -> (Value, Value) {
    (
        p.api.get("/account/export", inbox).await.expect_json(200),
        p.scheduler.get("/account/export", scheduler).await.expect_json(200),
    )
}

/// The digest line of a migrate-store report.
fn digest_of(report: &str) -> String {
    report
        .lines()
        .find(|l| l.contains("digest (SHA-256)"))
        .unwrap_or_else(|| panic!("no digest in the report:\n{report}"))
        .trim()
        .to_owned()
}

/// What a person had on the Pi: inbox items (one added by a delivery from the scheduler,
/// with its idempotency key), an access key, scheduled reminders with a time zone, a
/// triggered one with its delivery attempt, an inbox trigger. Answers the credentials.
async fn a_persons_data(p: &Proc) -> (Auth, Auth, String) {
    let inbox = p.api.user("carol").await;
    p.api.add_text(&inbox, "kept through every move").await;
    p.api.add_text(&inbox, "and this one").await;
    let (secret, _) = p
        .api
        // names are any text (issue 29 point 1: NUL and escapes, which PostgreSQL's text
        // cannot hold, move too)
        .add_key(
            &inbox,
            "phone\u{0}\u{1b}[31m",
            &["PermitAdd", "PermitGetItems", "PermitSize"],
        )
        .await;
    let scheduler = p.scheduler.user("carol").await;
    let zone = serde_json::json!({"timezone": {"offset": 60, "name": "Zürich\u{0}", "summer": false}});
    let put = p
        .scheduler
        .request(reqwest::Method::PUT, "/account/settings", &scheduler)
        .json(&zone);
    p.scheduler.send(put).await.expect_empty(200);
    p.scheduler
        .add_tickle(
            &scheduler,
            &tickle(
                "every other day",
                "2099-03-01",
                Some("08:00"),
                Some(common::scheduler::every_days(2, Some("08:00"))),
            ),
        )
        .await;
    add_inbox_trigger(&p.scheduler, &scheduler, &p.api.url(""), "carol", &secret).await;
    let (day, time) = utc_ago(120);
    p.scheduler
        .add_tickle(&scheduler, &tickle("due already", &day, Some(&time), None))
        .await;
    // the due reminder triggers and is delivered into carol's inbox
    wait_for("the due reminder's delivery into the inbox", || async {
        (p.api.size(&inbox).await == 3).then_some(())
    })
    .await;
    (inbox, scheduler, secret)
}

/// sled → PostgreSQL → sled: each server on the copy shows the same exports, the old
/// token, the password and the access key all still work; a copy of a copy reports the
/// same digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sled_to_postgresql_and_back_keeps_every_item_key_and_password() {
    let Some(cluster) = Cluster::start_or_skip("sled_to_postgresql_and_back_keeps_every_item_key_and_password") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let dirs = tempfile::tempdir().expect("temporary directory");
    let pi = dirs.path().join("pi");
    let p = server(&pi, dirs.path(), None).await;
    let (inbox, scheduler, secret) = a_persons_data(&p).await;
    let before = exports(&p, &inbox, &scheduler).await;
    p.stop().await;

    let there = succeeded(&migrate(pi.to_str().expect("utf-8"), &url));
    assert!(there.contains("inbox items"), "{there}");
    let hosted = dirs.path().join("hosted");
    let p = server(&hosted, dirs.path(), Some(&url)).await;
    assert!(
        !hosted.join("db").exists(),
        "the copy is in the database, not a new sled one"
    );
    assert_eq!(
        exports(&p, &inbox, &scheduler).await,
        before,
        "the token made on the Pi works"
    );
    let by_key = Auth::key("carol", &secret);
    assert_eq!(p.api.size(&by_key).await, 3, "the access key works");
    p.api.login_ok("carol", "carol-password").await;
    p.scheduler.login_ok("carol", "carol-password").await;
    p.stop().await;

    let back_dir = dirs.path().join("back");
    let back = succeeded(&migrate(&url, back_dir.to_str().expect("utf-8")));
    // the servers on PostgreSQL changed things (logins), so the digest is new; copied on
    // once more, untouched, it stays the same
    let again = succeeded(&migrate(
        back_dir.to_str().expect("utf-8"),
        &cluster.url(&cluster.fresh_database()),
    ));
    assert_eq!(digest_of(&again), digest_of(&back), "{back}\n{again}");
    let p = server(&back_dir, dirs.path(), None).await;
    assert_eq!(exports(&p, &inbox, &scheduler).await, before);
    assert_eq!(p.api.size(&by_key).await, 3);
    let fresh = p.api.login_ok("carol", "carol-password").await;
    p.api.add_text(&fresh, "written after the move").await;
    assert_eq!(p.api.size(&fresh).await, 4);
    p.stop().await;
}

/// A target that holds data is refused (exit status 1, naming why) and stays as it was; a
/// source a server runs on is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_with_data_or_a_running_source_is_refused() {
    let Some(cluster) = Cluster::start_or_skip("a_target_with_data_or_a_running_source_is_refused") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let dirs = tempfile::tempdir().expect("temporary directory");
    let pi = dirs.path().join("pi");
    let p = server(&pi, dirs.path(), None).await;
    let pi_user = p.api.user("dave").await;
    p.api.add_text(&pi_user, "on the Pi").await;
    // running: its directory is locked
    let refused = failed(&migrate(pi.to_str().expect("utf-8"), &url));
    assert!(refused.contains("cannot copy"), "{refused}");
    p.stop().await;

    let hosted = dirs.path().join("hosted");
    let h = server(&hosted, dirs.path(), Some(&url)).await;
    let hosted_user = h.api.user("erin").await;
    h.api.add_text(&hosted_user, "already hosted").await;
    h.stop().await;
    let refused = failed(&migrate(pi.to_str().expect("utf-8"), &url));
    assert!(
        refused.contains("not empty") && refused.contains("inbox_accounts"),
        "{refused}"
    );
    // and the other way: a data directory with a database
    let refused = failed(&migrate(&url, pi.to_str().expect("utf-8")));
    assert!(refused.contains("not empty"), "{refused}");

    let h = server(&hosted, dirs.path(), Some(&url)).await;
    assert_eq!(h.api.size(&hosted_user).await, 1, "the target is as it was");
    h.stop().await;
    let p = server(&pi, dirs.path(), None).await;
    assert_eq!(p.api.size(&pi_user).await, 1);
    p.stop().await;
}

/// A copy that fails midway (a record the target cannot hold, after many it took) leaves
/// the target without a database: neither a half-built one nor the signing key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_fails_midway_leaves_the_target_empty() {
    let Some(cluster) = Cluster::start_or_skip("a_copy_that_fails_midway_leaves_the_target_empty") else {
        return;
    };
    let db = cluster.fresh_database();
    let url = cluster.url(&db);
    let dirs = tempfile::tempdir().expect("temporary directory");
    let h = server(&dirs.path().join("hosted"), dirs.path(), Some(&url)).await;
    let user = h.api.user("frank").await;
    for n in 0..50 {
        h.api.add_text(&user, &format!("item {n}")).await;
    }
    h.stop().await;
    // an idempotency key longer than sled keeps (another version, or a hand, wrote it)
    cluster
        .psql(
            &db,
            &format!(
                "INSERT INTO inbox_idempotency_keys (account, idempotency_key, item) \
                 SELECT id, '{}', gen_random_uuid() FROM inbox_accounts",
                "k".repeat(300)
            ),
        )
        .expect("psql");
    let target = dirs.path().join("pi");
    let refused = failed(&migrate(&url, target.to_str().expect("utf-8")));
    assert!(
        refused.contains("idempotency key") && refused.contains("300 bytes"),
        "{refused}"
    );
    assert!(!target.join("db").exists(), "a database was left in the target");
    assert!(!target.join(".migrating").exists(), "a half-built database was left");
    assert!(!target.join("signing.key").exists(), "the signing key was written");

    // the same data, without it, copies: the failure was that record
    cluster
        .psql(
            &db,
            "DELETE FROM inbox_idempotency_keys WHERE length(idempotency_key) > 200",
        )
        .expect("psql");
    succeeded(&migrate(&url, target.to_str().expect("utf-8")));
    let p = server(&target, dirs.path(), None).await;
    assert_eq!(p.api.size(&user).await, 50);
    p.stop().await;
}
