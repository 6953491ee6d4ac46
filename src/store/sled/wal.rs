//! The write-ahead journal in front of sled: the file `db/pigeonhole-wal`, one checksummed
//! record per write cycle of the [`super::writer`], synced before the cycle is acknowledged
//! (the writer's module comment has the design and the crash-safety argument).
//!
//! The file is a header ([`HEADER`]) followed by records, each
//!
//! ```text
//! "PHWR"  number (u64 LE)  payload length (u32 LE)  CRC-32 of number, length and payload (u32 LE)
//! payload: trees (u8), then per tree: name length (u8), name, writes (u32 LE),
//!          then per write: 1 = insert / 0 = removal (u8), key length (u32 LE), key,
//!                          and for an insert: value length (u32 LE), value
//! ```
//!
//! Records are numbered consecutively. Reading stops at the
//! first record that is incomplete, fails its checksum or does not follow its predecessor's
//! number: a power cut during the last append leaves such a tail, and it was never
//! acknowledged. When a record with a good checksum and a later number follows that point,
//! the file was damaged in its middle (not torn at its end): reading refuses, naming the file
//! and the offset, instead of dropping acknowledged writes silently.
//!
//! This file names no sled type: records are bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The journal's name in the database directory (moved with it by a restore).
pub(crate) const FILE: &str = "pigeonhole-wal";

/// First bytes of the file (format 1).
const HEADER: &[u8; 8] = b"PHWAL01\n";
/// First bytes of every record.
const MAGIC: &[u8; 4] = b"PHWR";
/// Bytes of a record before its payload.
const RECORD_HEAD: usize = 4 + 8 + 4 + 4;

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

/// The bytes of record `number` holding `trees` (name, writes: key and value or `None`).
pub(crate) fn encode<'a, W>(number: u64, trees: impl IntoIterator<Item = (&'a [u8], W)>) -> Vec<u8>
where
    W: IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
{
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
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
    out[12..16].copy_from_slice(&len.to_le_bytes());
    let crc = checksum(&out[4..16], &out[RECORD_HEAD..]);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

fn checksum(head: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(head);
    h.update(payload);
    h.finalize()
}

/// The record starting at `at` in `bytes` if it is whole and its checksum holds: its number,
/// payload and end.
fn record_at(bytes: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    let head = bytes.get(at..at.checked_add(RECORD_HEAD)?)?;
    if &head[..4] != MAGIC {
        return None;
    }
    let number = u64::from_le_bytes(head[4..12].try_into().ok()?);
    let len = u32::from_le_bytes(head[12..16].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(head[16..20].try_into().ok()?);
    let end = (at + RECORD_HEAD).checked_add(len)?;
    let payload = bytes.get(at + RECORD_HEAD..end)?;
    (checksum(&head[4..16], payload) == crc).then_some((number, payload, end))
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
    /// The good records, in order.
    pub(crate) records: Vec<Record>,
    /// Where they end (the header's end when there is none).
    pub(crate) end: usize,
}

/// Why a journal cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Damage {
    /// Not a journal of this format.
    Header,
    /// A record at this offset is bad but a good one comes later.
    Middle(usize),
    /// A record at this offset has a good checksum but an unreadable payload.
    Payload(usize),
}

/// Reads a journal's bytes (see the module comment). An empty file, or one shorter than
/// the header whose bytes are a beginning of it (a creation cut short), holds nothing.
pub(crate) fn read(bytes: &[u8]) -> Result<Contents, Damage> {
    if bytes.len() < HEADER.len() {
        return match HEADER.starts_with(bytes) {
            true => Ok(Contents {
                records: Vec::new(),
                end: 0,
            }),
            false => Err(Damage::Header),
        };
    }
    if &bytes[..HEADER.len()] != HEADER {
        return Err(Damage::Header);
    }
    let mut records: Vec<Record> = Vec::new();
    let mut at = HEADER.len();
    while let Some((number, payload, end)) = record_at(bytes, at) {
        if records.last().is_some_and(|last| number != last.number + 1) {
            break;
        }
        let trees = decode(payload).ok_or(Damage::Payload(at))?;
        records.push(Record { number, trees });
        at = end;
    }
    if at < bytes.len() {
        // A torn tail holds no good record after it; a damaged middle does.
        let after = records.last().map_or(0, |r| r.number);
        let later = (at..bytes.len()).any(|i| record_at(bytes, i).is_some_and(|(n, _, _)| n > after));
        if later {
            return Err(Damage::Middle(at));
        }
    }
    Ok(Contents { records, end: at })
}

/// The open journal: appended to by the writer, truncated after each checkpoint.
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// Where the next record goes (the file's length).
    len: u64,
}

