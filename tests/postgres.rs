//! PostgreSQL storage (issue 21): the throwaway test cluster itself, and what the command
//! line does with `--database`.

mod common;

use common::postgres::Cluster;

/// The helper's cluster runs, durably configured, on its own Unix socket only, and gives
/// each test a database of its own.
#[test]
fn a_throwaway_cluster_serves_fresh_databases_on_its_socket_only() {
    let Some(cluster) = Cluster::start_or_skip("a_throwaway_cluster_serves_fresh_databases_on_its_socket_only") else {
        return;
    };
    let settings = cluster
        .psql(
            "postgres",
            "SELECT current_setting('synchronous_commit') || ',' || current_setting('fsync') || ',' || \
             current_setting('listen_addresses') || '.'",
        )
        .expect("psql");
    assert_eq!(settings, "on,on,.");
    assert!(cluster.socket_dir().join(".s.PGSQL.5432").exists());
    let first = cluster.fresh_database();
    let second = cluster.fresh_database();
    assert_ne!(first, second);
    assert!(cluster
        .url(&first)
        .ends_with(&format!("/{first}?host={}&port=5432", cluster.socket_dir().display())));
    cluster
        .psql(&first, "CREATE TABLE t (x int)")
        .expect("create in the first");
    // the second database is fresh: the first one's table is not there
    let tables = cluster
        .psql(&second, "SELECT count(*) FROM pg_tables WHERE tablename = 't'")
        .expect("psql");
    assert_eq!(tables, "0");
}

/// `pigeonhole serve` with `args` and a fresh data directory, environment cleared of
/// `PIGEONHOLE_*`; its exit status and stderr (it must exit by itself).
fn serve(args: &[&str]) -> (std::process::ExitStatus, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("PIGEONHOLE_") {
            command.env_remove(name);
        }
    }
    let out = command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--inbox-port", "0", "--scheduler-port", "0"])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pigeonhole");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned(), dir)
}

/// A database that cannot be reached stops the start with a plain error that names it
/// without its password (never a silent fall-back to sled), and nothing is written to the
/// data directory; the same from the environment variable.
#[test]
fn serve_with_an_unreachable_database_stops_plainly_and_touches_nothing() {
    let (status, stderr, dir) = serve(&[
        "--database",
        "postgres://pigeon:hunter2@/pigeonhole?host=/run/none",
        "--database-wait-secs",
        "0",
    ]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot open the PostgreSQL database postgres://pigeon:***@/pigeonhole"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "the password leaked: {stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "the data directory was touched: {left:?}");
    let dir = tempfile::tempdir().expect("temp dir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .env("PIGEONHOLE_DATABASE", "postgresql://u@/d?host=/run/none")
        .env("PIGEONHOLE_DATABASE_WAIT_SECS", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pigeonhole");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot open the PostgreSQL database"), "{stderr}");
}

/// With `--database`, the data is in the database, not the data directory: a server on
/// another, empty data directory finds it, and no sled database is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_database_keeps_the_data_in_it() {
    use common::process::{Proc, Services};
    let Some(cluster) = Cluster::start_or_skip("serve_with_a_database_keeps_the_data_in_it") else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let logs = tempfile::tempdir().expect("temp dir");
    let first_dir = tempfile::tempdir().expect("temp dir");
    let first = Proc::start(first_dir.path(), logs.path(), Services::Both, &["--database", &url]).await;
    first.api.register("carol", "a passphrase").await.expect_registered();
    let token = first.api.login_ok("carol", "a passphrase").await;
    let id = first.api.add_text(&token, "kept in PostgreSQL").await;
    first.stop().await;
    assert!(
        !first_dir.path().join("db").exists(),
        "a sled database was made in the data directory"
    );
    let second_dir = tempfile::tempdir().expect("temp dir");
    let second = Proc::start(second_dir.path(), logs.path(), Services::Both, &["--database", &url]).await;
    // the token made by the first process is good here: the signing key is in the database
    assert_eq!(second.api.uuids(&token).await, vec![id]);
    second.stop().await;
}

/// A malformed `--database` is a configuration error (exit status 2) naming what is wrong.
#[test]
fn a_malformed_database_url_is_refused_naming_the_fault() {
    for (url, says) in [
        ("mysql://u@h/d", "postgres:// or postgresql://"),
        ("postgres://h/d", "no user name"),
        ("postgres://u@h/d?sslmode=sometimes", "unknown sslmode \"sometimes\""),
        ("postgres://u@h:70000/d", "bad port \"70000\""),
        ("postgres://u@h", "no database name"),
        ("postgres://u@/d", "no host"),
    ] {
        let (status, stderr, _dir) = serve(&["--database", url]);
        assert_eq!(status.code(), Some(2), "{url}: {stderr}");
        assert!(
            stderr.contains("invalid --database URL") && stderr.contains(says),
            "{url}: {stderr}"
        );
    }
}

