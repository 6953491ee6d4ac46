//! Group commit: writers apply their change in memory (sled), then wait here until a
//! `flush()` that started after their change has finished. One thread does the flushing, so
//! there is never more than one flush in flight (sled's `flush_async` from several tasks can
//! hang) and every waiter that arrived during a flush shares the next one.

use super::{Result, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Flushed {
    /// Every write numbered up to this one is on disk.
    ok_upto: u64,
    /// The writes numbered up to this one were in a flush that failed.
    failed_upto: u64,
}

pub struct Durability {
    writes: Arc<AtomicU64>,
    wake: mpsc::Sender<()>,
    flushed: watch::Receiver<Flushed>,
}

impl Durability {
    pub(super) fn start(db: sled::Db) -> Durability {
        let writes = Arc::new(AtomicU64::new(0));
        let (wake, woken) = mpsc::channel::<()>();
        let (tx, flushed) = watch::channel(Flushed::default());
        let seen = writes.clone();
        std::thread::Builder::new()
            .name("pigeonhole-flush".into())
            .spawn(move || {
                // Ends when every `Durability` handle (the sender) is gone.
                while woken.recv().is_ok() {
                    while woken.try_recv().is_ok() {}
                    let target = seen.load(Ordering::SeqCst);
                    let result = db.flush();
                    tx.send_modify(|f| match result {
                        Ok(_) => f.ok_upto = f.ok_upto.max(target),
                        Err(ref e) => {
                            tracing::error!("flushing the database failed: {e}");
                            f.failed_upto = f.failed_upto.max(target);
                        }
                    });
                }
            })
            // Failing to start a thread at start-up leaves nothing to serve with.
            .expect("start the database flush thread");
        Durability { writes, wake, flushed }
    }

    /// Resolves once everything written before this call is on disk.
    pub async fn wait(&self) -> Result<()> {
        let mine = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let mut rx = self.flushed.clone();
        if self.wake.send(()).is_err() {
            return Err(StoreError::NotDurable);
        }
        let state = rx
            .wait_for(|f| f.ok_upto >= mine || f.failed_upto >= mine)
            .await
            .map_err(|_| StoreError::NotDurable)?;
        if state.ok_upto >= mine {
            Ok(())
        } else {
            Err(StoreError::NotDurable)
        }
    }
}
