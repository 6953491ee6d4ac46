//! A PostgreSQL database that freezes, is down at the start, or changes which host is primary
//! (issue 30): the server answers within its bounds meanwhile and carries on by itself after.
//! Each test has clusters of its own (stopped, frozen, made read-only), never the shared one.

mod common;

use common::postgres::Cluster;
use common::process::{Proc, Services};
use std::path::Path;
use std::time::{Duration, Instant};

/// A cluster's processes stopped with SIGSTOP (the postmaster first, so that it forks no
/// more, then its children): its sockets still take connections and bytes, nothing answers.
/// Dropped, even by a failing test, they go on (SIGCONT), so the cluster can be stopped.
struct Frozen(Vec<i32>);

impl Frozen {
    fn new(cluster: &Cluster) -> Frozen {
        let mut pids = cluster.processes();
        assert!(!pids.is_empty(), "no PostgreSQL process to freeze");
        let mut frozen = Frozen(Vec::new());
        // the postmaster, then its children as they are once it can fork no more
        let postmaster = pids.remove(0);
        frozen.stop(postmaster);
        for pid in cluster.processes().into_iter().filter(|p| *p != postmaster) {
            frozen.stop(pid);
        }
        frozen
    }

    fn stop(&mut self, pid: i32) {
        if signal(pid, libc::SIGSTOP) {
            self.0.push(pid);
        }
    }
}

/// Sends `signal` to `pid` (one of a test cluster's processes); whether it was sent.
fn signal(pid: i32, signal: libc::c_int) -> bool {
    #[expect(
        unsafe_code,
        reason = "std sends no signal but SIGKILL; freezing needs SIGSTOP and SIGCONT"
    )]
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is read from this test's
    // own cluster (its postmaster.pid, and the postmaster's children in /proc)
    let rc = unsafe { libc::kill(pid, signal) };
    rc == 0
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.0 {
            signal(*pid, libc::SIGCONT);
        }
    }
}

/// Temporary data and log directories for a server; kept as long as it runs.
struct Dirs {
    data: tempfile::TempDir,
    logs: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            data: tempfile::tempdir().expect("a data directory"),
            logs: tempfile::tempdir().expect("a log directory"),
        }
    }

    /// `pigeonhole serve --database url` with `more` settings, on these directories.
    async fn serve(&self, url: &str, more: &[&str]) -> Proc {
        let args: Vec<&str> = ["--database", url].iter().chain(more).copied().collect();
        Proc::start(self.data.path(), self.logs.path(), Services::Both, &args).await
    }
}

/// `GET path` with `auth`: the status and how long the answer took (`None`: no answer in a
/// minute, a hang).
async fn timed(server: &Proc, method: reqwest::Method, path: &str, auth: &common::Auth) -> (Option<u16>, Duration) {
    let started = Instant::now();
    let mut request = server.api.request(method.clone(), path, auth);
    if method == reqwest::Method::POST {
        request = request.json(&common::text_item("while frozen"));
    }
    let status = match tokio::time::timeout(Duration::from_secs(60), request.send()).await {
        Ok(Ok(r)) => Some(r.status().as_u16()),
        Ok(Err(e)) => panic!(
            "{path}: the request failed without an answer after {:?}: {e:?}\n{}",
            started.elapsed(),
            server.log_text()
        ),
        Err(_) => None,
    };
    (status, started.elapsed())
}

