//! Failed-login rate limits (inbox.md §1.7): per username and per client address, counted in
//! a sliding window; a login arriving while a limit is full is refused with the number of
//! seconds until the oldest counted failure leaves the window.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Addr(IpAddr),
}

pub struct LoginLimiter {
    window: Duration,
    per_user: usize,
    per_addr: usize,
    failures: Mutex<HashMap<Key, VecDeque<Instant>>>,
}

impl Default for LoginLimiter {
    fn default() -> Self {
        LoginLimiter::new(Duration::from_secs(600), 10, 100)
    }
}

impl LoginLimiter {
    pub fn new(window: Duration, per_user: usize, per_addr: usize) -> LoginLimiter {
        LoginLimiter {
            window,
            per_user,
            per_addr,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds)` when the username or the address has used up its failures.
    pub fn check(&self, username: &str, addr: Option<IpAddr>) -> Result<(), u64> {
        self.check_at(username, addr, Instant::now())
    }

    fn check_at(&self, username: &str, addr: Option<IpAddr>, now: Instant) -> Result<(), u64> {
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait: Option<Duration> = None;
        let mut keys = vec![(Key::User(username.to_owned()), self.per_user)];
        if let Some(a) = addr {
            keys.push((Key::Addr(a), self.per_addr));
        }
        for (k, limit) in keys {
            if let Some(q) = map.get_mut(&k) {
                prune(q, now, self.window);
                if q.len() >= limit {
                    // the oldest failure that must leave for the count to drop below limit
                    let oldest = q[q.len() - limit];
                    let left = (oldest + self.window).saturating_duration_since(now);
                    wait = Some(wait.map_or(left, |w| w.max(left)));
                } else if q.is_empty() {
                    map.remove(&k);
                }
            }
        }
        match wait {
            Some(w) => {
                let secs = w.as_secs() + u64::from(w.subsec_nanos() > 0);
                Err(secs.clamp(1, self.window.as_secs().max(1)))
            }
            None => Ok(()),
        }
    }

    pub fn record_failure(&self, username: &str, addr: Option<IpAddr>) {
        let now = Instant::now();
        let mut map = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, q| {
                prune(q, now, self.window);
                !q.is_empty()
            });
        }
        map.entry(Key::User(username.to_owned())).or_default().push_back(now);
        if let Some(a) = addr {
            map.entry(Key::Addr(a)).or_default().push_back(now);
        }
    }
}

fn prune(q: &mut VecDeque<Instant>, now: Instant, window: Duration) {
    while q.front().is_some_and(|t| now.duration_since(*t) >= window) {
        q.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenth_failure_blocks_the_username_only() {
        let l = LoginLimiter::default();
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        for _ in 0..9 {
            l.record_failure("alice", Some(ip));
        }
        assert!(l.check("alice", Some(ip)).is_ok());
        l.record_failure("alice", Some(ip));
        let wait = l.check("alice", Some(ip)).unwrap_err();
        assert!((599..=600).contains(&wait), "{wait}");
        assert!(l.check("bob", Some(ip)).is_ok());
    }

    #[test]
    fn address_limit_and_window() {
        let l = LoginLimiter::new(Duration::from_millis(50), 10, 3);
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        for i in 0..3 {
            l.record_failure(&format!("user{i}"), Some(ip));
        }
        assert_eq!(l.check("someone", Some(ip)), Err(1));
        assert!(l.check("someone", None).is_ok());
        std::thread::sleep(Duration::from_millis(60));
        assert!(l.check("someone", Some(ip)).is_ok());
    }
}
