//! Reading the old servers' SQLite files, which are data from outside: opened read-only and
//! checked before any query reads a row of them.
//!
//! - The file's schema is read first (`sqlite_master`, which runs nothing the file defines):
//!   a view, a trigger, a virtual table or a generated column anywhere in it refuses the
//!   file (the originals made none, and a view can be made to run for ever, e.g. a
//!   recursive one).
//! - SQLite's limits are lowered: no value larger than [`VALUE_CAP`] is materialised (the
//!   read fails with SQLITE_TOOBIG, reported with the table, row and column), short SQL,
//!   no attached databases, no worker threads. `query_only` and `trusted_schema=OFF`.
//! - A progress handler interrupts any statement once [`TIME_BUDGET`] has passed since the
//!   file was opened (a backstop: the queries here are plain scans of tables by rowid).
//! - Every column the import needs is checked before a row is read: one that is missing is
//!   an error naming the table and the column, never a NULL.
//!
//! The originals stored their data through Haskell's `persistent`: tables and columns are
//! the snake_case of the entity and field names with an `id INTEGER PRIMARY KEY`; uuids are
//! 16-byte BLOBs; `UTCTime` is text (`2021-03-04T05:06:07.123456`, older versions
//! `2021-03-04 05:06:07.123456 UTC`); `Day` and `TimeOfDay` are text; `ByteString` fields
//! and the hand-written enums (item and trigger types, e-mail status) are BLOBs; JSON fields
//! (recurrence, time zone) are text; a `Set`/list field is persistent's JSON of its values,
//! each tagged with its kind (`["sPermitAdd"]`); `Bool` is an integer.

use super::error::FileError;
use rusqlite::limits::Limit;
use rusqlite::types::Value;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The largest value (one column of one row) read: larger is an error naming it. Pigeonhole
/// takes items of up to 16 MiB by default; Intray had no limit of its own.
pub const VALUE_CAP: usize = 64 * 1024 * 1024;

/// How long all the statements on one file may run together before they are interrupted.
pub const TIME_BUDGET: Duration = Duration::from_secs(30 * 60);

/// One row: the values of the columns asked for (`None`: an optional column the table does
/// not have).
#[derive(Clone, Debug, Default)]
pub struct Row(pub Vec<(String, Option<Value>)>);

const NULL: Value = Value::Null;

impl Row {
    /// The value of `column`; NULL for an optional column the table does not have (a needed
    /// one is always there: [`OldDatabase::rows`] checks).
    pub fn get(&self, column: &str) -> &Value {
        self.0
            .iter()
            .find(|(name, _)| name == column)
            .and_then(|(_, v)| v.as_ref())
            .unwrap_or(&NULL)
    }

    /// Whether the table has `column` (asked for as optional).
    pub fn has(&self, column: &str) -> bool {
        self.0.iter().any(|(name, v)| name == column && v.is_some())
    }

    /// A row of the given values (for tests).
    pub fn of(pairs: &[(&str, Value)]) -> Row {
        Row(pairs.iter().map(|(k, v)| (k.to_string(), Some(v.clone()))).collect())
    }
}

/// An old server's database, open read-only.
pub struct OldDatabase {
    conn: Connection,
    /// What the file should be ("an Intray database"), for error messages.
    what: &'static str,
    /// The file's tables and their columns.
    tables: BTreeMap<String, Vec<String>>,
}

