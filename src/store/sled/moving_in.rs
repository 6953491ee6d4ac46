//! Accounts moved in from an Intray or Tickler server (`pigeonhole import-intray` /
//! `import-tickler`), with the uuids and creation times they had there: streamed
//! ([`move_in_inbox`], [`super::scheduler::moving_in::move_in_scheduler`]) in bounded
//! batches through the import journal ([`super::imports`]), all of it or nothing, into a
//! [`Target`] that is closed and opened again every [`REOPEN_BATCHES`] batches so that
//! sled's memory stays bounded.
//!
//! An account whose uuid and username are here already (an earlier run of the same file) is
//! skipped as a whole; a username or uuid that belongs to another account here is a conflict,
//! and then nothing at all is written.

use super::accounts::AccountStore;
use super::imports::Batches;
use super::in_key_order::InKeyOrder;
use super::inbox::InboxStore;
use super::writer::Tree;
#[cfg(test)]
use super::Written;
use super::{keys, records, Arrival, Result, Store, StoreError};
use crate::domain::account::{AccessKey, Account};
use crate::domain::inbox::models::InboxItem;
use crate::domain::scheduler::models::{TimeZoneSetting, Trigger};
use crate::store::WaitDurable;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use super::scheduler::moving_in::{move_in_scheduler, SchedulerItem};

/// One inbox account as it arrives (the tests' way in, [`InboxStore::move_in`]).
#[cfg(test)]
#[derive(Clone, Debug)]
pub struct InboxArrival {
    pub account: Account,
    /// In the order they list in.
    pub access_keys: Vec<AccessKey>,
    pub items: Vec<InboxItem>,
}

/// One scheduler account moving in by [`super::scheduler::moving_in::move_in_scheduler`]:
/// its items come after.
#[derive(Clone, Debug)]
pub struct SchedulerMoving {
    pub account: Account,
    /// `None`: the default (UTC).
    pub settings: Option<TimeZoneSetting>,
    /// In the order they list in.
    pub triggers: Vec<Trigger>,
}

/// After how many batches on disk a move-in closes the database and opens it again: sled
/// 0.34 keeps the pages it wrote or read until it is closed (sled issue #1093); writing in
/// key order ([`write_in_key_order`]) touches few pages per batch, and reopening bounds
/// what a run holds beyond what the opening of the database needs (docs/moving-in.md has
/// the figures; 16 measured no lower than 32, and slower). (The unit tests reopen every 2
/// batches, so that small imports cross it.)
pub const REOPEN_BATCHES: usize = if cfg!(test) { 2 } else { 32 };

/// The data directory a move-in writes into: its store, under the directory's lock for the
/// whole run (so no server can open it between two openings), opened again every
/// [`REOPEN_BATCHES`] batches without settling the run's own journal.
pub struct Target {
    dir: PathBuf,
    lock: File,
    store: Option<Arc<Store>>,
    /// Run between closing the database and opening it again ([`Target::after_closing`]).
    after_closing: Option<fn()>,
}

impl Target {
    /// Opens the sled store of `dir` under its lock; what a stopped run left is settled
    /// (undone or kept) as by any opening.
    pub fn open(dir: &Path) -> Result<Target> {
        let lock = crate::store::lock_dir(dir)?;
        let store = super::open(dir, lock.try_clone()?)?;
        Ok(Target {
            dir: dir.to_path_buf(),
            lock,
            store: Some(store),
            after_closing: None,
        })
    }

    /// Runs `f` each time the database is closed to be opened again: the caller hands
    /// the memory the closed opening freed back to the system there (glibc keeps freed
    /// heap otherwise, and the two openings would add up).
    pub fn after_closing(mut self, f: fn()) -> Target {
        self.after_closing = Some(f);
        self
    }

    /// The store of the current opening.
    pub fn store(&self) -> Result<&Arc<Store>> {
        self.store
            .as_ref()
            .ok_or_else(|| StoreError::Engine("the database could not be opened again during the move-in".into()))
    }

    /// Closes the database and opens it again, without settling (the caller's import is
    /// running); answers the tree `index` of the new opening.
    fn reopen(&mut self, index: usize) -> Result<Tree> {
        self.store = None;
        if let Some(f) = self.after_closing {
            f();
        }
        let store = super::open_during_move_in(&self.dir, self.lock.try_clone()?)?;
        let tree = store.sled()?.writer.tree(index);
        self.store = Some(store);
        Ok(tree)
    }

    /// A new import into tree `index` (0 inbox, 1 scheduler), reopening the database every
    /// [`REOPEN_BATCHES`], and where the writes it puts off wait to be made in key order.
    pub(in crate::store) fn batches<'a>(
        &'a mut self,
        index: usize,
        wait: WaitDurable<'a>,
    ) -> Result<(Batches<'a>, InKeyOrder)> {
        let later = InKeyOrder::new(&self.dir)?;
        let batches = Batches::new(&self.store()?.sled()?.writer.tree(index), wait)?;
        Ok((
            batches.reopening(REOPEN_BATCHES, Box::new(move || self.reopen(index))),
            later,
        ))
    }
}

