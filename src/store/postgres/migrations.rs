//! Versioned migrations of the PostgreSQL schema: SQL files under `migrations/`, built into
//! the binary, applied in order at start.
//!
//! All of it runs in one transaction that first takes a transaction-level advisory lock
//! ([`LOCK`]): of several processes starting together on one database, one migrates while the
//! others wait, and then find nothing left to do. The versions applied are rows of
//! `schema_migrations`. A database whose latest version is newer than this binary knows is
//! refused before anything is changed (as the sled format check does).

use super::PgError;
use tokio_postgres::Client;

/// One migration: its version (1, 2, … without gaps), a name, its SQL.
pub(super) struct Migration {
    pub(super) version: i64,
    pub(super) name: &'static str,
    pub(super) sql: &'static str,
}

pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "schema",
        sql: include_str!("migrations/0001_schema.sql"),
    },
    Migration {
        version: 2,
        name: "push and webhook triggers",
        sql: include_str!("migrations/0002_push_and_webhook_triggers.sql"),
    },
    Migration {
        version: 3,
        name: "free text as bytes",
        sql: include_str!("migrations/0003_free_text_as_bytes.sql"),
    },
    Migration {
        version: 4,
        name: "claims by claimant",
        sql: include_str!("migrations/0004_claims_by_claimant.sql"),
    },
    Migration {
        version: 5,
        name: "inbox item counts",
        sql: include_str!("migrations/0005_inbox_item_counts.sql"),
    },
];

/// The latest schema version this binary knows.
pub const LATEST: i64 = MIGRATIONS[MIGRATIONS.len() - 1].version;

/// The advisory lock key of migrations ("Pigeon" and 1, as a number).
const LOCK: i64 = 0x5069_6765_6f6e_0001;

/// Brings the schema to [`LATEST`]; answers the versions it applied (none when it was
/// there already).
pub(super) async fn migrate(client: &mut Client) -> Result<Vec<i64>, PgError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
             version bigint PRIMARY KEY,
             name text NOT NULL,
             applied_by text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await?;
    let current: i64 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM schema_migrations", &[])
        .await?
        .try_get(0)?;
    if current > LATEST {
        return Err(PgError::NewerSchema {
            found: current,
            known: LATEST,
        });
    }
    let by = format!("pigeonhole {}", env!("CARGO_PKG_VERSION"));
    let mut applied = Vec::new();
    for m in MIGRATIONS.iter().filter(|m| m.version > current) {
        tx.batch_execute(m.sql).await.map_err(|e| PgError::Migration {
            version: m.version,
            reason: super::describe(&e),
        })?;
        tx.execute(
            "INSERT INTO schema_migrations (version, name, applied_by) VALUES ($1, $2, $3)",
            &[&m.version, &m.name, &by],
        )
        .await?;
        applied.push(m.version);
    }
    tx.commit().await?;
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_count_from_one_without_gaps() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
            assert!(!m.sql.trim().is_empty());
        }
        assert_eq!(LATEST, MIGRATIONS.len() as i64);
    }
}
