//! The inbox service's data, in its own tree (layouts in [`super::keys`]): besides the
//! accounts, items by account + created + sequence (`i`, the order of inbox.md §1.5, so
//! listing is one prefix scan) with an id index (`d`), the item count (`c`), access keys
//! (`k`) with the index of their secrets' digests (`h`), and idempotency keys (`p`,
//! inbox.md §3.13).

use super::accounts::AccountStore;
use super::api::{Feed, PageSize};
use super::imports::{Arrival, Batches};
use super::records::{self, raw};
use super::writer::{Batch, Tree};
use super::{keys, Result, StoreError, Stripes, Written};
use crate::domain::account::Account;
use crate::domain::inbox::models::InboxItem;
use crate::domain::inbox::sync::ItemChanges;
use crate::store::inbox::{AddOutcome, ImportOutcome};
use crate::store::WaitDurable;
use std::sync::Arc;
use uuid::Uuid;

/// What an import will do, decided before its first write.
#[derive(Default)]
struct Plan {
    /// The ids of the new items, as they are stored.
    new: std::collections::HashSet<Uuid>,
    /// Import id → stored id, for items whose id is another account's.
    renamed: std::collections::HashMap<Uuid, Uuid>,
    /// Items the account has already.
    skipped: usize,
    /// The account's item count.
    count: u64,
}

pub struct InboxStore {
    pub(in crate::store) tree: Tree,
    /// This service's accounts (the same object as a trait: `Accounts`).
    pub accounts: Arc<AccountStore>,
}

impl InboxStore {
    pub(in crate::store) fn new(tree: Tree, stripes: Arc<Stripes>) -> InboxStore {
        InboxStore {
            accounts: Arc::new(AccountStore::new(tree.clone(), stripes)),
            tree,
        }
    }

    /// The account's item count.
    fn count_of(&self, account: Uuid) -> Result<u64> {
        let k = keys::count(account);
        match self.tree.get(&k)? {
            Some(v) => raw::to_count(&k, &v),
            None => Ok(0),
        }
    }

    pub(in crate::store) fn put_count(&self, batch: &mut Batch, account: Uuid, n: u64) {
        batch.insert(keys::count(account), raw::count(n));
    }

    pub(in crate::store) fn put_item(&self, batch: &mut Batch, account: Uuid, item: &InboxItem) -> Result<()> {
        let place = keys::item_place(account, item.created, self.tree.next_id()?);
        batch.insert(keys::item(&place), records::item::encode(item));
        batch.insert(keys::item_id(item.id), place);
        Ok(())
    }

    /// The key of the account's item `id`.
    fn locate(&self, account: Uuid, id: Uuid) -> Result<Option<Vec<u8>>> {
        let Some(place) = self.tree.get(keys::item_id(id))? else {
            return Ok(None);
        };
        if !keys::is_item_place_of(&place, account) {
            return Ok(None);
        }
        Ok(Some(keys::item(&place)))
    }

    fn item_from(k: &[u8], v: &[u8]) -> Result<InboxItem> {
        let created = keys::created_of(k).ok_or_else(|| StoreError::Codec("item key".into()))?;
        records::item::decode(k, v, created)
    }

    /// The ids of an import that are new to the account (as they will be stored), the
    /// stored id of each whose own is another account's ([`crate::store::own_id`]), how
    /// many it has already and its item count; or why nothing may be imported.
    fn import_plan(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
    ) -> Result<std::result::Result<Plan, ImportOutcome>> {
        let mut plan = Plan::default();
        let mut checked = std::collections::HashSet::new();
        for id in ids {
            if !checked.insert(*id) {
                plan.skipped += 1;
                continue;
            }
            match super::imports::arrival(account, *id, |id| self.tree.get(keys::item_id(id)))? {
                Arrival::Kept => plan.skipped += 1,
                Arrival::New(stored) => {
                    if stored != *id {
                        plan.renamed.insert(*id, stored);
                    }
                    plan.new.insert(stored);
                }
            }
        }
        plan.count = self.count_of(account)?;
        if !plan.new.is_empty() && max_items.is_some_and(|max| plan.count + plan.new.len() as u64 > max) {
            return Ok(Err(ImportOutcome::LimitReached));
        }
        Ok(Ok(plan))
    }

    fn put_item_into(&self, batches: &mut Batches<'_>, account: Uuid, item: &InboxItem) -> Result<()> {
        // the id is new to the store (checked under the lock), the place has a fresh number
        let place = keys::item_place(account, item.created, self.tree.next_id()?);
        batches.insert_new(keys::item(&place), records::item::encode(item));
        batches.insert_new(keys::item_id(item.id), place);
        Ok(())
    }

