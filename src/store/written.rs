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

use super::writer::Ticket;
use super::Result;

/// The result of a write, to be had once the write is durable.
#[must_use = "a write counts only once `.durable().await` has answered"]
pub struct Written<T> {
    value: T,
    ticket: Ticket,
}

impl<T> Written<T> {
    /// `value`, once the write `ticket` stands for is on disk.
    pub(super) fn new(value: T, ticket: Ticket) -> Written<T> {
        Written { value, ticket }
    }

    /// A write that changed nothing: `value` at once.
    pub(super) fn unchanged(value: T) -> Written<T> {
        Written::new(value, Ticket::none())
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
        Written::new((self.value, other.value), self.ticket.and(other.ticket))
    }

    /// The same durability without the result (to join receipts of different writes).
    pub fn discard(self) -> Written<()> {
        Written::new((), self.ticket)
    }

    /// Several receipts as one: every result, once the last write is durable.
    pub fn all(receipts: impl IntoIterator<Item = Written<T>>) -> Written<Vec<T>> {
        let mut values = Vec::new();
        let mut ticket = Ticket::none();
        for written in receipts {
            values.push(written.value);
            ticket = ticket.and(written.ticket);
        }
        Written::new(values, ticket)
    }
}

impl Written<()> {
    /// No write at all: resolves at once (a start for joining receipts).
    pub fn nothing() -> Written<()> {
        Written::unchanged(())
    }
}
