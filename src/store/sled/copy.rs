//! The sled engine's side of moving between engines ([`crate::store::copy`]): its database
//! dumped as the stream of records.
//!
//! The dump reads every record of both trees in key order (the backup's scan: values whole,
//! one record at a time, so memory stays bounded) and turns each into a stream record, or
//! skips it when it is an index or a count derived from the others (the username, item,
//! digest, due and owner indexes, the per-account counts, the import journal of a finished
//! import). A key of any other prefix is a fact this version does not know how to carry:
//! [`CopyError::Unrepresentable`], so that nothing is dropped silently. The signing key lives
//! beside the database (the data directory's key file), so the caller adds it.

use super::{keys, records, Store};
use crate::store::copy::{CopyError, Record, Service};

/// Calls `out` with every record of the database in `store` (opened, so under its
/// directory's lock), in key order: accounts before what they own in each tree.
pub(crate) fn dump(store: &Store, out: &mut dyn FnMut(Record) -> Result<(), CopyError>) -> Result<(), CopyError> {
    let mut failed = None;
    let writer = &store.sled()?.writer;
    // between two write cycles: one consistent state (the source is stopped anyway)
    writer.between_cycles(|trees| {
        for (tree, service) in [(0, Service::Inbox), (1, Service::Scheduler)] {
            let lookup = writer.tree(tree);
            for entry in trees.records(tree) {
                let (key, value) = entry?;
                let written = match record_of(&lookup, tree, service, &key, &value) {
                    Ok(Some(record)) => out(record),
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Err(e) = written {
                    failed = Some(e);
                    return Ok(());
                }
            }
        }
        Ok(())
    })?;
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn malformed(kind: &'static str, key: &[u8]) -> CopyError {
    CopyError::Unrepresentable {
        kind,
        what: format!("a malformed key {}", hex::encode(key)),
    }
}

/// The stream record of the stored `key` and `value` of `tree`, `None` for indexes and
/// counts derived from other records.
fn record_of(
    lookup: &super::writer::Tree,
    tree: usize,
    service: Service,
    key: &[u8],
    value: &[u8],
) -> Result<Option<Record>, CopyError> {
    let Some(prefix) = key.first() else {
        return Err(malformed("an unknown record", key));
    };
    let account_at_1 = || keys::uuid_at(key, 1).ok_or_else(|| malformed("a record", key));
    let record = match (tree, prefix) {
        (_, b'a') => {
            let account = records::account::decode(key, value)?;
            let customer = lookup.get(keys::customer(account.id))?;
            Record::Account {
                service,
                account,
                customer: customer.map(|c| records::raw::to_customer(&c)),
            }
        }
        // the payment customer id: carried with its account (above); one without is a fact
        // the stream has no place for
        (_, b'u') => {
            if lookup.contains_key(keys::account(account_at_1()?))? {
                return Ok(None);
            }
            return Err(CopyError::Unrepresentable {
                kind: "a payment customer id",
                what: format!("of an account that does not exist (key {})", hex::encode(key)),
            });
        }
        // indexes and counts, derived from the records above
        (_, b'n' | b'c') | (0, b'd' | b'h') | (1, b'S' | b'X' | b'q' | b'G' | b'o') => return Ok(None),
        // the journal of an import: settled at open, so only a finished one's leftovers
        (_, b'j' | b'J') => {
            return Err(CopyError::Unrepresentable {
                kind: "an account import's journal",
                what: "the data directory holds an interrupted import: start the server once and stop it \
                       (it settles the import), then copy"
                    .into(),
            })
        }
        (0, b'i') => {
            let created = keys::created_of(key).ok_or_else(|| malformed("an inbox item", key))?;
            Record::InboxItem {
                account: account_at_1()?,
                item: records::item::decode(key, value, created)?,
            }
        }
        (0, b'k') => Record::AccessKey {
            service,
            account: account_at_1()?,
            key: records::access_key::decode(key, value)?,
        },
        (0, b'p') => Record::Idempotency {
            account: account_at_1()?,
            key: String::from_utf8(key.get(17..).unwrap_or_default().to_vec())
                .map_err(|_| malformed("an idempotency key", key))?,
            item: records::raw::to_uuid("idempotency key", key, value)?,
        },
        (1, b's') => {
            let (item, due) = records::scheduled::decode(key, value)?;
            Record::Scheduled { item, due }
        }
        // sled does not record which occurrence made a triggered copy
        (1, b'x') => Record::Triggered {
            item: records::triggered::decode(key, value)?,
            occurrence: None,
        },
        (1, b'g') => Record::Trigger(records::trigger::decode(key, value)?),
        (1, b'z') => Record::Settings {
            account: account_at_1()?,
            setting: records::settings::decode(key, value)?,
        },
        (1, b'r') => {
            let t = records::targets::decode(key, value)?;
            Record::Targets {
                item: keys::targets_item(key).ok_or_else(|| malformed("delivery targets", key))?,
                owner: t.owner,
                email: key.get(1) == Some(&b'e'),
                triggers: t.triggers,
            }
        }
        (1, b'v') => Record::Delivery(records::delivery::decode(key, value)?),
        (1, b'V' | b'T' | b'N' | b'M') => Record::Email(records::email::decode(key, value)?),
        (1, b'E') => Record::PaymentEvent {
            id: event_id(key)?,
            failed: None,
        },
        (1, b'F') => Record::PaymentEvent {
            id: event_id(key)?,
            failed: Some(value.to_vec()),
        },
        _ => {
            return Err(CopyError::Unrepresentable {
                kind: "a record of an unknown kind",
                what: format!("tree {tree}, key {}", hex::encode(key)),
            })
        }
    };
    Ok(Some(record))
}

fn event_id(key: &[u8]) -> Result<String, CopyError> {
    String::from_utf8(key.get(1..).unwrap_or_default().to_vec()).map_err(|_| malformed("a payment event", key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::account::{Account, PasswordHash};
    use crate::domain::wire::Timestamp;
    use crate::store::copy::{Kind, Tally};
    use crate::store::writer::Batch;
    use uuid::Uuid;

    fn account(id: Uuid) -> Account {
        Account {
            id,
            username: "carol".into(),
            password_hash: PasswordHash::Pbkdf2("hash".into()),
            created: Timestamp::from_unix(1_700_000_000, 0),
            last_login: None,
            epoch: 2,
        }
    }

    fn dumped(store: &Store) -> Result<Vec<Record>, CopyError> {
        let mut out = Vec::new();
        dump(store, &mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Accounts come with their customer id, idempotency keys with their key text; indexes
    /// and counts are not records of the stream; a record of a kind the dump does not know
    /// is refused, not dropped.
    #[test]
    fn a_sled_database_dumps_its_facts_and_refuses_what_it_cannot_carry() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = Store::open(dir.path()).expect("open");
        let owner = Uuid::from_bytes([0x11; 16]);
        let item = Uuid::from_bytes([0x22; 16]);
        let mut batch = Batch::default();
        batch.insert(keys::account(owner), records::account::encode(&account(owner)));
        batch.insert(keys::username("carol"), records::raw::uuid(owner));
        batch.insert(keys::customer(owner), records::raw::customer("cus_1"));
        batch.insert(keys::idempotency(owner, "idem-1"), records::raw::uuid(item));
        let _ = store.sled().unwrap().writer.tree(0).apply_batch(batch);
        store.flush().expect("flush");

        let records = dumped(&store).expect("dump");
        let mut tally = Tally::default();
        records.iter().for_each(|r| tally.add(r));
        assert_eq!(tally.count(Kind::InboxAccount), 1);
        assert_eq!(tally.count(Kind::Idempotency), 1);
        assert_eq!(tally.total(), 2, "{records:?}");
        assert!(records.iter().any(|r| matches!(r,
            Record::Account { account, customer: Some(c), .. } if account.epoch == 2 && c == "cus_1")));
        assert!(records.iter().any(|r| matches!(r,
            Record::Idempotency { key, item: i, .. } if key == "idem-1" && *i == item)));

        let _ = store.sled().unwrap().writer.tree(1).insert(b"Zunknown", b"x".to_vec());
        store.flush().expect("flush");
        match dumped(&store) {
            Err(CopyError::Unrepresentable { what, .. }) => assert!(what.contains("tree 1"), "{what}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    /// The source must be stopped: a directory a server holds is refused by its lock, and
    /// one without a database is not made.
    #[test]
    fn a_running_or_missing_source_is_refused() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let running = Store::open(dir.path()).expect("open");
        let mut ignore = |_: Record| Ok(());
        match crate::store::copy::dump_sled(dir.path(), &mut ignore) {
            Err(CopyError::Store(crate::store::StoreError::Locked(_))) => {}
            other => panic!("expected the lock's refusal, got {other:?}"),
        }
        drop(running);
        crate::store::copy::dump_sled(dir.path(), &mut ignore).expect("a stopped, empty source");
        let missing = dir.path().join("nothing");
        assert!(matches!(
            crate::store::copy::dump_sled(&missing, &mut ignore),
            Err(CopyError::Invalid(_))
        ));
        assert!(!missing.exists(), "nothing made");
    }
}
