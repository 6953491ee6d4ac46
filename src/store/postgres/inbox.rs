//! The inbox service's items (`inbox_items`) and idempotency keys
//! (`inbox_idempotency_keys`): the operations of the sled store's `InboxStore`, with the same
//! names and arguments, async, each one transaction. The item count is not kept: it is
//! counted (an index on the account leads the listing index).

use super::accounts::{PgAccounts, Service};
use super::rows::{self, from_bigint, instant};
use super::{transaction, PgError, PgResult};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::inbox::sync::ItemChanges;
use crate::store::inbox::AddOutcome;
use crate::store::Written;
use deadpool_postgres::Pool;
use tokio_postgres::{Row, Transaction};
use uuid::Uuid;

const ITEM_COLUMNS: &str = "id, kind, data, created_secs, created_nanos";
const ORDER: &str = "ORDER BY created_secs, created_nanos, seq";

fn item_from(row: &Row) -> PgResult<InboxItem> {
    let kind: String = row.try_get("kind")?;
    Ok(InboxItem {
        id: row.try_get("id")?,
        kind: ItemType::parse(&kind).ok_or_else(|| PgError::Corrupt(format!("unknown item type {kind:?}")))?,
        data: row.try_get("data")?,
        created: instant(row, "created")?,
    })
}

/// The inbox service's data.
#[derive(Clone)]
pub struct PgInbox {
    pool: Pool,
    pub accounts: PgAccounts,
}

impl PgInbox {
    pub(super) fn new(pool: Pool) -> PgInbox {
        PgInbox {
            accounts: PgAccounts::new(pool.clone(), Service::Inbox),
            pool,
        }
    }

    async fn count_in(tx: &Transaction<'_>, account: Uuid) -> PgResult<u64> {
        let n: i64 = tx
            .query_one("SELECT count(*) FROM inbox_items WHERE account = $1", &[&account])
            .await?
            .try_get(0)?;
        from_bigint(n, "item count")
    }

    async fn insert(tx: &Transaction<'_>, account: Uuid, item: &InboxItem) -> PgResult<()> {
        let nanos = rows::nanos(item.created)?;
        tx.execute(
            "INSERT INTO inbox_items (id, account, kind, data, created_secs, created_nanos) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &item.id,
                &account,
                &item.kind.as_str(),
                &item.data,
                &item.created.secs,
                &nanos,
            ],
        )
        .await?;
        Ok(())
    }

    pub async fn count(&self, account: Uuid) -> PgResult<u64> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .query_one("SELECT count(*) FROM inbox_items WHERE account = $1", &[&account])
            .await?
            .try_get(0)?;
        from_bigint(n, "item count")
    }

    /// Items of every account together.
    pub async fn total_items(&self) -> PgResult<u64> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .query_one("SELECT count(*) FROM inbox_items", &[])
            .await?
            .try_get(0)?;
        from_bigint(n, "item count")
    }

    /// Stores `item` for `account` unless the account already has `max_items` items
    /// (`None`: no limit). With an idempotency key used before, stores nothing and answers
    /// the first item's id (also when the account is at its limit). Under the account's row
    /// lock: the count, the limit and the key are decided with the account's other writes
    /// held off. An account deleted meanwhile is a foreign-key error (SQLSTATE 23503).
    pub async fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> PgResult<Written<AddOutcome>> {
        transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            if let Some(key) = idempotency {
                let first = tx
                    .query_opt(
                        "SELECT item FROM inbox_idempotency_keys WHERE account = $1 AND idempotency_key = $2",
                        &[&account, &key],
                    )
                    .await?;
                if let Some(row) = first {
                    return Ok(Written::unchanged(AddOutcome::Repeated(row.try_get(0)?)));
                }
            }
            let n = Self::count_in(&tx, account).await?;
            if max_items.is_some_and(|max| n >= max) {
                return Ok(Written::unchanged(AddOutcome::LimitReached));
            }
            Self::insert(&tx, account, item).await?;
            if let Some(key) = idempotency {
                tx.execute(
                    "INSERT INTO inbox_idempotency_keys (account, idempotency_key, item) VALUES ($1, $2, $3)",
                    &[&account, &key, &item.id],
                )
                .await?;
            }
            Ok(Written::committed(AddOutcome::Added(item.id)))
        })
    }

    pub async fn item(&self, account: Uuid, id: Uuid) -> PgResult<Option<InboxItem>> {
        let client = self.pool.get().await?;
        client
            .query_opt(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?
            .as_ref()
            .map(item_from)
            .transpose()
    }

    /// Deletes the account's item `id`; nothing happens when it has none such.
    pub async fn delete_item(&self, account: Uuid, id: Uuid) -> PgResult<Written<bool>> {
        let client = self.pool.get().await?;
        let n = client
            .execute(
                "DELETE FROM inbox_items WHERE id = $1 AND account = $2",
                &[&id, &account],
            )
            .await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// The account's items, oldest first.
    pub async fn items(&self, account: Uuid) -> PgResult<Vec<InboxItem>> {
        let client = self.pool.get().await?;
        client
            .query(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE account = $1 {ORDER}"),
                &[&account],
            )
            .await?
            .iter()
            .map(item_from)
            .collect()
    }

    /// The ids of the account's items, oldest first.
    pub async fn item_ids(&self, account: Uuid) -> PgResult<Vec<Uuid>> {
        let client = self.pool.get().await?;
        client
            .query(
                &format!("SELECT id FROM inbox_items WHERE account = $1 {ORDER}"),
                &[&account],
            )
            .await?
            .iter()
            .map(|row| Ok(row.try_get(0)?))
            .collect()
    }

    pub async fn first_item(&self, account: Uuid) -> PgResult<Option<InboxItem>> {
        let client = self.pool.get().await?;
        client
            .query_opt(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE account = $1 {ORDER} LIMIT 1"),
                &[&account],
            )
            .await?
            .as_ref()
            .map(item_from)
            .transpose()
    }

    /// Runs one sync atomically: `decide` sees the account's items as they are (under the
    /// account's row lock) and says what to delete and add. `decide` may be called again
    /// when the transaction is retried (the caller keeps its answer in a captured variable:
    /// the last call's is the one committed).
    pub async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn FnMut(&[InboxItem]) -> ItemChanges + Send),
    ) -> PgResult<Written<()>> {
        transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let items = tx
                .query(
                    &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE account = $1 {ORDER}"),
                    &[&account],
                )
                .await?
                .iter()
                .map(item_from)
                .collect::<PgResult<Vec<_>>>()?;
            let changes = decide(&items);
            if changes.delete.is_empty() && changes.add.is_empty() {
                return Ok(Written::unchanged(()));
            }
            if !changes.delete.is_empty() {
                tx.execute(
                    "DELETE FROM inbox_items WHERE account = $1 AND id = ANY($2)",
                    &[&account, &changes.delete],
                )
                .await?;
            }
            for item in &changes.add {
                Self::insert(&tx, account, item).await?;
            }
            Ok(Written::committed(()))
        })
    }

    /// Deletes the account and everything of it (items, access keys, idempotency keys: by
    /// the foreign keys' cascades) in one transaction. `false` when there was no such account.
    pub async fn delete_account(&self, account: Uuid) -> PgResult<Written<bool>> {
        let client = self.pool.get().await?;
        let n = client
            .execute("DELETE FROM inbox_accounts WHERE id = $1", &[&account])
            .await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }
}
