//! One store test suite for every engine (issue 21): each scenario takes a concern's trait
//! object and asserts what the trait promises, whatever stands behind it. The sled store
//! runs it here; the PostgreSQL store runs the same functions in its own tests (against a
//! throwaway cluster). Concerns join as their PostgreSQL implementations do.

use super::inbox::{AddOutcome, ImportOutcome};
use super::scheduler::{AddOutcome as SchedulerAddOutcome, ImportIds, ImportOutcome as SchedulerImportOutcome};
use super::{
    Accounts, Administration, Deliveries, Emails, InboxItems, PageSize, PaymentEvents, Registration, ScheduledItems,
    StoreError, Triggers, Written,
};
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::email::{EmailKind, Message, QueuedEmail, Stage};
use crate::domain::inbox::models::{InboxItem, ItemType};
use crate::domain::inbox::sync::ItemChanges;
use crate::domain::permissions::Permissions;
use crate::domain::scheduler::models::{
    subscribe, Attempt, Day, Delivery, Outcome, Recurrence, ScheduledItem, Tickle, TimeZoneSetting, Trigger,
    TriggerKind, TriggeredItem,
};
use crate::domain::scheduler::push::{PushSubscription, WebhookFormat};
use crate::domain::scheduler::sync::ScheduledChanges;
use crate::domain::transfer::SchedulerEntry;
use crate::domain::wire::{new_uuid, Timestamp};
use std::sync::Arc;

/// Every field of an account, to compare (the domain type has no equality of its own).
fn fields(a: &Account) -> (uuid::Uuid, &str, &PasswordHash, Timestamp, Option<Timestamp>, u64) {
    (a.id, &a.username, &a.password_hash, a.created, a.last_login, a.epoch)
}

type KeyFields = (uuid::Uuid, String, Timestamp, u64, u32, KeySecret);

/// Every field of an access key, to compare.
fn key_fields(k: &AccessKey) -> KeyFields {
    (
        k.id,
        k.name.clone(),
        k.created,
        k.seq,
        k.permissions.0,
        k.secret.clone(),
    )
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix(secs, 123_456_789)
}

