//! What the store writes as values: private record types, one module per record kind, each
//! with its own version byte and explicit conversions to and from the domain types.
//!
//! The domain types have no storage encoding of their own (no serde derives): only the
//! structs here are encoded, so adding a field to a domain type cannot change what is on
//! disk. A change of a record is a new version: its encoder writes the new version, and its
//! decoder keeps reading every older one (a deliberate migration, done as records are read).
//!
//! Encoded records are the version byte, then postcard (a compact, non-self-describing
//! format: field order and types are the format). Version 1 of every kind is byte for byte
//! what the store wrote when records were postcard of the domain structs, so databases
//! written before these types existed read as they did. The golden tests at the end pin one
//! example of every kind as hex.
//!
//! A few values are fixed-width raw bytes without a version byte (counts, uuids, places):
//! their length is their format. Which kind lives under which key is in [`super::keys`].

use super::{Result, StoreError, Undecodable};
use crate::domain::wire::Timestamp;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use uuid::Uuid;

/// `version` + postcard of `record`.
fn versioned<R: Serialize>(version: u8, record: &R) -> Vec<u8> {
    let mut out = vec![version];
    // postcard serialisation of these plain records cannot fail: they contain no maps and
    // no custom serialisers that error.
    out.extend(postcard::to_allocvec(record).expect("postcard encodes plain records"));
    out
}

/// The error of a record of `kind` under `key` that cannot be decoded.
fn undecodable(kind: &'static str, key: &[u8], reason: impl Into<String>) -> StoreError {
    StoreError::Undecodable(Box::new(Undecodable {
        kind,
        key: key.to_vec(),
        reason: reason.into(),
    }))
}

/// The version byte of a stored record and the rest.
fn version_of<'a>(kind: &'static str, key: &[u8], bytes: &'a [u8]) -> Result<(u8, &'a [u8])> {
    bytes
        .split_first()
        .map(|(v, rest)| (*v, rest))
        .ok_or_else(|| undecodable(kind, key, "empty record"))
}

fn body<R: DeserializeOwned>(kind: &'static str, key: &[u8], bytes: &[u8]) -> Result<R> {
    postcard::from_bytes(bytes).map_err(|e| undecodable(kind, key, e.to_string()))
}

fn unknown<T>(kind: &'static str, key: &[u8], version: u8) -> Result<T> {
    Err(undecodable(kind, key, format!("unknown version {version}")))
}

/// An instant as stored: Unix seconds, nanoseconds (a leap second keeps nanoseconds ≥ 10⁹).
#[derive(Serialize, Deserialize)]
struct Time(i64, u32);

impl From<Timestamp> for Time {
    fn from(t: Timestamp) -> Time {
        Time(t.secs, t.nanos)
    }
}

impl From<Time> for Timestamp {
    fn from(Time(secs, nanos): Time) -> Timestamp {
        Timestamp::from_unix(secs, nanos)
    }
}

/// Raw values: a uuid (username index, idempotency keys, due-index owners), counts, the
/// payment customer.
pub(in crate::store) mod raw {
    use super::{undecodable, Result};
    use uuid::Uuid;

    pub(in crate::store) fn uuid(id: Uuid) -> Vec<u8> {
        id.as_bytes().to_vec()
    }

    /// The uuid stored under `key`, an index of `kind`.
    pub(in crate::store) fn to_uuid(kind: &'static str, key: &[u8], bytes: &[u8]) -> Result<Uuid> {
        Uuid::from_slice(bytes).map_err(|_| undecodable(kind, key, "not a uuid"))
    }

    /// A count: u64 big-endian.
    pub(in crate::store) fn count(n: u64) -> Vec<u8> {
        n.to_be_bytes().to_vec()
    }

    pub(in crate::store) fn to_count(key: &[u8], bytes: &[u8]) -> Result<u64> {
        let n: [u8; 8] = bytes
            .try_into()
            .map_err(|_| undecodable("item count", key, "not 8 bytes"))?;
        Ok(u64::from_be_bytes(n))
    }

    /// Two counts (scheduled, triggered): u64 big-endian each.
    pub(in crate::store) fn counts((scheduled, triggered): (u64, u64)) -> Vec<u8> {
        [scheduled.to_be_bytes(), triggered.to_be_bytes()].concat()
    }

    pub(in crate::store) fn to_counts(key: &[u8], bytes: &[u8]) -> Result<(u64, u64)> {
        if bytes.len() != 16 {
            return Err(undecodable("item counts", key, "not 16 bytes"));
        }
        Ok((to_count(key, &bytes[..8])?, to_count(key, &bytes[8..])?))
    }

    /// The payment customer id: its UTF-8.
    pub(in crate::store) fn customer(id: &str) -> Vec<u8> {
        id.as_bytes().to_vec()
    }

