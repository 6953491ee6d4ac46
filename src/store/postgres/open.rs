//! A [`Store`] on a PostgreSQL database: every concern's trait object from the PostgreSQL
//! stores, the throttles in the database, and the coordination of several processes
//! through it (the work that runs once under an advisory lock, wake-ups by `NOTIFY`).

use super::leader::Leadership;
use super::{Connection, PgStore};
use crate::store::{Coordination, Inbox, OnceWork, Result, Scheduler, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a process that does not hold the lock of a once-only work tries to take it:
/// also how long that work may stand still after its process died.
const LEAD_PERIOD: Duration = Duration::from_secs(5);

/// How long the first question about a once-only work waits for the lock's first try.
const FIRST_TRY: Duration = Duration::from_secs(2);

/// Connects to the database (checking that commits are durable, migrating the schema under
/// its lock) and makes the store over it; a claim on queued work lasts `lease` after this
/// process last renewed it. Answers the PostgreSQL store too, for what only the launch
/// does with it (the shared signing key, listening for wake-ups).
pub async fn open(connection: &Connection, lease: Duration) -> Result<(Store, PgStore)> {
    let (pg, applied) = PgStore::connect(connection).await?;
    if let Some(last) = applied.last() {
        tracing::info!(
            "the PostgreSQL database {} now has schema version {last} ({} migrations applied)",
            connection.database,
            applied.len()
        );
    }
    let pg = pg.with_lease(lease);
    let inbox = Arc::new(pg.inbox());
    let scheduler = Arc::new(pg.scheduler());
    let store = Store::of_engine(
        Inbox {
            accounts: Arc::new(inbox.accounts.clone()),
            items: inbox,
        },
        Scheduler {
            accounts: Arc::new(scheduler.accounts.clone()),
            items: scheduler.clone(),
            triggers: scheduler.clone(),
            deliveries: scheduler.clone(),
            emails: scheduler.clone(),
            payments: scheduler,
        },
        Arc::new(pg.clone()),
        Arc::new(pg.throttles()),
        Arc::new(Together {
            pg: pg.clone(),
            leads: Mutex::default(),
        }),
    );
    Ok((store, pg))
}

impl PgStore {
    /// Ends every claim of this process, in one transaction.
    async fn release_claims(&self) -> super::PgResult<u64> {
        let mut client = self.pool.get().await?;
        let tx = client.transaction().await?;
        let mut released = 0;
        for table in ["scheduled_items", "delivery_targets", "deliveries", "email_queue"] {
            released += tx
                .execute(
                    &format!("UPDATE {table} SET claimed_by = NULL, lease_until = NULL WHERE claimed_by = $1"),
                    &[&self.claimant],
                )
                .await?;
        }
        tx.commit().await?;
        super::stats::released(released);
        Ok(released)
    }
}

/// The coordination of the processes on one database.
struct Together {
    pg: PgStore,
    /// The once-only works this process has asked about, each with its try for the lock
    /// (started at the first question: a process that never does a work never holds it).
    leads: Mutex<HashMap<OnceWork, Leadership>>,
}

#[async_trait::async_trait]
impl Coordination for Together {
    async fn leads(&self, work: OnceWork) -> bool {
        let mut holds = {
            let mut leads = crate::store::lock(&self.leads);
            match leads.get(&work) {
                Some(lead) => return lead.holds(),
                None => {
                    let lead = self.pg.lead(work, LEAD_PERIOD);
                    let holds = lead.watch();
                    leads.insert(work, lead);
                    holds
                }
            }
        };
        // the first question waits a little for the first try of the lock, so that the
        // process that takes it does the work at once; while another process holds it,
        // the answer is no
        tokio::time::timeout(FIRST_TRY, holds.wait_for(|h| *h))
            .await
            .is_ok_and(|held| held.is_ok())
    }

    async fn release(&self) {
        if let Err(e) = self.pg.release_claims().await {
            tracing::warn!("could not give up this process's claims (they end with their lease): {e}");
        }
    }

    fn announce(&self, worker: &'static str) {
        // the wake-up must not hold up the request that committed the work; without a
        // runtime (no worker can run) there is nobody to wake
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let pg = self.pg.clone();
            runtime.spawn(async move { pg.notify(worker).await });
        }
    }
}
