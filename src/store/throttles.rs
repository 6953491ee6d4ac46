//! Sliding-window counters (issue 21 point 3): failed logins per (username, address) pair
//! and per address, registrations per network, verification e-mails per trigger, per
//! destination address and per account. The policies (what is counted under which key, how
//! many in which window, what a refusal answers) live with their services
//! (src/auth/ratelimit.rs, src/scheduler/resend_limit.rs); the counts live here, behind
//! [`Throttles`], so that every process of one database counts together: N processes must
//! not be N times looser. With sled one process owns the database (the data-directory
//! lock), so its counts are kept in that process's memory ([`MemoryThrottles`]); a shared
//! engine keeps them in the database.
//!
//! Keys are 16 bytes whatever the client sent (a digest of a username and an address, an
//! id), so a stored count never holds client-sized data.

use super::Result;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Throttle {
    /// Failed logins of one username from one address.
    LoginPair,
    /// Failed logins from one address, whatever the username.
    LoginAddress,
    /// Registrations from one address (IPv6: its /64).
    Registration,
    /// Resends of one trigger's verification e-mail.
    Resend,
    /// Verification e-mails to one destination address.
    VerificationsTo,
    /// Verification e-mails one account had sent.
    VerificationsOf,
}

impl Throttle {
    pub const ALL: [Throttle; 6] = [
        Throttle::LoginPair,
        Throttle::LoginAddress,
        Throttle::Registration,
        Throttle::Resend,
        Throttle::VerificationsTo,
        Throttle::VerificationsOf,
    ];

    /// Its number in a database (stable: stored).
    pub fn code(self) -> i16 {
        match self {
            Throttle::LoginPair => 1,
            Throttle::LoginAddress => 2,
            Throttle::Registration => 3,
            Throttle::Resend => 4,
            Throttle::VerificationsTo => 5,
            Throttle::VerificationsOf => 6,
        }
    }

    /// The most keys [`MemoryThrottles`] keeps for it: at the maximum the keys idle the
    /// longest make room (a stranger who fills the table loses its own oldest counts first).
    fn capacity(self) -> usize {
        match self {
            Throttle::LoginPair => 32_768,
            Throttle::LoginAddress | Throttle::Registration => 4_096,
            Throttle::Resend | Throttle::VerificationsTo | Throttle::VerificationsOf => 100_000,
        }
    }
}

/// One count to take: at most `most` attempts under (`throttle`, `key`) within `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count {
    pub throttle: Throttle,
    pub key: [u8; 16],
    pub most: u32,
    pub window: Duration,
}

/// Attempts [`Throttles::take`] counted, to give back with [`Throttles::give_back`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Stands for this one attempt under each of its keys.
    pub attempt: u64,
    pub counted: Vec<(Throttle, [u8; 16])>,
}

/// The answer of [`Throttles::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// Counted under every key.
    Counted(Taken),
    /// Nothing counted: a key of `throttle` has had its attempts; it may try again `after`
    /// this long (at least a millisecond, at most its window). With several keys full, the
    /// one with the longest wait.
    Wait { throttle: Throttle, after: Duration },
}

/// The counts, shared by every process of one database.
#[async_trait::async_trait]
pub trait Throttles: Send + Sync {
    /// Counts one attempt under each of `counts`, all or none: none when one of them has
    /// had its `most` attempts within its window (then the longest wait among them).
    async fn take(&self, counts: &[Count]) -> Result<Turn>;

    /// Takes back what `take` counted (a right password, an e-mail that was not sent).
    async fn give_back(&self, taken: &Taken) -> Result<()>;
}

/// The counts of one key: (milliseconds since the table was made, attempt), oldest first.
type Stamps = Vec<(u64, u64)>;

#[derive(Default)]
struct Table {
    /// The window of the last count taken (for pruning when the table is full).
    span_ms: u64,
    keys: HashMap<[u8; 16], Stamps>,
}

impl Table {
    /// Milliseconds until `key` may have another attempt, or `None`.
    fn wait(&mut self, key: &[u8; 16], most: usize, span_ms: u64, now: u64) -> Option<u64> {
        let stamps = self.keys.get_mut(key)?;
        stamps.retain(|(t, _)| now.saturating_sub(*t) < span_ms);
        if stamps.is_empty() {
            self.keys.remove(key);
            return None;
        }
        if stamps.len() < most {
            return None;
        }
        // the attempt that must leave the window for the count to drop below `most`
        let (oldest, _) = stamps[stamps.len() - most];
        Some((oldest + span_ms).saturating_sub(now).max(1))
    }

