//! Throttling of logins and registrations (inbox.md §1.7, spec decisions 12 and 17).
//!
//! Logins: attempts count per (username, client address) pair and per client address, in a
//! sliding window. An attempt takes its slot *before* the password is checked and gives it
//! back when the password was right, so any number of concurrent attempts stays within the
//! limit. A stranger's failures are counted against the stranger's address (and the pair
//! with it) only: the owner logging in from elsewhere is never refused, and a login with an
//! access-key secret is not throttled at all (the caller checks it first).
//!
//! Registrations: attempts count per client address (IPv6 addresses by their /64 network,
//! which one machine usually has whole), so one client cannot fill the database with
//! accounts.
//!
//! The counts are kept by the store's [`Throttles`] (src/store/throttles.rs), so that every
//! process of one database counts together; each key is a 16-byte digest of the service,
//! the username and the address (a username can be megabytes long), and the store bounds
//! what it keeps.

use crate::store::throttles::{Count, MemoryThrottles, Taken, Throttle, Throttles, Turn};
use crate::store::StoreError;
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Whole seconds for `Retry-After`: at least 1, at most the window.
fn retry_after_secs(wait: Duration, window: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.clamp(1, window.as_secs().max(1))
}

/// The 16 bytes that stand for `parts` (a username can be megabytes long; an address is
/// kept as a digest too, so that every key has one size). `scope` keeps the two services'
/// counts apart.
fn key_of(scope: &str, parts: &[&[u8]]) -> [u8; 16] {
    let mut h = Sha256::new();
    for part in std::iter::once(scope.as_bytes()).chain(parts.iter().copied()) {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

fn octets(addr: IpAddr) -> Vec<u8> {
    match addr.to_canonical() {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// Failed-login limits of one service.
pub struct LoginLimiter {
    scope: &'static str,
    window: Duration,
    per_pair: u32,
    per_addr: u32,
    throttles: Arc<dyn Throttles>,
}

/// A login attempt's place in the limits: counted as a failure unless
/// [`LoginAttempt::succeeded`] gives it back (also when the request is abandoned midway).
#[must_use = "an attempt counts as a failure unless it is reported as a success"]
pub struct LoginAttempt<'a> {
    limiter: &'a LoginLimiter,
    taken: Taken,
}

impl LoginAttempt<'_> {
    /// The password was right: the attempt does not count. (When the counts cannot be
    /// reached, it stays counted: the owner has one try less for a while.)
    pub async fn succeeded(self) {
        if let Err(e) = self.limiter.throttles.give_back(&self.taken).await {
            tracing::warn!("a successful login stays counted as a failure: {e}");
        }
    }
}

impl LoginLimiter {
    /// 10 per pair and 100 per address in 10 minutes (inbox.md §1.7), counted in `throttles`
    /// under `scope` (the service's name).
    pub fn new(scope: &'static str, throttles: Arc<dyn Throttles>) -> LoginLimiter {
        LoginLimiter::with_limits(scope, throttles, Duration::from_secs(600), 10, 100)
    }

    pub fn with_limits(
        scope: &'static str,
        throttles: Arc<dyn Throttles>,
        window: Duration,
        per_pair: u32,
        per_addr: u32,
    ) -> LoginLimiter {
        LoginLimiter {
            scope,
            window,
            per_pair,
            per_addr,
            throttles,
        }
    }

    /// Takes a slot for a login of `username` from `addr`, or `Err(seconds)` to wait when
    /// the pair or the address has used up its attempts.
    pub async fn reserve(&self, username: &str, addr: IpAddr) -> Result<Result<LoginAttempt<'_>, u64>, StoreError> {
        let addr = octets(addr);
        let counts = [
            Count {
                throttle: Throttle::LoginPair,
                key: key_of(self.scope, &[username.as_bytes(), &addr]),
                most: self.per_pair,
                window: self.window,
            },
            Count {
                throttle: Throttle::LoginAddress,
                key: key_of(self.scope, &[&addr]),
                most: self.per_addr,
                window: self.window,
            },
        ];
        Ok(match self.throttles.take(&counts).await? {
            Turn::Counted(taken) => Ok(LoginAttempt { limiter: self, taken }),
            Turn::Wait { after, .. } => Err(retry_after_secs(after, self.window)),
        })
    }
}

/// Registrations per client address.
pub struct RegistrationLimiter {
    scope: &'static str,
    window: Duration,
    per_addr: u32,
    throttles: Arc<dyn Throttles>,
}

impl RegistrationLimiter {
    /// 10 per address (IPv6: per /64) in an hour.
    pub fn new(scope: &'static str, throttles: Arc<dyn Throttles>) -> RegistrationLimiter {
        RegistrationLimiter::with_limits(scope, throttles, Duration::from_secs(3600), 10)
    }

    pub fn with_limits(
        scope: &'static str,
        throttles: Arc<dyn Throttles>,
        window: Duration,
        per_addr: u32,
    ) -> RegistrationLimiter {
        RegistrationLimiter {
            scope,
            window,
            per_addr,
            throttles,
        }
    }

    /// Counts a registration attempt from `addr`, or `Err(seconds)` to wait. Loopback
    /// clients are not limited: that is the owner's own machine (set-up tools, scripts);
    /// behind a reverse proxy, `--trusted-proxy` makes the real client address count.
    pub async fn attempt(&self, addr: IpAddr) -> Result<Result<(), u64>, StoreError> {
        let addr = addr.to_canonical();
        if addr.is_loopback() {
            return Ok(Ok(()));
        }
        let count = Count {
            throttle: Throttle::Registration,
            key: key_of(self.scope, &[&octets(network_of(addr))]),
            most: self.per_addr,
            window: self.window,
        };
        Ok(match self.throttles.take(&[count]).await? {
            Turn::Counted(_) => Ok(()),
            Turn::Wait { after, .. } => Err(retry_after_secs(after, self.window)),
        })
    }
}

/// Counts of this process alone (a limiter made without a database's: tests, tools).
pub fn private_throttles() -> Arc<dyn Throttles> {
    Arc::new(MemoryThrottles::default())
}

/// IPv4 addresses as they are, IPv6 addresses by their /64 network.
fn network_of(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(a) => {
            let mut o = a.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn limiter() -> LoginLimiter {
        LoginLimiter::new("inbox", private_throttles())
    }

    async fn fail(l: &LoginLimiter, user: &str, addr: IpAddr) {
        drop(l.reserve(user, addr).await.unwrap().expect("a slot"));
    }

    #[tokio::test]
    async fn ten_failures_refuse_the_pair_and_not_the_same_user_elsewhere() {
        let l = limiter();
        let (stranger, owner) = (ip("203.0.113.5"), ip("198.51.100.7"));
        for _ in 0..10 {
            fail(&l, "alice", stranger).await;
        }
        let wait = l.reserve("alice", stranger).await.unwrap().err().expect("refused");
        assert!((599..=600).contains(&wait), "{wait}");
        l.reserve("alice", owner)
            .await
            .unwrap()
            .expect("the owner elsewhere")
            .succeeded()
            .await;
        l.reserve("bob", stranger)
            .await
            .unwrap()
            .expect("another user from the stranger's address")
            .succeeded()
            .await;
    }

    #[tokio::test]
    async fn successes_give_their_slot_back_and_attempts_in_flight_count() {
        let l = limiter();
        let a = ip("192.0.2.1");
        for _ in 0..50 {
            l.reserve("alice", a).await.unwrap().expect("a slot").succeeded().await;
        }
        // ten attempts in flight at once: the eleventh is refused before any finishes
        let mut in_flight = Vec::new();
        for _ in 0..10 {
            in_flight.push(l.reserve("alice", a).await.unwrap().expect("a slot"));
        }
        assert!(l.reserve("alice", a).await.unwrap().is_err());
        for attempt in in_flight {
            attempt.succeeded().await;
        }
        l.reserve("alice", a)
            .await
            .unwrap()
            .expect("free again")
            .succeeded()
            .await;
    }

    #[tokio::test]
    async fn the_address_limit_counts_every_username() {
        let l = LoginLimiter::with_limits("inbox", private_throttles(), Duration::from_secs(600), 10, 3);
        let a = ip("10.0.0.1");
        for i in 0..3 {
            fail(&l, &format!("user{i}"), a).await;
        }
        assert!(l.reserve("someone", a).await.unwrap().is_err());
        l.reserve("someone", ip("10.0.0.2"))
            .await
            .unwrap()
            .expect("another address")
            .succeeded()
            .await;
    }

    #[tokio::test]
    async fn the_services_count_apart_in_shared_throttles() {
        let shared = private_throttles();
        let inbox = LoginLimiter::new("inbox", shared.clone());
        let scheduler = LoginLimiter::new("scheduler", shared);
        let a = ip("203.0.113.9");
        for _ in 0..10 {
            fail(&inbox, "alice", a).await;
        }
        assert!(inbox.reserve("alice", a).await.unwrap().is_err());
        scheduler
            .reserve("alice", a)
            .await
            .unwrap()
            .expect("the other service's account")
            .succeeded()
            .await;
    }

    #[tokio::test]
    async fn memory_is_bounded_whatever_the_usernames() {
        let throttles = Arc::new(MemoryThrottles::manual(Some(64)));
        let l = LoginLimiter::with_limits("inbox", throttles.clone(), Duration::from_secs(600), 10, 100);
        let huge = "x".repeat(1 << 16);
        for i in 0..1000u32 {
            let addr = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
            fail(&l, &format!("{huge}{i}"), addr).await;
            throttles.advance(Duration::from_millis(1));
        }
        let (pairs, addrs) = (
            throttles.keys(Throttle::LoginPair),
            throttles.keys(Throttle::LoginAddress),
        );
        assert!(pairs <= 64 && addrs <= 64, "{pairs} pairs, {addrs} addresses");
        // the newest entries are still there
        let last = IpAddr::from([10, 0, 3, 231]);
        for _ in 0..9 {
            fail(&l, &format!("{huge}999"), last).await;
        }
        assert!(
            l.reserve(&format!("{huge}999"), last).await.unwrap().is_err(),
            "ten failures of the newest pair"
        );
    }

    #[tokio::test]
    async fn registrations_are_limited_per_address_and_ipv6_network() {
        let r = RegistrationLimiter::with_limits("inbox", private_throttles(), Duration::from_secs(3600), 2);
        for _ in 0..2 {
            r.attempt(ip("203.0.113.5")).await.unwrap().expect("allowed");
        }
        let wait = r.attempt(ip("203.0.113.5")).await.unwrap().unwrap_err();
        assert!((3599..=3600).contains(&wait), "{wait}");
        r.attempt(ip("203.0.113.6")).await.unwrap().expect("another address");
        r.attempt(ip("2001:db8::1")).await.unwrap().expect("allowed");
        r.attempt(ip("2001:db8::2")).await.unwrap().expect("allowed");
        assert!(r.attempt(ip("2001:db8::ffff")).await.unwrap().is_err(), "same /64");
        r.attempt(ip("2001:db8:0:1::1")).await.unwrap().expect("another /64");
        for _ in 0..10 {
            r.attempt(ip("127.0.0.1"))
                .await
                .unwrap()
                .expect("loopback is not limited");
            r.attempt(ip("::1")).await.unwrap().expect("loopback is not limited");
        }
    }

    #[test]
    fn retry_after_is_whole_seconds_within_the_window() {
        let window = Duration::from_secs(600);
        assert_eq!(retry_after_secs(Duration::from_millis(1), window), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(599_001), window), 600);
        assert_eq!(retry_after_secs(Duration::from_secs(10_000), window), 600);
    }
}
