//! The inbox service's tree. Keys (after the account keys of [`super::accounts`]):
//!
//! * `i` + account + created (12 bytes, time order) + sequence (8) → item record: the
//!   account's items in the order of inbox.md §1.5, so listing is one prefix scan
//! * `d` + item uuid → account + created + sequence (find an item by id)
//! * `c` + account → number of items (u64, big-endian)
//! * `k` + account + key uuid → [`AccessKey`]
//! * `h` + SHA-256 of a secret → account + key uuid (access-key authentication)
//! * `p` + account + idempotency key → item uuid (inbox.md §3.13)

use super::accounts::AccountStore;
use super::writer::{Batch, Tree};
use super::{concat, decode, encode, key, uuid_at, Result, StoreError, Stripes};
use crate::domain::account::{AccessKey, Account};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::inbox::sync::ItemChanges;
use crate::domain::wire::Timestamp;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use uuid::Uuid;

const ITEM: u8 = b'i';
const ITEM_ID: u8 = b'd';
const COUNT: u8 = b'c';
const ACCESS_KEY: u8 = b'k';
const KEY_DIGEST: u8 = b'h';
const IDEMPOTENCY: u8 = b'p';

#[derive(Serialize, Deserialize)]
struct ItemRecord {
    id: Uuid,
    kind: ItemType,
    data: Vec<u8>,
}

pub enum AddOutcome {
    Added(Uuid),
    /// The idempotency key was used before: the item stored then.
    Repeated(Uuid),
    LimitReached,
}

pub struct InboxStore {
    tree: Tree,
    db: sled::Db,
    pub accounts: AccountStore,
}

impl InboxStore {
    pub(super) fn new(db: &sled::Db, tree: Tree, stripes: Arc<Stripes>) -> InboxStore {
        InboxStore {
            accounts: AccountStore::new(tree.clone(), stripes),
            tree,
            db: db.clone(),
        }
    }

    fn next_seq(&self) -> Result<[u8; 8]> {
        Ok(self.db.generate_id()?.to_be_bytes())
    }

    pub fn count(&self, account: Uuid) -> Result<u64> {
        Ok(match self.tree.get(key(COUNT, &[account.as_bytes()]))? {
            Some(v) => u64::from_be_bytes(v.as_ref().try_into().unwrap_or([0; 8])),
            None => 0,
        })
    }

    fn put_count(&self, batch: &mut Batch, account: Uuid, n: u64) {
        batch.insert(key(COUNT, &[account.as_bytes()]), n.to_be_bytes().to_vec());
    }

    fn put_item(&self, batch: &mut Batch, account: Uuid, item: &InboxItem) -> Result<()> {
        let seq = self.next_seq()?;
        let created = item.created.to_key();
        let record = ItemRecord {
            id: item.id,
            kind: item.kind,
            data: item.data.clone(),
        };
        batch.insert(key(ITEM, &[account.as_bytes(), &created, &seq]), encode(&record));
        batch.insert(
            key(ITEM_ID, &[item.id.as_bytes()]),
            concat(&[account.as_bytes(), &created, &seq]),
        );
        Ok(())
    }

    /// Stores `item` for `account` unless the account already has `max_items` items
    /// (`None`: no limit). With an idempotency key that was used before, stores nothing and
    /// answers the first item's id (also when the account is at its limit).
    pub fn add_item(
        &self,
        account: Uuid,
        item: &InboxItem,
        idempotency: Option<&str>,
        max_items: Option<u64>,
    ) -> Result<AddOutcome> {
        let _guard = self.accounts.lock(account);
        let idem_key = idempotency.map(|k| key(IDEMPOTENCY, &[account.as_bytes(), k.as_bytes()]));
        if let Some(k) = &idem_key {
            if let Some(v) = self.tree.get(k)? {
                let id = uuid_at(&v, 0).ok_or_else(|| StoreError::Codec("idempotency record".into()))?;
                return Ok(AddOutcome::Repeated(id));
            }
        }
        let n = self.count(account)?;
        if max_items.is_some_and(|max| n >= max) {
            return Ok(AddOutcome::LimitReached);
        }
        let mut batch = Batch::default();
        self.put_item(&mut batch, account, item)?;
        self.put_count(&mut batch, account, n + 1);
        if let Some(k) = idem_key {
            batch.insert(k, item.id.as_bytes().to_vec());
        }
        self.tree.apply_batch(batch);
        Ok(AddOutcome::Added(item.id))
    }

