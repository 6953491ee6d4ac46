//! Durability as a type: every write of the store answers a [`Written`] receipt, the
//! write's result together with its place in the writer's order. The result comes out only
//! through [`Written::durable`], which resolves once the write is on disk (flushed and
//! synced, together with every write queued before it), so no caller can answer a client,
//! or start a step that rests on a write, before that write is durable without saying so in
//! its code; a receipt that is dropped unused is a compiler warning (`#[must_use]`), an
//! error under `clippy -D warnings`.
//!
//! * A write that changed nothing (deleting a missing item, a full account, a trigger that
//!   is gone) resolves at once.
//! * A write that changed nothing but answers with what an earlier write queued (a repeated
//!   `Idempotency-Key` names the item of a first request that may still be waiting for its
//!   flush) waits for every batch queued before it.
//! * Reads see queued writes at once (the writer's overlay); only acknowledgements wait.
//!
//! Where receipts are awaited: each HTTP handler and account flow awaits the receipt of its
//! write before it answers (and before it wakes a worker for the work the write queued);
//! each worker awaits the receipts of a pass (or of one delivery) before it wakes the next
//! stage or records that the pass is done. docs/decisions.md lists them.

//!
//! The receipt is engine-neutral: its [`Ticket`] is a place in an engine's order of durable
//! writes (a group commit numbers its batches and says, through a watch, up to which number
//! they are on disk: sled's writer), or "committed" (an engine whose method returns only
//! after its transaction committed durably, such as PostgreSQL: [`Written::committed`],
//! durable at once), or nothing to wait for.

use super::{Result, StoreError};
use tokio::sync::watch;

/// How far an engine's numbered writes are: what a [`Ticket`] watches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flushed {
    /// Every write numbered up to this one is on disk.
    pub(crate) ok_upto: u64,
    /// The writes numbered up to this one failed (applying, flushing or syncing failed, or
    /// they were queued behind a cycle that did).
    pub(crate) failed_upto: u64,
}

/// A write's place in its engine's order: it is on disk once every write numbered up to
/// `upto` is (0: nothing to wait for). A [`Written`] receipt carries one with the write's
/// result.
#[must_use = "a ticket is how a write's durability is awaited"]
pub(crate) struct Ticket {
    upto: u64,
    /// The write changed something (`false`: it changed nothing, or it rests only on writes
    /// queued before it, like a repeated idempotency key).
    wrote: bool,
    flushed: Option<watch::Receiver<Flushed>>,
    /// The store took no writes: the write was never queued (the reason).
    refused: Option<String>,
}

impl Ticket {
    /// Nothing to wait for: resolves at once.
    pub(crate) fn none() -> Ticket {
        Ticket {
            upto: 0,
            wrote: false,
            flushed: None,
            refused: None,
        }
    }

    /// The write numbered `upto`, on disk once `flushed` says so; `wrote`: it changed
    /// something itself.
    pub(crate) fn queued(upto: u64, wrote: bool, flushed: watch::Receiver<Flushed>) -> Ticket {
        Ticket {
            upto,
            wrote,
            flushed: Some(flushed),
            refused: None,
        }
    }

    /// A write committed durably before its answer: changed something, nothing to wait for.
    fn committed() -> Ticket {
        Ticket {
            wrote: true,
            ..Ticket::none()
        }
    }

    /// A write the store refused to queue: waiting answers [`StoreError::Unavailable`].
    pub(crate) fn refused(reason: String) -> Ticket {
        Ticket {
            upto: 0,
            wrote: true,
            flushed: None,
            refused: Some(reason),
        }
    }

    pub(crate) fn wrote(&self) -> bool {
        self.wrote
    }

    /// The later of two tickets (waiting for it covers both: writes reach the disk in the
    /// order they were numbered).
    pub(crate) fn and(self, other: Ticket) -> Ticket {
        let wrote = self.wrote || other.wrote;
        let refused = self.refused.clone().or_else(|| other.refused.clone());
        let mut later = if other.upto > self.upto { other } else { self };
        later.wrote = wrote;
        later.refused = refused;
        later
    }

    /// Resolves once every write up to this ticket's is on disk.
    pub(crate) async fn wait(self) -> Result<()> {
        if let Some(reason) = self.refused {
            return Err(StoreError::Unavailable(reason));
        }
        let (upto, Some(mut rx)) = (self.upto, self.flushed) else {
            return Ok(());
        };
        if upto == 0 {
            return Ok(());
        }
        let state = rx
            .wait_for(|f| f.ok_upto >= upto || f.failed_upto >= upto)
            .await
            .map_err(|_| StoreError::NotDurable)?;
        if state.ok_upto >= upto {
            Ok(())
        } else {
            Err(StoreError::NotDurable)
        }
    }
}

/// The result of a write, to be had once the write is durable.
#[must_use = "a write counts only once `.durable().await` has answered"]
pub struct Written<T> {
    value: T,
    /// The write's place in its engine's order.
    ticket: Ticket,
}

impl<T> Written<T> {
    /// `value`, once the write `ticket` stands for is on disk.
    pub(crate) fn new(value: T, ticket: Ticket) -> Written<T> {
        Written { value, ticket }
    }

    /// A write that changed nothing: `value` at once.
    pub(crate) fn unchanged(value: T) -> Written<T> {
        Written::new(value, Ticket::none())
    }

    /// A write that changed something and is durable already (its transaction committed
    /// before this receipt was made): `value` at once, and [`Written::changed`].
    pub(crate) fn committed(value: T) -> Written<T> {
        Written::new(value, Ticket::committed())
    }

    /// Whether the write changed anything (callers wake a worker only when it did).
    pub fn changed(&self) -> bool {
        self.ticket.wrote()
    }

    /// The result, once the write and every write queued before it are on disk; an error
    /// when writing or syncing failed (then nothing of that flush counts as written).
    pub async fn durable(self) -> Result<T> {
        self.ticket.wait().await?;
        Ok(self.value)
    }

    /// This receipt and `other` as one: both results once both writes are durable.
    pub fn and<U>(self, other: Written<U>) -> Written<(T, U)> {
        Written {
            value: (self.value, other.value),
            ticket: self.ticket.and(other.ticket),
        }
    }

    /// The same durability without the result (to join receipts of different writes).
    pub fn discard(self) -> Written<()> {
        Written {
            value: (),
            ticket: self.ticket,
        }
    }

    /// Several receipts as one: every result, once the last write is durable.
    pub fn all(receipts: impl IntoIterator<Item = Written<T>>) -> Written<Vec<T>> {
        let mut values = Vec::new();
        let mut ticket = Ticket::none();
        for written in receipts {
            values.push(written.value);
            ticket = ticket.and(written.ticket);
        }
        Written { value: values, ticket }
    }
}

impl Written<()> {
    /// No write at all: resolves at once (a start for joining receipts).
    pub fn nothing() -> Written<()> {
        Written::unchanged(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A committed receipt (an engine that answers after COMMIT) is durable at once and
    /// counts as a change, also when joined with receipts that changed nothing.
    #[tokio::test]
    async fn a_committed_receipt_is_durable_at_once_and_changed() {
        let committed = Written::committed(7);
        assert!(committed.changed());
        let joined = Written::nothing().and(committed);
        assert!(joined.changed());
        assert_eq!(joined.durable().await.expect("at once"), ((), 7));
        let all = Written::all([Written::unchanged(1), Written::committed(2)]);
        assert!(all.changed());
        assert!(!Written::all([Written::unchanged(1)]).changed());
        assert!(Written::committed(()).discard().changed());
        assert_eq!(all.durable().await.expect("at once"), vec![1, 2]);
    }
}
