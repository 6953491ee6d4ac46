//! Wake-ups across processes (issue 21 point 3): a process that queues work for a worker
//! (a due item, a delivery, an e-mail) wakes that worker in every process on the database
//! with `NOTIFY`, and each process listens on a connection of its own and wakes its local
//! worker. A notification lost with a connection costs only time: every worker also looks
//! at the database at its period (the fallback, and all there is on engines without
//! `LISTEN/NOTIFY`).

use super::{config_of, Connection, PgError, PgResult, PgStore};
use futures_util::StreamExt;
use std::time::Duration;
use tokio::sync::mpsc;

/// The channel of Pigeonhole's wake-ups.
const CHANNEL: &str = "pigeonhole_wake";

/// The longest name a wake-up carries (a worker's name); longer payloads are ignored.
const MOST_NAME: usize = 64;

impl PgStore {
    /// Wakes `name` (a worker's name) in every process listening on this database, this one
    /// included. Committed work is found at the worker's next period anyway, so a failure
    /// is only logged.
    pub async fn notify(&self, name: &str) {
        let sent = async {
            let client = self.pool.get().await?;
            client
                .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &name])
                .await
                .map_err(PgError::from)
        };
        if let Err(e) = sent.await {
            tracing::debug!("the wake-up of {name} reaches only this process's period: {e}");
        }
    }
}

/// Listens for wake-ups on a connection of its own, reconnecting after `retry` when it is
/// lost, and hands each name to `wake` (this process's own wake-up of that worker). Each
/// time it listens again after losing the connection (the database went away and is back),
/// `back` is called: the workers that failed meanwhile wait out a back-off of up to 30 s,
/// and this is how they hear at once that the database answers again (issue 30). Runs
/// until the returned task is aborted.
pub fn listen(
    connection: Connection,
    retry: Duration,
    wake: impl Fn(&str) + Send + Sync + 'static,
    back: impl Fn() + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lost = false;
        loop {
            let listening = || {
                if lost {
                    tracing::info!("listening for wake-ups again: the database answers");
                    back();
                }
            };
            match listen_once(&connection, &wake, listening).await {
                Ok(()) => tracing::warn!("the wake-up connection closed; listening again"),
                Err(e) => tracing::warn!("cannot listen for wake-ups from other processes: {e}"),
            }
            lost = true;
            tokio::time::sleep(retry).await;
        }
    })
}

/// One connection's listening: `listening` is called once it listens.
async fn listen_once(
    connection: &Connection,
    wake: &(impl Fn(&str) + Send + Sync),
    listening: impl FnOnce(),
) -> PgResult<()> {
    let (config, tls) = config_of(connection)?;
    let (client, mut conn) = config.connect(tls).await?;
    // bounded: a wake-up that finds the channel full is one already on its way
    let (tx, mut rx) = mpsc::channel::<String>(64);
    // the connection's messages: notifications go to `tx`; the stream ends with the connection
    let messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
    let driver = tokio::spawn(async move {
        let mut messages = std::pin::pin!(messages);
        while let Some(message) = messages.next().await {
            match message {
                Ok(tokio_postgres::AsyncMessage::Notification(n)) => match tx.try_send(n.payload().to_owned()) {
                    Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => {}
                    Err(mpsc::error::TrySendError::Closed(_)) => break,
                },
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("the wake-up connection failed: {e}");
                    break;
                }
            }
        }
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    listening();
    while let Some(name) = rx.recv().await {
        if name.len() <= MOST_NAME {
            wake(&name);
        }
    }
    driver.abort();
    Ok(())
}
