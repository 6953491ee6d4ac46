//! E-mails of the scheduler: queued for the e-mail workers, and rendered (scheduler.md §8).

use super::scheduler::models::Delivery;
use super::wire::Timestamp;
use uuid::Uuid;

/// An e-mail waiting for the e-mail workers.
#[derive(Clone, Debug)]
pub struct QueuedEmail {
    /// The account it belongs to (nil for admin notifications).
    pub owner: Uuid,
    /// The trigger it belongs to (deleting the trigger drops it).
    pub trigger: Option<Uuid>,
    pub kind: EmailKind,
    /// Transient sending failures so far.
    pub failures: u32,
    /// Not to be sent before this instant (back-off).
    pub not_before: Timestamp,
}

#[derive(Clone, Debug)]
pub enum EmailKind {
    /// A verification e-mail to render, with the key in clear (kept only until sent).
    Verification { to: String, key: String },
    /// A triggered item to render for a verified e-mail trigger.
    Triggered { delivery: Delivery, to: String },
    /// A worker failure to tell the admin about.
    AdminNotice { worker: String, error: String },
    /// A message ready to send; `delivery` when its result belongs to a triggered item.
    Rendered {
        message: Message,
        delivery: Option<Delivery>,
    },
}

/// Where a queued e-mail stands (scheduler.md §9.1): waiting for the converter of its
/// kind, or rendered and waiting for the emailer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    Verification,
    Triggered,
    AdminNotice,
    Rendered,
}

impl EmailKind {
    pub fn stage(&self) -> Stage {
        match self {
            EmailKind::Verification { .. } => Stage::Verification,
            EmailKind::Triggered { .. } => Stage::Triggered,
            EmailKind::AdminNotice { .. } => Stage::AdminNotice,
            EmailKind::Rendered { .. } => Stage::Rendered,
        }
    }
}

/// A rendered e-mail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
}

impl QueuedEmail {
    pub fn new(owner: Uuid, trigger: Option<Uuid>, kind: EmailKind) -> QueuedEmail {
        QueuedEmail {
            owner,
            trigger,
            kind,
            failures: 0,
            not_before: Timestamp::from_unix(0, 0),
        }
    }
}
