//! Scheduled items with the due index, triggered items, the time-zone setting, and
//! triggering.
//!
//! Every scheduled item record carries its due instant, and its due-index entry (`q` + due
//! instant + item id → owner) is written in the same batch as the item, so the triggerer
//! reads only what is due. Writes that compute a due instant get the account's setting read
//! under the account lock, so a concurrent setting change cannot leave an item indexed
//! under the zone it replaced.

use super::SchedulerStore;
use crate::domain::scheduler::models::{targets_now, ScheduledItem, TimeZoneSetting, TriggeredItem};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::Timestamp;
use crate::store::api::{Feed, NextOccurrence, PageSize};
use crate::store::scheduler::{AddOutcome, ImportIds, ImportOutcome};
use crate::store::sled::keys::{self, TargetKind};
use crate::store::sled::records::{self, raw, targets::Targets};
use crate::store::sled::writer::Batch;
use crate::store::WaitDurable;
use crate::store::{Result, StoreError, Written};
use uuid::Uuid;

impl SchedulerStore {
    /// The account's time-zone setting.
    pub(super) fn settings_of(&self, account: Uuid) -> Result<TimeZoneSetting> {
        let k = keys::settings(account);
        match self.tree.get(&k)? {
            Some(v) => records::settings::decode(&k, &v),
            None => Ok(TimeZoneSetting::default()),
        }
    }

    /// Adds the writes that store `item` (new or replacing its earlier version) to `batch`;
    /// answers whether it is new.
    pub(super) fn put_scheduled(&self, batch: &mut Batch, item: &ScheduledItem, due: Timestamp) -> Result<bool> {
        let (item_key, is_new) = match self.scheduled_location(item.owner, item.id)? {
            Some((k, _, old_due)) => {
                batch.remove(keys::due(old_due, item.id));
                (k, false)
            }
            None => {
                let place = keys::item_place(item.owner, item.created, self.seq()?);
                batch.insert(keys::scheduled_id(item.id), place.clone());
                (keys::scheduled(&place), true)
            }
        };
        batch.insert(item_key, records::scheduled::encode(item, due));
        batch.insert(keys::due(due, item.id), raw::uuid(item.owner));
        Ok(is_new)
    }

    fn remove_scheduled(&self, batch: &mut Batch, account: Uuid, id: Uuid) -> Result<bool> {
        let Some((k, _, due)) = self.scheduled_location(account, id)? else {
            return Ok(false);
        };
        batch.remove(k);
        batch.remove(keys::scheduled_id(id));
        batch.remove(keys::due(due, id));
        Ok(true)
    }

    /// The key, item and due instant of the account's scheduled item `id`.
    fn scheduled_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, ScheduledItem, Timestamp)>> {
        match self.locate(keys::scheduled_id(id), account, keys::scheduled)? {
            Some((k, v)) => {
                let (item, due) = records::scheduled::decode(&k, &v)?;
                Ok(Some((k, item, due)))
            }
            None => Ok(None),
        }
    }

    /// The key and record of the account's triggered item `id`.
    pub(super) fn triggered_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, TriggeredItem)>> {
        match self.locate(keys::triggered_id(id), account, keys::triggered)? {
            Some((k, v)) => {
                let item = records::triggered::decode(&k, &v)?;
                Ok(Some((k, item)))
            }
            None => Ok(None),
        }
    }

    /// Adds to `batch` the removal of every scheduled and triggered item of the account
    /// (with their due-index entries).
    pub(super) fn drop_items_of(&self, batch: &mut Batch, account: Uuid) -> Result<()> {
        for kv in self.tree.scan_prefix(keys::scheduled_of(account)) {
            let (k, v) = kv?;
            let (item, due) = records::scheduled::decode(&k, &v)?;
            batch.remove(k);
            batch.remove(keys::scheduled_id(item.id));
            batch.remove(keys::due(due, item.id));
        }
        for kv in self.tree.scan_prefix(keys::triggered_of(account)) {
            let (k, v) = kv?;
            let item = records::triggered::decode(&k, &v)?;
            batch.remove(k);
            batch.remove(keys::triggered_id(item.id));
        }
        Ok(())
    }

    /// `scheduled_items` read one at a time.
    pub fn scheduled_scan(&self, account: Uuid) -> impl Iterator<Item = Result<ScheduledItem>> + Send + 'static {
        self.tree.scan_prefix(keys::scheduled_of(account)).map(|kv| {
            let (k, v) = kv?;
            Ok(records::scheduled::decode(&k, &v)?.0)
        })
    }

    /// `triggered_items` read one at a time.
    pub fn triggered_scan(&self, account: Uuid) -> impl Iterator<Item = Result<TriggeredItem>> + Send + 'static {
        self.tree.scan_prefix(keys::triggered_of(account)).map(|kv| {
            let (k, v) = kv?;
            records::triggered::decode(&k, &v)
        })
    }
}

