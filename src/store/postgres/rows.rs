//! Conversions between columns and domain values (see the conventions at the top of
//! `migrations/0001_schema.sql`): instants as (secs, nanos), unsigned counters as bigint.

use super::sql::Sql;
use super::{PgError, PgResult};
use crate::domain::wire::Timestamp;
use crate::store::api::PageSize;
use tokio_postgres::Row;

/// The nanoseconds column of an instant: `u32` as `integer` (the schema checks the range).
pub(super) fn nanos(t: Timestamp) -> PgResult<i32> {
    i32::try_from(t.nanos).map_err(|_| PgError::Corrupt(format!("nanoseconds {} out of range", t.nanos)))
}

/// The instant in columns `<name>_secs` and `<name>_nanos` of `row`.
pub(super) fn instant(row: &Row, name: &str) -> PgResult<Timestamp> {
    let secs: i64 = row.try_get(format!("{name}_secs").as_str())?;
    let nanos: i32 = row.try_get(format!("{name}_nanos").as_str())?;
    let nanos = u32::try_from(nanos).map_err(|_| PgError::Corrupt(format!("{name}: negative nanoseconds")))?;
    Ok(Timestamp::from_unix(secs, nanos))
}

/// The optional instant in `<name>_secs` and `<name>_nanos`.
pub(super) fn optional_instant(row: &Row, name: &str) -> PgResult<Option<Timestamp>> {
    let secs: Option<i64> = row.try_get(format!("{name}_secs").as_str())?;
    let nanos: Option<i32> = row.try_get(format!("{name}_nanos").as_str())?;
    match (secs, nanos) {
        (Some(secs), Some(nanos)) => {
            let nanos = u32::try_from(nanos).map_err(|_| PgError::Corrupt(format!("{name}: negative nanoseconds")))?;
            Ok(Some(Timestamp::from_unix(secs, nanos)))
        }
        (None, None) => Ok(None),
        _ => Err(PgError::Corrupt(format!("{name}: half an instant"))),
    }
}

/// Text kept as its UTF-8 bytes (`bytea`, migration 0003: a `text` value cannot hold
/// U+0000): column `name` of `row`.
pub(super) fn text_of_bytes(row: &Row, name: &str) -> PgResult<String> {
    let bytes: Vec<u8> = row.try_get(name)?;
    String::from_utf8(bytes).map_err(|_| PgError::Corrupt(format!("{name}: not UTF-8")))
}

/// An unsigned 64-bit counter as `bigint`.
pub(super) fn to_bigint(n: u64, what: &str) -> PgResult<i64> {
    i64::try_from(n).map_err(|_| PgError::Corrupt(format!("{what} {n} is beyond a bigint")))
}

/// A `bigint` column read back as an unsigned counter.
pub(super) fn from_bigint<T: TryFrom<i64>>(n: i64, what: &str) -> PgResult<T> {
    T::try_from(n).map_err(|_| PgError::Corrupt(format!("{what} {n} out of range")))
}

/// One page ([`PageSize`]) of an account's listing: `columns` of `table`, ordered by the
/// columns `keys`, after the row `after` (from the first with `None`; none when `after` is
/// not the account's any more). The page's bytes are those of the column `data`: rows after
/// the one that fills the page are not sent; the caller decodes the rows with
/// [`PageSize::fill`], which agrees on where the page ends.
#[allow(
    clippy::too_many_arguments,
    reason = "one query's parts, all of them strings of the caller's constants"
)]
pub(super) async fn page(
    client: &impl Sql,
    table: &str,
    columns: &str,
    keys: &str,
    data: &str,
    account: uuid::Uuid,
    after: Option<uuid::Uuid>,
    size: PageSize,
) -> PgResult<Vec<Row>> {
    let limit = self::limit(size.items.max(1));
    let bytes = self::limit(size.bytes);
    let from = |condition: &str| {
        format!(
            "SELECT {columns} FROM (SELECT {columns}, row_number() OVER w AS n, \
             sum(octet_length({data})) OVER w - octet_length({data}) AS before \
             FROM {table} WHERE account = $1 {condition} \
             WINDOW w AS (ORDER BY {keys} ROWS UNBOUNDED PRECEDING) ORDER BY {keys} LIMIT $2) page \
             WHERE n = 1 OR before < $3 ORDER BY n"
        )
    };
    Ok(match after {
        None => client.fetch_all(&from(""), &[&account, &limit, &bytes]).await?,
        Some(after) => {
            let sql = from(&format!(
                "AND ({keys}) > (SELECT {keys} FROM {table} WHERE id = $4 AND account = $1)"
            ));
            client.fetch_all(&sql, &[&account, &limit, &bytes, &after]).await?
        }
    })
}

/// A `LIMIT` of `n` rows: more than a bigint holds means all of them.
pub(super) fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
