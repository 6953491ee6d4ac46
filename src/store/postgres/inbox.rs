//! The inbox service's items (`inbox_items`) and idempotency keys
//! (`inbox_idempotency_keys`): the operations of the sled store's `InboxStore`, with the same
//! names and arguments, async, each one transaction. Each account's item count is kept by
//! triggers in `inbox_item_counts` (migration 0005).

use super::accounts::{PgAccounts, Service};
use super::rows::{self, from_bigint, instant};
use super::sql::Sql;
use super::{transaction, PgError, PgResult};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::inbox::sync::ItemChanges;
use crate::store::api::{Feed, InboxItems, PageSize};
use crate::store::inbox::{AddOutcome, ImportOutcome};
use crate::store::{Result, WaitDurable, Written};
use deadpool_postgres::Pool;
use deadpool_postgres::Transaction;
use tokio_postgres::Row;
use uuid::Uuid;

pub(super) const ITEM_COLUMNS: &str = "id, kind, data, created_secs, created_nanos";
const ORDER_KEYS: &str = "created_secs, created_nanos, seq";
const ORDER: &str = "ORDER BY created_secs, created_nanos, seq";
/// An account's item count: the sum of its counter rows (migration 0005).
const COUNT_OF_ACCOUNT: &str = "SELECT coalesce(sum(items), 0)::bigint FROM inbox_item_counts WHERE account = $1";

