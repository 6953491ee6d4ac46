//! Moving a database between engines (issue 21 point 4, `pigeonhole migrate-store`): every
//! stored fact as one engine-neutral stream of [`Record`]s, and the check of a copy, a
//! [`Tally`] of counts per [`Kind`] and a SHA-256 digest over the records' canonical
//! encoding ([`encode`]).
//!
//! An engine *dumps* its database as this stream ([`Dump`]) and *loads* a stream into an
//! empty database ([`Load`]), which it keeps only when told to ([`Loaded::keep`]): the
//! command that copies (`launch/migrate.rs`) opens both, pipes one into the other, checks
//! the target's tally against the source's and keeps or discards. This module knows no
//! engine. What the stream carries is what the engines store, in domain types, plus the
//! store's own facts that have no domain type (an access key's sequence number, a scheduled
//! item's due instant, a triggered item's occurrence, the delivery targets fixed when an
//! item triggered, the payment customer, the signing key). Left out on purpose, and said so
//! here: the login, registration and e-mail throttle counts (a window of minutes that starts
//! afresh, as at any restart of a sled server), the per-account item counts (sled's `c`
//! records, recomputed by a load from the items) and the leases of queue rows (a stopped
//! source has none that matter). A fact an engine holds that this stream cannot carry is a
//! [`CopyError::Unrepresentable`] naming it, never a silent drop.
//!
//! The digest does not depend on the order in which an engine lists the records of one
//! kind (each engine dumps in its own index order, in pages): a record's hash is added to
//! its kind's 256-bit sum, and the digest is the SHA-256 of every kind's count and sum. The
//! queues are the exception where order is a fact: deliveries, delivery targets and e-mails
//! are dumped in queue order, and their position within their queue (an e-mail stage, the
//! e-mail or the inbox targets) is part of what is hashed, so a copy that reorders a queue
//! does not match.

use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::email::{EmailKind, QueuedEmail, Stage};
use crate::domain::inbox::models::InboxItem;
use crate::domain::scheduler::models::{
    Delivery, Outcome, Recurrence, ScheduledItem, Tickle, TimeOfDay, TimeZoneSetting, Trigger, TriggerKind,
    TriggeredItem,
};
use crate::domain::wire::Timestamp;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;
use uuid::Uuid;

/// Which service's accounts (each service keeps its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    Inbox,
    Scheduler,
}

/// One stored fact.
#[derive(Clone, Debug)]
pub enum Record {
    /// The token signing key (sled: the data directory's key file; PostgreSQL: its table).
    SigningKey(Vec<u8>),
    /// An account with its payment customer id.
    Account {
        service: Service,
        account: Account,
        customer: Option<String>,
    },
    AccessKey {
        service: Service,
        account: Uuid,
        key: AccessKey,
    },
    InboxItem {
        account: Uuid,
        item: InboxItem,
    },
    /// An `Idempotency-Key` of an item addition and the item it answered (it outlives the
    /// item).
    Idempotency {
        account: Uuid,
        key: String,
        item: Uuid,
    },
    Settings {
        account: Uuid,
        setting: TimeZoneSetting,
    },
    /// A scheduled item and the instant it is due next (as the engine's due index has it).
    Scheduled {
        item: ScheduledItem,
        due: Timestamp,
    },
    /// A triggered item and, when the engine knows it, the scheduled item and occurrence
    /// that made it.
    Triggered {
        item: TriggeredItem,
        occurrence: Option<(Uuid, Timestamp)>,
    },
    Trigger(Trigger),
    /// The delivery targets fixed when `item` triggered, waiting to become deliveries
    /// (`email`: the e-mail triggers, else the inbox triggers), in queue order.
    Targets {
        item: Uuid,
        owner: Uuid,
        email: bool,
        triggers: Vec<Uuid>,
    },
    /// A pending inbox delivery, in queue order.
    Delivery(Delivery),
    /// A queued e-mail, in the queue order of its stage.
    Email(QueuedEmail),
    /// A payment event seen: handled (`failed: None`) or failed, with the event.
    PaymentEvent {
        id: String,
        failed: Option<Vec<u8>>,
    },
}

