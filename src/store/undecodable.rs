//! The records met at run time that could not be decoded (written by a newer version, or
//! damaged): each is logged once with its kind and key, and counted for the health check.
//!
//! Memory is bounded: at most [`CAPACITY`] distinct records are remembered (kind and key,
//! keys are at most a few hundred bytes). Past that, a further record is logged once more
//! with a note that the set is full, then not at all, and the count says "at least".

use super::{lock, Undecodable};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Distinct undecodable records remembered (and logged one by one).
pub const CAPACITY: usize = 1024;

/// The undecodable records of one open database.
#[derive(Default)]
pub struct UndecodableRecords {
    seen: Mutex<HashSet<(&'static str, Vec<u8>)>>,
    /// A record was met after the set was full (the count is a lower bound).
    overflowed: AtomicBool,
}

impl UndecodableRecords {
    /// Notes that `record` could not be decoded; logs it the first time it is met. Answers
    /// whether it was new.
    pub fn note(&self, record: &Undecodable) -> bool {
        let mut seen = lock(&self.seen);
        let entry = (record.kind, record.key.clone());
        if seen.contains(&entry) {
            return false;
        }
        if seen.len() >= CAPACITY {
            if !self.overflowed.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    "undecodable {} record (key {}): {}; more than {CAPACITY} undecodable records met, \
                     further ones are not logged",
                    record.kind,
                    hex::encode(&record.key),
                    record.reason
                );
            }
            return false;
        }
        seen.insert(entry);
        drop(seen);
        tracing::error!(
            "undecodable {} record (key {}): {}; requests that need it answer 500, workers set it aside \
             (docs/operations.md, \"Database format\")",
            record.kind,
            hex::encode(&record.key),
            record.reason
        );
        true
    }

    /// How many distinct undecodable records were met, and whether there were more than
    /// could be remembered (then the count is a lower bound).
    pub fn count(&self) -> (usize, bool) {
        (lock(&self.seen).len(), self.overflowed.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u32) -> Undecodable {
        Undecodable {
            kind: "account",
            key: n.to_be_bytes().to_vec(),
            reason: "unknown version 9".into(),
        }
    }

    #[test]
    fn each_record_is_counted_once_and_memory_is_bounded() {
        let r = UndecodableRecords::default();
        assert!(r.note(&record(1)));
        assert!(!r.note(&record(1)), "the same record again");
        let other_kind = Undecodable {
            kind: "inbox item",
            ..record(1)
        };
        assert!(r.note(&other_kind));
        assert_eq!(r.count(), (2, false));
        for n in 2..(CAPACITY as u32 + 10) {
            r.note(&record(n));
        }
        assert_eq!(r.count(), (CAPACITY, true));
        assert!(!r.note(&record(1)));
    }
}