    pub(in crate::store) fn to_customer(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

pub(in crate::store) mod account {
    use super::*;
    use crate::domain::account::{Account, PasswordHash};

    const KIND: &str = "account";

    /// Version 1: the password is always a PBKDF2 PHC string.
    #[derive(Serialize, Deserialize)]
    struct V1 {
        id: Uuid,
        username: String,
        password_hash: String,
        created: Time,
        last_login: Option<Time>,
        epoch: u64,
    }

    /// Version 2: the password hash says its kind (accounts moved in from Intray or Tickler
    /// keep their bcrypt hash until their first login).
    #[derive(Serialize, Deserialize)]
    struct V2 {
        id: Uuid,
        username: String,
        password: PasswordV2,
        created: Time,
        last_login: Option<Time>,
        epoch: u64,
    }

    #[derive(Serialize, Deserialize)]
    enum PasswordV2 {
        Pbkdf2(String),
        Bcrypt(String),
    }

    pub(in crate::store) fn encode(a: &Account) -> Vec<u8> {
        let password = match &a.password_hash {
            PasswordHash::Pbkdf2(phc) => PasswordV2::Pbkdf2(phc.clone()),
            PasswordHash::LegacyBcrypt(h) => PasswordV2::Bcrypt(h.clone()),
        };
        versioned(
            2,
            &V2 {
                id: a.id,
                username: a.username.clone(),
                password,
                created: a.created.into(),
                last_login: a.last_login.map(Time::from),
                epoch: a.epoch,
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<Account> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                Ok(Account {
                    id: r.id,
                    username: r.username,
                    password_hash: PasswordHash::Pbkdf2(r.password_hash),
                    created: r.created.into(),
                    last_login: r.last_login.map(Timestamp::from),
                    epoch: r.epoch,
                })
            }
            (2, rest) => {
                let r: V2 = body(KIND, key, rest)?;
                Ok(Account {
                    id: r.id,
                    username: r.username,
                    password_hash: match r.password {
                        PasswordV2::Pbkdf2(phc) => PasswordHash::Pbkdf2(phc),
                        PasswordV2::Bcrypt(h) => PasswordHash::LegacyBcrypt(h),
                    },
                    created: r.created.into(),
                    last_login: r.last_login.map(Timestamp::from),
                    epoch: r.epoch,
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }

    /// What version 1 wrote (golden tests of records written before version 2).
    #[cfg(test)]
    pub(in crate::store) fn encode_v1(a: &Account, phc: &str) -> Vec<u8> {
        versioned(
            1,
            &V1 {
                id: a.id,
                username: a.username.clone(),
                password_hash: phc.to_owned(),
                created: a.created.into(),
                last_login: a.last_login.map(Time::from),
                epoch: a.epoch,
            },
        )
    }
}

/// An inbox item; its `created` is part of its key.
pub(in crate::store) mod item {
    use super::*;
    use crate::domain::inbox::models::{InboxItem, ItemType};
    use std::borrow::Cow;

    pub(in crate::store) const KIND: &str = "inbox item";

    #[derive(Serialize, Deserialize)]
    enum TypeV1 {
        Text,
        Jpeg,
        Png,
    }

    /// The data is borrowed when encoding (items reach 16 MiB).
    #[derive(Serialize, Deserialize)]
    struct V1<'a> {
        id: Uuid,
        kind: TypeV1,
        data: Cow<'a, [u8]>,
    }

    pub(in crate::store) fn encode(item: &InboxItem) -> Vec<u8> {
        let kind = match item.kind {
            ItemType::Text => TypeV1::Text,
            ItemType::Jpeg => TypeV1::Jpeg,
            ItemType::Png => TypeV1::Png,
        };
        versioned(
            1,
            &V1 {
                id: item.id,
                kind,
                data: Cow::Borrowed(&item.data),
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8], created: Timestamp) -> Result<InboxItem> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                let kind = match r.kind {
                    TypeV1::Text => ItemType::Text,
                    TypeV1::Jpeg => ItemType::Jpeg,
                    TypeV1::Png => ItemType::Png,
                };
                Ok(InboxItem {
                    id: r.id,
                    kind,
                    data: r.data.into_owned(),
                    created,
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

pub(in crate::store) mod access_key {
    use super::*;
    use crate::domain::account::{AccessKey, KeySecret};
    use crate::domain::permissions::Permissions;

    const KIND: &str = "access key";

    /// Version 1: the secret is always kept as its SHA-256 digest.
    #[derive(Serialize, Deserialize)]
    struct V1 {
        id: Uuid,
        name: String,
        created: Time,
        seq: u64,
        /// Bit i: permission i of the table of inbox.md §2.7.
        permissions: u32,
        digest: [u8; 32],
    }

    /// Version 2: the secret says its kind (keys moved in from Intray keep their bcrypt
    /// hash until they are first used).
    #[derive(Serialize, Deserialize)]
    struct V2 {
        id: Uuid,
        name: String,
        created: Time,
        seq: u64,
        permissions: u32,
        secret: SecretV2,
    }

    #[derive(Serialize, Deserialize)]
    enum SecretV2 {
        Sha256([u8; 32]),
        Bcrypt(String),
    }

    pub(in crate::store) fn encode(k: &AccessKey) -> Vec<u8> {
        let secret = match &k.secret {
            KeySecret::Digest(d) => SecretV2::Sha256(*d),
            KeySecret::LegacyBcrypt(h) => SecretV2::Bcrypt(h.clone()),
        };
        versioned(
            2,
            &V2 {
                id: k.id,
                name: k.name.clone(),
                created: k.created.into(),
                seq: k.seq,
                permissions: k.permissions.0,
                secret,
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<AccessKey> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                Ok(AccessKey {
                    id: r.id,
                    name: r.name,
                    created: r.created.into(),
                    seq: r.seq,
                    permissions: Permissions(r.permissions),
                    secret: KeySecret::Digest(r.digest),
                })
            }
            (2, rest) => {
                let r: V2 = body(KIND, key, rest)?;
                Ok(AccessKey {
                    id: r.id,
                    name: r.name,
                    created: r.created.into(),
                    seq: r.seq,
                    permissions: Permissions(r.permissions),
                    secret: match r.secret {
                        SecretV2::Sha256(d) => KeySecret::Digest(d),
                        SecretV2::Bcrypt(h) => KeySecret::LegacyBcrypt(h),
                    },
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// Scheduled item contents, shared by scheduled and triggered item records.
mod tickle {
    use super::*;
    use crate::domain::scheduler::models::{Day, Recurrence, Tickle, TimeOfDay};

    #[derive(Serialize, Deserialize)]
    pub(in crate::store) struct TickleV1 {
        content: Vec<u8>,
        day: DayV1,
        time: Option<TimeOfDayV1>,
        recurrence: Option<RecurrenceV1>,
    }

    #[derive(Serialize, Deserialize)]
    struct DayV1 {
        year: i64,
        month: u32,
        day: u32,
    }

    #[derive(Clone, Copy, Serialize, Deserialize)]
    struct TimeOfDayV1 {
        hour: u32,
        minute: u32,
        second: u32,
        nanos: u32,
    }

    #[derive(Serialize, Deserialize)]
    enum RecurrenceV1 {
        EveryDays {
            days: u32,
            time: Option<TimeOfDayV1>,
        },
        EveryMonths {
            months: u32,
            day: Option<u32>,
            time: Option<TimeOfDayV1>,
        },
    }

    impl From<TimeOfDay> for TimeOfDayV1 {
        fn from(t: TimeOfDay) -> Self {
            TimeOfDayV1 {
                hour: t.hour,
                minute: t.minute,
                second: t.second,
                nanos: t.nanos,
            }
        }
    }

    impl From<TimeOfDayV1> for TimeOfDay {
        fn from(t: TimeOfDayV1) -> Self {
            TimeOfDay {
                hour: t.hour,
                minute: t.minute,
                second: t.second,
                nanos: t.nanos,
            }
        }
    }

    impl From<&Tickle> for TickleV1 {
        fn from(t: &Tickle) -> Self {
            let recurrence = t.recurrence.map(|r| match r {
                Recurrence::EveryDays { days, time } => RecurrenceV1::EveryDays {
                    days,
                    time: time.map(Into::into),
                },
                Recurrence::EveryMonths { months, day, time } => RecurrenceV1::EveryMonths {
                    months,
                    day,
                    time: time.map(Into::into),
                },
            });
            TickleV1 {
                content: t.content.clone(),
                day: DayV1 {
                    year: t.day.year,
                    month: t.day.month,
                    day: t.day.day,
                },
                time: t.time.map(Into::into),
                recurrence,
            }
        }
    }

    impl From<TickleV1> for Tickle {
        fn from(t: TickleV1) -> Self {
            let recurrence = t.recurrence.map(|r| match r {
                RecurrenceV1::EveryDays { days, time } => Recurrence::EveryDays {
                    days,
                    time: time.map(Into::into),
                },
                RecurrenceV1::EveryMonths { months, day, time } => Recurrence::EveryMonths {
                    months,
                    day,
                    time: time.map(Into::into),
                },
            });
            Tickle {
                content: t.content,
                day: Day {
                    year: t.day.year,
                    month: t.day.month,
                    day: t.day.day,
                },
                time: t.time.map(Into::into),
                recurrence,
            }
        }
    }
}

/// A scheduled item with its due instant (the due-index entry it owns).
pub(in crate::store) mod scheduled {
    use super::tickle::TickleV1;
    use super::*;
    use crate::domain::scheduler::models::ScheduledItem;

    const KIND: &str = "scheduled item";

    #[derive(Serialize, Deserialize)]
    struct V1 {
        id: Uuid,
        owner: Uuid,
        tickle: TickleV1,
        created: Time,
        server_time: u64,
        due: Time,
    }

    pub(in crate::store) fn encode(item: &ScheduledItem, due: Timestamp) -> Vec<u8> {
        versioned(
            1,
            &V1 {
                id: item.id,
                owner: item.owner,
                tickle: (&item.tickle).into(),
                created: item.created.into(),
                server_time: item.server_time,
                due: due.into(),
            },
        )
    }

    /// The item and its due instant.
    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<(ScheduledItem, Timestamp)> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                let item = ScheduledItem {
                    id: r.id,
                    owner: r.owner,
                    tickle: r.tickle.into(),
                    created: r.created.into(),
                    server_time: r.server_time,
                };
                Ok((item, r.due.into()))
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// Finished deliveries of triggered items and pending ones (inbox deliveries, and the
/// delivery an e-mail of a triggered item carries).
mod delivery_parts {
    use super::*;
    use crate::domain::scheduler::models::{Attempt, Delivery, Outcome};

    #[derive(Serialize, Deserialize)]
    pub(in crate::store) struct AttemptV1 {
        trigger: Uuid,
        trigger_created: Time,
        delivery: Uuid,
        outcome: OutcomeV1,
    }

    /// Variants are only ever appended (postcard writes an enum's variant as its index):
    /// the push and webhook outcomes came with those triggers, and every earlier record reads
    /// as it did.
    #[derive(Serialize, Deserialize)]
    enum OutcomeV1 {
        InboxAdded(Uuid),
        InboxFailed(String),
        EmailSent,
        EmailFailed(String),
        PushSent,
        PushFailed(String),
        WebhookSent,
        WebhookFailed(String),
    }

    impl From<&Attempt> for AttemptV1 {
        fn from(a: &Attempt) -> Self {
            let outcome = match &a.outcome {
                Outcome::InboxAdded(id) => OutcomeV1::InboxAdded(*id),
                Outcome::InboxFailed(why) => OutcomeV1::InboxFailed(why.clone()),
                Outcome::EmailSent => OutcomeV1::EmailSent,
                Outcome::EmailFailed(why) => OutcomeV1::EmailFailed(why.clone()),
                Outcome::PushSent => OutcomeV1::PushSent,
                Outcome::PushFailed(why) => OutcomeV1::PushFailed(why.clone()),
                Outcome::WebhookSent => OutcomeV1::WebhookSent,
                Outcome::WebhookFailed(why) => OutcomeV1::WebhookFailed(why.clone()),
            };
            AttemptV1 {
                trigger: a.trigger,
                trigger_created: a.trigger_created.into(),
                delivery: a.delivery,
                outcome,
            }
        }
    }

    impl From<AttemptV1> for Attempt {
        fn from(a: AttemptV1) -> Self {
            let outcome = match a.outcome {
                OutcomeV1::InboxAdded(id) => Outcome::InboxAdded(id),
                OutcomeV1::InboxFailed(why) => Outcome::InboxFailed(why),
                OutcomeV1::EmailSent => Outcome::EmailSent,
                OutcomeV1::EmailFailed(why) => Outcome::EmailFailed(why),
                OutcomeV1::PushSent => Outcome::PushSent,
                OutcomeV1::PushFailed(why) => Outcome::PushFailed(why),
                OutcomeV1::WebhookSent => Outcome::WebhookSent,
                OutcomeV1::WebhookFailed(why) => Outcome::WebhookFailed(why),
            };
            Attempt {
                trigger: a.trigger,
                trigger_created: a.trigger_created.into(),
                delivery: a.delivery,
                outcome,
            }
        }
    }

    #[derive(Serialize, Deserialize)]
    pub(in crate::store) struct DeliveryV1 {
        id: Uuid,
        owner: Uuid,
        item: Uuid,
        trigger: Uuid,
        trigger_created: Time,
        email: bool,
        failures: u32,
        not_before: Time,
    }

    impl From<&Delivery> for DeliveryV1 {
        fn from(d: &Delivery) -> Self {
            DeliveryV1 {
                id: d.id,
                owner: d.owner,
                item: d.item,
                trigger: d.trigger,
                trigger_created: d.trigger_created.into(),
                email: d.email,
                failures: d.failures,
                not_before: d.not_before.into(),
            }
        }
    }

    impl From<DeliveryV1> for Delivery {
        fn from(d: DeliveryV1) -> Self {
            Delivery {
                id: d.id,
                owner: d.owner,
                item: d.item,
                trigger: d.trigger,
                trigger_created: d.trigger_created.into(),
                email: d.email,
                failures: d.failures,
                not_before: d.not_before.into(),
            }
        }
    }
}

pub(in crate::store) mod triggered {
    use super::delivery_parts::AttemptV1;
    use super::tickle::TickleV1;
    use super::*;
    use crate::domain::scheduler::models::TriggeredItem;

    const KIND: &str = "triggered item";

    #[derive(Serialize, Deserialize)]
    struct V1 {
        id: Uuid,
        owner: Uuid,
        tickle: TickleV1,
        created: Time,
        triggered: Time,
        attempts: Vec<AttemptV1>,
    }

    pub(in crate::store) fn encode(item: &TriggeredItem) -> Vec<u8> {
        versioned(
            1,
            &V1 {
                id: item.id,
                owner: item.owner,
                tickle: (&item.tickle).into(),
                created: item.created.into(),
                triggered: item.triggered.into(),
                attempts: item.attempts.iter().map(Into::into).collect(),
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<TriggeredItem> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                Ok(TriggeredItem {
                    id: r.id,
                    owner: r.owner,
                    tickle: r.tickle.into(),
                    created: r.created.into(),
                    triggered: r.triggered.into(),
                    attempts: r.attempts.into_iter().map(Into::into).collect(),
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

pub(in crate::store) mod trigger {
    use super::*;
    use crate::domain::scheduler::models::{Trigger, TriggerKind};
    use crate::domain::scheduler::push::{PushSubscription, WebhookFormat};

    const KIND: &str = "trigger";

    /// serde derives arrays up to 32 elements; a P-256 point has 65 bytes (postcard writes
    /// a tuple of that many bytes, as it writes the shorter arrays).
    mod serde_big_array {
        use serde::de::{Error, SeqAccess, Visitor};
        use serde::ser::SerializeTuple;
        use serde::{Deserializer, Serializer};

        pub(super) fn serialize<S: Serializer>(bytes: &[u8; 65], s: S) -> Result<S::Ok, S::Error> {
            let mut t = s.serialize_tuple(65)?;
            for b in bytes {
                t.serialize_element(b)?;
            }
            t.end()
        }

        pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 65], D::Error> {
            struct Bytes;
            impl<'de> Visitor<'de> for Bytes {
                type Value = [u8; 65];
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("65 bytes")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; 65], A::Error> {
                    let mut out = [0u8; 65];
                    for (i, b) in out.iter_mut().enumerate() {
                        *b = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(i, &self))?;
                    }
                    Ok(out)
                }
            }
            d.deserialize_tuple(65, Bytes)
        }
    }

    #[derive(Serialize, Deserialize)]
    struct V1 {
        id: Uuid,
        owner: Uuid,
        created: Time,
        kind: KindV1,
    }

    /// Variants are only ever appended (see `OutcomeV1`): push and webhook came later.
    #[derive(Serialize, Deserialize)]
    enum KindV1 {
        Email {
            address: String,
            verified: bool,
            key_digest: [u8; 32],
        },
        Inbox {
            url: String,
            username: String,
            access_key: String,
        },
        Push {
            endpoint: String,
            #[serde(with = "serde_big_array")]
            p256dh: [u8; 65],
            auth: [u8; 16],
            expired: bool,
        },
        Webhook {
            url: String,
            /// `text` or `json`.
            json: bool,
        },
    }

    pub(in crate::store) fn encode(t: &Trigger) -> Vec<u8> {
        let kind = match &t.kind {
            TriggerKind::Email {
                address,
                verified,
                key_digest,
            } => KindV1::Email {
                address: address.clone(),
                verified: *verified,
                key_digest: *key_digest,
            },
            TriggerKind::Inbox {
                url,
                username,
                access_key,
            } => KindV1::Inbox {
                url: url.clone(),
                username: username.clone(),
                access_key: access_key.clone(),
            },
            TriggerKind::Push { subscription, expired } => KindV1::Push {
                endpoint: subscription.endpoint.clone(),
                p256dh: subscription.p256dh,
                auth: subscription.auth,
                expired: *expired,
            },
            TriggerKind::Webhook { url, format } => KindV1::Webhook {
                url: url.clone(),
                json: *format == WebhookFormat::Json,
            },
        };
        versioned(
            1,
            &V1 {
                id: t.id,
                owner: t.owner,
                created: t.created.into(),
                kind,
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<Trigger> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                let kind = match r.kind {
                    KindV1::Email {
                        address,
                        verified,
                        key_digest,
                    } => TriggerKind::Email {
                        address,
                        verified,
                        key_digest,
                    },
                    KindV1::Inbox {
                        url,
                        username,
                        access_key,
                    } => TriggerKind::Inbox {
                        url,
                        username,
                        access_key,
                    },
                    KindV1::Push {
                        endpoint,
                        p256dh,
                        auth,
                        expired,
                    } => TriggerKind::Push {
                        subscription: PushSubscription { endpoint, p256dh, auth },
                        expired,
                    },
                    KindV1::Webhook { url, json } => TriggerKind::Webhook {
                        url,
                        format: if json { WebhookFormat::Json } else { WebhookFormat::Text },
                    },
                };
                Ok(Trigger {
                    id: r.id,
                    owner: r.owner,
                    created: r.created.into(),
                    kind,
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

pub(in crate::store) mod settings {
    use super::*;
    use crate::domain::scheduler::models::TimeZoneSetting;

    const KIND: &str = "time-zone setting";

    #[derive(Serialize, Deserialize)]
    struct V1 {
        offset: i32,
        name: String,
        summer: bool,
    }

    pub(in crate::store) fn encode(s: &TimeZoneSetting) -> Vec<u8> {
        versioned(
            1,
            &V1 {
                offset: s.offset,
                name: s.name.clone(),
                summer: s.summer,
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<TimeZoneSetting> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                Ok(TimeZoneSetting {
                    offset: r.offset,
                    name: r.name,
                    summer: r.summer,
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// The delivery targets of a triggered item, fixed when it triggered (a store record with
/// no domain type: the scheduler workers only see the deliveries made of it).
pub(in crate::store) mod targets {
    use super::*;

    const KIND: &str = "delivery targets";

    #[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub(in crate::store) struct Targets {
        pub(in crate::store) owner: Uuid,
        pub(in crate::store) triggers: Vec<Uuid>,
    }

    pub(in crate::store) fn encode(t: &Targets) -> Vec<u8> {
        versioned(1, t)
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<Targets> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => body(KIND, key, rest),
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// A pending inbox delivery.
pub(in crate::store) mod delivery {
    use super::delivery_parts::DeliveryV1;
    use super::*;
    use crate::domain::scheduler::models::Delivery;

    const KIND: &str = "pending delivery";

    pub(in crate::store) fn encode(d: &Delivery) -> Vec<u8> {
        versioned(1, &DeliveryV1::from(d))
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<Delivery> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => Ok(body::<DeliveryV1>(KIND, key, rest)?.into()),
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// A queued e-mail, at any stage (the stage is also its key's prefix).
pub(in crate::store) mod email {
    use super::delivery_parts::DeliveryV1;
    use super::*;
    use crate::domain::email::{EmailKind, Message, QueuedEmail};

    const KIND: &str = "queued e-mail";

    #[derive(Serialize, Deserialize)]
    struct V1 {
        owner: Uuid,
        trigger: Option<Uuid>,
        kind: KindV1,
        failures: u32,
        not_before: Time,
    }

    #[derive(Serialize, Deserialize)]
    enum KindV1 {
        Verification {
            to: String,
            key: String,
        },
        Triggered {
            delivery: DeliveryV1,
            to: String,
        },
        AdminNotice {
            worker: String,
            error: String,
        },
        Rendered {
            message: MessageV1,
            delivery: Option<DeliveryV1>,
        },
    }

    #[derive(Serialize, Deserialize)]
    struct MessageV1 {
        to: String,
        subject: String,
        text: String,
        html: String,
    }

    pub(in crate::store) fn encode(e: &QueuedEmail) -> Vec<u8> {
        let kind = match &e.kind {
            EmailKind::Verification { to, key } => KindV1::Verification {
                to: to.clone(),
                key: key.clone(),
            },
            EmailKind::Triggered { delivery, to } => KindV1::Triggered {
                delivery: delivery.into(),
                to: to.clone(),
            },
            EmailKind::AdminNotice { worker, error } => KindV1::AdminNotice {
                worker: worker.clone(),
                error: error.clone(),
            },
            EmailKind::Rendered { message, delivery } => KindV1::Rendered {
                message: MessageV1 {
                    to: message.to.clone(),
                    subject: message.subject.clone(),
                    text: message.text.clone(),
                    html: message.html.clone(),
                },
                delivery: delivery.as_ref().map(Into::into),
            },
        };
        versioned(
            1,
            &V1 {
                owner: e.owner,
                trigger: e.trigger,
                kind,
                failures: e.failures,
                not_before: e.not_before.into(),
            },
        )
    }

    pub(in crate::store) fn decode(key: &[u8], bytes: &[u8]) -> Result<QueuedEmail> {
        match version_of(KIND, key, bytes)? {
            (1, rest) => {
                let r: V1 = body(KIND, key, rest)?;
                let kind = match r.kind {
                    KindV1::Verification { to, key } => EmailKind::Verification { to, key },
                    KindV1::Triggered { delivery, to } => EmailKind::Triggered {
                        delivery: delivery.into(),
                        to,
                    },
                    KindV1::AdminNotice { worker, error } => EmailKind::AdminNotice { worker, error },
                    KindV1::Rendered { message, delivery } => EmailKind::Rendered {
                        message: Message {
                            to: message.to,
                            subject: message.subject,
                            text: message.text,
                            html: message.html,
                        },
                        delivery: delivery.map(Into::into),
                    },
                };
                Ok(QueuedEmail {
                    owner: r.owner,
                    trigger: r.trigger,
                    kind,
                    failures: r.failures,
                    not_before: r.not_before.into(),
                })
            }
            (v, _) => unknown(KIND, key, v),
        }
    }
}

/// Decodes the record `value` stored under `key` in tree `tree` (0: inbox, 1: scheduler)
/// as the key's prefix says it is ([`super::keys`]), and drops it: a restore checks every
/// record of a backup this way before it replaces anything. `format` is the database format
/// the records were written in ([`super::format`]): the e-mail queue without stages (`m`)
/// exists only before format 2. Index values (places, uuids, counts) are checked by length.
pub(in crate::store) fn check(tree: usize, key: &[u8], value: &[u8], format: u32) -> Result<()> {
    let sized = |kind: &'static str, lengths: &[usize]| {
        if lengths.contains(&value.len()) {
            Ok(())
        } else {
            Err(undecodable(
                kind,
                key,
                format!("{} bytes where {lengths:?} were expected", value.len()),
            ))
        }
    };
    let Some(prefix) = key.first() else {
        return Err(undecodable("unknown", key, "an empty key"));
    };
    match (tree, prefix) {
        (_, b'a') => account::decode(key, value).map(drop),
        (_, b'n') => sized("username index", &[16]),
        (_, b'u') => Ok(()), // the payment customer id: any bytes
        (0, b'c') => sized("item count", &[8]),
        (0, b'i') => {
            let created =
                super::keys::created_of(key).ok_or_else(|| undecodable(item::KIND, key, "a malformed key"))?;
            item::decode(key, value, created).map(drop)
        }
        (0, b'd') => sized("inbox item index", &[36]),
        (0, b'k') => access_key::decode(key, value).map(drop),
        (0, b'h') => sized("access key digest index", &[32]),
        (0, b'p') => sized("idempotency key", &[16]),
        (1, b'c') => sized("item counts", &[16]),
        (1, b's') => scheduled::decode(key, value).map(drop),
        (1, b'S') => sized("scheduled item index", &[36]),
        (1, b'x') => triggered::decode(key, value).map(drop),
        (1, b'X') => sized("triggered item index", &[48]),
        (1, b'q') => sized("due index", &[16]),
        (1, b'g') => trigger::decode(key, value).map(drop),
        (1, b'G') => sized("trigger index", &[40]),
        (1, b'z') => settings::decode(key, value).map(drop),
        (1, b'r') => targets::decode(key, value).map(drop),
        (1, b'v') => delivery::decode(key, value).map(drop),
        (1, b'V' | b'T' | b'N' | b'M') => email::decode(key, value).map(drop),
        (1, b'm') if format < 2 => email::decode(key, value).map(drop),
        (1, b'o') => match value {
            [b'V' | b'T' | b'N' | b'M'] => Ok(()),
            _ => Err(undecodable(
                "e-mail owner index",
                key,
                "not a stage of the e-mail queue",
            )),
        },
        (_, b'j') => {
            const KIND: &str = "import journal entry";
            let (_, journalled) =
                super::keys::journal_parts(key).ok_or_else(|| undecodable(KIND, key, "a malformed key"))?;
            if journalled.first() == Some(&0) {
                // a list of the keys a batch of the import created
                return match super::imports::created_keys(value).find_map(|k| k.err()) {
                    None => Ok(()),
                    Some(why) => Err(undecodable(KIND, key, why)),
                };
            }
            match super::imports::decode_pre_image(value) {
                Ok(None) => Ok(()),
                Ok(Some(before)) => check(tree, journalled, before, format),
                Err(why) => Err(undecodable(KIND, key, why)),
            }
        }
        (_, b'J') => sized("import completion mark", &[0]),
        (1, b'E') => sized("handled payment event", &[0]),
        (1, b'F') => Ok(()), // a failed payment event: the provider's bytes as they came
        (_, p) => Err(undecodable(
            "unknown",
            key,
            format!("no record kind of this tree has the key prefix {:?}", *p as char),
        )),
    }
}

#[cfg(test)]
mod tests {
    //! Golden tests: the encoding of a fixed example of every record kind, as hex. Version 1
    //! of each was captured from the store as it was before these record types existed
    //! (postcard of the domain structs), so these literals are also what existing databases
    //! hold. A failing test here means the disk format changed: add a version instead.

    use super::*;
    use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
    use crate::domain::email::{EmailKind, Message, QueuedEmail};
    use crate::domain::inbox::models::{InboxItem, ItemType};
    use crate::domain::permissions::Permissions;
    use crate::domain::scheduler::models::*;

    fn id(b: u8) -> Uuid {
        Uuid::from_bytes([b; 16])
    }

    fn at(secs: i64, nanos: u32) -> Timestamp {
        Timestamp::from_unix(secs, nanos)
    }

    /// `value` encodes to `hex`, and `hex` decodes to `value` (compared by `Debug`, which
    /// shows every field).
    fn golden<T: std::fmt::Debug>(
        value: &T,
        hex: &str,
        encode: impl Fn(&T) -> Vec<u8>,
        decode: impl Fn(&[u8], &[u8]) -> Result<T>,
    ) {
        assert_eq!(hex::encode(encode(value)), hex, "encoding of {value:?}");
        let bytes = hex::decode(hex).expect("hex");
        let decoded = decode(b"key", &bytes).expect("decodes");
        assert_eq!(format!("{decoded:?}"), format!("{value:?}"));
    }

    fn tickle() -> Tickle {
        Tickle {
            content: b"Pay".to_vec(),
            day: Day {
                year: 2024,
                month: 7,
                day: 1,
            },
            time: Some(TimeOfDay {
                hour: 8,
                minute: 30,
                second: 60,
                nanos: 5,
            }),
            recurrence: Some(Recurrence::EveryMonths {
                months: 1,
                day: Some(31),
                time: None,
            }),
        }
    }

    fn delivery() -> Delivery {
        Delivery {
            id: id(0x55),
            owner: id(0x11),
            item: id(0x33),
            trigger: id(0x44),
            trigger_created: at(1_700_000_100, 0),
            email: true,
            failures: 2,
            not_before: at(1_700_000_200, 7),
        }
    }

    /// Records written before version 2 still read, as PBKDF2 hashes.
    #[test]
    fn account_v1_still_decodes() {
        let a = Account {
            id: id(0x11),
            username: "alice".into(),
            password_hash: PasswordHash::Pbkdf2("$pbkdf2$x".into()),
            created: at(1_700_000_000, 123_456_789),
            last_login: Some(at(-1, 1_000_000_000)),
            epoch: 3,
        };
        golden(
            &a,
            "01101111111111111111111111111111111105616c696365092470626b646632247880c49fd50c959aef3a01018094ebdc0303",
            |a| account::encode_v1(a, "$pbkdf2$x"),
            account::decode,
        );
    }

    #[test]
    fn account_v2() {
        let mut a = Account {
            id: id(0x11),
            username: "alice".into(),
            password_hash: PasswordHash::Pbkdf2("$pbkdf2$x".into()),
            created: at(1_700_000_000, 123_456_789),
            last_login: Some(at(-1, 1_000_000_000)),
            epoch: 3,
        };
        golden(
            &a,
            "02101111111111111111111111111111111105616c69636500092470626b646632247880c49fd50c959aef3a01018094ebdc0303",
            account::encode,
            account::decode,
        );
        a.password_hash = PasswordHash::LegacyBcrypt("$2y$04$x".into());
        a.last_login = None;
        golden(
            &a,
            "02101111111111111111111111111111111105616c6963650108243279243034247880c49fd50c959aef3a0003",
            account::encode,
            account::decode,
        );
    }

    #[test]
    fn inbox_item_v1() {
        let created = at(1_700_000_000, 0);
        let item = InboxItem {
            id: id(0x22),
            kind: ItemType::Png,
            data: vec![0, 1, 0xff],
            created,
        };
        golden(
            &item,
            "01102222222222222222222222222222222202030001ff",
            item::encode,
            |k, b| item::decode(k, b, created),
        );
    }

    /// Keys written before version 2 still read, as digests.
    #[test]
    fn access_key_v1_still_decodes() {
        let hex = "0110666666666666666666666666666666660570686f6e6580c49fd50c00ac02ffff1f\
                   abababababababababababababababababababababababababababababababab";
        let k = access_key::decode(b"k", &hex::decode(hex).expect("hex")).expect("decodes");
        assert_eq!(
            (k.id, k.name.as_str(), k.created, k.seq, k.permissions.0),
            (id(0x66), "phone", at(1_700_000_000, 0), 300, (1 << 19) - 1)
        );
        assert_eq!(k.secret, KeySecret::Digest([0xab; 32]));
    }

    #[test]
    fn access_key_v2() {
        let mut k = AccessKey {
            id: id(0x66),
            name: "phone".into(),
            created: at(1_700_000_000, 0),
            seq: 300,
            permissions: Permissions((1 << 19) - 1),
            secret: KeySecret::Digest([0xab; 32]),
        };
        golden(
            &k,
            "0210666666666666666666666666666666660570686f6e6580c49fd50c00ac02ffff1f00\
             abababababababababababababababababababababababababababababababab",
            access_key::encode,
            access_key::decode,
        );
        k.secret = KeySecret::LegacyBcrypt("$2y$04$k".into());
        golden(
            &k,
            "0210666666666666666666666666666666660570686f6e6580c49fd50c00ac02ffff1f0108243279243034246b",
            access_key::encode,
            access_key::decode,
        );
    }

    #[test]
    fn scheduled_item_v1() {
        let item = ScheduledItem {
            id: id(0x22),
            owner: id(0x11),
            tickle: tickle(),
            created: at(1_700_000_000, 1),
            server_time: 4,
        };
        golden(
            &(item, at(1_719_822_600, 0)),
            "011022222222222222222222222222222222101111111111111111111111111111111103506179d01f070101081e3c05\
             010101011f0080c49fd50c010490a493e80c00",
            |(item, due)| scheduled::encode(item, *due),
            scheduled::decode,
        );
    }

    #[test]
    fn triggered_item_v1() {
        let mut t = tickle();
        t.time = None;
        t.recurrence = Some(Recurrence::EveryDays {
            days: 3,
            time: Some(TimeOfDay {
                hour: 23,
                minute: 0,
                second: 0,
                nanos: 0,
            }),
        });
        let attempt = |trigger, created, delivery, outcome| Attempt {
            trigger: id(trigger),
            trigger_created: at(created, 0),
            delivery: id(delivery),
            outcome,
        };
        let item = TriggeredItem {
            id: id(0x33),
            owner: id(0x11),
            tickle: t,
            created: at(1_700_000_000, 1),
            triggered: at(1_719_822_601, 2),
            attempts: vec![
                attempt(0x44, 1_700_000_100, 0x55, Outcome::InboxAdded(id(0x77))),
                attempt(0x44, 1_700_000_100, 0x56, Outcome::InboxFailed("no".into())),
                attempt(0x45, 1_700_000_101, 0x57, Outcome::EmailSent),
                attempt(0x45, 1_700_000_101, 0x58, Outcome::EmailFailed("bounce".into())),
            ],
        };
        golden(
            &item,
            "011033333333333333333333333333333333101111111111111111111111111111111103506179d01f0701000100030117\
             00000080c49fd50c0192a493e80c02041044444444444444444444444444444444c8c59fd50c001055555555555555555555\
             5555555555550010777777777777777777777777777777771044444444444444444444444444444444c8c59fd50c00105656\
             565656565656565656565656565601026e6f1045454545454545454545454545454545cac59fd50c00105757575757575757\
             5757575757575757021045454545454545454545454545454545cac59fd50c0010585858585858585858585858585858580306\
             626f756e6365",
            triggered::encode,
            triggered::decode,
        );
    }

    #[test]
    fn trigger_v1() {
        let email = Trigger {
            id: id(0x44),
            owner: id(0x11),
            created: at(1_700_000_100, 0),
            kind: TriggerKind::Email {
                address: "c@x.org".into(),
                verified: true,
                key_digest: [0xcd; 32],
            },
        };
        golden(
            &email,
            "0110444444444444444444444444444444441011111111111111111111111111111111c8c59fd50c0000076340782e6f726701\
             cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
            trigger::encode,
            trigger::decode,
        );
        let inbox = Trigger {
            id: id(0x45),
            owner: id(0x11),
            created: at(1_700_000_101, 0),
            kind: TriggerKind::Inbox {
                url: "http://h".into(),
                username: "bob".into(),
                access_key: "0a1b".into(),
            },
        };
        golden(
            &inbox,
            "0110454545454545454545454545454545451011111111111111111111111111111111cac59fd50c000108687474703a2f2f68\
             03626f620430613162",
            trigger::encode,
            trigger::decode,
        );
    }

    #[test]
    fn time_zone_setting_v1() {
        let s = TimeZoneSetting {
            offset: -300,
            name: "America/New_York".into(),
            summer: true,
        };
        golden(
            &s,
            "01d70410416d65726963612f4e65775f596f726b01",
            settings::encode,
            settings::decode,
        );
    }

    #[test]
    fn delivery_targets_v1() {
        let t = targets::Targets {
            owner: id(0x11),
            triggers: vec![id(0x44), id(0x45)],
        };
        golden(
            &t,
            "0110111111111111111111111111111111110210444444444444444444444444444444441045454545454545454545454545454545",
            targets::encode,
            targets::decode,
        );
    }

    #[test]
    fn pending_delivery_v1() {
        golden(
            &delivery(),
            "011055555555555555555555555555555555101111111111111111111111111111111110333333333333333333333333333333331044\
             444444444444444444444444444444c8c59fd50c00010290c79fd50c07",
            delivery::encode,
            delivery::decode,
        );
    }

    #[test]
    fn queued_email_v1() {
        let verification = QueuedEmail::new(
            id(0x11),
            Some(id(0x44)),
            EmailKind::Verification {
                to: "c@x.org".into(),
                key: "k".into(),
            },
        );
        golden(
            &verification,
            "01101111111111111111111111111111111101104444444444444444444444444444444400076340782e6f7267016b000000",
            email::encode,
            email::decode,
        );
        let triggered = QueuedEmail::new(
            id(0x11),
            Some(id(0x44)),
            EmailKind::Triggered {
                delivery: delivery(),
                to: "c@x.org".into(),
            },
        );
        golden(
            &triggered,
            "011011111111111111111111111111111111011044444444444444444444444444444444011055555555555555555555555555555555\
             101111111111111111111111111111111110333333333333333333333333333333331044444444444444444444444444444444c8c5\
             9fd50c00010290c79fd50c07076340782e6f7267000000",
            email::encode,
            email::decode,
        );
        let notice = QueuedEmail::new(
            Uuid::nil(),
            None,
            EmailKind::AdminNotice {
                worker: "emailer".into(),
                error: "e".into(),
            },
        );
        golden(
            &notice,
            "011000000000000000000000000000000000000207656d61696c65720165000000",
            email::encode,
            email::decode,
        );
        let mut rendered = QueuedEmail::new(
            id(0x11),
            Some(id(0x44)),
            EmailKind::Rendered {
                message: Message {
                    to: "c@x.org".into(),
                    subject: "S".into(),
                    text: "T".into(),
                    html: "H".into(),
                },
                delivery: Some(delivery()),
            },
        );
        rendered.failures = 1;
        rendered.not_before = at(1_700_000_300, 0);
        golden(
            &rendered,
            "01101111111111111111111111111111111101104444444444444444444444444444444403076340782e6f72670153015401480110\
             5555555555555555555555555555555510111111111111111111111111111111111033333333333333333333333333333333104444\
             4444444444444444444444444444c8c59fd50c00010290c79fd50c0701d8c89fd50c00",
            email::encode,
            email::decode,
        );
    }

    #[test]
    fn raw_values() {
        assert_eq!(hex::encode(raw::uuid(id(0x11))), "11".repeat(16));
        assert_eq!(raw::to_uuid("index", b"n", &[0x11; 16]).unwrap(), id(0x11));
        assert!(raw::to_uuid("index", b"n", &[0x11; 15]).is_err());
        assert_eq!(hex::encode(raw::count(258)), "0000000000000102");
        assert_eq!(raw::to_count(b"c", &raw::count(258)).unwrap(), 258);
        assert!(raw::to_count(b"c", &[1, 2]).is_err());
        assert_eq!(hex::encode(raw::counts((1, 2))), "00000000000000010000000000000002");
        assert_eq!(raw::to_counts(b"c", &raw::counts((1, 2))).unwrap(), (1, 2));
        assert!(raw::to_counts(b"c", &[0; 8]).is_err());
        assert_eq!(hex::encode(raw::customer("cus_1")), "6375735f31");
        assert_eq!(raw::to_customer(b"cus_1"), "cus_1");
    }

    #[test]
    fn unknown_versions_and_garbage_are_errors_not_panics() {
        for bytes in [&[][..], &[2, 0][..], &[1][..], &[1, 0xff, 0xff][..]] {
            assert!(account::decode(b"a", bytes).is_err(), "{bytes:?}");
            assert!(email::decode(b"V", bytes).is_err(), "{bytes:?}");
            assert!(triggered::decode(b"x", bytes).is_err(), "{bytes:?}");
        }
        let err = settings::decode(b"z", &[7, 0]).unwrap_err().to_string();
        assert!(err.contains("unknown version 7"), "{err}");
    }

    /// What a restore checks: every kind, under a key as the store makes it ([`super::super::keys`]),
    /// with a value as the store writes it, is accepted; a raised version byte, a damaged
    /// body, a wrong index length and an unknown prefix are refused naming kind and key.
    #[test]
    fn check_decodes_every_kind_by_tree_and_key_prefix() {
        use super::super::keys::{self, TargetKind};
        use crate::domain::email::Stage;
        let account = Account {
            id: id(0x11),
            username: "alice".into(),
            password_hash: PasswordHash::Pbkdf2("$pbkdf2$x".into()),
            created: at(1_700_000_000, 0),
            last_login: None,
            epoch: 0,
        };
        let item = InboxItem {
            id: id(0x22),
            kind: ItemType::Text,
            data: b"x".to_vec(),
            created: at(1_700_000_000, 5),
        };
        let key = AccessKey {
            id: id(0x66),
            name: "phone".into(),
            created: at(1_700_000_000, 0),
            seq: 1,
            permissions: Permissions(3),
            secret: KeySecret::Digest([0xab; 32]),
        };
        let scheduled = ScheduledItem {
            id: id(0x22),
            owner: id(0x11),
            tickle: tickle(),
            created: at(1_700_000_000, 1),
            server_time: 4,
        };
        let triggered = TriggeredItem {
            id: id(0x33),
            owner: id(0x11),
            tickle: tickle(),
            created: at(1_700_000_000, 1),
            triggered: at(1_719_822_601, 2),
            attempts: Vec::new(),
        };
        let trigger = Trigger {
            id: id(0x44),
            owner: id(0x11),
            created: at(1_700_000_100, 0),
            kind: TriggerKind::Email {
                address: "c@x.org".into(),
                verified: true,
                key_digest: [0xcd; 32],
            },
        };
        let email = QueuedEmail::new(
            id(0x11),
            None,
            EmailKind::Verification {
                to: "c@x.org".into(),
                key: "k".into(),
            },
        );
        let item_place = keys::item_place(id(0x11), item.created, 7);
        let triggered_place = keys::triggered_place(id(0x11), triggered.created, triggered.triggered, 8);
        let trigger_place = keys::trigger_place(id(0x11), 9, trigger.id);
        let both = |k: Vec<u8>, v: Vec<u8>| [(0, k.clone(), v.clone()), (1, k, v)];
        let mut good: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        good.extend(both(keys::account(id(0x11)), account::encode(&account)));
        good.extend(both(keys::username("alice"), raw::uuid(id(0x11))));
        good.extend(both(keys::customer(id(0x11)), raw::customer("cus_1")));
        good.extend([
            (0, keys::count(id(0x11)), raw::count(1)),
            (0, keys::item(&item_place), item::encode(&item)),
            (0, keys::item_id(item.id), item_place.clone()),
            (0, keys::access_key(id(0x11), key.id), access_key::encode(&key)),
            (0, keys::key_digest(&[0xab; 32]), keys::key_owner(id(0x11), key.id)),
            (0, keys::idempotency(id(0x11), "k"), raw::uuid(item.id)),
            (1, keys::count(id(0x11)), raw::counts((1, 1))),
            (
                1,
                keys::scheduled(&item_place),
                scheduled::encode(&scheduled, at(1_719_822_600, 0)),
            ),
            (1, keys::scheduled_id(scheduled.id), item_place.clone()),
            (1, keys::triggered(&triggered_place), triggered::encode(&triggered)),
            (1, keys::triggered_id(triggered.id), triggered_place),
            (1, keys::due(at(1_719_822_600, 0), scheduled.id), raw::uuid(id(0x11))),
            (1, keys::trigger(&trigger_place), trigger::encode(&trigger)),
            (1, keys::trigger_id(trigger.id), trigger_place),
            (
                1,
                keys::settings(id(0x11)),
                settings::encode(&TimeZoneSetting::default()),
            ),
            (
                1,
                keys::targets(TargetKind::Inbox, 3, triggered.id),
                targets::encode(&targets::Targets {
                    owner: id(0x11),
                    triggers: vec![trigger.id],
                }),
            ),
            (1, keys::delivery(4, id(0x55)), delivery::encode(&delivery())),
            (1, keys::email(Stage::Verification, 5), email::encode(&email)),
            (
                1,
                keys::email_of_owner(id(0x11), 5),
                vec![keys::stage_prefix(Stage::Verification)],
            ),
            (1, keys::event_handled("evt_1"), Vec::new()),
            (1, keys::event_failed("evt_2"), b"{}".to_vec()),
        ]);
        for (tree, k, v) in &good {
            check(*tree, k, v, 2).unwrap_or_else(|e| panic!("tree {tree}, key {}: {e}", hex::encode(k)));
        }
        // the queue without stages exists only in format 1
        let mut legacy = keys::legacy_emails();
        legacy.extend_from_slice(&5u64.to_be_bytes());
        assert!(check(1, &legacy, &email::encode(&email), 1).is_ok());
        assert!(check(1, &legacy, &email::encode(&email), 2).is_err());

        let refused = |tree: usize, k: &[u8], v: &[u8]| match check(tree, k, v, 2) {
            Err(StoreError::Undecodable(u)) => {
                assert_eq!(u.key, k);
                u.kind
            }
            other => panic!("{other:?}"),
        };
        for (tree, k, v) in &good {
            if v.first().is_some_and(|b| *b == 1 || *b == 2) && v.len() > 20 && k[0] != b'd' && k[0] != b'S' {
                let mut raised = v.clone();
                raised[0] = 99;
                refused(*tree, k, &raised);
            }
        }
        assert_eq!(refused(0, &keys::account(id(0x11)), &[2, 0xff, 0xff]), "account");
        assert_eq!(refused(0, &keys::item(&item_place), &[9]), "inbox item");
        assert_eq!(
            refused(1, &keys::scheduled_id(id(0x22)), &[0; 35]),
            "scheduled item index"
        );
        assert_eq!(refused(0, b"Zzz", b""), "unknown");
        assert_eq!(
            refused(0, &keys::scheduled(&item_place), b""),
            "unknown",
            "a scheduler kind in the inbox tree"
        );
    }
}
