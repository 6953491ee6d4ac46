//! Accounts moved in from an Intray or Tickler server (`pigeonhole import-intray` /
//! `import-tickler`), with the uuids and creation times they had there: a Tickler run in one
//! batch; an Intray run streamed ([`InboxStore::move_in_streamed`]) in bounded batches
//! through the import journal ([`super::imports`]); either way all of it or nothing.
//!
//! An account whose uuid and username are here already (an earlier run of the same file) is
//! skipped as a whole; a username or uuid that belongs to another account here is a conflict,
//! and then nothing at all is written.

use super::imports::Batches;
use super::inbox::InboxStore;
use super::{keys, records, Arrival, Result, StoreError, Written};
use crate::domain::account::{AccessKey, Account};
use crate::domain::inbox::models::InboxItem;
use crate::domain::scheduler::models::{ScheduledItem, TimeZoneSetting, Trigger, TriggeredItem};
use crate::domain::wire::Timestamp;
use crate::store::WaitDurable;

/// One inbox account as it arrives.
#[derive(Clone, Debug)]
pub struct InboxArrival {
    pub account: Account,
    /// In the order they list in.
    pub access_keys: Vec<AccessKey>,
    pub items: Vec<InboxItem>,
}

/// One scheduler account as it arrives.
#[derive(Clone, Debug)]
pub struct SchedulerArrival {
    pub account: Account,
    /// `None`: the default (UTC).
    pub settings: Option<TimeZoneSetting>,
    /// Each with its due instant under `settings`.
    pub scheduled: Vec<(ScheduledItem, Timestamp)>,
    pub triggered: Vec<TriggeredItem>,
    /// In the order they list in.
    pub triggers: Vec<Trigger>,
}

/// What happened to each account of a run, in the order given; the receipt is of the one
/// batch that carries every moved account (none when there is a conflict).
pub type MoveIn = Written<Vec<Arrival>>;

/// Marks as a conflict each account that is to be moved (`Arrival::Moved`) but one of whose
/// records' uuids (`ids`) is taken here already (`taken`) or twice in the file: items and
/// triggers are found by uuid alone, so one uuid must not name two of them.
pub(in crate::store) fn check_ids(
    arrivals: &mut [Arrival],
    ids: impl Iterator<Item = Vec<uuid::Uuid>>,
    taken: impl Fn(uuid::Uuid) -> Result<bool>,
) -> Result<bool> {
    let mut seen = std::collections::HashSet::new();
    for (arrival, ids) in arrivals.iter_mut().zip(ids) {
        if *arrival != Arrival::Moved {
            continue;
        }
        for id in ids {
            if !seen.insert(id) || taken(id)? {
                *arrival = Arrival::Conflict(format!("the uuid {id} of an item or trigger is in use already"));
                break;
            }
        }
    }
    Ok(arrivals.iter().any(|a| matches!(a, Arrival::Conflict(_))))
}

/// The arrivals of `accounts`; `true` when one of them is a conflict.
pub(in crate::store) fn arrivals<'a>(
    accounts: impl Iterator<Item = &'a Account>,
    check: impl Fn(&Account) -> Result<Arrival>,
) -> Result<(Vec<Arrival>, bool)> {
    let mut out = Vec::new();
    let (mut names, mut ids) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    for account in accounts {
        // two accounts of the same file with one name or uuid: the second is a conflict
        let (new_name, new_id) = (names.insert(account.username.clone()), ids.insert(account.id));
        let arrival = if !new_name || !new_id {
            Arrival::Conflict(format!(
                "the file has the username {:?} or the account {} twice",
                account.username, account.id
            ))
        } else {
            check(account)?
        };
        out.push(arrival);
    }
    let conflict = out.iter().any(|a| matches!(a, Arrival::Conflict(_)));
    Ok((out, conflict))
}

