//! PostgreSQL storage (issue 21): the throwaway test cluster itself, and what the command
//! line does with `--database` while the PostgreSQL backend is not yet wired in.

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

/// Until the PostgreSQL store is wired in, a valid `--database` stops the start with a plain
/// error (never a silent fall-back to sled), and nothing is written to the data directory.
#[test]
fn serve_with_a_database_refuses_plainly_until_postgres_storage_is_wired() {
    let (status, stderr, dir) = serve(&["--database", "postgres://pigeon:hunter2@/pigeonhole?host=/run/none"]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("PostgreSQL storage is not yet available in this version"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "the password leaked: {stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read dir").collect();
    assert!(left.is_empty(), "the data directory was touched: {left:?}");
    // the same from the environment variable
    let dir = tempfile::tempdir().expect("temp dir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path())
        .env("PIGEONHOLE_DATABASE", "postgresql://u@db.example/d?sslmode=verify-full")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run pigeonhole");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not yet available"));
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