pub(super) fn item_from(row: &Row) -> PgResult<InboxItem> {
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
        let n: i64 = tx.fetch_one(COUNT_OF_ACCOUNT, &[&account]).await?.try_get(0)?;
        from_bigint(n, "item count")
    }

    pub(super) async fn insert(tx: &impl Sql, account: Uuid, item: &InboxItem) -> PgResult<()> {
        let nanos = rows::nanos(item.created)?;
        tx.run(
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
}

/// What an import of `ids` into an account does: the ids new to it (as they will be
/// stored), the stored id of each whose own is another account's, and how many it has
/// already (one of several identical ids counts once).
#[derive(Default)]
struct Plan {
    new: std::collections::HashSet<Uuid>,
    renamed: std::collections::HashMap<Uuid, Uuid>,
    skipped: usize,
    count: u64,
}

impl PgInbox {
    /// The plan of an import (see [`Plan`]), in `tx` under the account's lock; or why
    /// nothing may be imported. An id another account has is stored under
    /// [`crate::store::own_id`], as the sled store does, so that the answer never
    /// tells whether an id exists elsewhere.
    async fn import_plan(
        tx: &Transaction<'_>,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
    ) -> PgResult<std::result::Result<Plan, ImportOutcome>> {
        let sorted = super::imports::sort_ids(tx, "inbox_items", account, ids).await?;
        let mut plan = Plan {
            new: sorted.new,
            renamed: sorted.renamed,
            skipped: sorted.kept,
            count: 0,
        };
        plan.count = Self::count_in(tx, account).await?;
        if !plan.new.is_empty() && max_items.is_some_and(|max| plan.count + plan.new.len() as u64 > max) {
            return Ok(Err(ImportOutcome::LimitReached));
        }
        Ok(Ok(plan))
    }

    /// Inserts `items` in one statement.
    async fn insert_all(tx: &Transaction<'_>, account: Uuid, items: &[InboxItem]) -> PgResult<()> {
        if items.is_empty() {
            return Ok(());
        }
        let ids: Vec<Uuid> = items.iter().map(|i| i.id).collect();
        let kinds: Vec<&str> = items.iter().map(|i| i.kind.as_str()).collect();
        let data: Vec<&[u8]> = items.iter().map(|i| i.data.as_slice()).collect();
        let secs: Vec<i64> = items.iter().map(|i| i.created.secs).collect();
        let nanos: Vec<i32> = items.iter().map(|i| rows::nanos(i.created)).collect::<PgResult<_>>()?;
        tx.run(
            "INSERT INTO inbox_items (id, account, kind, data, created_secs, created_nanos) \
             SELECT id, $1, kind, data, secs, nanos \
             FROM unnest($2::uuid[], $3::text[], $4::bytea[], $5::bigint[], $6::int[]) \
             WITH ORDINALITY AS t(id, kind, data, secs, nanos, n) ORDER BY n",
            &[&account, &ids, &kinds, &data, &secs, &nanos],
        )
        .await?;
        Ok(())
    }
}

/// Each write one transaction under the account's row lock.
#[async_trait::async_trait]
impl InboxItems for PgInbox {
    async fn count(&self, account: Uuid) -> Result<u64> {
        let client = self.pool.get().await?;
        let n: i64 = client.fetch_one(COUNT_OF_ACCOUNT, &[&account]).await?.try_get(0)?;
        Ok(from_bigint(n, "item count")?)
    }

    /// Items of every account together.
    async fn total_items(&self) -> Result<u64> {
        let client = self.pool.get().await?;
        let n: i64 = client
            .fetch_one("SELECT coalesce(sum(items), 0)::bigint FROM inbox_item_counts", &[])
            .await?
            .try_get(0)?;
        Ok(from_bigint(n, "item count")?)
    }

    /// Stores `item` for `account` unless the account already has `max_items` items
    /// (`None`: no limit). With an idempotency key used before, stores nothing and answers
    /// the first item's id (also when the account is at its limit). With a limit, under the
    /// account's row lock: the count, the limit and the key are decided with the account's
    /// other writes held off; without, no lock on the account: one statement (the key's
    /// `INSERT … ON CONFLICT DO NOTHING` and the item's `INSERT` together with a key). An account deleted meanwhile is a foreign-key error (SQLSTATE 23503).
    async fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        if idempotency.is_none() && max_items.is_none() {
            // nothing to decide first: one statement, committed on its own, with no lock
            // held while the commit is flushed (the foreign key still refuses an account
            // deleted meanwhile)
            let client = self.pool.get().await?;
            Self::insert(&client, account, item).await?;
            return Ok(Written::committed(AddOutcome::Added(item.id)));
        }
        if let (Some(key), None) = (idempotency, max_items) {
            // no limit to decide: the key's primary key decides alone, in one statement (an
            // addition with the same key in flight is waited for: its key counts once it is
            // committed, and is gone if it is rolled back)
            let client = self.pool.get().await?;
            let nanos = rows::nanos(item.created)?;
            let added = client
                .fetch_opt(
                    "WITH key AS (INSERT INTO inbox_idempotency_keys (account, idempotency_key, item) \
                     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING RETURNING item) \
                     INSERT INTO inbox_items (id, account, kind, data, created_secs, created_nanos) \
                     SELECT item, $1, $4, $5, $6, $7 FROM key RETURNING id",
                    &[
                        &account,
                        &key,
                        &item.id,
                        &item.kind.as_str(),
                        &item.data,
                        &item.created.secs,
                        &nanos,
                    ],
                )
                .await?;
            if added.is_some() {
                return Ok(Written::committed(AddOutcome::Added(item.id)));
            }
            let first = client
                .fetch_one(
                    "SELECT item FROM inbox_idempotency_keys WHERE account = $1 AND idempotency_key = $2",
                    &[&account, &key],
                )
                .await?;
            return Ok(Written::unchanged(AddOutcome::Repeated(first.try_get(0)?)));
        }
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            if let Some(key) = idempotency {
                let first = tx
                    .fetch_opt(
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
                tx.run(
                    "INSERT INTO inbox_idempotency_keys (account, idempotency_key, item) VALUES ($1, $2, $3)",
                    &[&account, &key, &item.id],
                )
                .await?;
            }
            Ok(Written::committed(AddOutcome::Added(item.id)))
        })?)
    }

    async fn item(&self, account: Uuid, id: Uuid) -> Result<Option<InboxItem>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE id = $1 AND account = $2"),
                &[&id, &account],
            )
            .await?
            .as_ref()
            .map(item_from)
            .transpose()?)
    }

    /// Deletes the account's item `id`; nothing happens when it has none such.
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let client = self.pool.get().await?;
        let n = client
            .run(
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
    async fn items(&self, account: Uuid) -> Result<Vec<InboxItem>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_all(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE account = $1 {ORDER}"),
                &[&account],
            )
            .await?
            .iter()
            .map(item_from)
            .collect::<PgResult<Vec<_>>>()?)
    }

    /// One page of the account's items after the item `after`, oldest first (empty
    /// when `after` is no longer there).
    async fn items_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<InboxItem>> {
        let client = self.pool.get().await?;
        let rows = rows::page(
            &client,
            "inbox_items",
            ITEM_COLUMNS,
            ORDER_KEYS,
            "data",
            account,
            after,
            size,
        )
        .await?;
        Ok(size.fill(rows.iter().map(item_from))?)
    }

    /// The ids of the account's items, oldest first.
    async fn item_ids(&self, account: Uuid) -> Result<Vec<Uuid>> {
        let client = self.pool.get().await?;
        client
            .fetch_all(
                &format!("SELECT id FROM inbox_items WHERE account = $1 {ORDER}"),
                &[&account],
            )
            .await?
            .iter()
            .map(|row| Ok(row.try_get(0)?))
            .collect()
    }

    async fn first_item(&self, account: Uuid) -> Result<Option<InboxItem>> {
        let client = self.pool.get().await?;
        Ok(client
            .fetch_opt(
                &format!("SELECT {ITEM_COLUMNS} FROM inbox_items WHERE account = $1 {ORDER} LIMIT 1"),
                &[&account],
            )
            .await?
            .as_ref()
            .map(item_from)
            .transpose()?)
    }

    /// Runs one sync atomically: `decide` sees the account's items as they are (under the
    /// account's row lock) and says what to delete and add. `decide` may be called again
    /// when the transaction is retried (the caller keeps its answer in a captured variable:
    /// the last call's is the one committed).
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [InboxItem]) -> ItemChanges + Send),
    ) -> Result<Written<()>> {
        Ok(transaction!(self, |tx| {
            self.accounts.lock(&tx, account).await?;
            let items = tx
                .fetch_all(
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
                tx.run(
                    "DELETE FROM inbox_items WHERE account = $1 AND id = ANY($2)",
                    &[&account, &changes.delete],
                )
                .await?;
            }
            for item in &changes.add {
                Self::insert(&tx, account, item).await?;
            }
            Ok(Written::committed(()))
        })?)
    }

    /// Deletes the account and everything of it (items, access keys, idempotency keys: by
    /// the foreign keys' cascades) in one transaction. `false` when there was no such account.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        let client = self.pool.get().await?;
        let n = client
            .run("DELETE FROM inbox_accounts WHERE id = $1", &[&account])
            .await?;
        Ok(if n == 1 {
            Written::committed(true)
        } else {
            Written::unchanged(false)
        })
    }

    /// What importing items of these `ids` would do now, writing nothing.
    fn check_import(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        new_before: u64,
    ) -> Result<ImportOutcome> {
        tokio::runtime::Handle::current().block_on(async {
            let mut client = self.pool.get().await?;
            let tx = client.transaction().await?;
            self.accounts.lock(&tx, account).await?;
            let max_items = max_items.map(|max| max.saturating_sub(new_before));
            Ok(match Self::import_plan(&tx, account, ids, max_items).await? {
                Ok(plan) => ImportOutcome::Imported {
                    added: plan.new.len(),
                    skipped: plan.skipped,
                },
                Err(refused) => refused,
            })
        })
    }

    /// Imports the items `items` hands over, all or nothing: one transaction under the
    /// account's row lock, the plan first, then the items in batches; it commits only when
    /// every new item of the plan came. Called from a blocking thread (the feed is
    /// synchronous): each step runs on the runtime of that thread.
    fn import_items(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        items: Feed<'_, InboxItem>,
        // one transaction: committed whole or not at all, so there are no batches to wait for
        _wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        let runtime = tokio::runtime::Handle::current();
        let mut client = runtime.block_on(self.pool.get())?;
        let tx = runtime.block_on(client.transaction())?;
        runtime.block_on(self.accounts.lock(&tx, account))?;
        let Plan {
            mut new,
            renamed,
            skipped,
            ..
        } = match runtime.block_on(Self::import_plan(&tx, account, ids, max_items))? {
            Ok(plan) => plan,
            Err(refused) => return Ok(refused),
        };
        let added = new.len();
        if added == 0 {
            return Ok(ImportOutcome::Imported { added, skipped });
        }
        let accept = |mut item: InboxItem| {
            item.id = renamed.get(&item.id).copied().unwrap_or(item.id);
            // the first of repeated ids is stored
            new.remove(&item.id).then_some(item)
        };
        let write = |batch: &[InboxItem]| runtime.block_on(Self::insert_all(&tx, account, batch));
        super::imports::feed_in_batches(items, accept, write)?;
        if !new.is_empty() {
            return Err(PgError::Corrupt("the import changed while it was read".into()).into());
        }
        runtime.block_on(tx.commit())?;
        Ok(ImportOutcome::Imported { added, skipped })
    }
}