/// The kinds of records, in the order of a dump and of the printed counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    SigningKey,
    InboxAccount,
    SchedulerAccount,
    InboxAccessKey,
    SchedulerAccessKey,
    InboxItem,
    Idempotency,
    Settings,
    Scheduled,
    Triggered,
    Trigger,
    Targets,
    Delivery,
    Email,
    PaymentEvent,
}

impl Kind {
    pub const ALL: [Kind; 15] = [
        Kind::SigningKey,
        Kind::InboxAccount,
        Kind::SchedulerAccount,
        Kind::InboxAccessKey,
        Kind::SchedulerAccessKey,
        Kind::InboxItem,
        Kind::Idempotency,
        Kind::Settings,
        Kind::Scheduled,
        Kind::Triggered,
        Kind::Trigger,
        Kind::Targets,
        Kind::Delivery,
        Kind::Email,
        Kind::PaymentEvent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SigningKey => "signing keys",
            Kind::InboxAccount => "inbox accounts",
            Kind::SchedulerAccount => "scheduler accounts",
            Kind::InboxAccessKey => "inbox access keys",
            Kind::SchedulerAccessKey => "scheduler access keys",
            Kind::InboxItem => "inbox items",
            Kind::Idempotency => "idempotency keys",
            Kind::Settings => "time-zone settings",
            Kind::Scheduled => "scheduled items",
            Kind::Triggered => "triggered items",
            Kind::Trigger => "triggers",
            Kind::Targets => "delivery targets",
            Kind::Delivery => "pending deliveries",
            Kind::Email => "queued e-mails",
            Kind::PaymentEvent => "payment events",
        }
    }

    /// Whether the position of a record among those of its kind is a fact (the queues).
    fn ordered(self) -> bool {
        matches!(self, Kind::Targets | Kind::Delivery | Kind::Email)
    }

    fn tag(self) -> u8 {
        self as u8 + 1
    }
}

impl Record {
    /// Which queue of its kind a queued record is in (e-mails: their stage; delivery
    /// targets: e-mail or inbox), 0 for the rest: the order within a queue is a fact, the
    /// order between queues is not.
    fn queue(&self) -> u8 {
        match self {
            Record::Email(m) => stage_tag(m.kind.stage()),
            Record::Targets { email, .. } => *email as u8,
            _ => 0,
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Record::SigningKey(_) => Kind::SigningKey,
            Record::Account {
                service: Service::Inbox,
                ..
            } => Kind::InboxAccount,
            Record::Account { .. } => Kind::SchedulerAccount,
            Record::AccessKey {
                service: Service::Inbox,
                ..
            } => Kind::InboxAccessKey,
            Record::AccessKey { .. } => Kind::SchedulerAccessKey,
            Record::InboxItem { .. } => Kind::InboxItem,
            Record::Idempotency { .. } => Kind::Idempotency,
            Record::Settings { .. } => Kind::Settings,
            Record::Scheduled { .. } => Kind::Scheduled,
            Record::Triggered { .. } => Kind::Triggered,
            Record::Trigger(_) => Kind::Trigger,
            Record::Targets { .. } => Kind::Targets,
            Record::Delivery(_) => Kind::Delivery,
            Record::Email(_) => Kind::Email,
            Record::PaymentEvent { .. } => Kind::PaymentEvent,
        }
    }
}

