//! Reading the old servers' SQLite files: read-only, every table checked for the columns
//! this import reads before a row is read, rows as values by column name.
//!
//! The originals stored their data through Haskell's `persistent`: tables and columns are
//! the snake_case of the entity and field names with an `id INTEGER PRIMARY KEY`; uuids are
//! 16-byte BLOBs; `UTCTime` is text (`2021-03-04T05:06:07.123456`, older versions
//! `2021-03-04 05:06:07.123456 UTC`); `Day` and `TimeOfDay` are text; `ByteString` fields
//! and the hand-written enums (item and trigger types, e-mail status) are BLOBs; JSON fields
//! (recurrence, time zone, permission sets) are text; `Bool` is an integer.

use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// One row: its values by column name.
#[derive(Clone, Debug, Default)]
pub struct Row(pub Vec<(String, Value)>);

impl Row {
    /// The value of `column` (NULL when the table has no such column).
    pub fn get(&self, column: &str) -> &Value {
        self.0
            .iter()
            .find(|(name, _)| name == column)
            .map(|(_, v)| v)
            .unwrap_or(&Value::Null)
    }
}

/// An old server's database, open read-only.
pub struct OldDatabase {
    conn: Connection,
    /// What the file should be ("an Intray database"), for error messages.
    what: &'static str,
}

impl OldDatabase {
    pub fn open(path: &Path, what: &'static str) -> Result<OldDatabase, String> {
        if !path.is_file() {
            return Err(format!("{} is not a file", path.display()));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)
            .map_err(|e| format!("cannot open {} as SQLite: {e}", path.display()))?;
        // Opening is lazy: the first query says whether this is a database at all.
        conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
            .map_err(|e| format!("{} is not a SQLite database: {e}", path.display()))?;
        Ok(OldDatabase { conn, what })
    }

    /// The columns of `table` (empty when there is no such table).
    pub fn columns(&self, table: &str) -> Result<Vec<String>, String> {
        let mut stmt = self
            .conn
            .prepare(&format!("PRAGMA table_info(\"{table}\")"))
            .map_err(|e| format!("cannot read the schema: {e}"))?;
        let names = stmt
            .query_map([], |r| r.get::<_, String>(1))
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read the schema: {e}"))?;
        Ok(names)
    }

    pub fn has_table(&self, table: &str) -> Result<bool, String> {
        Ok(!self.columns(table)?.is_empty())
    }

    /// Checks that `table` exists with every column of `columns`.
    pub fn require(&self, table: &str, columns: &[&str]) -> Result<(), String> {
        let have = self.columns(table)?;
        if have.is_empty() {
            return Err(format!("this is not {}: it has no table {table:?}", self.what));
        }
        if let Some(missing) = columns.iter().find(|c| !have.iter().any(|h| h == *c)) {
            return Err(format!(
                "this is not {} of a known version: the table {table:?} has no column {missing:?}",
                self.what
            ));
        }
        Ok(())
    }

    /// Every row of `table` (its columns that exist among `columns`), in the order they
    /// were inserted (`id`).
    pub fn rows(&self, table: &str, columns: &[&str]) -> Result<Vec<Row>, String> {
        let have = self.columns(table)?;
        let present: Vec<&str> = columns
            .iter()
            .copied()
            .filter(|c| have.iter().any(|h| h == c))
            .collect();
        if present.is_empty() {
            return Ok(Vec::new());
        }
        let list = present.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(",");
        let order = if have.iter().any(|h| h == "id") {
            " ORDER BY \"id\""
        } else {
            ""
        };
        let sql = format!("SELECT {list} FROM \"{table}\"{order}");
        let fail = |e: rusqlite::Error| format!("cannot read the table {table:?}: {e}");
        let mut stmt = self.conn.prepare(&sql).map_err(fail)?;
        let rows = stmt
            .query_map([], |r| {
                let mut row = Vec::with_capacity(present.len());
                for (i, c) in present.iter().enumerate() {
                    row.push(((*c).to_owned(), r.get::<_, Value>(i)?));
                }
                Ok(Row(row))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(fail)?;
        Ok(rows)
    }
}
