//! The scheduler service's tree. Keys (after the account keys of [`super::accounts`]):
//!
//! * `s` + account + created (12) + sequence (8) → [`ScheduledItem`] (creation order)
//! * `S` + item uuid → account + created + sequence
//! * `x` + account + created (12) + triggered (12) + sequence (8) → [`TriggeredItem`]
//! * `X` + item uuid → account + created + triggered + sequence
//! * `q` + due instant (12) + item uuid → account: the due index the triggerer reads, so
//!   finding due items never touches items that are not due
//! * `g` + account + sequence (8) + trigger uuid → [`Trigger`] (creation order)
//! * `G` + trigger uuid → account + sequence
//! * `z` + account → [`TimeZoneSetting`]
//! * `c` + account → number of scheduled items, number of triggered items (2 × u64)
//! * `r` + kind (`i` inbox / `e` e-mail) + sequence (8) + triggered item uuid → [`Targets`]:
//!   the delivery targets fixed when the item triggered, waiting for a scheduler worker
//! * `v` + sequence (8) + delivery uuid → [`Delivery`]: pending inbox deliveries
//! * `m` + sequence (8) → [`QueuedEmail`] (to be rendered, or rendered and not yet sent)
//! * `E` + payment event id → nothing: the event was handled
//! * `F` + payment event id → the event (JSON) whose handling failed, for the retrier

use super::accounts::AccountStore;
use super::writer::{Batch, Tree};
use super::{concat, decode, encode, key, uuid_at, Result, StoreError, Stripes};
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::scheduler::models::{
    Attempt, Delivery, Outcome, ScheduledItem, TimeZoneSetting, Trigger, TriggerKind, TriggeredItem,
};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::wire::Timestamp;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use uuid::Uuid;

const SCHEDULED: u8 = b's';
const SCHEDULED_ID: u8 = b'S';
const TRIGGERED: u8 = b'x';
const TRIGGERED_ID: u8 = b'X';
const DUE: u8 = b'q';
const TRIGGER: u8 = b'g';
const TRIGGER_ID: u8 = b'G';
const SETTINGS: u8 = b'z';
const COUNTS: u8 = b'c';
const EMAIL: u8 = b'm';
const TARGETS: u8 = b'r';
const DELIVERY: u8 = b'v';
const EVENT_HANDLED: u8 = b'E';
const EVENT_FAILED: u8 = b'F';

/// A stored scheduled item with its due instant (the index entry it owns).
#[derive(Serialize, Deserialize)]
struct ScheduledRecord {
    item: ScheduledItem,
    due: Timestamp,
}

/// The delivery targets of a triggered item, fixed when it triggered.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Targets {
    pub owner: Uuid,
    pub triggers: Vec<Uuid>,
}

pub enum AddOutcome {
    Added,
    LimitReached,
}

pub struct SchedulerStore {
    tree: Tree,
    db: sled::Db,
    pub accounts: AccountStore,
}

fn counts_of(v: Option<sled::IVec>) -> (u64, u64) {
    match v {
        Some(v) if v.len() == 16 => (
            u64::from_be_bytes(v[..8].try_into().unwrap_or([0; 8])),
            u64::from_be_bytes(v[8..].try_into().unwrap_or([0; 8])),
        ),
        _ => (0, 0),
    }
}

impl SchedulerStore {
    pub(super) fn new(db: &sled::Db, tree: Tree, stripes: Arc<Stripes>) -> SchedulerStore {
        SchedulerStore {
            accounts: AccountStore::new(tree.clone(), stripes),
            tree,
            db: db.clone(),
        }
    }

    fn seq(&self) -> Result<[u8; 8]> {
        Ok(self.db.generate_id()?.to_be_bytes())
    }

    /// (scheduled, triggered) item counts of the account.
    pub fn counts(&self, account: Uuid) -> Result<(u64, u64)> {
        Ok(counts_of(self.tree.get(key(COUNTS, &[account.as_bytes()]))?))
    }