/// What can go wrong moving a database.
#[derive(Debug)]
pub enum CopyError {
    /// The source or the target failed.
    Store(super::StoreError),
    /// The source holds a fact the stream cannot carry (or the target cannot hold): which
    /// kind and why. Nothing was written.
    Unrepresentable { kind: &'static str, what: String },
    /// The target already holds data (a load writes only into an empty database): what.
    NotEmpty(String),
    /// A stream broke a rule of the store (a record of an account that was not in the
    /// stream before it, a duplicate): what.
    Invalid(String),
    /// The copy, dumped again from the target, is not the source.
    Mismatch { source: Tally, target: Tally },
    /// The other side of the copy stopped (its own error says why).
    Stopped,
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyError::Store(e) => write!(f, "{e}"),
            CopyError::Unrepresentable { kind, what } => {
                write!(
                    f,
                    "the source holds {kind} that cannot be copied: {what}; nothing was written"
                )
            }
            CopyError::NotEmpty(what) => write!(
                f,
                "the target is not empty ({what}); migrate-store copies only into an empty database"
            ),
            CopyError::Invalid(what) => write!(f, "the source's records do not fit together: {what}"),
            CopyError::Stopped => write!(f, "the copy stopped"),
            CopyError::Mismatch { source, target } => write!(
                f,
                "the copy does not match its source:\nsource:\n{source}target:\n{target}"
            ),
        }
    }
}

impl std::error::Error for CopyError {}

impl From<super::StoreError> for CopyError {
    fn from(e: super::StoreError) -> CopyError {
        CopyError::Store(e)
    }
}

/// An engine's stopped database, opened to be dumped.
#[async_trait::async_trait]
pub trait Dump: Send {
    /// Sends every record to `out`, the kinds in [`Kind`] order (the queues in queue order);
    /// [`CopyError::Stopped`] when the receiving side is gone.
    async fn dump(self: Box<Self>, out: tokio::sync::mpsc::Sender<Record>) -> Result<(), CopyError>;
}

/// An engine's empty database, opened to be loaded ([`CopyError::NotEmpty`] at its opening
/// or its load when it holds data).
#[async_trait::async_trait]
pub trait Load: Send {
    /// Whether the engine keeps the occurrence of a triggered item (sled keeps none: it
    /// guards against two processes triggering one occurrence twice, and sled has one
    /// process).
    fn keeps_occurrences(&self) -> bool;

    /// Writes every record `records` gives, until it ends, checking what the engine relies
    /// on (an account before what it owns, no id twice, …), then reads the database back:
    /// the answer holds its tally. Nothing of it is kept unless [`Loaded::keep`] is called;
    /// an error, or the answer dropped, leaves the target as it was.
    async fn load(self: Box<Self>, records: tokio::sync::mpsc::Receiver<Record>) -> Result<Box<dyn Loaded>, CopyError>;
}

/// A load written and read back, not kept yet: dropping it discards it.
#[async_trait::async_trait]
pub trait Loaded: Send {
    /// The tally of what the target holds, read back after the load.
    fn tally(&self) -> &Tally;

    /// Keeps the load (sled: the new database moved into the data directory, its signing
    /// key beside it; PostgreSQL: the load's transaction committed).
    async fn keep(self: Box<Self>) -> Result<(), CopyError>;
}

/// Counts per kind and the digest of a stream, fed record by record in bounded memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Per kind: the count and the 256-bit wrapping sum of the records' hashes.
    kinds: BTreeMap<Kind, (u64, [u8; 32])>,
    /// Per queue (kind and [`Record::queue`]): the records seen so far, the next one's
    /// position.
    positions: BTreeMap<(Kind, u8), u64>,
}

impl Tally {
    pub fn add(&mut self, record: &Record) {
        let kind = record.kind();
        let (count, sum) = self.kinds.entry(kind).or_insert((0, [0; 32]));
        let mut hasher = Sha256::new();
        if kind.ordered() {
            let position = self.positions.entry((kind, record.queue())).or_insert(0);
            hasher.update(position.to_be_bytes());
            *position += 1;
        }
        hasher.update(encode(record));
        add_into(sum, &hasher.finalize().into());
        *count += 1;
    }

    /// How many records of `kind`.
    pub fn count(&self, kind: Kind) -> u64 {
        self.kinds.get(&kind).map_or(0, |(n, _)| *n)
    }

    /// The records of every kind.
    pub fn total(&self) -> u64 {
        self.kinds.values().map(|(n, _)| n).sum()
    }

    /// SHA-256 over every kind's tag, count and sum of record hashes, as hex.
    pub fn digest(&self) -> String {
        let mut hasher = Sha256::new();
        for kind in Kind::ALL {
            let (count, sum) = self.kinds.get(&kind).copied().unwrap_or((0, [0; 32]));
            hasher.update([kind.tag()]);
            hasher.update(count.to_be_bytes());
            hasher.update(sum);
        }
        hex::encode(hasher.finalize())
    }
}

