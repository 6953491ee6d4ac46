//! Key layouts of both trees, in one place: what the store's keys look like on disk.
//!
//! Inside a tree every key starts with a one-byte prefix naming the record kind (an ASCII
//! letter, so no record kind ever meets a chunk key, which starts with `0xFF`), followed by
//! big-endian ids, so that prefix scans come out in a useful order. Instants in keys use the
//! 12-byte form of [`Timestamp::to_key`], whose byte order is time order; sequence numbers
//! are 8 bytes big-endian. The tests below pin one example of every layout: a key that
//! changes is a migration, never an accident.
//!
//! A *place* is the part of a record's key after its prefix (account + time + sequence): id
//! keys (`d`, `S`, `X`, `G`) map an id to it, so that an item is found by id and its account
//! checked from the first 16 bytes.

use crate::domain::email::Stage;
use crate::domain::wire::Timestamp;
use uuid::Uuid;

// Both trees (each service keeps its own accounts).
/// `a` + account → account record.
const ACCOUNT: u8 = b'a';
/// `n` + username → account uuid.
const USERNAME: u8 = b'n';
/// `u` + account → the payment provider's customer id.
const CUSTOMER: u8 = b'u';
/// `c` + account → item count(s).
const COUNT: u8 = b'c';

// The inbox tree.
/// `i` + place (account + created + sequence) → item record.
const ITEM: u8 = b'i';
/// `d` + item uuid → the item's place.
const ITEM_ID: u8 = b'd';
/// `k` + account + key uuid → access key record.
const ACCESS_KEY: u8 = b'k';
/// `h` + SHA-256 of a secret → account + key uuid.
const KEY_DIGEST: u8 = b'h';
/// `p` + account + idempotency key → item uuid.
const IDEMPOTENCY: u8 = b'p';

// The scheduler tree.
/// `s` + place (account + created + sequence) → scheduled item record.
const SCHEDULED: u8 = b's';
/// `S` + item uuid → the item's place.
const SCHEDULED_ID: u8 = b'S';
/// `x` + place (account + created + triggered + sequence) → triggered item record.
const TRIGGERED: u8 = b'x';
/// `X` + item uuid → the triggered item's place.
const TRIGGERED_ID: u8 = b'X';
/// `q` + due instant + item uuid → owner: the due index.
const DUE: u8 = b'q';
/// `g` + place (account + sequence + trigger uuid) → trigger record.
const TRIGGER: u8 = b'g';
/// `G` + trigger uuid → the trigger's place.
const TRIGGER_ID: u8 = b'G';
/// `z` + account → time-zone setting.
const SETTINGS: u8 = b'z';
/// `r` + kind + sequence + triggered item uuid → delivery targets.
const TARGETS: u8 = b'r';
/// `v` + sequence + delivery uuid → pending inbox delivery.
const DELIVERY: u8 = b'v';
/// `m` + sequence → queued e-mail of any stage: the queue before the stages had prefixes of
/// their own. Read once at open and moved (see `scheduler::emails`); nothing writes it.
const LEGACY_EMAIL: u8 = b'm';
/// `V` + sequence → verification e-mail to render.
const EMAIL_VERIFICATION: u8 = b'V';
/// `T` + sequence → triggered-item e-mail to render.
const EMAIL_TRIGGERED: u8 = b'T';
/// `N` + sequence → admin notification to render.
const EMAIL_ADMIN_NOTICE: u8 = b'N';
/// `M` + sequence → rendered e-mail waiting for the emailer.
const EMAIL_RENDERED: u8 = b'M';
/// `o` + owner + sequence → the stage prefix of the owner's queued e-mail.
const EMAIL_OWNER: u8 = b'o';
/// `E` + payment event id → nothing: handled.
const EVENT_HANDLED: u8 = b'E';
/// `F` + payment event id → the event whose handling failed.
const EVENT_FAILED: u8 = b'F';

// Both trees: the undo journal of an account import ([`super::imports`]).
/// `j` + import number + a key the import writes → that key's value before the import.
const JOURNAL: u8 = b'j';
/// `J` + import number → the import is complete (its journal is being dropped).
const JOURNAL_DONE: u8 = b'J';

/// Longest username indexed by its text; longer ones are indexed by their SHA-256, so keys
/// stay short whatever clients register (see [`super::chunks`]).
const LONGEST_USERNAME_KEY: usize = 200;

