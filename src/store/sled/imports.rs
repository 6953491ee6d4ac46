//! The writes of an account import: in batches of bounded size, and all or nothing
//! (docs/backup.md).
//!
//! **Bounded.** A batch is queued only once the one before it is on disk: the writer merges
//! everything queued during a cycle into one sled batch, and sled holds every page a batch
//! replaces until the whole batch is applied, so one batch of a 16 MiB import (250,000
//! writes) took the server over a gigabyte. Batches of [`IMPORT_BATCH_WRITES`] writes keep
//! that to a few MiB. Every rule of the import is checked before the first batch is queued;
//! the caller holds the account's lock throughout, so that no other write of the account
//! comes between two batches.
//!
//! **All or nothing.** Each import has a number and an undo journal in its tree: the first
//! time the import writes a key, the key's value before the import (its *pre-image*, or
//! "absent") is stored under `j` + number + key **in the same batch** as the write, so
//! whatever batches of an import reached the disk, their pre-images did too. Keys the import
//! creates (new items and their indexes: absent before it, written once) cost no reads and
//! one journal entry per batch: `j` + number + `0x00` + the batch's number → the list of the
//! keys it created (`0x00` starts no record key). The last batch
//! carries the mark `J` + number that says the import is complete; then the journal is
//! dropped, in bounded batches, and the mark last. An import that fails before its mark is
//! undone at once from its journal ([`Batches::roll_back`]); when that cannot be done (the
//! store takes no more writes after a failed write, until a restart) or the process dies
//! mid-import, [`settle`] does it when the database is next opened, before anything reads
//! it: journals without a mark are rolled back, those with one are dropped. A backup taken
//! during an import copies the journal with the batches, so its restore is settled the same
//! way. Between two batches of a running import, reads see the part already written.

use super::keys;
use super::writer::{Batch, Bytes, Tree};
use super::{own_id, Result, StoreError, WaitDurable, Written};

/// The most writes of one batch of an import (journal entries included).
pub const IMPORT_BATCH_WRITES: usize = 2048;

/// A pre-image in the journal: `0` for a key that was absent, `1` + the value otherwise.
fn pre_image(value: Option<&[u8]>) -> Vec<u8> {
    match value {
        None => vec![0],
        Some(v) => {
            let mut out = Vec::with_capacity(1 + v.len());
            out.push(1);
            out.extend_from_slice(v);
            out
        }
    }
}

/// The value a journal entry gives back (`None`: the key was absent), or why it is not one.
pub(in crate::store) fn decode_pre_image(stored: &[u8]) -> std::result::Result<Option<&[u8]>, &'static str> {
    match stored.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, value)) => Ok(Some(value)),
        _ => Err("neither 0 (absent) nor 1 followed by the value"),
    }
}

/// Opens the database again and answers the import's tree in it (see [`Batches::reopening`]).
pub(crate) type Reopen<'a> = dyn FnMut() -> Result<Tree> + 'a;

/// An import's writes, queued a batch at a time, each key's pre-image with it.
pub(crate) struct Batches<'a> {
    /// The tree written (`None` only while the database is being opened again, and after
    /// that failed).
    tree: Option<Tree>,
    wait: WaitDurable<'a>,
    /// Every how many batches the database is closed and opened again, and how.
    reopen: Option<(usize, Box<Reopen<'a>>)>,
    /// This import's number (its journal's).
    import: u64,
    batch: Batch,
    writes: usize,
    /// The keys the batch being filled creates, each as a 4-byte big-endian length and the
    /// key.
    created: Vec<u8>,
    /// Batches that reached the disk.
    pub(crate) done: usize,
    /// Batches (the import's, or of dropping its journal) since the database was opened.
    since_opened: usize,
}

