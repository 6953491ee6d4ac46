//! The write-ahead journal in front of sled: the file `db/pigeonhole-wal`, one checksummed
//! record per write cycle of the [`super::writer`], synced before the cycle is acknowledged
//! (the writer's module comment has the design and the crash-safety argument).
//!
//! # A preallocated file, emptied by a generation
//!
//! The file is created once at its full size, zeros written and synced (not `fallocate`:
//! its unwritten extents would still need a metadata update at their first write), under
//! a temporary name renamed into place and made durable by syncing the directory, so the
//! journal's name never stands for a file cut short. Records are then written *in place*
//! over what was there, so an `fdatasync` after a record has only data to write: the
//! file's size and its extents do not change, and on ext4 no metadata journal commit is
//! needed (with an append, every `fdatasync` also commits the new size).
//!
//! ```text
//! offset 0    header slot 0: "PHWAL02\n"  generation (u64 LE)  CRC-32 of both (u32 LE)
//! offset 512  header slot 1: the same
//! offset 4096 records, each:
//!   "PHWR"  generation (u64 LE)  number (u64 LE)  payload length (u32 LE)
//!   CRC-32 of generation, number, length and payload (u32 LE)
//! payload: trees (u8), then per tree: name length (u8), name, writes (u32 LE),
//!          then per write: 1 = insert / 0 = removal (u8), key length (u32 LE), key,
//!                          and for an insert: value length (u32 LE), value
//! ```
//!
//! The journal's **generation** is the highest one in a header slot whose checksum holds.
//! Emptying the journal (a checkpoint) writes generation + 1 into slot `(generation + 1)
//! % 2` and syncs it, instead of `ftruncate`: every record already in the file then belongs
//! to an older generation and no longer counts. The slot written is never the current
//! one, and each is in its own disk sector, so a bump torn by a power cut leaves the other
//! slot, the previous generation, whole: the journal reads as it was before the bump
//! (sled already holds its records; replaying them again is harmless).
//!
//! Reading starts at offset 4096 and stops at the first record that is incomplete, fails
//! its checksum, is of another generation than the header's, or does not follow its
//! predecessor's number: zeros (never written), a record left by an older generation, or a
//! torn last record (a power cut during its write; never acknowledged). A record is never
//! written in a generation before that generation's header is synced, so finding, past
//! that point, a record whose checksum holds and that is of a *later* generation than the
//! header's, or of the header's with a later number, means the file was damaged (a record
//! in the middle, or the header slot that named that generation): reading refuses, naming
//! the file and the offset, instead of dropping acknowledged writes silently.
//!
//! A record that does not fit before the file's end is written after a checkpoint, at the
//! start of the records; one larger than the whole file then grows it (the file keeps that
//! size; that one `fdatasync` also commits the size). [`Wal::fits`] and the writer decide.
//!
//! This file names no sled type: records are bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The journal's name in the database directory (moved with it by a restore).
pub(crate) const FILE: &str = "pigeonhole-wal";
/// The name the journal is created under before it is complete.
const NEW_FILE: &str = "pigeonhole-wal.new";

/// First bytes of each header slot (format 2).
const HEADER: &[u8; 8] = b"PHWAL02\n";
/// Bytes of a header slot.
const SLOT: usize = 8 + 8 + 4;
/// Where the two header slots are (each in a sector of its own).
const SLOTS: [usize; 2] = [0, 512];
/// Where the records start.
pub(crate) const RECORDS: usize = 4096;
/// First bytes of every record.
const MAGIC: &[u8; 4] = b"PHWR";
/// Bytes of a record before its payload.
const RECORD_HEAD: usize = 4 + 8 + 8 + 4 + 4;

/// One tree's writes in a record: each key's value, `None` for a removal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TreeWrites {
    pub(crate) tree: Vec<u8>,
    pub(crate) writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// One record: what one write cycle applied to sled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) number: u64,
    pub(crate) trees: Vec<TreeWrites>,
}

