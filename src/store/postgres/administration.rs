//! Engine administration for PostgreSQL, as the sled `Store`'s health and statistics
//! methods: whether the database takes writes, the pool's state, flushing (nothing to do).

use super::{PgError, PgResult, PgStore};

/// The pool's state (metrics, diagnostics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections open (idle and in use).
    pub open: usize,
    /// Idle connections.
    pub idle: usize,
    /// Callers waiting for a connection.
    pub waiting: usize,
    pub max: usize,
}

impl PgStore {
    /// Whether the database takes writes (the health check's "database writable"): a
    /// connection is had, the session is not read-only (a standby, or
    /// `default_transaction_read_only`), and commits are durable. Writes nothing. `Err`
    /// gives the reason.
    pub async fn writable(&self) -> std::result::Result<(), String> {
        let probe = async {
            let client = self.pool.get().await?;
            let row = client
                .query_one(
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

    /// FOR TESTS ONLY (fault injection): closes the pool, so every later statement fails
    /// and [`PgStore::writable`] reports it.
    pub fn close_for_tests(&self) {
        self.pool.close();
    }

    /// Nothing to write: every committed write is on disk already (shutdown).
    pub async fn flush(&self) -> PgResult<()> {
        Ok(())
    }
}
