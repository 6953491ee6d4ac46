//! What goes wrong in moving in: [`MoveInError`], the one line `import-intray` /
//! `import-tickler` prints (and then nothing was written), and [`FileError`], what of the old
//! database does not read (the table, the column, the row and its value).

use crate::store::StoreError;
use std::fmt;
use std::path::PathBuf;

/// What of the old file cannot be moved in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileError {
    /// A table the import needs is not there: the file is not what it should be.
    MissingTable { what: &'static str, table: String },
    /// A column the import needs is not there: the file is of an unknown version.
    MissingColumn {
        what: &'static str,
        table: String,
        column: String,
    },
    /// A row that does not read: its table, its number (from 1), and why (the column and
    /// its value, or the unknown value).
    Row {
        table: &'static str,
        row: usize,
        why: String,
    },
    /// Anything else about the file: a table that cannot be read or took longer than its
    /// time budget, a value over the cap, a uuid in the file twice.
    Other(String),
}

impl FileError {
    /// The row `row` of `table` does not read, because of `why`.
    pub fn row(table: &'static str, row: usize, why: String) -> FileError {
        FileError::Row { table, row, why }
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileError::MissingTable { what, table } => write!(f, "this is not {what}: it has no table {table:?}"),
            FileError::MissingColumn { what, table, column } => write!(
                f,
                "this is not {what} of a known version: the table {table:?} has no column {column:?}"
            ),
            FileError::Row { table, row, why } => write!(f, "{table} row {row}: {why}"),
            FileError::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for FileError {}

/// Why moving in failed; nothing was written then.
#[derive(Debug)]
pub enum MoveInError {
    /// The file cannot be opened as an SQLite database, or is refused before anything is
    /// read (views, triggers): the line, naming the file.
    Unopenable(String),
    /// Something of the file does not read.
    File { file: PathBuf, error: FileError },
    /// Accounts or uuids that are here already, differently: each conflict.
    Conflicts(Vec<String>),
    /// The data directory cannot be found, prepared or opened, or a server runs on it: the
    /// line, naming it.
    DataDir(String),
    /// Writing to the data directory failed; `says_nothing_kept`: the line adds that nothing
    /// of the file was kept (`import-intray`'s wording, whose journal undoes the part written).
    Write { error: StoreError, says_nothing_kept: bool },
    /// The runtime that waits for the writes could not be started.
    Runtime(std::io::Error),
}

impl fmt::Display for MoveInError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveInError::Unopenable(line) | MoveInError::DataDir(line) => f.write_str(line),
            MoveInError::File { file, error } => write!(f, "{}: {error}; nothing was written", file.display()),
            MoveInError::Conflicts(all) => write!(f, "{}; nothing was written", all.join("; ")),
            MoveInError::Write {
                error,
                says_nothing_kept,
            } => {
                write!(f, "could not write to the data directory: {error}")?;
                if *says_nothing_kept {
                    f.write_str("; nothing of the file was kept")?;
                }
                Ok(())
            }
            MoveInError::Runtime(e) => write!(f, "cannot start the runtime: {e}"),
        }
    }
}

impl std::error::Error for MoveInError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MoveInError::File { error, .. } => Some(error),
            MoveInError::Write { error, .. } => Some(error),
            MoveInError::Runtime(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_names_what_does_not_read_and_says_nothing_was_written() {
        let file = |error| MoveInError::File {
            file: "/old/intray.sqlite3".into(),
            error,
        };
        assert_eq!(
            file(FileError::MissingColumn {
                what: "an Intray database",
                table: "user".into(),
                column: "name".into()
            })
            .to_string(),
            "/old/intray.sqlite3: this is not an Intray database of a known version: the table \"user\" has no \
             column \"name\"; nothing was written"
        );
        assert_eq!(
            file(FileError::MissingTable {
                what: "a Tickler database",
                table: "user".into()
            })
            .to_string(),
            "/old/intray.sqlite3: this is not a Tickler database: it has no table \"user\"; nothing was written"
        );
        assert_eq!(
            file(FileError::row("intray_item", 3, "unknown item type \"Video\"".into())).to_string(),
            "/old/intray.sqlite3: intray_item row 3: unknown item type \"Video\"; nothing was written"
        );
        assert_eq!(
            MoveInError::Conflicts(vec!["a".into(), "b".into()]).to_string(),
            "a; b; nothing was written"
        );
        let write = |says_nothing_kept| MoveInError::Write {
            error: StoreError::NotDurable,
            says_nothing_kept,
        };
        assert_eq!(
            write(true).to_string(),
            "could not write to the data directory: the database could not be flushed to disk; nothing of the \
             file was kept"
        );
        assert_eq!(
            write(false).to_string(),
            "could not write to the data directory: the database could not be flushed to disk"
        );
    }
}
