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
//! Memory is bounded whatever clients send: a pair is kept as a 16-byte digest of the
//! username and the address (a username can be megabytes long), each entry holds at most
//! `limit` timestamps, entries leave when their timestamps leave the window, and each table
//! has a maximum number of entries (at the maximum, the entries idle the longest make room).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Timestamps (milliseconds since the limiter was made) of the counted attempts of one key,
/// per key, within a window.
struct Window<K> {
    limit: usize,
    span_ms: u64,
    max_entries: usize,
    entries: HashMap<K, Vec<u64>>,
}

impl<K: Hash + Eq + Clone> Window<K> {
    fn new(limit: usize, span: Duration, max_entries: usize) -> Window<K> {
        Window {
            limit: limit.max(1),
            span_ms: span.as_millis().max(1) as u64,
            max_entries: max_entries.max(1),
            entries: HashMap::new(),
        }
    }

    /// Milliseconds until `key` may make another attempt (`None`: it may now).
    fn wait(&mut self, key: &K, now: u64) -> Option<u64> {
        let span = self.span_ms;
        let stamps = self.entries.get_mut(key)?;
        stamps.retain(|t| now.saturating_sub(*t) < span);
        if stamps.is_empty() {
            self.entries.remove(key);
            return None;
        }
        if stamps.len() < self.limit {
            return None;
        }
        // the attempt that must leave the window for the count to drop below the limit
        let oldest = stamps[stamps.len() - self.limit];
        Some((oldest + span).saturating_sub(now).max(1))
    }

    fn add(&mut self, key: K, now: u64) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max_entries {
            self.make_room(now);
        }
        let stamps = self.entries.entry(key).or_default();
        stamps.push(now);
        if stamps.len() > self.limit {
            // only possible for a caller that adds without asking first; keep the newest
            stamps.remove(0);
        }
    }

    /// Forgets one attempt of `key` made at `at` (a reserved slot given back).
    fn remove(&mut self, key: &K, at: u64) {
        if let Some(stamps) = self.entries.get_mut(key) {
            if let Some(i) = stamps.iter().rposition(|t| *t == at) {
                stamps.remove(i);
            }
            if stamps.is_empty() {
                self.entries.remove(key);
            }
        }
    }

    /// Drops what left the window; if the table is still full, the quarter of the entries
    /// whose last attempt is oldest.
    fn make_room(&mut self, now: u64) {
        let span = self.span_ms;
        self.entries.retain(|_, stamps| {
            stamps.retain(|t| now.saturating_sub(*t) < span);
            !stamps.is_empty()
        });
        if self.entries.len() < self.max_entries {
            return;
        }
        let mut last: Vec<(u64, K)> = self
            .entries
            .iter()
            .map(|(k, s)| (s.last().copied().unwrap_or(0), k.clone()))
            .collect();
        last.sort_unstable_by_key(|(t, _)| *t);
        for (_, k) in last.into_iter().take(self.max_entries.div_ceil(4)) {
            self.entries.remove(&k);
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Whole seconds for `Retry-After`: at least 1, at most the window.
fn retry_after_secs(wait_ms: u64, span_ms: u64) -> u64 {
    wait_ms.div_ceil(1000).clamp(1, span_ms.div_ceil(1000).max(1))
}

/// The digest that stands for a (username, address) pair.
fn pair_key(username: &str, addr: IpAddr) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update((username.len() as u64).to_be_bytes());
    h.update(username.as_bytes());
    match addr.to_canonical() {
        IpAddr::V4(a) => h.update(a.octets()),
        IpAddr::V6(a) => h.update(a.octets()),
    }
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

struct LoginTables {
    pairs: Window<[u8; 16]>,
    addrs: Window<IpAddr>,
}

/// Failed-login limits of one service.
pub struct LoginLimiter {
    epoch: Instant,
    tables: Mutex<LoginTables>,
}

/// A login attempt's place in the limits: counted as a failure unless
/// [`LoginAttempt::succeeded`] gives it back (also when the request is abandoned midway).
#[must_use = "an attempt counts as a failure unless it is reported as a success"]
pub struct LoginAttempt<'a> {
    limiter: &'a LoginLimiter,
    pair: [u8; 16],
    addr: IpAddr,
    at: u64,
}

impl LoginAttempt<'_> {
    /// The password was right: the attempt does not count.
    pub fn succeeded(self) {
        let mut t = self.limiter.lock();
        t.pairs.remove(&self.pair, self.at);
        t.addrs.remove(&self.addr, self.at);
    }
}