impl InboxStore {
    /// Writes the accounts that are new here with their access keys and items, in one batch
    /// (the tests' way in: moving in streams, [`InboxStore::move_in_streamed`]).
    #[cfg(test)]
    pub fn move_in(&self, accounts: &[InboxArrival]) -> Result<MoveIn> {
        let (mut arrivals, conflict) = arrivals(accounts.iter().map(|a| &a.account), |a| self.accounts.arrival(a))?;
        let ids = accounts.iter().map(|a| a.items.iter().map(|i| i.id).collect());
        let taken = |id| self.tree.contains_key(keys::item_id(id));
        if check_ids(&mut arrivals, ids, taken)? || conflict {
            return Ok(Written::unchanged(arrivals));
        }
        let mut batch = super::writer::Batch::default();
        let mut any = false;
        for (arriving, arrival) in accounts.iter().zip(&arrivals) {
            if *arrival != Arrival::Moved {
                continue;
            }
            any = true;
            let id = arriving.account.id;
            self.accounts
                .put_arriving(&mut batch, &arriving.account, &arriving.access_keys);
            for item in &arriving.items {
                self.put_item(&mut batch, id, item)?;
            }
            self.put_count(&mut batch, id, arriving.items.len() as u64);
        }
        if !any {
            return Ok(Written::unchanged(arrivals));
        }
        Ok(Written::new(arrivals, self.tree.apply_batch(batch)))
    }
}

/// An inbox account moving in by [`InboxStore::move_in_streamed`]: its items come after.
#[derive(Clone, Debug)]
pub struct InboxMoving {
    pub account: Account,
    /// In the order they list in.
    pub access_keys: Vec<AccessKey>,
}