impl<'a> Batches<'a> {
    pub(crate) fn new(tree: &Tree, wait: WaitDurable<'a>) -> Result<Batches<'a>> {
        Ok(Batches {
            tree: Some(tree.clone()),
            wait,
            reopen: None,
            import: tree.next_id()?,
            batch: Batch::default(),
            writes: 0,
            created: Vec::new(),
            done: 0,
            since_opened: 0,
        })
    }

    /// Closes the database and opens it again (by `reopen`, which must not settle this
    /// import: [`settle`] would undo it) after every `every` batches on disk. sled 0.34 keeps
    /// the pages it wrote or read until the database is closed, whatever its cache capacity
    /// (sled issue #1093; docs/moving-in.md has the figures), so a long import reopens it
    /// to stay within a fixed memory budget. The import's number and batch count are here,
    /// not in the database, so they survive that.
    pub(crate) fn reopening(mut self, every: usize, reopen: Box<Reopen<'a>>) -> Batches<'a> {
        self.reopen = Some((every.max(1), reopen));
        self
    }

    /// The tree the import writes (of the database's current opening).
    pub(crate) fn tree(&self) -> Result<&Tree> {
        self.tree
            .as_ref()
            .ok_or_else(|| StoreError::Engine("the database could not be opened again during the import".into()))
    }

    /// Journals `key`'s value before the import the first time the import writes it. (A key
    /// written twice within one batch is journalled twice, with the same pre-image: the
    /// batch is not visible to reads before it is queued.)
    fn journal(&mut self, key: &[u8]) -> Result<()> {
        let entry = keys::journal(self.import, key);
        if self.tree()?.contains_key(&entry)? {
            return Ok(());
        }
        let before = self.tree()?.get(key)?;
        self.batch.insert(entry, pre_image(before.as_deref()));
        self.writes += 1;
        Ok(())
    }

    pub(crate) fn insert(&mut self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Result<()> {
        self.journal(key.as_ref())?;
        self.batch.insert(key, value);
        self.writes += 1;
        Ok(())
    }

    /// Writes a key the import creates: the caller knows it was absent before the import
    /// (a new id, a fresh sequence number in it) and writes it only here, once.
    pub(crate) fn insert_new(&mut self, key: impl AsRef<[u8]>, value: impl Into<Bytes>) {
        let k = key.as_ref();
        self.created.extend_from_slice(&(k.len() as u32).to_be_bytes());
        self.created.extend_from_slice(k);
        self.batch.insert(k, value);
        self.writes += 1;
    }

    pub(crate) fn remove(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.journal(key.as_ref())?;
        self.batch.remove(key);
        self.writes += 1;
        Ok(())
    }

    /// Whether the batch is full (then the caller adds what must land with it, such as the
    /// account's counts, and calls [`Batches::write`]).
    pub(crate) fn full(&self) -> bool {
        self.writes >= IMPORT_BATCH_WRITES
    }

    /// Writes the batch ([`Batches::write`]) when it is full; answers whether it did.
    pub(crate) fn write_if_full(&mut self) -> Result<bool> {
        match self.full() {
            true => self.write().map(|()| true),
            false => Ok(false),
        }
    }

    /// Queues the batch and waits until it is on disk.
    pub(crate) fn write(&mut self) -> Result<()> {
        if self.writes == 0 {
            return Ok(());
        }
        let mut batch = std::mem::take(&mut self.batch);
        if !self.created.is_empty() {
            let list = created_list(self.import, self.done as u64);
            batch.insert(list, std::mem::take(&mut self.created));
        }
        self.writes = 0;
        (self.wait)(Written::new((), self.tree()?.apply_batch(batch)))?;
        self.done += 1;
        self.one_more_batch()
    }

    /// Counts a batch on disk, and when [`Batches::reopening`] says so, closes the database
    /// and opens it again.
    fn one_more_batch(&mut self) -> Result<()> {
        self.since_opened += 1;
        if let Some((every, reopen)) = &mut self.reopen {
            if self.since_opened >= *every {
                // every batch so far is on disk; the tree goes before the database reopens
                self.tree = None;
                self.tree = Some(reopen()?);
                self.since_opened = 0;
            }
        }
        Ok(())
    }

    /// [`each_entry`] over this import's journal, reopening the database as its writes do.
    fn each_own_entry(
        &mut self,
        mut each: impl FnMut(&mut Batch, u64, &[u8], &[u8]) -> Result<usize>,
    ) -> Result<usize> {
        let prefix = journal_prefix(self.import);
        let mut total = 0;
        loop {
            let n = entry_batch(self.tree()?, &prefix, self.wait, &mut each)?;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            self.one_more_batch()?;
        }
    }

    /// The import is complete: the batch being filled goes to disk with the mark that says
    /// so, then the journal is dropped (when that fails, the next start drops it).
    pub(crate) fn commit(&mut self) -> Result<()> {
        if self.done == 0 && self.writes == 0 {
            return Ok(());
        }
        self.batch.insert(keys::journal_done(self.import), Vec::new());
        self.writes += 1;
        self.write()?;
        let dropped = self.each_own_entry(|_, _, _, _| Ok(0)).and_then(|_| {
            let wait = self.wait;
            wait(Written::new((), self.tree()?.remove(keys::journal_done(self.import))))
        });
        if let Err(e) = dropped {
            tracing::warn!("the journal of a complete import could not be dropped ({e}); the next start drops it");
        }
        Ok(())
    }

    /// The import failed before its end: what it stored is undone now; `Err` when that
    /// failed too (the next start undoes it, see [`settle`]).
    pub(crate) fn roll_back(mut self) -> Result<()> {
        self.batch = Batch::default();
        self.created.clear();
        self.writes = 0;
        if self.done == 0 {
            return Ok(());
        }
        let undone = self.each_own_entry(|batch, _, key, before| restore(batch, key, before))?;
        tracing::info!("an import that failed was undone ({undone} journal entries)");
        Ok(())
    }
}

/// Where an imported entry goes in its account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The account has it already (under its id, or under its [`own_id`]): kept as it is.
    Kept,
    /// New: stored under this id (its own, or its [`own_id`] when another account has it).
    New(uuid::Uuid),
}

/// Where the entry `id` of an import into `account` goes: `place_of` finds where an id is
/// stored (the place, whose first 16 bytes are its account).
pub(crate) fn arrival(
    account: uuid::Uuid,
    id: uuid::Uuid,
    place_of: impl Fn(uuid::Uuid) -> Result<Option<Bytes>>,
) -> Result<Arrival> {
    let mut candidate = id;
    // a derived id that is another account's too would need 2^64 tries to find
    for _ in 0..4 {
        match place_of(candidate)? {
            None => return Ok(Arrival::New(candidate)),
            Some(place) if keys::place_of(&place, account) => return Ok(Arrival::Kept),
            Some(_) => candidate = own_id(account, candidate),
        }
    }
    Err(StoreError::Codec(format!("no free id for the imported entry {id}")))
}

/// What a failed import answers: `Err(error)` when nothing of it is stored (it failed
/// before its first batch, or what it stored was undone at once), `Ok(())` when part of it
/// is on disk until the next start undoes it (the store takes no writes meanwhile).
pub(crate) fn failed(batches: Batches<'_>, error: StoreError, account: uuid::Uuid) -> Result<()> {
    let batches_done = batches.done;
    match batches.roll_back() {
        Ok(()) => Err(error),
        Err(undo) => {
            tracing::error!(
                "an import into {account} failed after {batches_done} batches ({error}), and undoing them failed \
                 too ({undo}): the next start undoes them"
            );
            Ok(())
        }
    }
}

/// The journal key of the list of keys that batch `batch` of import `import` created.
fn created_list(import: u64, batch: u64) -> Vec<u8> {
    let mut k = vec![0];
    k.extend_from_slice(&batch.to_be_bytes());
    keys::journal(import, &k)
}

/// The keys of a list of created keys (see [`Batches::insert_new`]), or why it is not one.
pub(in crate::store) fn created_keys(list: &[u8]) -> impl Iterator<Item = std::result::Result<&[u8], &'static str>> {
    let mut rest = list;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            rest = &[];
            return Some(Err("a list of created keys that ends inside a length"));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if tail.len() < len {
            rest = &[];
            return Some(Err("a list of created keys that ends inside a key"));
        }
        let (key, tail) = tail.split_at(len);
        rest = tail;
        Some(Ok(key))
    })
}