impl Default for LoginLimiter {
    fn default() -> Self {
        // 10 per pair and 100 per address in 10 minutes (inbox.md §1.7)
        LoginLimiter::new(Duration::from_secs(600), 10, 100)
    }
}

impl LoginLimiter {
    pub fn new(window: Duration, per_pair: usize, per_addr: usize) -> LoginLimiter {
        LoginLimiter::with_capacity(window, per_pair, per_addr, 32_768, 4_096)
    }

    fn with_capacity(
        window: Duration,
        per_pair: usize,
        per_addr: usize,
        max_pairs: usize,
        max_addrs: usize,
    ) -> LoginLimiter {
        LoginLimiter {
            epoch: Instant::now(),
            tables: Mutex::new(LoginTables {
                pairs: Window::new(per_pair, window, max_pairs),
                addrs: Window::new(per_addr, window, max_addrs),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LoginTables> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Takes a slot for a login of `username` from `addr`, or `Err(seconds)` to wait when
    /// the pair or the address has used up its attempts.
    pub fn reserve(&self, username: &str, addr: IpAddr) -> Result<LoginAttempt<'_>, u64> {
        let pair = pair_key(username, addr);
        let now = self.now();
        let mut t = self.lock();
        let waits = [t.pairs.wait(&pair, now), t.addrs.wait(&addr, now)];
        if let Some(wait) = waits.into_iter().flatten().max() {
            return Err(retry_after_secs(wait, t.pairs.span_ms));
        }
        t.pairs.add(pair, now);
        t.addrs.add(addr, now);
        Ok(LoginAttempt {
            limiter: self,
            pair,
            addr,
            at: now,
        })
    }

    /// Entries kept (pairs, addresses).
    pub fn entries(&self) -> (usize, usize) {
        let t = self.lock();
        (t.pairs.len(), t.addrs.len())
    }
}

/// Registrations per client address.
pub struct RegistrationLimiter {
    epoch: Instant,
    window: Mutex<Window<IpAddr>>,
}

impl Default for RegistrationLimiter {
    fn default() -> Self {
        RegistrationLimiter::new(Duration::from_secs(3600), 10)
    }
}

impl RegistrationLimiter {
    pub fn new(window: Duration, per_addr: usize) -> RegistrationLimiter {
        RegistrationLimiter {
            epoch: Instant::now(),
            window: Mutex::new(Window::new(per_addr, window, 4_096)),
        }
    }

    /// Counts a registration attempt from `addr`, or `Err(seconds)` to wait. Loopback
    /// clients are not limited: that is the owner's own machine (set-up tools, scripts);
    /// behind a reverse proxy, `--trusted-proxy` makes the real client address count.
    pub fn attempt(&self, addr: IpAddr) -> Result<(), u64> {
        let addr = addr.to_canonical();
        if addr.is_loopback() {
            return Ok(());
        }
        let key = network_of(addr);
        let now = self.epoch.elapsed().as_millis() as u64;
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(wait) = w.wait(&key, now) {
            return Err(retry_after_secs(wait, w.span_ms));
        }
        w.add(key, now);
        Ok(())
    }
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

    #[test]
    fn ten_failures_refuse_the_pair_and_not_the_same_user_elsewhere() {
        let l = LoginLimiter::default();
        let (stranger, owner) = (ip("203.0.113.5"), ip("198.51.100.7"));
        for _ in 0..10 {
            drop(l.reserve("alice", stranger).expect("a slot"));
        }
        let wait = l.reserve("alice", stranger).err().expect("refused");
        assert!((599..=600).contains(&wait), "{wait}");
        l.reserve("alice", owner).expect("the owner elsewhere").succeeded();
        l.reserve("bob", stranger)
            .expect("another user from the stranger's address")
            .succeeded();
    }

    #[test]
    fn successes_give_their_slot_back_and_attempts_in_flight_count() {
        let l = LoginLimiter::default();
        let a = ip("192.0.2.1");
        for _ in 0..50 {
            l.reserve("alice", a).expect("a slot").succeeded();
        }
        // ten attempts in flight at once: the eleventh is refused before any finishes
        let in_flight: Vec<_> = (0..10).map(|_| l.reserve("alice", a).expect("a slot")).collect();
        assert!(l.reserve("alice", a).is_err());
        for attempt in in_flight {
            attempt.succeeded();
        }
        l.reserve("alice", a).expect("free again").succeeded();
    }

    #[test]
    fn the_address_limit_counts_every_username() {
        let l = LoginLimiter::new(Duration::from_secs(600), 10, 3);
        let a = ip("10.0.0.1");
        for i in 0..3 {
            drop(l.reserve(&format!("user{i}"), a).expect("a slot"));
        }
        assert!(l.reserve("someone", a).is_err());
        l.reserve("someone", ip("10.0.0.2"))
            .expect("another address")
            .succeeded();
    }

    #[test]
    fn attempts_leave_the_window() {
        let mut w: Window<u8> = Window::new(2, Duration::from_millis(1000), 10);
        w.add(1, 0);
        w.add(1, 400);
        assert_eq!(w.wait(&1, 500), Some(500), "until the first leaves");
        assert_eq!(w.wait(&1, 999), Some(1));
        assert_eq!(w.wait(&1, 1000), None);
        assert_eq!(w.wait(&1, 1400), None);
        assert_eq!(w.len(), 0, "an entry whose attempts all left is dropped");
        assert_eq!(retry_after_secs(1, 600_000), 1);
        assert_eq!(retry_after_secs(599_001, 600_000), 600);
        assert_eq!(retry_after_secs(10_000_000, 600_000), 600);
    }

    #[test]
    fn memory_is_bounded_whatever_the_usernames() {
        let l = LoginLimiter::with_capacity(Duration::from_secs(600), 10, 100, 64, 16);
        let huge = "x".repeat(1 << 16);
        for i in 0..1000u32 {
            let addr = IpAddr::from([10, 0, (i >> 8) as u8, i as u8]);
            drop(l.reserve(&format!("{huge}{i}"), addr).expect("a slot"));
        }
        let (pairs, addrs) = l.entries();
        assert!(pairs <= 64 && addrs <= 16, "{pairs} pairs, {addrs} addresses");
        // the newest entries are still there
        let last = IpAddr::from([10, 0, 3, 231]);
        for _ in 0..9 {
            drop(l.reserve(&format!("{huge}999"), last).expect("a slot"));
        }
        assert!(
            l.reserve(&format!("{huge}999"), last).is_err(),
            "ten failures of the newest pair"
        );
    }

    #[test]
    fn registrations_are_limited_per_address_and_ipv6_network() {
        let r = RegistrationLimiter::new(Duration::from_secs(3600), 2);
        for _ in 0..2 {
            r.attempt(ip("203.0.113.5")).expect("allowed");
        }
        let wait = r.attempt(ip("203.0.113.5")).unwrap_err();
        assert!((3599..=3600).contains(&wait), "{wait}");
        r.attempt(ip("203.0.113.6")).expect("another address");
        r.attempt(ip("2001:db8::1")).expect("allowed");
        r.attempt(ip("2001:db8::2")).expect("allowed");
        assert!(r.attempt(ip("2001:db8::ffff")).is_err(), "same /64");
        r.attempt(ip("2001:db8:0:1::1")).expect("another /64");
        for _ in 0..10 {
            r.attempt(ip("127.0.0.1")).expect("loopback is not limited");
            r.attempt(ip("::1")).expect("loopback is not limited");
        }
    }
}
