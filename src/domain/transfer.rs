//! Export and import of one account (docs/backup.md): the JSON of each service's part and
//! its parser. Everything is parsed and checked before anything is stored, so a bad file
//! changes nothing; ids and `created` times are kept, so importing into another server
//! recreates the same items, and importing twice finds them there.

use crate::domain::inbox::models::{ContentsIn, InboxItem};
use crate::domain::scheduler::models::{
    normalise_inbox_url, Attempt, Outcome, ScheduledItem, Tickle, TimeZoneSetting, Trigger, TriggerKind, TriggeredItem,
};
use crate::domain::wire::{self, Timestamp};
use crate::domain::DomainError;
use serde_json::{json, Map, Value};
use uuid::Uuid;

/// Names the JSON of a service's part (`format`) and of the CLI's file of both.
pub const INBOX_FORMAT: &str = "pigeonhole-inbox-export";
pub const SCHEDULER_FORMAT: &str = "pigeonhole-scheduler-export";
pub const FILE_FORMAT: &str = "pigeonhole-export";
pub const VERSION: u64 = 1;

fn bad(message: impl Into<String>) -> DomainError {
    DomainError::invalid(message)
}

fn check_format<'a>(v: &'a Value, format: &str) -> Result<&'a Map<String, Value>, DomainError> {
    let o = v.as_object().ok_or_else(|| bad("an export is a JSON object"))?;
    if o.get("format").and_then(Value::as_str) != Some(format) {
        return Err(bad(format!(
            "not an export of this service: \"format\" must be {format:?}"
        )));
    }
    match o.get("version").and_then(Value::as_u64) {
        Some(VERSION) => Ok(o),
        _ => Err(bad(format!(
            "unsupported export version: this server reads version {VERSION}"
        ))),
    }
}

fn list<'a>(o: &'a Map<String, Value>, field: &str) -> Result<&'a [Value], DomainError> {
    match o.get(field) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(bad(format!("\"{field}\" must be a list"))),
    }
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

/// Access keys of an export: what the owner has to recreate (name and permissions).
fn keys_to_recreate(o: &Map<String, Value>) -> Result<Vec<Value>, DomainError> {
    list(o, "access-keys")?
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let at = format!("access-keys[{i}]");
            let name = str_at(k, "name", &at)?;
            let permissions = k
                .get("permissions")
                .filter(|p| p.as_array().is_some_and(|a| a.iter().all(Value::is_string)))
                .ok_or_else(|| bad(format!("{at}: \"permissions\" must be a list of names")))?;
            Ok(json!({"name": name, "permissions": permissions}))
        })
        .collect()
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

/// An inbox import, checked.
pub struct InboxImport {
    pub items: Vec<InboxItem>,
    pub keys_to_recreate: Vec<Value>,
    /// Check only: store nothing (the CLI checks every part before it imports any).
    pub dry_run: bool,
}

pub fn parse_inbox_import(v: &Value) -> Result<InboxImport, DomainError> {
    let o = check_format(v, INBOX_FORMAT)?;
    let items = list(o, "items")?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("items[{i}]");
            let contents: ContentsIn = item
                .get("contents")
                .cloned()
                .and_then(|c| serde_json::from_value(c).ok())
                .ok_or_else(|| bad(format!("{at}: \"contents\" must be {{\"type\", \"data\"}}")))?;
            let (kind, data) = contents.validate().map_err(|e| bad(format!("{at}: {e}")))?;
            Ok(InboxItem {
                id: uuid_at(item, "id", &at)?,
                kind,
                data,
                created: time_at(item, "created", &at)?,
            })
        })
        .collect::<Result<Vec<_>, DomainError>>()?;
    Ok(InboxImport {
        items,
        keys_to_recreate: keys_to_recreate(o)?,
        dry_run: o.get("dry-run").and_then(Value::as_bool).unwrap_or(false),
    })
}

fn attempt_json(a: &Attempt) -> Value {
    let result = match &a.outcome {
        Outcome::InboxAdded(id) => json!({"tag": "InboxAdditionSuccess", "contents": id}),
        Outcome::InboxFailed(why) => json!({"tag": "InboxAdditionFailure", "contents": why}),
        Outcome::EmailSent => json!({"tag": "EmailResultSent"}),
        Outcome::EmailFailed(why) => json!({"tag": "EmailResultError", "contents": why}),
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
        _ => return Err(bad(format!("{at}: unknown result"))),
    };
    Ok(Attempt {
        trigger: uuid_at(v, "trigger", at)?,
        trigger_created: time_at(v, "trigger-created", at)?,
        delivery: uuid_at(v, "delivery", at)?,
        outcome,
    })
}