/// Waits (up to `within`) until `GET /healthz` answers 200; how long that took.
async fn healthy_within(server: &Proc, within: Duration) -> Duration {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Ok(r) = server.api.http.get(server.api.url("/healthz")).send().await {
            if r.status().as_u16() == 200 {
                return started.elapsed();
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    panic!("/healthz did not answer 200 within {within:?}:\n{}", server.log_text());
}

/// A frozen database (every process of its cluster SIGSTOPped): `/healthz` answers 503 within
/// a second each time, API requests answer an error within the configured bounds instead of
/// hanging; after SIGCONT everything works again without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_database_is_answered_within_bounds_and_used_again_after() {
    let Some(cluster) = Cluster::start_or_skip("a_frozen_database_is_answered_within_bounds_and_used_again_after")
    else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let dirs = Dirs::new();
    let server = dirs
        .serve(
            &url,
            &[
                "--database-statement-timeout-ms",
                "1000",
                "--database-lock-timeout-ms",
                "500",
                "--database-connect-timeout-secs",
                "1",
                "--database-pool-size",
                "4",
            ],
        )
        .await;
    let auth = server.api.user("dora").await;
    let before = server.api.add_text(&auth, "before the freeze").await;
    healthy_within(&server, Duration::from_secs(10)).await;

    let frozen = Frozen::new(&cluster);
    // the bound of one database call: a free connection (1 s), or a new one (1 s per host
    // and 1 s), then the reply (statement timeout 1 s and 2 s grace); and some slack
    let bound = Duration::from_secs(1 + 2 + 3 + 2);
    let mut seen = Vec::new();
    for round in 0..3 {
        let (status, took) = timed(&server, reqwest::Method::GET, "/healthz", &common::Auth::None).await;
        assert_eq!(
            status,
            Some(503),
            "/healthz round {round} while frozen answered {status:?}"
        );
        assert!(took < Duration::from_secs(1), "/healthz took {took:?} while frozen");
        seen.push(("GET /healthz", took));
        for (method, path) in [
            (reqwest::Method::GET, "/inbox/uuids"),
            (reqwest::Method::POST, "/inbox/item"),
        ] {
            let (status, took) = timed(&server, method.clone(), path, &auth).await;
            let status = status.unwrap_or_else(|| panic!("{method} {path} hung while frozen"));
            assert!(
                !(200..300).contains(&status),
                "{method} {path} answered {status} while frozen"
            );
            assert!(
                took < bound,
                "{method} {path} took {took:?} while frozen (bound {bound:?})"
            );
            seen.push((
                if method == reqwest::Method::GET {
                    "GET /inbox/uuids"
                } else {
                    "POST /inbox/item"
                },
                took,
            ));
        }
    }
    eprintln!("answers while frozen: {seen:?}");

    drop(frozen);
    let back = healthy_within(&server, Duration::from_secs(15)).await;
    let after = server.api.add_text(&auth, "after the freeze").await;
    let ids = server.api.uuids(&auth).await;
    assert!(ids.contains(&before) && ids.contains(&after), "{ids:?}");
    eprintln!("healthy again {back:?} after SIGCONT");
    server.stop().await;
}

/// The lines of every server log in `dir` (the starter writes one per attempt).
fn logs_in(dir: &Path) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
    }
    text
}

/// A server started while its database is down waits for it (saying so in its log) and
/// comes up once the database is started, within `--database-wait-secs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_before_its_database_comes_up_once_the_database_does() {
    let Some(cluster) = Cluster::start_or_skip("a_server_started_before_its_database_comes_up_once_the_database_does")
    else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    cluster.stop().expect("stop the cluster");
    let (data, logs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let args = ["--database", &url, "--database-wait-secs", "60"];
    let starting = Proc::try_start(data.path(), logs.path(), Services::Both, &args);
    let database = async {
        // the server says it waits (a line per try)
        let deadline = Instant::now() + Duration::from_secs(30);
        while !logs_in(logs.path()).contains("the database cannot be used yet") {
            assert!(
                Instant::now() < deadline,
                "no waiting in the log:\n{}",
                logs_in(logs.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll
        }
        cluster.start_again().expect("start the cluster again");
        Instant::now()
    };
    let (server, database_up) = tokio::join!(starting, database);
    let server = server.expect("the server starts once the database does");
    let took = database_up.elapsed();
    eprintln!("the server answered {took:?} after its database started");
    // the back-off's pause is at most 5 s
    assert!(took < Duration::from_secs(10), "{took:?}");
    let auth = server.api.user("erin").await;
    server.api.add_text(&auth, "kept").await;
    assert!(logs_in(logs.path()).contains("(try 1,"), "{}", logs_in(logs.path()));
    server.stop().await;
}

/// The wait at the start is bounded: a database that stays down stops the start after
/// `--database-wait-secs`, having tried more than once, with the error naming the database.
#[test]
fn a_database_that_stays_down_stops_the_start_after_the_wait() {
    let Some(cluster) = Cluster::start_or_skip("a_database_that_stays_down_stops_the_start_after_the_wait") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    cluster.stop().expect("stop the cluster");
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--database", &url, "--database-wait-secs", "2"])
        .env_remove("PIGEONHOLE_DATABASE")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pigeonhole");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot open the PostgreSQL database"), "{stderr}");
    assert!(stderr.contains("(try 2,"), "tried once only: {stderr}");
    assert!(took < Duration::from_secs(10), "gave up after {took:?}");
}