/// The prefix of the journal entries of import `import`.
fn journal_prefix(import: u64) -> Vec<u8> {
    keys::journal(import, &[])
}

/// Puts the key of a journal entry back as the entry says it was (`key` starting with
/// `0x00`: removes the keys of a list of created keys); answers how many writes that took.
fn restore(batch: &mut Batch, key: &[u8], before: &[u8]) -> Result<usize> {
    let damaged = |why: &str| {
        StoreError::Codec(format!(
            "the import journal entry of key {} is damaged: {why}",
            hex::encode(key)
        ))
    };
    if key.first() == Some(&0) {
        let mut n = 0;
        for created in created_keys(before) {
            batch.remove(created.map_err(damaged)?);
            n += 1;
        }
        return Ok(n);
    }
    match decode_pre_image(before).map_err(damaged)? {
        None => batch.remove(key),
        Some(value) => batch.insert(key, value),
    }
    Ok(1)
}

/// The most bytes of journal entries one batch of [`each_entry`] reads: the list of the keys
/// an import's batch created is some 50 KB, and reading them all in one batch is what sled
/// keeps in memory (a journal of 2,000 batches is 100 MB).
const JOURNAL_BATCH_BYTES: usize = 4 * 1024 * 1024;

/// Hands every journal entry under `prefix` to `each` (with its import's number, the
/// journalled key and its pre-image; it answers how many writes it added) and removes it,
/// in bounded batches ([`entry_batch`]), each on disk before the next: the entries a batch
/// handles are removed in the same batch, so a crash in between leaves the rest to be
/// handled again. Answers how many entries there were.
fn each_entry(
    tree: &Tree,
    prefix: &[u8],
    wait: WaitDurable<'_>,
    mut each: impl FnMut(&mut Batch, u64, &[u8], &[u8]) -> Result<usize>,
) -> Result<usize> {
    let mut total = 0;
    loop {
        let n = entry_batch(tree, prefix, wait, &mut each)?;
        if n == 0 {
            return Ok(total);
        }
        total += n;
    }
}

