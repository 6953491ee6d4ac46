//! Tests against a throwaway PostgreSQL cluster (the helper of tests/common/postgres.rs,
//! included here): skipped loudly without PostgreSQL unless PIGEONHOLE_REQUIRE_POSTGRES=1.

#[path = "../../../tests/common/postgres.rs"]
pub(crate) mod cluster;

use super::*;
use crate::store::api::{Accounts, Administration, Deliveries, InboxItems, ScheduledItems, Triggers};
use cluster::Cluster;
use std::future::Future;
use std::sync::Arc;

/// A cluster (or `None`: skipped) and the connection to a fresh database in it.
fn fresh(test: &str) -> Option<(Cluster, Connection, String)> {
    let cluster = Cluster::start_or_skip(test)?;
    let db = cluster.fresh_database();
    let connection = Connection::new(
        "postgres",
        Host::Unix(cluster.socket_dir().to_path_buf()),
        cluster.port(),
        &db,
        TlsMode::Prefer,
    );
    Some((cluster, connection, db))
}

/// The fixture of the tests here: runs `test` on a runtime of two workers with a fresh
/// database of a throwaway cluster (the cluster, the connection to the database, its name),
/// then stops the cluster; skipped, as every test here is, without PostgreSQL (a failure
/// with PIGEONHOLE_REQUIRE_POSTGRES=1). The cluster runs until `test` is done, whatever
/// `test` keeps of it.
fn on_fresh_database<F: Future<Output = ()>>(test: impl FnOnce(Arc<Cluster>, Connection, String) -> F) {
    // the harness names each test's thread after the test: the skip message names it
    let name = std::thread::current().name().unwrap_or("a PostgreSQL test").to_owned();
    let Some((cluster, connection, db)) = fresh(&name) else {
        return;
    };
    let cluster = Arc::new(cluster);
    runtime().block_on(test(cluster.clone(), connection, db));
}