/// The counts (every kind, zeros too) and the digest, one line each.
impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for kind in Kind::ALL {
            writeln!(f, "  {:<22} {}", kind.name(), self.count(kind))?;
        }
        writeln!(f, "  {:<22} {}", "digest (SHA-256)", self.digest())
    }
}

/// `sum += x` as 256-bit big-endian numbers, wrapping.
fn add_into(sum: &mut [u8; 32], x: &[u8; 32]) {
    let mut carry = 0u16;
    for i in (0..32).rev() {
        let s = sum[i] as u16 + x[i] as u16 + carry;
        sum[i] = s as u8;
        carry = s >> 8;
    }
}

/// The canonical encoding of a record: its kind's tag, then its fields in declaration
/// order; integers big-endian, byte strings and texts with a 64-bit length, options and
/// enums with a one-byte tag. Two records encode the same exactly when they hold the same
/// facts.
pub fn encode(record: &Record) -> Vec<u8> {
    let mut e = Encoder(vec![record.kind().tag()]);
    match record {
        Record::SigningKey(key) => e.bytes(key),
        Record::Account {
            service: _,
            account,
            customer,
        } => {
            e.uuid(account.id);
            e.text(&account.username);
            match &account.password_hash {
                PasswordHash::Pbkdf2(h) => {
                    e.u8(1);
                    e.text(h);
                }
                PasswordHash::LegacyBcrypt(h) => {
                    e.u8(2);
                    e.text(h);
                }
            }
            e.time(account.created);
            e.option(account.last_login.as_ref(), |e, t| e.time(*t));
            e.u64(account.epoch);
            e.option(customer.as_ref(), |e, c| e.text(c));
        }
        Record::AccessKey {
            service: _,
            account,
            key,
        } => {
            e.uuid(*account);
            e.uuid(key.id);
            e.text(&key.name);
            e.time(key.created);
            e.u64(key.seq);
            e.u64(u64::from(key.permissions.0));
            match &key.secret {
                KeySecret::Digest(d) => {
                    e.u8(1);
                    e.bytes(d);
                }
                KeySecret::LegacyBcrypt(h) => {
                    e.u8(2);
                    e.text(h);
                }
            }
        }
        Record::InboxItem { account, item } => {
            e.uuid(*account);
            e.uuid(item.id);
            e.text(item.kind.as_str());
            e.bytes(&item.data);
            e.time(item.created);
        }
        Record::Idempotency { account, key, item } => {
            e.uuid(*account);
            e.text(key);
            e.uuid(*item);
        }
        Record::Settings { account, setting } => {
            e.uuid(*account);
            e.u64(setting.offset as i64 as u64);
            e.text(&setting.name);
            e.u8(setting.summer as u8);
        }
        Record::Scheduled { item, due } => {
            e.uuid(item.id);
            e.uuid(item.owner);
            e.tickle(&item.tickle);
            e.time(item.created);
            e.u64(item.server_time);
            e.time(*due);
        }
        Record::Triggered { item, occurrence } => {
            e.uuid(item.id);
            e.uuid(item.owner);
            e.tickle(&item.tickle);
            e.time(item.created);
            e.time(item.triggered);
            e.u64(item.attempts.len() as u64);
            for a in &item.attempts {
                e.uuid(a.trigger);
                e.time(a.trigger_created);
                e.uuid(a.delivery);
                match &a.outcome {
                    Outcome::InboxAdded(id) => {
                        e.u8(1);
                        e.uuid(*id);
                    }
                    Outcome::InboxFailed(why) => {
                        e.u8(2);
                        e.text(why);
                    }
                    Outcome::EmailSent => e.u8(3),
                    Outcome::EmailFailed(why) => {
                        e.u8(4);
                        e.text(why);
                    }
                    Outcome::PushSent => e.u8(5),
                    Outcome::PushFailed(why) => {
                        e.u8(6);
                        e.text(why);
                    }
                    Outcome::WebhookSent => e.u8(7),
                    Outcome::WebhookFailed(why) => {
                        e.u8(8);
                        e.text(why);
                    }
                }
            }
            e.option(occurrence.as_ref(), |e, (id, at)| {
                e.uuid(*id);
                e.time(*at);
            });
        }
        Record::Trigger(t) => {
            e.uuid(t.id);
            e.uuid(t.owner);
            e.time(t.created);
            match &t.kind {
                TriggerKind::Email {
                    address,
                    verified,
                    key_digest,
                } => {
                    e.u8(1);
                    e.text(address);
                    e.u8(*verified as u8);
                    e.bytes(key_digest);
                }
                TriggerKind::Inbox {
                    url,
                    username,
                    access_key,
                } => {
                    e.u8(2);
                    e.text(url);
                    e.text(username);
                    e.text(access_key);
                }
                TriggerKind::Push { subscription, expired } => {
                    e.u8(3);
                    e.text(&subscription.endpoint);
                    e.bytes(&subscription.p256dh);
                    e.bytes(&subscription.auth);
                    e.u8(*expired as u8);
                }
                TriggerKind::Webhook { url, format } => {
                    e.u8(4);
                    e.text(url);
                    e.text(format.name());
                }
            }
        }
        Record::Targets {
            item,
            owner,
            email,
            triggers,
        } => {
            e.uuid(*item);
            e.uuid(*owner);
            e.u8(*email as u8);
            e.u64(triggers.len() as u64);
            for t in triggers {
                e.uuid(*t);
            }
        }
        Record::Delivery(d) => e.delivery(d),
        Record::Email(m) => {
            e.uuid(m.owner);
            e.option(m.trigger.as_ref(), |e, t| e.uuid(*t));
            e.u64(u64::from(m.failures));
            e.time(m.not_before);
            match &m.kind {
                EmailKind::Verification { to, key } => {
                    e.u8(stage_tag(Stage::Verification));
                    e.text(to);
                    e.text(key);
                }
                EmailKind::Triggered { delivery, to } => {
                    e.u8(stage_tag(Stage::Triggered));
                    e.delivery(delivery);
                    e.text(to);
                }
                EmailKind::AdminNotice { worker, error } => {
                    e.u8(stage_tag(Stage::AdminNotice));
                    e.text(worker);
                    e.text(error);
                }
                EmailKind::Rendered { message, delivery } => {
                    e.u8(stage_tag(Stage::Rendered));
                    e.text(&message.to);
                    e.text(&message.subject);
                    e.text(&message.text);
                    e.text(&message.html);
                    e.option(delivery.as_ref(), |e, d| e.delivery(d));
                }
            }
        }
        Record::PaymentEvent { id, failed } => {
            e.text(id);
            e.option(failed.as_ref(), |e, f| e.bytes(f));
        }
    }
    e.0
}

