//! What several processes on one database must share so that they behave as one server
//! (issue 21 point 3): the token signing key (`token_signing_key`) and the sliding-window
//! throttles of logins, registrations and verification e-mails (`throttle_events`). Not yet
//! used by the services (they keep theirs in memory and in the data directory until the
//! PostgreSQL store is wired in).
//!
//! Time is the database's (`now()`), the one clock every process shares.

use super::{PgResult, PgStore};
use std::time::Duration;

/// What a throttle counts (the `scope` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThrottleScope {
    /// Login attempts per (username, client address) digest.
    LoginPair,
    /// Login attempts per client address.
    LoginAddress,
    /// Registrations per client address (IPv6 by /64).
    Registration,
    /// Verification e-mail resends per trigger.
    ResendTrigger,
    /// Verification e-mails per destination address digest.
    ResendAddress,
    /// Verification e-mails per account.
    ResendAccount,
}

impl ThrottleScope {
    fn column(self) -> &'static str {
        match self {
            ThrottleScope::LoginPair => "login_pair",
            ThrottleScope::LoginAddress => "login_address",
            ThrottleScope::Registration => "registration",
            ThrottleScope::ResendTrigger => "resend_trigger",
            ThrottleScope::ResendAddress => "resend_address",
            ThrottleScope::ResendAccount => "resend_account",
        }
    }
}

/// A counted attempt, which [`PgStore::throttle_give_back`] can uncount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleSlot(i64);

/// Microseconds of `d` as PostgreSQL takes an interval's (saturating).
fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl PgStore {
    /// The token signing key every process uses: the one stored, or `fresh` when there is
    /// none yet (the first process to get here stores it; the others read it).
    pub async fn token_signing_key(&self, fresh: &[u8]) -> PgResult<Vec<u8>> {
        let client = self.pool.get().await?;
        client
            .execute(
                "INSERT INTO token_signing_key (secret) VALUES ($1) ON CONFLICT (only_one) DO NOTHING",
                &[&fresh],
            )
            .await?;
        let row = client.query_one("SELECT secret FROM token_signing_key", &[]).await?;
        Ok(row.try_get(0)?)
    }

    /// Counts an attempt of `subject` in `scope` unless `limit` attempts were counted within
    /// the last `window`: its slot, or `None` when the limit is reached. Attempts of one
    /// subject are counted one at a time across processes (a transaction-level advisory lock
    /// on the scope and subject), so concurrent attempts never exceed the limit together.
    pub async fn throttle_take(
        &self,
        scope: ThrottleScope,
        subject: &[u8],
        window: Duration,
        limit: usize,
    ) -> PgResult<Option<ThrottleSlot>> {
        let scope = scope.column();
        let window = micros(window);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1 || ':' || encode($2, 'hex'), 0))",
            &[&scope, &subject],
        )
        .await?;
        let counted: i64 = tx
            .query_one(
                "SELECT count(*) FROM throttle_events WHERE scope = $1 AND subject = $2 \
                 AND at > now() - make_interval(secs => $3::bigint / 1e6)",
                &[&scope, &subject, &window],
            )
            .await?
            .try_get(0)?;
        if counted >= limit {
            return Ok(None);
        }
        let id: i64 = tx
            .query_one(
                "INSERT INTO throttle_events (scope, subject) VALUES ($1, $2) RETURNING id",
                &[&scope, &subject],
            )
            .await?
            .try_get(0)?;
        tx.commit().await?;
        Ok(Some(ThrottleSlot(id)))
    }

    /// Uncounts an attempt (a login whose password was right, a resend that was not sent).
    pub async fn throttle_give_back(&self, slot: ThrottleSlot) -> PgResult<()> {
        let client = self.pool.get().await?;
        client
            .execute("DELETE FROM throttle_events WHERE id = $1", &[&slot.0])
            .await?;
        Ok(())
    }

    /// Forgets attempts older than `age` (longer than the longest window); how many.
    pub async fn throttle_prune(&self, age: Duration) -> PgResult<u64> {
        let client = self.pool.get().await?;
        Ok(client
            .execute(
                "DELETE FROM throttle_events WHERE at <= now() - make_interval(secs => $1::bigint / 1e6)",
                &[&micros(age)],
            )
            .await?)
    }
}