    fn add(&mut self, key: [u8; 16], stamp: (u64, u64), most: usize, capacity: usize) {
        if !self.keys.contains_key(&key) && self.keys.len() >= capacity {
            self.make_room(stamp.0, capacity);
        }
        let stamps = self.keys.entry(key).or_default();
        stamps.push(stamp);
        if stamps.len() > most {
            stamps.remove(0);
        }
    }

    fn remove(&mut self, key: &[u8; 16], attempt: u64) {
        if let Some(stamps) = self.keys.get_mut(key) {
            stamps.retain(|(_, a)| *a != attempt);
            if stamps.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    /// Drops what left the window; if still full, the quarter of the keys idle the longest.
    fn make_room(&mut self, now: u64, capacity: usize) {
        let span = self.span_ms;
        self.keys.retain(|_, stamps| {
            stamps.retain(|(t, _)| now.saturating_sub(*t) < span);
            !stamps.is_empty()
        });
        if self.keys.len() < capacity {
            return;
        }
        let mut last: Vec<(u64, [u8; 16])> = self
            .keys
            .iter()
            .map(|(k, s)| (s.last().map_or(0, |(t, _)| *t), *k))
            .collect();
        last.sort_unstable();
        for (_, k) in last.into_iter().take(capacity.div_ceil(4)) {
            self.keys.remove(&k);
        }
    }
}

/// The counts of a database that one process owns, in that process's memory: bounded per
/// throttle ([`Throttle::capacity`]), empty after a restart.
pub struct MemoryThrottles {
    epoch: Instant,
    next: AtomicU64,
    tables: Mutex<HashMap<Throttle, Table>>,
    /// For tests: a clock moved by hand (milliseconds since `epoch`).
    manual: Option<AtomicU64>,
    capacity: Option<usize>,
}

impl Default for MemoryThrottles {
    fn default() -> Self {
        MemoryThrottles {
            epoch: Instant::now(),
            next: AtomicU64::new(1),
            tables: Mutex::default(),
            manual: None,
            capacity: None,
        }
    }
}

impl MemoryThrottles {
    /// Counts on a clock that only [`MemoryThrottles::advance`] moves, with at most
    /// `capacity` keys per throttle (tests of the windows and of the bound).
    pub fn manual(capacity: Option<usize>) -> MemoryThrottles {
        MemoryThrottles {
            manual: Some(AtomicU64::new(0)),
            capacity,
            ..MemoryThrottles::default()
        }
    }

    /// Moves the manual clock on.
    pub fn advance(&self, by: Duration) {
        if let Some(clock) = &self.manual {
            clock.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
        }
    }

    fn now(&self) -> u64 {
        match &self.manual {
            Some(clock) => clock.load(Ordering::SeqCst),
            None => self.epoch.elapsed().as_millis() as u64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Throttle, Table>> {
        super::lock(&self.tables)
    }

    /// The keys kept for `throttle`.
    pub fn keys(&self, throttle: Throttle) -> usize {
        self.lock().get(&throttle).map_or(0, |t| t.keys.len())
    }

    fn take_now(&self, counts: &[Count]) -> Turn {
        let now = self.now();
        let mut tables = self.lock();
        let mut longest: Option<(u64, Throttle)> = None;
        for c in counts {
            let span = (c.window.as_millis() as u64).max(1);
            let table = tables.entry(c.throttle).or_default();
            table.span_ms = span;
            if let Some(wait) = table.wait(&c.key, c.most.max(1) as usize, span, now) {
                if longest.is_none_or(|(w, _)| wait > w) {
                    longest = Some((wait, c.throttle));
                }
            }
        }
        if let Some((wait, throttle)) = longest {
            return Turn::Wait {
                throttle,
                after: Duration::from_millis(wait),
            };
        }
        let attempt = self.next.fetch_add(1, Ordering::Relaxed);
        for c in counts {
            let capacity = self.capacity.unwrap_or(c.throttle.capacity()).max(1);
            let table = tables.entry(c.throttle).or_default();
            table.add(c.key, (now, attempt), c.most.max(1) as usize, capacity);
        }
        Turn::Counted(Taken {
            attempt,
            counted: counts.iter().map(|c| (c.throttle, c.key)).collect(),
        })
    }
}

#[async_trait::async_trait]
impl Throttles for MemoryThrottles {
    async fn take(&self, counts: &[Count]) -> Result<Turn> {
        Ok(self.take_now(counts))
    }

    async fn give_back(&self, taken: &Taken) -> Result<()> {
        let mut tables = self.lock();
        for (throttle, key) in &taken.counted {
            if let Some(table) = tables.get_mut(throttle) {
                table.remove(key, taken.attempt);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(throttle: Throttle, key: u8, most: u32, secs: u64) -> Count {
        Count {
            throttle,
            key: [key; 16],
            most,
            window: Duration::from_secs(secs),
        }
    }

    fn taken(turn: Turn) -> Taken {
        match turn {
            Turn::Counted(t) => t,
            Turn::Wait { throttle, after } => panic!("refused by {throttle:?} for {after:?}"),
        }
    }

    fn wait(turn: Turn) -> Duration {
        match turn {
            Turn::Wait { after, .. } => after,
            Turn::Counted(_) => panic!("counted"),
        }
    }

    #[tokio::test]
    async fn attempts_leave_the_window_and_the_wait_is_until_the_oldest_leaves() {
        let t = MemoryThrottles::manual(None);
        let c = [count(Throttle::Resend, 1, 2, 1)];
        taken(t.take(&c).await.unwrap());
        t.advance(Duration::from_millis(400));
        taken(t.take(&c).await.unwrap());
        t.advance(Duration::from_millis(100));
        assert_eq!(wait(t.take(&c).await.unwrap()), Duration::from_millis(500));
        t.advance(Duration::from_millis(499));
        assert_eq!(wait(t.take(&c).await.unwrap()), Duration::from_millis(1));
        t.advance(Duration::from_millis(1));
        taken(t.take(&c).await.unwrap());
        assert_eq!(t.keys(Throttle::Resend), 1);
        t.advance(Duration::from_secs(2));
        // the other keys are not affected, and an expired key is dropped when looked at
        taken(t.take(&[count(Throttle::Resend, 2, 2, 1)]).await.unwrap());
        taken(t.take(&c).await.unwrap());
    }

    #[tokio::test]
    async fn several_counts_are_taken_all_or_none_and_given_back_together() {
        let t = MemoryThrottles::manual(None);
        let pair = count(Throttle::LoginPair, 1, 10, 600);
        let addr = count(Throttle::LoginAddress, 9, 3, 600);
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(taken(t.take(&[pair, addr]).await.unwrap()));
        }
        // the address is full: nothing more is counted for the pair either
        assert!(matches!(
            t.take(&[pair, addr]).await.unwrap(),
            Turn::Wait {
                throttle: Throttle::LoginAddress,
                ..
            }
        ));
        assert!(matches!(t.take(&[addr]).await.unwrap(), Turn::Wait { .. }));
        let other = count(Throttle::LoginAddress, 8, 100, 600);
        for _ in 0..7 {
            taken(t.take(&[pair, other]).await.unwrap());
        }
        assert!(
            matches!(
                t.take(&[pair, other]).await.unwrap(),
                Turn::Wait {
                    throttle: Throttle::LoginPair,
                    ..
                }
            ),
            "the pair had its ten, of which the refused attempts are none"
        );
        t.give_back(&held.pop().unwrap()).await.unwrap();
        taken(t.take(&[pair, addr]).await.unwrap());
    }

    #[tokio::test]
    async fn the_keys_kept_are_bounded_and_the_newest_stay() {
        let t = MemoryThrottles::manual(Some(64));
        for i in 0..1000u32 {
            let mut key = [0u8; 16];
            key[..4].copy_from_slice(&i.to_be_bytes());
            t.advance(Duration::from_millis(1));
            taken(
                t.take(&[Count {
                    throttle: Throttle::LoginPair,
                    key,
                    most: 2,
                    window: Duration::from_secs(600),
                }])
                .await
                .unwrap(),
            );
            assert!(t.keys(Throttle::LoginPair) <= 64);
        }
        let mut newest = [0u8; 16];
        newest[..4].copy_from_slice(&999u32.to_be_bytes());
        let c = [Count {
            throttle: Throttle::LoginPair,
            key: newest,
            most: 2,
            window: Duration::from_secs(600),
        }];
        taken(t.take(&c).await.unwrap());
        assert!(
            matches!(t.take(&c).await.unwrap(), Turn::Wait { .. }),
            "the newest key's count was kept"
        );
    }

    #[test]
    fn codes_are_distinct() {
        let codes: std::collections::BTreeSet<i16> = Throttle::ALL.iter().map(|t| t.code()).collect();
        assert_eq!(codes.len(), Throttle::ALL.len());
    }
}