/// Makes the writes `later` holds, in key order, after the batch being filled (on disk
/// first, so that `taken` reads it): each key is new (the import creates it) and must be
/// in `later` once and not here (`taken` says whether the tree has it, or another key that
/// excludes it: one uuid names one record); either is an error naming the record's uuid,
/// the key's last 16 bytes. Only keys a run creates are put off, and reading them in key
/// order keeps the pages of the lookups as few as those of the writes.
pub(in crate::store) fn write_in_key_order(
    batches: &mut Batches<'_>,
    later: &mut InKeyOrder,
    taken: impl Fn(&Tree, &[u8]) -> Result<bool>,
) -> Result<()> {
    let mut last: Option<Vec<u8>> = None;
    later.each(|key, value| {
        // the batch before each prefix (the first included) goes to disk first: a uuid
        // under two prefixes is found once the first prefix's batches are on disk
        if last.as_ref().and_then(|l| l.first()) != key.first() {
            batches.write()?;
        }
        if last.as_deref() == Some(key) || taken(batches.tree()?, key)? {
            let id = key
                .len()
                .checked_sub(16)
                .and_then(|at| uuid::Uuid::from_slice(&key[at..]).ok())
                .unwrap_or_default();
            return Err(StoreError::Codec(format!(
                "the uuid {id} of an item or trigger is in the file twice"
            )));
        }
        batches.insert_new(key, value.to_vec());
        batches.write_if_full()?;
        last = Some(key.to_vec());
        Ok(())
    })
}

/// Runs `write` on `batches` and commits them; when that fails, what was written is undone
/// (now, or by the next opening when that fails too).
pub(in crate::store) fn all_or_nothing<T, E: From<StoreError>>(
    mut batches: Batches<'_>,
    write: impl FnOnce(&mut Batches<'_>) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let result = write(&mut batches).and_then(|t| {
        batches.commit()?;
        Ok(t)
    });
    if result.is_err() {
        let done = batches.done;
        if let Err(undo) = batches.roll_back() {
            tracing::error!(
                "moving in failed after {done} batches, and undoing them failed too ({undo}): the next start \
                 undoes them"
            );
        }
    }
    result
}

/// What happened to each account of a run, in the order given; the receipt is of the one
/// batch that carries every moved account (none when there is a conflict).
#[cfg(test)]
pub type MoveIn = Written<Vec<Arrival>>;

/// Marks as a conflict each account that is to be moved (`Arrival::Moved`) but one of whose
/// records' uuids (`ids`) is taken here already (`taken`) or twice in the file: items and
/// triggers are found by uuid alone, so one uuid must not name two of them.
#[cfg(test)]
fn check_ids(
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
    /// (the tests' way in: moving in streams, [`move_in_inbox`]).
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

/// An inbox account moving in by [`move_in_inbox`]: its items come after.
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
}

