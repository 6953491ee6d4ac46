//! The inbox service's words of the seam ([`super::api`]), the same for every engine: what
//! adding an item and importing answer.

use uuid::Uuid;

/// What adding an item did.
#[derive(Debug, PartialEq, Eq)]
pub enum AddOutcome {
    Added(Uuid),
    /// The idempotency key was used before: the item stored then.
    Repeated(Uuid),
    LimitReached,
}

/// What importing items did (see [`super::api::InboxItems::import_items`]).
#[derive(Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported {
        added: usize,
        /// Items whose id the account has already (kept as they are).
        skipped: usize,
    },
    LimitReached,
    /// Writing failed after part of the import was on disk, and the store takes no more
    /// writes until a restart, which undoes that part (sled: see its `imports`).
    Interrupted,
}
