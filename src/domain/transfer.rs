//! Export and import of one account (docs/backup.md): the JSON of each service's part and
//! its parser. Everything is parsed and checked before anything is stored, so a bad file
//! changes nothing; ids and `created` times are kept, so importing into another server
//! recreates the same items, and importing twice finds them there.

use crate::domain::inbox::models::{ContentsIn, InboxItem};
use crate::domain::scheduler::models::{
    normalise_inbox_url, Attempt, Outcome, ScheduledItem, Tickle, TimeZoneSetting, Trigger, TriggerKind, TriggeredItem,
};
use crate::domain::scheduler::push::{normalise_webhook_url, WebhookFormat};
use crate::domain::wire::{self, Timestamp};
use crate::domain::DomainError;
use serde_json::{json, Value};
use uuid::Uuid;

/// Names the JSON of a service's part (`format`) and of the CLI's file of both.
pub const INBOX_FORMAT: &str = "pigeonhole-inbox-export";
pub const SCHEDULER_FORMAT: &str = "pigeonhole-scheduler-export";
pub const FILE_FORMAT: &str = "pigeonhole-export";
pub const VERSION: u64 = 1;

fn bad(message: impl Into<String>) -> DomainError {
    DomainError::invalid(message)
}

fn uuid_at(v: &Value, field: &str, at: &str) -> Result<Uuid, DomainError> {
    v.get(field)
        .and_then(Value::as_str)
        .and_then(wire::parse_uuid)
        .ok_or_else(|| bad(format!("{at}: \"{field}\" must be a UUID")))
}

fn time_at(v: &Value, field: &str, at: &str) -> Result<Timestamp, DomainError> {
    v.get(field)
        .and_then(Value::as_str)
        .and_then(Timestamp::parse)
        .ok_or_else(|| bad(format!("{at}: \"{field}\" must be an RFC 3339 timestamp")))
}

fn str_at<'a>(v: &'a Value, field: &str, at: &str) -> Result<&'a str, DomainError> {
    v.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("{at}: \"{field}\" must be a string")))
}

