//! Work that must run in one process at a time, of several on one database (the payments
//! fetcher, the admin notices; issue 21 point 3): the process holding the session advisory
//! lock of the work's name does it. The lock lives on a connection of its own, taken out of
//! the pool, so that it ends with that connection: when the process dies or loses the
//! database, PostgreSQL releases the lock and another process takes it at its next try.

use super::PgStore;
use std::time::Duration;
use tokio::sync::watch;

pub use crate::store::api::OnceWork;

/// The session advisory lock of `work` ("Pigeon" and a number, as the migrations' lock is).
fn lock_of(work: OnceWork) -> i64 {
    0x5069_6765_6f6e_0100
        + match work {
            OnceWork::Payments => 1,
            OnceWork::AdminNotices => 2,
            OnceWork::Overview => 3,
        }
}

/// Whether this process holds the work's lock now; the lock is kept (and tried again when
/// lost) until this is dropped.
pub struct Leadership {
    holds: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Leadership {
    /// Whether this process is the one to do the work now.
    pub fn holds(&self) -> bool {
        *self.holds.borrow()
    }

    /// Whether this process holds the lock, as it changes.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.holds.clone()
    }

    /// Waits until this process holds the lock.
    pub async fn acquired(&mut self) {
        let _ = self.holds.wait_for(|h| *h).await;
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        // the task owns the connection: aborting it closes the connection and so the lock
        self.task.abort();
    }
}

impl PgStore {
    /// Tries to hold the lock of `work`, every `period` while another process holds it; a
    /// lost connection loses it, and the next try takes it again.
    pub fn lead(&self, work: OnceWork, period: Duration) -> Leadership {
        let (tell, holds) = watch::channel(false);
        let pool = self.pool.clone();
        let task = tokio::spawn(async move {
            loop {
                let client = match pool.get().await {
                    // a connection of its own: the lock must end with it, never go back to
                    // the pool with it
                    Ok(object) => deadpool_postgres::Object::take(object),
                    Err(e) => {
                        tracing::debug!("no connection to hold the lock of {work:?}: {e}");
                        tell.send_replace(false);
                        tokio::time::sleep(period).await;
                        continue;
                    }
                };
                loop {
                    let held = if *tell.borrow() {
                        // still connected (and so still holding it)?
                        client.simple_query("SELECT 1").await.map(|_| true)
                    } else {
                        client
                            .query_one("SELECT pg_try_advisory_lock($1)", &[&lock_of(work)])
                            .await
                            .and_then(|row| row.try_get::<_, bool>(0))
                    };
                    match held {
                        Ok(held) => {
                            if held != *tell.borrow() {
                                tracing::info!(
                                    "{} the work of {work:?}",
                                    if held {
                                        "this process now does"
                                    } else {
                                        "another process does"
                                    }
                                );
                            }
                            tell.send_replace(held);
                        }
                        Err(e) => {
                            tracing::warn!("the lock of {work:?} is lost with its connection: {e}");
                            tell.send_replace(false);
                            break;
                        }
                    }
                    tokio::time::sleep(period).await;
                }
                drop(client);
                tokio::time::sleep(period).await;
            }
        });
        Leadership { holds, task }
    }
}
