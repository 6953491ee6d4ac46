//! Claims that move on in seconds (issue 30 point 3): two server processes on one
//! PostgreSQL database deliver 200 reminders to an inbox that answers slowly, each process
//! holding at most the deliveries it runs (4 to one host), never everything it read; one
//! is killed with `kill -9` in the middle, and the survivor, with the default lease (20 s,
//! renewed by each live process's heartbeat) and the default looper period (60 s), finishes
//! them all within 30 s of the kill: it wakes when the dead process's claims run out, not a
//! period later. Each reminder lands in the inbox once. Delivery is at least once toward
//! the network (scheduler.md §7.5): a request that was in flight at the kill may be sent
//! again, with the same `Idempotency-Key`, which the Pigeonhole inbox keeps once; so the
//! test asserts that the inbox holds each item once, and that only requests unanswered at
//! the kill were sent twice. And a delivery that takes several leases is not taken over
//! while its process lives (the heartbeat renews its claim).

use crate::common;

use super::processes::{assert_each_once, due_at, target_inbox, wait_delivered, Proxy, DELIVERED_WITHIN};
use common::postgres::Cluster;
use common::process::{Proc, Services};
use common::scheduler::{add_inbox_trigger, wait_for_within};
use common::{Api, Auth};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long the inbox's answer to an added item takes (through the proxy): 8 deliveries
/// in flight at a time (4 per process to one host) then take several seconds for 200.
const SLOW: Duration = Duration::from_millis(300);

/// What the survivor has to finish within, from the kill.
const TAKEN_OVER_WITHIN: Duration = Duration::from_secs(30);

/// The deliveries one process may run at once to one host (src/loopers/delivery.rs).
const PER_HOST: usize = 4;

/// A server process on the database `url` with the default lease and looper period.
async fn process(url: &str, dirs: &TempDir) -> Proc {
    let data = tempfile::tempdir_in(dirs.path()).expect("a data directory").keep();
    Proc::start(&data, dirs.path(), Services::Both, &["--database", url]).await
}

/// How many triggered items the planner has.
async fn triggered(scheduler: &Api, planner: &Auth) -> usize {
    let v = scheduler
        .get("/scheduler/items?filter=onlytriggered", planner)
        .await
        .expect_json(200);
    v.as_array().expect("items").len()
}

