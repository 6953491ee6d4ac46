//! Scheduler accounts moved in from a Tickler server, streamed in bounded journalled batches
//! (see [`crate::store::sled::moving_in`]).

use super::SchedulerStore;
use crate::domain::account::Account;
use crate::domain::scheduler::models::{ScheduledItem, TriggeredItem};
use crate::domain::wire::Timestamp;
use crate::store::sled::accounts::AccountStore;
use crate::store::sled::moving_in::{all_or_nothing, arrivals, write_in_key_order, SchedulerMoving, Target};
use crate::store::sled::records::raw;
use crate::store::sled::{keys, records};
use crate::store::WaitDurable;
use crate::store::{Arrival, Result, StoreError};

/// An item of a scheduler account moving in.
pub enum SchedulerItem {
    /// With its due instant under the account's settings.
    Scheduled(ScheduledItem, Timestamp),
    Triggered(TriggeredItem),
}

impl SchedulerStore {
    /// What would happen to each of `accounts` (new here, here already, or a conflict of
    /// its username or uuid), without writing anything; `true` when one is a conflict.
    pub fn move_in_arrivals<'a>(&self, accounts: impl Iterator<Item = &'a Account>) -> Result<(Vec<Arrival>, bool)> {
        arrivals(accounts, |a| self.accounts.arrival(a))
    }

    /// Whether a scheduled item, triggered item or trigger of this uuid is here (of any
    /// account): they are found by uuid alone.
    pub fn id_taken(&self, id: uuid::Uuid) -> Result<bool> {
        Ok(self.tree.contains_key(keys::scheduled_id(id))?
            || self.tree.contains_key(keys::triggered_id(id))?
            || self.tree.contains_key(keys::trigger_id(id))?)
    }
}

