//! The limits on verification e-mails, so that nobody can make the server mail an address
//! over and over: at most [`RESENDS`] resends per trigger in a sliding hour
//! (`POST /trigger/email/resend/:id`), and for every verification e-mail (a new e-mail
//! trigger or a resend) at most [`PER_ADDRESS`] per destination address in a sliding day,
//! across all triggers and accounts, and [`PER_ACCOUNT`] per account in a day. Kept in
//! memory, per 16-byte key (a trigger id, an account id, the digest of an address): at most
//! `most` instants an entry, expired entries pruned, and a hard cap on the number of entries
//! (the stalest go first), so the state stays small whatever callers do. It starts empty
//! after a restart.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Resends allowed per trigger within [`WINDOW`].
pub const RESENDS: usize = 3;
pub const WINDOW: Duration = Duration::from_secs(3600);
/// Verification e-mails to one address within [`DAY`], whoever asks: a first e-mail and the
/// three resends one trigger may have in an hour, and one more.
pub const PER_ADDRESS: usize = 5;
/// Verification e-mails one account may have sent within [`DAY`].
pub const PER_ACCOUNT: usize = 10;
pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// The key of an e-mail address in the per-address limit: the first 16 bytes of the SHA-256
/// of its lower-case form (a fixed size whatever the address, and no address kept).
pub fn address_key(address: &str) -> Uuid {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(address.to_lowercase().as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(key)
}
/// Above this many triggers the expired entries are pruned.
const PRUNE_ABOVE: usize = 10_000;
/// Never more triggers than this: the ones resent longest ago are forgotten first.
const MOST_TRIGGERS: usize = 100_000;

pub struct ResendLimiter {
    most: usize,
    window: Duration,
    resends: Mutex<HashMap<Uuid, VecDeque<Instant>>>,
}

impl Default for ResendLimiter {
    fn default() -> Self {
        ResendLimiter::new(RESENDS, WINDOW)
    }
}

fn prune(q: &mut VecDeque<Instant>, now: Instant, window: Duration) {
    while q.front().is_some_and(|t| now.saturating_duration_since(*t) >= window) {
        q.pop_front();
    }
}

impl ResendLimiter {
    pub fn new(most: usize, window: Duration) -> ResendLimiter {
        ResendLimiter {
            most: most.max(1),
            window,
            resends: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a resend of `trigger` now; `Err(seconds)` (at least 1) when the trigger has
    /// had its resends within the window, with the time until the oldest leaves it.
    pub fn count(&self, trigger: Uuid) -> Result<(), u64> {
        self.count_at(trigger, Instant::now())
    }

    fn count_at(&self, trigger: Uuid, now: Instant) -> Result<(), u64> {
        let mut map = self.resends.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > PRUNE_ABOVE && !map.contains_key(&trigger) {
            map.retain(|_, q| {
                prune(q, now, self.window);
                !q.is_empty()
            });
            if map.len() >= MOST_TRIGGERS {
                let mut last: Vec<(Instant, Uuid)> =
                    map.iter().filter_map(|(id, q)| q.back().map(|t| (*t, *id))).collect();
                last.sort_unstable();
                for (_, id) in &last[..map.len() - MOST_TRIGGERS / 2] {
                    map.remove(id);
                }
            }
        }
        let q = map.entry(trigger).or_default();
        prune(q, now, self.window);
        if q.len() >= self.most {
            let wait = (q[q.len() - self.most] + self.window).saturating_duration_since(now);
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            return Err(secs.clamp(1, self.window.as_secs().max(1)));
        }
        q.push_back(now);
        Ok(())
    }

    /// Takes back the latest resend counted for `trigger` (it did not happen after all).
    pub fn uncount(&self, trigger: Uuid) {
        let mut map = self.resends.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = map.get_mut(&trigger) {
            q.pop_back();
            if q.is_empty() {
                map.remove(&trigger);
            }
        }
    }

    #[cfg(test)]
    fn triggers(&self) -> usize {
        self.resends.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_per_trigger_in_a_sliding_window() {
        let limiter = ResendLimiter::new(3, Duration::from_secs(3600));
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(limiter.count_at(a, at(0)), Ok(()));
        assert_eq!(limiter.count_at(a, at(10)), Ok(()));
        assert_eq!(limiter.count_at(a, at(20)), Ok(()));
        assert_eq!(
            limiter.count_at(a, at(30)),
            Err(3570),
            "until the first leaves the hour"
        );
        assert_eq!(limiter.count_at(b, at(30)), Ok(()), "other triggers are not affected");
        assert_eq!(limiter.count_at(a, at(3599)), Err(1));
        assert_eq!(limiter.count_at(a, at(3600)), Ok(()));
        assert_eq!(limiter.count_at(a, at(3601)), Err(9));
        limiter.uncount(a);
        assert_eq!(limiter.count_at(a, at(3601)), Ok(()), "a resend taken back");
    }

    #[test]
    fn addresses_are_keyed_without_case() {
        assert_eq!(address_key("Ann@Example.org"), address_key("ann@example.org"));
        assert_ne!(address_key("ann@example.org"), address_key("bob@example.org"));
    }

    #[test]
    fn the_state_stays_bounded() {
        let limiter = ResendLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        for n in 0..(PRUNE_ABOVE + 1) {
            limiter.count_at(Uuid::new_v4(), t0).unwrap();
            assert!(limiter.triggers() <= PRUNE_ABOVE + 1, "{n}");
        }
        // an hour later the expired entries go when the map is next too big
        limiter.count_at(Uuid::new_v4(), t0 + Duration::from_secs(61)).unwrap();
        assert_eq!(limiter.triggers(), 1);
    }
}