    fn put_counts(batch: &mut Batch, account: Uuid, (s, t): (u64, u64)) {
        batch.insert(
            key(COUNTS, &[account.as_bytes()]),
            concat(&[&s.to_be_bytes(), &t.to_be_bytes()]),
        );
    }

    pub fn settings(&self, account: Uuid) -> Result<TimeZoneSetting> {
        match self.tree.get(key(SETTINGS, &[account.as_bytes()]))? {
            Some(v) => decode(&v),
            None => Ok(TimeZoneSetting::default()),
        }
    }

    /// Stores the settings and re-indexes every scheduled item of the account with the due
    /// instant `due_of` computes under them, in one batch.
    pub fn put_settings(
        &self,
        account: Uuid,
        settings: &TimeZoneSetting,
        due_of: impl Fn(&ScheduledItem) -> Timestamp,
    ) -> Result<()> {
        let _guard = self.accounts.lock(account);
        let mut batch = Batch::default();
        batch.insert(key(SETTINGS, &[account.as_bytes()]), encode(settings));
        for kv in self.tree.scan_prefix(key(SCHEDULED, &[account.as_bytes()])) {
            let (k, v) = kv?;
            let mut record: ScheduledRecord = decode(&v)?;
            let due = due_of(&record.item);
            if due != record.due {
                batch.remove(key(DUE, &[&record.due.to_key(), record.item.id.as_bytes()]));
                batch.insert(
                    key(DUE, &[&due.to_key(), record.item.id.as_bytes()]),
                    account.as_bytes().to_vec(),
                );
                record.due = due;
                batch.insert(k, encode(&record));
            }
        }
        self.tree.apply_batch(batch);
        Ok(())
    }

    /// Adds the writes that store `item` (new or replacing its earlier version) to `batch`.
    fn put_scheduled(&self, batch: &mut Batch, item: &ScheduledItem, due: Timestamp) -> Result<bool> {
        let (item_key, is_new) = match self.scheduled_location(item.owner, item.id)? {
            Some((k, old)) => {
                batch.remove(key(DUE, &[&old.due.to_key(), item.id.as_bytes()]));
                (k, false)
            }
            None => {
                let loc = concat(&[item.owner.as_bytes(), &item.created.to_key(), &self.seq()?]);
                batch.insert(key(SCHEDULED_ID, &[item.id.as_bytes()]), loc.clone());
                (key(SCHEDULED, &[&loc]), true)
            }
        };
        let record = ScheduledRecord {
            item: item.clone(),
            due,
        };
        batch.insert(item_key, encode(&record));
        batch.insert(
            key(DUE, &[&due.to_key(), item.id.as_bytes()]),
            item.owner.as_bytes().to_vec(),
        );
        Ok(is_new)
    }

    fn remove_scheduled(&self, batch: &mut Batch, account: Uuid, id: Uuid) -> Result<bool> {
        let Some((k, record)) = self.scheduled_location(account, id)? else {
            return Ok(false);
        };
        batch.remove(k);
        batch.remove(key(SCHEDULED_ID, &[id.as_bytes()]));
        batch.remove(key(DUE, &[&record.due.to_key(), id.as_bytes()]));
        Ok(true)
    }

