//! The store's [`Throttles`] in the database (`throttle_events`), shared by every process:
//! N processes count together, so they are not N times looser than one.
//!
//! A take is one transaction: it locks its keys (transaction-level advisory locks, in key
//! order, so that two takes of one key count one after the other and never deadlock), counts
//! each key's attempts within its window on the database's clock, and either inserts one row
//! per key under a new attempt number or, when a key is full, nothing. Rows that left their
//! window are deleted by the takes of their kind, a bounded batch at a time, so the table
//! holds about one window of attempts.

use super::sql::Sql;
use super::{transaction, PgError, PgResult};
use crate::store::throttles::{Count, Taken, Throttle, Throttles, Turn};
use crate::store::Result;
use deadpool_postgres::Pool;
use std::time::Duration;

/// The first of the two advisory-lock keys of a throttle key ("Th").
const LOCK_SPACE: i32 = 0x5468;
/// Rows of one kind pruned per take at most.
const PRUNE_BATCH: i64 = 256;

#[derive(Clone)]
pub struct PgThrottles {
    pool: Pool,
}

impl PgThrottles {
    pub(super) fn new(pool: Pool) -> PgThrottles {
        PgThrottles { pool }
    }

    async fn take_now(&self, counts: &[Count]) -> PgResult<Turn> {
        let mut sorted: Vec<&Count> = counts.iter().collect();
        sorted.sort_by_key(|c| (c.throttle, c.key));
        transaction!(self, |tx| {
            for c in &sorted {
                // the key's own lock (a collision of two keys only makes them wait in turn)
                let code = i32::from(c.throttle.code()) << 24;
                let low = i32::from_be_bytes([c.key[0], c.key[1], c.key[2], c.key[3]]) & 0x00ff_ffff;
                tx.run("SELECT pg_advisory_xact_lock($1, $2)", &[&LOCK_SPACE, &(code | low)])
                    .await?;
            }
            let mut longest: Option<(f64, Throttle)> = None;
            for c in &sorted {
                let window = c.window.as_secs_f64();
                let row = tx
                    .fetch_one(
                        "SELECT count(*), extract(epoch FROM min(at) + make_interval(secs => $3) - clock_timestamp())::float8 \
                         FROM (SELECT at FROM throttle_events \
                               WHERE throttle = $1 AND subject = $2 AND at > clock_timestamp() - make_interval(secs => $3) \
                               ORDER BY at DESC LIMIT $4) newest",
                        &[&c.throttle.code(), &&c.key[..], &window, &i64::from(c.most.max(1))],
                    )
                    .await?;
                let n: i64 = row.try_get(0)?;
                if n >= i64::from(c.most.max(1)) {
                    let wait: Option<f64> = row.try_get(1)?;
                    let wait = wait.unwrap_or(0.0).max(0.001);
                    if longest.is_none_or(|(w, _)| wait > w) {
                        longest = Some((wait, c.throttle));
                    }
                }
            }
            if let Some((wait, throttle)) = longest {
                return Ok(Turn::Wait {
                    throttle,
                    after: Duration::from_secs_f64(wait),
                });
            }
            let attempt: i64 = tx
                .fetch_one("SELECT nextval('throttle_attempt_seq')", &[])
                .await?
                .try_get(0)?;
            for c in &sorted {
                tx.run(
                    "INSERT INTO throttle_events (throttle, subject, attempt, at) VALUES ($1, $2, $3, clock_timestamp())",
                    &[&c.throttle.code(), &&c.key[..], &attempt],
                )
                .await?;
                tx.run(
                    "DELETE FROM throttle_events WHERE ctid IN (SELECT ctid FROM throttle_events \
                     WHERE throttle = $1 AND at <= clock_timestamp() - make_interval(secs => $2) LIMIT $3)",
                    &[&c.throttle.code(), &c.window.as_secs_f64(), &PRUNE_BATCH],
                )
                .await?;
            }
            Ok(Turn::Counted(Taken {
                attempt: attempt as u64,
                counted: sorted.iter().map(|c| (c.throttle, c.key)).collect(),
            }))
        })
    }

    async fn give_back_now(&self, taken: &Taken) -> PgResult<()> {
        let attempt = i64::try_from(taken.attempt).map_err(|_| PgError::Corrupt("attempt number".into()))?;
        transaction!(self, |tx| {
            for (throttle, key) in &taken.counted {
                tx.run(
                    "DELETE FROM throttle_events WHERE throttle = $1 AND subject = $2 AND attempt = $3",
                    &[&throttle.code(), &&key[..], &attempt],
                )
                .await?;
            }
            Ok(())
        })
    }
}

#[async_trait::async_trait]
impl Throttles for PgThrottles {
    async fn take(&self, counts: &[Count]) -> Result<Turn> {
        Ok(self.take_now(counts).await?)
    }

    async fn give_back(&self, taken: &Taken) -> Result<()> {
        Ok(self.give_back_now(taken).await?)
    }
}