/// An access key of an export: what the owner has to recreate (name and permissions).
fn key_to_recreate(k: &Value, at: &str) -> Result<Value, DomainError> {
    let name = str_at(k, "name", at)?;
    let permissions = k
        .get("permissions")
        .filter(|p| p.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
        .ok_or_else(|| bad(format!("{at}: \"permissions\" must be a list of names")))?;
    Ok(json!({"name": name, "permissions": permissions}))
}

/// The inbox part of an export.
pub fn inbox_export(username: &str, items: &[InboxItem], keys: Vec<Value>) -> Value {
    json!({
        "format": INBOX_FORMAT,
        "version": VERSION,
        "username": username,
        "items": items,
        "access-keys": keys,
    })
}

/// One inbox item of an export, checked (`at` names it in errors).
fn parse_inbox_item(item: &Value, at: &str) -> Result<InboxItem, DomainError> {
    let contents: ContentsIn = item
        .get("contents")
        .cloned()
        .and_then(|c| serde_json::from_value(c).ok())
        .ok_or_else(|| bad(format!("{at}: \"contents\" must be {{\"type\", \"data\"}}")))?;
    let (kind, data) = contents.validate().map_err(|e| bad(format!("{at}: {e}")))?;
    Ok(InboxItem {
        id: uuid_at(item, "id", at)?,
        kind,
        data,
        created: time_at(item, "created", at)?,
    })
}

/// What an inbox import says besides its items.
#[derive(Debug)]
pub struct InboxHead {
    pub keys_to_recreate: Vec<Value>,
    /// Check only: store nothing (the CLI checks every part before it imports any).
    pub dry_run: bool,
    /// With `dry_run`: how many new items the pieces before this one bring (`"new-before"`),
    /// counted against the item limit with this piece's.
    pub new_before: u64,
}

/// Reads the inbox part of an export from `body` (an import request's body) one item at a
/// time: each item is checked and handed to `each`, and dropped before the next is read, so
/// that memory holds one item whatever the number of items. Every item is checked (and the
/// format and version) before this answers `Ok`; an item that breaks a rule is an error
/// naming it, and `each` sees no item after it.
pub fn read_inbox_import<E>(
    body: &[u8],
    mut each: impl FnMut(InboxItem) -> Result<(), E>,
) -> Result<InboxHead, ReadError<E>> {
    let mut stopped = None;
    let fields = stream::read(body, INBOX_FORMAT, &["items"], &mut |_, i, v| {
        let item = parse_inbox_item(&v, &format!("items[{i}]")).map_err(stream::Halt::Invalid)?;
        each(item).map_err(|e| {
            stopped = Some(e);
            stream::Halt::Stopped
        })
    });
    let fields = stream::finish(fields, &mut stopped)?;
    Ok(InboxHead {
        keys_to_recreate: fields.keys,
        dry_run: fields.dry_run,
        new_before: fields.new_before,
    })
}

/// Why reading an import failed: a rule broken (answered 400, nothing stored), or the
/// error of the caller's `each`.
#[derive(Debug)]
pub enum ReadError<E> {
    Invalid(DomainError),
    Stopped(E),
}

impl<E> From<DomainError> for ReadError<E> {
    fn from(e: DomainError) -> ReadError<E> {
        ReadError::Invalid(e)
    }
}

fn attempt_json(a: &Attempt) -> Value {
    let result = match &a.outcome {
        Outcome::InboxAdded(id) => json!({"tag": "InboxAdditionSuccess", "contents": id}),
        Outcome::InboxFailed(why) => json!({"tag": "InboxAdditionFailure", "contents": why}),
        Outcome::EmailSent => json!({"tag": "EmailResultSent"}),
        Outcome::EmailFailed(why) => json!({"tag": "EmailResultError", "contents": why}),
        Outcome::PushSent => json!({"tag": "PushResultSent"}),
        Outcome::PushFailed(why) => json!({"tag": "PushResultError", "contents": why}),
        Outcome::WebhookSent => json!({"tag": "WebhookResultSent"}),
        Outcome::WebhookFailed(why) => json!({"tag": "WebhookResultError", "contents": why}),
    };
    json!({"trigger": a.trigger, "trigger-created": a.trigger_created.to_string(),
           "delivery": a.delivery, "result": result})
}

fn parse_attempt(v: &Value, at: &str) -> Result<Attempt, DomainError> {
    let result = v
        .get("result")
        .ok_or_else(|| bad(format!("{at}: \"result\" is missing")))?;
    let why = || {
        result
            .get("contents")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| bad(format!("{at}: the result needs its reason")))
    };
    let outcome = match result.get("tag").and_then(Value::as_str) {
        Some("InboxAdditionSuccess") => Outcome::InboxAdded(uuid_at(result, "contents", at)?),
        Some("InboxAdditionFailure") => Outcome::InboxFailed(why()?),
        Some("EmailResultSent") => Outcome::EmailSent,
        Some("EmailResultError") => Outcome::EmailFailed(why()?),
        Some("PushResultSent") => Outcome::PushSent,
        Some("PushResultError") => Outcome::PushFailed(why()?),
        Some("WebhookResultSent") => Outcome::WebhookSent,
        Some("WebhookResultError") => Outcome::WebhookFailed(why()?),
        _ => return Err(bad(format!("{at}: unknown result"))),
    };
    Ok(Attempt {
        trigger: uuid_at(v, "trigger", at)?,
        trigger_created: time_at(v, "trigger-created", at)?,
        delivery: uuid_at(v, "delivery", at)?,
        outcome,
    })
}

/// A trigger as exported (`None`: not exported). An inbox trigger carries the access key it
/// delivers with (a credential of the target inbox: without it the imported trigger could
/// not deliver), a webhook its whole URL (a token in its query, likewise); an e-mail trigger
/// carries its address and whether it was verified. A push subscription is not exported: it
/// belongs to one device and to this server's key (a push service refuses messages signed
/// with another), and its endpoint and keys are never shown again (scheduler.md §2.6); the
/// device subscribes again.
fn trigger_json(t: &Trigger) -> Option<Value> {
    Some(match &t.kind {
        TriggerKind::Email { address, verified, .. } => json!({
            "uuid": t.id, "created": t.created.to_string(), "type": "email",
            "address": address, "verified": verified,
        }),
        TriggerKind::Inbox {
            url,
            username,
            access_key,
        } => json!({
            "uuid": t.id, "created": t.created.to_string(), "type": "inbox",
            "url": url, "username": username, "access-key": access_key,
        }),
        TriggerKind::Webhook { url, format } => json!({
            "uuid": t.id, "created": t.created.to_string(), "type": "webhook",
            "url": url, "format": format.name(),
        }),
        TriggerKind::Push { .. } => return None,
    })
}

