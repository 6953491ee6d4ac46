//! A whole database as one file, written while the server runs ([`Store::backup_to`]) and
//! brought back into a stopped data directory ([`restore`]).
//!
//! The format (version 2; docs/backup.md) is independent of the engine: the logical records
//! of every tree, with values whole (never sled's chunks or manifests), so that a restore
//! into a later engine reads it too.
//!
//! ```text
//! "PIGEONHOLE-BACKUP\n"              18 bytes of magic
//! version                            u32, big-endian (2; version 1 had no format field)
//! database format                    u32, big-endian (see [`super::format`]; 1 in version 1)
//! entries, each a kind byte:
//!   1 record: tree name (u8 length + UTF-8), key (u32 length + bytes), value (u32 + bytes)
//!   2 file:   name (u8 length + UTF-8), contents (u32 length + bytes)
//!   3 ids:    u64, larger than every sequence number the database handed out
//!   0 end:    u64, the number of records
//! SHA-256 of every byte before it    32 bytes
//! ```
//!
//! Consistency: the records are read from sled while the writer is held between two cycles
//! ([`super::writer::Writer::between_cycles`]), so sled holds exactly the batches applied up
//! to one of them, each whole: every write acknowledged before the backup began is in it
//! (acknowledged means applied and flushed), and of the later ones a prefix in queue order.

use super::records;
use super::writer::Batch;
use super::{BackupSummary, Result, Store, StoreError};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

const MAGIC: &[u8; 18] = b"PIGEONHOLE-BACKUP\n";
const VERSION: u32 = 2;
const RECORD: u8 = 1;
const FILE: u8 = 2;
const IDS: u8 = 3;
const END: u8 = 0;
/// The trees a backup may name, in the order of the writer's trees.
const TREES: [&str; 2] = ["inbox", "scheduler"];
/// A record's value or key is at most this long (the store's values are far smaller; this
/// bounds what a damaged length can make a restore allocate).
const MAX_FIELD: u32 = 64 * 1024 * 1024;
/// Bytes of records a backup keeps in memory while it holds the writer (beyond them, it
/// hashes and writes while holding it).
const HELD_BUFFER: usize = 16 * 1024 * 1024;

/// A writer that hashes and counts what goes through it.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn put_name(w: &mut impl Write, name: &str) -> std::io::Result<()> {
    let len = u8::try_from(name.len()).map_err(|_| std::io::Error::other("name too long"))?;
    w.write_all(&[len])?;
    w.write_all(name.as_bytes())
}

fn put_bytes(w: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|l| *l <= MAX_FIELD)
        .ok_or_else(|| std::io::Error::other("value too long for a backup"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(bytes)
}

impl Store {
    /// [`super::Administration::backup_to`] of a store whose records are of database
    /// format `format`.
    pub(in crate::store) fn backup_of_format(
        &self,
        out: impl Write,
        files: &[(&str, &[u8])],
        format: u32,
    ) -> Result<BackupSummary> {
        backup_of_format(&self.sled()?.writer, out, files, format)
    }

    /// [`super::Administration::backup_to`] (the sled tests' shorthand).
    #[cfg(test)]
    pub(in crate::store) fn backup_to(&self, out: impl Write, files: &[(&str, &[u8])]) -> Result<BackupSummary> {
        backup_of_format(&self.sled()?.writer, out, files, super::format::CURRENT)
    }
}

/// A consistent copy of the whole database, held between two write cycles of `writer`.
pub(in crate::store) fn backup_of_format(
    writer: &super::writer::Writer,
    out: impl Write,
    files: &[(&str, &[u8])],
    format: u32,
) -> Result<BackupSummary> {
    let mut w = Hashing {
        inner: BufWriter::with_capacity(256 * 1024, out),
        hash: Sha256::new(),
        bytes: 0,
    };
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_be_bytes())?;
    w.write_all(&format.to_be_bytes())?;
    for (name, contents) in files {
        w.write_all(&[FILE])?;
        put_name(&mut w, name)?;
        put_bytes(&mut w, contents)?;
    }
    // While the writer is held, records go to memory (up to HELD_BUFFER bytes): hashing
    // them and handing them to the kernel waits until writes go on again.
    let mut w = BufWriter::with_capacity(HELD_BUFFER, w);
    let started = std::time::Instant::now();
    let (ids, records) = writer.between_cycles(|trees| {
        let ids = trees.id_floor()?;
        let mut records = 0u64;
        for (i, name) in TREES.iter().enumerate() {
            for kv in trees.records(i) {
                let (k, v) = kv?;
                w.write_all(&[RECORD])?;
                put_name(&mut w, name)?;
                put_bytes(&mut w, &k)?;
                put_bytes(&mut w, &v)?;
                records += 1;
            }
        }
        Ok((ids, records))
    })?;
    let paused = started.elapsed();
    let mut w = w.into_inner().map_err(|e| StoreError::Io(e.into_error()))?;
    w.write_all(&[IDS])?;
    w.write_all(&ids.to_be_bytes())?;
    w.write_all(&[END])?;
    w.write_all(&records.to_be_bytes())?;
    let digest = w.hash.clone().finalize();
    let mut inner = w.inner;
    inner.write_all(&digest)?;
    inner.flush()?;
    Ok(BackupSummary {
        records,
        files: files.iter().map(|(n, _)| n.to_string()).collect(),
        bytes: w.bytes + digest.len() as u64,
        paused,
    })
}

