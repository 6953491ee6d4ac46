//! The format of the whole database: one number, recorded in the file
//! `db/pigeonhole-format` next to the engine's files (inside the database directory, so
//! that a restore, which renames a complete new `db` into place, swaps data and format
//! together).
//!
//! * A new database records [`CURRENT`] before the engine creates anything.
//! * A database without the file but with files of its own was written before formats were
//!   recorded: it is format 1 ([`PREDECESSOR`]).
//! * An older format is migrated at open: first a backup of the database as it is, written
//!   next to it (`DATA_DIR/db-format-<n>-<unix time>.backup`, named in the log), then each
//!   step of [`MIGRATIONS`] in order, each one batch made durable, then the new format is
//!   recorded. A step run again on data it already migrated changes nothing, so a migration
//!   interrupted before the format was recorded is simply run again at the next start.
//! * A newer format stops the open with [`StoreError::NewerFormat`] before anything in the
//!   directory is opened for writing ([`check`] is what a start calls first).
//!
//! Format history:
//! 1. everything before formats were recorded (the e-mail queue may still hold entries
//!    without stage prefixes, `m` + sequence);
//! 2. the e-mail queue has one prefix per stage (`V`, `T`, `N`, `M`) and an owner index.

use super::{Result, Store, StoreError};
use std::path::{Path, PathBuf};

/// The format this version writes.
pub const CURRENT: u32 = 2;
/// The format of a database that records none.
pub const PREDECESSOR: u32 = 1;
/// The file, in the database directory, that holds the format (its decimal number).
const FILE: &str = "pigeonhole-format";

/// One step of migration: from format `n` to `n + 1` is `MIGRATIONS[n - 1]`.
type Step = fn(&Store) -> Result<()>;

const MIGRATIONS: [Step; (CURRENT - 1) as usize] = [to_2_email_stages];

/// 1 → 2: e-mails queued before the queue had a prefix per stage move to their stage's
/// prefix with the same sequence, and are indexed by owner.
fn to_2_email_stages(store: &Store) -> Result<()> {
    let moved = store.sled()?.scheduler.move_legacy_emails()?;
    if moved > 0 {
        tracing::info!("moved {moved} queued e-mails to the queues of their stages");
    }
    Ok(())
}

fn db_dir(dir: &Path) -> PathBuf {
    dir.join("db")
}

/// The format recorded for the database directory `db` (`None`: there is no database yet),
/// read without changing anything.
fn recorded_in(db: &Path) -> Result<Option<u32>> {
    let file = db.join(FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => text.trim().parse::<u32>().map(Some).map_err(|_| {
            StoreError::Codec(format!(
                "{} does not hold a database format number (it holds {:?})",
                file.display(),
                text.chars().take(40).collect::<String>()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let has_files = match std::fs::read_dir(db) {
                Ok(mut entries) => entries.next().is_some(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(e) => return Err(io_at(db, e)),
            };
            Ok(has_files.then_some(PREDECESSOR))
        }
        Err(e) => Err(io_at(&file, e)),
    }
}

fn io_at(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io(std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// The format of the database in the data directory `dir` (`None`: no database yet), and
/// an error if it is newer than this version reads. Changes nothing: a start calls this
/// before it touches the directory.
pub fn check(dir: &Path) -> Result<Option<u32>> {
    let found = recorded_in(&db_dir(dir))?;
    match found {
        Some(n) if n > CURRENT => Err(StoreError::NewerFormat {
            dir: dir.to_path_buf(),
            found: n,
        }),
        _ => Ok(found),
    }
}

/// Records `format` for the database directory `db` (atomically, synced).
pub(super) fn record(db: &Path, format: u32) -> Result<()> {
    std::fs::create_dir_all(db)?;
    crate::files::write(
        &db.join(FILE),
        crate::files::Access::Shared,
        format!("{format}\n").as_bytes(),
    )
    .map_err(|e| io_at(&db.join(FILE), e))
}

/// Before the engine opens the data directory `dir` (its lock held): the format of its
/// database, a new one recorded as [`CURRENT`]; a newer one is an error.
pub(super) fn before_open(dir: &Path) -> Result<u32> {
    match check(dir)? {
        Some(n) => Ok(n),
        None => {
            record(&db_dir(dir), CURRENT)?;
            Ok(CURRENT)
        }
    }
}

/// Brings the open `store` of the data directory `dir` from format `from` to [`CURRENT`]:
/// a backup next to it first, then each step, then the new format recorded.
pub(super) fn migrate(store: &Store, dir: &Path, from: u32) -> Result<()> {
    if from >= CURRENT {
        return Ok(());
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let path = dir.join(format!("db-format-{from}-{secs}.backup"));
    let summary = write_backup(store, &path, from)?;
    tracing::info!(
        "the database has format {from}, older than this version's {CURRENT}: migrating it; a backup of it as it \
         was is in {} ({} records)",
        path.display(),
        summary.records
    );
    for (step, migration) in MIGRATIONS.iter().enumerate().skip(from as usize - 1) {
        migration(store)?;
        store.flush()?;
        tracing::info!("database migrated to format {}", step + 2);
    }
    record(&db_dir(dir), CURRENT)?;
    Ok(())
}

/// A backup of `store` (whose records are of format `format`) at `path`: written under a
/// temporary name, synced, renamed, its directory synced.
fn write_backup(store: &Store, path: &Path, format: u32) -> Result<super::BackupSummary> {
    let result = crate::files::write_with(path, crate::files::Access::Private, |file| {
        store.backup_of_format(file, &[], format)
    });
    result.map_err(|e: StoreError| match e {
        StoreError::Io(io) => io_at(path, io),
        e => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_records_the_current_format_and_an_old_one_is_the_predecessor() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check(dir.path()).unwrap(), None);
        drop(Store::open(dir.path()).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("db").join(FILE)).unwrap(),
            format!("{CURRENT}\n")
        );
        assert_eq!(check(dir.path()).unwrap(), Some(CURRENT));
        std::fs::remove_file(dir.path().join("db").join(FILE)).unwrap();
        assert_eq!(check(dir.path()).unwrap(), Some(PREDECESSOR));
    }

    #[test]
    fn a_newer_or_unreadable_format_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        let file = dir.path().join("db").join(FILE);
        std::fs::write(&file, format!("{}\n", CURRENT + 1)).unwrap();
        let err = Store::open(dir.path()).err().expect("refused");
        assert!(
            matches!(err, StoreError::NewerFormat { found, .. } if found == CURRENT + 1),
            "{err}"
        );
        assert!(err.to_string().contains("newer version"), "{err}");
        std::fs::write(&file, "two\n").unwrap();
        let err = check(dir.path()).unwrap_err().to_string();
        assert!(err.contains("pigeonhole-format") && err.contains("two"), "{err}");
    }
}