/// Writes `accounts` (each checked by [`InboxStore::move_in_arrivals`] to be new here) and
/// the items `items` hands on (owner, item; each owner one of `accounts`) into `target` in
/// bounded batches, each on disk before the next, all or nothing through the import journal
/// ([`super::imports`]): when `items` or a write fails, what was written is undone (now, or
/// at the next open). An item uuid that is here already (one the run wrote itself: the file
/// has it twice) is an error. Answers how many items each account got.
pub fn move_in_inbox<E: From<StoreError>>(
    target: &mut Target,
    accounts: &[InboxMoving],
    items: impl FnOnce(&mut dyn FnMut(uuid::Uuid, InboxItem) -> Result<()>) -> std::result::Result<(), E>,
    wait: WaitDurable<'_>,
) -> std::result::Result<Vec<u64>, E> {
    let (batches, mut later) = target.batches(0, wait)?;
    let index: std::collections::HashMap<uuid::Uuid, usize> =
        accounts.iter().enumerate().map(|(i, a)| (a.account.id, i)).collect();
    all_or_nothing(batches, |batches| {
        let mut counts = vec![0u64; accounts.len()];
        for arriving in accounts {
            AccountStore::put_arriving_into(batches, &arriving.account, &arriving.access_keys)?;
        }
        // the items in the file's order (mostly their places' order); their uuid index,
        // in random order so, put off and written sorted
        items(&mut |owner, item| {
            let i = *index
                .get(&owner)
                .ok_or_else(|| StoreError::Codec(format!("an item of {owner}, an account not moving in")))?;
            let place = keys::item_place(owner, item.created, batches.tree()?.next_id()?);
            later.put(&keys::item_id(item.id), &place)?;
            batches.insert_new(keys::item(&place), records::item::encode(&item));
            counts[i] += 1;
            batches.write_if_full()?;
            Ok(())
        })?;
        write_in_key_order(batches, &mut later, |tree, key| tree.contains_key(key))?;
        for (arriving, n) in accounts.iter().zip(&counts) {
            batches.insert(keys::count(arriving.account.id), records::raw::count(*n))?;
        }
        Ok(counts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::account::{KeySecret, PasswordHash};
    use crate::domain::inbox::models::ItemType;
    use crate::domain::permissions::Permissions;
    use crate::domain::wire::Timestamp;
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

    /// Moves in `alice` with `n` items through a [`Target`] (reopened every
    /// [`REOPEN_BATCHES`] batches); `fail_at`: the items stop with an error at that one.
    fn move_in_items(dir: &std::path::Path, n: u32, fail_at: Option<u32>) -> std::result::Result<Vec<u64>, StoreError> {
        move_in_items_with(dir, n, fail_at, |i| i)
    }

    /// [`move_in_items`] where item `i` has the uuid of item `id_of(i)`.
    fn move_in_items_with(
        dir: &std::path::Path,
        n: u32,
        fail_at: Option<u32>,
        id_of: impl Fn(u32) -> u32,
    ) -> std::result::Result<Vec<u64>, StoreError> {
        let alice = arriving(1, "alice", 0);
        let moving = [InboxMoving {
            account: alice.account.clone(),
            access_keys: alice.access_keys.clone(),
        }];
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let wait = |w: Written<()>| runtime.block_on(w.durable());
        let mut target = Target::open(dir).expect("open");
        move_in_inbox(
            &mut target,
            &moving,
            |sink| {
                for i in 0..n {
                    if Some(i) == fail_at {
                        return Err(StoreError::Codec("a bad row".into()));
                    }
                    let mut id = [0x40; 16];
                    id[..4].copy_from_slice(&id_of(i).to_be_bytes());
                    let item = InboxItem {
                        id: Uuid::from_bytes(id),
                        kind: ItemType::Text,
                        data: format!("item {i}").into_bytes(),
                        created: Timestamp::from_unix(1_600_000_000 + i as i64, 0),
                    };
                    sink(alice.account.id, item)?;
                }
                Ok(())
            },
            &wait,
        )
    }

    /// What the inbox tree holds, but the engine's own records (as in imports.rs's tests).
    fn records(dir: &std::path::Path) -> usize {
        let store = Store::open(dir).expect("open");
        let tree = store.sled().unwrap().writer.tree(0);
        tree.scan_prefix([])
            .map(|kv| kv.expect("read"))
            .filter(|(k, _)| k.first() != Some(&0xff))
            .count()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_move_in_reopening_its_database_keeps_what_it_wrote_before_and_no_journal() {
        let dir = tempfile::tempdir().expect("tempdir");
        // 5,000 items are 10,000 writes: 5 batches, the database opened again twice
        let n = 5_000;
        let path = dir.path().to_path_buf();
        let counts = tokio::task::spawn_blocking(move || move_in_items(&path, n, None))
            .await
            .unwrap()
            .expect("moved in");
        assert_eq!(counts, [n as u64]);
        let store = Store::open(dir.path()).expect("open");
        let alice = store.inbox.accounts.by_username("alice").await.unwrap().expect("alice");
        // an opening that settled the running import would have undone the first batches
        assert_eq!(store.inbox.items(alice.id).await.unwrap().len(), n as usize);
        assert_eq!(store.inbox.count(alice.id).await.unwrap(), n as u64);
        let tree = store.sled().unwrap().writer.tree(0);
        assert!(tree.scan_prefix(b"j").next().is_none() && tree.scan_prefix(b"J").next().is_none());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_item_uuid_twice_in_the_file_is_found_in_key_order_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before = records(dir.path());
        let path = dir.path().to_path_buf();
        // the 4,000th item has the uuid of the 10th: batches and an opening apart, and
        // found only when the uuid index is written, sorted, after every item
        let failed = tokio::task::spawn_blocking(move || {
            move_in_items_with(&path, 5_000, None, |i| if i == 4_000 { 10 } else { i })
        })
        .await
        .unwrap();
        let mut id = [0x40; 16];
        id[..4].copy_from_slice(&10u32.to_be_bytes());
        match failed {
            Err(StoreError::Codec(why)) => assert!(
                why.contains(&format!(
                    "the uuid {} of an item or trigger is in the file twice",
                    Uuid::from_bytes(id)
                )),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(records(dir.path()), before);
        assert!(
            !dir.path().join("move-in-sorting.sqlite3").exists(),
            "the scratch file is gone"
        );
        let store = Store::open(dir.path()).expect("open");
        assert!(store.inbox.accounts.by_username("alice").await.unwrap().is_none());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_move_in_that_fails_after_reopening_its_database_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before = records(dir.path());
        let path = dir.path().to_path_buf();
        // the fifth batch never comes: four are on disk, over two openings
        let failed = tokio::task::spawn_blocking(move || move_in_items(&path, 5_000, Some(4_500)))
            .await
            .unwrap();
        assert!(matches!(failed, Err(StoreError::Codec(_))), "{failed:?}");
        assert_eq!(records(dir.path()), before);
        let store = Store::open(dir.path()).expect("open");
        assert!(store.inbox.accounts.by_username("alice").await.unwrap().is_none());
    }
}