/// The scheduler part of an export.
pub fn scheduler_export(
    username: &str,
    settings: &TimeZoneSetting,
    scheduled: &[ScheduledItem],
    triggered: &[TriggeredItem],
    triggers: &[Trigger],
    keys: Vec<Value>,
) -> Value {
    json!({
        "format": SCHEDULER_FORMAT,
        "version": VERSION,
        "username": username,
        "settings": settings.to_json(),
        "scheduled": scheduled.iter().map(|s| json!({
            "id": s.id, "created": s.created.to_string(), "contents": s.tickle.to_json(),
        })).collect::<Vec<_>>(),
        "triggered": triggered.iter().map(|t| json!({
            "id": t.id, "created": t.created.to_string(), "triggered": t.triggered.to_string(),
            "contents": t.tickle.to_json(),
            "attempts": t.attempts.iter().map(attempt_json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "triggers": triggers.iter().filter_map(trigger_json).collect::<Vec<_>>(),
        "access-keys": keys,
    })
}

/// One entry of a scheduler import, checked, for its account.
#[derive(Clone, Debug)]
pub enum SchedulerEntry {
    Scheduled(ScheduledItem),
    Triggered(TriggeredItem),
    /// E-mail triggers arrive unverified (see [`read_scheduler_import`]).
    Trigger(Trigger),
}

/// What a scheduler import says besides its lists.
#[derive(Debug)]
pub struct SchedulerHead {
    pub settings: Option<TimeZoneSetting>,
    pub keys_to_recreate: Vec<Value>,
    pub dry_run: bool,
    /// As in [`InboxHead::new_before`], for scheduled items.
    pub new_before: u64,
}

/// The lists of a scheduler part, in the order of [`SchedulerEntry`]'s kinds.
const SCHEDULER_LISTS: [&str; 3] = ["scheduled", "triggered", "triggers"];

fn tickle_at(item: &Value, at: &str) -> Result<Tickle, DomainError> {
    Tickle::parse(item.get("contents").unwrap_or(&Value::Null)).map_err(|e| bad(format!("{at}: {e}")))
}

fn parse_scheduled(item: &Value, owner: Uuid, at: &str) -> Result<ScheduledItem, DomainError> {
    Ok(ScheduledItem {
        id: uuid_at(item, "id", at)?,
        owner,
        tickle: tickle_at(item, at)?,
        created: time_at(item, "created", at)?,
        server_time: 0,
    })
}

fn parse_triggered(item: &Value, owner: Uuid, at: &str) -> Result<TriggeredItem, DomainError> {
    let attempts = match item.get("attempts") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(j, a)| parse_attempt(a, &format!("{at}.attempts[{j}]")))
            .collect::<Result<Vec<_>, DomainError>>()?,
        Some(_) => return Err(bad(format!("{at}: \"attempts\" must be a list"))),
    };
    Ok(TriggeredItem {
        id: uuid_at(item, "id", at)?,
        owner,
        tickle: tickle_at(item, at)?,
        created: time_at(item, "created", at)?,
        triggered: time_at(item, "triggered", at)?,
        attempts,
    })
}

fn parse_trigger(t: &Value, owner: Uuid, at: &str) -> Result<Trigger, DomainError> {
    let kind = match t.get("type").and_then(Value::as_str) {
        Some("email") => {
            let address = str_at(t, "address", at)?;
            if !crate::domain::scheduler::models::is_valid_email(address) {
                return Err(bad(format!("{at}: invalid e-mail address")));
            }
            TriggerKind::Email {
                address: address.to_owned(),
                verified: false,
                key_digest: crate::domain::secrets::new_secret().1,
            }
        }
        Some("inbox") => {
            let url =
                normalise_inbox_url(str_at(t, "url", at)?).ok_or_else(|| bad(format!("{at}: invalid inbox URL")))?;
            let access_key = str_at(t, "access-key", at)?;
            if !crate::domain::secrets::looks_like_secret(access_key) {
                return Err(bad(format!("{at}: \"access-key\" must be an access key's secret")));
            }
            let username = str_at(t, "username", at)?;
            if !wire::is_valid_username(username) {
                return Err(bad(format!("{at}: invalid username")));
            }
            TriggerKind::Inbox {
                url,
                username: username.to_owned(),
                access_key: access_key.to_ascii_lowercase(),
            }
        }
        Some("webhook") => {
            let url = normalise_webhook_url(str_at(t, "url", at)?)
                .ok_or_else(|| bad(format!("{at}: invalid webhook URL")))?;
            let format = match t.get("format") {
                None | Some(Value::Null) => WebhookFormat::Text,
                Some(Value::String(f)) => WebhookFormat::parse(f)
                    .ok_or_else(|| bad(format!("{at}: \"format\" must be \"text\" or \"json\"")))?,
                Some(_) => return Err(bad(format!("{at}: \"format\" must be \"text\" or \"json\""))),
            };
            TriggerKind::Webhook { url, format }
        }
        _ => {
            return Err(bad(format!(
                "{at}: \"type\" must be \"email\", \"inbox\" or \"webhook\""
            )))
        }
    };
    Ok(Trigger {
        id: uuid_at(t, "uuid", at)?,
        owner,
        created: time_at(t, "created", at)?,
        kind,
    })
}

/// Reads the scheduler part of an export for the account `owner` from `body` one entry at a
/// time, as [`read_inbox_import`] does: each scheduled item, triggered item and trigger is
/// checked and handed to `each`, and dropped before the next is read.
///
/// An e-mail trigger is imported unverified, with a fresh verification key: whoever imports
/// a file could have written any address into it, and only a verification proves the
/// address's owner wants the e-mails (the owner asks for a verification e-mail with the
/// resend endpoint).
pub fn read_scheduler_import<E>(
    body: &[u8],
    owner: Uuid,
    mut each: impl FnMut(SchedulerEntry) -> Result<(), E>,
) -> Result<SchedulerHead, ReadError<E>> {
    let mut stopped = None;
    let fields = stream::read(body, SCHEDULER_FORMAT, &SCHEDULER_LISTS, &mut |list, i, v| {
        let at = format!("{}[{i}]", SCHEDULER_LISTS[list]);
        let entry = match list {
            0 => parse_scheduled(&v, owner, &at).map(SchedulerEntry::Scheduled),
            1 => parse_triggered(&v, owner, &at).map(SchedulerEntry::Triggered),
            _ => parse_trigger(&v, owner, &at).map(SchedulerEntry::Trigger),
        }
        .map_err(stream::Halt::Invalid)?;
        each(entry).map_err(|e| {
            stopped = Some(e);
            stream::Halt::Stopped
        })
    });
    let fields = stream::finish(fields, &mut stopped)?;
    let settings = match &fields.settings {
        None | Some(Value::Null) => None,
        Some(s) => Some(TimeZoneSetting::parse(s).map_err(|e| bad(format!("settings: {e}")))?),
    };
    Ok(SchedulerHead {
        settings,
        keys_to_recreate: fields.keys,
        dry_run: fields.dry_run,
        new_before: fields.new_before,
    })
}

/// The most access keys an export may list (they are kept and answered as a list of keys
/// to recreate, so their number is bounded).
pub const MAX_ACCESS_KEYS: usize = 1000;

/// The most JSON values (objects, lists, strings, numbers …) one element of an export's
/// lists, or its settings, may have: one element is held as a JSON tree while it is checked,
/// so a hostile element of millions of tiny values is refused rather than held.
pub const MAX_ELEMENT_VALUES: usize = 65_536;

/// Reading an export's JSON object with serde's streaming deserializer: its lists one
/// element at a time, its other fields small and bounded, anything unknown skipped without
/// being held.
mod stream {
    use super::{bad, key_to_recreate, ReadError, MAX_ACCESS_KEYS, MAX_ELEMENT_VALUES, VERSION};
    use crate::domain::DomainError;
    use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};
    use std::fmt;

    /// Why an element stopped the reading.
    pub(super) enum Halt {
        Invalid(DomainError),
        /// The caller's `each` failed; the caller kept its error.
        Stopped,
    }

    /// The fields of an export besides its lists.
    #[derive(Default)]
    pub(super) struct Fields {
        pub format: Option<Value>,
        pub version: Option<Value>,
        pub dry_run: bool,
        pub new_before: u64,
        pub settings: Option<Value>,
        pub keys: Vec<Value>,
    }

    type Each<'a> = dyn FnMut(usize, usize, Value) -> Result<(), Halt> + 'a;

    /// Reads `body`, an export of `format` whose lists are `lists`: `each(list, index,
    /// element)` for every element, in the order of the body. The format and version are
    /// checked once the object is read (they may come after the lists); an element that
    /// breaks a rule stops the calls to `each` but not the reading, so that a body of another
    /// format is refused as such.
    pub(super) fn read(body: &[u8], format: &str, lists: &[&str], each: &mut Each<'_>) -> Result<Fields, Halt> {
        let mut halt = None;
        let mut de = serde_json::Deserializer::from_slice(body);
        let read = Top {
            lists,
            each,
            halt: &mut halt,
        }
        .deserialize(&mut de)
        .and_then(|fields| de.end().map(|()| fields));
        let fields = match (read, halt) {
            (_, Some(Halt::Stopped)) => return Err(Halt::Stopped),
            (Ok(fields), invalid) => (fields, invalid),
            (Err(e), _) => return Err(Halt::Invalid(bad(format!("invalid request body: {e}")))),
        };
        let (fields, invalid) = fields;
        if fields.format.as_ref().and_then(Value::as_str) != Some(format) {
            return Err(Halt::Invalid(bad(format!(
                "not an export of this service: \"format\" must be {format:?}"
            ))));
        }
        if fields.version.as_ref().and_then(Value::as_u64) != Some(VERSION) {
            return Err(Halt::Invalid(bad(format!(
                "unsupported export version: this server reads version {VERSION}"
            ))));
        }
        match invalid {
            Some(halt) => Err(halt),
            None => Ok(fields),
        }
    }

    /// The outcome of [`read`] for a caller whose `each` keeps its error in `stopped`.
    pub(super) fn finish<E>(read: Result<Fields, Halt>, stopped: &mut Option<E>) -> Result<Fields, ReadError<E>> {
        match read {
            Ok(fields) => Ok(fields),
            Err(Halt::Invalid(e)) => Err(ReadError::Invalid(e)),
            Err(Halt::Stopped) => match stopped.take() {
                Some(e) => Err(ReadError::Stopped(e)),
                None => Err(ReadError::Invalid(bad("the import stopped"))),
            },
        }
    }

    struct Top<'a, 'b> {
        lists: &'a [&'a str],
        each: &'a mut Each<'b>,
        /// The first element that broke a rule (or the caller's stop).
        halt: &'a mut Option<Halt>,
    }

    impl<'de> DeserializeSeed<'de> for Top<'_, '_> {
        type Value = Fields;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Fields, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for Top<'_, '_> {
        type Value = Fields;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an export (a JSON object)")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
            let mut fields = Fields::default();
            let mut seen: Vec<String> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                let known = ["format", "version", "dry-run", "new-before", "settings", "access-keys"]
                    .contains(&key.as_str())
                    || self.lists.contains(&key.as_str());
                if known {
                    if seen.contains(&key) {
                        return Err(de::Error::custom(format!("the field {key:?} is there twice")));
                    }
                    seen.push(key.clone());
                }
                let small = || Bounded {
                    left: MAX_ELEMENT_VALUES,
                };
                match key.as_str() {
                    "format" => fields.format = Some(map.next_value_seed(small())?),
                    "version" => fields.version = Some(map.next_value_seed(small())?),
                    "dry-run" => fields.dry_run = map.next_value_seed(small())?.as_bool().unwrap_or(false),
                    "new-before" => {
                        let n = map.next_value_seed(small())?;
                        fields.new_before = n
                            .as_u64()
                            .ok_or_else(|| de::Error::custom("\"new-before\" must be a count"))?;
                    }
                    "settings" => fields.settings = Some(map.next_value_seed(small())?),
                    "access-keys" => {
                        let keys = &mut fields.keys;
                        let mut collect = |_: usize, i: usize, k: Value| {
                            if i >= MAX_ACCESS_KEYS {
                                return Err(Halt::Invalid(bad(format!(
                                    "\"access-keys\": an export lists at most {MAX_ACCESS_KEYS} access keys"
                                ))));
                            }
                            keys.push(key_to_recreate(&k, &format!("access-keys[{i}]")).map_err(Halt::Invalid)?);
                            Ok(())
                        };
                        map.next_value_seed(List {
                            list: 0,
                            name: "access-keys",
                            each: &mut collect,
                            halt: &mut *self.halt,
                        })?
                    }
                    name => match self.lists.iter().position(|l| *l == name) {
                        Some(list) => map.next_value_seed(List {
                            list,
                            name: self.lists[list],
                            each: &mut *self.each,
                            halt: &mut *self.halt,
                        })?,
                        None => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    },
                }
                if matches!(self.halt, Some(Halt::Stopped)) {
                    return Err(de::Error::custom("stopped"));
                }
            }
            Ok(fields)
        }
    }

    /// One of the export's lists (`null` is an empty list), element by element.
    struct List<'a, 'b> {
        list: usize,
        name: &'a str,
        each: &'a mut Each<'b>,
        halt: &'a mut Option<Halt>,
    }

    impl<'de> DeserializeSeed<'de> for List<'_, '_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for List<'_, '_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "\"{}\" as a list", self.name)
        }

        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0usize;
            while let Some(element) = seq.next_element_seed(Bounded {
                left: MAX_ELEMENT_VALUES,
            })? {
                // after an element that broke a rule, the rest is only read through
                if self.halt.is_none() {
                    if let Err(halt) = (self.each)(self.list, i, element) {
                        let stop = matches!(halt, Halt::Stopped);
                        *self.halt = Some(halt);
                        if stop {
                            return Err(de::Error::custom("stopped"));
                        }
                    }
                }
                i += 1;
            }
            Ok(())
        }
    }

    /// A JSON value of at most `left` values.
    struct Bounded {
        left: usize,
    }

    impl<'de> DeserializeSeed<'de> for Bounded {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(mut self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(Counted { left: &mut self.left })
        }
    }

    struct Counted<'a> {
        left: &'a mut usize,
    }

    impl Counted<'_> {
        fn take<E: de::Error>(&mut self) -> Result<(), E> {
            match self.left.checked_sub(1) {
                Some(n) => {
                    *self.left = n;
                    Ok(())
                }
                None => Err(E::custom(format!(
                    "an element of an export may have at most {MAX_ELEMENT_VALUES} JSON values"
                ))),
            }
        }
    }

    impl<'de> DeserializeSeed<'de> for Counted<'_> {
        type Value = Value;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for Counted<'_> {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }

        fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<Value, E> {
            self.take()?;
            Ok(Value::Bool(v))
        }

        fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<Value, E> {
            self.take()?;
            Ok(Value::from(v))
        }

        fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<Value, E> {
            self.take()?;
            Ok(Value::from(v))
        }

        fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<Value, E> {
            self.take()?;
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }

        fn visit_str<E: de::Error>(mut self, v: &str) -> Result<Value, E> {
            self.take()?;
            Ok(Value::String(v.to_owned()))
        }

        fn visit_string<E: de::Error>(mut self, v: String) -> Result<Value, E> {
            self.take()?;
            Ok(Value::String(v))
        }

        fn visit_unit<E: de::Error>(mut self) -> Result<Value, E> {
            self.take()?;
            Ok(Value::Null)
        }

        fn visit_none<E: de::Error>(self) -> Result<Value, E> {
            self.visit_unit()
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Value, A::Error> {
            self.take()?;
            let mut out = Vec::new();
            while let Some(v) = seq.next_element_seed(Counted { left: &mut *self.left })? {
                out.push(v);
            }
            Ok(Value::Array(out))
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Value, A::Error> {
            self.take()?;
            let mut out = Map::new();
            while let Some(k) = map.next_key::<String>()? {
                let v = map.next_value_seed(Counted { left: &mut *self.left })?;
                out.insert(k, v);
            }
            Ok(Value::Object(out))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(n: u128) -> Value {
        json!({"id": Uuid::from_u128(n), "created": "2024-01-01T00:00:00Z", "contents": {"type": "text", "data": "aGk="}})
    }

    fn read(body: &Value) -> Result<(InboxHead, Vec<Uuid>), ReadError<()>> {
        let mut ids = Vec::new();
        let head = read_inbox_import(body.to_string().as_bytes(), |i| {
            ids.push(i.id);
            Ok(())
        })?;
        Ok((head, ids))
    }

    fn invalid(r: Result<(InboxHead, Vec<Uuid>), ReadError<()>>) -> String {
        match r {
            Err(ReadError::Invalid(e)) => e.message,
            other => panic!("expected an invalid import, got {other:?}"),
        }
    }

    #[test]
    fn items_are_handed_over_one_at_a_time_in_order_whatever_the_order_of_the_fields() {
        // the lists may come before the format (keys sorted: "access-keys", "format", "items" …)
        let body = r#"{"items": [ITEMS], "access-keys": [{"name": "phone", "permissions": ["PermitAdd"]}],
                       "unknown": {"deep": [1, 2, {"x": null}]}, "dry-run": true,
                       "format": "pigeonhole-inbox-export", "version": 1}"#
            .replace("ITEMS", &format!("{},{}", item(1), item(2)));
        let mut ids = Vec::new();
        let head = read_inbox_import(body.as_bytes(), |i| {
            ids.push(i.id);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(ids, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
        assert!(head.dry_run);
        assert_eq!(
            head.keys_to_recreate,
            vec![json!({"name": "phone", "permissions": ["PermitAdd"]})]
        );
    }

    #[test]
    fn a_bad_import_is_an_error_naming_what_is_wrong() {
        let good = json!({"format": INBOX_FORMAT, "version": 1, "items": [item(1)]});
        assert!(read(&good).is_ok());
        // the format is checked first, even when it comes after items that break rules
        let other = json!({"items": [{"id": 3}], "format": SCHEDULER_FORMAT, "version": 1});
        assert!(invalid(read(&other)).contains("not an export of this service"));
        let mut v = good.clone();
        v["version"] = json!(2);
        assert!(invalid(read(&v)).contains("unsupported export version"));
        let mut v = good.clone();
        v["items"] = json!([item(1), {"id": "nope"}]);
        assert!(invalid(read(&v)).starts_with("items[1]: "), "{}", invalid(read(&v)));
        let mut v = good.clone();
        v["items"] = json!("many");
        assert!(invalid(read(&v)).contains("\"items\" as a list"));
        let twice = format!(r#"{{"format": "{INBOX_FORMAT}", "version": 1, "items": [], "items": []}}"#);
        let r = read_inbox_import(twice.as_bytes(), |_| Ok::<(), ()>(()));
        assert!(matches!(r, Err(ReadError::Invalid(e)) if e.message.contains("there twice")));
        assert!(invalid(read(&json!([1]))).contains("invalid request body"));
        let trailing = format!(r#"{{"format": "{INBOX_FORMAT}", "version": 1}} {{}}"#);
        assert!(read_inbox_import(trailing.as_bytes(), |_| Ok::<(), ()>(())).is_err());
    }

    #[test]
    fn elements_and_key_lists_are_bounded() {
        let mut v = json!({"format": INBOX_FORMAT, "version": 1});
        v["items"] = json!([{"id": Uuid::from_u128(1), "junk": vec![0; MAX_ELEMENT_VALUES]}]);
        assert!(invalid(read(&v)).contains("at most 65536 JSON values"));
        let key = json!({"name": "k", "permissions": []});
        v["items"] = json!([]);
        v["access-keys"] = Value::Array(vec![key; MAX_ACCESS_KEYS + 1]);
        assert!(invalid(read(&v)).contains("at most 1000 access keys"));
    }

    #[test]
    fn an_error_of_the_caller_stops_the_reading_and_is_handed_back() {
        let v = json!({"format": INBOX_FORMAT, "version": 1, "items": [item(1), item(2), item(3)]});
        let mut seen = 0;
        let r = read_inbox_import(v.to_string().as_bytes(), |_| {
            seen += 1;
            if seen == 2 {
                Err("full")
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(ReadError::Stopped("full"))));
        assert_eq!(seen, 2);
    }

    /// Push and webhook triggers in an export: the webhook whole (its token with it), the
    /// push subscription left out (one device's, this server's key); their attempts' outcomes
    /// go out and come back as they were.
    #[test]
    fn push_and_webhook_triggers_and_outcomes_in_an_export() {
        use crate::domain::scheduler::push::{PushSubscription, WebhookFormat};
        let owner = Uuid::from_u128(1);
        let at = Timestamp::from_unix(1_700_000_000, 0);
        let hook = Trigger {
            id: Uuid::from_u128(2),
            owner,
            created: at,
            kind: TriggerKind::Webhook {
                url: "https://gotify.example/message?token=s3cret".into(),
                format: WebhookFormat::Json,
            },
        };
        let push = Trigger {
            id: Uuid::from_u128(3),
            owner,
            created: at,
            kind: TriggerKind::Push {
                subscription: PushSubscription {
                    endpoint: "https://push.example/secret-endpoint".into(),
                    p256dh: [4; 65],
                    auth: [5; 16],
                },
                expired: false,
            },
        };
        let attempt = |trigger: Uuid, outcome| Attempt {
            trigger,
            trigger_created: at,
            delivery: Uuid::from_u128(9),
            outcome,
        };
        let triggered = TriggeredItem {
            id: Uuid::from_u128(4),
            owner,
            tickle: crate::domain::scheduler::models::Tickle::parse(
                &json!({"content": "x", "scheduled-day": "2024-01-01"}),
            )
            .unwrap(),
            created: at,
            triggered: at,
            attempts: vec![
                attempt(push.id, Outcome::PushFailed("gone".into())),
                attempt(hook.id, Outcome::WebhookSent),
            ],
        };
        let export = scheduler_export(
            "alice",
            &TimeZoneSetting::default(),
            &[],
            std::slice::from_ref(&triggered),
            &[hook.clone(), push],
            Vec::new(),
        );
        let text = export.to_string();
        assert!(!text.contains("secret-endpoint"), "no push subscription: {text}");
        assert!(text.contains("token=s3cret"));
        let mut got = Vec::new();
        read_scheduler_import(text.as_bytes(), owner, |e| {
            got.push(e);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(
            matches!(&got[..], [SchedulerEntry::Triggered(t), SchedulerEntry::Trigger(h)]
            if t.attempts == triggered.attempts && *h == hook)
        );
    }

    #[test]
    fn a_scheduler_import_hands_over_each_kind_and_reads_its_settings() {
        let owner = Uuid::from_u128(99);
        let v = json!({
            "format": SCHEDULER_FORMAT, "version": 1,
            "triggers": [{"uuid": Uuid::from_u128(5), "created": "2024-01-01T00:00:00Z", "type": "email", "address": "a@example.org"}],
            "settings": null,
        });
        let mut got = Vec::new();
        let head = read_scheduler_import(v.to_string().as_bytes(), owner, |e| {
            got.push(e);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(head.settings.is_none());
        assert!(matches!(&got[..], [SchedulerEntry::Trigger(t)] if t.owner == owner
            && matches!(t.kind, TriggerKind::Email { verified: false, .. })));
        let mut bad = v.clone();
        bad["scheduled"] = json!([{"id": Uuid::from_u128(6)}]);
        let r = read_scheduler_import(bad.to_string().as_bytes(), owner, |_| Ok::<(), ()>(()));
        assert!(matches!(r, Err(ReadError::Invalid(e)) if e.message.starts_with("scheduled[0]: ")));
    }
}