/// The key/value `--database` naming both clusters' sockets, in order, with
/// `target_session_attrs=read-write`.
fn read_write_url([first, second]: [&Cluster; 2], db: &str) -> String {
    format!(
        "host={},{} port={},{} dbname={db} user=postgres target_session_attrs=read-write",
        first.socket_dir().display(),
        second.socket_dir().display(),
        first.port(),
        second.port()
    )
}

/// With several hosts and `target_session_attrs=read-write`, the server uses the one that
/// takes writes, passing over a read-only one; when the roles swap (no restart of either),
/// the pool's connections to the host now read-only are not kept, and writes go to the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_whichever_host_takes_them() {
    let test = "writes_go_to_whichever_host_takes_them";
    let (Some(first), Some(second)) = (Cluster::start_or_skip(test), Cluster::start_or_skip(test)) else {
        return;
    };
    let read_only = |c: &Cluster, on: bool| {
        c.psql(
            "postgres",
            &format!("ALTER SYSTEM SET default_transaction_read_only = {on}"),
        )
        .expect("psql");
        c.psql("postgres", "SELECT pg_reload_conf()").expect("psql");
    };
    let dirs = Dirs::new();
    // both databases have the schema (the first's made by a server of its own, stopped)
    let db = first.fresh_database();
    assert_eq!(second.fresh_database(), db);
    dirs.serve(&first.url(&db), &[]).await.stop().await;
    read_only(&first, true);
    let server = dirs.serve(&read_write_url([&first, &second], &db), &[]).await;
    let on = |c: &Cluster, name: &str| {
        c.psql(
            &db,
            &format!("SELECT count(*) FROM inbox_accounts WHERE username = '{name}'"),
        )
        .unwrap_or_else(|e| e)
    };
    server.api.register("fay", "a passphrase").await.expect_registered();
    assert_eq!((on(&first, "fay"), on(&second, "fay")), ("0".into(), "1".into()));

    // the roles swap: the second host takes no writes any more, the first does
    read_only(&second, true);
    read_only(&first, false);
    let swapped = Instant::now();
    let deadline = swapped + Duration::from_secs(10);
    let mut tries = 0;
    loop {
        tries += 1;
        let status = server
            .api
            .post(
                "/register",
                &common::Auth::None,
                &serde_json::json!({"name": "gus", "password": "a passphrase"}),
            )
            .await
            .status;
        if (200..300).contains(&status) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no write taken 10 s after the swap:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    eprintln!(
        "writes taken again {:?} after the swap ({tries} tries)",
        swapped.elapsed()
    );
    assert_eq!((on(&first, "gus"), on(&second, "gus")), ("1".into(), "0".into()));
    server.stop().await;
}