/// `prefix` followed by the given parts.
fn key(prefix: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(prefix);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

/// The 16-byte uuid at `at` of a key or place.
pub(in crate::store) fn uuid_at(bytes: &[u8], at: usize) -> Option<Uuid> {
    bytes.get(at..at + 16).and_then(|b| Uuid::from_slice(b).ok())
}

/// Whether `place` (of an item or trigger) belongs to `account`.
pub(in crate::store) fn place_of(place: &[u8], account: Uuid) -> bool {
    place.get(..16) == Some(account.as_bytes())
}

// Accounts.

pub(in crate::store) fn account(id: Uuid) -> Vec<u8> {
    key(ACCOUNT, &[id.as_bytes()])
}

/// Prefix of every account record.
pub(in crate::store) fn accounts() -> Vec<u8> {
    vec![ACCOUNT]
}

/// `n` + the username's UTF-8; a username of more than 200 bytes as `n` + `0xFF` + its
/// SHA-256 (`0xFF` never occurs in UTF-8).
pub(in crate::store) fn username(name: &str) -> Vec<u8> {
    if name.len() <= LONGEST_USERNAME_KEY {
        key(USERNAME, &[name.as_bytes()])
    } else {
        use sha2::Digest;
        key(USERNAME, &[&[0xFF], &sha2::Sha256::digest(name.as_bytes())])
    }
}

pub(in crate::store) fn customer(account: Uuid) -> Vec<u8> {
    key(CUSTOMER, &[account.as_bytes()])
}

/// The account's item count (inbox) or scheduled and triggered counts (scheduler).
pub(in crate::store) fn count(account: Uuid) -> Vec<u8> {
    key(COUNT, &[account.as_bytes()])
}

/// The prefix of every account's count record (totals for the metrics).
pub(in crate::store) fn counts() -> Vec<u8> {
    vec![COUNT]
}

// Inbox items and access keys.

/// Account + created + sequence: the order of inbox.md §1.5 (and of scheduled items).
pub(in crate::store) fn item_place(account: Uuid, created: Timestamp, seq: u64) -> Vec<u8> {
    [account.as_bytes().as_slice(), &created.to_key(), &seq.to_be_bytes()].concat()
}

/// Whether `place` is an item place of `account` (36 bytes).
pub(in crate::store) fn is_item_place_of(place: &[u8], account: Uuid) -> bool {
    place.len() == 36 && place_of(place, account)
}

pub(in crate::store) fn item(place: &[u8]) -> Vec<u8> {
    key(ITEM, &[place])
}

/// Prefix of the account's items, oldest first.
pub(in crate::store) fn items_of(account: Uuid) -> Vec<u8> {
    key(ITEM, &[account.as_bytes()])
}

/// `created` of an item (or scheduled item) from its key.
pub(in crate::store) fn created_of(item_key: &[u8]) -> Option<Timestamp> {
    Timestamp::from_key(item_key.get(17..29)?)
}

pub(in crate::store) fn item_id(id: Uuid) -> Vec<u8> {
    key(ITEM_ID, &[id.as_bytes()])
}

pub(in crate::store) fn access_key(account: Uuid, id: Uuid) -> Vec<u8> {
    key(ACCESS_KEY, &[account.as_bytes(), id.as_bytes()])
}

pub(in crate::store) fn access_keys_of(account: Uuid) -> Vec<u8> {
    key(ACCESS_KEY, &[account.as_bytes()])
}

pub(in crate::store) fn key_digest(digest: &[u8; 32]) -> Vec<u8> {
    key(KEY_DIGEST, &[digest])
}

/// The value of a key-digest record: account + key uuid.
pub(in crate::store) fn key_owner(account: Uuid, id: Uuid) -> Vec<u8> {
    [account.as_bytes().as_slice(), id.as_bytes()].concat()
}

/// `p` + account + the `Idempotency-Key` text (at most 200 bytes).
pub(in crate::store) fn idempotency(account: Uuid, idempotency_key: &str) -> Vec<u8> {
    key(IDEMPOTENCY, &[account.as_bytes(), idempotency_key.as_bytes()])
}

pub(in crate::store) fn idempotency_of(account: Uuid) -> Vec<u8> {
    key(IDEMPOTENCY, &[account.as_bytes()])
}

// Scheduled and triggered items, the due index, settings.

pub(in crate::store) fn scheduled(place: &[u8]) -> Vec<u8> {
    key(SCHEDULED, &[place])
}

pub(in crate::store) fn scheduled_of(account: Uuid) -> Vec<u8> {
    key(SCHEDULED, &[account.as_bytes()])
}

pub(in crate::store) fn scheduled_id(id: Uuid) -> Vec<u8> {
    key(SCHEDULED_ID, &[id.as_bytes()])
}

/// Account + original `created` + triggered + sequence: the order of scheduler.md §4.7.
pub(in crate::store) fn triggered_place(account: Uuid, created: Timestamp, triggered: Timestamp, seq: u64) -> Vec<u8> {
    [
        account.as_bytes().as_slice(),
        &created.to_key(),
        &triggered.to_key(),
        &seq.to_be_bytes(),
    ]
    .concat()
}

pub(in crate::store) fn triggered(place: &[u8]) -> Vec<u8> {
    key(TRIGGERED, &[place])
}

pub(in crate::store) fn triggered_of(account: Uuid) -> Vec<u8> {
    key(TRIGGERED, &[account.as_bytes()])
}

pub(in crate::store) fn triggered_id(id: Uuid) -> Vec<u8> {
    key(TRIGGERED_ID, &[id.as_bytes()])
}

/// The due-index entry of item `id` due at `at`.
pub(in crate::store) fn due(at: Timestamp, id: Uuid) -> Vec<u8> {
    key(DUE, &[&at.to_key(), id.as_bytes()])
}

/// Prefix of the whole due index, earliest first.
pub(in crate::store) fn due_index() -> Vec<u8> {
    vec![DUE]
}

/// The last possible due-index key at `now` (a range up to it holds what is due).
pub(in crate::store) fn due_until(now: Timestamp) -> Vec<u8> {
    key(DUE, &[&now.to_key(), &[0xff; 16]])
}

/// The due instant and item of a due-index key.
pub(in crate::store) fn due_entry(k: &[u8]) -> Option<(Timestamp, Uuid)> {
    Some((Timestamp::from_key(k.get(1..13)?)?, uuid_at(k, 13)?))
}

/// Account + sequence + trigger uuid: creation order.
pub(in crate::store) fn trigger_place(account: Uuid, seq: u64, id: Uuid) -> Vec<u8> {
    [account.as_bytes().as_slice(), &seq.to_be_bytes(), id.as_bytes()].concat()
}

pub(in crate::store) fn trigger(place: &[u8]) -> Vec<u8> {
    key(TRIGGER, &[place])
}

pub(in crate::store) fn triggers_of(account: Uuid) -> Vec<u8> {
    key(TRIGGER, &[account.as_bytes()])
}

pub(in crate::store) fn trigger_id(id: Uuid) -> Vec<u8> {
    key(TRIGGER_ID, &[id.as_bytes()])
}

/// The uuid whose record a key of one of the scheduler's uuid indexes (scheduled items,
/// triggered items, triggers) finds; `None` for any other key. One uuid names one record
/// of the three.
pub(in crate::store) fn scheduler_uuid(key: &[u8]) -> Option<Uuid> {
    match key.split_first() {
        Some((&(SCHEDULED_ID | TRIGGERED_ID | TRIGGER_ID), id)) => Uuid::from_slice(id).ok(),
        _ => None,
    }
}

pub(in crate::store) fn settings(account: Uuid) -> Vec<u8> {
    key(SETTINGS, &[account.as_bytes()])
}

// Deliveries and the e-mail queue.

/// Which targets a list holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::store) enum TargetKind {
    Inbox,
    Email,
}

