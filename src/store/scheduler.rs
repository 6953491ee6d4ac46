//! The scheduler service's words of the seam ([`super::api`]), the same for every engine:
//! what adding and importing answer, the ids an import brings, and the name of a queued
//! delivery or e-mail.

use crate::domain::transfer::SchedulerEntry;
use uuid::Uuid;

/// A pending inbox delivery or queued e-mail, as the workers name it while they handle it:
/// opaque bytes that the engine which answered it made (sled: the record's key; PostgreSQL:
/// a tagged id, `PgQueueKey`) and reads back. The workers use the bytes as the name of what
/// they have in flight.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QueueKey(Vec<u8>);

impl QueueKey {
    /// The key an engine makes of its own name for an entry.
    pub(crate) fn from_bytes(bytes: Vec<u8>) -> QueueKey {
        QueueKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What adding a scheduled item did.
pub enum AddOutcome {
    Added,
    LimitReached,
}

/// What an import stored; "kept" counts what the account had already (left as it is).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Imported {
    pub settings_changed: bool,
    pub scheduled_added: usize,
    pub scheduled_kept: usize,
    pub triggered_added: usize,
    pub triggered_kept: usize,
    pub triggers_added: usize,
    pub triggers_kept: usize,
    /// The e-mail triggers imported (unverified: they need verifying).
    pub email_triggers: Vec<Uuid>,
}

/// What importing an account's export did.
#[derive(Debug, PartialEq, Eq)]
pub enum ImportOutcome {
    Imported(Imported),
    LimitReached,
    /// Writing failed after part of the import was on disk, and the store takes no more
    /// writes until a restart, which undoes that part (sled: see its `imports`).
    Interrupted,
}

/// The ids an import brings, per kind (in any order, repeats allowed): what is checked
/// against the store before anything is written.
#[derive(Debug, Default)]
pub struct ImportIds {
    pub scheduled: Vec<Uuid>,
    pub triggered: Vec<Uuid>,
    pub triggers: Vec<Uuid>,
}

impl ImportIds {
    pub fn note(&mut self, entry: &SchedulerEntry) {
        match entry {
            SchedulerEntry::Scheduled(s) => self.scheduled.push(s.id),
            SchedulerEntry::Triggered(t) => self.triggered.push(t.id),
            SchedulerEntry::Trigger(t) => self.triggers.push(t.id),
        }
    }

    pub fn len(&self) -> usize {
        self.scheduled.len() + self.triggered.len() + self.triggers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