/// The bytes of record `number` holding `trees` (name, writes: key and value or `None`),
/// of generation 0: [`Wal::append`] stamps the journal's ([`stamp`]).
pub(crate) fn encode<'a, W>(number: u64, trees: impl IntoIterator<Item = (&'a [u8], W)>) -> Vec<u8>
where
    W: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
{
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&number.to_le_bytes());
    out.extend_from_slice(&[0; 8]); // length and checksum, filled in below
    let count_at = out.len();
    out.push(0);
    let mut count = 0u8;
    for (name, writes) in trees {
        count += 1;
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        let n_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut n = 0u32;
        for (key, value) in writes {
            n += 1;
            out.push(u8::from(value.is_some()));
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            if let Some(v) = value {
                out.extend_from_slice(&(v.len() as u32).to_le_bytes());
                out.extend_from_slice(v);
            }
        }
        out[n_at..n_at + 4].copy_from_slice(&n.to_le_bytes());
    }
    out[count_at] = count;
    let len = (out.len() - RECORD_HEAD) as u32;
    out[20..24].copy_from_slice(&len.to_le_bytes());
    stamp(&mut out, 0);
    out
}

/// Sets the generation of an encoded record (and its checksum).
pub(crate) fn stamp(record: &mut [u8], generation: u64) {
    record[4..12].copy_from_slice(&generation.to_le_bytes());
    let crc = checksum(&record[4..24], &record[RECORD_HEAD..]);
    record[24..28].copy_from_slice(&crc.to_le_bytes());
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize()
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// The bytes of a header slot naming `generation`.
fn slot(generation: u64) -> [u8; SLOT] {
    let mut out = [0; SLOT];
    out[..8].copy_from_slice(HEADER);
    out[8..16].copy_from_slice(&generation.to_le_bytes());
    let crc = crc32fast::hash(&out[..16]);
    out[16..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Where the slot for `generation` is.
fn slot_offset(generation: u64) -> usize {
    SLOTS[(generation % 2) as usize]
}

/// The generation in the header slot at `at`, if the slot is whole and its checksum holds.
fn slot_at(bytes: &[u8], at: usize) -> Option<u64> {
    let s = bytes.get(at..at + SLOT)?;
    (&s[..8] == HEADER && crc32fast::hash(&s[..16]) == u32_at(s, 16)?).then(|| u64_at(s, 8))?
}

/// The record head at `at` if it has the magic: its generation, number and end.
fn head_at(bytes: &[u8], at: usize) -> Option<(u64, u64, usize)> {
    if bytes.get(at..at.checked_add(4)?)? != MAGIC {
        return None;
    }
    let generation = u64_at(bytes, at + 4)?;
    let number = u64_at(bytes, at + 12)?;
    let len = u32_at(bytes, at + 20)? as usize;
    Some((generation, number, (at + RECORD_HEAD).checked_add(len)?))
}

/// The payload of the record whose head is at `at` and that ends at `end`, if it is whole
/// and its checksum holds.
fn payload_at(bytes: &[u8], at: usize, end: usize) -> Option<&[u8]> {
    let payload = bytes.get(at + RECORD_HEAD..end)?;
    let crc = u32_at(bytes, at + 24)?;
    (checksum(&bytes[at + 4..at + 24], payload) == crc).then_some(payload)
}

/// A payload whose checksum holds but that does not parse (a bug, not a torn write).
fn decode(payload: &[u8]) -> Option<Vec<TreeWrites>> {
    struct Reader<'a>(&'a [u8]);
    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Option<&'a [u8]> {
            if self.0.len() < n {
                return None;
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Some(a)
        }
        fn u8(&mut self) -> Option<u8> {
            Some(self.take(1)?[0])
        }
        fn u32(&mut self) -> Option<u32> {
            Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
        }
        fn bytes(&mut self) -> Option<Vec<u8>> {
            let n = self.u32()? as usize;
            Some(self.take(n)?.to_vec())
        }
    }
    let mut r = Reader(payload);
    let trees = r.u8()?;
    let mut out = Vec::with_capacity(trees as usize);
    for _ in 0..trees {
        let name_len = r.u8()? as usize;
        let tree = r.take(name_len)?.to_vec();
        let n = r.u32()?;
        let mut writes = Vec::with_capacity(n.min(1 << 16) as usize);
        for _ in 0..n {
            let insert = match r.u8()? {
                0 => false,
                1 => true,
                _ => return None,
            };
            let key = r.bytes()?;
            let value = if insert { Some(r.bytes()?) } else { None };
            writes.push((key, value));
        }
        out.push(TreeWrites { tree, writes });
    }
    r.0.is_empty().then_some(out)
}

/// What a journal's bytes hold.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Contents {
    /// The journal's generation (its header's).
    pub(crate) generation: u64,
    /// The good records of that generation, in order.
    pub(crate) records: Vec<Record>,
    /// Where they end ([`RECORDS`] when there is none).
    pub(crate) end: usize,
}