impl TargetKind {
    fn byte(self) -> u8 {
        match self {
            TargetKind::Inbox => b'i',
            TargetKind::Email => b'e',
        }
    }
}

/// `r` + kind (`i` inbox, `e` e-mail) + sequence + triggered item uuid.
pub(in crate::store) fn targets(kind: TargetKind, seq: u64, item: Uuid) -> Vec<u8> {
    key(TARGETS, &[&[kind.byte()], &seq.to_be_bytes(), item.as_bytes()])
}

/// Prefix of every target list of a kind, oldest first.
pub(in crate::store) fn targets_of(kind: TargetKind) -> Vec<u8> {
    vec![TARGETS, kind.byte()]
}

/// Prefix of every target list.
pub(in crate::store) fn all_targets() -> Vec<u8> {
    vec![TARGETS]
}

/// The triggered item of a target-list key.
pub(in crate::store) fn targets_item(k: &[u8]) -> Option<Uuid> {
    uuid_at(k, 10)
}

pub(in crate::store) fn delivery(seq: u64, id: Uuid) -> Vec<u8> {
    key(DELIVERY, &[&seq.to_be_bytes(), id.as_bytes()])
}

/// Prefix of every pending inbox delivery, oldest first.
pub(in crate::store) fn deliveries() -> Vec<u8> {
    vec![DELIVERY]
}