/// One entry of a backup file.
enum Entry {
    Record { tree: usize, key: Vec<u8>, value: Vec<u8> },
    File { name: String, contents: Vec<u8> },
    Ids(u64),
    End(u64),
}

/// Reads the entries of a backup file, hashing what it reads.
struct Reader<R> {
    inner: R,
    hash: Sha256,
    /// Bytes of the file, and bytes read so far (the trailer is the last 32).
    len: u64,
    read: u64,
}

fn damaged(why: impl std::fmt::Display) -> StoreError {
    StoreError::Codec(format!("the backup file is damaged or not a backup: {why}"))
}

impl<R: Read> Reader<R> {
    fn take(&mut self, n: usize) -> Result<Vec<u8>> {
        if self.read + n as u64 + 32 > self.len {
            return Err(damaged("it ends in the middle of an entry"));
        }
        let mut buf = vec![0; n];
        self.inner.read_exact(&mut buf)?;
        self.hash.update(&buf);
        self.read += n as u64;
        Ok(buf)
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64> {
        let b = self.take(8)?;
        let mut a = [0; 8];
        a.copy_from_slice(&b);
        Ok(u64::from_be_bytes(a))
    }

    fn name(&mut self) -> Result<String> {
        let len = self.u8()? as usize;
        String::from_utf8(self.take(len)?).map_err(|_| damaged("a name is not UTF-8"))
    }

    fn bytes(&mut self) -> Result<Vec<u8>> {
        let len = self.u32()?;
        if len > MAX_FIELD {
            return Err(damaged("a length is out of range"));
        }
        self.take(len as usize)
    }

    /// The header; answers the database format of the records.
    fn header(&mut self) -> Result<u32> {
        if self.len < (MAGIC.len() + 4 + 32) as u64 || self.take(MAGIC.len())? != MAGIC {
            return Err(damaged("it does not start as a Pigeonhole backup"));
        }
        match self.u32()? {
            1 => Ok(super::format::PREDECESSOR),
            VERSION => self.u32(),
            version => Err(StoreError::Codec(format!(
                "the backup has format version {version}; this Pigeonhole reads versions 1 to {VERSION}"
            ))),
        }
    }

    fn entry(&mut self) -> Result<Entry> {
        match self.u8()? {
            RECORD => {
                let name = self.name()?;
                let tree = TREES
                    .iter()
                    .position(|t| *t == name)
                    .ok_or_else(|| damaged(format!("unknown tree {name:?}")))?;
                Ok(Entry::Record {
                    tree,
                    key: self.bytes()?,
                    value: self.bytes()?,
                })
            }
            FILE => Ok(Entry::File {
                name: self.name()?,
                contents: self.bytes()?,
            }),
            IDS => Ok(Entry::Ids(self.u64()?)),
            END => Ok(Entry::End(self.u64()?)),
            other => Err(damaged(format!("unknown entry kind {other}"))),
        }
    }

    /// After the end entry: the file must end with the SHA-256 of everything before.
    fn trailer(mut self) -> Result<()> {
        if self.len - self.read != 32 {
            return Err(damaged("there are bytes after its end"));
        }
        let mut stored = [0u8; 32];
        self.inner.read_exact(&mut stored)?;
        let mut extra = [0u8; 1];
        if self.inner.read(&mut extra)? != 0 {
            return Err(damaged("the file grew while it was read"));
        }
        if self.hash.finalize()[..] != stored[..] {
            return Err(damaged(
                "its SHA-256 checksum does not match (the file was changed or truncated)",
            ));
        }
        Ok(())
    }
}

fn open_reader(src: &Path) -> Result<Reader<BufReader<File>>> {
    let file = File::open(src)?;
    let len = file.metadata()?.len();
    Ok(Reader {
        inner: BufReader::with_capacity(256 * 1024, file),
        hash: Sha256::new(),
        len,
        read: 0,
    })
}

/// What reading a whole backup found.
struct Contents {
    records: u64,
    ids: u64,
    /// The database format of its records.
    format: u32,
}

/// Reads the whole backup at `src`, checking its structure and checksum, and calls `each`
/// with every entry before the end (and the backup's database format); the checksum is
/// known to match only once this answers.
fn read_backup(src: &Path, mut each: impl FnMut(Entry, u32) -> Result<()>) -> Result<Contents> {
    let mut r = open_reader(src)?;
    let format = r.header()?;
    let mut records = 0u64;
    let mut ids = 0u64;
    loop {
        match r.entry()? {
            Entry::End(n) => {
                if n != records {
                    return Err(damaged(format!("it says {n} records but holds {records}")));
                }
                break;
            }
            Entry::Ids(n) => ids = ids.max(n),
            e @ Entry::Record { .. } => {
                records += 1;
                each(e, format)?;
            }
            e => each(e, format)?,
        }
    }
    r.trailer()?;
    Ok(Contents { records, ids, format })
}

/// Checks the backup at `src` without touching anything else: its structure and checksum,
/// its database format (not newer than this version's), and every record, decoded as its
/// tree and key prefix say ([`records::check`]). A record that does not decode is an
/// [`StoreError::Undecodable`] naming its kind and key (reported once the checksum is
/// known to match: a damaged file is reported as damaged).
pub fn verify(src: &Path, allowed_files: &[&str]) -> Result<BackupSummary> {
    let mut files = Vec::new();
    let mut undecodable = None;
    let read = read_backup(src, |e, format| {
        if format > super::format::CURRENT {
            return Err(StoreError::Codec(format!(
                "the backup holds a database of format {format}, written by a newer version of Pigeonhole; this \
                 version reads formats up to {}",
                super::format::CURRENT
            )));
        }
        match e {
            Entry::File { name, .. } => {
                if !allowed_files.contains(&name.as_str()) {
                    return Err(damaged(format!("unexpected file {name:?}")));
                }
                files.push(name);
            }
            Entry::Record { tree, key, value } if undecodable.is_none() => {
                if let Err(e) = records::check(tree, &key, &value, format) {
                    undecodable = Some(e);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if let Some(e) = undecodable {
        return Err(e);
    }
    let records = read.records;
    Ok(BackupSummary {
        records,
        files,
        bytes: std::fs::metadata(src)?.len(),
        paused: std::time::Duration::ZERO,
    })
}

/// Brings the backup at `src` back into the data directory `dir`, which no server may be
/// using (its lock is held throughout). The backup is verified completely before anything
/// is written; the database is then built under `db.restoring` and renamed to `db` only when
/// it is complete and on disk, so an interrupted restore leaves the directory as it was. An
/// existing database is refused unless `replace`; then it is kept as
/// `db.replaced-<unix time>`. The files of the backup (only names in `allowed_files`) are
/// written atomically next to it.
pub fn restore(src: &Path, dir: &Path, replace: bool, allowed_files: &[&str]) -> Result<BackupSummary> {
    let summary = verify(src, allowed_files)?;
    let lock = super::lock_dir(dir)?;
    let live = dir.join("db");
    if live.exists() && !replace {
        return Err(StoreError::Io(std::io::Error::other(format!(
            "{} already holds a database; restore into an empty data directory, or give --force to \
             replace it (the current one is kept next to it as db.replaced-<time>)",
            dir.display()
        ))));
    }
    let building = dir.join("db.restoring");
    if building.exists() {
        // left by an interrupted restore: never used by a server
        std::fs::remove_dir_all(&building)?;
    }
    let files = match build(src, &building) {
        Ok(files) => files,
        Err(e) => {
            // nothing was swapped in: the directory is as it was
            let _ = std::fs::remove_dir_all(&building);
            return Err(e);
        }
    };
    // the new database is complete and on disk: swap it in
    if live.exists() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        std::fs::rename(&live, dir.join(format!("db.replaced-{secs}")))?;
    }
    std::fs::rename(&building, &live)?;
    for (name, contents) in &files {
        crate::files::write(&dir.join(name), crate::files::Access::Private, contents)?;
    }
    File::open(dir)?.sync_all()?;
    drop(lock);
    Ok(summary)
}

/// Builds the database of the backup `src` in the new directory `building`, on disk when
/// this answers; answers the backup's files. The checksum is checked again as it is read
/// (the file could have changed since it was verified).
fn build(src: &Path, building: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    {
        let engine = super::Engine::open(building, true)?;
        let mut batches: Vec<Batch> = TREES.iter().map(|_| Batch::default()).collect();
        let mut pending = 0usize;
        let mut bytes = 0usize;
        let read = read_backup(src, |e, _| {
            match e {
                Entry::Record { tree, key, value } => {
                    bytes += key.len() + value.len();
                    batches[tree].insert(key, value);
                    pending += 1;
                }
                Entry::File { name, contents } => files.push((name, contents)),
                Entry::Ids(_) | Entry::End(_) => {}
            }
            // bounded memory: hand over to the writer every few MiB
            if bytes > 4 * 1024 * 1024 || pending > 10_000 {
                for (i, b) in batches.iter_mut().enumerate() {
                    let _ = engine.writer.tree(i).apply_batch(std::mem::take(b));
                }
                engine.writer.flush_now()?;
                pending = 0;
                bytes = 0;
            }
            Ok(())
        })?;
        for (i, b) in batches.into_iter().enumerate() {
            let _ = engine.writer.tree(i).apply_batch(b);
        }
        engine.writer.raise_ids(read.ids)?;
        engine.writer.flush_now()?;
        // the format of the records, in the new database directory: swapped in with it
        super::format::record(building, read.format)?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::inbox::models::{InboxItem, ItemType};
    use crate::domain::wire::Timestamp;
    use uuid::Uuid;

    fn item(n: u128, data: Vec<u8>) -> InboxItem {
        InboxItem {
            id: Uuid::from_u128(n + 1),
            kind: ItemType::Text,
            data,
            created: Timestamp::from_unix(1_700_000_000 + n as i64, 0),
        }
    }

    fn add(store: &Store, account: Uuid, items: impl IntoIterator<Item = InboxItem>) {
        for i in items {
            let _ = super::super::ready(store.inbox.add_item(account, &i, None, None)).expect("add");
        }
        store.flush().expect("flush");
    }

    #[test]
    fn a_backup_restores_the_same_records_and_later_ids_stay_larger() {
        let dir = tempfile::tempdir().unwrap();
        let account = Uuid::from_u128(7);
        let big = vec![0xAB; 3 * super::super::chunks::CHUNK + 5]; // stored in chunks
        let mut backup = Vec::new();
        let (ids_before, items) = {
            let store = Store::open(&dir.path().join("a")).unwrap();
            add(&store, account, [item(1, big.clone()), item(2, b"small".to_vec())]);
            let summary = store.backup_to(&mut backup, &[("signing.key", b"key bytes")]).unwrap();
            assert_eq!(summary.bytes, backup.len() as u64);
            assert!(summary.records >= 4, "items, id index, count: {summary:?}");
            (
                super::super::ready(store.inbox.accounts.next_key_seq()).unwrap(),
                super::super::ready(store.inbox.items(account)).unwrap(),
            )
        };
        let src = dir.path().join("b.backup");
        std::fs::write(&src, &backup).unwrap();
        let target = dir.path().join("restored");
        let summary = restore(&src, &target, false, &["signing.key"]).unwrap();
        assert_eq!(summary.files, vec!["signing.key".to_string()]);
        assert_eq!(std::fs::read(target.join("signing.key")).unwrap(), b"key bytes");
        let store = Store::open(&target).unwrap();
        assert_eq!(super::super::ready(store.inbox.items(account)).unwrap(), items);
        assert_eq!(super::super::ready(store.inbox.items(account)).unwrap()[0].data, big);
        assert_eq!(super::super::ready(store.inbox.count(account)).unwrap(), 2);
        assert!(super::super::ready(store.inbox.accounts.next_key_seq()).unwrap() > ids_before);
        drop(store);
        // a file not in the allowed list is refused before anything is written
        let other = dir.path().join("other");
        let err = restore(&src, &other, false, &[]).unwrap_err();
        assert!(err.to_string().contains("unexpected file"), "{err}");
        assert!(!other.join("db").exists());
    }

    #[test]
    fn every_damaged_byte_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a")).unwrap();
        add(&store, Uuid::from_u128(7), (0..3).map(|n| item(n, vec![n as u8; 10])));
        let mut backup = Vec::new();
        store.backup_to(&mut backup, &[]).unwrap();
        let src = dir.path().join("b");
        for i in (0..backup.len()).step_by(7) {
            let mut bad = backup.clone();
            bad[i] ^= 1;
            std::fs::write(&src, &bad).unwrap();
            assert!(verify(&src, &[]).is_err(), "byte {i} changed unnoticed");
        }
        std::fs::write(&src, &backup).unwrap();
        assert!(verify(&src, &[]).is_ok());
    }

    /// `backup` (version 2) with its header changed by `header` and the checksum recomputed.
    fn rewritten(backup: &[u8], header: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
        let mut b = backup[..backup.len() - 32].to_vec();
        header(&mut b);
        let digest = Sha256::digest(&b);
        b.extend_from_slice(&digest);
        b
    }

    /// A backup written before backups carried the database format (version 1) holds
    /// records of format 1: restored as such, and migrated at the next open. A backup of a
    /// newer format is refused before anything is written.
    #[test]
    fn a_version_1_backup_restores_as_format_1_and_a_newer_format_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let account = Uuid::from_u128(7);
        let mut backup = Vec::new();
        {
            let store = Store::open(&dir.path().join("a")).unwrap();
            add(&store, account, [item(1, b"one".to_vec())]);
            store.backup_to(&mut backup, &[]).unwrap();
        }
        assert_eq!(&backup[18..26], &[0, 0, 0, 2, 0, 0, 0, 2], "version 2, format 2");
        let v1 = rewritten(&backup, |b| {
            b.splice(18..26, [0, 0, 0, 1]);
        });
        let src = dir.path().join("v1.backup");
        std::fs::write(&src, &v1).unwrap();
        let target = dir.path().join("restored");
        restore(&src, &target, false, &[]).unwrap();
        assert_eq!(super::super::format::check(&target).unwrap(), Some(1));
        let store = Store::open(&target).unwrap();
        assert_eq!(super::super::ready(store.inbox.count(account)).unwrap(), 1);
        assert_eq!(super::super::format::check(&target).unwrap(), Some(2), "migrated");
        drop(store);

        let newer = rewritten(&backup, |b| b[25] = 3);
        std::fs::write(&src, &newer).unwrap();
        let fresh = dir.path().join("fresh");
        let err = restore(&src, &fresh, false, &[]).unwrap_err().to_string();
        assert!(err.contains("format 3") && err.contains("newer"), "{err}");
        assert!(!fresh.join("db").exists());
    }

    /// A record that does not decode (a raised version byte) in a backup whose checksum is
    /// right: refused naming its kind and key, the existing database untouched.
    #[test]
    fn a_backup_with_an_undecodable_record_is_refused_and_nothing_changes() {
        let dir = tempfile::tempdir().unwrap();
        let account = Uuid::from_u128(7);
        let mut backup = Vec::new();
        {
            let store = Store::open(&dir.path().join("a")).unwrap();
            add(&store, account, [item(1, b"one".to_vec())]);
            store.backup_to(&mut backup, &[]).unwrap();
        }
        let src = dir.path().join("b");
        std::fs::write(&src, &backup).unwrap();
        let target = dir.path().join("restored");
        restore(&src, &target, false, &[]).unwrap();
        // the item record: a key of 37 bytes starting with `i`
        let at = backup
            .windows(5)
            .position(|w| w == [0, 0, 0, 37, b'i'])
            .expect("an item key");
        let key_len = u32::from_be_bytes(backup[at..at + 4].try_into().unwrap()) as usize;
        let key = backup[at + 4..at + 4 + key_len].to_vec();
        let value_at = at + 4 + key_len + 4;
        let bad = rewritten(&backup, |b| b[value_at] = 99);
        std::fs::write(&src, &bad).unwrap();
        let err = verify(&src, &[]).unwrap_err();
        assert!(
            matches!(&err, StoreError::Undecodable(u) if u.kind == "inbox item" && u.key == key),
            "{err}"
        );
        let before = std::fs::read_dir(&target).unwrap().count();
        let err = restore(&src, &target, true, &[]).unwrap_err().to_string();
        assert!(
            err.contains("undecodable inbox item record") && err.contains(&hex::encode(&key)),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), before, "nothing replaced");
        let store = Store::open(&target).unwrap();
        assert_eq!(super::super::ready(store.inbox.items(account)).unwrap()[0].data, b"one");
    }

    /// How long a backup holds writes back: run with `cargo test --lib -- --ignored
    /// backup_pause --nocapture` (docs/backup.md has the numbers).
    #[test]
    #[ignore]
    fn backup_pause_of_100k_items() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let account = Uuid::from_u128(7);
        for chunk in 0..100u128 {
            add(
                &store,
                account,
                (0..1000).map(|n| {
                    item(
                        chunk * 1000 + n,
                        format!("item number {n} of chunk {chunk}").into_bytes(),
                    )
                }),
            );
        }
        let out = std::fs::File::create(dir.path().join("backup")).unwrap();
        let summary = store.backup_to(&out, &[]).unwrap();
        println!(
            "100k items: {} records, {} bytes, writes held back for {:?}",
            summary.records, summary.bytes, summary.paused
        );
    }
}