/// The sled implementation: each write one batch under the account's lock.
#[async_trait::async_trait]
impl crate::store::api::ScheduledItems for SchedulerStore {
    async fn settings(&self, account: Uuid) -> Result<TimeZoneSetting> {
        self.settings_of(account)
    }

    /// Stores the settings and re-indexes every scheduled item of the account with the due
    /// instant `due_of` computes under them, in one batch.
    async fn put_settings(
        &self,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: &(dyn for<'a> Fn(&'a ScheduledItem) -> Timestamp + Send + Sync),
    ) -> Result<Written<()>> {
        let _guard = self.accounts.lock(account);
        let mut batch = Batch::default();
        batch.insert(keys::settings(account), records::settings::encode(settings));
        for kv in self.tree.scan_prefix(keys::scheduled_of(account)) {
            let (k, v) = kv?;
            let (item, old_due) = records::scheduled::decode(&k, &v)?;
            let due = due_of(&item);
            if due != old_due {
                batch.remove(keys::due(old_due, item.id));
                batch.insert(keys::due(due, item.id), raw::uuid(account));
                batch.insert(k, records::scheduled::encode(&item, due));
            }
        }
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// Stores a new scheduled item unless the account has `cap` scheduled items already;
    /// `due_of` gives its due instant under the account's settings, read under the account
    /// lock (so a concurrent settings change cannot leave it indexed under the old zone).
    async fn add_scheduled(
        &self,
        item: &ScheduledItem,
        due_of: &(dyn for<'a> Fn(&'a TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
    ) -> Result<Written<AddOutcome>> {
        let _guard = self.accounts.lock(item.owner);
        let (s, t) = self.counts_of(item.owner)?;
        if cap.is_some_and(|cap| s >= cap) {
            return Ok(Written::unchanged(AddOutcome::LimitReached));
        }
        let due = due_of(&self.settings_of(item.owner)?);
        let mut batch = Batch::default();
        self.put_scheduled(&mut batch, item, due)?;
        Self::put_counts(&mut batch, item.owner, (s + 1, t));
        Ok(Written::new(AddOutcome::Added, self.tree.apply_batch(batch)))
    }

    async fn scheduled(&self, account: Uuid, id: Uuid) -> Result<Option<ScheduledItem>> {
        Ok(self.scheduled_location(account, id)?.map(|(_, item, _)| item))
    }

    /// Replaces the contents of a scheduled item with `edit`, which returns the new item
    /// and its due instant under the account's settings (read under the account lock);
    /// `false` when the account has no such scheduled item.
    async fn edit_scheduled(
        &self,
        account: Uuid,
        id: Uuid,
        edit: &mut (dyn for<'a> FnMut(ScheduledItem, &'a TimeZoneSetting) -> (ScheduledItem, Timestamp) + Send),
    ) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some((_, item, _)) = self.scheduled_location(account, id)? else {
            return Ok(Written::unchanged(false));
        };
        let (item, due) = edit(item, &self.settings_of(account)?);
        let mut batch = Batch::default();
        self.put_scheduled(&mut batch, &item, due)?;
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    async fn triggered(&self, account: Uuid, id: Uuid) -> Result<Option<TriggeredItem>> {
        Ok(self.triggered_location(account, id)?.map(|(_, t)| t))
    }

    /// Deletes the account's scheduled or triggered item `id` (a triggered item with its
    /// pending deliveries); nothing happens when it has none such.
    async fn delete_item(&self, account: Uuid, id: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let (s, t) = self.counts_of(account)?;
        let mut batch = Batch::default();
        let counts = if self.remove_scheduled(&mut batch, account, id)? {
            (s.saturating_sub(1), t)
        } else if let Some((k, _)) = self.triggered_location(account, id)? {
            batch.remove(k);
            batch.remove(keys::triggered_id(id));
            self.drop_pending(&mut batch, account, |item, _| item == Some(id))?;
            (s, t.saturating_sub(1))
        } else {
            return Ok(Written::unchanged(false));
        };
        Self::put_counts(&mut batch, account, counts);
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// Deletes all triggered items of the account, with their pending deliveries.
    async fn delete_triggered_items(&self, account: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let (s, _) = self.counts_of(account)?;
        let mut batch = Batch::default();
        let mut ids = std::collections::HashSet::new();
        for kv in self.tree.scan_prefix(keys::triggered_of(account)) {
            let (k, v) = kv?;
            let item = records::triggered::decode(&k, &v)?;
            batch.remove(k);
            batch.remove(keys::triggered_id(item.id));
            ids.insert(item.id);
        }
        if ids.is_empty() {
            return Ok(Written::unchanged(false));
        }
        self.drop_pending(&mut batch, account, |item, _| item.is_some_and(|i| ids.contains(&i)))?;
        Self::put_counts(&mut batch, account, (s, 0));
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// The account's scheduled items in creation order.
    async fn scheduled_items(&self, account: Uuid) -> Result<Vec<ScheduledItem>> {
        self.scheduled_scan(account).collect()
    }

    /// One page of scheduled items after the item `after` (from the first with `None`),
    /// in creation order; empty when `after` is no longer there.
    async fn scheduled_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<ScheduledItem>> {
        let prefix = keys::scheduled_of(account);
        let scan = match after {
            None => self.tree.scan_prefix(&prefix),
            Some(id) => match self.scheduled_location(account, id)? {
                Some((k, _, _)) => self.tree.scan_prefix_after(&prefix, &k),
                None => return Ok(Vec::new()),
            },
        };
        size.fill(scan.map(|kv| {
            let (k, v) = kv?;
            Ok(records::scheduled::decode(&k, &v)?.0)
        }))
    }

    /// The account's triggered items by original `created`, then by triggering time.
    async fn triggered_items(&self, account: Uuid) -> Result<Vec<TriggeredItem>> {
        self.triggered_scan(account).collect()
    }

    /// One page of triggered items after the item `after`, in the order of
    /// `triggered_items`; empty when `after` is no longer there.
    async fn triggered_page(&self, account: Uuid, after: Option<Uuid>, size: PageSize) -> Result<Vec<TriggeredItem>> {
        let prefix = keys::triggered_of(account);
        let scan = match after {
            None => self.tree.scan_prefix(&prefix),
            Some(id) => match self.triggered_location(account, id)? {
                Some((k, _)) => self.tree.scan_prefix_after(&prefix, &k),
                None => return Ok(Vec::new()),
            },
        };
        size.fill(scan.map(|kv| {
            let (k, v) = kv?;
            records::triggered::decode(&k, &v)
        }))
    }

    /// Runs one sync atomically: `decide` sees the account's scheduled items and settings as
    /// they are (with the account's writes held off) and says what to delete and store,
    /// with due instants under those settings.
    async fn sync(
        &self,
        account: Uuid,
        decide: &mut (dyn for<'a, 'b> FnMut(&'a [ScheduledItem], &'b TimeZoneSetting) -> ScheduledChanges + Send),
    ) -> Result<Written<()>> {
        let _guard = self.accounts.lock(account);
        let items = self.scheduled_scan(account).collect::<Result<Vec<_>>>()?;
        let changes = decide(&items, &self.settings_of(account)?);
        let (mut s, t) = self.counts_of(account)?;
        let mut batch = Batch::default();
        for id in &changes.delete {
            if self.remove_scheduled(&mut batch, account, *id)? {
                s = s.saturating_sub(1);
            }
        }
        for (item, due) in &changes.put {
            if self.put_scheduled(&mut batch, item, *due)? {
                s += 1;
            }
        }
        if changes.delete.is_empty() && changes.put.is_empty() {
            return Ok(Written::unchanged(()));
        }
        Self::put_counts(&mut batch, account, (s, t));
        Ok(Written::new((), self.tree.apply_batch(batch)))
    }

    /// The earliest due instant in the index (the triggerer sleeps until then).
    async fn next_due(&self) -> Result<Option<Timestamp>> {
        match self.tree.scan_prefix(keys::due_index()).next() {
            Some(kv) => Ok(keys::due_entry(&kv?.0).map(|(at, _)| at)),
            None => Ok(None),
        }
    }

    /// How many scheduled items are due at `now` and not yet triggered, counting at most
    /// `limit` (reads only the due part of the index: cheap while the triggerer keeps up).
    async fn due_count(&self, now: Timestamp, limit: usize) -> Result<usize> {
        let mut n = 0;
        for kv in self
            .tree
            .range_inclusive(&keys::due_index(), &keys::due_until(now))
            .take(limit)
        {
            kv?;
            n += 1;
        }
        Ok(n)
    }

    /// Up to `limit` (due instant, owner, item id) entries due at or before `now`, earliest
    /// first. Reads only index entries that are due.
    async fn due_items(&self, now: Timestamp, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        let mut out = Vec::new();
        for kv in self
            .tree
            .range_inclusive(&keys::due_index(), &keys::due_until(now))
            .take(limit)
        {
            let (k, v) = kv?;
            let Some((due, id)) = keys::due_entry(&k) else {
                return Err(StoreError::Codec("due index entry".into()));
            };
            let owner = raw::to_uuid("due index", &k, &v)?;
            out.push((due, owner, id));
        }
        Ok(out)
    }

    /// Triggers the item of the due-index entry (`at`, `owner`, `id`, as `due_items`
    /// read it) if it is still due at `now`, in one batch: the triggered copy (with the
    /// delivery targets of this moment), and the item deleted or, when `next` gives its
    /// next occurrence (with its due instant under the owner's settings, read under the
    /// account lock), moved there. `None` when the item is gone or no longer due (edited or
    /// deleted meanwhile); then the entry is removed, so that it is not read again.
    async fn trigger_item(
        &self,
        (at, owner, id): (Timestamp, Uuid, Uuid),
        now: Timestamp,
        next: &mut NextOccurrence<'_>,
    ) -> Result<Written<Option<TriggeredItem>>> {
        let _guard = self.accounts.lock(owner);
        let item = self.scheduled_location(owner, id)?;
        let Some((item_key, item, due)) = item.filter(|(_, _, due)| *due <= now) else {
            return Ok(Written::new(None, self.tree.remove(keys::due(at, id))));
        };
        let copy = TriggeredItem::copy_of(&item, now);
        let (mut s, t) = self.counts_of(owner)?;
        let mut batch = Batch::default();
        let seq = self.seq()?;
        let place = keys::triggered_place(owner, copy.created, now, seq);
        batch.insert(keys::triggered(&place), records::triggered::encode(&copy));
        batch.insert(keys::triggered_id(copy.id), place);
        // the list of kind `Inbox` holds every trigger delivered over HTTP
        let (inbox, email) = targets_now(&self.triggers_of(owner)?);
        for (kind, list) in [(TargetKind::Inbox, inbox), (TargetKind::Email, email)] {
            if !list.is_empty() {
                let targets = Targets { owner, triggers: list };
                batch.insert(keys::targets(kind, seq, copy.id), records::targets::encode(&targets));
            }
        }
        batch.remove(keys::due(due, id));
        match next(&item, &self.settings_of(owner)?) {
            Some((moved, due)) => {
                batch.insert(item_key, records::scheduled::encode(&moved, due));
                batch.insert(keys::due(due, id), raw::uuid(owner));
            }
            None => {
                batch.remove(item_key);
                batch.remove(keys::scheduled_id(id));
                s = s.saturating_sub(1);
            }
        }
        Self::put_counts(&mut batch, owner, (s, t + 1));
        Ok(Written::new(Some(copy), self.tree.apply_batch(batch)))
    }

    async fn upcoming(&self, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        // sled's reading of the due index takes nothing
        self.due_items(Timestamp::from_unix(i64::MAX, u32::MAX), limit).await
    }

    async fn counts(&self, account: Uuid) -> Result<(u64, u64)> {
        self.counts_of(account)
    }

    /// (scheduled, triggered) items of every account together, from the accounts' count
    /// records (one small read per account: cheap enough for each metrics scrape).
    async fn total_counts(&self) -> Result<(u64, u64)> {
        let (mut scheduled, mut triggered) = (0u64, 0u64);
        for kv in self.tree.scan_prefix(keys::counts()) {
            let (k, v) = kv?;
            let (s, t) = raw::to_counts(&k, &v)?;
            scheduled = scheduled.saturating_add(s);
            triggered = triggered.saturating_add(t);
        }
        Ok((scheduled, triggered))
    }

    /// Deletes the account and everything of it in one batch; `false` when there was none.
    async fn delete_account(&self, account: Uuid) -> Result<Written<bool>> {
        let _guard = self.accounts.lock(account);
        let Some(record) = self.accounts.account(account)? else {
            return Ok(Written::unchanged(false));
        };
        let mut batch = Batch::default();
        self.drop_items_of(&mut batch, account)?;
        self.drop_triggers_of(&mut batch, account)?;
        self.drop_pending(&mut batch, account, |_, _| true)?;
        batch.remove(keys::settings(account));
        batch.remove(keys::count(account));
        self.accounts.delete_into(&record, &mut batch)?;
        Ok(Written::new(true, self.tree.apply_batch(batch)))
    }

    /// See [`SchedulerStore::check_entries`] (import.rs, with the import).
    fn check_import(&self, account: Uuid, ids: &ImportIds, cap: Option<u64>, new_before: u64) -> Result<ImportOutcome> {
        self.check_entries(account, ids, cap, new_before)
    }

    /// See [`SchedulerStore::import_entries`] (import.rs).
    #[allow(clippy::too_many_arguments)]
    fn import(
        &self,
        account: Uuid,
        ids: &ImportIds,
        settings: Option<&TimeZoneSetting>,
        due_of: &(dyn Fn(&ScheduledItem, &TimeZoneSetting) -> Timestamp + Send + Sync),
        cap: Option<u64>,
        entries: Feed<'_, SchedulerEntry>,
        wait: WaitDurable<'_>,
    ) -> Result<ImportOutcome> {
        self.import_entries(account, ids, settings, due_of, cap, entries, wait)
    }
}