/// Every integration test module that starts the server in-process runs again on
/// PostgreSQL in CI (the `in_process` list of .ci/run: the modules, by name, of the test
/// programs tests/<program>/main.rs, or programs of one file tests/<name>.rs), unless
/// tests/common keeps it on sled (its `SLED_ONLY` programs): a new test file cannot quietly
/// test only one engine.
#[test]
fn ci_runs_every_in_process_test_on_postgresql_too() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let list = |text: &str, start: &str, end: &str| -> Vec<String> {
        let from = text.find(start).unwrap_or_else(|| panic!("no {start:?}")) + start.len();
        let to = from + text[from..].find(end).expect("the list's end");
        text[from..to]
            .split([' ', ','])
            .map(|w| w.trim().trim_matches('"').to_owned())
            .filter(|w| !w.is_empty())
            .collect()
    };
    let ci = list(&read(".ci/run"), "in_process=(", ")");
    let sled_only = list(&read("tests/common/mod.rs"), "const SLED_ONLY: &[&str] = &[", "]");
    // the test files: tests/<name>.rs, and the modules of tests/<program>/main.rs
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("entry").path();
        if path.join("main.rs").is_file() {
            for module in std::fs::read_dir(&path).expect("a test program's directory") {
                let module = module.expect("entry").path();
                if module.file_name().is_some_and(|n| n != "main.rs") {
                    files.push(module);
                }
            }
        } else {
            files.push(path);
        }
    }
    let mut missing = Vec::new();
    let mut modules = Vec::new();
    for path in files {
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // this file names the starters only to look for them
        if path.extension().is_none_or(|e| e != "rs") || name == "postgres" {
            continue;
        }
        modules.push(name.to_owned());
        let code = std::fs::read_to_string(&path).expect("read a test file");
        let in_process = [
            "Server::start",
            "start_scheduler",
            "start_paid",
            "start_on_manual_clock",
        ]
        .iter()
        .any(|s| code.contains(s));
        if in_process && !ci.iter().any(|c| c == name) && !sled_only.iter().any(|s| s == name) {
            missing.push(name.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "in-process tests neither in .ci/run's in_process list nor SLED_ONLY: {missing:?}"
    );
    assert!(ci.len() >= 5, "the list was read: {ci:?}");
    // .ci/run picks each module's tests with the filter `<module>::`, a substring of the
    // tests' names: it must name a module, and no other module's name may end with it
    for name in &ci {
        assert!(
            modules.contains(name),
            ".ci/run's in_process names no test module {name}"
        );
        let also = modules.iter().filter(|m| *m != name && m.ends_with(name.as_str()));
        assert_eq!(
            also.count(),
            0,
            "the filter {name}:: of .ci/run picks other modules too"
        );
    }
}

// A PostgreSQL database that goes away while the server runs (issue 30 point 4): requests
// answer 503 with `Retry-After` and a JSON error, not 500, and the same requests succeed
// once the database is back, without restarting the server.

/// How long the server may take to connect again once the database is back.
const RECONNECT: std::time::Duration = std::time::Duration::from_secs(30);

#[track_caller]
fn assert_unreachable(answer: common::Resp, what: &str) {
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
    let server = common::Server::start_with(|s| {
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
                .post("/inbox/item", &alice, &common::text_item("during the outage"))
                .await,
            "a write",
        );
    }

    cluster.start_again().expect("start the database again");
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
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
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

/// The schema version this binary knows (its latest migration).
const LATEST: i64 = pigeonhole::store::postgres::migrations::LATEST;

/// Records in `db` a migration newer than this binary knows, as a newer binary would
/// (creating `schema_migrations` as the migrations do when it is not there yet).
fn record_newer_schema(cluster: &Cluster, db: &str) {
    cluster
        .psql(
            db,
            &format!(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version bigint PRIMARY KEY, name text NOT NULL, \
                 applied_by text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now()); \
                 INSERT INTO schema_migrations (version, name, applied_by) \
                 VALUES ({}, 'from a newer binary', 'pigeonhole 99.0.0')",
                LATEST + 1
            ),
        )
        .expect("record a newer migration");
}

/// A database whose schema a newer binary migrated is refused at start: the process exits
/// non-zero with a message naming both versions, and changes nothing in the database.
#[test]
fn a_database_with_a_newer_schema_is_refused_at_start_naming_both_versions() {
    let Some(cluster) =
        Cluster::start_or_skip("a_database_with_a_newer_schema_is_refused_at_start_naming_both_versions")
    else {
        return;
    };
    let db = cluster.fresh_database();
    record_newer_schema(&cluster, &db);
    let (status, stderr, _dir) = serve(&["--database", &cluster.url(&db)]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("schema version {}", LATEST + 1)) && stderr.contains(&format!("up to {LATEST}")),
        "both versions named: {stderr}"
    );
    // nothing was made or changed
    let tables = cluster
        .psql(
            &db,
            "SELECT string_agg(tablename, ',') FROM pg_tables WHERE schemaname = 'public'",
        )
        .expect("psql");
    assert_eq!(tables, "schema_migrations");
    let versions = cluster
        .psql(&db, "SELECT string_agg(version::text, ',') FROM schema_migrations")
        .expect("psql");
    assert_eq!(versions, (LATEST + 1).to_string());
}

