//! The data directory: private to the user that runs the server (spec decision 17).
//!
//! It is created with mode `0700` (and its parent directory synced, so that the new name
//! survives a power cut); an existing one is tightened at start: the directory and the
//! directories in it to `0700`, every file to `0600`, but for the signing key: a key that
//! others could read may have been read, so it stops the server instead (auth::tokens). The
//! process's umask is `077`
//! ([`private_umask`]), so the files sled, the outbox and the signing key create later are
//! private as well.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Files and directories created by this process are private to its user.
pub fn private_umask() {
    #[expect(unsafe_code, reason = "std has no safe umask(2)")]
    // SAFETY: umask(2) only sets the process's file mode creation mask; it cannot fail.
    unsafe {
        libc::umask(0o077);
    }
}

/// Creates or tightens the data directory `dir`. Answers how many entries were tightened.
pub fn prepare(dir: &Path) -> Result<usize, String> {
    let fail = |what: &str, e: std::io::Error| format!("cannot {what} the data directory {}: {e}", dir.display());
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("create", e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)
                .and_then(|f| f.sync_all())
                .map_err(|e| fail("sync the parent of", e))?;
        }
    }
    tighten(dir, true).map_err(|e| fail("restrict the permissions of", e))
}

/// The file that [`prepare`] leaves for its owner to check (auth::tokens).
const SIGNING_KEY: &str = "signing.key";

/// Sets `path` and everything below it to `0700` (directories) or `0600` (files); answers
/// the number of entries whose mode changed. Symbolic links are left alone.
fn tighten(path: &Path, top: bool) -> std::io::Result<usize> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(0);
    }
    let wanted = if meta.is_dir() { 0o700 } else { 0o600 };
    let mode = meta.permissions().mode() & 0o777;
    let mut changed = 0;
    if mode & !wanted != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & wanted))?;
        changed += 1;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if top && entry.file_name() == SIGNING_KEY {
                continue;
            }
            changed += tighten(&entry.path(), false)?;
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_directory_is_private_and_an_old_one_is_tightened() {
        let root = tempfile::tempdir().unwrap();
        let fresh = root.path().join("a/b/data");
        assert_eq!(prepare(&fresh).unwrap(), 0);
        assert_eq!(mode(&fresh), 0o700);

        let old = root.path().join("old");
        std::fs::create_dir_all(old.join("db/blobs")).unwrap();
        std::fs::write(old.join("signing.key"), b"k").unwrap();
        std::fs::write(old.join("notes"), b"n").unwrap();
        std::fs::write(old.join("db/db"), b"log").unwrap();
        for (p, m) in [
            ("", 0o755),
            ("db", 0o775),
            ("db/blobs", 0o700),
            ("signing.key", 0o644),
            ("notes", 0o644),
            ("db/db", 0o600),
        ] {
            std::fs::set_permissions(old.join(p), std::fs::Permissions::from_mode(m)).unwrap();
        }
        assert_eq!(prepare(&old).unwrap(), 3);
        assert_eq!(
            [
                mode(&old),
                mode(&old.join("db")),
                mode(&old.join("notes")),
                mode(&old.join("db/db"))
            ],
            [0o700, 0o700, 0o600, 0o600]
        );
        assert_eq!(
            mode(&old.join("signing.key")),
            0o644,
            "left for the key check to refuse"
        );
        assert_eq!(prepare(&old).unwrap(), 0, "nothing left to tighten");
    }
}