    fn scheduled_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, ScheduledRecord)>> {
        let Some(loc) = self.tree.get(key(SCHEDULED_ID, &[id.as_bytes()]))? else {
            return Ok(None);
        };
        if loc.get(..16) != Some(account.as_bytes()) {
            return Ok(None);
        }
        let k = key(SCHEDULED, &[&loc]);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some((k, decode(&v)?))),
            None => Ok(None),
        }
    }

    /// Stores a new scheduled item unless the account has `cap` scheduled items already;
    /// `due_of` gives its due instant under the account's settings, read under the account
    /// lock (so a concurrent settings change cannot leave it indexed under the old zone).
    pub fn add_scheduled(
        &self,
        item: &ScheduledItem,
        due_of: impl FnOnce(&TimeZoneSetting) -> Timestamp,
        cap: Option<u64>,
    ) -> Result<AddOutcome> {
        let _guard = self.accounts.lock(item.owner);
        let (s, t) = self.counts(item.owner)?;
        if cap.is_some_and(|cap| s >= cap) {
            return Ok(AddOutcome::LimitReached);
        }
        let due = due_of(&self.settings(item.owner)?);
        let mut batch = Batch::default();
        self.put_scheduled(&mut batch, item, due)?;
        Self::put_counts(&mut batch, item.owner, (s + 1, t));
        self.tree.apply_batch(batch);
        Ok(AddOutcome::Added)
    }

    pub fn scheduled(&self, account: Uuid, id: Uuid) -> Result<Option<ScheduledItem>> {
        Ok(self.scheduled_location(account, id)?.map(|(_, r)| r.item))
    }

    /// Replaces the contents of a scheduled item with `edit`, which returns the new item
    /// and its due instant under the account's settings (read under the account lock);
    /// `false` when the account has no such scheduled item.
    pub fn edit_scheduled(
        &self,
        account: Uuid,
        id: Uuid,
        edit: impl FnOnce(ScheduledItem, &TimeZoneSetting) -> (ScheduledItem, Timestamp),
    ) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some((_, record)) = self.scheduled_location(account, id)? else {
            return Ok(false);
        };
        let (item, due) = edit(record.item, &self.settings(account)?);
        let mut batch = Batch::default();
        self.put_scheduled(&mut batch, &item, due)?;
        self.tree.apply_batch(batch);
        Ok(true)
    }

    fn triggered_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, TriggeredItem)>> {
        let Some(loc) = self.tree.get(key(TRIGGERED_ID, &[id.as_bytes()]))? else {
            return Ok(None);
        };
        if loc.get(..16) != Some(account.as_bytes()) {
            return Ok(None);
        }
        let k = key(TRIGGERED, &[&loc]);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some((k, decode(&v)?))),
            None => Ok(None),
        }
    }

    pub fn triggered(&self, account: Uuid, id: Uuid) -> Result<Option<TriggeredItem>> {
        Ok(self.triggered_location(account, id)?.map(|(_, t)| t))
    }

    /// Deletes the account's scheduled or triggered item `id`; nothing happens when it has
    /// none such.
    pub fn delete_item(&self, account: Uuid, id: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let (s, t) = self.counts(account)?;
        let mut batch = Batch::default();
        let counts = if self.remove_scheduled(&mut batch, account, id)? {
            (s.saturating_sub(1), t)
        } else if let Some((k, _)) = self.triggered_location(account, id)? {
            batch.remove(k);
            batch.remove(key(TRIGGERED_ID, &[id.as_bytes()]));
            self.drop_pending(&mut batch, |_, item, _| item == Some(id))?;
            (s, t.saturating_sub(1))
        } else {
            return Ok(false);
        };
        Self::put_counts(&mut batch, account, counts);
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// Deletes all triggered items of the account.
    pub fn delete_triggered_items(&self, account: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let (s, _) = self.counts(account)?;
        let mut batch = Batch::default();
        let mut any = false;
        let mut ids = std::collections::HashSet::new();
        for t in self.triggered_items(account)? {
            batch.remove(key(TRIGGERED_ID, &[t.id.as_bytes()]));
            ids.insert(t.id);
            any = true;
        }
        self.drop_pending(&mut batch, |_, item, _| item.is_some_and(|i| ids.contains(&i)))?;
        for kv in self.tree.scan_prefix(key(TRIGGERED, &[account.as_bytes()])) {
            batch.remove(kv?.0);
        }
        if !any {
            return Ok(false);
        }
        Self::put_counts(&mut batch, account, (s, 0));
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// The account's scheduled items in creation order.
    pub fn scheduled_items(&self, account: Uuid) -> Result<Vec<ScheduledItem>> {
        self.scheduled_scan(account).collect()
    }

    /// [`Self::scheduled_items`] read one at a time.
    pub fn scheduled_scan(&self, account: Uuid) -> impl Iterator<Item = Result<ScheduledItem>> + Send + 'static {
        self.tree
            .scan_prefix(key(SCHEDULED, &[account.as_bytes()]))
            .map(|kv| Ok(decode::<ScheduledRecord>(&kv?.1)?.item))
    }

    /// The account's triggered items by original `created`, then by triggering time.
    pub fn triggered_items(&self, account: Uuid) -> Result<Vec<TriggeredItem>> {
        self.triggered_scan(account).collect()
    }

    /// [`Self::triggered_items`] read one at a time.
    pub fn triggered_scan(&self, account: Uuid) -> impl Iterator<Item = Result<TriggeredItem>> + Send + 'static {
        self.tree
            .scan_prefix(key(TRIGGERED, &[account.as_bytes()]))
            .map(|kv| decode::<TriggeredItem>(&kv?.1))
    }

    /// Runs one sync atomically (answering also whether it changed anything): `decide` sees
    /// the account's scheduled items and settings as they are (with the account's writes
    /// held off) and says what to delete and store, with due instants under those settings.
    pub fn sync<R>(
        &self,
        account: Uuid,
        decide: impl FnOnce(&[ScheduledItem], &TimeZoneSetting) -> (R, ScheduledChanges),
    ) -> Result<(R, bool)> {
        let _guard = self.accounts.lock(account);
        let items = self.scheduled_items(account)?;
        let (answer, changes) = decide(&items, &self.settings(account)?);
        let (mut s, t) = self.counts(account)?;
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
        let changed = !changes.delete.is_empty() || !changes.put.is_empty();
        if changed {
            Self::put_counts(&mut batch, account, (s, t));
            self.tree.apply_batch(batch);
        }
        Ok((answer, changed))
    }

    /// The earliest due instant in the index (the triggerer sleeps until then).
    pub fn next_due(&self) -> Result<Option<Timestamp>> {
        match self.tree.scan_prefix([DUE]).next() {
            Some(kv) => Ok(Timestamp::from_key(&kv?.0[1..13])),
            None => Ok(None),
        }
    }

    /// Up to `limit` (due instant, owner, item id) entries due at or before `now`, earliest
    /// first. Reads only index entries that are due.
    pub fn due_items(&self, now: Timestamp, limit: usize) -> Result<Vec<(Timestamp, Uuid, Uuid)>> {
        let mut end = key(DUE, &[&now.to_key()]);
        end.extend_from_slice(&[0xff; 16]);
        let mut out = Vec::new();
        for kv in self.tree.range_inclusive(&[DUE], &end).take(limit) {
            let (k, v) = kv?;
            let (Some(due), Some(id), Some(owner)) = (Timestamp::from_key(&k[1..]), uuid_at(&k, 13), uuid_at(&v, 0))
            else {
                return Err(StoreError::Codec("due index entry".into()));
            };
            out.push((due, owner, id));
        }
        Ok(out)
    }

    pub fn add_trigger(&self, trigger: &Trigger, email: Option<QueuedEmail>) -> Result<bool> {
        let _guard = self.accounts.lock(trigger.owner);
        if self.accounts.get(trigger.owner)?.is_none() {
            return Ok(false);
        }
        let seq = self.seq()?;
        let loc = concat(&[trigger.owner.as_bytes(), &seq, trigger.id.as_bytes()]);
        let mut batch = Batch::default();
        batch.insert(key(TRIGGER, &[&loc]), encode(trigger));
        batch.insert(key(TRIGGER_ID, &[trigger.id.as_bytes()]), loc);
        if let Some(email) = email {
            batch.insert(key(EMAIL, &[&self.seq()?]), encode(&email));
        }
        self.tree.apply_batch(batch);
        Ok(true)
    }

    fn trigger_location(&self, account: Uuid, id: Uuid) -> Result<Option<(Vec<u8>, Trigger)>> {
        let Some(loc) = self.tree.get(key(TRIGGER_ID, &[id.as_bytes()]))? else {
            return Ok(None);
        };
        if loc.get(..16) != Some(account.as_bytes()) {
            return Ok(None);
        }
        let k = key(TRIGGER, &[&loc]);
        match self.tree.get(&k)? {
            Some(v) => Ok(Some((k, decode(&v)?))),
            None => Ok(None),
        }
    }

    pub fn trigger(&self, account: Uuid, id: Uuid) -> Result<Option<Trigger>> {
        Ok(self.trigger_location(account, id)?.map(|(_, t)| t))
    }

    /// The account's triggers in creation order.
    pub fn triggers(&self, account: Uuid) -> Result<Vec<Trigger>> {
        self.tree
            .scan_prefix(key(TRIGGER, &[account.as_bytes()]))
            .map(|kv| decode::<Trigger>(&kv?.1))
            .collect()
    }

    /// Replaces a trigger of the account (verification, new key) and optionally queues an
    /// e-mail, in one batch; `false` when the account has no such trigger.
    pub fn update_trigger(
        &self,
        account: Uuid,
        id: Uuid,
        update: impl FnOnce(Trigger) -> Option<(Trigger, Option<QueuedEmail>)>,
    ) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some((k, trigger)) = self.trigger_location(account, id)? else {
            return Ok(false);
        };
        let Some((trigger, email)) = update(trigger) else {
            return Ok(false);
        };
        let mut batch = Batch::default();
        batch.insert(k, encode(&trigger));
        if let Some(email) = email {
            batch.insert(key(EMAIL, &[&self.seq()?]), encode(&email));
        }
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// Deletes a trigger of the account and its queued e-mails.
    pub fn delete_trigger(&self, account: Uuid, id: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some((k, _)) = self.trigger_location(account, id)? else {
            return Ok(false);
        };
        let mut batch = Batch::default();
        batch.remove(k);
        batch.remove(key(TRIGGER_ID, &[id.as_bytes()]));
        self.drop_pending(&mut batch, |_, _, trigger| trigger == Some(id))?;
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// Up to `limit` queued e-mails, oldest first, with their keys.
    pub fn queued_emails(&self, limit: usize) -> Result<Vec<(Vec<u8>, QueuedEmail)>> {
        self.tree
            .scan_prefix([EMAIL])
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                Ok((k.to_vec(), decode(&v)?))
            })
            .collect()
    }

    /// Deletes the account and everything of it in one batch; `false` when there was none.
    pub fn delete_account(&self, account: Uuid) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let Some(record) = self.accounts.get(account)? else {
            return Ok(false);
        };
        let mut batch = Batch::default();
        for kv in self.tree.scan_prefix(key(SCHEDULED, &[account.as_bytes()])) {
            let (k, v) = kv?;
            let r: ScheduledRecord = decode(&v)?;
            batch.remove(k);
            batch.remove(key(SCHEDULED_ID, &[r.item.id.as_bytes()]));
            batch.remove(key(DUE, &[&r.due.to_key(), r.item.id.as_bytes()]));
        }
        for kv in self.tree.scan_prefix(key(TRIGGERED, &[account.as_bytes()])) {
            let (k, v) = kv?;
            let t: TriggeredItem = decode(&v)?;
            batch.remove(k);
            batch.remove(key(TRIGGERED_ID, &[t.id.as_bytes()]));
        }
        for kv in self.tree.scan_prefix(key(TRIGGER, &[account.as_bytes()])) {
            let (k, v) = kv?;
            let t: Trigger = decode(&v)?;
            batch.remove(k);
            batch.remove(key(TRIGGER_ID, &[t.id.as_bytes()]));
        }
        for (ek, email) in self.queued_emails(usize::MAX)? {
            if email.owner == account {
                batch.remove(ek);
            }
        }
        self.drop_pending(&mut batch, |owner, _, _| owner == account)?;
        batch.remove(key(SETTINGS, &[account.as_bytes()]));
        batch.remove(key(COUNTS, &[account.as_bytes()]));
        self.accounts.delete_into(&record, &mut batch);
        self.tree.apply_batch(batch);
        Ok(true)
    }

    /// Adds to `batch` the removal of every pending delivery and queued e-mail for which
    /// `drop(owner, triggered item, trigger)` holds. Target lists are dropped by owner or
    /// item only (a deleted trigger is skipped when they are expanded).
    fn drop_pending(&self, batch: &mut Batch, drop: impl Fn(Uuid, Option<Uuid>, Option<Uuid>) -> bool) -> Result<()> {
        for kv in self.tree.scan_prefix([DELIVERY]) {
            let (k, v) = kv?;
            let d: Delivery = decode(&v)?;
            if drop(d.owner, Some(d.item), Some(d.trigger)) {
                batch.remove(k);
            }
        }
        for (k, email) in self.queued_emails(usize::MAX)? {
            let item = match &email.kind {
                EmailKind::Triggered { delivery, .. } => Some(delivery.item),
                EmailKind::Rendered { delivery: Some(d), .. } => Some(d.item),
                _ => None,
            };
            if email.owner != Uuid::nil() && drop(email.owner, item, email.trigger) {
                batch.remove(k);
            }
        }
        for kv in self.tree.scan_prefix([TARGETS]) {
            let (k, v) = kv?;
            let t: Targets = decode(&v)?;
            if drop(t.owner, uuid_at(&k, 10), None) {
                batch.remove(k);
            }
        }
        Ok(())
    }

    /// Triggers the scheduled item `id` of `owner` if it is still due at `now`, in one
    /// batch: the triggered copy (with the delivery targets of this moment), and the item
    /// deleted or, when `next` gives its next occurrence (with its due instant under the
    /// owner's settings, read under the account lock), moved there. `None` when the item is
    /// gone or no longer due (edited or deleted meanwhile).
    pub fn trigger_item(
        &self,
        owner: Uuid,
        id: Uuid,
        now: Timestamp,
        next: impl FnOnce(&ScheduledItem, &TimeZoneSetting) -> Option<(ScheduledItem, Timestamp)>,
    ) -> Result<Option<TriggeredItem>> {
        let _guard = self.accounts.lock(owner);
        let Some((item_key, record)) = self.scheduled_location(owner, id)? else {
            // a stale index entry (should not happen): drop it so it is not read again
            return Ok(None);
        };
        if record.due > now {
            return Ok(None);
        }
        let copy = TriggeredItem {
            id: crate::domain::wire::new_uuid(),
            owner,
            tickle: record.item.tickle.clone(),
            created: record.item.created,
            triggered: now,
            attempts: Vec::new(),
        };
        let (mut s, t) = self.counts(owner)?;
        let mut batch = Batch::default();
        let seq = self.seq()?;
        let loc = concat(&[owner.as_bytes(), &copy.created.to_key(), &now.to_key(), &seq]);
        batch.insert(key(TRIGGERED, &[&loc]), encode(&copy));
        batch.insert(key(TRIGGERED_ID, &[copy.id.as_bytes()]), loc);
        let triggers = self.triggers(owner)?;
        let inbox: Vec<Uuid> = triggers
            .iter()
            .filter(|t| matches!(t.kind, TriggerKind::Inbox { .. }))
            .map(|t| t.id)
            .collect();
        let email: Vec<Uuid> = triggers
            .iter()
            .filter(|t| matches!(t.kind, TriggerKind::Email { verified: true, .. }))
            .map(|t| t.id)
            .collect();
        for (kind, list) in [(b'i', inbox), (b'e', email)] {
            if !list.is_empty() {
                let targets = Targets { owner, triggers: list };
                batch.insert(key(TARGETS, &[&[kind], &seq, copy.id.as_bytes()]), encode(&targets));
            }
        }
        batch.remove(key(DUE, &[&record.due.to_key(), id.as_bytes()]));
        match next(&record.item, &self.settings(owner)?) {
            Some((moved, due)) => {
                batch.insert(item_key, encode(&ScheduledRecord { item: moved, due }));
                batch.insert(key(DUE, &[&due.to_key(), id.as_bytes()]), owner.as_bytes().to_vec());
            }
            None => {
                batch.remove(item_key);
                batch.remove(key(SCHEDULED_ID, &[id.as_bytes()]));
                s = s.saturating_sub(1);
            }
        }
        Self::put_counts(&mut batch, owner, (s, t + 1));
        self.tree.apply_batch(batch);
        Ok(Some(copy))
    }

    /// Removes a due-index entry whose item no longer exists.
    pub fn drop_due_entry(&self, due: Timestamp, id: Uuid) -> Result<()> {
        self.tree.remove(key(DUE, &[&due.to_key(), id.as_bytes()]));
        Ok(())
    }

    /// Turns up to `limit` target lists of one kind (`email` or inbox) into pending
    /// deliveries (inbox) or queued e-mails to render (e-mail); triggers deleted meanwhile,
    /// and e-mail triggers no longer verified, are skipped. Answers how many lists it took.
    pub fn expand_targets(&self, email: bool, limit: usize) -> Result<usize> {
        let kind = if email { b'e' } else { b'i' };
        let lists: Vec<(sled::IVec, sled::IVec)> = self
            .tree
            .scan_prefix([TARGETS, kind])
            .take(limit)
            .collect::<std::result::Result<_, _>>()?;
        for (k, v) in &lists {
            let targets: Targets = decode(v)?;
            let Some(item) = uuid_at(k, 10) else { continue };
            let _guard = self.accounts.lock(targets.owner);
            if self.tree.get(k)?.is_none() {
                continue; // dropped meanwhile (item or account deleted)
            }
            let mut batch = Batch::default();
            batch.remove(k.clone());
            for trigger_id in &targets.triggers {
                let Some(trigger) = self.trigger(targets.owner, *trigger_id)? else {
                    continue;
                };
                let delivery = Delivery {
                    id: crate::domain::wire::new_uuid(),
                    owner: targets.owner,
                    item,
                    trigger: trigger.id,
                    trigger_created: trigger.created,
                    email,
                    failures: 0,
                    not_before: Timestamp::from_unix(0, 0),
                };
                match (&trigger.kind, email) {
                    (TriggerKind::Inbox { .. }, false) => {
                        batch.insert(
                            key(DELIVERY, &[&self.seq()?, delivery.id.as_bytes()]),
                            encode(&delivery),
                        );
                    }
                    (
                        TriggerKind::Email {
                            address,
                            verified: true,
                            ..
                        },
                        true,
                    ) => {
                        let to = address.clone();
                        let queued =
                            QueuedEmail::new(targets.owner, Some(trigger.id), EmailKind::Triggered { delivery, to });
                        batch.insert(key(EMAIL, &[&self.seq()?]), encode(&queued));
                    }
                    _ => {}
                }
            }
            self.tree.apply_batch(batch);
        }
        Ok(lists.len())
    }

    /// Pending inbox deliveries, oldest first, with their keys.
    pub fn pending_deliveries(&self, limit: usize) -> Result<Vec<(Vec<u8>, Delivery)>> {
        self.tree
            .scan_prefix([DELIVERY])
            .take(limit)
            .map(|kv| {
                let (k, v) = kv?;
                Ok((k.to_vec(), decode(&v)?))
            })
            .collect()
    }

    /// Replaces a pending delivery (after a transient failure) if it is still pending.
    pub fn postpone_delivery(&self, k: &[u8], delivery: &Delivery) -> Result<()> {
        let _guard = self.accounts.lock(delivery.owner);
        if self.tree.get(k)?.is_some() {
            self.tree.insert(k, encode(delivery));
        }
        Ok(())
    }

    /// Records the final outcome of a delivery on its triggered item and removes the
    /// pending record (`k`: its delivery key, or e-mail queue key), in one batch. Nothing
    /// happens when the record was dropped meanwhile.
    pub fn finish_delivery(&self, k: &[u8], delivery: &Delivery, outcome: Outcome) -> Result<()> {
        let _guard = self.accounts.lock(delivery.owner);
        if self.tree.get(k)?.is_none() {
            return Ok(());
        }
        let mut batch = Batch::default();
        batch.remove(k);
        if let Some((item_key, mut item)) = self.triggered_location(delivery.owner, delivery.item)? {
            item.attempts.push(Attempt {
                trigger: delivery.trigger,
                trigger_created: delivery.trigger_created,
                delivery: delivery.id,
                outcome,
            });
            item.attempts
                .sort_by_key(|a| (a.outcome.is_email(), a.trigger_created, a.trigger));
            batch.insert(item_key, encode(&item));
        }
        self.tree.apply_batch(batch);
        Ok(())
    }

    /// Replaces a queued e-mail (rendered, or postponed) if it is still queued.
    pub fn replace_email(&self, k: &[u8], email: &QueuedEmail) -> Result<()> {
        let _guard = self.accounts.lock(email.owner);
        if self.tree.get(k)?.is_some() {
            self.tree.insert(k, encode(email));
        }
        Ok(())
    }

    /// Removes a pending delivery or queued e-mail without recording anything.
    pub fn remove_pending(&self, k: &[u8]) -> Result<()> {
        self.tree.remove(k);
        Ok(())
    }

    /// Queues an e-mail (admin notifications).
    pub fn queue_email(&self, email: &QueuedEmail) -> Result<()> {
        self.tree.insert(key(EMAIL, &[&self.seq()?]), encode(email));
        Ok(())
    }

    /// `POST /scheduler/item/retry`: the failed deliveries of the account's triggered items
    /// `ids` become pending again (same delivery id, fresh budget), unless their trigger is
    /// gone. Answers whether anything changed.
    pub fn retry_failed(&self, account: Uuid, ids: &[Uuid]) -> Result<bool> {
        let _guard = self.accounts.lock(account);
        let mut batch = Batch::default();
        let mut changed = false;
        for id in ids {
            let Some((item_key, mut item)) = self.triggered_location(account, *id)? else {
                continue;
            };
            let mut keep = Vec::new();
            for attempt in std::mem::take(&mut item.attempts) {
                let trigger = self.trigger(account, attempt.trigger)?;
                let (Some(trigger), true) = (trigger, attempt.outcome.is_failure()) else {
                    keep.push(attempt);
                    continue;
                };
                changed = true;
                let delivery = Delivery {
                    id: attempt.delivery,
                    owner: account,
                    item: item.id,
                    trigger: trigger.id,
                    trigger_created: trigger.created,
                    email: attempt.outcome.is_email(),
                    failures: 0,
                    not_before: Timestamp::from_unix(0, 0),
                };
                match &trigger.kind {
                    TriggerKind::Inbox { .. } => {
                        batch.insert(
                            key(DELIVERY, &[&self.seq()?, delivery.id.as_bytes()]),
                            encode(&delivery),
                        );
                    }
                    TriggerKind::Email { address, .. } => {
                        let to = address.clone();
                        let queued = QueuedEmail::new(account, Some(trigger.id), EmailKind::Triggered { delivery, to });
                        batch.insert(key(EMAIL, &[&self.seq()?]), encode(&queued));
                    }
                }
            }
            item.attempts = keep;
            batch.insert(item_key, encode(&item));
        }
        if changed {
            self.tree.apply_batch(batch);
        }
        Ok(changed)
    }

    /// Whether the payment event was handled (successfully or queued for the retrier).
    pub fn event_seen(&self, id: &str) -> Result<bool> {
        Ok(self.tree.contains_key(key(EVENT_HANDLED, &[id.as_bytes()]))?
            || self.tree.contains_key(key(EVENT_FAILED, &[id.as_bytes()]))?)
    }

    /// Marks a payment event handled; `failed` keeps it (JSON) for the retrier instead.
    pub fn mark_event(&self, id: &str, failed: Option<&[u8]>) -> Result<()> {
        let mut batch = Batch::default();
        match failed {
            Some(event) => batch.insert(key(EVENT_FAILED, &[id.as_bytes()]), event),
            None => {
                batch.remove(key(EVENT_FAILED, &[id.as_bytes()]));
                batch.insert(key(EVENT_HANDLED, &[id.as_bytes()]), &[] as &[u8]);
            }
        }
        self.tree.apply_batch(batch);
        Ok(())
    }

    /// Payment events whose handling failed (JSON).
    pub fn failed_events(&self) -> Result<Vec<Vec<u8>>> {
        self.tree
            .scan_prefix([EVENT_FAILED])
            .map(|kv| Ok(kv?.1.to_vec()))
            .collect()
    }
}