fn limits(conn: &Connection) -> rusqlite::Result<()> {
    for (limit, value) in [
        (Limit::SQLITE_LIMIT_LENGTH, VALUE_CAP as i32),
        (Limit::SQLITE_LIMIT_SQL_LENGTH, 100_000),
        (Limit::SQLITE_LIMIT_COLUMN, 2000),
        (Limit::SQLITE_LIMIT_EXPR_DEPTH, 100),
        (Limit::SQLITE_LIMIT_COMPOUND_SELECT, 2),
        (Limit::SQLITE_LIMIT_VDBE_OP, 100_000),
        (Limit::SQLITE_LIMIT_FUNCTION_ARG, 8),
        (Limit::SQLITE_LIMIT_ATTACHED, 0),
        (Limit::SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 100),
        (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, 16),
        (Limit::SQLITE_LIMIT_TRIGGER_DEPTH, 1),
        (Limit::SQLITE_LIMIT_WORKER_THREADS, 0),
    ] {
        conn.set_limit(limit, value)?;
    }
    Ok(())
}

impl OldDatabase {
    pub fn open(path: &Path, what: &'static str) -> Result<OldDatabase, String> {
        OldDatabase::open_within(path, what, TIME_BUDGET)
    }

    /// [`OldDatabase::open`] with another time budget (the tests use a short one).
    pub fn open_within(path: &Path, what: &'static str, budget: Duration) -> Result<OldDatabase, String> {
        if !path.is_file() {
            return Err(format!("{} is not a file", path.display()));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn = Connection::open_with_flags(path, flags)
            .map_err(|e| format!("cannot open {} as SQLite: {e}", path.display()))?;
        let setup = |e: rusqlite::Error| format!("cannot set up SQLite for {}: {e}", path.display());
        limits(&conn).map_err(setup)?;
        let started = Instant::now();
        conn.progress_handler(1_000, Some(move || started.elapsed() > budget))
            .map_err(setup)?;
        // Opening is lazy: the first statement says whether this is a database at all.
        let not_sqlite = |e: rusqlite::Error| format!("{} is not a SQLite database: {e}", path.display());
        conn.execute_batch(
            "PRAGMA query_only = ON; PRAGMA trusted_schema = OFF; PRAGMA mmap_size = 0; PRAGMA cell_size_check = ON;",
        )
        .map_err(not_sqlite)?;
        let schema: Vec<(String, String, Option<String>)> = {
            let mut stmt = conn
                .prepare(r#"SELECT "type", "name", "sql" FROM "sqlite_master""#)
                .map_err(not_sqlite)?;
            let rows = stmt
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(not_sqlite)?;
            rows
        };
        let refuse = |why: String| format!("{}: {why}; refused before anything was read", path.display());
        let mut names = Vec::new();
        for (kind, name, sql) in schema {
            match kind.as_str() {
                "view" => {
                    return Err(refuse(format!(
                        "{name:?} is a view, not a table ({} has no views)",
                        what
                    )))
                }
                "trigger" => return Err(refuse(format!("the file has a trigger ({name:?}; {} has none)", what))),
                "table" => {
                    let virtual_table = sql
                        .as_deref()
                        .map(|s| s.trim_start().to_ascii_uppercase().starts_with("CREATE VIRTUAL"))
                        .unwrap_or(false);
                    if virtual_table {
                        return Err(refuse(format!("{name:?} is a virtual table")));
                    }
                    names.push(name);
                }
                _ => {}
            }
        }
        let mut tables = BTreeMap::new();
        for name in names {
            let columns = table_columns(&conn, &name).map_err(not_sqlite)?;
            if let Some((column, _)) = columns.iter().find(|(_, generated)| *generated) {
                return Err(refuse(format!(
                    "the column {column:?} of {name:?} is generated or hidden ({what} has none)"
                )));
            }
            tables.insert(name, columns.into_iter().map(|(c, _)| c).collect());
        }
        Ok(OldDatabase { conn, what, tables })
    }

    /// The columns of `table` (empty when there is no such table).
    pub fn columns(&self, table: &str) -> &[String] {
        self.tables.get(table).map(Vec::as_slice).unwrap_or(&[])
    }

    pub fn has_table(&self, table: &str) -> bool {
        self.tables.contains_key(table)
    }

    pub fn has_column(&self, table: &str, column: &str) -> bool {
        self.columns(table).iter().any(|c| c == column)
    }

    /// Checks that `table` exists with every column of `columns`.
    pub fn require(&self, table: &str, columns: &[&str]) -> Result<(), FileError> {
        if !self.has_table(table) {
            return Err(FileError::MissingTable {
                what: self.what,
                table: table.to_owned(),
            });
        }
        if let Some(missing) = columns.iter().find(|c| !self.has_column(table, c)) {
            return Err(self.missing(table, missing));
        }
        Ok(())
    }

    /// The error for a column the import needs that `table` does not have.
    pub fn missing(&self, table: &str, column: &str) -> FileError {
        FileError::MissingColumn {
            what: self.what,
            table: table.to_owned(),
            column: column.to_owned(),
        }
    }

    /// Every row of `table` in the order they were inserted (`id`): the columns `needed`
    /// (each must be there: else an error naming the table and column) and those of
    /// `optional` that the table has. Holds them all: for the small tables (accounts, keys);
    /// [`OldDatabase::each_row`] streams.
    pub fn rows(&self, table: &str, needed: &[&str], optional: &[&str]) -> Result<Vec<Row>, FileError> {
        let mut out = Vec::new();
        self.each_row(table, needed, optional, |_, row| {
            out.push(row);
            Ok::<(), FileError>(())
        })?;
        Ok(out)
    }

    /// Hands each row of `table` to `each` with its number (from 1), in the order they were
    /// inserted (`id`), one at a time: only the row being handled is in memory. The columns
    /// are those of [`OldDatabase::rows`]; `each`'s error stops the scan and is answered.
    pub fn each_row<E: From<FileError>>(
        &self,
        table: &str,
        needed: &[&str],
        optional: &[&str],
        mut each: impl FnMut(usize, Row) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut scan = self.scan(table, needed, optional, None)?;
        let mut rows = scan.rows()?;
        while let Some((n, row)) = rows.next_row()? {
            each(n, row)?;
        }
        Ok(())
    }

    /// A scan of `table` (the columns of [`OldDatabase::rows`]) in the order of the column
    /// `order_by` (then `id`), or of `id` when `None`, to be read a row at a time with
    /// [`Scan::rows`]; several scans can be read side by side (a merge of tables sorted
    /// alike). SQLite sorts within its own cache budget, spilling to a temporary file.
    pub fn scan(
        &self,
        table: &str,
        needed: &[&str],
        optional: &[&str],
        order_by: Option<&str>,
    ) -> Result<Scan<'_>, FileError> {
        self.require(table, needed)?;
        let present: Vec<String> = needed
            .iter()
            .chain(optional.iter().filter(|c| self.has_column(table, c)))
            .map(|c| c.to_string())
            .collect();
        let absent: Vec<String> = optional
            .iter()
            .filter(|c| !self.has_column(table, c))
            .map(|c| c.to_string())
            .collect();
        let list = present.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(",");
        let list = if list.is_empty() { "1".to_owned() } else { list };
        let mut order: Vec<String> = order_by.iter().map(|c| format!("\"{c}\"")).collect();
        if self.has_column(table, "id") {
            order.push("\"id\"".into());
        }
        let order = match order.is_empty() {
            true => String::new(),
            false => format!(" ORDER BY {}", order.join(",")),
        };
        let sql = format!("SELECT {list} FROM \"{table}\"{order}");
        let stmt = self.conn.prepare(&sql).map_err(|e| read_failed(table, e))?;
        Ok(Scan {
            db: self,
            table: table.to_owned(),
            stmt,
            present,
            absent,
        })
    }

    /// The row of `table` whose `id` is `id` (the columns of [`OldDatabase::rows`]), if any.
    pub fn row_by_id(
        &self,
        table: &str,
        needed: &[&str],
        optional: &[&str],
        id: i64,
    ) -> Result<Option<Row>, FileError> {
        self.require(table, needed)?;
        let present: Vec<&str> = needed
            .iter()
            .chain(optional.iter().filter(|c| self.has_column(table, c)))
            .copied()
            .collect();
        let list = present.iter().map(|c| format!("\"{c}\"")).collect::<Vec<_>>().join(",");
        let sql = format!("SELECT {list} FROM \"{table}\" WHERE \"id\" = ?1");
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| read_failed(table, e))?;
        let mut rows = stmt.query([id]).map_err(|e| read_failed(table, e))?;
        let row = match rows.next() {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) => return Err(read_failed(table, e)),
        };
        let mut values = Vec::new();
        for (i, c) in present.iter().enumerate() {
            let v = row.get::<_, Value>(i).map_err(|e| match is_too_big(&e) {
                true => FileError::Other(format!(
                    "{table} (id {id}): a value is larger than {} MiB, the most one value may be",
                    VALUE_CAP >> 20
                )),
                false => read_failed(table, e),
            })?;
            values.push(((*c).to_owned(), Some(v)));
        }
        values.extend(
            optional
                .iter()
                .filter(|c| !self.has_column(table, c))
                .map(|c| ((*c).to_owned(), None)),
        );
        Ok(Some(Row(values)))
    }

    /// A value that two rows of the tables `first` and `second` have in `column` (each
    /// table's own repeats included), if any: see [`OldDatabase::repeated`].
    pub fn repeated_across(&self, first: &str, second: &str, column: &str) -> Result<Option<Value>, FileError> {
        self.require(first, &[column])?;
        self.require(second, &[column])?;
        let sql = format!(
            "SELECT \"{column}\" FROM (SELECT \"{column}\" FROM \"{first}\" UNION ALL SELECT \"{column}\" FROM \"{second}\") \
             GROUP BY \"{column}\" HAVING count(*) > 1 LIMIT 1"
        );
        match self.conn.query_row(&sql, [], |r| r.get::<_, Value>(0)) {
            Ok(v) => Ok(Some(v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(read_failed(first, e)),
        }
    }

    /// A value of `column` that two rows of `table` have, if any. SQLite finds it (a sort
    /// that spills to a temporary file within its own cache budget), so that no list of all
    /// the values is held here.
    pub fn repeated(&self, table: &str, column: &str) -> Result<Option<Value>, FileError> {
        self.require(table, &[column])?;
        let sql = format!("SELECT \"{column}\" FROM \"{table}\" GROUP BY \"{column}\" HAVING count(*) > 1 LIMIT 1");
        match self.conn.query_row(&sql, [], |r| r.get::<_, Value>(0)) {
            Ok(v) => Ok(Some(v)),
            Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(read_failed(table, e)),
        }
    }

    /// The error for the row after the `read` rows of `table` that were read: which column
    /// of it holds a value over the cap (found by reading only that row again).
    fn too_big(&self, table: &str, columns: &[&str], read: usize) -> FileError {
        let n = read + 1;
        let cap = VALUE_CAP / (1024 * 1024);
        let id: Option<i64> = self
            .conn
            .query_row(
                &format!("SELECT \"id\" FROM \"{table}\" ORDER BY \"id\" LIMIT 1 OFFSET {read}"),
                [],
                |r| r.get(0),
            )
            .ok();
        let column = id.and_then(|id| {
            columns.iter().find(|c| {
                let sql = format!("SELECT \"{c}\" FROM \"{table}\" WHERE \"id\" = ?1");
                match self.conn.query_row(&sql, [id], |r| r.get::<_, Value>(0)) {
                    Err(e) => is_too_big(&e),
                    Ok(_) => false,
                }
            })
        });
        let at = match id {
            Some(id) => format!("{table} row {n} (id {id})"),
            None => format!("{table} row {n}"),
        };
        FileError::Other(match column {
            Some(c) => format!("{at}: the value of {c:?} is larger than {cap} MiB, the most one value may be"),
            None => format!("{at}: a value is larger than {cap} MiB, the most one value may be"),
        })
    }
}

/// A prepared scan of a table ([`OldDatabase::scan`]).
pub struct Scan<'db> {
    db: &'db OldDatabase,
    table: String,
    stmt: rusqlite::Statement<'db>,
    present: Vec<String>,
    absent: Vec<String>,
}