    fn put_count_into(&self, batches: &mut Batches<'_>, account: Uuid, n: u64) -> Result<()> {
        batches.insert(keys::count(account), raw::count(n))
    }

    /// The account's items, oldest first, read one at a time (a list answered while it is
    /// sent holds one item).
    pub fn item_scan(&self, account: Uuid) -> impl Iterator<Item = Result<InboxItem>> + Send + 'static {
        self.tree.scan_prefix(keys::items_of(account)).map(|kv| {
            let (k, v) = kv?;
            Self::item_from(&k, &v)
        })
    }
}

/// The sled implementation: each write one batch under the account's lock.
#[async_trait::async_trait]
impl crate::store::api::InboxItems for InboxStore {
    async fn count(&self, account: Uuid) -> Result<u64> {
        self.count_of(account)
    }

    /// Items of every account together, from the accounts' count records (one small read
    /// per account, nothing per item: cheap enough for each metrics scrape).
    async fn total_items(&self) -> Result<u64> {
        let mut total = 0u64;
        for kv in self.tree.scan_prefix(keys::counts()) {
            let (k, v) = kv?;
            total = total.saturating_add(raw::to_count(&k, &v)?);
        }
        Ok(total)
    }

    /// Stores `item` for `account` unless the account already has `max_items` items
    /// (`None`: no limit). With an idempotency key that was used before, stores nothing and
    /// answers the first item's id (also when the account is at its limit), durable once
    /// the first request's item is.
    async fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        let _guard = self.accounts.lock(account);
        let idem_key = idempotency.map(|k| keys::idempotency(account, k));
        if let Some(k) = &idem_key {
            if let Some(v) = self.tree.get(k)? {
                // the first request's batch may still be waiting for its flush
                let first = AddOutcome::Repeated(raw::to_uuid("idempotency key", k, &v)?);
                return Ok(Written::new(first, self.tree.queued()));
            }
        }
        let n = self.count_of(account)?;
        if max_items.is_some_and(|max| n >= max) {
            return Ok(Written::unchanged(AddOutcome::LimitReached));
        }
        let mut batch = Batch::default();
        self.put_item(&mut batch, account, item)?;
        self.put_count(&mut batch, account, n + 1);
        if let Some(k) = idem_key {
            batch.insert(k, raw::uuid(item.id));
        }
        let ticket = self.tree.apply_batch(batch);
        Ok(Written::new(AddOutcome::Added(item.id), ticket))
    }

    async fn item(&self, account: Uuid, id: Uuid) -> Result<Option<InboxItem>> {
        let Some(k) = self.locate(account, id)? else {
            return Ok(None);
        };
        match self.tree.get(&k)? {
            Some(v) => Ok(Some(Self::item_from(&k, &v)?)),
            None => Ok(None),
        }
    }

    /// Deletes the account's item `id`; nothing happens when it has none such.
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some(k) = self.locate(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let n = self.count_of(account)?;
        let mut batch = Batch::default();
        batch.remove(k);
        batch.remove(keys::item_id(id));
        self.put_count(&mut batch, account, n.saturating_sub(1));
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// The account's items, oldest first.
    async fn items(&self, account: Uuid) -> Result<Vec<InboxItem>> {
        self.item_scan(account).collect()
    }

    /// One page of the account's items after the item `after` (from the first with
    /// `None`), oldest first; empty when `after` is no longer there.
    async fn items_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<InboxItem>> {
        let prefix = keys::items_of(account);
        let scan = match after {
            None => self.tree.scan_prefix(&prefix),
            Some(id) => match self.locate(account, id)? {
                Some(k) => self.tree.scan_prefix_after(&prefix, &k),
                None => return Ok(Vec::new()),
            },
        };
        size.fill(scan.map(|kv| {
            let (k, v) = kv?;
            Self::item_from(&k, &v)
        }))
    }

    /// The ids of the account's items, oldest first.
    async fn item_ids(&self, account: Uuid) -> Result<Vec<Uuid>> {
        self.item_scan(account).map(|item| Ok(item?.id)).collect()
    }

    async fn first_item(&self, account: Uuid) -> Result<Option<InboxItem>> {
        match self.tree.scan_prefix(keys::items_of(account)).next() {
            Some(kv) => {
                let (k, v) = kv?;
                Ok(Some(Self::item_from(&k, &v)?))
            }
            None => Ok(None),
        }
    }

    /// Runs one sync atomically: `decide` sees the account's items as they are (with the
    /// account's writes held off) and says what to delete and add; the changes are applied
    /// in one batch.
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a> FnMut(&'a [InboxItem]) -> ItemChanges + Send),
    ) -> Result<Written<()>> {
        let _guard = self.accounts.lock(account);
        let items = self.item_scan(account).collect::<Result<Vec<_>>>()?;
        let changes = decide(&items);
        let mut batch = Batch::default();
        let mut n = items.len() as u64;
        for id in &changes.delete {
            if let Some(k) = self.locate(account, *id)? {
                batch.remove(k);
                batch.remove(keys::item_id(*id));
                n -= 1;
            }
        }
        for item in &changes.add {
            self.put_item(&mut batch, account, item)?;
            n += 1;
        }
        if changes.delete.is_empty() && changes.add.is_empty() {
            return Ok(Written::unchanged(()));
        }
        self.put_count(&mut batch, account, n);
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// Deletes the account and everything of it (items, access keys, idempotency keys) in
    /// one batch. `false` when there was no such account.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some(record): Option<Account> = self.accounts.account(account)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        for kv in self.tree.scan_prefix(keys::items_of(account)) {
            let (k, v) = kv?;
            let item = Self::item_from(&k, &v)?;
            batch.remove(k);
            batch.remove(keys::item_id(item.id));
        }
        for kv in self.tree.scan_prefix(keys::idempotency_of(account)) {
            batch.remove(kv?.0);
        }
        batch.remove(keys::count(account));
        self.accounts.delete_into(&record, &mut batch)?;
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// What importing items of these `ids` would do now, without writing anything (the
    /// checks of `import_items`), after `new_before` new items of earlier
    /// pieces of the same import (counted against `max_items` too).
    fn check_import(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        new_before: u64,
    ) -> Result<ImportOutcome> {
        let _guard = self.accounts.lock(account);
        let max_items = max_items.map(|max| max.saturating_sub(new_before));
        Ok(match self.import_plan(account, ids, max_items)? {
            Ok(plan) => ImportOutcome::Imported {
                added: plan.new.len(),
                skipped: plan.skipped,
            },
            Err(refused) => refused,
        })
    }

    /// Imports items (with their own ids and `created` times) into `account`: those whose
    /// ids it does not have yet; items it has are left as they are, so importing the same
    /// items twice changes nothing. `ids` are the import's item ids (in any order, repeats
    /// allowed), checked before anything is written: nothing is stored when the new items
    /// would take the account over `max_items`. An item whose id is another account's is
    /// stored under an id derived from the account and its id ([`crate::store::own_id`]),
    /// so that the answer never tells whether an id exists elsewhere. Then
    /// `items` hands over the items one at a time (the import is read a second time) and they
    /// are written in batches of bounded size ([`super::imports`]), each on disk before the
    /// next is queued, under the account's lock throughout. Runs in a blocking thread.
    fn import_items(
        &self,
        account: Uuid,
        ids: &[Uuid],
        max_items: Option<u64>,
        items: Feed<'_, InboxItem>,
        wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        let _guard = self.accounts.lock(account);
        let Plan {
            mut new,
            renamed,
            skipped,
            count: mut n,
        } = match self.import_plan(account, ids, max_items)? {
            Ok(plan) => plan,
            Err(refused) => return Ok(refused),
        };
        let added = new.len();
        if added == 0 {
            return Ok(ImportOutcome::Imported { added, skipped });
        }
        let mut batches = Batches::new(&self.tree, wait)?;
        let mut in_batch = 0u64;
        let mut stored = 0usize;
        let result = items(&mut |mut item| {
            item.id = renamed.get(&item.id).copied().unwrap_or(item.id);
            // the first of repeated ids is stored
            if !new.remove(&item.id) {
                return Ok(());
            }
            self.put_item_into(&mut batches, account, &item)?;
            in_batch += 1;
            if batches.full() {
                self.put_count_into(&mut batches, account, n + in_batch)?;
                batches.write()?;
                n += in_batch;
                stored += in_batch as usize;
                in_batch = 0;
            }
            Ok(())
        })
        .and_then(|()| {
            if stored + in_batch as usize != added {
                return Err(StoreError::Codec("the import changed while it was read".into()));
            }
            if in_batch > 0 {
                self.put_count_into(&mut batches, account, n + in_batch)?;
            }
            batches.commit()
        });
        match result {
            Ok(()) => Ok(ImportOutcome::Imported { added, skipped }),
            Err(e) => super::imports::failed(batches, e, account).map(|()| ImportOutcome::Interrupted),
        }
    }
}