impl InboxStore {
    /// What would happen to each of `accounts` (new here, here already, or a conflict of
    /// its username or uuid), without writing anything; `true` when one is a conflict.
    pub fn move_in_arrivals<'a>(&self, accounts: impl Iterator<Item = &'a Account>) -> Result<(Vec<Arrival>, bool)> {
        arrivals(accounts, |a| self.accounts.arrival(a))
    }

    /// Whether an item of this uuid is here (of any account).
    pub fn item_id_taken(&self, id: uuid::Uuid) -> Result<bool> {
        self.tree.contains_key(keys::item_id(id))
    }

    /// Writes `accounts` (each checked by [`InboxStore::move_in_arrivals`] to be new here)
    /// and the items `items` hands on (owner, item; each owner one of `accounts`) in bounded
    /// batches, each on disk before the next, all or nothing through the import journal
    /// ([`super::imports`]): when `items` or a write fails, what was written is undone
    /// (now, or at the next open). An item uuid that is here already (one the run wrote
    /// itself: the file has it twice) is an error. Answers how many items each account got.
    pub fn move_in_streamed<E: From<StoreError>>(
        &self,
        accounts: &[InboxMoving],
        items: impl FnOnce(&mut dyn FnMut(uuid::Uuid, InboxItem) -> Result<()>) -> std::result::Result<(), E>,
        wait: WaitDurable<'_>,
    ) -> std::result::Result<Vec<u64>, E> {
        let mut batches = Batches::new(&self.tree, wait)?;
        let index: std::collections::HashMap<uuid::Uuid, usize> =
            accounts.iter().enumerate().map(|(i, a)| (a.account.id, i)).collect();
        let mut counts = vec![0u64; accounts.len()];
        // the ids of the batch being filled (not readable in the tree before it is written)
        let mut in_batch = std::collections::HashSet::new();
        let result = (|| {
            for arriving in accounts {
                self.accounts
                    .put_arriving_into(&mut batches, &arriving.account, &arriving.access_keys)?;
            }
            items(&mut |owner, item| {
                let i = *index
                    .get(&owner)
                    .ok_or_else(|| StoreError::Codec(format!("an item of {owner}, an account not moving in")))?;
                if !in_batch.insert(item.id) || self.tree.contains_key(keys::item_id(item.id))? {
                    return Err(StoreError::Codec(format!(
                        "the uuid {} of an item is in the file twice",
                        item.id
                    )));
                }
                let place = keys::item_place(owner, item.created, self.tree.next_id()?);
                batches.insert_new(keys::item(&place), records::item::encode(&item));
                batches.insert_new(keys::item_id(item.id), place);
                counts[i] += 1;
                if batches.full() {
                    batches.write()?;
                    in_batch.clear();
                }
                Ok(())
            })?;
            for (arriving, n) in accounts.iter().zip(&counts) {
                batches.insert(keys::count(arriving.account.id), records::raw::count(*n))?;
            }
            batches.commit()?;
            Ok::<(), E>(())
        })();
        match result {
            Ok(()) => Ok(counts),
            Err(e) => {
                let done = batches.done;
                if let Err(undo) = batches.roll_back() {
                    tracing::error!(
                        "moving in failed after {done} batches, and undoing them failed too ({undo}): the next \
                         start undoes them"
                    );
                }
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::account::{KeySecret, PasswordHash};
    use crate::domain::inbox::models::ItemType;
    use crate::domain::permissions::Permissions;
    use crate::store::Store;
    use uuid::Uuid;

    fn arriving(account: u8, name: &str, item: u8) -> InboxArrival {
        let at = Timestamp::from_unix(1_600_000_000, 5);
        InboxArrival {
            account: Account {
                id: Uuid::from_bytes([account; 16]),
                username: name.into(),
                password_hash: PasswordHash::LegacyBcrypt("$2y$04$h".into()),
                created: at,
                last_login: None,
                epoch: 0,
            },
            access_keys: vec![AccessKey {
                id: Uuid::from_bytes([account + 100; 16]),
                name: "k".into(),
                created: at,
                seq: 0,
                permissions: Permissions::default(),
                secret: KeySecret::LegacyBcrypt("$2y$04$k".into()),
            }],
            items: vec![InboxItem {
                id: Uuid::from_bytes([item; 16]),
                kind: ItemType::Text,
                data: b"x".to_vec(),
                created: at,
            }],
        }
    }

    #[tokio::test]
    async fn accounts_move_in_once_and_conflicts_write_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let alice = arriving(1, "alice", 10);
        let moved = store
            .sled()
            .unwrap()
            .inbox
            .move_in(std::slice::from_ref(&alice))
            .unwrap()
            .durable()
            .await
            .unwrap();
        assert_eq!(moved, [Arrival::Moved]);
        let here = store.inbox.accounts.by_username("alice").await.unwrap().expect("alice");
        assert_eq!(
            (here.id, &here.password_hash),
            (alice.account.id, &alice.account.password_hash)
        );
        assert_eq!(store.inbox.items(here.id).await.unwrap().len(), 1);
        assert_eq!(store.inbox.count(here.id).await.unwrap(), 1);
        // an imported key has no digest to be found by, until its first login
        assert_eq!(store.inbox.accounts.legacy_access_keys(here.id).await.unwrap().len(), 1);

        // again: skipped
        let again = store
            .sled()
            .unwrap()
            .inbox
            .move_in(std::slice::from_ref(&alice))
            .unwrap();
        assert!(!again.changed());
        assert_eq!(again.durable().await.unwrap(), [Arrival::AlreadyHere]);

        // a stranger with alice's name, or an item uuid in use: nothing of the run is written
        let bob = arriving(2, "bob", 20);
        for run in [
            vec![bob.clone(), arriving(3, "alice", 30)],
            vec![bob.clone(), arriving(4, "carol", 10)],
            vec![bob.clone(), arriving(2, "bobby", 40)],
        ] {
            let written = store.sled().unwrap().inbox.move_in(&run).unwrap();
            assert!(!written.changed());
            let arrivals = written.durable().await.unwrap();
            assert!(matches!(arrivals[1], Arrival::Conflict(_)), "{arrivals:?}");
            assert!(store.inbox.accounts.by_username("bob").await.unwrap().is_none());
        }
    }

    #[tokio::test]
    async fn a_moved_in_hash_is_replaced_once_without_revoking_tokens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        let alice = arriving(1, "alice", 10);
        let _ = store
            .sled()
            .unwrap()
            .inbox
            .move_in(std::slice::from_ref(&alice))
            .unwrap()
            .durable()
            .await
            .unwrap();
        let accounts = &store.inbox.accounts;
        let old = alice.account.password_hash.clone();
        assert!(accounts
            .upgrade_password(alice.account.id, &old, "$pbkdf2-sha256$new".into())
            .await
            .unwrap()
            .durable()
            .await
            .unwrap());
        let now = accounts.get(alice.account.id).await.unwrap().expect("alice");
        assert_eq!(now.password_hash, PasswordHash::Pbkdf2("$pbkdf2-sha256$new".into()));
        assert_eq!(now.epoch, 0, "tokens stay valid");
        // a second, concurrent upgrade finds the hash changed
        assert!(!accounts
            .upgrade_password(alice.account.id, &old, "$pbkdf2-sha256$other".into())
            .await
            .unwrap()
            .durable()
            .await
            .unwrap());

        let key = &alice.access_keys[0];
        let digest = [7; 32];
        assert!(accounts
            .upgrade_access_key(alice.account.id, key.id, &key.secret, digest)
            .await
            .unwrap()
            .durable()
            .await
            .unwrap());
        let (owner, found) = accounts.access_key_by_digest(&digest).await.unwrap().expect("indexed");
        assert_eq!(
            (owner, found.id, found.secret),
            (alice.account.id, key.id, KeySecret::Digest(digest))
        );
        assert!(accounts.legacy_access_keys(alice.account.id).await.unwrap().is_empty());
    }
}