/// Whether `k` is the key of a pending inbox delivery.
pub(in crate::store) fn is_delivery(k: &[u8]) -> bool {
    k.first() == Some(&DELIVERY)
}

/// The key prefix of an e-mail queue stage.
pub(in crate::store) fn stage_prefix(stage: Stage) -> u8 {
    match stage {
        Stage::Verification => EMAIL_VERIFICATION,
        Stage::Triggered => EMAIL_TRIGGERED,
        Stage::AdminNotice => EMAIL_ADMIN_NOTICE,
        Stage::Rendered => EMAIL_RENDERED,
    }
}

/// The stage whose key prefix is `prefix`.
pub(in crate::store) fn stage_of_prefix(prefix: u8) -> Option<Stage> {
    [
        Stage::Verification,
        Stage::Triggered,
        Stage::AdminNotice,
        Stage::Rendered,
    ]
    .into_iter()
    .find(|s| stage_prefix(*s) == prefix)
}

/// A queued e-mail: its stage's prefix + sequence. The sequence stays when the e-mail moves
/// on to the rendered stage, so the emailer sends in the order queued.
pub(in crate::store) fn email(stage: Stage, seq: u64) -> Vec<u8> {
    key(stage_prefix(stage), &[&seq.to_be_bytes()])
}

/// Prefix of one stage of the queue, oldest first.
pub(in crate::store) fn emails(stage: Stage) -> Vec<u8> {
    vec![stage_prefix(stage)]
}

/// The stage and sequence of a queued e-mail's key.
pub(in crate::store) fn email_entry(k: &[u8]) -> Option<(Stage, u64)> {
    let (prefix, seq) = k.split_first()?;
    Some((stage_of_prefix(*prefix)?, u64::from_be_bytes(seq.try_into().ok()?)))
}

/// The owner index of a queued e-mail: `o` + owner + sequence (the value: its stage's
/// prefix), so deleting an account, a trigger or a triggered item finds the owner's e-mails
/// without reading anyone else's. Admin notifications (no owner) are not indexed.
pub(in crate::store) fn email_of_owner(owner: Uuid, seq: u64) -> Vec<u8> {
    key(EMAIL_OWNER, &[owner.as_bytes(), &seq.to_be_bytes()])
}

/// Prefix of the owner index of one account.
pub(in crate::store) fn emails_of_owner(owner: Uuid) -> Vec<u8> {
    key(EMAIL_OWNER, &[owner.as_bytes()])
}

/// The sequence of an owner-index key.
pub(in crate::store) fn email_owner_seq(k: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(k.get(17..25)?.try_into().ok()?))
}

/// Prefix of the queue as it was before stages had prefixes (`m` + sequence).
pub(in crate::store) fn legacy_emails() -> Vec<u8> {
    vec![LEGACY_EMAIL]
}

/// The sequence of a legacy queue key.
pub(in crate::store) fn legacy_email_seq(k: &[u8]) -> Option<u64> {
    if k.len() != 9 {
        return None;
    }
    Some(u64::from_be_bytes(k[1..].try_into().ok()?))
}

// Payment events.

pub(in crate::store) fn event_handled(id: &str) -> Vec<u8> {
    key(EVENT_HANDLED, &[id.as_bytes()])
}

pub(in crate::store) fn event_failed(id: &str) -> Vec<u8> {
    key(EVENT_FAILED, &[id.as_bytes()])
}

pub(in crate::store) fn failed_events() -> Vec<u8> {
    vec![EVENT_FAILED]
}

// The undo journal of imports.

pub(in crate::store) fn journal(import: u64, written: &[u8]) -> Vec<u8> {
    key(JOURNAL, &[&import.to_be_bytes(), written])
}