impl Wal {
    /// Opens the journal of the database directory `db_dir` and answers its good records
    /// (to replay: they stay in the file until [`Wal::truncate`]). A new journal is
    /// created with its header, synced, and its name made durable by syncing the
    /// directory. A damaged one is an error naming the file and offset.
    pub(crate) fn open(db_dir: &Path) -> io::Result<(Wal, Vec<Record>)> {
        let path = db_dir.join(FILE);
        let damaged = |what: String| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()));
        let (file, records, len) = match File::options().read(true).write(true).open(&path) {
            Ok(file) => {
                let mut bytes = Vec::new();
                io::Read::read_to_end(&mut &file, &mut bytes)?;
                let contents = read(&bytes).map_err(|d| {
                    damaged(match d {
                        Damage::Header => "not a write-ahead journal of this version (its header is wrong)".into(),
                        Damage::Middle(at) => format!(
                            "the write-ahead journal is damaged at byte {at}: the record there is unreadable \
                             but later records are intact; refusing to open (acknowledged writes would be lost)"
                        ),
                        Damage::Payload(at) => {
                            format!(
                                "the write-ahead journal's record at byte {at} has a good checksum but cannot be read"
                            )
                        }
                    })
                })?;
                if contents.end < HEADER.len() {
                    // a creation cut short: written again below
                    file.set_len(0)?;
                    file.write_all_at(HEADER, 0)?;
                    file.sync_all()?;
                }
                let len = contents.end.max(HEADER.len()) as u64;
                (file, contents.records, len)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let file = File::options().read(true).write(true).create_new(true).open(&path)?;
                file.write_all_at(HEADER, 0)?;
                file.sync_all()?;
                File::open(db_dir)?.sync_all()?;
                (file, Vec::new(), HEADER.len() as u64)
            }
            Err(e) => return Err(e),
        };
        Ok((Wal { file, path, len }, records))
    }

    /// Appends one record (from [`encode`]) and syncs it (`fdatasync`).
    pub(crate) fn append(&mut self, record: &[u8]) -> io::Result<()> {
        self.file.write_all_at(record, self.len)?;
        self.len += record.len() as u64;
        self.file.sync_data()
    }

    /// Drops every record (the database holds them all durably) and syncs that; also a
    /// torn tail left by a crash.
    pub(crate) fn truncate(&mut self) -> io::Result<()> {
        self.file.set_len(HEADER.len() as u64)?;
        self.len = HEADER.len() as u64;
        self.file.sync_data()
    }

    /// Bytes of records in the file.
    pub(crate) fn bytes(&self) -> u64 {
        self.len - HEADER.len() as u64
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(number: u64, keys: &[(&str, Option<&str>)]) -> (Vec<u8>, Record) {
        let writes: Vec<(Vec<u8>, Option<Vec<u8>>)> = keys
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        let bytes = encode(
            number,
            [(&b"inbox"[..], writes.iter().map(|(k, v)| (k.as_slice(), v.as_deref())))],
        );
        let record = Record {
            number,
            trees: vec![TreeWrites {
                tree: b"inbox".to_vec(),
                writes,
            }],
        };
        (bytes, record)
    }

    /// A journal of three records: its bytes, the records, and where each starts.
    fn three() -> (Vec<u8>, Vec<Record>, Vec<usize>) {
        let mut bytes = HEADER.to_vec();
        let mut records = Vec::new();
        let mut starts = Vec::new();
        let big = "x".repeat(5000);
        for (n, keys) in [
            (7, vec![("a", Some("1")), ("b", None)]),
            (8, vec![("a", Some(big.as_str()))]),
            (9, vec![("c", Some("3")), ("a", None), ("", Some(""))]),
        ] {
            let (b, r) = record(n, &keys);
            starts.push(bytes.len());
            bytes.extend_from_slice(&b);
            records.push(r);
        }
        (bytes, records, starts)
    }

    #[test]
    fn records_read_back_as_written() {
        let (bytes, records, _) = three();
        let contents = read(&bytes).expect("read");
        assert_eq!(contents.records, records);
        assert_eq!(contents.end, bytes.len());
        // two trees in one record, a record without trees
        let two = encode(
            1,
            [
                (&b"inbox"[..], vec![(&b"k"[..], Some(&b"v"[..]))]),
                (&b"scheduler"[..], vec![(&b"j"[..], None)]),
            ],
        );
        let none = encode(2, Vec::<(&[u8], Vec<(&[u8], Option<&[u8]>)>)>::new());
        let bytes = [&HEADER[..], &two, &none].concat();
        let contents = read(&bytes).expect("read");
        assert_eq!(contents.records.len(), 2);
        assert_eq!(contents.records[0].trees[1].tree, b"scheduler");
        assert_eq!(contents.records[0].trees[1].writes, vec![(b"j".to_vec(), None)]);
        assert!(contents.records[1].trees.is_empty());
        // an empty file, a header cut short
        assert_eq!(read(b"").expect("empty").records, vec![]);
        assert_eq!(read(&HEADER[..3]).expect("short").end, 0);
        assert_eq!(read(b"PHX").expect_err("not ours"), Damage::Header);
        assert_eq!(read(b"something else").expect_err("not ours"), Damage::Header);
    }

    /// A power cut during the last append: whatever prefix of the last record reached the
    /// disk, the earlier records are read and the last one is dropped.
    #[test]
    fn a_torn_last_record_is_dropped_at_every_offset() {
        let (bytes, records, starts) = three();
        let last = starts[2];
        for cut in last..bytes.len() {
            let contents = read(&bytes[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e:?}"));
            assert_eq!(contents.records, records[..2], "cut at {cut}");
            assert_eq!(contents.end, last, "cut at {cut}");
        }
        // the file grew but the data did not arrive (zeros), or garbage after the end
        for tail in [vec![0u8; 300], vec![0xAB; 17], b"PHWR".to_vec()] {
            let torn = [&bytes[..last], &tail].concat();
            assert_eq!(read(&torn).expect("torn").records, records[..2]);
        }
        // a last record with a flipped bit is torn too
        let mut flipped = bytes.clone();
        flipped[bytes.len() - 1] ^= 1;
        assert_eq!(read(&flipped).expect("torn").records, records[..2]);
    }

    /// A bad record followed by good ones is damage, not a torn tail: refused with its
    /// offset.
    #[test]
    fn a_damaged_middle_record_is_refused_with_its_offset() {
        let (bytes, _, starts) = three();
        for (at, why) in [
            (starts[1] + RECORD_HEAD + 10, "payload"),
            (starts[1] + 5, "number"),
            (starts[1] + 13, "length"),
            (starts[1], "magic"),
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            assert_eq!(read(&bad), Err(Damage::Middle(starts[1])), "{why}");
        }
        // a record missing in the middle (numbers 7, 9)
        let gap = [&bytes[..starts[1]], &bytes[starts[2]..]].concat();
        assert_eq!(read(&gap), Err(Damage::Middle(starts[1])));
        // the file refuses to open, naming itself and the offset
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut bad = bytes.clone();
        bad[starts[1] + RECORD_HEAD + 10] ^= 0x40;
        std::fs::write(dir.path().join(FILE), &bad).expect("write");
        let e = Wal::open(dir.path()).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let text = e.to_string();
        assert!(
            text.contains(FILE) && text.contains(&format!("byte {}", starts[1])),
            "{text}"
        );
    }

    #[test]
    fn a_journal_is_created_appended_truncated_and_reopened() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let (mut wal, records) = Wal::open(dir.path()).expect("create");
        assert!(records.is_empty());
        assert_eq!(wal.bytes(), 0);
        let (b1, r1) = record(1, &[("a", Some("1"))]);
        let (b2, r2) = record(2, &[("a", None)]);
        wal.append(&b1).expect("append");
        wal.append(&b2).expect("append");
        assert_eq!(wal.bytes(), (b1.len() + b2.len()) as u64);
        drop(wal);
        let (mut wal, records) = Wal::open(dir.path()).expect("reopen");
        assert_eq!(records, vec![r1, r2]);
        wal.truncate().expect("truncate");
        let (b3, r3) = record(3, &[("b", Some("2"))]);
        wal.append(&b3).expect("append");
        drop(wal);
        let (_, records) = Wal::open(dir.path()).expect("reopen");
        assert_eq!(records, vec![r3]);
        // a creation cut short before its header was whole
        std::fs::write(dir.path().join(FILE), &HEADER[..5]).expect("write");
        let (wal, records) = Wal::open(dir.path()).expect("reopen");
        assert!(records.is_empty());
        assert_eq!(wal.bytes(), 0);
        assert_eq!(std::fs::read(dir.path().join(FILE)).expect("read"), HEADER);
    }
}