/// What [`each_entry`] does with an entry (see there).
type EachEntry<'a> = &'a mut dyn FnMut(&mut Batch, u64, &[u8], &[u8]) -> Result<usize>;

/// One batch of [`each_entry`]: up to [`IMPORT_BATCH_WRITES`] writes or
/// [`JOURNAL_BATCH_BYTES`] read, on disk when it answers; answers how many entries it
/// handled (0: none are left).
fn entry_batch(tree: &Tree, prefix: &[u8], wait: WaitDurable<'_>, each: EachEntry<'_>) -> Result<usize> {
    let mut batch = Batch::default();
    let (mut n, mut writes, mut bytes) = (0, 0, 0);
    for kv in tree.scan_prefix(prefix) {
        let (k, v) = kv?;
        let (import, key) = keys::journal_parts(&k)
            .ok_or_else(|| StoreError::Codec(format!("a malformed import journal key {}", hex::encode(&k))))?;
        writes += each(&mut batch, import, key, &v)? + 1;
        bytes += k.len() + v.len();
        batch.remove(&k);
        n += 1;
        if writes >= IMPORT_BATCH_WRITES || bytes >= JOURNAL_BATCH_BYTES {
            break;
        }
    }
    if n > 0 {
        wait(Written::new((), tree.apply_batch(batch)))?;
    }
    Ok(n)
}

/// What [`settle`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Keys put back as they were before an import that did not complete.
    pub(crate) undone: usize,
    /// Journal entries of complete imports dropped.
    pub(crate) dropped: usize,
}

