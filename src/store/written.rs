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
//! The receipt is engine-neutral: its ticket is either the sled writer's (resolved at the
//! flush and sync that covers it) or "committed" (an engine whose method returns only after
//! its transaction committed durably, such as PostgreSQL: [`Written::committed`], durable at
//! once).

use super::sled::writer::Ticket;
use super::Result;

/// The result of a write, to be had once the write is durable.
#[must_use = "a write counts only once `.durable().await` has answered"]
pub struct Written<T> {
    value: T,
    /// The writer's place in its order (`Ticket::none()` when there is nothing to wait for).
    ticket: Ticket,
    /// The write was committed durably before the receipt was made (changed something).
    committed: bool,
}

impl<T> Written<T> {
    /// `value`, once the write `ticket` stands for is on disk.
    pub(crate) fn new(value: T, ticket: Ticket) -> Written<T> {
        Written {
            value,
            ticket,
            committed: false,
        }
    }

    /// A write that changed nothing: `value` at once.
    pub(crate) fn unchanged(value: T) -> Written<T> {
        Written::new(value, Ticket::none())
    }

    /// A write that changed something and is durable already (its transaction committed
    /// before this receipt was made): `value` at once, and [`Written::changed`].
    pub(crate) fn committed(value: T) -> Written<T> {
        Written {
            value,
            ticket: Ticket::none(),
            committed: true,
        }
    }

    /// Whether the write changed anything (callers wake a worker only when it did).
    pub fn changed(&self) -> bool {
        self.committed || self.ticket.wrote()
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
            committed: self.committed || other.committed,
        }
    }

    /// The same durability without the result (to join receipts of different writes).
    pub fn discard(self) -> Written<()> {
        Written {
            value: (),
            ticket: self.ticket,
            committed: self.committed,
        }
    }

    /// Several receipts as one: every result, once the last write is durable.
    pub fn all(receipts: impl IntoIterator<Item = Written<T>>) -> Written<Vec<T>> {
        let mut values = Vec::new();
        let mut ticket = Ticket::none();
        let mut committed = false;
        for written in receipts {
            values.push(written.value);
            ticket = ticket.and(written.ticket);
            committed |= written.committed;
        }
        Written {
            value: values,
            ticket,
            committed,
        }
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
