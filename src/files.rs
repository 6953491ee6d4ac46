//! Files written whole or not at all, the one way every part of Pigeonhole writes a file
//! that must survive a crash or a power cut (the token signing key, outbox e-mails, backups,
//! the database format, client settings and exports): a temporary file next to the target
//! (hidden, with a name no other writer picks), written, synced, renamed over the target,
//! and the directory synced, so that the target holds the old contents or the new ones,
//! never a part. The temporary file is removed when anything fails.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Who may read the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// This user only (mode 0600): secrets, backups, exports.
    Private,
    /// As the process's umask says.
    Shared,
}

/// Writes `contents` to `path` whole or not at all.
pub fn write(path: &Path, access: Access, contents: &[u8]) -> io::Result<()> {
    write_with(path, access, |file| file.write_all(contents))
}

/// Like [`write`], with the contents written by `fill` (which may answer something, such as
/// a summary of what it wrote).
pub fn write_with<T, E: From<io::Error>>(
    path: &Path,
    access: Access,
    fill: impl FnOnce(&mut File) -> Result<T, E>,
) -> Result<T, E> {
    write_checked(path, access, fill, |_| Ok(()))
}

/// Like [`write_with`], and `check` reads the written file back (under its temporary name,
/// once it is on disk) before it takes the target's name: a file `check` refuses never
/// appears under that name.
pub fn write_checked<T, E: From<io::Error>>(
    path: &Path,
    access: Access,
    fill: impl FnOnce(&mut File) -> Result<T, E>,
    check: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<T, E> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = temporary_name(path);
    let result = (|| -> Result<T, E> {
        let mut options = File::options();
        options.write(true).create_new(true);
        if access == Access::Private {
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        let answer = fill(&mut file)?;
        file.sync_all()?;
        check(&tmp)?;
        std::fs::rename(&tmp, path)?;
        sync_parent(path)?;
        Ok(answer)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A hidden name next to `path` that no other writer picks (process id and a random part).
pub fn temporary_name(path: &Path) -> PathBuf {
    let mut random = [0u8; 8];
    let _ = getrandom::getrandom(&mut random);
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.tmp-{}-{}", std::process::id(), hex::encode(random)))
}

/// Syncs the directory holding `path` (so that a new or renamed name in it survives a
/// power cut).
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_is_replaced_whole_and_private_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write(&path, Access::Private, b"one").unwrap();
        write(&path, Access::Private, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // a failed fill leaves the old contents and no temporary file
        let failed = write_with(&path, Access::Shared, |f| {
            f.write_all(b"thr")?;
            Err::<(), _>(io::Error::other("stopped"))
        });
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["key"]);
    }
}
