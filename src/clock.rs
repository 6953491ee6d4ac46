//! The time the workers decide by: what is due now, when a postponed delivery may be tried
//! again, how long to sleep. The server runs on the real clock; tests can start it on a
//! manual clock that they set and advance, so an item becomes due, or a back-off runs out,
//! without waiting for the wall clock.
//!
//! Only those decisions read this clock. Timestamps that are records of when something
//! happened (`created`, logins, tokens, e-mail dates, outbox names) keep the system clock.

use crate::domain::wire::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The real clock, or a manual one (shared by every clone).
#[derive(Clone, Default)]
pub struct Clock {
    manual: Option<Arc<watch::Sender<Timestamp>>>,
}

impl Clock {
    /// The system clock.
    pub fn real() -> Clock {
        Clock { manual: None }
    }

    /// A clock that stands at `at` until it is set or advanced.
    pub fn manual(at: Timestamp) -> Clock {
        Clock {
            manual: Some(Arc::new(watch::channel(at).0)),
        }
    }

    pub fn now(&self) -> Timestamp {
        match &self.manual {
            Some(time) => *time.borrow(),
            None => Timestamp::now(),
        }
    }

    /// How long from now until `at` (zero when it has passed).
    pub fn until(&self, at: Timestamp) -> Duration {
        Duration::from_secs_f64(self.now().seconds_until(&at).max(0.0))
    }

    /// Sets a manual clock to `at`; every worker takes a look (see [`Clock::changes`]).
    ///
    /// Panics on the real clock: nobody sets the time of a running server.
    pub fn set(&self, at: Timestamp) {
        let time = self.manual.as_ref().expect("only a manual clock can be set");
        time.send_replace(at);
    }

    /// Moves a manual clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.set(self.now().plus(by));
    }

    /// What a sleeping worker waits on besides its timer: a manual clock that is set (a
    /// worker that sleeps until a due instant must look again when the time jumps).
    pub fn changes(&self) -> Changes {
        Changes(self.manual.as_ref().map(|time| time.subscribe()))
    }
}

/// Changes of a manual clock; the real clock never reports one.
pub struct Changes(Option<watch::Receiver<Timestamp>>);

impl Changes {
    /// Resolves when the clock was set since the last call (or since [`Clock::changes`]).
    pub async fn changed(&mut self) {
        if let Some(time) = &mut self.0 {
            if time.changed().await.is_ok() {
                return;
            }
        }
        std::future::pending().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_clock_follows_the_system_clock() {
        let clock = Clock::real();
        let before = Timestamp::now();
        let now = clock.now();
        assert!(before <= now && now <= Timestamp::now());
        assert_eq!(clock.until(before), Duration::ZERO);
        let later = clock.until(now.plus(Duration::from_secs(60)));
        assert!(
            later > Duration::from_secs(59) && later <= Duration::from_secs(60),
            "{later:?}"
        );
    }

    #[tokio::test]
    async fn a_manual_clock_stands_still_until_moved_and_says_so() {
        let start = Timestamp::from_unix(1_700_000_000, 0);
        let clock = Clock::manual(start);
        let mut changes = clock.changes();
        assert_eq!(clock.now(), start);
        assert_eq!(clock.until(start.plus(Duration::from_secs(5))), Duration::from_secs(5));
        clock.clone().advance(Duration::from_secs(2));
        assert_eq!(clock.now(), start.plus(Duration::from_secs(2)), "clones share the time");
        tokio::time::timeout(Duration::from_secs(5), changes.changed())
            .await
            .expect("the change is reported");
        clock.set(start);
        assert_eq!(clock.now(), start, "a manual clock may also go back");
    }

    #[tokio::test]
    async fn the_real_clock_reports_no_changes() {
        let mut changes = Clock::real().changes();
        let waited = tokio::time::timeout(Duration::from_millis(20), changes.changed()).await;
        assert!(waited.is_err());
    }
}
