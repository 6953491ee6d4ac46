//! The scheduler's ten background workers by name (scheduler.md §9.1): an enum, so that a
//! misspelt worker does not compile.

/// One of the ten workers, in the order of scheduler.md §9.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Worker {
    Triggerer,
    TriggeredInboxItemScheduler,
    TriggeredInboxItemSender,
    TriggeredEmailScheduler,
    TriggeredEmailConverter,
    VerificationEmailConverter,
    Emailer,
    AdminNotificationEmailConverter,
    PaymentsEventsFetcher,
    PaymentsEventsRetrier,
}

impl Worker {
    pub const ALL: [Worker; 10] = [
        Worker::Triggerer,
        Worker::TriggeredInboxItemScheduler,
        Worker::TriggeredInboxItemSender,
        Worker::TriggeredEmailScheduler,
        Worker::TriggeredEmailConverter,
        Worker::VerificationEmailConverter,
        Worker::Emailer,
        Worker::AdminNotificationEmailConverter,
        Worker::PaymentsEventsFetcher,
        Worker::PaymentsEventsRetrier,
    ];

    /// The name of `--disable-looper` (and of `GET /loopers` without `LooperInfo`).
    pub fn name(self) -> &'static str {
        match self {
            Worker::Triggerer => "triggerer",
            Worker::TriggeredInboxItemScheduler => "triggeredInboxItemScheduler",
            Worker::TriggeredInboxItemSender => "triggeredInboxItemSender",
            Worker::TriggeredEmailScheduler => "triggeredEmailScheduler",
            Worker::TriggeredEmailConverter => "triggeredEmailConverter",
            Worker::VerificationEmailConverter => "verificationEmailConverter",
            Worker::Emailer => "emailer",
            Worker::AdminNotificationEmailConverter => "adminNotificationEmailConverter",
            Worker::PaymentsEventsFetcher => "paymentsEventsFetcher",
            Worker::PaymentsEventsRetrier => "paymentsEventsRetrier",
        }
    }

    pub fn parse(name: &str) -> Option<Worker> {
        Worker::ALL.into_iter().find(|w| w.name() == name)
    }

    /// Its position in [`Worker::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_order() {
        for (i, w) in Worker::ALL.into_iter().enumerate() {
            assert_eq!(w.index(), i);
            assert_eq!(Worker::parse(w.name()), Some(w));
        }
        assert_eq!(Worker::parse("emailerLooperInfo"), None);
        assert_eq!(Worker::parse("Emailer"), None);
    }
}