/// Why a journal cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Damage {
    /// Not a journal of this format (no header slot is whole).
    Header,
    /// A record at this offset is bad, or of an older generation, but a good record of the
    /// journal's generation with a later number, or of a later generation, comes later.
    Middle(usize),
    /// A record at this offset has a good checksum but an unreadable payload.
    Payload(usize),
}

/// Reads a journal's bytes (see the module comment).
pub(crate) fn read(bytes: &[u8]) -> Result<Contents, Damage> {
    let generation = SLOTS
        .iter()
        .filter_map(|at| slot_at(bytes, *at))
        .max()
        .ok_or(Damage::Header)?;
    let mut records: Vec<Record> = Vec::new();
    let mut at = RECORDS;
    while let Some((g, number, end)) = head_at(bytes, at) {
        if g != generation || records.last().is_some_and(|last| number != last.number + 1) {
            break;
        }
        let Some(payload) = payload_at(bytes, at, end) else {
            break;
        };
        let trees = decode(payload).ok_or(Damage::Payload(at))?;
        records.push(Record { number, trees });
        at = end;
    }
    // What follows is zeros, an older generation's records or a torn record; a good record
    // of this generation (a later number) or of a later one means damage.
    let after = records.last().map_or(0, |r| r.number);
    let later = (at..bytes.len()).any(|i| {
        head_at(bytes, i).is_some_and(|(g, n, end)| {
            (g > generation || (g == generation && n > after)) && payload_at(bytes, i, end).is_some()
        })
    });
    match later {
        true => Err(Damage::Middle(at)),
        false => Ok(Contents {
            generation,
            records,
            end: at,
        }),
    }
}

/// The open journal: written by the writer, emptied after each checkpoint.
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    generation: u64,
    /// Where the next record goes.
    at: u64,
    /// The file's size.
    size: u64,
}

impl Wal {
    /// Opens the journal of the database directory `db_dir` and answers its good records
    /// (to replay: they stay in the file until [`Wal::empty`]). A new journal is created
    /// with room for `capacity` bytes of records (see the module comment). A damaged one is
    /// an error naming the file and offset.
    pub(crate) fn open(db_dir: &Path, capacity: u64) -> io::Result<(Wal, Vec<Record>)> {
        let path = db_dir.join(FILE);
        let damaged = |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
        let file = match File::options().read(true).write(true).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => create(db_dir, capacity)?,
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        io::Read::read_to_end(&mut &file, &mut bytes)?;
        let contents = read(&bytes).map_err(|d| {
            damaged(match d {
                Damage::Header => "not a write-ahead journal of this version (no header slot is whole)".into(),
                Damage::Middle(at) => format!(
                    "the write-ahead journal is damaged at byte {at}: the record there is unreadable \
                     (or its header) but later records are intact; refusing to open (acknowledged \
                     writes would be lost)"
                ),
                Damage::Payload(at) => {
                    format!("the write-ahead journal's record at byte {at} has a good checksum but cannot be read")
                }
            })
        })?;
        let wal = Wal {
            file,
            path,
            generation: contents.generation,
            at: contents.end as u64,
            size: bytes.len() as u64,
        };
        Ok((wal, contents.records))
    }

    /// Whether a record of `len` bytes fits before the file's end.
    pub(crate) fn fits(&self, len: usize) -> bool {
        self.at + len as u64 <= self.size
    }

    /// Writes one record (from [`encode`]) after the last one, stamped with the journal's
    /// generation, and syncs it (`fdatasync`).
    pub(crate) fn append(&mut self, record: &mut [u8]) -> io::Result<()> {
        stamp(record, self.generation);
        self.file.write_all_at(record, self.at)?;
        self.at += record.len() as u64;
        self.size = self.size.max(self.at);
        self.file.sync_data()
    }

    /// Drops every record (the database holds them all durably), also a torn tail left by
    /// a crash: the next generation written into its header slot and synced.
    pub(crate) fn empty(&mut self) -> io::Result<()> {
        let next = self.generation + 1;
        self.file.write_all_at(&slot(next), slot_offset(next) as u64)?;
        self.file.sync_data()?;
        self.generation = next;
        self.at = RECORDS as u64;
        Ok(())
    }