impl Scan<'_> {
    /// Runs the scan: its rows, read one at a time.
    pub fn rows(&mut self) -> Result<ScanRows<'_>, FileError> {
        let Scan {
            db,
            table,
            stmt,
            present,
            absent,
        } = self;
        let rows = stmt.query([]).map_err(|e| read_failed(table, e))?;
        Ok(ScanRows {
            db,
            table,
            rows,
            present,
            absent,
            read: 0,
        })
    }
}

/// The rows of a running [`Scan`].
pub struct ScanRows<'s> {
    db: &'s OldDatabase,
    table: &'s str,
    rows: rusqlite::Rows<'s>,
    present: &'s [String],
    absent: &'s [String],
    read: usize,
}

impl ScanRows<'_> {
    /// The next row with its number (from 1), or `None` after the last one.
    pub fn next_row(&mut self) -> Result<Option<(usize, Row)>, FileError> {
        let columns: Vec<&str> = self.present.iter().map(String::as_str).collect();
        let row = match self.rows.next() {
            Ok(Some(row)) => row,
            Ok(None) => return Ok(None),
            Err(e) if is_too_big(&e) => return Err(self.db.too_big(self.table, &columns, self.read)),
            Err(e) => return Err(read_failed(self.table, e)),
        };
        let mut values = Vec::with_capacity(self.present.len() + self.absent.len());
        for (i, c) in self.present.iter().enumerate() {
            let v = match row.get::<_, Value>(i) {
                Ok(v) => v,
                Err(e) if is_too_big(&e) => return Err(self.db.too_big(self.table, &columns, self.read)),
                Err(e) => return Err(read_failed(self.table, e)),
            };
            values.push((c.clone(), Some(v)));
        }
        values.extend(self.absent.iter().map(|c| (c.clone(), None)));
        self.read += 1;
        Ok(Some((self.read, Row(values))))
    }
}