/// Prefix of every journal entry of every import.
pub(in crate::store) fn journals() -> Vec<u8> {
    vec![JOURNAL]
}

/// The import number and the journalled key of a journal entry's key.
pub(in crate::store) fn journal_parts(k: &[u8]) -> Option<(u64, &[u8])> {
    let rest = k.strip_prefix(&[JOURNAL])?;
    let number = rest.get(..8)?;
    Some((u64::from_be_bytes(number.try_into().ok()?), &rest[8..]))
}

pub(in crate::store) fn journal_done(import: u64) -> Vec<u8> {
    key(JOURNAL_DONE, &[&import.to_be_bytes()])
}

/// Prefix of every mark of a complete import.
pub(in crate::store) fn journals_done() -> Vec<u8> {
    vec![JOURNAL_DONE]
}

/// The import number of a completion mark's key.
pub(in crate::store) fn journal_done_number(k: &[u8]) -> Option<u64> {
    let rest = k.strip_prefix(&[JOURNAL_DONE])?;
    Some(u64::from_be_bytes(rest.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    //! One test per key kind: the bytes of an example key, so that a change of layout
    //! (which would leave existing records unreadable) cannot happen by accident.

    use super::*;

    fn id(b: u8) -> Uuid {
        Uuid::from_bytes([b; 16])
    }

    /// 2023-11-14T22:13:20.000000001Z
    fn instant() -> Timestamp {
        Timestamp::from_unix(1_700_000_000, 1)
    }

    /// The 12-byte key form of [`instant`].
    const INSTANT: &str = "800000006553f10000000001";
    const A: &str = "11111111111111111111111111111111";
    const B: &str = "22222222222222222222222222222222";

    fn pin(k: Vec<u8>, expected: &str) {
        assert_eq!(hex::encode(k), expected.replace(' ', ""));
    }

    #[test]
    fn the_journal_of_imports() {
        let k = journal(7, &item_id(id(0x11)));
        pin(k.clone(), &format!("6a 0000000000000007 64 {A}"));
        assert_eq!(journal_parts(&k), Some((7, &item_id(id(0x11))[..])));
        pin(journal_done(7), "4a 0000000000000007");
        assert_eq!(journal_done_number(&journal_done(7)), Some(7));
        assert_eq!(journal_parts(b"j123"), None);
    }

    #[test]
    fn instants_in_keys() {
        assert_eq!(hex::encode(instant().to_key()), INSTANT);
        assert_eq!(
            hex::encode(Timestamp::from_unix(-1, 0).to_key()),
            "7fffffffffffffff00000000"
        );
    }

    #[test]
    fn account_keys() {
        pin(account(id(0x11)), &format!("61 {A}"));
        pin(accounts(), "61");
    }

    #[test]
    fn username_keys() {
        pin(username("alice"), "6e 616c696365");
        let long = "x".repeat(201);
        pin(
            username(&long),
            "6e ff 84a0678c90937f5dcf9994d5866668da6b995109c8ad845410559b48a4ecafed",
        );
    }

    #[test]
    fn customer_keys() {
        pin(customer(id(0x11)), &format!("75 {A}"));
    }

    #[test]
    fn count_keys() {
        pin(count(id(0x11)), &format!("63 {A}"));
    }

    #[test]
    fn item_keys() {
        let place = item_place(id(0x11), instant(), 258);
        pin(place.clone(), &format!("{A} {INSTANT} 0000000000000102"));
        assert!(is_item_place_of(&place, id(0x11)));
        assert!(!is_item_place_of(&place, id(0x22)));
        pin(item(&place), &format!("69 {A} {INSTANT} 0000000000000102"));
        pin(items_of(id(0x11)), &format!("69 {A}"));
        assert_eq!(created_of(&item(&place)), Some(instant()));
    }

    #[test]
    fn item_id_keys() {
        pin(item_id(id(0x22)), &format!("64 {B}"));
    }

    #[test]
    fn access_key_keys() {
        pin(access_key(id(0x11), id(0x22)), &format!("6b {A} {B}"));
        pin(access_keys_of(id(0x11)), &format!("6b {A}"));
    }

    #[test]
    fn key_digest_keys() {
        pin(key_digest(&[0xab; 32]), &format!("68 {}", "ab".repeat(32)));
        pin(key_owner(id(0x11), id(0x22)), &format!("{A} {B}"));
    }

    #[test]
    fn idempotency_keys() {
        pin(idempotency(id(0x11), "k-1"), &format!("70 {A} 6b2d31"));
        pin(idempotency_of(id(0x11)), &format!("70 {A}"));
    }

    #[test]
    fn scheduled_keys() {
        let place = item_place(id(0x11), instant(), 3);
        pin(scheduled(&place), &format!("73 {A} {INSTANT} 0000000000000003"));
        pin(scheduled_of(id(0x11)), &format!("73 {A}"));
        pin(scheduled_id(id(0x22)), &format!("53 {B}"));
    }

    #[test]
    fn triggered_keys() {
        let later = Timestamp::from_unix(1_700_000_060, 0);
        let place = triggered_place(id(0x11), instant(), later, 4);
        pin(
            triggered(&place),
            &format!("78 {A} {INSTANT} 800000006553f13c00000000 0000000000000004"),
        );
        pin(triggered_of(id(0x11)), &format!("78 {A}"));
        pin(triggered_id(id(0x22)), &format!("58 {B}"));
    }

    #[test]
    fn due_index_keys() {
        pin(due(instant(), id(0x22)), &format!("71 {INSTANT} {B}"));
        pin(due_index(), "71");
        pin(due_until(instant()), &format!("71 {INSTANT} {}", "ff".repeat(16)));
        assert_eq!(due_entry(&due(instant(), id(0x22))), Some((instant(), id(0x22))));
        assert_eq!(due_entry(b"q"), None);
    }

    #[test]
    fn trigger_keys() {
        let place = trigger_place(id(0x11), 5, id(0x22));
        pin(trigger(&place), &format!("67 {A} 0000000000000005 {B}"));
        pin(triggers_of(id(0x11)), &format!("67 {A}"));
        pin(trigger_id(id(0x22)), &format!("47 {B}"));
    }

    #[test]
    fn settings_keys() {
        pin(settings(id(0x11)), &format!("7a {A}"));
    }

    #[test]
    fn target_list_keys() {
        let k = targets(TargetKind::Email, 6, id(0x22));
        pin(k.clone(), &format!("72 65 0000000000000006 {B}"));
        pin(
            targets(TargetKind::Inbox, 6, id(0x22)),
            &format!("72 69 0000000000000006 {B}"),
        );
        pin(targets_of(TargetKind::Inbox), "72 69");
        pin(all_targets(), "72");
        assert_eq!(targets_item(&k), Some(id(0x22)));
    }

    #[test]
    fn delivery_keys() {
        let k = delivery(7, id(0x22));
        pin(k.clone(), &format!("76 0000000000000007 {B}"));
        pin(deliveries(), "76");
        assert!(is_delivery(&k));
        assert!(!is_delivery(&email(Stage::Rendered, 7)));
    }

    #[test]
    fn email_queue_keys() {
        pin(email(Stage::Verification, 8), "56 0000000000000008");
        pin(email(Stage::Triggered, 8), "54 0000000000000008");
        pin(email(Stage::AdminNotice, 8), "4e 0000000000000008");
        pin(email(Stage::Rendered, 8), "4d 0000000000000008");
        pin(emails(Stage::Rendered), "4d");
        assert_eq!(email_entry(&email(Stage::Triggered, 8)), Some((Stage::Triggered, 8)));
        assert_eq!(email_entry(&delivery(8, id(0x22))), None);
        assert_eq!(email_entry(b"M"), None);
    }

    #[test]
    fn email_owner_index_keys() {
        let k = email_of_owner(id(0x11), 8);
        pin(k.clone(), &format!("6f {A} 0000000000000008"));
        pin(emails_of_owner(id(0x11)), &format!("6f {A}"));
        assert_eq!(email_owner_seq(&k), Some(8));
    }

    #[test]
    fn legacy_email_queue_keys() {
        pin(legacy_emails(), "6d");
        assert_eq!(legacy_email_seq(&hex::decode("6d0000000000000009").unwrap()), Some(9));
        assert_eq!(legacy_email_seq(b"m"), None);
    }

    #[test]
    fn payment_event_keys() {
        pin(event_handled("evt_1"), "45 6576745f31");
        pin(event_failed("evt_1"), "46 6576745f31");
        pin(failed_events(), "46");
    }
}
