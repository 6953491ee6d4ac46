//! Claims on queued work (issue 30 point 3): a process claims a due item, a pending
//! delivery or a queued e-mail when it starts on it (not when it reads it), for a short
//! lease that its heartbeat renews while it lives ([`PgStore::renew_claims`]); a worker that
//! found work held by another process sleeps only until that claim runs out
//! ([`PgStore::claims_elsewhere_end`]). Postponing, finishing and giving back end a claim.

use super::emails::lease_micros;
use super::scheduler::PgScheduler;
use super::sql::Sql;
use super::{PgResult, PgStore};
use crate::store::ClaimedWork;
use std::time::Duration;
use tokio_postgres::types::ToSql;

/// The queue tables whose rows are claimed, and the work each holds.
const TABLES: [(ClaimedWork, &str); 3] = [
    (ClaimedWork::DueItems, "scheduled_items"),
    (ClaimedWork::Deliveries, "deliveries"),
    (ClaimedWork::Emails, "email_queue"),
];

/// The SQL condition of a row this process (`$claimant`, the parameter number) may claim:
/// nobody holds it, its holder's lease ran out, or it is this process's own.
pub(super) fn claimable(claimant: usize) -> String {
    format!("(lease_until IS NULL OR lease_until < now() OR claimed_by = ${claimant})")
}

impl PgStore {
    /// Extends every claim of this process by its lease from now, in one transaction;
    /// answers how many rows it holds.
    pub(super) async fn renew_claims(&self) -> PgResult<u64> {
        let lease = lease_micros(self.lease);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let mut held = 0;
        for (_, table) in TABLES {
            held += tx
                .run(
                    &format!(
                        "UPDATE {table} SET lease_until = now() + make_interval(secs => $2::bigint / 1e6) \
                         WHERE claimed_by = $1"
                    ),
                    &[&self.claimant, &lease],
                )
                .await?;
        }
        tx.commit().await?;
        Ok(held)
    }

    /// How long until the earliest live claim of another process on `work` runs out, by the
    /// database's clock.
    pub(super) async fn claims_elsewhere_end(&self, work: ClaimedWork) -> PgResult<Option<Duration>> {
        let table = TABLES.iter().find(|(w, _)| *w == work).map_or("deliveries", |(_, t)| t);
        let client = self.pool.get().await?;
        let row = client
            .fetch_one(
                &format!(
                    "SELECT (extract(epoch FROM min(lease_until) - now()) * 1e6)::bigint FROM {table} \
                     WHERE claimed_by IS NOT NULL AND claimed_by <> $1 AND lease_until >= now()"
                ),
                &[&self.claimant],
            )
            .await?;
        let micros: Option<i64> = row.try_get(0)?;
        Ok(micros.map(|m| Duration::from_micros(u64::try_from(m).unwrap_or(0))))
    }
}

impl PgScheduler {
    /// Claims the row of the queue table `table` whose `column` is `key` for this process
    /// (for its lease from now), unless another process holds it; whether it did.
    pub(super) async fn claim<T: ToSql + Sync>(&self, table: &str, column: &str, key: &T) -> PgResult<bool> {
        let lease = lease_micros(self.lease);
        let client = self.pool.get().await?;
        // A claim is a lease, not a record: its commit does not wait for the WAL's flush
        // (`set_config(…, true)`: for this statement's own transaction only; a delivery's
        // three durable commits became two). Lost in a crash of the database, the work is
        // free again and done by whoever claims it next (what it does is idempotent: a
        // delivery's key); the work's durable commits flush it anyway. The holder before
        // this claim comes back, so that a claim taken over from a process whose lease ran
        // out is counted as such.
        let row = client
            .fetch_opt(
                &format!(
                    "UPDATE {table} t SET claimed_by = $2, \
                     lease_until = now() + make_interval(secs => $3::bigint / 1e6) \
                     FROM (SELECT {column} AS k, claimed_by AS was, \
                           set_config('synchronous_commit', 'off', true) AS lease_only FROM {table} \
                           WHERE {column} = $1 AND {} FOR UPDATE) o \
                     WHERE t.{column} = o.k RETURNING o.was",
                    claimable(2)
                ),
                &[key, &self.claimant, &lease],
            )
            .await?;
        let Some(row) = row else { return Ok(false) };
        let was: Option<String> = row.try_get(0)?;
        let taken_over = was.is_some_and(|w| w != self.claimant);
        super::stats::claimed(1, u64::from(taken_over));
        Ok(true)
    }
}