/// Failover under load: a primary with a synchronous streaming standby, the server naming
/// both with `target_session_attrs=read-write`, writers adding items all along; the primary
/// is killed (every process, SIGKILL) and the standby promoted. Every write that was
/// acknowledged is there after, and writes are taken again within 10 s of the promotion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_synchronous_standby_loses_no_acknowledged_write() {
    use std::sync::{Arc, Mutex};
    let Some(primary) = Cluster::start_or_skip("failover_to_a_synchronous_standby_loses_no_acknowledged_write") else {
        return;
    };
    let began = Instant::now();
    let db = primary.fresh_database();
    let standby = primary.standby().expect("a standby");
    eprintln!("failover: the standby made in {:?}", began.elapsed());
    primary
        .psql("postgres", "ALTER SYSTEM SET synchronous_standby_names = '*'")
        .expect("psql");
    primary.psql("postgres", "SELECT pg_reload_conf()").expect("psql");
    let deadline = Instant::now() + Duration::from_secs(30);
    while primary
        .psql(
            "postgres",
            "SELECT string_agg(sync_state, ',') FROM pg_stat_replication",
        )
        .unwrap_or_default()
        != "sync"
    {
        assert!(
            Instant::now() < deadline,
            "the standby is not synchronous:\n{}",
            primary.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    let dirs = Dirs::new();
    let bounds = [
        "--database-statement-timeout-ms",
        "2000",
        "--database-connect-timeout-secs",
        "1",
    ];
    let server = dirs.serve(&read_write_url([&primary, &standby], &db), &bounds).await;
    let auth = server.api.user("hal").await;

    // writers: each adds items one after another; what was acknowledged (200 and an id),
    // and when the last write was taken
    let acknowledged = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let failed = Arc::new(Mutex::new(0u32));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut writers = Vec::new();
    for writer in 0..4 {
        let (api, auth) = (server.api.clone(), auth.clone());
        let (acknowledged, failed, stopped) = (acknowledged.clone(), failed.clone(), stopped.clone());
        writers.push(tokio::spawn(async move {
            let mut n = 0;
            while !*stopped.borrow() {
                n += 1;
                let r = api
                    .request(reqwest::Method::POST, "/inbox/item", &auth)
                    .json(&common::text_item(&format!("writer {writer} item {n}")))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().is_success() => {
                        let id: String = r.json().await.expect("an id");
                        acknowledged.lock().unwrap().push((id, Instant::now()));
                    }
                    _ => {
                        *failed.lock().unwrap() += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await; // pace the retries
                    }
                }
            }
        }));
    }
    let count = |a: &Arc<Mutex<Vec<(String, Instant)>>>| a.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&acknowledged) < 100 {
        assert!(Instant::now() < deadline, "no load:\n{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await; // poll
    }

    // the primary is lost, every process of it at once
    let killed = primary.processes();
    let killed_at = Instant::now();
    for pid in &killed {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    let before_promotion = count(&acknowledged);
    eprintln!("failover: the primary killed {:?} after the start", began.elapsed());
    standby.promote().expect("promote the standby");
    let promoted = Instant::now();
    let deadline = promoted + Duration::from_secs(10);
    let first_after = loop {
        let latest = acknowledged.lock().unwrap().iter().map(|(_, at)| *at).max();
        if let Some(at) = latest.filter(|at| *at > promoted) {
            break at;
        }
        assert!(
            Instant::now() < deadline,
            "no write taken within 10 s of the promotion:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await; // poll
    };
    let taken_after = first_after - promoted;
    // a little more load on the new primary, then stop
    let more = count(&acknowledged) + 50;
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&acknowledged) < more {
        assert!(Instant::now() < deadline, "the load stopped:\n{}", server.log_text());
        tokio::time::sleep(Duration::from_millis(20)).await; // poll
    }
    stop.send_replace(true);
    for w in writers {
        w.await.expect("a writer");
    }

    let stored: std::collections::HashSet<String> = server.api.uuids(&auth).await.into_iter().collect();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let lost: Vec<&String> = acknowledged
        .iter()
        .map(|(id, _)| id)
        .filter(|id| !stored.contains(*id))
        .collect();
    eprintln!(
        "failover: {} writes acknowledged ({before_promotion} before the promotion), {} failed meanwhile, \
         {} lost; writes taken again {taken_after:?} after the promotion, {:?} after the kill",
        acknowledged.len(),
        failed.lock().unwrap(),
        lost.len(),
        first_after - killed_at
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    server.stop().await;
}

/// How long the database is down in [`reminders_due_during_an_outage_arrive_once_soon_after_it`]
/// (issue 30: "the database stopped for 60 s under load").
const OUTAGE: Duration = Duration::from_secs(60);

/// When the first reminder comes due, from the start of the outage: the triggerer fails from
/// then on, trying again after 1, 2, 4, 8, 16 and 30 s (the default retry delay, doubling,
/// capped at `LONGEST_WORKER_WAIT`), so its last try before the return comes a moment
/// before the return, and without a wake-up it would wait a whole 30 s more. (Reminders
/// from the first second on make it try again about 2 s after the return: that hides it.)
const FIRST_DUE: Duration = Duration::from_secs(29);

/// How soon after the database's return every reminder that came due meanwhile has arrived.
const ARRIVED_WITHIN: Duration = Duration::from_secs(30);

/// Scheduler item contents due at `t` (to the second; the account's default offset is 0).
fn due_at(content: &str, t: time::OffsetDateTime) -> serde_json::Value {
    serde_json::json!({
        "content": content,
        "scheduled-day": format!("{:04}-{:02}-{:02}", t.year(), t.month() as u8, t.day()),
        "scheduled-time": format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
        "recurrence": null,
    })
}

/// The texts of the inbox items of `auth` at `target`, each with how many times it is there.
async fn texts(target: &common::Api, auth: &common::Auth) -> std::collections::BTreeMap<String, usize> {
    use base64::Engine;
    let v = target.get("/inbox/items", auth).await.expect_json(200);
    let mut texts = std::collections::BTreeMap::new();
    for item in v.as_array().expect("inbox items are an array") {
        let data = item["contents"]["data"].as_str().expect("an item's data");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64 data");
        *texts.entry(String::from_utf8(bytes).expect("a text item")).or_insert(0) += 1;
    }
    texts
}

/// The database stopped at once (`pg_ctl stop -m immediate`) for [`OUTAGE`] under load, with
/// reminders coming due all through it: requests meanwhile get errors (no hang), `/healthz`
/// answers 503 and shows the workers failing; once the database is started again, every
/// reminder that came due meanwhile lands in its target inbox within [`ARRIVED_WITHIN`],
/// each once, from the same server process (never restarted), and `/healthz` is 200 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_due_during_an_outage_arrive_once_soon_after_it() {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    let Some(cluster) = Cluster::start_or_skip("reminders_due_during_an_outage_arrive_once_soon_after_it") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    // the target inbox: a server of its own (sled), up all along, with an account whose
    // access key may add items
    let target_dirs = Dirs::new();
    let target = Proc::start(target_dirs.data.path(), target_dirs.logs.path(), Services::Both, &[]).await;
    let collector = target.api.user("collector").await;
    let (key, _) = target.api.add_key(&collector, "scheduler", &["PermitAdd"]).await;
    // the server on the database, with the default workers' settings
    let dirs = Dirs::new();
    let mut server = dirs.serve(&url, &["--database-connect-timeout-secs", "1"]).await;
    let pid = server.pid();
    let auth = server.api.user("ivy").await;
    server
        .scheduler
        .register("planner", "plans things")
        .await
        .expect_registered();
    let planner = server.scheduler.login_ok("planner", "plans things").await;
    common::scheduler::add_inbox_trigger(&server.scheduler, &planner, &target.api.url(""), "collector", &key).await;
    // 40 reminders due one after another through the outage, which begins at `stop_at` (a
    // whole second, as their times are): from FIRST_DUE on, so that the triggerer, failing
    // from the first one on with its back-off doubling from 1 s, makes its last try before
    // the return just before it: the worst case of a worker that waits out its back-off
    let now = time::OffsetDateTime::now_utc();
    let stop_wall = now.replace_nanosecond(0).expect("a whole second") + time::Duration::seconds(9);
    let stop_at = Instant::now() + Duration::try_from(stop_wall - now).expect("a later instant");
    let n = 40;
    let items: Vec<String> = (0..n).map(|i| format!("reminder {i:02}")).collect();
    let (first, last) = (FIRST_DUE.as_secs() as i64, OUTAGE.as_secs() as i64 - 2);
    for (i, text) in items.iter().enumerate() {
        let into = time::Duration::seconds(first + (i as i64) * (last - first) / (n as i64 - 1));
        server
            .scheduler
            .add_tickle(&planner, &due_at(text, stop_wall + into))
            .await;
    }
    assert!(
        Instant::now() + Duration::from_secs(1) < stop_at,
        "adding the reminders took too long to stop the database before they come due"
    );
    healthy_within(&server, Duration::from_secs(10)).await;
    tokio::time::sleep_until(stop_at.into()).await; // the planned start of the outage

    cluster.stop_now().expect("stop the database at once");
    let stopped = Instant::now();
    // load all through the outage: writers and readers (errors are expected, hangs not)
    let statuses = Arc::new(Mutex::new(BTreeMap::<String, usize>::new()));
    let (stop_load, load_stopped) = tokio::sync::watch::channel(false);
    let mut load = Vec::new();
    for user in 0..3 {
        let (api, auth, statuses, stopped) = (server.api.clone(), auth.clone(), statuses.clone(), load_stopped.clone());
        load.push(tokio::spawn(async move {
            let mut n = 0;
            while !*stopped.borrow() {
                n += 1;
                let request = match n % 2 {
                    0 => api.request(reqwest::Method::GET, "/inbox/uuids", &auth),
                    _ => api
                        .request(reqwest::Method::POST, "/inbox/item", &auth)
                        .json(&common::text_item(&format!("load {user} {n}"))),
                };
                let status = match tokio::time::timeout(Duration::from_secs(20), request.send()).await {
                    Ok(Ok(r)) => r.status().as_u16().to_string(),
                    Ok(Err(e)) => format!("failed: {e}"),
                    Err(_) => "no answer in 20 s".to_owned(),
                };
                *statuses.lock().unwrap().entry(status).or_insert(0) += 1;
                tokio::time::sleep(Duration::from_millis(50)).await; // pace the load
            }
        }));
    }
    // the health check meanwhile: 503, and the triggerer failing (or errored)
    let mut health = BTreeMap::<(u16, String), usize>::new();
    while stopped.elapsed() < OUTAGE {
        if let Ok(r) = server.api.http.get(server.api.url("/healthz")).send().await {
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap_or_default();
            let triggerer = body["workers"]["triggerer"]["status"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            *health.entry((status, triggerer)).or_insert(0) += 1;
        }
        tokio::time::sleep(Duration::from_millis(500)).await; // poll
    }
    cluster.start_again().expect("start the database again");
    let back = Instant::now();
    stop_load.send_replace(true);
    for l in load {
        l.await.expect("a load task");
    }
    let statuses = statuses.lock().unwrap().clone();
    eprintln!("outage: answers to the load {statuses:?}; /healthz (status, triggerer) {health:?}");
    assert!(
        statuses.keys().all(|s| !s.starts_with("no answer")),
        "requests hung during the outage: {statuses:?}"
    );
    assert!(
        statuses.keys().any(|s| s.starts_with('5')),
        "no request met the outage: {statuses:?}"
    );
    assert!(
        health.keys().all(|(status, _)| *status == 503),
        "/healthz was not 503 all through the outage: {health:?}"
    );
    assert!(
        health.keys().any(|(_, w)| w == "failing" || w == "errored"),
        "/healthz never showed the triggerer failing: {health:?}"
    );

    // every reminder arrives, each at its first sight timed from the return
    let mut first_seen = BTreeMap::<String, Duration>::new();
    let mut healthy_after = None;
    let wait = ARRIVED_WITHIN + Duration::from_secs(60);
    while (first_seen.len() < n || healthy_after.is_none()) && back.elapsed() < wait {
        let seen = texts(&target.api, &collector).await;
        for text in seen.keys() {
            first_seen.entry(text.clone()).or_insert_with(|| back.elapsed());
        }
        if healthy_after.is_none() {
            let r = server.api.http.get(server.api.url("/healthz")).send().await;
            if r.is_ok_and(|r| r.status().as_u16() == 200) {
                healthy_after = Some(back.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await; // poll
    }
    let last = first_seen.values().max().copied();
    eprintln!(
        "outage: {} of {n} reminders arrived, the last {last:?} after the database's return",
        first_seen.len()
    );
    let missing: Vec<&String> = items.iter().filter(|t| !first_seen.contains_key(*t)).collect();
    assert!(
        missing.is_empty(),
        "not arrived {wait:?} after the return: {missing:?}\n{}",
        server.log_text()
    );
    let late: Vec<(&String, &Duration)> = first_seen.iter().filter(|(_, d)| **d > ARRIVED_WITHIN).collect();
    assert!(
        late.is_empty(),
        "arrived later than {ARRIVED_WITHIN:?} after the return: {late:?}\n{}",
        server.log_text()
    );
    // each once: the deliveries finished, nothing more to come, nothing twice
    let healthy_after =
        healthy_after.unwrap_or_else(|| panic!("/healthz not 200 {wait:?} after the return:\n{}", server.log_text()));
    let landed = texts(&target.api, &collector).await;
    let doubled: Vec<_> = landed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "delivered more than once: {doubled:?}");
    assert_eq!(
        landed.keys().cloned().collect::<Vec<_>>(),
        items,
        "every reminder, nothing else"
    );
    // the same process all along
    assert!(
        server.child.try_wait().expect("poll the server").is_none(),
        "the server exited:\n{}",
        server.log_text()
    );
    assert_eq!(server.pid(), pid);
    eprintln!("outage: /healthz 200 again {healthy_after:?} after the return");
    server.api.add_text(&auth, "after the outage").await;
    server.stop().await;
    target.stop().await;
}