/// Settles the journals a stopped process left in `tree` (run when the database is opened,
/// before anything reads it): an import without its completion mark is undone, the journal
/// of one with it is dropped, then the marks.
pub(crate) fn settle(tree: &Tree, wait: WaitDurable<'_>) -> Result<Settled> {
    let mut complete = std::collections::BTreeSet::new();
    for kv in tree.scan_prefix(keys::journals_done()) {
        let (k, _) = kv?;
        let number = keys::journal_done_number(&k)
            .ok_or_else(|| StoreError::Codec(format!("a malformed import mark {}", hex::encode(&k))))?;
        complete.insert(number);
    }
    let mut settled = Settled::default();
    each_entry(tree, &keys::journals(), wait, |batch, import, key, before| {
        if complete.contains(&import) {
            settled.dropped += 1;
            Ok(0)
        } else {
            let writes = restore(batch, key, before)?;
            settled.undone += writes;
            Ok(writes)
        }
    })?;
    if !complete.is_empty() {
        let mut batch = Batch::default();
        for number in &complete {
            batch.remove(keys::journal_done(*number));
        }
        wait(Written::new((), tree.apply_batch(batch)))?;
    }
    Ok(settled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    /// Every record of the inbox tree with its value (the journal's included, the engine's
    /// chunks of large values not), as text.
    fn contents(store: &Store) -> Vec<(String, String)> {
        store
            .sled()
            .unwrap()
            .writer
            .tree(0)
            .scan_prefix([])
            .map(|kv| {
                let (k, v) = kv.expect("read");
                (hex::encode(k), hex::encode(v))
            })
            .filter(|(k, _)| !k.starts_with("ff"))
            .collect()
    }

    /// An "import" of `n` new keys `new-0`… that also changes `kept` and removes `gone`,
    /// in batches of [`IMPORT_BATCH_WRITES`]; answers them unsettled (neither committed nor
    /// rolled back) when `finish` is false.
    fn import(store: &Store, n: usize, finish: impl FnOnce(&mut Batches<'_>) -> Result<()>) {
        let tree = store.sled().unwrap().writer.tree(0);
        let wait = |_: Written<()>| store.sled().unwrap().writer.flush_now();
        let mut batches = Batches::new(&tree, &wait).unwrap();
        batches.insert(b"kept", b"after".to_vec()).unwrap();
        batches.remove(b"gone").unwrap();
        for i in 0..n {
            if i % 2 == 0 {
                batches.insert_new(format!("new-{i:06}"), b"x".to_vec());
            } else {
                batches.insert(format!("new-{i:06}"), b"x".to_vec()).unwrap();
            }
            // a key written twice keeps its first pre-image
            batches.insert(b"kept", format!("after {i}").into_bytes()).unwrap();
            if batches.full() {
                batches.write().unwrap();
            }
        }
        finish(&mut batches).unwrap();
    }

    fn before(dir: &std::path::Path) -> (std::sync::Arc<Store>, Vec<(String, String)>) {
        let store = Store::open(dir).unwrap();
        let tree = store.sled().unwrap().writer.tree(0);
        let mut batch = Batch::default();
        batch.insert(b"kept", b"before".to_vec());
        batch.insert(b"gone", b"here".to_vec());
        let _ = tree.apply_batch(batch);
        store.sled().unwrap().writer.flush_now().unwrap();
        let contents = contents(&store);
        (store, contents)
    }

    #[test]
    fn a_complete_import_keeps_every_write_and_no_journal() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = before(dir.path());
        import(&store, 3000, |b| b.commit());
        let after = contents(&store);
        assert_eq!(after.len(), 3001, "new keys and kept, gone removed, no journal");
        assert!(after.contains(&(hex::encode("kept"), hex::encode("after 2999"))));
        assert!(!after.iter().any(|(k, _)| k.starts_with("6a") || k.starts_with("4a")));
    }

    #[test]
    fn an_import_a_stop_interrupted_is_undone_when_the_database_opens() {
        let dir = tempfile::tempdir().unwrap();
        let (store, was) = before(dir.path());
        // several batches on disk, then the process stops
        import(&store, 3000, |b| b.write());
        assert!(contents(&store).len() > 3000);
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(contents(&store), was);
    }

    #[test]
    fn a_complete_import_whose_journal_a_stop_left_keeps_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = before(dir.path());
        // the last batch with the mark is on disk; the journal is not dropped yet
        import(&store, 3000, |b| {
            b.batch.insert(keys::journal_done(b.import), Vec::new());
            b.writes += 1;
            b.write()
        });
        let journalled = contents(&store);
        assert!(journalled.iter().any(|(k, _)| k.starts_with("6a")));
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        let settled = contents(&store);
        let without_journal: Vec<_> = journalled
            .into_iter()
            .filter(|(k, _)| !k.starts_with("6a") && !k.starts_with("4a"))
            .collect();
        assert_eq!(settled, without_journal);
        assert!(settled.contains(&(hex::encode("kept"), hex::encode("after 2999"))));
    }

    #[test]
    fn a_failed_import_is_undone_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (store, was) = before(dir.path());
        let tree = store.sled().unwrap().writer.tree(0);
        let wait = |_: Written<()>| store.sled().unwrap().writer.flush_now();
        let mut batches = Batches::new(&tree, &wait).unwrap();
        for i in 0..3000 {
            batches.insert(format!("new-{i:06}"), b"x".to_vec()).unwrap();
            if batches.full() {
                batches.write().unwrap();
            }
        }
        assert!(batches.done > 0);
        let failed = failed(batches, StoreError::Codec("a bad entry".into()), uuid::Uuid::nil());
        assert!(matches!(failed, Err(StoreError::Codec(_))));
        assert_eq!(contents(&store), was);
    }

    #[test]
    fn pre_images_round_trip_and_damaged_ones_are_refused() {
        assert_eq!(decode_pre_image(&pre_image(None)), Ok(None));
        assert_eq!(decode_pre_image(&pre_image(Some(b"v"))), Ok(Some(&b"v"[..])));
        assert!(decode_pre_image(&[]).is_err());
        assert!(decode_pre_image(&[0, 1]).is_err());
        assert!(decode_pre_image(&[2]).is_err());
        let list = [&[0, 0, 0, 1][..], b"a", &[0, 0, 0, 2], b"bc"].concat();
        let keys: Vec<_> = created_keys(&list).collect();
        assert_eq!(keys, vec![Ok(&b"a"[..]), Ok(&b"bc"[..])]);
        assert!(created_keys(&list[..list.len() - 1]).any(|k| k.is_err()));
        assert!(created_keys(&[0, 0]).any(|k| k.is_err()));
    }
}