/// [`on_fresh_database`] with the store started on the database (its migrations run):
/// `test` gets the store, the cluster and the database's name.
fn on_fresh_store<F: Future<Output = ()>>(test: impl FnOnce(PgStore, Arc<Cluster>, String) -> F) {
    on_fresh_database(|cluster, connection, db| async move {
        let store = store_on(&connection).await;
        test(store, cluster, db).await;
    });
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
    on_fresh_database(|cluster, connection, db| async move {
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
    on_fresh_database(|cluster, connection, db| async move {
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
        let rows = cluster
            .psql(&db, "SELECT count(*) FROM schema_migrations")
            .expect("psql");
        assert_eq!(rows, migrations::LATEST.to_string());
    });
}

#[test]
fn a_newer_schema_is_refused_and_left_alone() {
    on_fresh_database(|cluster, connection, db| async move {
        PgStore::connect(&connection).await.expect("first start");
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
        let err = PgStore::connect(&connection)
            .await
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
    });
}

#[test]
fn commits_are_durable_whatever_the_database_default() {
    on_fresh_database(|cluster, connection, db| async move {
        cluster
            .psql("postgres", &format!("ALTER DATABASE {db} SET synchronous_commit = off"))
            .expect("psql");
        let (store, _) = PgStore::connect(&connection).await.expect("start");
        let client = store.pool.get().await.expect("connection");
        let value: String = client
            .query_one("SHOW synchronous_commit", &[])
            .await
            .expect("show")
            .get(0);
        assert_eq!(value, "on");
        // a server that does not sync at all is refused
        cluster.psql("postgres", "ALTER SYSTEM SET fsync = off").expect("psql");
        cluster.psql("postgres", "SELECT pg_reload_conf()").expect("psql");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while cluster.psql(&db, "SHOW fsync").expect("psql") != "off" {
            assert!(std::time::Instant::now() < deadline, "fsync did not turn off");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let err = PgStore::connect(&connection).await.err();
        assert!(matches!(err, Some(PgError::NotDurable(_))), "{err:?}");
    });
}

/// The constraints that make the rules hold in the database, whichever process writes.
#[test]
fn the_constraints_refuse_duplicates() {
    on_fresh_database(|cluster, connection, db| async move {
        PgStore::connect(&connection).await.expect("start");
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
    });
}

/// A started store on a fresh database (the cluster must outlive it).
async fn store_on(connection: &Connection) -> PgStore {
    PgStore::connect(connection).await.expect("start").0
}

fn at(secs: i64, nanos: u32) -> crate::domain::wire::Timestamp {
    crate::domain::wire::Timestamp::from_unix(secs, nanos)
}

async fn created(r: crate::store::Written<crate::store::Registration>) -> crate::domain::account::Account {
    match r.durable().await.expect("durable") {
        crate::store::Registration::Created(a) => a,
        crate::store::Registration::Taken => panic!("the username was taken"),
    }
}

#[test]
fn transactions_are_retried_on_serialization_failures_a_bounded_number_of_times() {
    on_fresh_store(|store, _, _| async move {
        let failure = |code: &str| PgError::Query {
            code: Some(code.into()),
            message: "conflict".into(),
        };
        // fails twice (a serialization failure, then a deadlock), then commits
        let mut calls = 0;
        let result: PgResult<u32> = transaction!(store, |tx| {
            calls += 1;
            tx.execute("SELECT 1", &[]).await?;
            match calls {
                1 => Err(failure("40001")),
                2 => Err(failure("40P01")),
                n => Ok(n),
            }
        });
        assert_eq!(result, Ok(3));
        // always failing: given up after MAX_RETRIES retries
        let mut calls = 0;
        let result: PgResult<()> = transaction!(store, |tx| {
            calls += 1;
            tx.execute("SELECT 1", &[]).await?;
            Err(failure("40001"))
        });
        assert!(matches!(result, Err(PgError::Contention(_))), "{result:?}");
        assert_eq!(calls, MAX_RETRIES + 1);
        // other errors are not retried
        let mut calls = 0;
        let result: PgResult<()> = transaction!(store, |tx| {
            calls += 1;
            tx.execute("SELECT 1", &[]).await?;
            Err(failure("23505"))
        });
        assert!(result.is_err_and(|e| e.is_unique_violation()));
        assert_eq!(calls, 1);
    });
}

#[test]
fn accounts_register_once_and_keep_every_field() {
    on_fresh_store(|store, _, _| async move {
        let accounts = store.accounts(Service::Inbox);
        // twelve concurrent registrations of one name: exactly one wins
        let tries: Vec<_> = (0..12)
            .map(|i| {
                let accounts = accounts.clone();
                tokio::spawn(async move {
                    accounts
                        .register("alice", format!("hash{i}"), at(1_700_000_000, 5))
                        .await
                })
            })
            .collect();
        let mut won = Vec::new();
        for t in tries {
            let r = t.await.expect("task").expect("register");
            if let crate::store::Registration::Created(a) = r.durable().await.expect("durable") {
                won.push(a);
            }
        }
        assert_eq!(won.len(), 1);
        let alice = won.remove(0);
        // the scheduler's accounts are its own
        assert!(store
            .accounts(Service::Scheduler)
            .by_username("alice")
            .await
            .expect("read")
            .is_none());
        let bob = created(
            store
                .accounts(Service::Scheduler)
                .register("alice", "s".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        assert_ne!(bob.id, alice.id);
        // every field comes back, nanoseconds (a leap second's too) included
        let leap = at(1_700_000_001, 1_234_567_891);
        assert!(accounts.set_last_login(alice.id, leap).await.expect("login").changed());
        // a login never moves the last login back
        let back = accounts
            .set_last_login(alice.id, at(1_600_000_000, 0))
            .await
            .expect("login");
        assert!(back.durable().await.expect("durable"));
        let read = accounts.get(alice.id).await.expect("get").expect("there");
        assert_eq!(read.username, "alice");
        assert_eq!(read.created, at(1_700_000_000, 5));
        assert_eq!(read.last_login, Some(leap));
        assert_eq!(read.epoch, 0);
        assert_eq!(read.password_hash, alice.password_hash);
        assert_eq!(
            accounts.by_username("alice").await.expect("by name").map(|a| a.id),
            Some(alice.id)
        );
        assert!(!accounts
            .set_last_login(uuid::Uuid::nil(), leap)
            .await
            .expect("login")
            .changed());
        // a password change needs the hash it replaces, and starts a new epoch
        let old = read.password_hash.clone();
        let wrong = crate::domain::account::PasswordHash::Pbkdf2("other".into());
        assert!(!accounts
            .change_password(alice.id, &wrong, "new".into())
            .await
            .expect("change")
            .durable()
            .await
            .expect("durable"));
        assert!(accounts
            .change_password(alice.id, &old, "new".into())
            .await
            .expect("change")
            .durable()
            .await
            .expect("durable"));
        let read = accounts.get(alice.id).await.expect("get").expect("there");
        assert_eq!(read.epoch, 1);
        assert_eq!(
            read.password_hash,
            crate::domain::account::PasswordHash::Pbkdf2("new".into())
        );
        // upgrading a moved-in bcrypt hash keeps the epoch
        let scheduler = store.accounts(Service::Scheduler);
        let legacy = crate::domain::account::PasswordHash::LegacyBcrypt("$2b$bcrypt".into());
        assert!(!scheduler
            .upgrade_password(bob.id, &legacy, "p".into())
            .await
            .expect("upgrade")
            .durable()
            .await
            .expect("durable"));
        // the payment customer
        assert_eq!(accounts.customer(alice.id).await.expect("customer"), None);
        assert!(accounts
            .set_customer(alice.id, "cus_1")
            .await
            .expect("set")
            .durable()
            .await
            .expect("durable"));
        assert_eq!(
            accounts.customer(alice.id).await.expect("customer").as_deref(),
            Some("cus_1")
        );
        assert!(!accounts
            .set_customer(uuid::Uuid::nil(), "cus_2")
            .await
            .expect("set")
            .durable()
            .await
            .expect("durable"));
        assert_eq!(accounts.all().await.expect("all").len(), 1);
    });
}

#[test]
fn access_keys_are_found_by_digest_upgraded_and_deleted() {
    use crate::domain::account::{AccessKey, KeySecret};
    use crate::domain::permissions::Permissions;
    on_fresh_store(|store, _, _| async move {
        let accounts = store.accounts(Service::Inbox);
        let alice = created(
            accounts
                .register("alice", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        let s1 = accounts.next_key_seq().await.expect("seq");
        let s2 = accounts.next_key_seq().await.expect("seq");
        assert!(s2 > s1);
        let key = |name: &str, created, seq, secret| AccessKey {
            id: crate::domain::wire::new_uuid(),
            name: name.into(),
            created,
            seq,
            permissions: Permissions(u32::MAX),
            secret,
        };
        let later = key("later", at(20, 0), s1, KeySecret::Digest([7; 32]));
        let earlier = key(
            "earlier",
            at(10, 999_999_999),
            s2,
            KeySecret::LegacyBcrypt("$2b$x".into()),
        );
        assert!(accounts
            .add_access_key(alice.id, &later)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
        assert!(accounts
            .add_access_key(alice.id, &earlier)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
        // not for an account that is gone
        assert!(!accounts
            .add_access_key(uuid::Uuid::nil(), &key("x", at(1, 0), 1, KeySecret::Digest([8; 32])))
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
        // another key with the same digest is refused by the database
        let twin = key("twin", at(30, 0), 3, KeySecret::Digest([7; 32]));
        assert!(accounts
            .add_access_key(alice.id, &twin)
            .await
            // the store's error keeps the engine's SQLSTATE: 23505, a unique violation
            .is_err_and(
                |e| matches!(&e, crate::store::StoreError::Engine(_)) && e.to_string().contains("database error 23505")
            ));
        let names: Vec<String> = accounts
            .access_keys(alice.id)
            .await
            .expect("keys")
            .into_iter()
            .map(|k| k.name)
            .collect();
        assert_eq!(names, ["earlier", "later"]);
        let (owner, found) = accounts
            .access_key_by_digest(&[7; 32])
            .await
            .expect("by digest")
            .expect("found");
        assert_eq!(
            (owner, found.id, found.permissions, found.created),
            (alice.id, later.id, Permissions(u32::MAX), at(20, 0))
        );
        assert_eq!(accounts.legacy_access_keys(alice.id).await.expect("legacy").len(), 1);
        // the legacy hash becomes a digest, once
        let old = KeySecret::LegacyBcrypt("$2b$x".into());
        assert!(accounts
            .upgrade_access_key(alice.id, earlier.id, &old, [9; 32])
            .await
            .expect("upgrade")
            .durable()
            .await
            .expect("durable"));
        assert!(!accounts
            .upgrade_access_key(alice.id, earlier.id, &old, [9; 32])
            .await
            .expect("upgrade")
            .durable()
            .await
            .expect("durable"));
        let upgraded = accounts
            .access_key(alice.id, earlier.id)
            .await
            .expect("key")
            .expect("there");
        assert_eq!(upgraded.secret, KeySecret::Digest([9; 32]));
        assert_eq!(upgraded.created, at(10, 999_999_999));
        assert!(accounts.legacy_access_keys(alice.id).await.expect("legacy").is_empty());
        assert!(accounts
            .delete_access_key(alice.id, later.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        assert!(!accounts
            .delete_access_key(alice.id, later.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        assert!(accounts
            .access_key_by_digest(&[7; 32])
            .await
            .expect("by digest")
            .is_none());
    });
}

fn text_item(data: &str, created: crate::domain::wire::Timestamp) -> crate::domain::inbox::models::InboxItem {
    crate::domain::inbox::models::InboxItem {
        id: crate::domain::wire::new_uuid(),
        kind: crate::domain::inbox::models::ItemType::Text,
        data: data.as_bytes().to_vec(),
        created,
    }
}

#[test]
fn inbox_items_keep_the_limit_and_idempotency_under_concurrency() {
    use crate::store::inbox::AddOutcome;
    on_fresh_store(|store, _, _| async move {
        let inbox = store.inbox();
        let alice = created(
            inbox
                .accounts
                .register("alice", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        // twenty concurrent additions to an account of at most five items: five are stored
        let adds: Vec<_> = (0..20)
            .map(|i| {
                let inbox = inbox.clone();
                tokio::spawn(async move {
                    inbox
                        .add_item(
                            alice.id,
                            &text_item(&format!("item {i}"), at(100 + i, 0)),
                            None,
                            Some(5),
                        )
                        .await
                })
            })
            .collect();
        let mut added = 0;
        for a in adds {
            match a.await.expect("task").expect("add").durable().await.expect("durable") {
                AddOutcome::Added(_) => added += 1,
                AddOutcome::LimitReached => {}
                AddOutcome::Repeated(_) => panic!("no idempotency key was given"),
            }
        }
        assert_eq!(added, 5);
        assert_eq!(inbox.count(alice.id).await.expect("count"), 5);
        // ten concurrent additions with one idempotency key: one item, every answer names it
        let bob = created(
            inbox
                .accounts
                .register("bob", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        let adds: Vec<_> = (0..10)
            .map(|i| {
                let inbox = inbox.clone();
                tokio::spawn(async move {
                    inbox
                        .add_item(bob.id, &text_item(&format!("try {i}"), at(5, 0)), Some("key-1"), None)
                        .await
                })
            })
            .collect();
        let mut ids = std::collections::HashSet::new();
        let mut firsts = 0;
        for a in adds {
            let written = a.await.expect("task").expect("add");
            let changed = written.changed();
            match written.durable().await.expect("durable") {
                AddOutcome::Added(id) => {
                    assert!(changed);
                    firsts += 1;
                    ids.insert(id);
                }
                AddOutcome::Repeated(id) => {
                    assert!(!changed);
                    ids.insert(id);
                }
                AddOutcome::LimitReached => panic!("no limit was given"),
            }
        }
        assert_eq!((firsts, ids.len()), (1, 1));
        assert_eq!(inbox.count(bob.id).await.expect("count"), 1);
        // the key outlives its item, and is answered also at the limit
        let first = *ids.iter().next().expect("an id");
        assert!(inbox
            .delete_item(bob.id, first)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        let again = inbox
            .add_item(bob.id, &text_item("again", at(6, 0)), Some("key-1"), Some(0))
            .await
            .expect("add");
        assert!(matches!(again.durable().await, Ok(AddOutcome::Repeated(id)) if id == first));
        assert_eq!(inbox.total_items().await.expect("total"), 5);
    });
}

/// A plain addition (no limit, no idempotency key) is one statement, prepared once per
/// connection and run in one round trip, and takes no lock on the account's row: it goes
/// through while another transaction is updating the account (as a login recording its
/// instant does), which an addition under the row lock waited for until that commit (issue 30
/// point 7). Counted with pg_stat_statements, which tools/throwaway-postgres loads.
#[test]
fn a_plain_addition_is_one_statement_and_waits_for_no_account_update() {
    on_fresh_store(|store, _, _| async move {
        let inbox = store.inbox();
        let alice = created(
            inbox
                .accounts
                .register("alice", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        let stats = store.pool.get().await.expect("connection");
        let loaded = stats
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements; SELECT pg_stat_statements_reset()")
            .await;
        if let Err(e) = loaded {
            assert!(
                std::env::var_os("PIGEONHOLE_REQUIRE_POSTGRES").is_none(),
                "pg_stat_statements is not loaded (tools/throwaway-postgres loads it): {e}"
            );
            eprintln!("skipped: pg_stat_statements is not loaded: {e}");
            return;
        }
        for i in 0..50 {
            let item = text_item(&format!("item {i}"), at(100 + i, 0));
            let written = inbox.add_item(alice.id, &item, None, None).await.expect("add");
            written.durable().await.expect("durable");
        }
        let calls: Vec<(String, i64)> = stats
            .query(
                "SELECT query, calls FROM pg_stat_statements \
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND query NOT LIKE '%pg_stat_statements%' ORDER BY query",
                &[],
            )
            .await
            .expect("statements")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert_eq!(calls.len(), 1, "one statement per addition: {calls:?}");
        assert!(calls[0].0.starts_with("INSERT INTO inbox_items"), "{calls:?}");
        assert_eq!(calls[0].1, 50, "{calls:?}");

        // an update of the account, not committed
        let mut holder = store.pool.get().await.expect("connection");
        let update = holder.transaction().await.expect("begin");
        update
            .execute(
                "UPDATE inbox_accounts SET last_login_secs = 5, last_login_nanos = 0 WHERE id = $1",
                &[&alice.id],
            )
            .await
            .expect("update");
        let item = text_item("beside the update", at(200, 0));
        let added = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            inbox.add_item(alice.id, &item, None, None),
        )
        .await
        .expect("the addition waited for the account's update to end")
        .expect("add");
        assert!(added.changed());
        // so does one with an idempotency key (a delivery's), and its repetition
        for _ in 0..2 {
            let keyed = text_item("keyed", at(201, 0));
            let written = tokio::time::timeout(
                std::time::Duration::from_secs(10),
                inbox.add_item(alice.id, &keyed, Some("delivery-1"), None),
            )
            .await
            .expect("the keyed addition waited for the account's update to end")
            .expect("add");
            written.durable().await.expect("durable");
        }
        update.commit().await.expect("commit");
        assert_eq!(inbox.count(alice.id).await.expect("count"), 52);
    });
}

/// Each account's item count is kept as items come and go, whichever way (additions plain,
/// keyed and concurrent, sync, deletion, the account's deletion), and the migration that
/// introduced the counters counts what a database held before it (issue 30 point 7).
#[test]
fn item_counts_are_kept_by_every_write_and_counted_at_the_migration() {
    on_fresh_database(|cluster, connection, db| async move {
        let store = store_on(&connection).await;
        let inbox = store.inbox();
        let mut accounts = Vec::new();
        for name in ["alice", "bob"] {
            accounts.push(
                created(
                    inbox
                        .accounts
                        .register(name, "h".into(), at(1, 0))
                        .await
                        .expect("register"),
                )
                .await,
            );
        }
        let (alice, bob) = (accounts[0].id, accounts[1].id);
        let adds: Vec<_> = (0..32)
            .map(|i| {
                let inbox = inbox.clone();
                tokio::spawn(async move {
                    let item = text_item(&format!("item {i}"), at(100 + i, 0));
                    let key = (i % 4 == 0).then(|| format!("key {i}"));
                    let written = inbox.add_item(alice, &item, key.as_deref(), None).await.expect("add");
                    written.durable().await.expect("durable");
                })
            })
            .collect();
        for add in adds {
            add.await.expect("task");
        }
        let repeated = inbox
            .add_item(alice, &text_item("again", at(1, 0)), Some("key 0"), None)
            .await
            .expect("add");
        repeated.durable().await.expect("durable");
        assert_eq!(inbox.count(alice).await.expect("count"), 32);
        let ids = inbox.item_ids(alice).await.expect("ids");
        let gone = inbox.delete_item(alice, ids[0]).await.expect("delete");
        assert!(gone.durable().await.expect("durable"));
        let mut decide = |items: &[crate::domain::inbox::models::InboxItem]| crate::domain::inbox::sync::ItemChanges {
            delete: items.iter().take(3).map(|i| i.id).collect(),
            add: (0..5)
                .map(|i| text_item(&format!("synced {i}"), at(500 + i, 0)))
                .collect(),
        };
        inbox
            .sync(alice, &mut decide)
            .await
            .expect("sync")
            .durable()
            .await
            .expect("durable");
        assert_eq!(inbox.count(alice).await.expect("count"), 33);
        for i in 0..3 {
            let written = inbox
                .add_item(bob, &text_item(&format!("b {i}"), at(9, 0)), None, None)
                .await
                .expect("add");
            written.durable().await.expect("durable");
        }
        assert_eq!(inbox.total_items().await.expect("total"), 36);
        let count = |sql: &str| cluster.psql(&db, sql).expect("psql");
        let truth = "SELECT string_agg(account || ':' || n, ',' ORDER BY account) FROM \
                     (SELECT account, count(*) AS n FROM inbox_items GROUP BY account) t";
        let kept = "SELECT string_agg(account || ':' || n, ',' ORDER BY account) FROM \
                    (SELECT account, sum(items) AS n FROM inbox_item_counts GROUP BY account) t";
        assert_eq!(count(kept), count(truth));
        // an account deleted takes its counters with it
        let deleted = inbox.delete_account(bob).await.expect("delete");
        assert!(deleted.durable().await.expect("durable"));
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM inbox_item_counts WHERE account = '{bob}'"
            )),
            "0"
        );
        assert_eq!(inbox.total_items().await.expect("total"), 33);
        // a database from before the counters: the migration counts its items
        drop(store);
        count(
            "DROP TABLE inbox_item_counts; DROP TRIGGER inbox_items_added ON inbox_items; \
             DROP TRIGGER inbox_items_deleted ON inbox_items; DROP FUNCTION inbox_items_added(); \
             DROP FUNCTION inbox_items_deleted(); DELETE FROM schema_migrations WHERE version = 5",
        );
        let (again, applied) = PgStore::connect(&connection).await.expect("start");
        assert_eq!(applied, [5]);
        assert_eq!(again.inbox().count(alice).await.expect("count"), 33);
        assert_eq!(count(kept), count(truth));
    });
}

#[test]
fn inbox_items_list_sync_and_go_with_their_account() {
    on_fresh_store(|store, cluster, db| async move {
        let inbox = store.inbox();
        let alice = created(
            inbox
                .accounts
                .register("alice", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        let carol = created(
            inbox
                .accounts
                .register("carol", "h".into(), at(1, 0))
                .await
                .expect("register"),
        )
        .await;
        // listed by created instant (nanoseconds count), then in the order of addition
        let late = text_item("late", at(50, 2));
        let early = text_item("early", at(50, 1));
        let same_a = text_item("same a", at(60, 0));
        let same_b = text_item("same b", at(60, 0));
        for item in [&late, &early, &same_a, &same_b] {
            let written = inbox.add_item(alice.id, item, None, None).await.expect("add");
            written.durable().await.expect("durable");
        }
        let png = crate::domain::inbox::models::InboxItem {
            kind: crate::domain::inbox::models::ItemType::Png,
            data: vec![0x89, 0, 0xFF],
            ..text_item("", at(70, 0))
        };
        let written = inbox.add_item(alice.id, &png, None, None).await.expect("add");
        written.durable().await.expect("durable");
        let ids = inbox.item_ids(alice.id).await.expect("ids");
        assert_eq!(ids, [early.id, late.id, same_a.id, same_b.id, png.id]);
        assert_eq!(inbox.items(alice.id).await.expect("items")[4], png);
        assert_eq!(inbox.first_item(alice.id).await.expect("first"), Some(early.clone()));
        assert_eq!(inbox.item(alice.id, png.id).await.expect("item"), Some(png.clone()));
        // another account's item is not found through this one
        assert_eq!(inbox.item(carol.id, png.id).await.expect("item"), None);
        assert!(!inbox
            .delete_item(carol.id, png.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        // a sync: the closure sees the items and says what changes
        let added = text_item("from a client", at(80, 0));
        let mut seen = 0;
        let mut decide = |items: &[crate::domain::inbox::models::InboxItem]| {
            seen = items.len();
            crate::domain::inbox::sync::ItemChanges {
                delete: vec![late.id, same_b.id, carol.id],
                add: vec![added.clone()],
            }
        };
        let written = inbox.sync(alice.id, &mut decide).await.expect("sync");
        assert!(written.changed());
        assert_eq!(seen, 5);
        let ids = inbox.item_ids(alice.id).await.expect("ids");
        assert_eq!(ids, [early.id, same_a.id, png.id, added.id]);
        let mut nothing = |_: &[crate::domain::inbox::models::InboxItem]| crate::domain::inbox::sync::ItemChanges {
            delete: vec![],
            add: vec![],
        };
        assert!(!inbox.sync(alice.id, &mut nothing).await.expect("sync").changed());
        // deleting the account deletes its items, keys and idempotency keys with it
        let written = inbox
            .add_item(alice.id, &text_item("k", at(90, 0)), Some("k"), None)
            .await
            .expect("add");
        written.durable().await.expect("durable");
        assert!(inbox
            .delete_account(alice.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        assert!(!inbox
            .delete_account(alice.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"));
        assert_eq!(inbox.count(alice.id).await.expect("count"), 0);
        assert!(inbox.accounts.get(alice.id).await.expect("get").is_none());
        let left = cluster
            .psql(
                &db,
                "SELECT (SELECT count(*) FROM inbox_items) || ',' || (SELECT count(*) FROM inbox_idempotency_keys)",
            )
            .expect("psql");
        assert_eq!(left, "0,0");
    });
}

mod throttles {
    use super::*;
    use crate::store::throttles::{Count, Throttle, Throttles, Turn};

    fn count(key: u8, most: u32, window: Duration) -> Count {
        Count {
            throttle: Throttle::LoginPair,
            key: [key; 16],
            most,
            window,
        }
    }

    fn counted(turn: Turn) -> crate::store::throttles::Taken {
        match turn {
            Turn::Counted(t) => t,
            Turn::Wait { throttle, after } => panic!("refused by {throttle:?} for {after:?}"),
        }
    }

    #[test]
    fn two_processes_count_together_all_or_none_and_exactly_under_contention() {
        on_fresh_database(|cluster, connection, db| async move {
            // two stores on one database: two processes' pools
            let (a, _) = PgStore::connect(&connection).await.expect("a");
            let (b, _) = PgStore::connect(&connection).await.expect("b");
            let (a, b) = (a.throttles(), b.throttles());
            let window = Duration::from_secs(600);
            let pair = count(1, 10, window);
            let mut held = Vec::new();
            for i in 0..10 {
                let side = if i % 2 == 0 { &a } else { &b };
                held.push(counted(side.take(&[pair]).await.expect("take")));
            }
            for side in [&a, &b] {
                match side.take(&[pair]).await.expect("take") {
                    Turn::Wait { throttle, after } => {
                        assert_eq!(throttle, Throttle::LoginPair);
                        assert!(after > Duration::from_secs(590) && after <= window, "{after:?}");
                    }
                    Turn::Counted(_) => panic!("an eleventh attempt through the other process"),
                }
            }
            // given back through the other process
            b.give_back(&held.pop().unwrap()).await.expect("give back");
            counted(a.take(&[pair]).await.expect("a slot again"));

            // all or none: a full address stops the pair's count too
            let address = Count {
                throttle: Throttle::LoginAddress,
                ..count(2, 1, window)
            };
            let other_pair = count(3, 10, window);
            counted(a.take(&[other_pair, address]).await.expect("take"));
            assert!(matches!(
                b.take(&[other_pair, address]).await.expect("take"),
                Turn::Wait {
                    throttle: Throttle::LoginAddress,
                    ..
                }
            ));
            let rows = cluster
                .psql(
                    &db,
                    "SELECT count(*) FROM throttle_events WHERE subject = '\\x03030303030303030303030303030303'",
                )
                .expect("psql");
            assert_eq!(rows.trim(), "1", "the refused take counted nothing");

            // 40 takes at once over both processes for 10 places: exactly 10 are counted
            let key = count(4, 10, window);
            let takes: Vec<_> = (0..40)
                .map(|i| {
                    let side = if i % 2 == 0 { a.clone() } else { b.clone() };
                    tokio::spawn(async move { side.take(&[key]).await.expect("take") })
                })
                .collect();
            let mut n = 0;
            for t in takes {
                n += usize::from(matches!(t.await.unwrap(), Turn::Counted(_)));
            }
            assert_eq!(n, 10);
        });
    }

    #[test]
    fn attempts_that_left_their_window_count_no_more_and_are_pruned() {
        on_fresh_database(|cluster, connection, db| async move {
            let (store, _) = PgStore::connect(&connection).await.expect("store");
            let t = store.throttles();
            // five attempts of an hour ago, through the database's own clock
            cluster
                .psql(
                    &db,
                    "INSERT INTO throttle_events (throttle, subject, attempt, at) \
                     SELECT 1, '\\x05050505050505050505050505050505', n, clock_timestamp() - interval '1 hour' \
                     FROM generate_series(1000001, 1000005) n",
                )
                .expect("psql");
            let c = count(5, 5, Duration::from_secs(600));
            for _ in 0..5 {
                counted(t.take(&[c]).await.expect("the old attempts do not count"));
            }
            assert!(matches!(t.take(&[c]).await.expect("take"), Turn::Wait { .. }));
            let rows = cluster
                .psql(
                    &db,
                    "SELECT count(*) FROM throttle_events WHERE at < clock_timestamp() - interval '30 minutes'",
                )
                .expect("psql");
            assert_eq!(rows.trim(), "0", "pruned by the takes of their kind");
        });
    }
}

#[test]
fn processes_starting_together_share_one_signing_key() {
    on_fresh_database(|_, connection, _| async move {
        let (a, _) = PgStore::connect(&connection).await.expect("a");
        let (b, _) = PgStore::connect(&connection).await.expect("b");
        let (ka, kb) = tokio::join!(a.signing_key(&[1; 64]), b.signing_key(&[2; 64]));
        let (ka, kb) = (ka.expect("a's key"), kb.expect("b's key"));
        assert_eq!(ka, kb, "one key for both");
        assert!(ka == [1; 64] || ka == [2; 64]);
        // a later start keeps it
        assert_eq!(a.signing_key(&[3; 64]).await.expect("again"), ka);
    });
}

#[test]
fn once_work_runs_in_one_process_and_moves_when_it_goes() {
    use leader::OnceWork;
    on_fresh_database(|_, connection, _| async move {
        let (a, _) = PgStore::connect(&connection).await.expect("a");
        let (b, _) = PgStore::connect(&connection).await.expect("b");
        let period = Duration::from_millis(50);
        let mut first = a.lead(OnceWork::Payments, period);
        tokio::time::timeout(Duration::from_secs(10), first.acquired())
            .await
            .expect("a takes the work");
        let mut second = b.lead(OnceWork::Payments, period);
        // other work is another lock
        let mut notices = b.lead(OnceWork::AdminNotices, period);
        tokio::time::timeout(Duration::from_secs(10), notices.acquired())
            .await
            .expect("b takes the other work");
        // b has tried by now (it took the other lock on the same schedule): a still holds it
        let client = a.pool.get().await.expect("a connection");
        let holders: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND ((classid::bigint << 32) | objid::bigint) = $1",
                &[&(0x5069_6765_6f6e_0101_i64)],
            )
            .await
            .expect("pg_locks")
            .get(0);
        assert_eq!(holders, 1);
        assert!(first.holds() && !second.holds());
        // a's process goes: b takes over
        drop(first);
        tokio::time::timeout(Duration::from_secs(10), second.acquired())
            .await
            .expect("b takes the work over");
    });
}

#[test]
fn a_wake_up_reaches_every_listening_process() {
    on_fresh_database(|_, connection, _| async move {
        let (a, _) = PgStore::connect(&connection).await.expect("a");
        let (heard_b, mut at_b) = tokio::sync::mpsc::unbounded_channel::<String>();
        let (heard_c, mut at_c) = tokio::sync::mpsc::unbounded_channel::<String>();
        let b = notify::listen(
            connection.clone(),
            Duration::from_millis(50),
            move |n| {
                let _ = heard_b.send(n.to_owned());
            },
            || {},
        );
        let c = notify::listen(
            connection.clone(),
            Duration::from_millis(50),
            move |n| {
                let _ = heard_c.send(n.to_owned());
            },
            || {},
        );
        // listening starts a moment after: send until both have heard one
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut heard = (None, None);
        while heard.0.is_none() || heard.1.is_none() {
            assert!(tokio::time::Instant::now() < deadline, "not heard: {heard:?}");
            a.notify("triggerer").await;
            tokio::select! {
                Some(n) = at_b.recv(), if heard.0.is_none() => heard.0 = Some(n),
                Some(n) = at_c.recv(), if heard.1.is_none() => heard.1 = Some(n),
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        assert_eq!(heard, (Some("triggerer".to_owned()), Some("triggerer".to_owned())));
        b.abort();
        c.abort();
    });
}

/// A listener that loses its connection (the database went away) says so once it listens
/// again, and not at its first listening: the process then wakes its workers instead of
/// leaving them to wait out their back-off (issue 30).
#[test]
fn a_listener_that_listens_again_after_losing_its_connection_says_the_database_is_back() {
    on_fresh_database(|_, connection, _| async move {
        let (a, _) = PgStore::connect(&connection).await.expect("a");
        let (heard, mut at) = tokio::sync::mpsc::unbounded_channel::<String>();
        let (back, mut backs) = tokio::sync::mpsc::unbounded_channel::<()>();
        let listener = notify::listen(
            connection.clone(),
            Duration::from_millis(50),
            move |n| {
                let _ = heard.send(n.to_owned());
            },
            move || {
                let _ = back.send(());
            },
        );
        // listening: a wake-up is heard, and nothing said about a return
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            assert!(tokio::time::Instant::now() < deadline, "no wake-up heard");
            a.notify("triggerer").await;
            tokio::select! {
                Some(_) = at.recv() => break,
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
        assert!(backs.try_recv().is_err(), "the first listening is no return");
        // its connection ends (as at an outage): once it listens again, it says so
        let client = a.pool.get().await.expect("a connection");
        let ended = client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND query = 'LISTEN pigeonhole_wake'",
                &[],
            )
            .await
            .expect("end the listener's connection");
        assert_eq!(ended.get::<_, i64>(0), 1);
        tokio::time::timeout(Duration::from_secs(10), backs.recv())
            .await
            .expect("listening again within 10 s")
            .expect("said once");
        listener.abort();
    });
}

/// TLS by rustls over TCP (a loopback cluster with a self-signed certificate): `require` and
/// `prefer` encrypt, `disable` does not, `verify-ca` and `verify-full` refuse a certificate
/// that no trusted root signed.
#[test]
fn tls_is_rustls_and_sslmode_is_honoured() {
    let Some(cluster) = Cluster::start_with_tls_or_skip("tls_is_rustls_and_sslmode_is_honoured") else {
        return;
    };
    let db = cluster.fresh_database();
    let port = cluster.tls_port().expect("a TLS port");
    let over_tcp = |tls| Connection::new("postgres", Host::Tcp("localhost".into()), port, &db, tls);
    runtime().block_on(async {
        for (mode, encrypted) in [
            (TlsMode::Require, true),
            (TlsMode::Prefer, true),
            (TlsMode::Disable, false),
        ] {
            let (store, _) = PgStore::connect(&over_tcp(mode))
                .await
                .unwrap_or_else(|e| panic!("{mode:?}: {e}\n{}", cluster.log()));
            let client = store.pool.get().await.expect("connection");
            let ssl: bool = client
                .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
                .await
                .expect("pg_stat_ssl")
                .get(0);
            assert_eq!(ssl, encrypted, "{mode:?}");
        }
        for mode in [TlsMode::VerifyCa, TlsMode::VerifyFull] {
            let err = PgStore::connect(&over_tcp(mode)).await.err();
            assert!(
                matches!(&err, Some(PgError::Connect(why)) if why.contains("certificate")),
                "{mode:?}: {err:?}"
            );
        }
    });
}

/// Runs `openssl` with `args` in `dir`, asserting it succeeds.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A private CA in `dir` (`ca.crt`, `ca.key`) and a certificate it signs for `name`
/// (`<file>.crt`, `<file>.key`), with `ext` (an X.509 v3 extensions line).
fn signed(dir: &std::path::Path, file: &str, name: &str, ext: &str) {
    if !dir.join("ca.crt").exists() {
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=pigeonhole test CA",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        );
    }
    std::fs::write(
        dir.join(format!("{file}.ext")),
        format!("basicConstraints=CA:FALSE\n{ext}\n"),
    )
    .expect("ext");
    let subject = format!("/CN={name}");
    let (key, csr, crt, extfile) = (
        format!("{file}.key"),
        format!("{file}.csr"),
        format!("{file}.crt"),
        format!("{file}.ext"),
    );
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", &subject, "-keyout", &key, "-out", &csr,
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &crt,
            "-extfile",
            &extfile,
        ],
    );
}

/// `sslrootcert`, `sslcert`, `sslkey`: the cluster's certificate signed by a private CA;
/// with that CA as the root, `verify-full` and `verify-ca` connect over TLS (without it,
/// Mozilla's roots refuse the certificate); once the server asks for a client certificate
/// signed by the CA, a connection without one is refused and one with it connects, as the
/// certificate's name. A root file that holds no certificate is an error naming the file.
#[test]
fn a_private_ca_and_a_client_certificate() {
    let Some(cluster) = Cluster::start_with_tls_or_skip("a_private_ca_and_a_client_certificate") else {
        return;
    };
    let db = cluster.fresh_database();
    let port = cluster.tls_port().expect("a TLS port");
    let pki = tempfile::tempdir().expect("a directory");
    signed(
        pki.path(),
        "server",
        "localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
    );
    signed(pki.path(), "client", "postgres", "extendedKeyUsage=clientAuth");
    let data = cluster.socket_dir().join("data");
    // copied over the cluster's own files, which keep their owner and mode
    std::fs::copy(pki.path().join("server.crt"), data.join("server.crt")).expect("server.crt");
    std::fs::copy(pki.path().join("server.key"), data.join("server.key")).expect("server.key");
    std::fs::copy(pki.path().join("ca.crt"), data.join("client-ca.crt")).expect("client-ca.crt");
    // as the superuser over the Unix socket (no TLS, no certificate)
    let admin = |sql: &'static str| {
        let local = Connection::new(
            "postgres",
            Host::Unix(cluster.socket_dir().to_owned()),
            port,
            "postgres",
            TlsMode::Disable,
        );
        async move {
            let (config, tls) = config_of(&local).expect("config");
            let (client, connection) = config.connect(tls).await.expect("connect over the socket");
            let task = tokio::spawn(connection);
            client.batch_execute(sql).await.expect(sql);
            task.abort();
        }
    };
    let connection = |tls, root: Option<&std::path::Path>, client: bool| {
        let mut c = Connection::new("postgres", Host::Tcp("localhost".into()), port, &db, tls);
        c.tls_files.root_cert = root.map(|r| r.to_owned());
        if client {
            c.tls_files.client_cert = Some((pki.path().join("client.crt"), pki.path().join("client.key")));
        }
        c
    };
    let ca = pki.path().join("ca.crt");
    runtime().block_on(async {
        admin("SELECT pg_reload_conf()").await;
        let encrypted = |store: PgStore| async move {
            let client = store.pool.get().await.expect("connection");
            let row = client
                .query_one(
                    "SELECT ssl, coalesce(client_dn, '') FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                    &[],
                )
                .await
                .expect("pg_stat_ssl");
            (row.get::<_, bool>(0), row.get::<_, String>(1))
        };
        // the reload takes the new certificate a moment later
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let store = loop {
            match PgStore::connect(&connection(TlsMode::VerifyFull, Some(&ca), false)).await {
                Ok((store, _)) => break store,
                Err(e) if std::time::Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(50)).await; // poll
                }
                Err(e) => panic!("verify-full with the private CA: {e}\n{}", cluster.log()),
            }
        };
        assert_eq!(encrypted(store).await, (true, String::new()));
        let (store, _) = PgStore::connect(&connection(TlsMode::VerifyCa, Some(&ca), false))
            .await
            .expect("verify-ca with the private CA");
        assert!(encrypted(store).await.0);
        let err = PgStore::connect(&connection(TlsMode::VerifyFull, None, false))
            .await
            .err();
        assert!(
            matches!(&err, Some(PgError::Connect(why)) if why.contains("certificate")),
            "{err:?}"
        );

        // the server now asks for a client certificate signed by the CA
        let hba = data.join("pg_hba.conf");
        let rules = std::fs::read_to_string(&hba).expect("pg_hba.conf");
        std::fs::write(
            &hba,
            format!("hostssl all all 127.0.0.1/32 cert\nhostssl all all ::1/128 cert\n{rules}"),
        )
        .expect("pg_hba.conf");
        admin("ALTER SYSTEM SET ssl_ca_file = 'client-ca.crt'").await;
        admin("SELECT pg_reload_conf()").await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while PgStore::connect(&connection(TlsMode::VerifyFull, Some(&ca), false))
            .await
            .is_ok()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no client certificate is asked for"
            );
            tokio::time::sleep(Duration::from_millis(50)).await; // poll
        }
        let (store, _) = PgStore::connect(&connection(TlsMode::VerifyFull, Some(&ca), true))
            .await
            .unwrap_or_else(|e| panic!("with the client certificate: {e}\n{}", cluster.log()));
        assert_eq!(encrypted(store).await, (true, "/CN=postgres".to_owned()));

        let empty = tempfile::NamedTempFile::new().expect("a file");
        let err = PgStore::connect(&connection(TlsMode::VerifyFull, Some(empty.path()), false))
            .await
            .err();
        assert!(
            matches!(&err, Some(PgError::Tls(why)) if why.contains(&empty.path().display().to_string())),
            "{err:?}"
        );
    });
}

mod scheduler_items {
    use super::*;
    use crate::domain::scheduler::models::{Day, Recurrence, ScheduledItem, Tickle, TimeOfDay, TimeZoneSetting};
    use crate::domain::wire::Timestamp;
    use crate::store::scheduler::AddOutcome;

    fn tod(hour: u32, minute: u32, second: u32, nanos: u32) -> TimeOfDay {
        TimeOfDay {
            hour,
            minute,
            second,
            nanos,
        }
    }

    fn item(
        owner: uuid::Uuid,
        content: &str,
        recurrence: Option<Recurrence>,
        time: Option<TimeOfDay>,
    ) -> ScheduledItem {
        ScheduledItem {
            id: crate::domain::wire::new_uuid(),
            owner,
            tickle: Tickle {
                content: content.as_bytes().to_vec(),
                day: Day {
                    year: 2024,
                    month: 2,
                    day: 29,
                },
                time,
                recurrence,
            },
            created: at(1_700_000_000, 42),
            server_time: 7,
        }
    }

    async fn add(s: &PgScheduler, item: &ScheduledItem, due: Timestamp) {
        let written = s.add_scheduled(item, &|_| due, None).await.expect("add");
        assert!(matches!(written.durable().await, Ok(AddOutcome::Added)));
    }

    #[test]
    fn scheduled_items_keep_every_field_and_the_due_index_keeps_nanoseconds() {
        on_fresh_store(|store, _, _| async move {
            let s = store.scheduler();
            let owner = created(
                s.accounts
                    .register("alice", "h".into(), at(1, 0))
                    .await
                    .expect("register"),
            )
            .await
            .id;
            let plain = item(owner, "plain", None, None);
            let leap = item(
                owner,
                "leap",
                Some(Recurrence::EveryDays {
                    days: u32::MAX,
                    time: Some(tod(23, 59, 60, 500_000_000)),
                }),
                Some(tod(7, 5, 3, 250_000_001)),
            );
            let monthly = item(
                owner,
                "monthly",
                Some(Recurrence::EveryMonths {
                    months: 3,
                    day: Some(31),
                    time: None,
                }),
                Some(tod(0, 0, 0, 0)),
            );
            let mut binary = item(owner, "", None, None);
            binary.tickle.content = vec![0xFF, 0, 0xFE];
            add(&s, &plain, at(2_000, 3)).await;
            add(&s, &leap, at(2_000, 1)).await;
            add(&s, &monthly, at(2_000, 2)).await;
            add(&s, &binary, at(3_000, 0)).await;
            for want in [&plain, &leap, &monthly, &binary] {
                assert_eq!(s.scheduled(owner, want.id).await.expect("read").as_ref(), Some(want));
            }
            let listed: Vec<_> = s
                .scheduled_items(owner)
                .await
                .expect("list")
                .into_iter()
                .map(|i| i.id)
                .collect();
            assert_eq!(listed, [plain.id, leap.id, monthly.id, binary.id]);
            // the due index orders by nanoseconds and stops at `now`, nanosecond-exact
            assert_eq!(s.next_due().await.expect("next"), Some(at(2_000, 1)));
            let due = s.due_items(at(2_000, 2), 10).await.expect("due");
            assert_eq!(due, [(at(2_000, 1), owner, leap.id), (at(2_000, 2), owner, monthly.id)]);
            assert_eq!(s.due_count(at(2_000, 3), 10).await.expect("count"), 3);
            assert_eq!(s.due_count(at(9_000, 0), 2).await.expect("count"), 2);
            assert_eq!(s.counts(owner).await.expect("counts"), (4, 0));
            // a cap counts the scheduled items
            let over = item(owner, "over", None, None);
            let written = s.add_scheduled(&over, &|_| at(1, 0), Some(4)).await.expect("add");
            assert!(matches!(written.durable().await, Ok(AddOutcome::LimitReached)));
            // a setting moves every item's due instant, and the due closure sees it
            let zone = TimeZoneSetting {
                offset: -90,
                name: "somewhere".into(),
                summer: true,
            };
            let moved = s
                .put_settings(owner, &zone, &|i: &ScheduledItem| {
                    at(5_000, i.tickle.content.len() as u32)
                })
                .await
                .expect("settings");
            moved.durable().await.expect("durable");
            assert_eq!(s.settings(owner).await.expect("settings"), zone);
            // the shortest content (3 bytes, the binary one) is due first
            assert_eq!(s.next_due().await.expect("next"), Some(at(5_000, 3)));
            let mut seen = None;
            let edited = s
                .edit_scheduled(owner, plain.id, &mut |mut i: ScheduledItem, z: &TimeZoneSetting| {
                    seen = Some(z.clone());
                    i.tickle.content = b"edited".to_vec();
                    (i, at(6_000, 0))
                })
                .await
                .expect("edit");
            assert!(edited.durable().await.expect("durable"));
            assert_eq!(seen, Some(zone));
            let plain_now = s.scheduled(owner, plain.id).await.expect("read").expect("there");
            assert_eq!(plain_now.tickle.content, b"edited");
            // editing keeps the item's place in the listing
            let listed: Vec<_> = s
                .scheduled_items(owner)
                .await
                .expect("list")
                .into_iter()
                .map(|i| i.id)
                .collect();
            assert_eq!(listed[0], plain.id);
        });
    }

    /// A round of due items is triggered in transactions of up to 64 items (every owner's
    /// row locked once in each), and its target lists are expanded the same way, instead of
    /// one transaction (and one commit) per item: due → inbox on PostgreSQL (issue 30
    /// point 7). Counted with pg_stat_statements, which tools/throwaway-postgres loads.
    #[test]
    fn a_round_of_due_items_is_triggered_and_expanded_in_few_transactions() {
        on_fresh_store(|store, cluster, db| async move {
            let s = store.scheduler();
            let mut owners = Vec::new();
            for name in ["alice", "bob"] {
                let owner = created(s.accounts.register(name, "h".into(), at(1, 0)).await.expect("register"))
                    .await
                    .id;
                cluster
                    .psql(
                        &db,
                        &format!(
                            "INSERT INTO triggers (id, account, created_secs, created_nanos, kind, inbox_url, \
                             inbox_username, inbox_access_key) VALUES (gen_random_uuid(), '{owner}', 1, 0, 'inbox', \
                             'http://x', 'u', 'k')"
                        ),
                    )
                    .expect("a trigger");
                owners.push(owner);
            }
            let once: Vec<ScheduledItem> = (0..100)
                .map(|i| item(owners[i % 2], &format!("item {i}"), None, None))
                .collect();
            for (i, it) in once.iter().enumerate() {
                add(&s, it, at(10_000, i as u32)).await;
            }
            let due = s.due_items(at(10_001, 0), 200).await.expect("due");
            assert_eq!(due.len(), 100);
            let stats = store.pool.get().await.expect("connection");
            if let Err(e) = stats
                .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                .await
            {
                assert!(
                    std::env::var_os("PIGEONHOLE_REQUIRE_POSTGRES").is_none(),
                    "pg_stat_statements: {e}"
                );
                return;
            }
            let transactions = || async {
                let row = stats
                    .query_one(
                        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
                         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                         AND query = 'START TRANSACTION'",
                        &[],
                    )
                    .await
                    .expect("statements");
                row.get::<_, i64>(0)
            };
            // statements run, but the transactions' beginnings and ends (and these counts)
            let statements = || async {
                let row = stats
                    .query_one(
                        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements \
                         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                         AND query NOT IN ('START TRANSACTION', 'COMMIT') AND query NOT LIKE '%pg_stat_statements%'",
                        &[],
                    )
                    .await
                    .expect("statements");
                row.get::<_, i64>(0)
            };
            stats
                .batch_execute("SELECT pg_stat_statements_reset()")
                .await
                .expect("reset");
            let mut next = |_: &ScheduledItem, _: &TimeZoneSetting| None;
            let results = s.trigger_items(&due, at(10_001, 0), &mut next).await;
            assert_eq!(results.len(), 100);
            let mut copies = std::collections::HashSet::new();
            for result in results {
                let copy = result
                    .expect("trigger")
                    .durable()
                    .await
                    .expect("durable")
                    .expect("a copy");
                copies.insert(copy.tickle.content);
            }
            assert_eq!(copies.len(), 100, "each item once");
            assert_eq!(transactions().await, 2, "100 items in rounds of 64");
            // each round in 10 statements, not a few per item: the owners locked, the items
            // read, each owner's triggers and time zone (2 owners), the copies inserted, each
            // owner's target list of kind 'inbox', the items deleted
            assert_eq!(statements().await, 20, "statements of the triggering");
            assert_eq!(s.counts(owners[0]).await.expect("counts"), (0, 50));
            let lists = cluster
                .psql(
                    &db,
                    "SELECT string_agg(triggered_item::text, ',' ORDER BY seq) FROM delivery_targets",
                )
                .expect("psql");
            stats
                .batch_execute("SELECT pg_stat_statements_reset()")
                .await
                .expect("reset");
            let expanded = s.expand_targets(false, usize::MAX).await.expect("expand");
            assert_eq!(expanded.durable().await.expect("durable"), 100);
            // two rounds of 64 and the one that finds none left
            assert_eq!(transactions().await, 3);
            // each round in 4 statements (its lists, their removal, their triggers, the
            // deliveries), the last in one: not a few per list
            assert_eq!(statements().await, 9, "statements of the expansion");
            let pending = cluster.psql(&db, "SELECT count(*) FROM deliveries").expect("psql");
            assert_eq!(pending, "100");
            // queued in the order of their lists
            let queued = cluster
                .psql(&db, "SELECT string_agg(item::text, ',' ORDER BY seq) FROM deliveries")
                .expect("psql");
            assert_eq!(queued, lists);
        });
    }

    #[test]
    fn an_occurrence_triggers_once_however_many_triggerers_race() {
        on_fresh_store(|store, cluster, db| async move {
            let s = store.scheduler();
            let owner = created(
                s.accounts
                    .register("alice", "h".into(), at(1, 0))
                    .await
                    .expect("register"),
            )
            .await
            .id;
            let daily = item(
                owner,
                "daily",
                Some(Recurrence::EveryDays { days: 1, time: None }),
                None,
            );
            let once = item(owner, "once", None, None);
            add(&s, &daily, at(10_000, 5)).await;
            add(&s, &once, at(10_000, 6)).await;
            // triggers of the account: an inbox, a verified and an unverified e-mail
            for (kind, verified) in [("inbox", None), ("email", Some(true)), ("email", Some(false))] {
                let sql = match (kind, verified) {
                    ("inbox", _) => format!(
                        "INSERT INTO triggers (id, account, created_secs, created_nanos, kind, inbox_url, inbox_username, \
                         inbox_access_key) VALUES (gen_random_uuid(), '{owner}', 1, 0, 'inbox', 'http://x', 'u', 'k')"
                    ),
                    (_, v) => format!(
                        "INSERT INTO triggers (id, account, created_secs, created_nanos, kind, email_address, \
                         email_verified, email_key_digest) VALUES (gen_random_uuid(), '{owner}', 1, 0, 'email', \
                         'a@b.c', {}, decode(repeat('00', 32), 'hex'))",
                        v.unwrap_or(false)
                    ),
                };
                cluster.psql(&db, &sql).expect("a trigger");
            }
            let due = s.due_items(at(10_000, 6), 10).await.expect("due");
            assert_eq!(due.len(), 2);
            // eight triggerers race for each entry: one copy per occurrence
            let mut copies = 0;
            for entry in due.clone() {
                let races: Vec<_> = (0..8)
                    .map(|_| {
                        let s = s.clone();
                        tokio::spawn(async move {
                            let mut next = |i: &ScheduledItem, _: &TimeZoneSetting| {
                                i.tickle.recurrence.map(|_| (i.clone(), at(96_400, 5)))
                            };
                            s.trigger_item(entry, at(10_000, 7), &mut next).await
                        })
                    })
                    .collect();
                for race in races {
                    let written = race.await.expect("task").expect("trigger");
                    if let Some(copy) = written.durable().await.expect("durable") {
                        copies += 1;
                        assert_eq!(copy.triggered, at(10_000, 7));
                        assert_eq!(copy.owner, owner);
                    }
                }
            }
            assert_eq!(copies, 2);
            // the daily item moved to its next occurrence, the other is gone
            assert_eq!(s.due_items(at(10_000, 7), 10).await.expect("due"), []);
            assert_eq!(s.next_due().await.expect("next"), Some(at(96_400, 5)));
            assert!(s.scheduled(owner, once.id).await.expect("read").is_none());
            assert_eq!(s.counts(owner).await.expect("counts"), (1, 2));
            let triggered = s.triggered_items(owner).await.expect("triggered");
            assert_eq!(triggered.len(), 2);
            assert_eq!(triggered[0].tickle, daily.tickle);
            // the same occurrence again (a stale entry): nothing
            let mut next = |_: &ScheduledItem, _: &TimeZoneSetting| None;
            let again = s.trigger_item(due[0], at(10_000, 8), &mut next).await.expect("trigger");
            assert!(!again.changed());
            // each copy has its delivery targets: the inbox trigger and the verified e-mail
            let targets = cluster
                .psql(
                    &db,
                    "SELECT string_agg(kind || ':' || cardinality(triggers), ',' ORDER BY seq) FROM delivery_targets",
                )
                .expect("psql");
            assert_eq!(targets, "inbox:1,email:1,inbox:1,email:1");
            // attempts are read with their item
            cluster
                .psql(
                    &db,
                    &format!(
                        "INSERT INTO trigger_attempts VALUES ('{}', 0, gen_random_uuid(), 1, 2, gen_random_uuid(), \
                         'inbox_failed', NULL, 'refused')",
                        triggered[0].id
                    ),
                )
                .expect("an attempt");
            let read = s.triggered(owner, triggered[0].id).await.expect("read").expect("there");
            assert_eq!(read.attempts.len(), 1);
            assert_eq!(
                read.attempts[0].outcome,
                crate::domain::scheduler::models::Outcome::InboxFailed("refused".into())
            );
            assert_eq!(read.attempts[0].trigger_created, at(1, 2));
            // deleting a triggered item takes its targets with it; deleting the account, the rest
            assert!(s.delete_item(owner, triggered[0].id).await.expect("delete").changed());
            assert_eq!(
                cluster
                    .psql(&db, "SELECT count(*) FROM delivery_targets")
                    .expect("psql"),
                "2"
            );
            assert!(s.delete_account(owner).await.expect("delete").changed());
            assert_eq!(s.total_counts().await.expect("totals"), (0, 0));
            let left = cluster
                .psql(
                    &db,
                    "SELECT (SELECT count(*) FROM triggers) + (SELECT count(*) FROM delivery_targets)",
                )
                .expect("psql");
            assert_eq!(left, "0");
        });
    }
}

mod queues {
    use super::*;
    use crate::domain::email::{QueuedEmail, Stage};
    use crate::domain::scheduler::models::{
        Day, Delivery, Recurrence, ScheduledItem, Tickle, TimeZoneSetting, Trigger, TriggerKind,
    };
    use crate::store::scheduler::QueueKey;

    fn trigger(owner: uuid::Uuid, kind: TriggerKind, secs: i64) -> Trigger {
        Trigger {
            id: crate::domain::wire::new_uuid(),
            owner,
            created: at(secs, 9),
            kind,
        }
    }

    fn email_trigger(owner: uuid::Uuid, verified: bool) -> Trigger {
        trigger(
            owner,
            TriggerKind::Email {
                address: "a@example.org".into(),
                verified,
                key_digest: [3; 32],
            },
            20,
        )
    }

    fn inbox_trigger(owner: uuid::Uuid) -> Trigger {
        trigger(
            owner,
            TriggerKind::Inbox {
                url: "http://127.0.0.1:1".into(),
                username: "bob".into(),
                access_key: "ab".into(),
            },
            10,
        )
    }

    /// A scheduled item due at `due`, triggered at `due`: the triggered copy.
    async fn triggered(s: &PgScheduler, owner: uuid::Uuid, due: crate::domain::wire::Timestamp) -> uuid::Uuid {
        let item = ScheduledItem {
            id: crate::domain::wire::new_uuid(),
            owner,
            tickle: Tickle {
                content: b"x".to_vec(),
                day: Day {
                    year: 2030,
                    month: 1,
                    day: 1,
                },
                time: None,
                recurrence: None::<Recurrence>,
            },
            created: at(1, 0),
            server_time: 0,
        };
        let added = s.add_scheduled(&item, &|_| due, None).await.expect("add");
        added.durable().await.expect("durable");
        let mut done = |_: &ScheduledItem, _: &TimeZoneSetting| None;
        let copy = s
            .trigger_item((due, owner, item.id), due, &mut done)
            .await
            .expect("trigger");
        copy.durable().await.expect("durable").expect("a copy").id
    }

    /// A store of its own: another "process" on the database (its own claimant), claims
    /// held for `lease`.
    async fn process(connection: &Connection, lease: std::time::Duration) -> PgScheduler {
        store_on(connection).await.with_lease(lease).scheduler()
    }

    /// Several expanders at once in two processes: every list is expanded exactly once.
    #[test]
    fn concurrent_expanders_take_each_target_list_once() {
        on_fresh_database(|_, connection, _| async move {
            let lease = std::time::Duration::from_secs(60);
            let (one, two) = (process(&connection, lease).await, process(&connection, lease).await);
            alice_with_triggered(&one, 20).await;
            let expanders: Vec<_> = [&one, &two, &one, &two]
                .into_iter()
                .map(|s| {
                    let s = s.clone();
                    tokio::spawn(async move { s.expand_targets(false, usize::MAX).await })
                })
                .collect();
            let mut total = 0;
            for e in expanders {
                total += e
                    .await
                    .expect("task")
                    .expect("expand")
                    .durable()
                    .await
                    .expect("durable");
            }
            assert_eq!(total, 20);
            let pending = one.pending_deliveries(100).await.expect("pending");
            assert_eq!(pending.len(), 20);
            let items: std::collections::HashSet<_> = pending
                .iter()
                .map(|(_, d)| d.as_ref().expect("a delivery").item)
                .collect();
            assert_eq!(items.len(), 20);
        });
    }

    /// Adds the owner's scheduled item number `i` (its content), due at `due`.
    async fn add_due(s: &PgScheduler, owner: uuid::Uuid, i: u32, due: crate::domain::wire::Timestamp) {
        let item = ScheduledItem {
            id: crate::domain::wire::new_uuid(),
            owner,
            tickle: Tickle {
                content: format!("{i}").into_bytes(),
                day: Day {
                    year: 2030,
                    month: 1,
                    day: 1,
                },
                time: None,
                recurrence: None,
            },
            created: at(1, i),
            server_time: 0,
        };
        s.add_scheduled(&item, &|_| due, None)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable");
    }

    /// Two "processes" on the database (stores of their own), claims held for `leases`, and
    /// the account of alice made through the first.
    async fn alice_and_two_processes(
        connection: &Connection,
        leases: [std::time::Duration; 2],
    ) -> ([PgStore; 2], uuid::Uuid) {
        let one = store_on(connection).await.with_lease(leases[0]);
        let two = store_on(connection).await.with_lease(leases[1]);
        let owner = alice_of(&one.scheduler()).await;
        ([one, two], owner)
    }

    /// The scheduler account of alice, made through `s`.
    async fn alice_of(s: &PgScheduler) -> uuid::Uuid {
        let registered = s
            .accounts
            .register("alice", "h".into(), at(1, 0))
            .await
            .expect("register");
        created(registered).await.id
    }

    /// Alice (made through `s`) with an inbox trigger and `n` triggered items (triggered
    /// at 100, 101, …), whose target lists wait to be expanded.
    async fn alice_with_triggered(s: &PgScheduler, n: i64) -> uuid::Uuid {
        let owner = alice_of(s).await;
        assert!(s.add_trigger(&inbox_trigger(owner), None).await.expect("add").changed());
        for i in 0..n {
            triggered(s, owner, at(100 + i, 0)).await;
        }
        owner
    }

    /// Deliveries of one item that finish at once each record their attempt, numbered one
    /// after the other: a finish whose number another took while it waited for the item's
    /// lock runs again (issue 30 point 7: a finish is one statement).
    #[test]
    fn deliveries_of_one_item_finishing_at_once_each_record_their_attempt() {
        use crate::domain::scheduler::models::Outcome;
        use crate::store::Deliveries;
        on_fresh_store(|store, cluster, db| async move {
            let s = store.scheduler();
            let owner = alice_with_triggered(&s, 0).await;
            for _ in 0..3 {
                assert!(s.add_trigger(&inbox_trigger(owner), None).await.expect("add").changed());
            }
            for i in 0..8 {
                triggered(&s, owner, at(100 + i, 0)).await;
            }
            let expanded = s.expand_targets(false, usize::MAX).await.expect("expand");
            assert_eq!(expanded.durable().await.expect("durable"), 8);
            let pending = s.pending_deliveries(usize::MAX).await.expect("pending");
            assert_eq!(pending.len(), 32, "8 items, 4 triggers");
            let finishes = pending.into_iter().map(|(k, d)| {
                let s = s.clone();
                tokio::spawn(async move {
                    let d = d.expect("a delivery");
                    let added = crate::domain::wire::new_uuid();
                    s.finish_delivery(&k, &d, Outcome::InboxAdded(added))
                        .await
                        .expect("finish")
                        .durable()
                        .await
                        .expect("durable");
                })
            });
            for finish in finishes.collect::<Vec<_>>() {
                finish.await.expect("a finish");
            }
            let numbered = cluster
                .psql(
                    &db,
                    "SELECT string_agg(DISTINCT n, ',') FROM (SELECT string_agg(position::text, ' ' ORDER BY position) AS n \
                     FROM trigger_attempts GROUP BY triggered_item) p",
                )
                .expect("psql");
            assert_eq!(numbered, "0 1 2 3", "every item: 4 attempts, numbered 0 to 3");
            assert_eq!(cluster.psql(&db, "SELECT count(*) FROM deliveries").expect("psql"), "0");
        });
    }

    /// How many rows of `table` some process holds.
    async fn claimed(s: &PgScheduler, table: &str) -> i64 {
        let client = s.pool.get().await.expect("a connection");
        client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE claimed_by IS NOT NULL"),
                &[],
            )
            .await
            .expect("count")
            .get(0)
    }

    /// Two processes on the queues (issue 30 point 3): reading claims nothing; each claims
    /// what it starts, one at a time, and a row one holds the other can neither claim nor
    /// read; giving back and postponing end a claim; the holder's heartbeat keeps its claims
    /// however long it works (renewal extends the lease), the other learns when they would
    /// run out; once the holder stops renewing (killed), its lease runs out and the other
    /// takes the work over.
    #[test]
    fn processes_claim_what_they_start_renew_it_and_take_over_a_silent_ones() {
        use crate::store::{ClaimedWork, Deliveries, Emails};
        use std::collections::HashSet;
        use std::time::{Duration, Instant};
        on_fresh_database(|_, connection, _| async move {
            let lease = Duration::from_secs(1);
            let ([one_store, two_store], owner) = alice_and_two_processes(&connection, [lease, 60 * lease]).await;
            let (one, two) = (one_store.scheduler(), two_store.scheduler());
            for trigger in [inbox_trigger(owner), email_trigger(owner, true)] {
                assert!(one.add_trigger(&trigger, None).await.expect("add").changed());
            }
            for i in 0..10 {
                triggered(&one, owner, at(100 + i, 0)).await;
            }
            for email in [false, true] {
                let expanded = one.expand_targets(email, usize::MAX).await.expect("expand");
                assert_eq!(expanded.durable().await.expect("durable"), 10);
            }
            let keys = |list: Vec<(QueueKey, crate::store::Result<Delivery>)>| {
                list.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
            };
            let mails = |list: Vec<(QueueKey, QueuedEmail)>| list.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
            // reading claims nothing, however much it reads
            let all = keys(Deliveries::pending_deliveries(&one, 100).await.expect("pending"));
            let all_mail = mails(
                Emails::queued_emails(&one, Stage::Triggered, 100)
                    .await
                    .expect("queued"),
            );
            assert_eq!((all.len(), all_mail.len()), (10, 10));
            assert_eq!(claimed(&one, "deliveries").await, 0, "a read claims nothing");
            assert_eq!(claimed(&one, "email_queue").await, 0, "a read claims nothing");
            // "one" starts 4 deliveries and 3 e-mails: those and no more are held
            for k in &all[..4] {
                assert!(Deliveries::claim_delivery(&one, k).await.expect("claim"));
            }
            for k in &all_mail[..3] {
                assert!(Emails::claim_email(&one, k).await.expect("claim"));
            }
            assert_eq!(claimed(&one, "deliveries").await, 4);
            assert_eq!(claimed(&one, "email_queue").await, 3);
            // a claim's commit does not wait for the WAL's flush, and only its own: every
            // connection that claimed commits durably again
            let connections = one.pool.status().size;
            let mut held = Vec::new();
            for _ in 0..connections {
                held.push(one.pool.get().await.expect("a connection"));
            }
            for client in &held {
                let row = client.query_one("SHOW synchronous_commit", &[]).await.expect("show");
                assert_eq!(row.get::<_, String>(0), "on");
            }
            drop(held);
            // "two" reads the rest only and cannot claim what "one" holds; "one" its own again
            let seen_by_two: HashSet<_> = keys(Deliveries::pending_deliveries(&two, 100).await.expect("pending"))
                .into_iter()
                .collect();
            assert_eq!(seen_by_two, all[4..].iter().cloned().collect());
            assert_eq!(
                mails(
                    Emails::queued_emails(&two, Stage::Triggered, 100)
                        .await
                        .expect("queued")
                ),
                all_mail[3..]
            );
            assert!(!Deliveries::claim_delivery(&two, &all[0]).await.expect("claim"));
            assert!(!Emails::claim_email(&two, &all_mail[0]).await.expect("claim"));
            assert!(Deliveries::claim_delivery(&one, &all[0]).await.expect("its own again"));
            assert_eq!(
                keys(Deliveries::pending_deliveries(&one, 100).await.expect("pending")),
                all
            );
            // given back (claimed, not started after all): free for "two"; giving back
            // another process's claim changes nothing
            Deliveries::release_deliveries(&two, &all[1..2]).await.expect("release");
            assert!(!Deliveries::claim_delivery(&two, &all[1]).await.expect("claim"));
            Deliveries::release_deliveries(&one, &all[3..4]).await.expect("release");
            assert!(Deliveries::claim_delivery(&two, &all[3]).await.expect("claim"));
            // a postponed delivery is free for whoever passes next
            let (k, d) = Deliveries::pending_deliveries(&two, 100)
                .await
                .expect("pending")
                .into_iter()
                .find(|(k, _)| *k == all[3])
                .expect("its own");
            let d = d.expect("a delivery");
            Deliveries::postpone_delivery(&two, &k, &Delivery { failures: 1, ..d })
                .await
                .expect("postpone")
                .durable()
                .await
                .expect("durable");
            assert!(Deliveries::claim_delivery(&one, &all[3]).await.expect("claim"));
            // "two" learns when "one"'s claims would run out: within its lease of 1 s
            let ends = |w| two_store.claims_elsewhere_end(w);
            for work in [ClaimedWork::Deliveries, ClaimedWork::Emails] {
                let end = ends(work).await.expect("asked").expect("held elsewhere");
                assert!(end <= lease, "{work:?}: {end:?}");
            }
            assert_eq!(ends(ClaimedWork::DueItems).await.expect("asked"), None);
            assert_eq!(
                one_store
                    .claims_elsewhere_end(ClaimedWork::Deliveries)
                    .await
                    .expect("asked"),
                None,
                "its own"
            );
            // "one" lives and renews: three leases later it still holds everything it started
            let alive_until = Instant::now() + 3 * lease;
            while Instant::now() < alive_until {
                assert_eq!(one_store.renew_claims().await.expect("renew"), 4 + 3);
                tokio::time::sleep(lease / 3).await;
                assert!(
                    !Deliveries::claim_delivery(&two, &all[0]).await.expect("claim"),
                    "renewed"
                );
                assert!(
                    !Emails::claim_email(&two, &all_mail[0]).await.expect("claim"),
                    "renewed"
                );
            }
            assert_eq!(
                Deliveries::pending_deliveries(&two, 100).await.expect("pending").len(),
                6,
                "renewed claims stay hidden from the other process"
            );
            // "one" stops renewing (killed): once its lease ran out, "two" takes it all over
            // (counted as taken over: the counters are the process's, so at least these 7)
            let taken_over_before = super::super::stats::counters().taken_over;
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut taken = HashSet::new();
            let mut taken_mail = HashSet::new();
            while taken.len() < 4 || taken_mail.len() < 3 {
                for k in &all[..4] {
                    if Deliveries::claim_delivery(&two, k).await.expect("claim") {
                        taken.insert(k.clone());
                    }
                }
                for k in &all_mail[..3] {
                    if Emails::claim_email(&two, k).await.expect("claim") {
                        taken_mail.insert(k.clone());
                    }
                }
                assert!(Instant::now() < deadline, "one's claims never ran out");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(
                super::super::stats::counters().taken_over >= taken_over_before + 7,
                "each claim of the silent process counted as taken over"
            );
            assert_eq!(
                Deliveries::pending_deliveries(&one, 100).await.expect("pending").len(),
                6
            );
            assert_eq!(ends(ClaimedWork::Deliveries).await.expect("asked"), None, "all its own");
            // a key of another engine is refused, typed
            let foreign = crate::store::scheduler::QueueKey::from_bytes(b"v-sled-key".to_vec());
            assert!(matches!(PgQueueKey::of(&foreign), Err(PgError::ForeignQueueKey(_))));
            assert!(Deliveries::remove_pending(&one, &foreign).await.is_err());
            assert!(Deliveries::claim_delivery(&one, &foreign).await.is_err());
        });
    }

    /// Due items: a batch claimed by a process is renewed by its heartbeat and hidden from
    /// another's next wake-up (`upcoming`), which learns when the claim ends instead.
    #[test]
    fn claimed_due_items_are_renewed_and_another_process_waits_for_their_end() {
        use crate::store::{ClaimedWork, ScheduledItems};
        use std::time::Duration;
        on_fresh_database(|_, connection, _| async move {
            let lease = Duration::from_secs(1);
            let ([one_store, two_store], owner) = alice_and_two_processes(&connection, [lease, lease]).await;
            let (one, two) = (one_store.scheduler(), two_store.scheduler());
            for i in 0..3u32 {
                add_due(&one, owner, i, at(1_000 + i64::from(i), 0)).await;
            }
            let batch = ScheduledItems::due_items(&one, at(1_001, 0), 10).await.expect("due");
            assert_eq!(batch.len(), 2, "the batch due");
            assert_eq!(claimed(&one, "scheduled_items").await, 2);
            let upcoming = ScheduledItems::upcoming(&two, 10).await.expect("upcoming");
            assert_eq!(
                upcoming.len(),
                1,
                "what another process triggers is not its wake-up: {upcoming:?}"
            );
            assert_eq!(upcoming[0].0, at(1_002, 0));
            let end = two_store
                .claims_elsewhere_end(ClaimedWork::DueItems)
                .await
                .expect("asked")
                .expect("held elsewhere");
            assert!(end <= lease, "{end:?}");
            tokio::time::sleep(lease / 2).await;
            assert_eq!(one_store.renew_claims().await.expect("renew"), 2);
            let renewed = two_store
                .claims_elsewhere_end(ClaimedWork::DueItems)
                .await
                .expect("asked")
                .expect("held elsewhere");
            assert!(
                renewed > lease / 2 + Duration::from_millis(100),
                "extended: {renewed:?}"
            );
            tokio::time::sleep(lease / 2 + Duration::from_millis(300)).await;
            assert!(
                ScheduledItems::due_items(&two, at(1_001, 0), 10)
                    .await
                    .expect("due")
                    .is_empty(),
                "past the first lease, still held: renewed"
            );
        });
    }

    /// 200 items due at one moment, three triggerers (processes) at once, and a fourth that
    /// claimed some and died: exactly 200 triggered copies, each item once.
    #[test]
    fn three_triggerers_trigger_200_due_items_exactly_once() {
        use crate::store::ScheduledItems;
        on_fresh_database(|_, connection, _| async move {
            let lease = std::time::Duration::from_secs(1);
            let first = process(&connection, lease).await;
            let owner = alice_of(&first).await;
            for i in 0..200u32 {
                add_due(&first, owner, i, at(1_000, 0)).await;
            }
            let dead = process(&connection, lease).await;
            assert_eq!(
                ScheduledItems::due_items(&dead, at(1_000, 0), 20)
                    .await
                    .expect("due")
                    .len(),
                20
            );
            let mut triggerers = vec![first];
            for _ in 0..2 {
                triggerers.push(process(&connection, lease).await);
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            let runs: Vec<_> = triggerers
                .into_iter()
                .map(|s| {
                    tokio::spawn(async move {
                        let mut copies = Vec::new();
                        loop {
                            let due = ScheduledItems::due_items(&s, at(1_000, 0), 30).await.expect("due");
                            for entry in &due {
                                let mut done = |_: &ScheduledItem, _: &TimeZoneSetting| None;
                                let copy = ScheduledItems::trigger_item(&s, *entry, at(1_000, 1), &mut done)
                                    .await
                                    .expect("trigger");
                                copies.extend(copy.durable().await.expect("durable"));
                            }
                            if due.is_empty() {
                                if ScheduledItems::counts(&s, owner).await.expect("counts").0 == 0 {
                                    return copies;
                                }
                                // the dead one's claims: taken when their lease runs out
                                assert!(std::time::Instant::now() < deadline, "claims never ran out");
                                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                            }
                        }
                    })
                })
                .collect();
            let mut copies = Vec::new();
            for run in runs {
                copies.extend(run.await.expect("task"));
            }
            assert_eq!(copies.len(), 200);
            let contents: std::collections::HashSet<_> = copies.iter().map(|c| c.tickle.content.clone()).collect();
            assert_eq!(contents.len(), 200, "each item once");
            assert_eq!(ScheduledItems::counts(&dead, owner).await.expect("counts"), (0, 200));
        });
    }

    /// The metrics' lease-expiry count: claims whose lease ran out and that nobody took over
    /// yet (the process holding them went silent) are counted by queue, and no longer once
    /// another process took them.
    #[test]
    fn expired_claims_are_counted_until_another_process_takes_them_over() {
        use crate::store::Deliveries;
        on_fresh_database(|_, connection, _| async move {
            let silent = store_on(&connection)
                .await
                .with_lease(std::time::Duration::from_secs(1));
            let other = store_on(&connection)
                .await
                .with_lease(std::time::Duration::from_secs(60));
            let (one, two) = (silent.scheduler(), other.scheduler());
            alice_with_triggered(&one, 3).await;
            let expanded = one.expand_targets(false, usize::MAX).await.expect("expand");
            assert_eq!(expanded.durable().await.expect("durable"), 3);
            let expired = |s: PgStore| async move {
                s.expired_claims()
                    .await
                    .expect("an engine with claims")
                    .expect("counted")
                    .into_iter()
                    .find(|(queue, _)| *queue == "deliveries")
                    .expect("the deliveries' count")
                    .1
            };
            let before = super::super::stats::counters();
            let pending = Deliveries::pending_deliveries(&one, 100).await.expect("pending");
            assert_eq!(pending.len(), 3);
            for (k, _) in &pending {
                assert!(Deliveries::claim_delivery(&one, k).await.expect("claim"));
            }
            // counted for the metrics (process-wide: other tests may add theirs)
            assert!(super::super::stats::counters().claimed >= before.claimed + 3);
            assert_eq!(expired(other.clone()).await, 0, "claimed, not expired");
            // the silent process does not renew: its claims expire a second later
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while expired(other.clone()).await != 3 {
                assert!(std::time::Instant::now() < deadline, "the claims did not expire");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            let pending = Deliveries::pending_deliveries(&two, 100).await.expect("pending");
            assert_eq!(pending.len(), 3);
            for (k, _) in &pending {
                assert!(Deliveries::claim_delivery(&two, k).await.expect("claim"));
            }
            assert_eq!(expired(other.clone()).await, 0, "taken over");
            assert!(super::super::stats::counters().taken_over >= before.taken_over + 3);
            assert_eq!(other.claim_lease(), Some(std::time::Duration::from_secs(60)));
        });
    }
}

/// The health check's "database writable", and the pool's state.
#[test]
fn writable_says_when_the_database_takes_no_writes() {
    // not on the fixture: the cluster stops in the middle of the test
    let Some((cluster, connection, db)) = fresh("writable_says_when_the_database_takes_no_writes") else {
        return;
    };
    let rt = runtime();
    let store = rt.block_on(store_on(&connection));
    rt.block_on(async {
        assert_eq!(store.writable().await, Ok(()));
        let stats = store.pool_stats();
        assert!(stats.open >= 1 && stats.open <= stats.max, "{stats:?}");
        assert_eq!(stats.max, crate::store::postgres::Bounds::default().pool_size);
        store.flush().expect("flush");
    });
    cluster
        .psql(
            "postgres",
            &format!("ALTER DATABASE {db} SET default_transaction_read_only = on"),
        )
        .expect("psql");
    rt.block_on(async {
        // a process already running: its new sessions are read-only, and the health check
        // says why writes would fail (the pooled connection held, a new one is opened)
        let _held = store.pool.get().await.expect("connection");
        let answer = store.writable().await;
        assert!(
            answer.as_ref().is_err_and(|why| why.contains("read-only")),
            "{answer:?}"
        );
        // a process starting: refused, saying why
        let refused = PgStore::connect(&connection).await.err();
        assert!(matches!(&refused, Some(PgError::ReadOnly(_))), "{refused:?}");
    });
    // an unreachable server: the reason, not a hang
    cluster
        .psql(
            "postgres",
            &format!("ALTER DATABASE {db} RESET default_transaction_read_only"),
        )
        .expect("psql");
    let store = rt.block_on(store_on(&connection));
    drop(cluster);
    let answer = rt.block_on(store.writable());
    assert!(answer.is_err(), "{answer:?}");
}

/// The store test suite (src/store/suite.rs) on PostgreSQL, as on sled: each scenario on the
/// store a server assembles (`postgres::open`) over a fresh database of the throwaway cluster.
mod suite {
    use super::*;
    use crate::store::Store;
    use std::future::Future;
    use std::sync::Arc;

    /// Runs `scenario` on a store over a fresh database (its migrations run); skipped as
    /// every test here is without PostgreSQL.
    fn on_postgres<F: Future<Output = ()>>(_test: &str, scenario: impl FnOnce(Arc<Store>) -> F) {
        on_fresh_database(|_, connection, _| async move {
            let (store, _) = super::super::open::open(&connection, std::time::Duration::from_secs(300))
                .await
                .expect("store");
            scenario(Arc::new(store)).await;
        });
    }

    crate::store::suite::suite_on!(on_postgres);

    /// What only PostgreSQL answers: a backup is its own business (`pg_dump`), and the
    /// refusal says what to use.
    #[test]
    fn a_backup_is_refused_naming_pg_dump() {
        on_postgres("suite_backup_refused", |store| async move {
            let refused = store.admin.backup_to(&mut Vec::new(), &[]).expect_err("refused");
            assert!(refused.to_string().contains("pg_dump"), "{refused}");
        });
    }
}

/// Moving between engines (issue 21 point 4): every kind of record loads into PostgreSQL
/// and dumps back the same; a load that fails anywhere, or that is not kept, leaves the
/// database empty; a database with data, or with a server connected, is refused. (A whole
/// copy, sled → PostgreSQL → sled, is the command's: `launch/migrate.rs`.)
mod copying {
    use super::*;
    use crate::store::copy::samples::{channel_of, every_kind};
    use crate::store::copy::{CopyError, Dump, Load, Loaded, Record, Tally};

    /// `records` loaded into the database at `connection`, read back, not kept yet.
    async fn load(connection: &Connection, records: Vec<Record>) -> Result<Box<dyn Loaded>, CopyError> {
        Box::new(PgTarget::open(connection).await?)
            .load(channel_of(records))
            .await
    }

    /// `records` loaded and kept: the tally read back.
    async fn load_kept(connection: &Connection, records: Vec<Record>) -> Result<Tally, CopyError> {
        let loaded = load(connection, records).await?;
        let tally = loaded.tally().clone();
        loaded.keep().await?;
        Ok(tally)
    }

    fn rows(cluster: &Cluster, db: &str) -> String {
        cluster
            .psql(
                db,
                "SELECT (SELECT count(*) FROM inbox_accounts) + (SELECT count(*) FROM scheduler_accounts) + \
                 (SELECT count(*) FROM inbox_items) + (SELECT count(*) FROM triggered_items) + \
                 (SELECT count(*) FROM email_queue) + (SELECT count(*) FROM payment_events)",
            )
            .expect("psql")
    }

    #[test]
    fn every_kind_loads_into_postgresql_and_dumps_back_the_same() {
        on_fresh_database(|cluster, connection, db| async move {
            let records = every_kind();
            let mut expected = Tally::default();
            records.iter().for_each(|r| expected.add(r));
            let loaded = load_kept(&connection, records).await.expect("load");
            assert_eq!(loaded, expected);
            // a dump through the copy's own path, from the committed database
            let (tx, mut rx) = tokio::sync::mpsc::channel(4);
            let source = Box::new(PgSource::open(&connection).await.expect("source"));
            let dump = tokio::spawn(source.dump(tx));
            let mut dumped = Tally::default();
            while let Some(r) = rx.recv().await {
                dumped.add(&r);
            }
            dump.await.expect("join").expect("dump");
            assert_eq!(dumped, expected);
            // the access-key sequence is past the keys loaded
            let next = cluster.psql(&db, "SELECT nextval('access_key_seq')").expect("psql");
            assert!(next.parse::<u64>().expect("a number") > 13, "{next}");
        });
    }

    #[test]
    fn a_load_that_fails_anywhere_leaves_the_database_empty() {
        on_fresh_database(|cluster, connection, db| async move {
            // half a stream, read back and not kept (its source failed, or the check did)
            let records = every_kind();
            let unkept = load(&connection, records[..records.len() / 2].to_vec())
                .await
                .expect("half a stream loads");
            assert!(unkept.tally().total() > 0);
            drop(unkept);
            assert_eq!(rows(&cluster, &db), "0");
            // a record the database's constraints refuse, after many it took
            let mut records = every_kind();
            records.push(records[5].clone());
            let refused = load(&connection, records).await.err();
            let named = refused.as_ref().map(ToString::to_string).unwrap_or_default();
            assert!(
                matches!(refused, Some(CopyError::Refused { .. }))
                    && named.contains("the target did not take one of the"),
                "{refused:?}: the record is named by kind and key"
            );
            assert_eq!(rows(&cluster, &db), "0");

            load_kept(&connection, every_kind())
                .await
                .expect("into the empty database");
            let full = load(&connection, every_kind()).await.err();
            assert!(
                matches!(full, Some(CopyError::NotEmpty(ref m)) if m.contains("inbox_accounts")),
                "{full:?}"
            );
        });
    }

    #[test]
    fn a_database_a_server_is_connected_to_is_refused() {
        on_fresh_database(|_, connection, _| async move {
            let (running, _) = PgStore::connect(&connection).await.expect("a server's store");
            let _held = running.pool.get().await.expect("its connection");
            let refused = load(&connection, every_kind()).await.err();
            assert!(
                matches!(refused, Some(CopyError::Invalid(ref m)) if m.contains("stop its servers")),
                "{refused:?}"
            );
        });
    }
}

/// An error that says the database cannot be reached right now becomes the store's
/// `Unreachable` (503 at the edge); every other one stays `Engine` (500). Both keep the
/// engine's error whole as their source, with the text it had.
#[test]
fn engine_errors_are_kept_and_an_unreachable_database_is_told_apart() {
    use crate::store::StoreError;
    let query = |code: Option<&str>| PgError::Query {
        code: code.map(str::to_owned),
        message: "m".into(),
    };
    let unreachable = [
        PgError::Connect("connection refused".into()),
        query(Some("08006")),
        query(Some("08001")),
        query(Some("57P01")),
        query(Some("57P02")),
        query(Some("57P03")),
        // a standby not yet promoted, and the bounds of a hung or overloaded database
        query(Some("25006")),
        query(Some("57014")),
        query(Some("55P03")),
        PgError::ReadOnly("it is a standby, in recovery".into()),
    ];
    for e in unreachable {
        let text = format!("database error: {e}");
        let store = StoreError::from(e.clone());
        assert!(matches!(store, StoreError::Unreachable(_)), "{e:?}");
        assert_eq!(store.to_string(), text);
        let source = std::error::Error::source(&store).expect("the engine's error is kept");
        assert_eq!(source.downcast_ref::<PgError>(), Some(&e));
    }
    let failing = [
        query(Some("23505")),
        query(Some("40001")),
        query(None),
        PgError::Tls("bad certificate".into()),
        PgError::Corrupt("not a uuid".into()),
        PgError::Contention("40001".into()),
    ];
    for e in failing {
        let store = StoreError::from(e.clone());
        assert!(matches!(store, StoreError::Engine(_)), "{e:?}");
        assert_eq!(store.to_string(), format!("database error: {e}"));
        let source = std::error::Error::source(&store).expect("the engine's error is kept");
        assert_eq!(source.downcast_ref::<PgError>(), Some(&e));
    }
}