/// Registering, finding, logins, passwords and their epochs, customers, access keys, and
/// exactly one winner among concurrent registrations of one username.
pub(crate) async fn accounts(accounts: Arc<dyn Accounts>) {
    let registered = accounts
        .register("alice", "hash-1".into(), at(10))
        .await
        .expect("register");
    let alice = match registered.durable().await.expect("durable") {
        Registration::Created(a) => a,
        Registration::Taken => panic!("a fresh store has no alice"),
    };
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.created, at(10), "nanoseconds kept");
    let again = accounts
        .register("alice", "hash-2".into(), at(11))
        .await
        .expect("register");
    assert!(!again.changed());
    assert!(matches!(again.durable().await.expect("durable"), Registration::Taken));
    let got = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(fields(&got), fields(&alice));
    let found = accounts.by_username("alice").await.expect("find").expect("alice");
    assert_eq!(fields(&found), fields(&alice));
    assert!(
        accounts.by_username("Alice").await.expect("find").is_none(),
        "case counts"
    );
    assert!(accounts.get(new_uuid()).await.expect("get").is_none());

    // logins and passwords
    assert!(accounts
        .set_last_login(alice.id, at(20))
        .await
        .expect("login")
        .durable()
        .await
        .expect("durable"));
    assert!(!accounts
        .set_last_login(new_uuid(), at(20))
        .await
        .expect("login")
        .durable()
        .await
        .expect("durable"));
    let alice = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(alice.last_login, Some(at(20)));
    let stale = PasswordHash::Pbkdf2("not the hash".into());
    assert!(!accounts
        .change_password(alice.id, &stale, "hash-3".into())
        .await
        .expect("change")
        .durable()
        .await
        .expect("durable"));
    assert!(accounts
        .change_password(alice.id, &alice.password_hash, "hash-3".into())
        .await
        .expect("change")
        .durable()
        .await
        .expect("durable"));
    let changed = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(changed.password_hash, PasswordHash::Pbkdf2("hash-3".into()));
    assert_eq!(changed.epoch, alice.epoch + 1, "a new credential epoch");

    // the payment customer
    assert_eq!(accounts.customer(alice.id).await.expect("customer"), None);
    assert!(accounts
        .set_customer(alice.id, "cus_1")
        .await
        .expect("set")
        .durable()
        .await
        .expect("durable"));
    assert_eq!(
        accounts.customer(alice.id).await.expect("customer").as_deref(),
        Some("cus_1")
    );

    // access keys
    let s1 = accounts.next_key_seq().await.expect("seq");
    let s2 = accounts.next_key_seq().await.expect("seq");
    assert!(s2 > s1, "{s1} then {s2}");
    let key = |name: &str, seq, secret| AccessKey {
        id: new_uuid(),
        name: name.into(),
        created: at(30),
        seq,
        permissions: Permissions(0b1011),
        secret,
    };
    let first = key("first", s1, KeySecret::Digest([1; 32]));
    let second = key("second", s2, KeySecret::Digest([2; 32]));
    for k in [&second, &first] {
        assert!(accounts
            .add_access_key(alice.id, k)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
    }
    assert!(!accounts
        .add_access_key(new_uuid(), &key("nobody's", s2 + 1, KeySecret::Digest([3; 32])))
        .await
        .expect("add")
        .durable()
        .await
        .expect("durable"));
    let listed: Vec<KeyFields> = accounts
        .access_keys(alice.id)
        .await
        .expect("keys")
        .iter()
        .map(key_fields)
        .collect();
    assert_eq!(
        listed,
        vec![key_fields(&first), key_fields(&second)],
        "in order of creation"
    );
    let got = accounts
        .access_key(alice.id, second.id)
        .await
        .expect("key")
        .expect("the key");
    assert_eq!(key_fields(&got), key_fields(&second));
    assert!(
        accounts.access_key(new_uuid(), second.id).await.expect("key").is_none(),
        "only the owner's"
    );
    let (owner, found) = accounts
        .access_key_by_digest(&[2; 32])
        .await
        .expect("by digest")
        .expect("found");
    assert_eq!((owner, key_fields(&found)), (alice.id, key_fields(&second)));
    assert!(accounts
        .access_key_by_digest(&[9; 32])
        .await
        .expect("by digest")
        .is_none());
    assert!(accounts.legacy_access_keys(alice.id).await.expect("legacy").is_empty());
    assert!(accounts
        .delete_access_key(alice.id, first.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert!(!accounts
        .delete_access_key(alice.id, first.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    let listed: Vec<KeyFields> = accounts
        .access_keys(alice.id)
        .await
        .expect("keys")
        .iter()
        .map(key_fields)
        .collect();
    assert_eq!(listed, vec![key_fields(&second)]);

    // twelve registrations of one name at once: exactly one account
    let racing: Vec<_> = (0..12)
        .map(|i| {
            let accounts = accounts.clone();
            tokio::spawn(async move {
                let written = accounts
                    .register("bob", format!("hash-{i}"), at(40))
                    .await
                    .expect("register");
                written.durable().await.expect("durable")
            })
        })
        .collect();
    let mut created = 0;
    for r in racing {
        created += usize::from(matches!(r.await.expect("task"), Registration::Created(_)));
    }
    assert_eq!(created, 1);
    let mut names: Vec<String> = accounts
        .all()
        .await
        .expect("all")
        .into_iter()
        .map(|a| a.username)
        .collect();
    names.sort();
    assert_eq!(names, ["alice", "bob"]);
}

async fn account(accounts: &dyn Accounts, name: &str) -> uuid::Uuid {
    let registered = accounts.register(name, "hash".into(), at(1)).await.expect("register");
    match registered.durable().await.expect("durable") {
        Registration::Created(a) => a.id,
        Registration::Taken => panic!("{name} is taken"),
    }
}

fn text(body: &str, secs: i64) -> InboxItem {
    InboxItem {
        id: new_uuid(),
        kind: ItemType::Text,
        data: body.as_bytes().to_vec(),
        created: at(secs),
    }
}

async fn added(
    items: &dyn InboxItems,
    account: uuid::Uuid,
    item: &InboxItem,
    key: Option<&str>,
    max: Option<u64>,
) -> AddOutcome {
    let written = items.add_item(account, item, key, max).await.expect("add");
    written.durable().await.expect("durable")
}

/// Imports `batch` through the trait (from a blocking thread, as the handlers do).
async fn import(
    items: Arc<dyn InboxItems>,
    account: uuid::Uuid,
    batch: Vec<InboxItem>,
    max: Option<u64>,
) -> ImportOutcome {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Handle::current();
        let ids: Vec<uuid::Uuid> = batch.iter().map(|i| i.id).collect();
        let checked = items.check_import(account, &ids, max, 0).expect("check");
        let wait = |w: Written<()>| runtime.block_on(w.durable());
        let mut feed = |each: &mut dyn FnMut(InboxItem) -> Result<(), StoreError>| {
            for item in &batch {
                each(item.clone())?;
            }
            Ok(())
        };
        let outcome = items
            .import_items(account, &ids, max, &mut feed, &wait)
            .expect("import");
        assert_eq!(checked, outcome, "the check says what the import does");
        outcome
    })
    .await
    .expect("the import's thread")
}

/// Adding (limits, idempotency keys), reading in order and in pages, deleting, syncing,
/// importing (another account's ids under ids of their own, limits) and deleting accounts.
pub(crate) async fn inbox_items(accounts: Arc<dyn Accounts>, items: Arc<dyn InboxItems>) {
    let alice = account(&*accounts, "alice").await;
    let bob = account(&*accounts, "bob").await;
    let (late, early, same_a, same_b) = (
        text("late", 50),
        text("early", 10),
        text("same a", 30),
        text("same b", 30),
    );
    for item in [&late, &early, &same_a, &same_b] {
        assert_eq!(
            added(&*items, alice, item, None, None).await,
            AddOutcome::Added(item.id)
        );
    }
    let order = vec![early.id, same_a.id, same_b.id, late.id];
    assert_eq!(
        items.item_ids(alice).await.expect("ids"),
        order,
        "oldest first, then as added"
    );
    assert_eq!(
        items
            .items(alice)
            .await
            .expect("items")
            .iter()
            .map(|i| i.id)
            .collect::<Vec<_>>(),
        order
    );
    assert_eq!(items.first_item(alice).await.expect("first"), Some(early.clone()));
    assert_eq!(items.item(alice, late.id).await.expect("item"), Some(late.clone()));
    assert_eq!(items.item(bob, late.id).await.expect("item"), None, "only the owner's");
    assert_eq!(items.count(alice).await.expect("count"), 4);
    // pages, of at most 3 items
    let three = PageSize {
        items: 3,
        bytes: usize::MAX,
    };
    let ids = |page: Vec<InboxItem>| page.iter().map(|i| i.id).collect::<Vec<_>>();
    let page = items.items_page(alice, None, three).await.expect("page");
    assert!(three.is_full(&page));
    assert_eq!(ids(page), order[..3]);
    let page = items.items_page(alice, Some(same_b.id), three).await.expect("page");
    assert!(!three.is_full(&page));
    assert_eq!(ids(page), order[3..]);
    assert!(items
        .items_page(alice, Some(late.id), three)
        .await
        .expect("page")
        .is_empty());
    // and of data: the item that fills a page ends it (the data: "early" 5 bytes, "same
    // a" 6, "same b" 6, "late" 4); an item larger than a page is a page of its own
    let eleven = PageSize { items: 32, bytes: 11 };
    let page = items.items_page(alice, None, eleven).await.expect("page");
    assert!(eleven.is_full(&page));
    assert_eq!(ids(page), order[..2]);
    let page = items.items_page(alice, Some(same_a.id), eleven).await.expect("page");
    assert!(!eleven.is_full(&page));
    assert_eq!(ids(page), order[2..]);
    let one = PageSize { items: 32, bytes: 1 };
    assert_eq!(
        ids(items.items_page(alice, Some(early.id), one).await.expect("page")),
        order[1..2]
    );
    // limits and idempotency keys
    let one_more = text("one more", 60);
    assert_eq!(
        added(&*items, alice, &one_more, Some("k"), Some(4)).await,
        AddOutcome::LimitReached
    );
    assert_eq!(
        added(&*items, alice, &one_more, Some("k"), Some(5)).await,
        AddOutcome::Added(one_more.id)
    );
    assert_eq!(
        added(&*items, alice, &text("again", 61), Some("k"), Some(5)).await,
        AddOutcome::Repeated(one_more.id)
    );
    assert_eq!(
        added(&*items, bob, &text("bob's", 62), Some("k"), None).await,
        AddOutcome::Added(items.item_ids(bob).await.expect("ids")[0])
    );
    // deleting
    assert!(items
        .delete_item(alice, one_more.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert!(!items
        .delete_item(alice, one_more.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert!(
        !items
            .delete_item(bob, late.id)
            .await
            .expect("delete")
            .durable()
            .await
            .expect("durable"),
        "not bob's"
    );
    // a sync sees the items and applies what it decides
    let from_client = text("from a client", 70);
    let mut seen = 0;
    let mut decide = |now: &[InboxItem]| {
        seen = now.len();
        ItemChanges {
            delete: vec![early.id],
            add: vec![from_client.clone()],
        }
    };
    assert!(items.sync(alice, &mut decide).await.expect("sync").changed());
    assert_eq!(seen, 4);
    assert_eq!(
        items.item_ids(alice).await.expect("ids"),
        vec![same_a.id, same_b.id, late.id, from_client.id]
    );
    // imports: new ids stored, own ids kept, another account's id stored under one of its own
    let bobs = items.items(bob).await.expect("bob's")[0].clone();
    let fresh = text("imported", 80);
    let outcome = import(
        items.clone(),
        alice,
        vec![fresh.clone(), late.clone(), bobs.clone(), fresh.clone()],
        None,
    )
    .await;
    assert_eq!(outcome, ImportOutcome::Imported { added: 2, skipped: 2 });
    assert_eq!(items.count(alice).await.expect("count"), 6);
    assert_eq!(items.item(alice, fresh.id).await.expect("item"), Some(fresh.clone()));
    assert_eq!(
        items.item(bob, bobs.id).await.expect("item"),
        Some(bobs.clone()),
        "bob's item stays his"
    );
    let renamed: Vec<InboxItem> = items
        .items(alice)
        .await
        .expect("items")
        .into_iter()
        .filter(|i| i.data == bobs.data)
        .collect();
    assert_eq!(renamed.len(), 1);
    assert_ne!(renamed[0].id, bobs.id);
    // the same import again adds nothing; an import over the limit adds nothing at all
    let again = import(items.clone(), alice, vec![fresh.clone(), bobs.clone()], None).await;
    assert_eq!(again, ImportOutcome::Imported { added: 0, skipped: 2 });
    let over = import(items.clone(), alice, vec![text("x", 90), text("y", 91)], Some(7)).await;
    assert_eq!(over, ImportOutcome::LimitReached);
    assert_eq!(items.count(alice).await.expect("count"), 6);
    assert_eq!(items.total_items().await.expect("total"), 7);
    // deleting the account deletes its items
    assert!(items
        .delete_account(alice)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert_eq!(items.count(alice).await.expect("count"), 0);
    assert_eq!(items.total_items().await.expect("total"), 1);
}

/// Triggers of each kind: added, found by id (only the owner's), listed in order of
/// creation, updated (an e-mail trigger verified), deleted; nothing for an account that is
/// gone.
pub(crate) async fn triggers(accounts: Arc<dyn Accounts>, triggers: Arc<dyn Triggers>) {
    let alice = account(&*accounts, "alice").await;
    let bob = account(&*accounts, "bob").await;
    let email = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(10),
        kind: TriggerKind::Email {
            address: "alice@example.org".into(),
            verified: false,
            key_digest: [5; 32],
        },
    };
    let inbox = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(20),
        kind: TriggerKind::Inbox {
            url: "http://127.0.0.1:8001".into(),
            username: "alice".into(),
            access_key: "00ff".repeat(8),
        },
    };
    for t in [&email, &inbox] {
        assert!(triggers
            .add_trigger(t, None)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
    }
    let gone = Trigger {
        id: new_uuid(),
        owner: new_uuid(),
        ..inbox.clone()
    };
    assert!(!triggers
        .add_trigger(&gone, None)
        .await
        .expect("add")
        .durable()
        .await
        .expect("durable"));
    assert_eq!(triggers.trigger_owner(inbox.id).await.expect("owner"), Some(alice));
    assert_eq!(triggers.trigger_owner(gone.id).await.expect("owner"), None);
    assert_eq!(
        triggers.trigger(alice, inbox.id).await.expect("trigger"),
        Some(inbox.clone())
    );
    assert_eq!(
        triggers.trigger(bob, inbox.id).await.expect("trigger"),
        None,
        "only the owner's"
    );
    assert_eq!(
        triggers.triggers(alice).await.expect("list"),
        vec![email.clone(), inbox.clone()]
    );
    assert!(triggers.triggers(bob).await.expect("list").is_empty());
    let mut verify = |mut t: Trigger| match &mut t.kind {
        TriggerKind::Email { verified, .. } => {
            *verified = true;
            Some((t, None))
        }
        _ => None,
    };
    assert!(triggers
        .update_trigger(alice, email.id, &mut verify)
        .await
        .expect("update")
        .durable()
        .await
        .expect("durable"));
    assert!(matches!(
        triggers
            .trigger(alice, email.id)
            .await
            .expect("trigger")
            .map(|t| t.kind),
        Some(TriggerKind::Email { verified: true, .. })
    ));
    assert!(
        !triggers
            .update_trigger(bob, email.id, &mut verify)
            .await
            .expect("update")
            .durable()
            .await
            .expect("durable"),
        "not bob's"
    );
    assert!(triggers
        .delete_trigger(alice, inbox.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert!(!triggers
        .delete_trigger(alice, inbox.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert_eq!(triggers.triggers(alice).await.expect("list").len(), 1);
}

/// Payment events: unseen, handled, failed (kept for the retrier), then handled after all.
pub(crate) async fn payment_events(events: Arc<dyn PaymentEvents>) {
    assert!(!events.event_seen("evt_1").await.expect("seen"));
    events
        .mark_event("evt_1", None)
        .await
        .expect("mark")
        .durable()
        .await
        .expect("durable");
    assert!(events.event_seen("evt_1").await.expect("seen"));
    events
        .mark_event("evt_2", Some(b"{\"id\":\"evt_2\"}"))
        .await
        .expect("mark")
        .durable()
        .await
        .expect("durable");
    assert!(
        events.event_seen("evt_2").await.expect("seen"),
        "a failed event was seen too"
    );
    assert_eq!(
        events.failed_events().await.expect("failed"),
        vec![b"{\"id\":\"evt_2\"}".to_vec()]
    );
    events
        .mark_event("evt_2", None)
        .await
        .expect("mark")
        .durable()
        .await
        .expect("durable");
    assert!(
        events.failed_events().await.expect("failed").is_empty(),
        "handled after all"
    );
    assert!(events.event_seen("evt_2").await.expect("seen"));
}

/// Health and fault injection: a writable database takes writes; after a (simulated)
/// failure of its storage, every write fails and the health check says why.
pub(crate) async fn administration(admin: Arc<dyn Administration>, accounts: Arc<dyn Accounts>) {
    admin.writable().await.expect("a fresh database takes writes");
    admin.flush().expect("flush");
    account(&*accounts, "before").await;
    admin.simulate_sync_failure_for_tests();
    let why = admin.writable().await.expect_err("the failure is reported");
    assert!(!why.is_empty());
    let after = match accounts.register("after", "hash".into(), at(2)).await {
        Ok(written) => written.durable().await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(after.is_err(), "a write after the failure fails");
}

fn scheduled(owner: uuid::Uuid, content: &str, daily: bool, created: i64) -> ScheduledItem {
    ScheduledItem {
        id: new_uuid(),
        owner,
        tickle: Tickle {
            content: content.as_bytes().to_vec(),
            day: Day {
                year: 2030,
                month: 1,
                day: 1,
            },
            time: None,
            recurrence: daily.then_some(Recurrence::EveryDays { days: 1, time: None }),
        },
        created: at(created),
        server_time: 1,
    }
}

async fn add_due(items: &dyn ScheduledItems, item: &ScheduledItem, due: Timestamp, cap: Option<u64>) -> bool {
    let written = items.add_scheduled(item, &|_| due, cap).await.expect("add");
    matches!(written.durable().await.expect("durable"), SchedulerAddOutcome::Added)
}

async fn durable<T>(written: crate::store::Result<Written<T>>) -> T {
    written.expect("write").durable().await.expect("durable")
}

/// Imports `entries` through the trait from a blocking thread (as the handlers do);
/// `fail_after`: the feed fails after that many entries. Checks that the check says what the
/// import does (when it succeeds).
async fn import_scheduler(
    items: Arc<dyn ScheduledItems>,
    account: uuid::Uuid,
    entries: Vec<SchedulerEntry>,
    settings: Option<TimeZoneSetting>,
    cap: Option<u64>,
    fail_after: Option<usize>,
) -> crate::store::Result<SchedulerImportOutcome> {
    tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Handle::current();
        let mut ids = ImportIds::default();
        for e in &entries {
            ids.note(e);
        }
        let checked = items.check_import(account, &ids, cap, 0).expect("check");
        let wait = |w: Written<()>| runtime.block_on(w.durable());
        let mut feed = |each: &mut dyn FnMut(SchedulerEntry) -> Result<(), StoreError>| {
            for (n, e) in entries.iter().enumerate() {
                if fail_after == Some(n) {
                    return Err(StoreError::Codec("the import breaks off".into()));
                }
                each(e.clone())?;
            }
            Ok(())
        };
        let due_of = |_: &ScheduledItem, z: &TimeZoneSetting| at(7_000 + i64::from(z.offset));
        let outcome = items.import(account, &ids, settings.as_ref(), &due_of, cap, &mut feed, &wait);
        if let Ok(outcome) = &outcome {
            if let (SchedulerImportOutcome::Imported(a), SchedulerImportOutcome::Imported(b)) = (&checked, outcome) {
                assert_eq!(
                    (a.scheduled_added, a.triggered_added, a.triggers_added),
                    (b.scheduled_added, b.triggered_added, b.triggers_added),
                    "the check says what the import does"
                );
            }
        }
        outcome
    })
    .await
    .expect("the import's thread")
}

/// Scheduled items: added (cap), read, listed and paged, edited, moved by a setting,
/// synced, triggered when due (a recurring one moves to its next occurrence, the other goes;
/// a stale entry triggers nothing), counted, deleted, imported (all or nothing) and gone
/// with their account.
pub(crate) async fn scheduled_items(accounts: Arc<dyn Accounts>, items: Arc<dyn ScheduledItems>) {
    let alice = account(&*accounts, "alice").await;
    let bob = account(&*accounts, "bob").await;
    let daily = scheduled(alice, "daily", true, 20);
    let once = scheduled(alice, "once", false, 10);
    assert!(add_due(&*items, &daily, at(1_000), None).await);
    assert!(add_due(&*items, &once, at(1_100), Some(2)).await);
    assert!(
        !add_due(&*items, &scheduled(alice, "over", false, 30), at(1_200), Some(2)).await,
        "the cap"
    );
    assert_eq!(
        items.scheduled(alice, daily.id).await.expect("read"),
        Some(daily.clone())
    );
    assert_eq!(
        items.scheduled(bob, daily.id).await.expect("read"),
        None,
        "only the owner's"
    );
    let ids = |list: Vec<ScheduledItem>| list.into_iter().map(|i| i.id).collect::<Vec<_>>();
    assert_eq!(
        ids(items.scheduled_items(alice).await.expect("list")),
        [once.id, daily.id]
    );
    assert_eq!(
        ids(items
            .scheduled_page(alice, Some(once.id), PageSize { items: 5, bytes: 1 })
            .await
            .expect("page")),
        [daily.id]
    );
    assert_eq!(
        ids(items
            .scheduled_page(alice, None, PageSize { items: 5, bytes: 1 })
            .await
            .expect("page")),
        [once.id],
        "a page of at least one item, ended by its data"
    );
    assert_eq!(items.counts(alice).await.expect("counts"), (2, 0));
    // editing sees the setting and sets the due instant
    let mut edit = |mut i: ScheduledItem, _: &TimeZoneSetting| {
        i.server_time = 2;
        (i, at(900))
    };
    assert!(durable(items.edit_scheduled(alice, daily.id, &mut edit).await).await);
    assert!(!durable(items.edit_scheduled(bob, daily.id, &mut edit).await).await);
    assert_eq!(items.next_due().await.expect("next"), Some(at(900)));
    // a setting moves every due instant
    let zone = TimeZoneSetting {
        offset: 60,
        name: "Europe/Somewhere".into(),
        summer: false,
    };
    let due_of = |i: &ScheduledItem| at(2_000 + i.tickle.content.len() as i64);
    durable(items.put_settings(alice, &zone, &due_of).await).await;
    assert_eq!(items.settings(alice).await.expect("settings"), zone);
    assert_eq!(items.settings(bob).await.expect("settings"), TimeZoneSetting::default());
    assert_eq!(items.next_due().await.expect("next"), Some(at(2_004)), "\"once\" first");
    assert_eq!(items.due_count(at(2_004), 10).await.expect("count"), 1);
    // a sync sees the items and the setting, deletes and stores
    let synced = scheduled(alice, "synced", false, 40);
    let mut seen = (0, None);
    let mut decide = |now: &[ScheduledItem], z: &TimeZoneSetting| {
        seen = (now.len(), Some(z.clone()));
        ScheduledChanges {
            delete: vec![],
            put: vec![(synced.clone(), at(2_010))],
        }
    };
    durable(items.sync(alice, &mut decide).await).await;
    assert_eq!(seen, (2, Some(zone.clone())));
    assert_eq!(items.counts(alice).await.expect("counts"), (3, 0));
    // triggering what is due
    let now = at(2_500);
    let due = items.due_items(now, 10).await.expect("due");
    assert_eq!(
        due,
        [
            (at(2_004), alice, once.id),
            (at(2_005), alice, daily.id),
            (at(2_010), alice, synced.id)
        ]
    );
    let mut next = |i: &ScheduledItem, _: &TimeZoneSetting| i.tickle.recurrence.map(|_| (i.clone(), at(90_000)));
    let mut copies = Vec::new();
    for entry in &due {
        let copy = durable(items.trigger_item(*entry, now, &mut next).await)
            .await
            .expect("triggered");
        assert_eq!((copy.owner, copy.triggered), (alice, now));
        copies.push(copy);
    }
    let stale = durable(items.trigger_item(due[0], now, &mut next).await).await;
    assert!(stale.is_none(), "gone: nothing");
    assert_eq!(items.counts(alice).await.expect("counts"), (1, 3));
    assert_eq!(
        items.next_due().await.expect("next"),
        Some(at(90_000)),
        "the daily one moved"
    );
    // the next wake-up (the triggerer reads it, however far off), then due when it comes
    assert_eq!(
        items.upcoming(5).await.expect("upcoming"),
        [(at(90_000), alice, daily.id)]
    );
    assert_eq!(items.upcoming(5).await.expect("again"), [(at(90_000), alice, daily.id)]);
    assert_eq!(
        items.due_items(at(90_000), 5).await.expect("due"),
        [(at(90_000), alice, daily.id)]
    );
    assert_eq!(ids(items.scheduled_items(alice).await.expect("list")), [daily.id]);
    let triggered = items.triggered_items(alice).await.expect("triggered");
    assert_eq!(
        triggered.iter().map(|t| t.tickle.content.clone()).collect::<Vec<_>>(),
        [b"once".to_vec(), b"daily".to_vec(), b"synced".to_vec()],
        "by original creation"
    );
    assert_eq!(
        items.triggered(alice, copies[0].id).await.expect("read"),
        Some(copies[0].clone())
    );
    assert_eq!(
        items
            .triggered_page(alice, Some(triggered[1].id), PageSize { items: 5, bytes: 1 })
            .await
            .expect("page")
            .len(),
        1
    );
    assert!(durable(items.delete_item(alice, copies[0].id).await).await);
    assert!(!durable(items.delete_item(alice, copies[0].id).await).await);
    assert!(durable(items.delete_triggered_items(alice).await).await);
    assert_eq!(items.counts(alice).await.expect("counts"), (1, 0));
    // an import: new entries stored (another account's id under one of its own), known ones
    // kept, the setting applied; again, nothing; over the cap or broken off midway, nothing
    let bobs = scheduled(bob, "bob's", false, 50);
    assert!(add_due(&*items, &bobs, at(3_000), None).await);
    let trigger = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(60),
        kind: TriggerKind::Email {
            address: "a@example.org".into(),
            verified: false,
            key_digest: [7; 32],
        },
    };
    let old = TriggeredItem {
        id: new_uuid(),
        owner: alice,
        tickle: daily.tickle.clone(),
        created: at(5),
        triggered: at(6),
        attempts: vec![Attempt {
            trigger: trigger.id,
            trigger_created: trigger.created,
            delivery: new_uuid(),
            outcome: Outcome::EmailFailed("bounced".into()),
        }],
    };
    let fresh = scheduled(alice, "imported", false, 70);
    let entries = vec![
        SchedulerEntry::Scheduled(fresh.clone()),
        SchedulerEntry::Scheduled(daily.clone()),
        SchedulerEntry::Scheduled(bobs.clone()),
        SchedulerEntry::Triggered(old.clone()),
        SchedulerEntry::Trigger(trigger.clone()),
    ];
    let utc = TimeZoneSetting::default();
    let outcome = import_scheduler(items.clone(), alice, entries.clone(), Some(utc.clone()), None, None)
        .await
        .expect("import");
    let SchedulerImportOutcome::Imported(done) = outcome else {
        panic!("imported: {outcome:?}");
    };
    assert_eq!(
        (done.settings_changed, done.scheduled_added, done.scheduled_kept),
        (true, 2, 1)
    );
    assert_eq!((done.triggered_added, done.triggers_added), (1, 1));
    assert_eq!(done.email_triggers, [trigger.id]);
    assert_eq!(items.settings(alice).await.expect("settings"), utc);
    assert_eq!(items.counts(alice).await.expect("counts"), (3, 1));
    assert_eq!(
        items.scheduled(bob, bobs.id).await.expect("read"),
        Some(bobs.clone()),
        "still bob's"
    );
    assert_eq!(items.triggered(alice, old.id).await.expect("read"), Some(old.clone()));
    assert_eq!(
        items.due_items(at(7_000), 10).await.expect("due").len(),
        4,
        "alice's three due under the imported setting, and bob's"
    );
    let again = import_scheduler(items.clone(), alice, entries, None, None, None)
        .await
        .expect("import");
    assert!(matches!(again, SchedulerImportOutcome::Imported(d) if d.scheduled_added == 0 && d.scheduled_kept == 3));
    let more: Vec<SchedulerEntry> = (0..3)
        .map(|n| SchedulerEntry::Scheduled(scheduled(alice, "more", false, 80 + n)))
        .collect();
    let over = import_scheduler(items.clone(), alice, more.clone(), None, Some(5), None)
        .await
        .expect("import");
    assert_eq!(over, SchedulerImportOutcome::LimitReached);
    let broken = import_scheduler(items.clone(), alice, more, None, None, Some(2)).await;
    assert!(broken.is_err(), "{broken:?}");
    assert_eq!(items.counts(alice).await.expect("counts"), (3, 1), "nothing of either");
    assert_eq!(items.total_counts().await.expect("totals"), (4, 1));
    // deleting the account deletes everything of it
    assert!(durable(items.delete_account(alice).await).await);
    assert!(!durable(items.delete_account(alice).await).await);
    assert_eq!(items.counts(alice).await.expect("counts"), (0, 0));
    assert_eq!(items.total_counts().await.expect("totals"), (1, 0));
}

/// The delivery and e-mail queues: target lists expanded once, pending deliveries postponed,
/// finished with each outcome, retried, removed; e-mails through their stages in order; the
/// queues gone with their account (admin notices stay).
pub(crate) async fn deliveries_and_emails(
    accounts: Arc<dyn Accounts>,
    items: Arc<dyn ScheduledItems>,
    triggers: Arc<dyn Triggers>,
    deliveries: Arc<dyn Deliveries>,
    emails: Arc<dyn Emails>,
) {
    let alice = account(&*accounts, "alice").await;
    let inbox = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(10),
        kind: TriggerKind::Inbox {
            url: "http://127.0.0.1:8001".into(),
            username: "alice".into(),
            access_key: "00ff".repeat(8),
        },
    };
    let mail = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(20),
        kind: TriggerKind::Email {
            address: "alice@example.org".into(),
            verified: true,
            key_digest: [5; 32],
        },
    };
    for t in [&inbox, &mail] {
        assert!(durable(triggers.add_trigger(t, None).await).await);
    }
    // an item triggers: its target lists wait until expanded, once
    let fire = |content: &'static str| {
        let items = items.clone();
        async move {
            let item = scheduled(alice, content, false, 30);
            assert!(add_due(&*items, &item, at(100), None).await);
            let due = items.due_items(at(200), 10).await.expect("due");
            let mut next = |_: &ScheduledItem, _: &TimeZoneSetting| None;
            durable(items.trigger_item(due[0], at(200), &mut next).await)
                .await
                .expect("triggered")
        }
    };
    let copy = fire("first").await;
    assert_eq!(durable(deliveries.expand_targets(false, usize::MAX).await).await, 1);
    assert_eq!(durable(deliveries.expand_targets(true, usize::MAX).await).await, 1);
    assert_eq!(durable(deliveries.expand_targets(false, usize::MAX).await).await, 0);
    let pending = deliveries.pending_deliveries(10).await.expect("pending");
    assert_eq!(pending.len(), 1);
    let (k, d) = (pending[0].0.clone(), pending[0].1.as_ref().expect("a delivery").clone());
    assert_eq!(
        (d.owner, d.item, d.trigger, d.email, d.failures),
        (alice, copy.id, inbox.id, false, 0)
    );
    // postponed: pending with its failures and back-off
    let later = Delivery {
        failures: 1,
        not_before: at(300),
        ..d.clone()
    };
    durable(deliveries.postpone_delivery(&k, &later).await).await;
    let pending = deliveries.pending_deliveries(10).await.expect("pending");
    let again = pending[0].1.as_ref().expect("a delivery");
    assert_eq!((again.failures, again.not_before), (1, at(300)));
    // finished: recorded on the item, no longer pending
    let failed = Outcome::InboxFailed("refused".into());
    durable(deliveries.finish_delivery(&pending[0].0, &later, failed.clone()).await).await;
    assert!(deliveries.pending_deliveries(10).await.expect("pending").is_empty());
    let twice = deliveries
        .finish_delivery(&pending[0].0, &later, failed)
        .await
        .expect("finish");
    assert!(!twice.changed(), "finished once");
    // the e-mail: triggered, rendered (next stage, same place), sent
    let queued = emails.queued_emails(Stage::Triggered, 10).await.expect("queued");
    assert_eq!(queued.len(), 1);
    let (ek, email) = queued[0].clone();
    let EmailKind::Triggered { delivery, to } = email.kind.clone() else {
        panic!("a triggered e-mail: {email:?}");
    };
    assert_eq!(
        (to.as_str(), delivery.trigger, delivery.email),
        ("alice@example.org", mail.id, true)
    );
    let rendered = QueuedEmail {
        kind: EmailKind::Rendered {
            message: Message {
                to,
                subject: "s".into(),
                text: "t".into(),
                html: "<p>h</p>".into(),
            },
            delivery: Some(delivery.clone()),
        },
        ..email
    };
    durable(emails.replace_email(&ek, &rendered).await).await;
    assert!(emails
        .queued_emails(Stage::Triggered, 10)
        .await
        .expect("queued")
        .is_empty());
    let sending = emails.queued_emails_each(Stage::Rendered, 10).await.expect("queued");
    assert_eq!(sending.len(), 1);
    durable(
        deliveries
            .finish_delivery(&sending[0].0, &delivery, Outcome::EmailSent)
            .await,
    )
    .await;
    assert!(emails
        .queued_emails(Stage::Rendered, 10)
        .await
        .expect("queued")
        .is_empty());
    let outcomes = |item: Option<TriggeredItem>| {
        item.expect("the item")
            .attempts
            .into_iter()
            .map(|a| a.outcome)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        outcomes(items.triggered(alice, copy.id).await.expect("read")),
        [Outcome::InboxFailed("refused".into()), Outcome::EmailSent]
    );
    // a retry makes the failed delivery pending again: same id, fresh budget
    durable(deliveries.retry_failed(alice, &[copy.id]).await).await;
    let pending = deliveries.pending_deliveries(10).await.expect("pending");
    let retried = pending[0].1.as_ref().expect("a delivery").clone();
    assert_eq!((pending.len(), retried.id, retried.failures), (1, d.id, 0));
    let added = new_uuid();
    durable(
        deliveries
            .finish_delivery(&pending[0].0, &retried, Outcome::InboxAdded(added))
            .await,
    )
    .await;
    assert_eq!(
        outcomes(items.triggered(alice, copy.id).await.expect("read")),
        [Outcome::InboxAdded(added), Outcome::EmailSent]
    );
    // a delivery removed without a record
    fire("second").await;
    assert_eq!(durable(deliveries.expand_targets(false, usize::MAX).await).await, 1);
    let pending = deliveries.pending_deliveries(10).await.expect("pending");
    durable(deliveries.remove_pending(&pending[0].0).await).await;
    assert!(deliveries.pending_deliveries(10).await.expect("pending").is_empty());
    // e-mails of one stage in the order queued; other stages apart
    let verification = |n: u8| {
        QueuedEmail::new(
            alice,
            Some(mail.id),
            EmailKind::Verification {
                to: format!("{n}@example.org"),
                key: format!("key-{n}"),
            },
        )
    };
    for n in 0..3 {
        durable(emails.queue_email(&verification(n)).await).await;
    }
    let notice = QueuedEmail::new(
        uuid::Uuid::nil(),
        None,
        EmailKind::AdminNotice {
            worker: "triggerer".into(),
            error: "e".into(),
        },
    );
    durable(emails.queue_email(&notice).await).await;
    let order: Vec<String> = emails
        .queued_emails(Stage::Verification, 10)
        .await
        .expect("queued")
        .into_iter()
        .map(|(_, e)| match e.kind {
            EmailKind::Verification { to, .. } => to,
            other => panic!("a verification e-mail: {other:?}"),
        })
        .collect();
    assert_eq!(order, ["0@example.org", "1@example.org", "2@example.org"]);
    assert_eq!(
        emails
            .queued_emails(Stage::Verification, 2)
            .await
            .expect("queued")
            .len(),
        2
    );
    assert_eq!(
        emails
            .queued_emails(Stage::AdminNotice, 10)
            .await
            .expect("queued")
            .len(),
        1
    );
    // deleting a trigger drops its pending deliveries; deleting the account empties its
    // queues (the admin notice is nobody's)
    fire("third").await;
    assert_eq!(durable(deliveries.expand_targets(false, usize::MAX).await).await, 1);
    assert!(durable(triggers.delete_trigger(alice, inbox.id).await).await);
    assert!(deliveries.pending_deliveries(10).await.expect("pending").is_empty());
    // (the second's e-mail list and the third's), one at a time
    assert_eq!(durable(deliveries.expand_targets(true, 1).await).await, 1);
    assert_eq!(durable(deliveries.expand_targets(true, 1).await).await, 1);
    assert_eq!(durable(deliveries.expand_targets(true, 1).await).await, 0);
    assert!(durable(items.delete_account(alice).await).await);
    assert!(deliveries.pending_deliveries(10).await.expect("pending").is_empty());
    for stage in [Stage::Verification, Stage::Triggered, Stage::Rendered] {
        assert!(
            emails.queued_emails(stage, 10).await.expect("queued").is_empty(),
            "{stage:?}"
        );
    }
    assert_eq!(
        emails
            .queued_emails(Stage::AdminNotice, 10)
            .await
            .expect("queued")
            .len(),
        1
    );
}

fn push_trigger(owner: uuid::Uuid, endpoint: &str, auth: u8, created: i64) -> Trigger {
    Trigger {
        id: new_uuid(),
        owner,
        created: at(created),
        kind: TriggerKind::Push {
            subscription: PushSubscription {
                endpoint: endpoint.into(),
                p256dh: [4; 65],
                auth: [auth; 16],
            },
            expired: false,
        },
    }
}

/// Push and webhook triggers (scheduler.md §6.4–§6.5, §7.6–§7.7): stored and read back whole;
/// a subscription of the same endpoint renews its trigger (same id), the 21st is refused,
/// both atomically; an item that triggers is delivered to every push trigger not expired and
/// every webhook (pending deliveries, like the inbox's), an expired one gets nothing; the
/// attempts read push before webhook whatever order they finished in; a failed push is
/// retried.
pub(crate) async fn push_and_webhook_triggers(
    accounts: Arc<dyn Accounts>,
    items: Arc<dyn ScheduledItems>,
    triggers: Arc<dyn Triggers>,
    deliveries: Arc<dyn Deliveries>,
) {
    let alice = account(&*accounts, "alice").await;
    let phone = push_trigger(alice, "https://push.example.net/p/1", 1, 10);
    let mut gone = push_trigger(alice, "http://127.0.0.1:9/p/2", 2, 20);
    if let TriggerKind::Push { expired, .. } = &mut gone.kind {
        *expired = true;
    }
    let hook = Trigger {
        id: new_uuid(),
        owner: alice,
        created: at(30),
        kind: TriggerKind::Webhook {
            url: "https://ntfy.example/topic?auth=secret".into(),
            format: WebhookFormat::Json,
        },
    };
    for t in [&phone, &gone, &hook] {
        let t = t.clone();
        let stored = triggers
            .add_or_renew_trigger(alice, &mut |existing| subscribe(existing, t.clone()))
            .await;
        assert!(durable(stored).await);
    }
    assert_eq!(
        triggers.triggers(alice).await.expect("list"),
        vec![phone.clone(), gone.clone(), hook.clone()],
        "every field read back"
    );
    // the same endpoint again: the same trigger, its new keys, no longer expired
    let again = push_trigger(alice, "http://127.0.0.1:9/p/2", 9, 99);
    let mut renewed = None;
    let stored = triggers
        .add_or_renew_trigger(alice, &mut |existing| {
            renewed = subscribe(existing, again.clone());
            renewed.clone()
        })
        .await;
    assert!(durable(stored).await);
    let renewed = renewed.expect("renewed");
    assert_eq!((renewed.id, renewed.created), (gone.id, gone.created));
    assert_eq!(
        triggers.trigger(alice, gone.id).await.expect("read"),
        Some(renewed.clone())
    );
    assert_eq!(triggers.triggers(alice).await.expect("list").len(), 3);
    // expired again, for what follows
    let expire = |mut t: Trigger| match &mut t.kind {
        TriggerKind::Push { expired, .. } => {
            *expired = true;
            Some((t, None))
        }
        _ => None,
    };
    assert!(durable(triggers.update_trigger(alice, gone.id, &mut { expire }).await).await);
    // the limit: 20 push triggers, then nothing is stored
    for n in 2..20 {
        let t = push_trigger(alice, &format!("https://push.example.net/more/{n}"), 3, 40 + n);
        assert!(
            durable(
                triggers
                    .add_or_renew_trigger(alice, &mut |e| subscribe(e, t.clone()))
                    .await
            )
            .await
        );
    }
    let one_more = push_trigger(alice, "https://push.example.net/21st", 4, 90);
    let refused = triggers
        .add_or_renew_trigger(alice, &mut |e| subscribe(e, one_more.clone()))
        .await;
    assert!(!durable(refused).await, "the 21st push trigger");
    assert_eq!(triggers.triggers(alice).await.expect("list").len(), 21);
    assert!(
        !durable(
            triggers
                .add_or_renew_trigger(new_uuid(), &mut |e| subscribe(e, one_more.clone()))
                .await
        )
        .await
    );
    for t in triggers.triggers(alice).await.expect("list") {
        if t.id != phone.id && t.id != gone.id && t.id != hook.id {
            assert!(durable(triggers.delete_trigger(alice, t.id).await).await);
        }
    }
    // an item triggers: a pending delivery to the phone and to the webhook, none to the
    // expired subscription
    let item = scheduled(alice, "water the plants", false, 30);
    assert!(add_due(&*items, &item, at(100), None).await);
    let due = items.due_items(at(200), 10).await.expect("due");
    let mut next = |_: &ScheduledItem, _: &TimeZoneSetting| None;
    let copy = durable(items.trigger_item(due[0], at(200), &mut next).await)
        .await
        .expect("triggered");
    assert_eq!(
        durable(deliveries.expand_targets(true, usize::MAX).await).await,
        0,
        "no e-mail targets"
    );
    assert_eq!(durable(deliveries.expand_targets(false, usize::MAX).await).await, 1);
    let pending = deliveries.pending_deliveries(10).await.expect("pending");
    let mut to: Vec<_> = pending
        .iter()
        .map(|(_, d)| {
            let d = d.as_ref().expect("a delivery");
            assert_eq!((d.owner, d.item, d.email), (alice, copy.id, false));
            d.trigger
        })
        .collect();
    to.sort();
    let mut want = vec![phone.id, hook.id];
    want.sort();
    assert_eq!(to, want);
    // finished webhook first, push second: listed push first (§2.5)
    let by = |id| {
        pending
            .iter()
            .find(|(_, d)| d.as_ref().expect("a delivery").trigger == id)
            .expect("pending")
    };
    let (hk, hd) = by(hook.id);
    durable(
        deliveries
            .finish_delivery(hk, hd.as_ref().expect("d"), Outcome::WebhookSent)
            .await,
    )
    .await;
    let (pk, pd) = by(phone.id);
    let failed = Outcome::PushFailed("push service push.example.net answered 500".into());
    durable(
        deliveries
            .finish_delivery(pk, pd.as_ref().expect("d"), failed.clone())
            .await,
    )
    .await;
    let outcomes = |item: Option<TriggeredItem>| {
        item.expect("the item")
            .attempts
            .into_iter()
            .map(|a| a.outcome)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        outcomes(items.triggered(alice, copy.id).await.expect("read")),
        [failed, Outcome::WebhookSent]
    );
    // the failed push is retried: pending again, same delivery
    durable(deliveries.retry_failed(alice, &[copy.id]).await).await;
    let pending_again = deliveries.pending_deliveries(10).await.expect("pending");
    assert_eq!(pending_again.len(), 1);
    let retried = pending_again[0].1.as_ref().expect("a delivery");
    assert_eq!(
        (retried.id, retried.trigger, retried.email),
        (pd.as_ref().expect("d").id, phone.id, false)
    );
    assert_eq!(
        outcomes(items.triggered(alice, copy.id).await.expect("read")),
        [Outcome::WebhookSent]
    );
}

/// Texts from outside that the edge takes as they are, for every such string field of every
/// record (issue 29 point 1): a fixed list of what engines disagree on (NUL, other control
/// characters, quotes, backslashes, the last code point, a long one) and arbitrary strings
/// drawn by proptest (`.*`: any characters, control characters included).
pub(crate) fn free_texts() -> Vec<String> {
    use proptest::strategy::{Strategy, ValueTree};
    let mut texts: Vec<String> = [
        "",
        "\0",
        "a\0b",
        "\0\0\0",
        "\u{1}\u{1f}\u{7f}\u{80}\u{9f}",
        "tab\tnew\nline\rcr",
        "\u{1b}[31mred",
        "'; DROP TABLE accounts; --",
        "back\\slash \\x00 \\0",
        "\u{10ffff}\u{fffd}\u{feff}\u{200b}",
        "名前 😀",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    texts.push("\0x".repeat(10_000));
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = proptest::collection::vec(proptest::arbitrary::any::<String>(), 48);
    texts.extend(strategy.new_tree(&mut runner).expect("strings").current());
    texts
}

/// Every string field that holds free text holds each of [`free_texts`] and gives it back
/// exactly, on every engine: access key names (any string, inbox.md §3.9), the time zone's
/// name (any text, scheduler.md §5), a delivery's reason (any string in an import or an
/// original's database). The structured strings (usernames, addresses, URLs, keys) are
/// refused at the edge when they hold a control character (their parsers' property tests).
pub(crate) async fn free_text(accounts: Arc<dyn Accounts>, items: Arc<dyn ScheduledItems>) {
    let owner = account(&*accounts, "textual").await;
    let texts = free_texts();
    for (n, text) in texts.iter().enumerate() {
        let mut digest = [0xa5; 32];
        digest[..8].copy_from_slice(&(n as u64).to_be_bytes());
        let key = AccessKey {
            id: new_uuid(),
            name: text.clone(),
            created: at(30),
            seq: accounts.next_key_seq().await.expect("seq"),
            permissions: Permissions(1),
            secret: KeySecret::Digest(digest),
        };
        assert!(durable(accounts.add_access_key(owner, &key).await).await, "{text:?}");
        let back = accounts
            .access_key(owner, key.id)
            .await
            .expect("read")
            .expect("the key");
        assert_eq!(back.name, *text, "an access key's name");

        let zone = TimeZoneSetting {
            offset: 60,
            name: text.clone(),
            summer: false,
        };
        durable(items.put_settings(owner, &zone, &|_| at(1)).await).await;
        assert_eq!(
            items.settings(owner).await.expect("read").name,
            *text,
            "the zone's name"
        );
    }
    let mut triggered = TriggeredItem {
        id: new_uuid(),
        owner,
        tickle: scheduled(owner, "with reasons", false, 40).tickle,
        created: at(5),
        triggered: at(6),
        attempts: texts
            .iter()
            .enumerate()
            .map(|(n, why)| Attempt {
                trigger: new_uuid(),
                trigger_created: at(n as i64),
                delivery: new_uuid(),
                outcome: [
                    Outcome::InboxFailed,
                    Outcome::EmailFailed,
                    Outcome::PushFailed,
                    Outcome::WebhookFailed,
                ][n % 4](why.clone()),
            })
            .collect(),
    };
    // in the order a triggered item lists them (§2.5: by kind, then by trigger)
    triggered.attempts.sort_by_key(Attempt::order);
    let imported = import_scheduler(
        items.clone(),
        owner,
        vec![SchedulerEntry::Triggered(triggered.clone())],
        None,
        None,
        None,
    )
    .await
    .expect("import");
    assert!(matches!(imported, SchedulerImportOutcome::Imported(_)), "{imported:?}");
    let back = items
        .triggered(owner, triggered.id)
        .await
        .expect("read")
        .expect("the item");
    assert_eq!(back.attempts.len(), triggered.attempts.len(), "the attempts");
    for (n, (got, sent)) in back.attempts.iter().zip(&triggered.attempts).enumerate() {
        assert!(
            got == sent,
            "attempt {n}: {:.200?} read back as {:.200?}",
            sent.outcome,
            got.outcome
        );
    }
}

/// Every scenario of this suite as a test of one engine: `on` makes that engine's store
/// (assembled as a server assembles it) and runs the scenario on it. The scenarios are
/// written once here; an engine's tests are `suite_on!(its_fixture)`, so the only thing that
/// differs between the engines is how their store is made.
macro_rules! suite_on {
    ($on:path) => {
        #[test]
        fn accounts() {
            $on("suite_accounts", |store| async move {
                $crate::store::suite::accounts(store.inbox.accounts.clone()).await;
            });
        }

        #[test]
        fn inbox_items() {
            $on("suite_inbox_items", |store| async move {
                $crate::store::suite::inbox_items(store.inbox.accounts.clone(), store.inbox.items.clone()).await;
            });
        }

        #[test]
        fn triggers_and_payment_events() {
            $on("suite_triggers_and_payment_events", |store| async move {
                let s = &store.scheduler;
                $crate::store::suite::triggers(s.accounts.clone(), s.triggers.clone()).await;
                $crate::store::suite::payment_events(s.payments.clone()).await;
            });
        }

        #[test]
        fn scheduled_items() {
            $on("suite_scheduled_items", |store| async move {
                $crate::store::suite::scheduled_items(store.scheduler.accounts.clone(), store.scheduler.items.clone())
                    .await;
            });
        }

        #[test]
        fn deliveries_and_emails() {
            $on("suite_deliveries_and_emails", |store| async move {
                let s = &store.scheduler;
                $crate::store::suite::deliveries_and_emails(
                    s.accounts.clone(),
                    s.items.clone(),
                    s.triggers.clone(),
                    s.deliveries.clone(),
                    s.emails.clone(),
                )
                .await;
            });
        }

        #[test]
        fn push_and_webhook_triggers() {
            $on("suite_push_and_webhook_triggers", |store| async move {
                let s = &store.scheduler;
                $crate::store::suite::push_and_webhook_triggers(
                    s.accounts.clone(),
                    s.items.clone(),
                    s.triggers.clone(),
                    s.deliveries.clone(),
                )
                .await;
            });
        }

        #[test]
        fn free_text() {
            $on("suite_free_text", |store| async move {
                $crate::store::suite::free_text(store.scheduler.accounts.clone(), store.scheduler.items.clone()).await;
            });
        }

        #[test]
        fn administration() {
            $on("suite_administration", |store| async move {
                $crate::store::suite::administration(store.admin.clone(), store.inbox.accounts.clone()).await;
            });
        }
    };
}
#[cfg(test)]
pub(crate) use suite_on;

/// The suite on sled: a store in a temporary data directory.
#[cfg(test)]
mod sled {
    use crate::store::Store;
    use std::future::Future;
    use std::sync::Arc;

    fn on_sled<F: Future<Output = ()>>(_test: &str, scenario: impl FnOnce(Arc<Store>) -> F) {
        let dir = tempfile::tempdir().expect("a directory");
        let store = Store::open(dir.path()).expect("open");
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(scenario(store));
    }

    super::suite_on!(on_sled);
}
