//! Tests against a throwaway PostgreSQL cluster (the helper of tests/common/postgres.rs,
//! included here): skipped loudly without PostgreSQL unless PIGEONHOLE_REQUIRE_POSTGRES=1.

#[path = "../../../tests/common/postgres.rs"]
mod cluster;

use super::*;
use cluster::Cluster;

/// A cluster (or `None`: skipped) and the connection to a fresh database in it.
fn fresh(test: &str) -> Option<(Cluster, Connection, String)> {
    let cluster = Cluster::start_or_skip(test)?;
    let db = cluster.fresh_database();
    let connection = Connection {
        user: "postgres".into(),
        password: None,
        host: Host::Unix(cluster.socket_dir().to_path_buf()),
        port: 5432,
        database: db.clone(),
        tls: TlsMode::Prefer,
    };
    Some((cluster, connection, db))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn migrations_run_once_and_again_change_nothing() {
    let Some((cluster, connection, db)) = fresh("migrations_run_once_and_again_change_nothing") else {
        return;
    };
    runtime().block_on(async {
        let (store, applied) = PgStore::connect(&connection).await.expect("first start");
        assert_eq!(applied, (1..=migrations::LATEST).collect::<Vec<_>>());
        assert_eq!(store.schema_version().await.expect("version"), migrations::LATEST);
        let tables = cluster
            .psql(
                &db,
                "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'",
            )
            .expect("psql");
        let (again, applied) = PgStore::connect(&connection).await.expect("second start");
        assert!(applied.is_empty(), "{applied:?}");
        assert_eq!(again.schema_version().await.expect("version"), migrations::LATEST);
        let after = cluster
            .psql(
                &db,
                "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'",
            )
            .expect("psql");
        assert_eq!(tables, after);
        for table in [
            "schema_migrations",
            "inbox_accounts",
            "scheduler_accounts",
            "inbox_access_keys",
            "inbox_items",
            "inbox_idempotency_keys",
            "scheduler_settings",
            "scheduled_items",
            "triggered_items",
            "trigger_attempts",
            "triggers",
            "delivery_targets",
            "deliveries",
            "email_queue",
            "payment_events",
            "token_signing_key",
            "throttle_events",
        ] {
            assert!(after.split(',').any(|t| t == table), "no table {table} in {after}");
        }
        let rows = cluster
            .psql(&db, "SELECT count(*) FROM schema_migrations")
            .expect("psql");
        assert_eq!(rows, migrations::LATEST.to_string());
    });
}

#[test]
fn concurrent_starts_migrate_once() {
    let Some((cluster, connection, db)) = fresh("concurrent_starts_migrate_once") else {
        return;
    };
    runtime().block_on(async {
        let starts: Vec<_> = (0..4)
            .map(|_| {
                let c = connection.clone();
                tokio::spawn(async move { PgStore::connect(&c).await.map(|(_, applied)| applied) })
            })
            .collect();
        let mut applied = Vec::new();
        for start in starts {
            applied.push(start.await.expect("task").expect("start"));
        }
        // exactly one start applied the migrations; the others found them done
        let migrated: Vec<_> = applied.iter().filter(|a| !a.is_empty()).collect();
        assert_eq!(migrated.len(), 1, "{applied:?}");
    });
    let rows = cluster
        .psql(&db, "SELECT count(*) FROM schema_migrations")
        .expect("psql");
    assert_eq!(rows, migrations::LATEST.to_string());
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    let Some((cluster, connection, db)) = fresh("a_newer_schema_is_refused_and_left_alone") else {
        return;
    };
    runtime().block_on(async {
        PgStore::connect(&connection).await.expect("first start");
    });
    let newer = migrations::LATEST + 1;
    cluster
        .psql(
            &db,
            &format!(
                "INSERT INTO schema_migrations (version, name, applied_by) VALUES ({newer}, 'future', 'pigeonhole 99'); \
                 CREATE TABLE future_things (x int)"
            ),
        )
        .expect("psql");
    let err = runtime()
        .block_on(PgStore::connect(&connection))
        .err()
        .expect("a newer schema must be refused");
    assert_eq!(
        err,
        PgError::NewerSchema {
            found: newer,
            known: migrations::LATEST
        }
    );
    assert!(err.to_string().contains("newer version of Pigeonhole"), "{err}");
    // nothing was changed
    let rows = cluster
        .psql(
            &db,
            "SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations",
        )
        .expect("psql");
    let want: Vec<String> = (1..=newer).map(|v| v.to_string()).collect();
    assert_eq!(rows, want.join(","));
}

#[test]
fn commits_are_durable_whatever_the_database_default() {
    let Some((cluster, connection, db)) = fresh("commits_are_durable_whatever_the_database_default") else {
        return;
    };
    cluster
        .psql("postgres", &format!("ALTER DATABASE {db} SET synchronous_commit = off"))
        .expect("psql");
    runtime().block_on(async {
        let (store, _) = PgStore::connect(&connection).await.expect("start");
        let client = store.pool.get().await.expect("connection");
        let value: String = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .expect("show")
            .get(0);
        assert_eq!(value, "on");
    });
    // a server that does not sync at all is refused
    cluster.psql("postgres", "ALTER SYSTEM SET fsync = off").expect("psql");
    cluster.psql("postgres", "SELECT pg_reload_conf()").expect("psql");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while cluster.psql(&db, "SHOW fsync").expect("psql") != "off" {
        assert!(std::time::Instant::now() < deadline, "fsync did not turn off");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let err = runtime().block_on(PgStore::connect(&connection)).err();
    assert!(matches!(err, Some(PgError::NotDurable(_))), "{err:?}");
}

/// The constraints that make the rules hold in the database, whichever process writes.
#[test]
fn the_constraints_refuse_duplicates() {
    let Some((cluster, connection, db)) = fresh("the_constraints_refuse_duplicates") else {
        return;
    };
    runtime().block_on(async {
        PgStore::connect(&connection).await.expect("start");
    });
    let sql = |s: &str| cluster.psql(&db, s);
    let account = "'00000000-0000-0000-0000-00000000000a'";
    let other = "'00000000-0000-0000-0000-00000000000b'";
    let insert_account = |id: &str, name: &str, table: &str| {
        format!(
            "INSERT INTO {table} (id, username, password_kind, password_hash, created_secs, created_nanos) \
             VALUES ({id}, '{name}', 'pbkdf2', 'x', 0, 0)"
        )
    };
    sql(&insert_account(account, "alice", "inbox_accounts")).expect("first account");
    let dup = sql(&insert_account(other, "alice", "inbox_accounts")).expect_err("a duplicate username");
    assert!(dup.contains("inbox_accounts_username_key"), "{dup}");
    // each service keeps its own accounts
    sql(&insert_account(account, "alice", "scheduler_accounts")).expect("the scheduler's alice");
    // idempotency keys: one per account and key
    sql(&format!(
        "INSERT INTO inbox_idempotency_keys VALUES ({account}, 'k1', gen_random_uuid())"
    ))
    .expect("first key");
    let dup = sql(&format!(
        "INSERT INTO inbox_idempotency_keys VALUES ({account}, 'k1', gen_random_uuid())"
    ))
    .expect_err("a duplicate idempotency key");
    assert!(dup.contains("inbox_idempotency_keys_pkey"), "{dup}");
    // access key digests are unique
    let key = |id: &str| {
        format!(
            "INSERT INTO inbox_access_keys (account, id, name, created_secs, created_nanos, seq, permissions, secret_digest) \
             VALUES ({account}, {id}, 'k', 0, 0, 1, 0, decode(repeat('ab', 32), 'hex'))"
        )
    };
    sql(&key("gen_random_uuid()")).expect("first key");
    let dup = sql(&key("gen_random_uuid()")).expect_err("a duplicate digest");
    assert!(dup.contains("inbox_access_keys_digest_key"), "{dup}");
    // one triggered copy per occurrence of a scheduled item
    let copy = |occurrence_nanos: u32| {
        format!(
            "INSERT INTO triggered_items (id, account, content, day, created_secs, created_nanos, triggered_secs, \
             triggered_nanos, scheduled_id, occurrence_secs, occurrence_nanos) VALUES (gen_random_uuid(), {account}, \
             'x', 0, 0, 0, 10, 0, {other}, 1700000000, {occurrence_nanos})"
        )
    };
    sql(&copy(123_456_789)).expect("the first copy");
    let dup = sql(&copy(123_456_789)).expect_err("a second copy of the occurrence");
    assert!(dup.contains("triggered_items_one_per_occurrence"), "{dup}");
    // a nanosecond later is another occurrence: the due instant keeps its nanoseconds
    sql(&copy(123_456_790)).expect("the next occurrence");
    // copies from elsewhere (no occurrence) never collide
    for _ in 0..2 {
        sql(&format!(
            "INSERT INTO triggered_items (id, account, content, day, created_secs, created_nanos, triggered_secs, \
             triggered_nanos) VALUES (gen_random_uuid(), {account}, 'x', 0, 0, 0, 10, 0)"
        ))
        .expect("a copy without an occurrence");
    }
    // a leap second's nanoseconds fit; beyond them, no
    sql(&copy(1_999_999_999)).expect("a leap second");
    assert!(sql(&copy(2_000_000_000)).is_err());
    // deleting the account deletes everything of it
    sql(&format!("DELETE FROM scheduler_accounts WHERE id = {account}")).expect("delete");
    assert_eq!(sql("SELECT count(*) FROM triggered_items").expect("count"), "0");
}