/// The stages in the order a dump lists them.
pub const STAGES: [Stage; 4] = [
    Stage::Verification,
    Stage::Triggered,
    Stage::AdminNotice,
    Stage::Rendered,
];

fn stage_tag(stage: Stage) -> u8 {
    match stage {
        Stage::Verification => 1,
        Stage::Triggered => 2,
        Stage::AdminNotice => 3,
        Stage::Rendered => 4,
    }
}

struct Encoder(Vec<u8>);

impl Encoder {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }

    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_be_bytes());
    }

    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn text(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn uuid(&mut self, id: Uuid) {
        self.0.extend_from_slice(id.as_bytes());
    }

    fn time(&mut self, t: Timestamp) {
        self.0.extend_from_slice(&t.secs.to_be_bytes());
        self.0.extend_from_slice(&t.nanos.to_be_bytes());
    }

    fn option<T>(&mut self, v: Option<&T>, f: impl FnOnce(&mut Encoder, &T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                f(self, v);
            }
        }
    }

    fn time_of_day(&mut self, t: Option<&TimeOfDay>) {
        self.option(t, |e, t| {
            e.u64(u64::from(t.hour));
            e.u64(u64::from(t.minute));
            e.u64(u64::from(t.second));
            e.u64(u64::from(t.nanos));
        });
    }

    fn tickle(&mut self, t: &Tickle) {
        self.bytes(&t.content);
        self.u64(t.day.number() as u64);
        self.time_of_day(t.time.as_ref());
        self.option(t.recurrence.as_ref(), |e, r| match r {
            Recurrence::EveryDays { days, time } => {
                e.u8(1);
                e.u64(u64::from(*days));
                e.time_of_day(time.as_ref());
            }
            Recurrence::EveryMonths { months, day, time } => {
                e.u8(2);
                e.u64(u64::from(*months));
                e.option(day.as_ref(), |e, d| e.u64(u64::from(*d)));
                e.time_of_day(time.as_ref());
            }
        });
    }

    fn delivery(&mut self, d: &Delivery) {
        self.uuid(d.id);
        self.uuid(d.owner);
        self.uuid(d.item);
        self.uuid(d.trigger);
        self.time(d.trigger_created);
        self.u8(d.email as u8);
        self.u64(u64::from(d.failures));
        self.time(d.not_before);
    }
}

