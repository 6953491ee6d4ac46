//! Making sled's files stable: what `fsync` the writer adds after sled's `flush()`.
//!
//! sled 0.34's `flush()` writes its log buffers and ends in `sync_file_range`, which neither
//! empties the drive's cache nor records a grown file's size: after a power cut the data can
//! be gone although the process was told it was written. sled's own `fsync` of the log runs
//! only every 500 ms in a background thread, and the files it writes for values over about
//! 128 KiB (`db/blobs/<lsn>`, also whole pages that grow past that size) are never synced at
//! all. So after each `flush()` (a checkpoint of the writer: [`super::writer`]) the writer
//! calls [`Stable::sync`], which
//!
//! 1. `fsync`s every blob file it has not synced yet, and then the `blobs` directory (the
//!    store keeps values in chunks, [`super::chunks`], so sled writes no blobs; this covers
//!    databases written before that);
//! 2. `fdatasync`s the log file `db/db` (Linux flushes a file's dirty pages whichever
//!    descriptor wrote them, so a descriptor of our own is enough; `fdatasync` also records
//!    a grown size, which is what is needed to read the data back);
//! 3. `fsync`s any other new file of `db/` (snapshots, which sled syncs itself but never
//!    their directory entry after the rename) and then the `db` directory.
//!
//! The directories are listed on every cycle. Their change times cannot tell whether
//! anything is new: not every file system keeps them (a FUSE file system need not), and
//! where they are kept, two changes within one tick of the kernel's coarse clock carry the
//! same time.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// One directory whose entries must be stable, and the names already synced.
struct Dir {
    path: PathBuf,
    synced: HashSet<OsString>,
}

impl Dir {
    fn new(path: PathBuf) -> Dir {
        Dir {
            path,
            synced: HashSet::new(),
        }
    }

    /// Syncs every file of the directory not synced before (`skip`: names that are not
    /// files of this directory's own, like a subdirectory), then the directory itself when
    /// anything was new. Answers the number of `fsync` calls.
    fn sync_new(&mut self, skip: &[&str]) -> std::io::Result<u64> {
        let entries = match std::fs::read_dir(&self.path) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let mut present = HashSet::with_capacity(self.synced.len());
        let mut syncs = 0;
        for entry in entries {
            let name = entry?.file_name();
            if skip.iter().any(|s| name == *s) {
                continue;
            }
            if !self.synced.contains(&name) {
                match File::open(self.path.join(&name)) {
                    Ok(f) => {
                        f.sync_all()?;
                        syncs += 1;
                    }
                    // removed meanwhile (sled collects old blobs and snapshots)
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
            }
            present.insert(name);
        }
        let created = present.iter().any(|n| !self.synced.contains(n));
        let removed = self.synced.iter().any(|n| !present.contains(n));
        if created || removed {
            File::open(&self.path)?.sync_all()?;
            syncs += 1;
        }
        self.synced = present;
        Ok(syncs)
    }
}

/// The files of one sled database directory, and how many syncs they cost so far.
pub(crate) struct Stable {
    log: File,
    db: Dir,
    blobs: Dir,
    syncs: AtomicU64,
}

impl Stable {
    /// For the sled database in `db_dir` (just opened: everything in it is synced once, so
    /// what sled wrote while opening is stable too).
    pub(crate) fn open(db_dir: &Path) -> std::io::Result<Stable> {
        let mut stable = Stable {
            log: File::open(db_dir.join("db"))?,
            db: Dir::new(db_dir.to_path_buf()),
            blobs: Dir::new(db_dir.join("blobs")),
            syncs: AtomicU64::new(0),
        };
        stable.sync()?;
        if let Some(parent) = db_dir.parent() {
            // the data directory holds the `db` entry (and the lock file)
            File::open(parent)?.sync_all()?;
        }
        Ok(stable)
    }

    /// Makes everything sled has written so far stable (call after `flush()`).
    pub(crate) fn sync(&mut self) -> std::io::Result<()> {
        let mut n = self.blobs.sync_new(&[])?;
        self.log.sync_data()?;
        n += 1;
        n += self.db.sync_new(&["blobs", "db", super::wal::FILE])?;
        self.syncs.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }

    /// `fsync`/`fdatasync` calls made so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_files_are_synced_once_and_removals_sync_the_directory() {
        let dir = tempfile::tempdir().expect("temporary directory");
        std::fs::write(dir.path().join("db"), b"log").expect("log");
        std::fs::create_dir(dir.path().join("blobs")).expect("blobs");
        let mut stable = Stable::open(dir.path()).expect("open");
        // the log, the log again is not listed: open syncs the log once and nothing else
        assert_eq!(stable.syncs(), 1);
        stable.sync().expect("sync");
        assert_eq!(stable.syncs(), 2, "only the log: the directories are unchanged");

        std::fs::write(dir.path().join("blobs/17"), b"blob").expect("blob");
        std::fs::write(dir.path().join("blobs/18"), b"blob").expect("blob");
        stable.sync().expect("sync");
        // two blobs, the blobs directory, the log
        assert_eq!(stable.syncs(), 6);
        stable.sync().expect("sync");
        assert_eq!(stable.syncs(), 7, "known blobs are not synced again");

        std::fs::remove_file(dir.path().join("blobs/17")).expect("remove");
        std::fs::write(dir.path().join("snap.00001"), b"snapshot").expect("snapshot");
        stable.sync().expect("sync");
        // blobs directory (a removal), log, the snapshot, the db directory
        assert_eq!(stable.syncs(), 11);
    }
}
