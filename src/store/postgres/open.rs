//! A [`Store`] on a PostgreSQL database: every concern's trait object from the PostgreSQL
//! stores, the throttles in the database, and the coordination of several processes
//! through it (the work that runs once under an advisory lock, wake-ups by `NOTIFY`).

use super::leader::Leadership;
use super::{Connection, PgStore};
use crate::store::{ClaimedWork, Coordination, Inbox, OnceWork, Result, Scheduler, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a process that does not hold the lock of a once-only work tries to take it:
/// also how long that work may stand still after its process died.
const LEAD_PERIOD: Duration = Duration::from_secs(5);

/// How long the first question about a once-only work waits for the lock's first try.
const FIRST_TRY: Duration = Duration::from_secs(2);

/// [`open`], trying again while the database cannot be reached (or takes no writes yet: a
/// standby being promoted), with a growing pause, for at most `wait`: a server started
/// with its database (or while it fails over) comes up once the database does. One log line
/// per try; any other error (not durable, a newer schema, a bad password) stops at once.
pub async fn open_within(connection: &Connection, lease: Duration, wait: Duration) -> Result<(Store, PgStore)> {
    let started = tokio::time::Instant::now();
    let mut pause = Duration::from_millis(250);
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        match PgStore::connect(connection).await {
            Ok(connected) => return Ok(assemble(connection, connected, lease)),
            Err(e) if e.is_unavailable() && started.elapsed() + pause < wait => {
                tracing::warn!(
                    "the database cannot be used yet (try {attempt}, {:.1} s of at most {} s): {e}; trying again in {:.1} s",
                    started.elapsed().as_secs_f64(),
                    wait.as_secs(),
                    pause.as_secs_f64()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Connects to the database (checking that commits are durable, migrating the schema under
/// its lock) and makes the store over it; a claim on queued work lasts `lease` after this
/// process last renewed it. Answers the PostgreSQL store too, for what only the launch
/// does with it (the shared signing key, listening for wake-ups).
pub async fn open(connection: &Connection, lease: Duration) -> Result<(Store, PgStore)> {
    Ok(assemble(connection, PgStore::connect(connection).await?, lease))
}

/// The store over a connected, migrated database.
fn assemble(connection: &Connection, (pg, applied): (PgStore, Vec<i64>), lease: Duration) -> (Store, PgStore) {
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
    (store, pg)
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

    async fn renew_claims(&self) {
        if let Err(e) = self.pg.renew_claims().await {
            tracing::warn!(
                "could not renew this process's claims (another process takes them over when they run out): {e}"
            );
        }
    }

    async fn claims_elsewhere_end(&self, work: ClaimedWork) -> Option<Duration> {
        // unknown: the worker's period bounds its sleep
        self.pg.claims_elsewhere_end(work).await.ok().flatten()
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