/// Records for the tests of both engines' dumps and loads.
#[cfg(test)]
pub(crate) mod samples {
    use super::*;
    use crate::domain::inbox::models::ItemType;
    use crate::domain::scheduler::models::{Attempt, Day};
    use crate::domain::scheduler::push::{PushSubscription, WebhookFormat};

    pub(crate) fn t(secs: i64, nanos: u32) -> Timestamp {
        Timestamp::from_unix(secs, nanos)
    }

    pub(crate) fn id(b: u8) -> Uuid {
        Uuid::from_bytes([b; 16])
    }

    pub(crate) fn account(service: Service, b: u8, hash: PasswordHash) -> Record {
        Record::Account {
            service,
            account: Account {
                id: id(b),
                username: format!("user{b}"),
                password_hash: hash,
                created: t(1_700_000_000, 5),
                last_login: Some(t(1_700_000_100, 1_000_000_001)),
                epoch: 3,
            },
            customer: Some("cus_1".into()),
        }
    }

    pub(crate) fn delivery(b: u8) -> Delivery {
        Delivery {
            id: id(b),
            owner: id(1),
            item: id(7),
            trigger: id(8),
            trigger_created: t(1, 2),
            email: false,
            failures: 1,
            not_before: t(3, 4),
        }
    }

    /// One record of every kind, every variant of the enums inside.
    pub(crate) fn every_kind() -> Vec<Record> {
        let tickle = Tickle {
            content: b"hello".to_vec(),
            day: Day::from_number(19_000).expect("a day"),
            time: TimeOfDay::parse("23:59:60.5"),
            recurrence: Some(Recurrence::EveryMonths {
                months: 2,
                day: Some(31),
                time: TimeOfDay::parse("08:00"),
            }),
        };
        vec![
            Record::SigningKey(vec![9; 32]),
            account(Service::Inbox, 1, PasswordHash::Pbkdf2("$pbkdf2".into())),
            account(Service::Scheduler, 1, PasswordHash::LegacyBcrypt("$2y$".into())),
            Record::AccessKey {
                service: Service::Inbox,
                account: id(1),
                key: AccessKey {
                    id: id(2),
                    name: "k".into(),
                    created: t(5, 0),
                    seq: 12,
                    permissions: crate::domain::permissions::Permissions(0xff),
                    secret: KeySecret::Digest([3; 32]),
                },
            },
            Record::AccessKey {
                service: Service::Scheduler,
                account: id(1),
                key: AccessKey {
                    id: id(2),
                    name: "k".into(),
                    created: t(5, 0),
                    seq: 13,
                    permissions: crate::domain::permissions::Permissions(1),
                    secret: KeySecret::LegacyBcrypt("$2y$k".into()),
                },
            },
            Record::InboxItem {
                account: id(1),
                item: InboxItem {
                    id: id(4),
                    kind: ItemType::Png,
                    data: vec![0, 1, 2],
                    created: t(6, 7),
                },
            },
            Record::Idempotency {
                account: id(1),
                key: "idem".into(),
                item: id(4),
            },
            Record::Settings {
                account: id(1),
                setting: TimeZoneSetting {
                    offset: -300,
                    name: "EST".into(),
                    summer: false,
                },
            },
            Record::Scheduled {
                item: ScheduledItem {
                    id: id(5),
                    owner: id(1),
                    tickle: tickle.clone(),
                    created: t(8, 0),
                    server_time: 4,
                },
                due: t(9, 999_999_999),
            },
            Record::Triggered {
                item: TriggeredItem {
                    id: id(7),
                    owner: id(1),
                    tickle: Tickle {
                        recurrence: Some(Recurrence::EveryDays { days: 1, time: None }),
                        ..tickle
                    },
                    created: t(8, 0),
                    triggered: t(10, 0),
                    attempts: vec![
                        Attempt {
                            trigger: id(8),
                            trigger_created: t(1, 2),
                            delivery: id(9),
                            outcome: Outcome::InboxAdded(id(10)),
                        },
                        Attempt {
                            trigger: id(8),
                            trigger_created: t(1, 2),
                            delivery: id(9),
                            outcome: Outcome::EmailFailed("no".into()),
                        },
                        Attempt {
                            trigger: id(14),
                            trigger_created: t(1, 3),
                            delivery: id(16),
                            outcome: Outcome::PushFailed("gone".into()),
                        },
                        Attempt {
                            trigger: id(15),
                            trigger_created: t(1, 4),
                            delivery: id(17),
                            outcome: Outcome::WebhookSent,
                        },
                    ],
                },
                occurrence: Some((id(5), t(9, 0))),
            },
            Record::Trigger(Trigger {
                id: id(8),
                owner: id(1),
                created: t(1, 2),
                kind: TriggerKind::Inbox {
                    url: "https://x".into(),
                    username: "u".into(),
                    access_key: "ab".into(),
                },
            }),
            Record::Trigger(Trigger {
                id: id(14),
                owner: id(1),
                created: t(1, 3),
                kind: TriggerKind::Push {
                    subscription: PushSubscription {
                        endpoint: "https://push.example/p".into(),
                        p256dh: [4; 65],
                        auth: [5; 16],
                    },
                    expired: true,
                },
            }),
            Record::Trigger(Trigger {
                id: id(15),
                owner: id(1),
                created: t(1, 4),
                kind: TriggerKind::Webhook {
                    url: "https://ntfy.example/t?auth=x".into(),
                    format: WebhookFormat::Json,
                },
            }),
            Record::Targets {
                item: id(7),
                owner: id(1),
                email: true,
                triggers: vec![id(8), id(11)],
            },
            Record::Delivery(delivery(12)),
            Record::Email(QueuedEmail {
                owner: id(1),
                trigger: Some(id(8)),
                kind: EmailKind::Rendered {
                    message: crate::domain::email::Message {
                        to: "a@b".into(),
                        subject: "s".into(),
                        text: "t".into(),
                        html: "h".into(),
                    },
                    delivery: Some(delivery(13)),
                },
                failures: 0,
                not_before: t(0, 0),
            }),
            Record::PaymentEvent {
                id: "evt_1".into(),
                failed: Some(b"{}".to_vec()),
            },
        ]
    }