/// The error for a statement on `table` that failed.
fn read_failed(table: &str, e: rusqlite::Error) -> FileError {
    FileError::Other(match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::OperationInterrupted => {
            format!("reading the table {table:?} was stopped: the file took longer than its time budget")
        }
        e => format!("cannot read the table {table:?}: {e}"),
    })
}

fn is_too_big(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::TooBig)
}

/// The columns of `table`, each with whether it is generated (computed when read: the
/// originals made none).
fn table_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<(String, bool)>> {
    let mut stmt = conn.prepare("SELECT \"name\", \"hidden\" FROM pragma_table_xinfo(?1)")?;
    let names = stmt
        .query_map([table], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? != 0)))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(sql: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.sqlite3");
        Connection::open(&path).unwrap().execute_batch(sql).unwrap();
        (dir, path)
    }

    #[test]
    fn views_triggers_and_virtual_tables_are_refused_before_any_read() {
        let (_d, p) = file(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT);
             CREATE VIEW v AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c;",
        );
        let err = OldDatabase::open(&p, "an Intray database").err().unwrap();
        assert!(err.contains("\"v\" is a view"), "{err}");
        let (_d, p) = file(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT);
             CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END;",
        );
        let err = OldDatabase::open(&p, "an Intray database").err().unwrap();
        assert!(err.contains("trigger (\"tr\""), "{err}");
        let (_d, p) = file("CREATE TABLE t(id INTEGER PRIMARY KEY, a BLOB AS (zeroblob(1000)));");
        let err = OldDatabase::open(&p, "an Intray database").err().unwrap();
        assert!(err.contains("\"a\" of \"t\" is generated"), "{err}");
        let (_d, p) = file("CREATE VIRTUAL TABLE t USING dbstat;");
        let err = OldDatabase::open(&p, "an Intray database").err().unwrap();
        assert!(err.contains("virtual table"), "{err}");
    }

    #[test]
    fn a_missing_needed_column_is_named_and_optional_ones_are_absent() {
        let (_d, p) = file("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT); INSERT INTO t(a) VALUES ('x');");
        let db = OldDatabase::open(&p, "an Intray database").unwrap();
        let err = db.rows("t", &["a", "b"], &[]).unwrap_err();
        assert_eq!(
            err,
            FileError::MissingColumn {
                what: "an Intray database",
                table: "t".into(),
                column: "b".into()
            }
        );
        assert!(err.to_string().contains("the table \"t\" has no column \"b\""), "{err}");
        let rows = db.rows("t", &["a"], &["b"]).unwrap();
        assert_eq!(rows[0].get("a"), &Value::Text("x".into()));
        assert!(!rows[0].has("b"));
        assert_eq!(rows[0].get("b"), &Value::Null);
        let err = db.rows("u", &["a"], &[]).unwrap_err();
        assert!(
            matches!(&err, FileError::MissingTable { table, .. } if table == "u"),
            "{err:?}"
        );
        assert!(err.to_string().contains("no table \"u\""));
    }

    #[test]
    fn rows_stream_one_at_a_time_and_repeated_values_are_found() {
        let (_d, p) = file(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a BLOB);
             INSERT INTO t(a) VALUES (x'01'), (x'02'), (x'03');",
        );
        let db = OldDatabase::open(&p, "an Intray database").unwrap();
        let mut seen = Vec::new();
        let stopped = db.each_row("t", &["a"], &[], |n, row| {
            seen.push((n, row.get("a").clone()));
            match n {
                2 => Err(FileError::Other("stop at row 2".to_owned())),
                _ => Ok(()),
            }
        });
        assert_eq!(stopped.unwrap_err(), FileError::Other("stop at row 2".to_owned()));
        assert_eq!(seen, [(1, Value::Blob(vec![1])), (2, Value::Blob(vec![2]))]);
        assert_eq!(db.repeated("t", "a").unwrap(), None);
        let (_d, p) = file(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a BLOB);
             INSERT INTO t(a) VALUES (x'01'), (x'02'), (x'01');",
        );
        let db = OldDatabase::open(&p, "an Intray database").unwrap();
        assert_eq!(db.repeated("t", "a").unwrap(), Some(Value::Blob(vec![1])));
        assert!(db
            .repeated("t", "b")
            .unwrap_err()
            .to_string()
            .contains("no column \"b\""));
    }

    #[test]
    fn statements_stop_when_the_time_budget_is_spent() {
        let (_d, p) = file(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT);
             WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000)
             INSERT INTO t(a) SELECT 'row ' || x FROM c;",
        );
        let db = OldDatabase::open_within(&p, "an Intray database", Duration::ZERO).unwrap();
        let err = db.rows("t", &["a"], &[]).unwrap_err();
        assert!(err.to_string().contains("took longer than its time budget"), "{err}");
        let db = OldDatabase::open(&p, "an Intray database").unwrap();
        assert_eq!(db.rows("t", &["a"], &[]).unwrap().len(), 20000);
    }

    #[test]
    fn a_value_over_the_cap_is_an_error_naming_table_row_and_column() {
        let sql = format!(
            "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b BLOB);
             INSERT INTO t(a, b) VALUES ('x', x'00');
             INSERT INTO t(a, b) VALUES ('y', zeroblob({}));",
            VALUE_CAP + 1
        );
        let (_d, p) = file(&sql);
        let db = OldDatabase::open(&p, "an Intray database").unwrap();
        let err = db.rows("t", &["a", "b"], &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("t row 2 (id 2): the value of \"b\" is larger than 64 MiB"),
            "{err}"
        );
    }
}