/// A trigger as exported. An inbox trigger carries the access key it delivers with (a
/// credential of the target inbox: without it the imported trigger could not deliver);
/// an e-mail trigger carries its address and whether it was verified.
fn trigger_json(t: &Trigger) -> Value {
    match &t.kind {
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
    }
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
        "triggers": triggers.iter().map(trigger_json).collect::<Vec<_>>(),
        "access-keys": keys,
    })
}

/// A scheduler import, checked, for the account `owner`.
pub struct SchedulerImport {
    pub settings: Option<TimeZoneSetting>,
    pub scheduled: Vec<ScheduledItem>,
    pub triggered: Vec<TriggeredItem>,
    /// E-mail triggers arrive unverified (see [`parse_scheduler_import`]).
    pub triggers: Vec<Trigger>,
    pub keys_to_recreate: Vec<Value>,
    pub dry_run: bool,
}

/// Parses the scheduler part of an export for the account `owner`. An e-mail trigger is
/// imported unverified, with a fresh verification key: whoever imports a file could have
/// written any address into it, and only a verification proves the address's owner wants
/// the e-mails (the owner asks for a verification e-mail with the resend endpoint).
pub fn parse_scheduler_import(v: &Value, owner: Uuid) -> Result<SchedulerImport, DomainError> {
    let o = check_format(v, SCHEDULER_FORMAT)?;
    let settings = match o.get("settings") {
        None | Some(Value::Null) => None,
        Some(s) => Some(TimeZoneSetting::parse(s).map_err(|e| bad(format!("settings: {e}")))?),
    };
    let tickle = |item: &Value, at: &str| {
        Tickle::parse(item.get("contents").unwrap_or(&Value::Null)).map_err(|e| bad(format!("{at}: {e}")))
    };
    let scheduled = list(o, "scheduled")?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("scheduled[{i}]");
            Ok(ScheduledItem {
                id: uuid_at(item, "id", &at)?,
                owner,
                tickle: tickle(item, &at)?,
                created: time_at(item, "created", &at)?,
                server_time: 0,
            })
        })
        .collect::<Result<Vec<_>, DomainError>>()?;
    let triggered = list(o, "triggered")?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("triggered[{i}]");
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
                id: uuid_at(item, "id", &at)?,
                owner,
                tickle: tickle(item, &at)?,
                created: time_at(item, "created", &at)?,
                triggered: time_at(item, "triggered", &at)?,
                attempts,
            })
        })
        .collect::<Result<Vec<_>, DomainError>>()?;
    let triggers = list(o, "triggers")?
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let at = format!("triggers[{i}]");
            let kind = match t.get("type").and_then(Value::as_str) {
                Some("email") => {
                    let address = str_at(t, "address", &at)?;
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
                    let url = normalise_inbox_url(str_at(t, "url", &at)?)
                        .ok_or_else(|| bad(format!("{at}: invalid inbox URL")))?;
                    let access_key = str_at(t, "access-key", &at)?;
                    if !crate::domain::secrets::looks_like_secret(access_key) {
                        return Err(bad(format!("{at}: \"access-key\" must be an access key's secret")));
                    }
                    let username = str_at(t, "username", &at)?;
                    if !wire::is_valid_username(username) {
                        return Err(bad(format!("{at}: invalid username")));
                    }
                    TriggerKind::Inbox {
                        url,
                        username: username.to_owned(),
                        access_key: access_key.to_ascii_lowercase(),
                    }
                }
                _ => return Err(bad(format!("{at}: \"type\" must be \"email\" or \"inbox\""))),
            };
            Ok(Trigger {
                id: uuid_at(t, "uuid", &at)?,
                owner,
                created: time_at(t, "created", &at)?,
                kind,
            })
        })
        .collect::<Result<Vec<_>, DomainError>>()?;
    Ok(SchedulerImport {
        settings,
        scheduled,
        triggered,
        triggers,
        keys_to_recreate: keys_to_recreate(o)?,
        dry_run: o.get("dry-run").and_then(Value::as_bool).unwrap_or(false),
    })
}
