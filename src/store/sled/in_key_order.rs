//! Writes of a move-in put off to be made in key order ([`InKeyOrder`]).
//!
//! sled 0.34 keeps in memory every page a database opening wrote or read, and a write in a
//! random place of a large tree touches a page of its own: the uuid indexes of 2,000,000
//! moved-in items, written in the file's order, had every opening of the move-in hold most
//! of the index's pages (docs/moving-in.md). Written in key order, each page is filled once
//! and left, so what an opening holds is the few pages its batches filled. The writes are
//! sorted on disk by SQLite (already used to read the originals' files), in a scratch
//! database beside the data it is for, within SQLite's own cache budget.

use super::{Result, StoreError};
use rusqlite::Connection;
use std::path::{Path, PathBuf};

/// The scratch file's name in the data directory; a stopped move-in may leave it: the next
/// one replaces it.
const SCRATCH: &str = "move-in-sorting.sqlite3";

/// SQLite's page cache for the scratch database, and so the memory its sort works in
/// before spilling to temporary files (KiB).
const CACHE_KIB: i64 = 4096;

/// Writes (key, value) gathered in any order, given back in key order, on disk meanwhile.
pub(crate) struct InKeyOrder {
    conn: Connection,
    path: PathBuf,
}

fn engine(e: rusqlite::Error) -> StoreError {
    StoreError::Engine(format!("sorting the writes of a move-in: {e}").into())
}

impl InKeyOrder {
    /// A new, empty one whose scratch database is in `dir` (the data directory).
    pub(crate) fn new(dir: &Path) -> Result<InKeyOrder> {
        let path = dir.join(SCRATCH);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(StoreError::Io(e)),
            _ => {}
        }
        // private as the rest of the data directory (it holds the records' uuids and places)
        std::os::unix::fs::OpenOptionsExt::mode(std::fs::OpenOptions::new().write(true).create_new(true), 0o600)
            .open(&path)?;
        let conn = Connection::open(&path).map_err(engine)?;
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA temp_store = FILE; \
             PRAGMA cache_size = -{CACHE_KIB}; PRAGMA mmap_size = 0; \
             CREATE TABLE later (k BLOB NOT NULL, v BLOB NOT NULL); BEGIN;"
        ))
        .map_err(engine)?;
        Ok(InKeyOrder { conn, path })
    }

    /// Puts off the write of `value` under `key`.
    pub(crate) fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.conn
            .prepare_cached("INSERT INTO later (k, v) VALUES (?1, ?2)")
            .and_then(|mut s| s.execute((key, value)))
            .map_err(engine)?;
        Ok(())
    }

    /// Hands on every write put off, in key order (bytewise, as sled orders keys); equal
    /// keys come one after the other.
    pub(crate) fn each(&mut self, mut each: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        if !self.conn.is_autocommit() {
            self.conn.execute_batch("COMMIT").map_err(engine)?;
        }
        // BLOBs compare with memcmp, then by length: the order of sled's keys
        let mut stmt = self.conn.prepare("SELECT k, v FROM later ORDER BY k").map_err(engine)?;
        let mut rows = stmt.query([]).map_err(engine)?;
        while let Some(row) = rows.next().map_err(engine)? {
            let key = row.get_ref(0).and_then(|v| Ok(v.as_blob()?)).map_err(engine)?;
            let value = row.get_ref(1).and_then(|v| Ok(v.as_blob()?)).map_err(engine)?;
            each(key, value)?;
        }
        Ok(())
    }
}

impl Drop for InKeyOrder {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            tracing::warn!("the scratch file {} could not be removed: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_come_back_in_bytewise_key_order_and_the_scratch_file_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut later = InKeyOrder::new(dir.path()).expect("new");
        let keys: [&[u8]; 6] = [b"b", b"a\xff", b"a", b"", b"a\x00", b"a"];
        for (i, k) in keys.iter().enumerate() {
            later.put(k, &[i as u8]).expect("put");
        }
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(SCRATCH)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "private");
        let mut out = Vec::new();
        later
            .each(|k, v| {
                out.push((k.to_vec(), v[0]));
                Ok(())
            })
            .expect("each");
        let keys: Vec<&[u8]> = out.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(keys, [&b""[..], b"a", b"a", b"a\x00", b"a\xff", b"b"]);
        drop(later);
        assert!(!dir.path().join(SCRATCH).exists());
    }

    #[test]
    fn a_scratch_file_a_stopped_run_left_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(SCRATCH), b"not a database").expect("write");
        let mut later = InKeyOrder::new(dir.path()).expect("new");
        later.put(b"k", b"v").expect("put");
        let mut n = 0;
        later
            .each(|_, _| {
                n += 1;
                Ok(())
            })
            .expect("each");
        assert_eq!(n, 1);
    }
}
