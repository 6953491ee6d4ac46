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

/// Every integration test binary that starts the server in-process runs again on
/// PostgreSQL in CI (the `in_process` list of .ci/run), unless tests/common keeps it on
/// sled (its `SLED_ONLY`): a new test file cannot quietly test only one engine.
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
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("entry").path();
        let Some(name) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        // this file names the starters only to look for them
        if path.extension().is_none_or(|e| e != "rs") || name == "postgres" {
            continue;
        }
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
}
