//! [`Administration`] on PostgreSQL: whether the database takes writes; no group commit
//! (every write is its own committed transaction), so nothing to flush and no cycles; a
//! backup is PostgreSQL's own business. And what the health check and the metrics say of
//! the engine: the process's claimant name, the schema's version against the binary's
//! (read at each check, so that a running process notices a newer binary's migration),
//! the pool's state and what [`super::stats`] counted.

use super::sql::Sql;
use super::{PgError, PgStore};
use crate::store::{
    Administration, BackupSummary, CycleStats, EngineCounters, Result, SchemaVersions, StoreError, WriterStats,
};

pub use crate::store::api::PoolStats;

impl PgStore {
    /// The pool's state.
    pub fn pool_stats(&self) -> PoolStats {
        let s = self.pool.status();
        PoolStats {
            open: s.size,
            idle: s.available,
            waiting: s.waiting,
            max: s.max_size,
        }
    }
}

#[async_trait::async_trait]
impl Administration for PgStore {
    /// Whether the database takes writes (the health check's "database writable"): a
    /// connection is had, the session is not read-only (a standby, or
    /// `default_transaction_read_only`), and commits are durable. Writes nothing. `Err`
    /// gives the reason.
    async fn writable(&self) -> std::result::Result<(), String> {
        let probe = async {
            let client = self.pool.get().await?;
            let row = client
                .fetch_one(
                    "SELECT current_setting('transaction_read_only'), pg_is_in_recovery(), \
                     current_setting('synchronous_commit'), current_setting('fsync')",
                    &[],
                )
                .await?;
            let read_only: String = row.try_get(0)?;
            let recovering: bool = row.try_get(1)?;
            let sync: String = row.try_get(2)?;
            let fsync: String = row.try_get(3)?;
            Ok::<_, PgError>(if recovering {
                Err("the database is a standby (in recovery): it takes no writes".to_owned())
            } else if read_only == "on" {
                Err("the database session is read-only".to_owned())
            } else if sync == "off" || fsync == "off" {
                Err(format!(
                    "commits are not durable (synchronous_commit {sync}, fsync {fsync})"
                ))
            } else {
                Ok(())
            })
        };
        match probe.await {
            Ok(answer) => answer,
            Err(e) => Err(e.to_string()),
        }
    }

    /// No group commit: every write is its own committed transaction.
    fn writer_stats(&self) -> WriterStats {
        WriterStats::default()
    }

    fn writer_cycles(&self) -> CycleStats {
        CycleStats::default()
    }

    /// Nothing to do: what was answered is committed.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Closes the pool: every later write (and read) fails, and `writable` says so.
    fn simulate_sync_failure_for_tests(&self) {
        self.pool.close();
    }

    fn engine(&self) -> &'static str {
        "postgres"
    }

    /// The claimant id this process's claims carry (`host:pid:` and a random part).
    fn process(&self) -> String {
        self.claimant.clone()
    }

    /// `max(version)` of `schema_migrations` now, against [`super::migrations::LATEST`]; a
    /// newer one is logged as an error once (again only after it was not newer for a while).
    async fn schema(&self) -> Option<std::result::Result<SchemaVersions, String>> {
        Some(match self.schema_version().await {
            Ok(database) => {
                let versions = SchemaVersions {
                    database,
                    binary: super::migrations::LATEST,
                };
                let changed = self
                    .newer_schema
                    .swap(versions.newer(), std::sync::atomic::Ordering::Relaxed)
                    != versions.newer();
                if changed {
                    if versions.newer() {
                        tracing::error!("{}; this process answers its health check with 503", versions.reason());
                    } else {
                        tracing::info!("the database's schema is version {database} again, which this binary knows");
                    }
                }
                Ok(versions)
            }
            Err(e) => Err(e.to_string()),
        })
    }

    fn pool(&self) -> Option<PoolStats> {
        Some(self.pool_stats())
    }

    fn claim_lease(&self) -> Option<std::time::Duration> {
        Some(self.lease)
    }

    /// One statement: the due items (claims are on due items only, so the due index's
    /// range is read, not the table), deliveries, delivery targets and e-mails whose lease
    /// ran out by the database's clock.
    async fn expired_claims(&self) -> Option<std::result::Result<Vec<(&'static str, u64)>, String>> {
        let read = async {
            let client = self.pool.get().await?;
            let row = client
                .fetch_one(
                    "SELECT \
                     (SELECT count(*) FROM scheduled_items \
                      WHERE due_secs <= extract(epoch FROM now())::bigint AND lease_until < now()), \
                     (SELECT count(*) FROM deliveries WHERE lease_until < now()), \
                     (SELECT count(*) FROM delivery_targets WHERE lease_until < now()), \
                     (SELECT count(*) FROM email_queue WHERE lease_until < now())",
                    &[],
                )
                .await?;
            let mut counts = Vec::new();
            for (i, queue) in ["due_items", "deliveries", "delivery_targets", "emails"]
                .into_iter()
                .enumerate()
            {
                let n: i64 = row.try_get(i)?;
                counts.push((queue, u64::try_from(n).unwrap_or(0)));
            }
            Ok::<_, PgError>(counts)
        };
        Some(read.await.map_err(|e| e.to_string()))
    }

    fn counters(&self) -> Option<EngineCounters> {
        Some(super::stats::counters())
    }

    /// A PostgreSQL database is backed up by PostgreSQL's own tools, consistent while the
    /// processes run (docs/backup.md).
    fn backup_to(&self, _out: &mut dyn std::io::Write, _files: &[(&str, &[u8])]) -> Result<BackupSummary> {
        Err(StoreError::Unsupported(
            "this server keeps its data in PostgreSQL: back it up with pg_dump (for example \
             `pg_dump --format=custom --file=pigeonhole.dump DATABASE`) or the database's own \
             backups; `pigeonhole backup` copies a sled data directory"
                .into(),
        ))
    }
}