/// How long a test waits for a running process to notice something in the database.
const NOTICE: std::time::Duration = std::time::Duration::from_secs(30);

/// `GET /healthz` of `api`: its status and body.
async fn health(api: &common::Api) -> (u16, serde_json::Value) {
    let r = api.get("/healthz", &common::Auth::None).await;
    (r.status, r.json())
}

/// Asks `/healthz` of `api` until `done` holds of its status and body, for at most
/// [`NOTICE`].
async fn health_until(
    api: &common::Api,
    what: &str,
    done: impl Fn(u16, &serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + NOTICE;
    loop {
        let (status, body) = health(api).await;
        if done(status, &body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {NOTICE:?}: {status} {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

fn on_database(url: &str) -> impl FnOnce(&mut pigeonhole::config::Settings) + '_ {
    move |s| s.database = Some(pigeonhole::config::DatabaseUrl::parse(url).expect("the cluster's URL"))
}

/// `/healthz` names the process, the engine, the schema's version and the binary's, and
/// whether it leads; a newer binary's migration while the server process runs (a row in
/// `schema_migrations`) turns it 503 with an error naming both versions, logged once
/// however often it is probed, and 200 again once the database is back at a version this
/// binary knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_server_notices_a_newer_schema_and_answers_503_naming_both_versions() {
    use common::process::{Proc, Services};
    let test = "a_running_server_notices_a_newer_schema_and_answers_503_naming_both_versions";
    let Some(cluster) = Cluster::start_or_skip(test) else {
        return;
    };
    let db = cluster.fresh_database();
    let url = cluster.url(&db);
    let (dir, logs) = (
        tempfile::tempdir().expect("temp dir"),
        tempfile::tempdir().expect("temp dir"),
    );
    let server = Proc::start(dir.path(), logs.path(), Services::Both, &["--database", &url]).await;
    let (status, body) = health(&server.api).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");
    assert_eq!(body["process"]["engine"], "postgres", "{body}");
    assert_eq!(body["database"]["engine"], "postgres", "{body}");
    // host:pid: and the claimant's own part
    let id = body["process"]["id"].as_str().expect("a process id").to_owned();
    assert!(id.contains(&format!(":{}:", server.pid())), "{body}");
    assert_eq!(body["database"]["schema-version"], LATEST, "{body}");
    assert_eq!(body["database"]["binary-schema-version"], LATEST, "{body}");
    // the only process on the database leads
    health_until(&server.api, "the only process leads", |_, b| {
        b["process"]["leads"] == true
    })
    .await;

    record_newer_schema(&cluster, &db);
    let body = health_until(&server.api, "the newer schema noticed", |status, _| status == 503).await;
    assert_eq!(body["status"], "unhealthy", "{body}");
    assert_eq!(body["database"]["schema-version"], LATEST + 1, "{body}");
    let error = body["database"]["error"].as_str().expect("an error");
    assert!(
        error.contains(&format!("version {}", LATEST + 1)) && error.contains(&format!("version {LATEST}")),
        "both versions named: {error}"
    );
    // the same on the other service's port, however often asked
    for _ in 0..3 {
        assert_eq!(health(&server.scheduler).await.0, 503);
    }
    let newer_lines = |log: &str| {
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains(&format!("schema is version {}", LATEST + 1)))
            .count()
    };
    assert_eq!(
        newer_lines(&server.log_text()),
        1,
        "logged once:\n{}",
        server.log_text()
    );

    cluster
        .psql(
            &db,
            &format!("DELETE FROM schema_migrations WHERE version = {}", LATEST + 1),
        )
        .expect("psql");
    health_until(&server.api, "healthy again", |status, _| status == 200).await;
    assert_eq!(newer_lines(&server.log_text()), 1, "{}", server.log_text());
    server.stop().await;
}

/// The value of the sample `line_start` (name and labels) in a scrape, if there.
fn sample(scrape: &str, line_start: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.strip_prefix(' ')?.parse().ok())
}

/// Two processes on one database: exactly one leads (`/healthz`, `pigeonhole_leader`) and
/// alone exports the database-wide numbers, so that their sum over the processes is right;
/// each exports its own pool, its transactions and waits, the schema's versions and its
/// name, and none of sled's writer histograms. When the leader stops, the other leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_servers_on_one_database_one_leads_and_alone_exports_the_database_wide_numbers() {
    let test = "of_two_servers_on_one_database_one_leads_and_alone_exports_the_database_wide_numbers";
    let Some(cluster) = Cluster::start_or_skip(test) else {
        return;
    };
    let url = cluster.url(&cluster.fresh_database());
    let mut servers = Vec::new();
    for _ in 0..2 {
        let port = common::process::free_port();
        let server = common::Server::start_with(|s| {
            on_database(&url)(s);
            s.metrics_address = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        })
        .await;
        servers.push((server, common::Api::new(format!("http://127.0.0.1:{port}"))));
    }
    let alice = servers[0].0.user("alice").await;
    servers[0].0.add_text(&alice, "counted once").await;

    // each answers whether it leads at once (the first try of the lock is at the start)
    let mut leads = Vec::new();
    let mut ids = Vec::new();
    for (server, _) in &servers {
        let body = health_until(&server.api, "leads known", |_, b| b["process"]["leads"].is_boolean()).await;
        leads.push(body["process"]["leads"] == true);
        ids.push(body["process"]["id"].as_str().expect("an id").to_owned());
    }
    assert_eq!(leads.iter().filter(|l| **l).count(), 1, "exactly one leads: {leads:?}");
    assert_ne!(ids[0], ids[1], "each process has its own name");
    let leader = leads.iter().position(|l| *l).expect("a leader");

    for (i, (_, metrics)) in servers.iter().enumerate() {
        let r = metrics.get("/metrics", &common::Auth::None).await;
        assert_eq!(r.status, 200);
        let text = r.text();
        let is_leader = i == leader;
        assert_eq!(
            sample(&text, "pigeonhole_leader"),
            Some(f64::from(u8::from(is_leader))),
            "{text}"
        );
        let items = sample(&text, "pigeonhole_items{kind=\"inbox\"}");
        let due = sample(&text, "pigeonhole_due_items");
        let expired = sample(&text, "pigeonhole_claims_expired{queue=\"deliveries\"}");
        if is_leader {
            assert_eq!((items, due, expired), (Some(1.0), Some(0.0), Some(0.0)), "{text}");
        } else {
            assert_eq!(
                (items, due, expired),
                (None, None, None),
                "only the leader exports them: {text}"
            );
        }
        assert!(
            sample(&text, "pigeonhole_claim_lease_seconds").is_some_and(|s| s > 0.0),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "pigeonhole_process_info{{process=\"{}\",engine=\"postgres\"}} 1",
                ids[i]
            )),
            "{text}"
        );
        assert!(
            sample(&text, "pigeonhole_database_pool_max").is_some_and(|n| n >= 1.0),
            "{text}"
        );
        assert!(
            sample(&text, "pigeonhole_database_pool_open").is_some_and(|n| n >= 1.0),
            "{text}"
        );
        assert!(sample(&text, "pigeonhole_database_pool_waiting").is_some(), "{text}");
        assert!(sample(&text, "pigeonhole_database_pool_in_use").is_some(), "{text}");
        // the transactions of the registration, the login and the item (the counters are
        // the process's: both servers here are in this one)
        assert!(
            sample(&text, "pigeonhole_database_transaction_duration_seconds_count").is_some_and(|n| n >= 3.0),
            "{text}"
        );
        assert!(
            sample(&text, "pigeonhole_database_pool_wait_seconds_count").is_some_and(|n| n >= 3.0),
            "{text}"
        );
        assert!(
            sample(&text, "pigeonhole_claims_total{event=\"released\"}").is_some(),
            "{text}"
        );
        assert_eq!(
            sample(&text, "pigeonhole_schema_version{of=\"database\"}"),
            Some(LATEST as f64),
            "{text}"
        );
        assert_eq!(
            sample(&text, "pigeonhole_schema_version{of=\"binary\"}"),
            Some(LATEST as f64)
        );
        assert_eq!(sample(&text, "pigeonhole_schema_newer"), Some(0.0));
        assert!(
            !text.contains("pigeonhole_writer_"),
            "no sled series on PostgreSQL: {text}"
        );
    }

    // the leader stops: the other takes the lead (at its next try of the lock)
    let (stopped, _) = servers.remove(leader);
    stopped.stop().await;
    let (other, metrics) = servers.pop().expect("the other");
    health_until(&other.api, "the other leads", |_, b| b["process"]["leads"] == true).await;
    let text = metrics.get("/metrics", &common::Auth::None).await.text();
    assert_eq!(sample(&text, "pigeonhole_leader"), Some(1.0), "{text}");
    assert_eq!(sample(&text, "pigeonhole_items{kind=\"inbox\"}"), Some(1.0), "{text}");
    other.stop().await;
}