/// Writes `accounts` (each checked by [`SchedulerStore::move_in_arrivals`] to be new here)
/// with their settings and triggers, and the items `items` hands on (each of one of
/// `accounts`; scheduled ones with their due-index entries) into `target` in bounded batches,
/// each on disk before the next, all or nothing through one import journal
/// ([`crate::store::sled::imports`]): when `items` or a write fails, what was written is
/// undone (now, or at the next open). An item uuid that is here already (one the run wrote
/// itself: the file has it twice) is an error. Answers how many scheduled and triggered
/// items each account got.
pub fn move_in_scheduler<E: From<StoreError>>(
    target: &mut Target,
    accounts: &[SchedulerMoving],
    items: impl FnOnce(&mut dyn FnMut(SchedulerItem) -> Result<()>) -> std::result::Result<(), E>,
    wait: WaitDurable<'_>,
) -> std::result::Result<Vec<(u64, u64)>, E> {
    let (batches, mut later) = target.batches(1, wait)?;
    let index: std::collections::HashMap<uuid::Uuid, usize> =
        accounts.iter().enumerate().map(|(i, a)| (a.account.id, i)).collect();
    all_or_nothing(batches, |batches| {
        let mut counts = vec![(0u64, 0u64); accounts.len()];
        for arriving in accounts {
            let id = arriving.account.id;
            AccountStore::put_arriving_into(batches, &arriving.account, &[])?;
            if let Some(settings) = &arriving.settings {
                batches.insert(keys::settings(id), records::settings::encode(settings))?;
            }
            for trigger in &arriving.triggers {
                let place = keys::trigger_place(id, batches.tree()?.next_id()?, trigger.id);
                batches.insert_new(keys::trigger(&place), records::trigger::encode(trigger));
                later.put(&keys::trigger_id(trigger.id), &place)?;
                batches.write_if_full()?;
            }
        }
        // the scheduled items in the file's order (mostly their places' order); what is in
        // random order so (the uuid and due indexes, the triggered items read in their
        // uuids' order), put off and written sorted
        items(&mut |item| {
            let owner = match &item {
                SchedulerItem::Scheduled(i, _) => i.owner,
                SchedulerItem::Triggered(i) => i.owner,
            };
            let i = *index
                .get(&owner)
                .ok_or_else(|| StoreError::Codec(format!("an item of {owner}, an account not moving in")))?;
            let seq = batches.tree()?.next_id()?;
            match item {
                SchedulerItem::Scheduled(item, due) => {
                    let place = keys::item_place(owner, item.created, seq);
                    later.put(&keys::scheduled_id(item.id), &place)?;
                    later.put(&keys::due(due, item.id), &raw::uuid(owner))?;
                    batches.insert_new(keys::scheduled(&place), records::scheduled::encode(&item, due));
                    counts[i].0 += 1;
                }
                SchedulerItem::Triggered(item) => {
                    let place = keys::triggered_place(owner, item.created, item.triggered, seq);
                    later.put(&keys::triggered(&place), &records::triggered::encode(&item))?;
                    later.put(&keys::triggered_id(item.id), &place)?;
                    counts[i].1 += 1;
                }
            }
            batches.write_if_full()?;
            Ok(())
        })?;
        // one uuid names one item or trigger: each of the three indexes is looked up in
        // the others (in the order of the uuids, as they are written)
        write_in_key_order(batches, &mut later, |tree, key| match keys::scheduler_uuid(key) {
            Some(id) => Ok(tree.contains_key(keys::scheduled_id(id))?
                || tree.contains_key(keys::triggered_id(id))?
                || tree.contains_key(keys::trigger_id(id))?),
            None => tree.contains_key(key),
        })?;
        for (arriving, n) in accounts.iter().zip(&counts) {
            batches.insert(keys::count(arriving.account.id), raw::counts(*n))?;
        }
        Ok(counts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::account::PasswordHash;
    use crate::domain::scheduler::models::{Day, Tickle, Trigger, TriggerKind};
    use crate::store::sled::moving_in::SchedulerMoving;
    use crate::store::Store;
    use uuid::Uuid;

    const ALICE: Uuid = Uuid::from_bytes([1; 16]);
    const TRIGGER: Uuid = Uuid::from_bytes([2; 16]);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_unix(1_600_000_000 + secs, 0)
    }

    fn tickle(n: u32) -> Tickle {
        Tickle {
            content: format!("item {n}").into_bytes(),
            day: Day {
                year: 2030,
                month: 1 + n % 12,
                day: 1 + n % 28,
            },
            time: None,
            recurrence: None,
        }
    }

    /// `n` scheduled items (uuids 0x40…) then `n` triggered ones (uuids 0x50…), written for
    /// alice with one inbox trigger; `same`: one more item, scheduled, of this uuid.
    fn move_in(dir: &std::path::Path, n: u32, same: Option<Uuid>) -> Result<Vec<(u64, u64)>> {
        let id = |prefix: u8, i: u32| {
            let mut id = [prefix; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            Uuid::from_bytes(id)
        };
        let alice = SchedulerMoving {
            account: Account {
                id: ALICE,
                username: "alice".into(),
                password_hash: PasswordHash::LegacyBcrypt("$2y$04$h".into()),
                created: at(0),
                last_login: None,
                epoch: 0,
            },
            settings: None,
            triggers: vec![Trigger {
                id: TRIGGER,
                owner: ALICE,
                created: at(0),
                kind: TriggerKind::Inbox {
                    url: "https://inbox.example.org".into(),
                    username: "alice".into(),
                    access_key: "ab".repeat(16),
                },
            }],
        };
        let scheduled = |id: Uuid, i: u32| {
            let item = ScheduledItem {
                id,
                owner: ALICE,
                tickle: tickle(i),
                created: at(i as i64),
                server_time: 0,
            };
            SchedulerItem::Scheduled(item, at(1_000_000 - i as i64))
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let wait = |w: crate::store::Written<()>| runtime.block_on(w.durable());
        let mut target = Target::open(dir).expect("open");
        move_in_scheduler(
            &mut target,
            &[alice],
            |sink| {
                for i in 0..n {
                    sink(scheduled(id(0x40, i), i))?;
                }
                for i in 0..n {
                    sink(SchedulerItem::Triggered(TriggeredItem {
                        id: id(0x50, i),
                        owner: ALICE,
                        tickle: tickle(i),
                        created: at(i as i64),
                        triggered: at(2 * i as i64),
                        attempts: Vec::new(),
                    }))?;
                }
                if let Some(same) = same {
                    sink(scheduled(same, n))?;
                }
                Ok::<(), StoreError>(())
            },
            &wait,
        )
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn items_move_in_with_their_indexes_and_one_uuid_never_names_two_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        // a scheduled item with a triggered item's uuid, or the trigger's: each found only
        // when the indexes are written, sorted, after every item; nothing is left
        let mut triggered_7 = [0x50; 16];
        triggered_7[..4].copy_from_slice(&7u32.to_be_bytes());
        for same in [Uuid::from_bytes(triggered_7), TRIGGER] {
            let path = dir.path().to_path_buf();
            let failed = tokio::task::spawn_blocking(move || move_in(&path, 3_000, Some(same)))
                .await
                .unwrap();
            match failed {
                Err(StoreError::Codec(why)) => assert!(
                    why.contains(&format!("the uuid {same} of an item or trigger is in the file twice")),
                    "{why}"
                ),
                other => panic!("{other:?}"),
            }
            let store = Store::open(dir.path()).expect("open");
            assert!(store.scheduler.accounts.by_username("alice").await.unwrap().is_none());
            assert_eq!(store.scheduler.items.total_counts().await.unwrap(), (0, 0));
        }
        let path = dir.path().to_path_buf();
        let counts = tokio::task::spawn_blocking(move || move_in(&path, 3_000, None))
            .await
            .unwrap()
            .expect("moved in");
        assert_eq!(counts, [(3_000, 3_000)]);
        let store = Store::open(dir.path()).expect("open");
        let items = &store.scheduler.items;
        assert_eq!(items.counts(ALICE).await.unwrap(), (3_000, 3_000));
        // every record is found by its uuid, and the due index has every scheduled item
        let scheduled = items.scheduled_items(ALICE).await.unwrap();
        assert_eq!(scheduled.len(), 3_000);
        for item in scheduled.iter().step_by(97) {
            assert_eq!(
                items.scheduled(ALICE, item.id).await.unwrap().map(|i| i.id),
                Some(item.id)
            );
        }
        let triggered = items.triggered_items(ALICE).await.unwrap();
        assert_eq!(triggered.len(), 3_000);
        for item in triggered.iter().step_by(97) {
            assert_eq!(
                items.triggered(ALICE, item.id).await.unwrap().map(|i| i.id),
                Some(item.id)
            );
        }
        assert_eq!(store.scheduler.triggers.triggers(ALICE).await.unwrap().len(), 1);
        let due = items.due_items(at(2_000_000), 10_000).await.unwrap();
        assert_eq!(due.len(), 3_000);
    }
}