    /// Bytes of records in the journal.
    pub(crate) fn bytes(&self) -> u64 {
        self.at - RECORDS as u64
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Creates the journal of `db_dir`, zeros written for `capacity` bytes of records (see the
/// module comment), generation 1.
fn create(db_dir: &Path, capacity: u64) -> io::Result<File> {
    let new = db_dir.join(NEW_FILE);
    let file = File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&new)?;
    let size = RECORDS as u64 + capacity;
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(zeros.len() as u64);
        file.write_all_at(&zeros[..n as usize], at)?;
        at += n;
    }
    for generation in [0, 1] {
        file.write_all_at(&slot(generation), slot_offset(generation) as u64)?;
    }
    file.sync_all()?;
    std::fs::rename(&new, db_dir.join(FILE))?;
    File::open(db_dir)?.sync_all()?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(generation: u64, number: u64, keys: &[(&str, Option<&str>)]) -> (Vec<u8>, Record) {
        let writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = keys
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        let mut bytes = encode(
            number,
            [(&b"inbox"[..], writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))],
        );
        stamp(&mut bytes, generation);
        let record = Record {
            number,
            trees: vec![TreeWrites {
                tree: b"inbox".to_vec(),
                writes,
            }],
        };
        (bytes, record)
    }

    /// An empty journal of `generation` with room for 16 KiB of records (zeros).
    fn empty(generation: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; RECORDS + 16 * 1024];
        for g in [generation.saturating_sub(1), generation] {
            bytes[slot_offset(g)..slot_offset(g) + SLOT].copy_from_slice(&slot(g));
        }
        bytes
    }

    /// Writes `records` in place from `at`.
    fn put(bytes: &mut Vec<u8>, at: usize, record: &[u8]) -> usize {
        if bytes.len() < at + record.len() {
            bytes.resize(at + record.len(), 0);
        }
        bytes[at..at + record.len()].copy_from_slice(record);
        at + record.len()
    }

    /// A journal of generation 5 with three records: its bytes, the records, where each
    /// starts and where the last one ends.
    fn three() -> (Vec<u8>, Vec<Record>, Vec<usize>) {
        let mut bytes = empty(5);
        let mut records = Vec::new();
        let mut starts = Vec::new();
        let big = "x".repeat(5000);
        let mut at = RECORDS;
        for (n, keys) in [
            (7, vec![("a", Some("1")), ("b", None)]),
            (8, vec![("a", Some(big.as_str()))]),
            (9, vec![("c", Some("3")), ("a", None), ("", Some(""))]),
        ] {
            let (b, r) = record(5, n, &keys);
            starts.push(at);
            at = put(&mut bytes, at, &b);
            records.push(r);
        }
        starts.push(at);
        (bytes, records, starts)
    }

    #[test]
    fn records_read_back_as_written() {
        let (bytes, records, starts) = three();
        let contents = read(&bytes).expect("read");
        assert_eq!(contents.generation, 5);
        assert_eq!(contents.records, records);
        assert_eq!(contents.end, starts[3], "the zeros after the records are no record");
        // two trees in one record, a record without trees
        let mut two = encode(
            1,
            [
                (&b"inbox"[..], vec![(&b"k"[..], Some(&b"v"[..]))]),
                (&b"scheduler"[..], vec![(&b"j"[..], None)]),
            ],
        );
        stamp(&mut two, 1);
        let mut none = encode(2, Vec::<(&[u8], Vec<(&[u8], Option<&[u8]>)>)>::new());
        stamp(&mut none, 1);
        let mut bytes = empty(1);
        let at = put(&mut bytes, RECORDS, &two);
        put(&mut bytes, at, &none);
        let contents = read(&bytes).expect("read");
        assert_eq!(contents.records.len(), 2);
        assert_eq!(contents.records[0].trees[1].tree, b"scheduler");
        assert_eq!(contents.records[0].trees[1].writes, vec![(b"j".to_vec(), None)]);
        assert!(contents.records[1].trees.is_empty());
        // no whole header slot: not a journal of ours
        assert_eq!(read(b"").expect_err("empty"), Damage::Header);
        assert_eq!(read(&bytes[..SLOT - 1]).expect_err("short"), Damage::Header);
        assert_eq!(read(b"something else").expect_err("not ours"), Damage::Header);
        let mut both_bad = bytes.clone();
        both_bad[3] ^= 1;
        both_bad[512 + 9] ^= 1;
        assert_eq!(read(&both_bad).expect_err("no slot"), Damage::Header);
    }

    /// A power cut during the last record's write: whatever prefix of it reached the disk,
    /// over zeros or over an older generation's records, the earlier records are read and
    /// the last one is dropped.
    #[test]
    fn a_torn_last_record_is_dropped_at_every_offset() {
        let (bytes, records, starts) = three();
        let (last, end) = (starts[2], starts[3]);
        // what the torn record overwrites: zeros, or a previous generation's records
        let mut stale = bytes.clone();
        let (old, _) = record(4, 30, &[("old", Some(&"o".repeat(40)))]);
        let mut at = last;
        while at + old.len() < stale.len() {
            at = put(&mut stale, at, &old);
        }
        let mut zeros = bytes.clone();
        zeros[last..end].fill(0);
        for under in [&zeros, &stale] {
            for cut in last..end {
                let mut torn = under.clone();
                torn[last..cut].copy_from_slice(&bytes[last..cut]);
                let contents = read(&torn).unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
                if torn[last..end] == bytes[last..end] {
                    // what was under the missing bytes equals them: the record is whole
                    assert_eq!(contents.records, records, "cut at {cut}");
                    continue;
                }
                assert_eq!(contents.records, records[..2], "cut at {cut}");
                assert_eq!(contents.end, last, "cut at {cut}");
            }
        }
        // garbage after the end, a file that ends inside the record
        for tail in [vec![0xAB; 17], b"PHWR".to_vec()] {
            let mut torn = zeros.clone();
            put(&mut torn, last, &tail);
            assert_eq!(read(&torn).expect("torn").records, records[..2]);
        }
        assert_eq!(read(&bytes[..end - 1]).expect("short").records, records[..2]);
        // a last record with a flipped bit is torn too
        let mut flipped = bytes.clone();
        flipped[end - 1] ^= 1;
        assert_eq!(read(&flipped).expect("torn").records, records[..2]);
    }

    /// Records of the previous generation after the current ones (the journal was emptied
    /// and written again, less far) are where it ends, not damage, even when their numbers
    /// follow; so is the whole previous generation right after an emptying.
    #[test]
    fn an_older_generation_after_the_current_records_is_the_end() {
        let (bytes, records, _) = three();
        let end = read(&bytes).expect("read").end;
        let mut after = bytes.clone();
        let mut at = end;
        for n in 10..20 {
            let (old, _) = record(4, n, &[("old", Some("o"))]);
            at = put(&mut after, at, &old);
        }
        let contents = read(&after).expect("read");
        assert_eq!((contents.records, contents.end), (records.clone(), end));
        // emptied: generation 6 in its slot, the records of 5 still in the file
        let mut emptied = bytes.clone();
        emptied[slot_offset(6)..slot_offset(6) + SLOT].copy_from_slice(&slot(6));
        let contents = read(&emptied).expect("read");
        assert_eq!(
            (contents.generation, contents.records, contents.end),
            (6, vec![], RECORDS)
        );
        // one record of 6 written over the first of 5
        let (new, r) = record(6, 1, &[("new", Some("n"))]);
        let end6 = put(&mut emptied, RECORDS, &new);
        let contents = read(&emptied).expect("read");
        assert_eq!((contents.records, contents.end), (vec![r], end6));
    }

    /// A power cut while the generation is bumped: the slot written is never the current
    /// one, so a torn bump (or one that never reached the disk) leaves the previous
    /// generation, with all its records; a whole one empties the journal.
    #[test]
    fn a_torn_generation_bump_keeps_the_previous_generation() {
        let (bytes, records, _) = three();
        let next = slot(6);
        let at = slot_offset(6);
        assert_ne!(at, slot_offset(5), "the bump never writes the current slot");
        for cut in 0..SLOT {
            let mut torn = bytes.clone();
            torn[at..at + cut].copy_from_slice(&next[..cut]);
            let contents = read(&torn).unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
            assert_eq!((contents.generation, &contents.records), (5, &records), "cut at {cut}");
        }
        let mut whole = bytes.clone();
        whole[at..at + SLOT].copy_from_slice(&next);
        assert!(read(&whole).expect("bumped").records.is_empty());
    }

    /// A bad record followed by good ones is damage, not a torn tail: refused with its
    /// offset. So is a damaged header slot when records of the generation it held follow.
    #[test]
    fn a_damaged_middle_record_is_refused_with_its_offset() {
        let (bytes, _, starts) = three();
        for (at, why) in [
            (starts[1] + RECORD_HEAD + 10, "payload"),
            (starts[1] + 13, "number"),
            (starts[1] + 21, "length"),
            (starts[1] + 5, "generation"),
            (starts[1], "magic"),
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert_eq!(read(&bad), Err(Damage::Middle(starts[1])), "{why}");
        }
        // a record missing in the middle (numbers 7, 9)
        let mut gap = bytes.clone();
        gap.drain(starts[1]..starts[2]);
        assert_eq!(read(&gap), Err(Damage::Middle(starts[1])));
        // the current header slot damaged: generation 4 would be read, but records of 5 follow
        let mut header = bytes.clone();
        header[slot_offset(5) + 9] ^= 1;
        assert_eq!(read(&header), Err(Damage::Middle(RECORDS)));
        // the file refuses to open, naming itself and the offset
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut bad = bytes.clone();
        bad[starts[1] + RECORD_HEAD + 10] ^= 0x40;
        std::fs::write(dir.path().join(FILE), &bad).expect("write");
        let e = Wal::open(dir.path(), 1024).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let text = e.to_string();
        assert!(
            text.contains(FILE) && text.contains(&format!("byte {}", starts[1])),
            "{text}"
        );
    }

    #[test]
    fn a_journal_is_created_preallocated_written_in_place_emptied_and_reopened() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join(FILE);
        // a creation cut short left its temporary file: created again
        std::fs::write(dir.path().join(NEW_FILE), b"PHW").expect("write");
        let (mut wal, records) = Wal::open(dir.path(), 1024).expect("create");
        assert!(records.is_empty());
        assert_eq!(wal.bytes(), 0);
        assert!(!dir.path().join(NEW_FILE).exists());
        let size = (RECORDS + 1024) as u64;
        let len = || std::fs::metadata(&file).expect("stat").len();
        assert_eq!(len(), size, "preallocated");
        assert!(
            std::fs::read(&file).expect("read")[RECORDS..].iter().all(|b| *b == 0),
            "zeros"
        );
        let (mut b1, r1) = record(0, 1, &[("a", Some("1"))]);
        let (mut b2, r2) = record(0, 2, &[("a", None)]);
        wal.append(&mut b1).expect("append");
        wal.append(&mut b2).expect("append");
        assert_eq!(wal.bytes(), (b1.len() + b2.len()) as u64);
        assert_eq!(len(), size, "written in place");
        drop(wal);
        let (mut wal, records) = Wal::open(dir.path(), 1024).expect("reopen");
        assert_eq!(records, vec![r1, r2]);
        wal.empty().expect("empty");
        assert_eq!(wal.bytes(), 0);
        let (mut b3, r3) = record(0, 3, &[("b", Some("2"))]);
        wal.append(&mut b3).expect("append");
        drop(wal);
        let (mut wal, records) = Wal::open(dir.path(), 1024).expect("reopen");
        assert_eq!(records, vec![r3], "the older generation's second record is not read");
        assert_eq!(len(), size);
        // a record that does not fit: the writer checkpoints first; if it still does not
        // fit, the file grows, and keeps that size
        let (mut big, rbig) = record(0, 4, &[("big", Some(&"b".repeat(2000)))]);
        assert!(wal.fits(b3.len()) && !wal.fits(big.len()));
        wal.empty().expect("empty");
        assert!(!wal.fits(big.len()), "larger than the whole file");
        wal.append(&mut big).expect("append");
        assert_eq!(len(), (RECORDS + big.len()) as u64);
        drop(wal);
        let (mut wal, records) = Wal::open(dir.path(), 1024).expect("reopen");
        assert_eq!(records, vec![rbig]);
        assert!(!wal.fits(1));
        wal.empty().expect("empty");
        assert!(wal.fits(big.len()) && !wal.fits(big.len() + 1));
    }
}