    fn locate(&self, account: Uuid, id: Uuid) -> Result<Option<Vec<u8>>> {
        let Some(loc) = self.tree.get(key(ITEM_ID, &[id.as_bytes()]))? else {
            return Ok(None);
        };
        if loc.len() != 36 || &loc[..16] != account.as_bytes() {
            return Ok(None);
        }
        Ok(Some(key(ITEM, &[&loc])))
    }

    fn item_from(k: &[u8], v: &[u8]) -> Result<InboxItem> {
        let record: ItemRecord = decode(v)?;
        let created = Timestamp::from_key(&k[17..29]).ok_or_else(|| StoreError::Codec("item key".into()))?;
        Ok(InboxItem {
            id: record.id,
            kind: record.kind,
            data: record.data,
            created,
        })
    }

    pub fn item(&self, account: Uuid, id: Uuid) -> Result<Option<InboxItem>> {
        let Some(k) = self.locate(account, id)? else {
            return Ok(None);
        };
        match self.tree.get(&k)? {
            Some(v) => Ok(Some(Self::item_from(&k, &v)?)),
            None => Ok(None),
        }
    }

    /// Deletes the account's item `id`; nothing happens when it has none such.
    pub fn delete_item(&self, account: Uuid, id: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some(k) = self.locate(account, id)? else {
            return Ok(false);
        };
        let n = self.count(account)?;
        let mut batch = Batch::default();
        batch.remove(k);
        batch.remove(key(ITEM_ID, &[id.as_bytes()]));
        self.put_count(&mut batch, account, n.saturating_sub(1));
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// The account's items, oldest first.
    pub fn items(&self, account: Uuid) -> Result<Vec<InboxItem>> {
        self.item_scan(account).collect()
    }

    /// The account's items, oldest first, read one at a time (a list answered while it is
    /// sent holds one item).
    pub fn item_scan(&self, account: Uuid) -> impl Iterator<Item = Result<InboxItem>> + Send + 'static {
        self.tree.scan_prefix(key(ITEM, &[account.as_bytes()])).map(|kv| {
            let (k, v) = kv?;
            Self::item_from(&k, &v)
        })
    }

    /// The ids of the account's items, oldest first.
    pub fn item_ids(&self, account: Uuid) -> Result<Vec<Uuid>> {
        self.tree
            .scan_prefix(key(ITEM, &[account.as_bytes()]))
            .map(|kv| {
                let (_, v) = kv?;
                Ok(decode::<ItemRecord>(&v)?.id)
            })
            .collect()
    }

    pub fn first_item(&self, account: Uuid) -> Result<Option<InboxItem>> {
        match self.tree.scan_prefix(key(ITEM, &[account.as_bytes()])).next() {
            Some(kv) => {
                let (k, v) = kv?;
                Ok(Some(Self::item_from(&k, &v)?))
            }
            None => Ok(None),
        }
    }

    /// Runs one sync atomically (answering also whether it changed anything): `decide` sees the account's items as they are (with the
    /// account's writes held off) and says what to delete and add; the changes are applied
    /// in one batch.
    pub fn sync<R>(&self, account: Uuid, decide: impl FnOnce(&[InboxItem]) -> (R, ItemChanges)) -> Result<(R, bool)> {
        let _guard = self.accounts.lock(account);
        let items = self.items(account)?;
        let (answer, changes) = decide(&items);
        let mut batch = Batch::default();
        let mut n = items.len() as u64;
        for id in &changes.delete {
            if let Some(k) = self.locate(account, *id)? {
                batch.remove(k);
                batch.remove(key(ITEM_ID, &[id.as_bytes()]));
                n -= 1;
            }
        }
        for item in &changes.add {
            self.put_item(&mut batch, account, item)?;
            n += 1;
        }
        let changed = !changes.delete.is_empty() || !changes.add.is_empty();
        if changed {
            self.put_count(&mut batch, account, n);
            self.tree.apply_batch(batch);
        }
        Ok((answer, changed))
    }