/// The pending deliveries each process holds now (by claimant).
fn claims(cluster: &Cluster, db: &str) -> BTreeMap<String, usize> {
    let out = cluster
        .psql(
            db,
            "SELECT claimed_by, count(*) FROM deliveries WHERE claimed_by IS NOT NULL GROUP BY claimed_by",
        )
        .expect("psql");
    out.lines()
        .filter_map(|l| l.split_once('|'))
        .map(|(who, n)| (who.to_owned(), n.parse().expect("a count")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_takes_over_a_killed_processs_deliveries_within_seconds() {
    let Some(cluster) = Cluster::start_or_skip("a_survivor_takes_over_a_killed_processs_deliveries") else {
        return;
    };
    let cluster = Arc::new(cluster);
    let db = cluster.fresh_database();
    let url = cluster.url(&db);
    let dirs = tempfile::tempdir().expect("temporary directory");
    let (target, credentials, collector) = target_inbox(&dirs).await;
    let proxy = Proxy::slow(target.api.url(""), SLOW).await;
    let (killed, survivor) = (process(&url, &dirs).await, process(&url, &dirs).await);
    survivor
        .scheduler
        .register("planner", "plans things")
        .await
        .expect_registered();
    let planner = survivor.scheduler.login_ok("planner", "plans things").await;
    add_inbox_trigger(&killed.scheduler, &planner, &proxy.url, &credentials.0, &credentials.1).await;
    // all due at one second, a little after they are all added
    let at = time::OffsetDateTime::now_utc() + time::Duration::seconds(15);
    let items = (0..200).map(|n| format!("reminder {n:03}")).collect::<Vec<_>>();
    for (n, text) in items.iter().enumerate() {
        let through = if n % 2 == 0 { &killed } else { &survivor };
        through.scheduler.add_tickle(&planner, &due_at(text, at)).await;
    }
    // the claims, watched all along: no process ever holds more than it runs
    let watching = Arc::new(AtomicBool::new(true));
    let (most, both) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
    let watcher = {
        let (cluster, db, watching, most, both) = (
            cluster.clone(),
            db.clone(),
            watching.clone(),
            most.clone(),
            both.clone(),
        );
        tokio::task::spawn_blocking(move || {
            let mut seen = Vec::new();
            while watching.load(Ordering::SeqCst) {
                let now = claims(&cluster, &db);
                most.fetch_max(now.values().copied().max().unwrap_or(0), Ordering::SeqCst);
                if now.len() == 2 {
                    both.store(true, Ordering::SeqCst);
                }
                seen.push(now);
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        })
    };
    // every reminder triggered, some delivered, both processes delivering: the kill
    wait_for_within(
        DELIVERED_WITHIN,
        "200 triggered, 40 delivered, both processes delivering",
        || async {
            let delivered = proxy.added.lock().unwrap().len();
            let ready =
                delivered >= 40 && both.load(Ordering::SeqCst) && triggered(&survivor.scheduler, &planner).await == 200;
            ready.then_some(())
        },
    )
    .await;
    killed.kill_9();
    let killed_at = Instant::now();
    // what the killed process had sent and not had answered (the proxy answers each one
    // `SLOW` late, so it still holds them), and what it held
    let in_flight_at_kill = proxy.unanswered.lock().unwrap().clone();
    let claims_at_kill = claims(&cluster, &db);
    let delivered_at_kill = proxy.added.lock().unwrap().len();
    wait_delivered(&survivor.scheduler, &planner, items.len()).await;
    let took = killed_at.elapsed();
    watching.store(false, Ordering::SeqCst);
    let seen = watcher.await.expect("the watcher");
    eprintln!(
        "the survivor finished {} deliveries {took:?} after the kill ({} requests in flight then; \
         claims then: {claims_at_kill:?})",
        items.len() - delivered_at_kill,
        in_flight_at_kill.len()
    );
    assert!(
        took <= TAKEN_OVER_WITHIN,
        "the survivor took {took:?} after the kill (at most {TAKEN_OVER_WITHIN:?}):\n{}",
        survivor.log_text()
    );
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= PER_HOST,
        "a process held {most} deliveries at once, more than it runs ({PER_HOST}); claims seen: {:?}",
        seen.iter().find(|c| c.values().any(|n| *n > PER_HOST))
    );
    assert!(seen.len() > 10, "the claims were watched: {} looks", seen.len());
    // each once in the inbox; sent twice only what was in flight at the kill
    assert_each_once(&target.api, &collector, &items).await;
    let added = proxy.added.lock().unwrap().clone();
    assert_eq!(added.len(), items.len(), "one key per delivery");
    let twice: Vec<_> = added.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.iter().all(|(k, n)| **n == 2 && in_flight_at_kill.contains(*k)),
        "sent again though not in flight at the kill: {twice:?} (in flight: {in_flight_at_kill:?})"
    );
}

/// A delivery that takes longer than several leases is not taken over while its process
/// lives: the heartbeat renews its claim. Two processes with a lease of one second, an inbox
/// that answers each added item four seconds late: each delivery is requested once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_processs_slow_delivery_is_not_taken_over() {
    let Some(cluster) = Cluster::start_or_skip("a_live_processs_slow_delivery_is_not_taken_over") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let dirs = tempfile::tempdir().expect("temporary directory");
    let (target, credentials, collector) = target_inbox(&dirs).await;
    let proxy = Proxy::slow(target.api.url(""), Duration::from_secs(4)).await;
    let mut ps = Vec::new();
    for _ in 0..2 {
        let data = tempfile::tempdir_in(dirs.path()).expect("a data directory").keep();
        let args = [
            "--database",
            url.as_str(),
            "--database-lease-secs",
            "1",
            "--looper-period",
            "1",
        ];
        ps.push(Proc::start(&data, dirs.path(), Services::Both, &args).await);
    }
    ps[0]
        .scheduler
        .register("planner", "plans things")
        .await
        .expect_registered();
    let planner = ps[0].scheduler.login_ok("planner", "plans things").await;
    add_inbox_trigger(&ps[1].scheduler, &planner, &proxy.url, &credentials.0, &credentials.1).await;
    let items = (0..3).map(|n| format!("slow one {n}")).collect::<Vec<_>>();
    let at = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    for (n, text) in items.iter().enumerate() {
        ps[n % 2].scheduler.add_tickle(&planner, &due_at(text, at)).await;
    }
    wait_delivered(&ps[0].scheduler, &planner, items.len()).await;
    assert_each_once(&target.api, &collector, &items).await;
    let added = proxy.added.lock().unwrap().clone();
    assert_eq!(added.len(), items.len());
    assert!(
        added.values().all(|n| *n == 1),
        "a delivery in flight was taken over and sent again: {added:?}"
    );
}