    /// [`every_kind`] with the triggered item's occurrence left out (what sled can hold).
    pub(crate) fn every_kind_for_sled() -> Vec<Record> {
        every_kind()
            .into_iter()
            .map(|r| match r {
                Record::Triggered { item, .. } => Record::Triggered { item, occurrence: None },
                r => r,
            })
            .collect()
    }

    /// A channel that gives `records`, then ends (its sender is dropped).
    pub(crate) fn channel_of(records: Vec<Record>) -> tokio::sync::mpsc::Receiver<Record> {
        let (tx, rx) = tokio::sync::mpsc::channel(records.len().max(1));
        for r in records {
            tx.try_send(r).expect("room for every record");
        }
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::samples::*;
    use super::*;

    fn tally(records: &[Record]) -> Tally {
        let mut tally = Tally::default();
        for r in records {
            tally.add(r);
        }
        tally
    }

    #[test]
    fn every_kind_is_counted() {
        let records = every_kind();
        let tally = tally(&records);
        for kind in Kind::ALL {
            let want = records.iter().filter(|r| r.kind() == kind).count() as u64;
            assert!(want >= 1, "{kind:?} is among the samples");
            assert_eq!(tally.count(kind), want, "{kind:?}");
        }
        assert_eq!(tally.total(), records.len() as u64);
        let printed = tally.to_string();
        assert!(printed.contains("scheduler access keys"), "{printed}");
        assert!(printed.contains(&tally.digest()), "{printed}");
    }

    /// The digest does not depend on the order of unordered kinds, but does on every field
    /// and on the order of a queue.
    #[test]
    fn the_digest_sees_every_fact_and_the_queue_order_only() {
        let records = every_kind();
        let base = tally(&records).digest();
        let mut reversed = records.clone();
        reversed.reverse();
        assert_eq!(tally(&reversed).digest(), base, "order of listing within engines");

        // one changed field in each record changes the digest
        for (i, r) in records.iter().enumerate() {
            let mut changed = records.clone();
            changed[i] = match r.clone() {
                Record::SigningKey(mut k) => {
                    k[0] ^= 1;
                    Record::SigningKey(k)
                }
                Record::Account {
                    service,
                    mut account,
                    customer,
                } => {
                    account.epoch += 1;
                    Record::Account {
                        service,
                        account,
                        customer,
                    }
                }
                Record::AccessKey {
                    service,
                    account,
                    mut key,
                } => {
                    key.seq += 1;
                    Record::AccessKey { service, account, key }
                }
                Record::InboxItem { account, mut item } => {
                    item.created = t(6, 8);
                    Record::InboxItem { account, item }
                }
                Record::Idempotency { account, item, .. } => Record::Idempotency {
                    account,
                    key: "other".into(),
                    item,
                },
                Record::Settings { account, mut setting } => {
                    setting.summer = true;
                    Record::Settings { account, setting }
                }
                Record::Scheduled { item, due } => Record::Scheduled {
                    item,
                    due: t(due.secs, due.nanos - 1),
                },
                Record::Triggered { item, .. } => Record::Triggered { item, occurrence: None },
                Record::Trigger(mut tr) => {
                    tr.created = t(tr.created.secs + 100, 0);
                    Record::Trigger(tr)
                }
                Record::Targets {
                    item,
                    owner,
                    email,
                    mut triggers,
                } => {
                    triggers.reverse();
                    Record::Targets {
                        item,
                        owner,
                        email,
                        triggers,
                    }
                }
                Record::Delivery(mut d) => {
                    d.failures += 1;
                    Record::Delivery(d)
                }
                Record::Email(mut m) => {
                    m.trigger = None;
                    Record::Email(m)
                }
                Record::PaymentEvent { id, .. } => Record::PaymentEvent { id, failed: None },
            };
            assert_ne!(tally(&changed).digest(), base, "a change in {:?}", r.kind());
        }

        // two deliveries: their order is a fact
        let first = vec![Record::Delivery(delivery(1)), Record::Delivery(delivery(2))];
        let second = vec![Record::Delivery(delivery(2)), Record::Delivery(delivery(1))];
        assert_ne!(tally(&first).digest(), tally(&second).digest());
        // a missing record, or one more, changes the counts and the digest
        let shorter = &records[1..];
        assert_ne!(tally(shorter), tally(&records));
        assert_ne!(tally(shorter).digest(), base);
    }

    #[test]
    fn the_sum_carries_across_bytes_and_wraps() {
        let mut sum = [0xff; 32];
        let mut one = [0; 32];
        one[31] = 1;
        add_into(&mut sum, &one);
        assert_eq!(sum, [0; 32]);
        let mut sum = [0; 32];
        sum[31] = 0xff;
        add_into(&mut sum, &one);
        assert_eq!(&sum[30..], &[1, 0]);
    }
}