    pub fn add_access_key(&self, account: Uuid, access_key: &AccessKey) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        if self.accounts.get(account)?.is_none() {
            return Ok(false);
        }
        let mut batch = Batch::default();
        batch.insert(
            key(ACCESS_KEY, &[account.as_bytes(), access_key.id.as_bytes()]),
            encode(access_key),
        );
        batch.insert(
            key(KEY_DIGEST, &[&access_key.digest]),
            concat(&[account.as_bytes(), access_key.id.as_bytes()]),
        );
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// The account's access keys, oldest first.
    pub fn access_keys(&self, account: Uuid) -> Result<Vec<AccessKey>> {
        let mut keys = self
            .tree
            .scan_prefix(key(ACCESS_KEY, &[account.as_bytes()]))
            .map(|kv| decode::<AccessKey>(&kv?.1))
            .collect::<Result<Vec<_>>>()?;
        keys.sort_by_key(|k| (k.created, k.seq));
        Ok(keys)
    }

    pub fn access_key(&self, account: Uuid, id: Uuid) -> Result<Option<AccessKey>> {
        match self.tree.get(key(ACCESS_KEY, &[account.as_bytes(), id.as_bytes()]))? {
            Some(v) => Ok(Some(decode(&v)?)),
            None => Ok(None),
        }
    }

    /// The access key whose secret has this SHA-256 digest: (owner, key).
    pub fn access_key_by_digest(&self, digest: &[u8; 32]) -> Result<Option<(Uuid, AccessKey)>> {
        let Some(v) = self.tree.get(key(KEY_DIGEST, &[digest]))? else {
            return Ok(None);
        };
        let (Some(account), Some(id)) = (uuid_at(&v, 0), uuid_at(&v, 16)) else {
            return Ok(None);
        };
        Ok(self.access_key(account, id)?.map(|k| (account, k)))
    }

    pub fn next_key_seq(&self) -> Result<u64> {
        Ok(self.db.generate_id()?)
    }

    pub fn delete_access_key(&self, account: Uuid, id: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some(k) = self.access_key(account, id)? else {
            return Ok(false);
        };
        let mut batch = Batch::default();
        batch.remove(key(ACCESS_KEY, &[account.as_bytes(), id.as_bytes()]));
        batch.remove(key(KEY_DIGEST, &[&k.digest]));
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// Deletes the account and everything of it (items, access keys, idempotency keys) in
    /// one batch. `false` when there was no such account.
    pub fn delete_account(&self, account: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some(record): Option<Account> = self.accounts.get(account)? else {
            return Ok(false);
        };
        let mut batch = Batch::default();
        for kv in self.tree.scan_prefix(key(ITEM, &[account.as_bytes()])) {
            let (k, v) = kv?;
            let item: ItemRecord = decode(&v)?;
            batch.remove(k);
            batch.remove(key(ITEM_ID, &[item.id.as_bytes()]));
        }
        for access_key in self.access_keys(account)? {
            batch.remove(key(ACCESS_KEY, &[account.as_bytes(), access_key.id.as_bytes()]));
            batch.remove(key(KEY_DIGEST, &[&access_key.digest]));
        }
        for kv in self.tree.scan_prefix(key(IDEMPOTENCY, &[account.as_bytes()])) {
            batch.remove(kv?.0);
        }
        batch.remove(key(COUNT, &[account.as_bytes()]));
        self.accounts.delete_into(&record, &mut batch);
        self.tree.apply_batch(batch);
        Ok(true)
    }
}
