//! Scheduled items ("tickles"), recurrences, triggered items, triggers and settings, with
//! their JSON forms (scheduler.md §2).

use crate::domain::scheduler::push::{
    endpoint_host, shown_webhook_url, PushSubscription, WebhookFormat, PUSH_TRIGGERS_MAX,
};
use crate::domain::wire::{self, Date, Timestamp};
use crate::domain::DomainError;
use serde_json::{json, Map, Value};
use uuid::Uuid;

/// A time of day; `second` may be 60 (a leap second, kept as such).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeOfDay {
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl TimeOfDay {
    /// `HH:MM`, `HH:MM:SS` or `HH:MM:SS.f…` (scheduler.md §2.1).
    pub fn parse(s: &str) -> Option<TimeOfDay> {
        let (hour, minute, second, nanos, rest) = wire::parse_time_prefix(s.as_bytes(), false)?;
        if !rest.is_empty() {
            return None;
        }
        Some(TimeOfDay {
            hour,
            minute,
            second,
            nanos,
        })
    }

    /// Seconds since midnight as used for due instants: a leap second counts as second 59.
    pub fn seconds(&self) -> i64 {
        self.hour as i64 * 3600 + self.minute as i64 * 60 + self.second.min(59) as i64
    }
}

impl std::fmt::Display for TimeOfDay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:{:02}:{:02}", self.hour, self.minute, self.second)?;
        wire::write_fraction(f, self.nanos)
    }
}

/// A calendar day.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Day {
    pub year: i64,
    pub month: u32,
    pub day: u32,
}

impl Day {
    /// Exactly `YYYY-MM-DD`, a real calendar date in years 0000–9999.
    pub fn parse(s: &str) -> Option<Day> {
        let ((year, month, day), rest) = wire::parse_date_prefix(s.as_bytes())?;
        if !rest.is_empty() {
            return None;
        }
        Some(Day { year, month, day })
    }

    pub fn from_date((year, month, day): Date) -> Day {
        Day { year, month, day }
    }

    /// Days since 1970-01-01. A `Day` is a real date (made by `parse`, `from_number` or
    /// month arithmetic that clamps the day), so the fallback is never taken.
    pub fn number(&self) -> i64 {
        wire::days_from_civil(self.year, self.month, self.day).unwrap_or_default()
    }

    /// The date `n` days after 1970-01-01 (`None` beyond the years -9999–9999).
    pub fn from_number(n: i64) -> Option<Day> {
        wire::civil_from_days(n).map(Day::from_date)
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recurrence {
    EveryDays {
        days: u32,
        time: Option<TimeOfDay>,
    },
    EveryMonths {
        months: u32,
        day: Option<u32>,
        time: Option<TimeOfDay>,
    },
}

/// Item contents (scheduler.md §2.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tickle {
    pub content: Vec<u8>,
    pub day: Day,
    pub time: Option<TimeOfDay>,
    pub recurrence: Option<Recurrence>,
}

fn bad(msg: impl Into<String>) -> DomainError {
    DomainError::invalid(msg)
}

fn optional<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn parse_tod(v: Option<&Value>, what: &str) -> Result<Option<TimeOfDay>, DomainError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => TimeOfDay::parse(s)
            .map(Some)
            .ok_or_else(|| bad(format!("invalid {what} {s:?}"))),
        Some(other) => Err(bad(format!("invalid {what}: {other}"))),
    }
}

fn parse_count(v: Option<&Value>, what: &str, min: u64, max: u64) -> Result<u64, DomainError> {
    match v.and_then(Value::as_u64) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(format!("{what} must be an integer from {min} to {max}"))),
    }
}

impl Recurrence {
    pub fn parse(v: &Value) -> Result<Recurrence, DomainError> {
        let obj = v.as_object().ok_or_else(|| bad("recurrence must be an object"))?;
        match (obj.get("every-x-days"), obj.get("every-x-months")) {
            (Some(d), None) => {
                let d = d.as_object().ok_or_else(|| bad("every-x-days must be an object"))?;
                Ok(Recurrence::EveryDays {
                    days: parse_count(d.get("days"), "days", 1, u32::MAX as u64)? as u32,
                    time: parse_tod(optional(d, "time-of-day"), "time-of-day")?,
                })
            }
            (None, Some(m)) => {
                let m = m.as_object().ok_or_else(|| bad("every-x-months must be an object"))?;
                let day = match optional(m, "day") {
                    None => None,
                    Some(v) => Some(parse_count(Some(v), "day", 1, 31)? as u32),
                };
                Ok(Recurrence::EveryMonths {
                    months: parse_count(m.get("months"), "months", 1, u32::MAX as u64)? as u32,
                    day,
                    time: parse_tod(optional(m, "time-of-day"), "time-of-day")?,
                })
            }
            _ => Err(bad("recurrence needs exactly one of every-x-days and every-x-months")),
        }
    }

    pub fn to_json(&self) -> Value {
        let tod = |t: &Option<TimeOfDay>| t.map(|t| t.to_string());
        match self {
            Recurrence::EveryDays { days, time } => json!({"every-x-days": {"days": days, "time-of-day": tod(time)}}),
            Recurrence::EveryMonths { months, day, time } => {
                json!({"every-x-months": {"months": months, "day": day, "time-of-day": tod(time)}})
            }
        }
    }
}

impl Tickle {
    /// Parses item contents; any violation is a 400.
    pub fn parse(v: &Value) -> Result<Tickle, DomainError> {
        let obj = v.as_object().ok_or_else(|| bad("item contents must be an object"))?;
        let content = match obj.get("content") {
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            Some(Value::Object(o)) => {
                if o.get("type") != Some(&Value::String("text".into())) {
                    return Err(bad("content type must be \"text\""));
                }
                match o.get("data") {
                    Some(Value::String(d)) => {
                        wire::decode_base64(d).ok_or_else(|| bad("content data is not padded standard base64"))?
                    }
                    _ => return Err(bad("content data must be a base64 string")),
                }
            }
            _ => return Err(bad("content must be a string or {\"type\":\"text\",\"data\":…}")),
        };
        let day = match obj.get("scheduled-day") {
            Some(Value::String(s)) => Day::parse(s).ok_or_else(|| bad(format!("invalid scheduled-day {s:?}")))?,
            _ => return Err(bad("scheduled-day must be a date YYYY-MM-DD")),
        };
        let time = parse_tod(optional(obj, "scheduled-time"), "scheduled-time")?;
        let recurrence = match optional(obj, "recurrence") {
            None => None,
            Some(r) => Some(Recurrence::parse(r)?),
        };
        Ok(Tickle {
            content,
            day,
            time,
            recurrence,
        })
    }

    /// The content as JSON: a string when it is UTF-8, else the base64 object.
    pub fn content_json(&self) -> Value {
        match std::str::from_utf8(&self.content) {
            Ok(s) => Value::String(s.to_owned()),
            Err(_) => json!({"type": "text", "data": wire::encode_base64(&self.content)}),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "content": self.content_json(),
            "scheduled-day": self.day.to_string(),
            "scheduled-time": self.time.map(|t| t.to_string()),
            "recurrence": self.recurrence.map(|r| r.to_json()),
        })
    }
}

/// A scheduled (untriggered) item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduledItem {
    pub id: Uuid,
    pub owner: Uuid,
    pub tickle: Tickle,
    pub created: Timestamp,
    /// Sync version (scheduler.md §10).
    pub server_time: u64,
}

impl ScheduledItem {
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "contents": self.tickle.to_json(), "created": self.created.to_string(), "triggered": null})
    }

    /// `{"contents", "created"}` as sync shows it.
    pub fn value_json(&self) -> Value {
        json!({"contents": self.tickle.to_json(), "created": self.created.to_string()})
    }
}

/// The result of one finished delivery (scheduler.md §2.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    InboxAdded(Uuid),
    InboxFailed(String),
    EmailSent,
    EmailFailed(String),
    PushSent,
    PushFailed(String),
    WebhookSent,
    WebhookFailed(String),
}

/// The kinds of delivery target, in the order a triggered item lists their attempts
/// (§2.5: inbox attempts first, then e-mail, push and webhook ones).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Channel {
    Inbox,
    Email,
    Push,
    Webhook,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    pub trigger: Uuid,
    /// Creation time of the trigger (attempts are listed in trigger order).
    pub trigger_created: Timestamp,
    /// The delivery's id: its `Idempotency-Key`, kept for retries.
    pub delivery: Uuid,
    pub outcome: Outcome,
}

impl Outcome {
    /// The kind of target this outcome is of.
    pub fn channel(&self) -> Channel {
        match self {
            Outcome::InboxAdded(_) | Outcome::InboxFailed(_) => Channel::Inbox,
            Outcome::EmailSent | Outcome::EmailFailed(_) => Channel::Email,
            Outcome::PushSent | Outcome::PushFailed(_) => Channel::Push,
            Outcome::WebhookSent | Outcome::WebhookFailed(_) => Channel::Webhook,
        }
    }

    pub fn is_email(&self) -> bool {
        self.channel() == Channel::Email
    }

    /// The reason of a failure; `None` for a success.
    pub fn failure(&self) -> Option<&str> {
        match self {
            Outcome::InboxFailed(why)
            | Outcome::EmailFailed(why)
            | Outcome::PushFailed(why)
            | Outcome::WebhookFailed(why) => Some(why),
            Outcome::InboxAdded(_) | Outcome::EmailSent | Outcome::PushSent | Outcome::WebhookSent => None,
        }
    }

    pub fn is_failure(&self) -> bool {
        self.failure().is_some()
    }

    /// The failure of `channel` for `reason`.
    pub fn failed(channel: Channel, reason: String) -> Outcome {
        match channel {
            Channel::Inbox => Outcome::InboxFailed(reason),
            Channel::Email => Outcome::EmailFailed(reason),
            Channel::Push => Outcome::PushFailed(reason),
            Channel::Webhook => Outcome::WebhookFailed(reason),
        }
    }
}

impl Attempt {
    /// The order of a triggered item's attempts (§2.5): by kind, then by their triggers'
    /// creation.
    pub fn order(&self) -> (Channel, Timestamp, Uuid) {
        (self.outcome.channel(), self.trigger_created, self.trigger)
    }
}

/// A pending delivery of a triggered item to one trigger (scheduler.md §7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Also the `Idempotency-Key` of every attempt.
    pub id: Uuid,
    pub owner: Uuid,
    pub item: Uuid,
    pub trigger: Uuid,
    pub trigger_created: Timestamp,
    pub email: bool,
    /// Transient failures so far.
    pub failures: u32,
    /// Not to be attempted before this instant (back-off).
    pub not_before: Timestamp,
}

impl Attempt {
    pub fn to_json(&self) -> Value {
        let (tag, result) = match &self.outcome {
            Outcome::InboxAdded(id) => (
                "InboxTriggerAttempt",
                json!({"tag": "InboxAdditionSuccess", "contents": id}),
            ),
            Outcome::InboxFailed(why) => (
                "InboxTriggerAttempt",
                json!({"tag": "InboxAdditionFailure", "contents": why}),
            ),
            Outcome::EmailSent => ("EmailTriggerAttempt", json!({"tag": "EmailResultSent"})),
            Outcome::EmailFailed(why) => (
                "EmailTriggerAttempt",
                json!({"tag": "EmailResultError", "contents": why}),
            ),
            Outcome::PushSent => ("PushTriggerAttempt", json!({"tag": "PushResultSent"})),
            Outcome::PushFailed(why) => ("PushTriggerAttempt", json!({"tag": "PushResultError", "contents": why})),
            Outcome::WebhookSent => ("WebhookTriggerAttempt", json!({"tag": "WebhookResultSent"})),
            Outcome::WebhookFailed(why) => (
                "WebhookTriggerAttempt",
                json!({"tag": "WebhookResultError", "contents": why}),
            ),
        };
        json!({"tag": tag, "contents": [self.trigger, result]})
    }
}

/// A triggered copy of an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TriggeredItem {
    pub id: Uuid,
    pub owner: Uuid,
    pub tickle: Tickle,
    /// `created` of the original item.
    pub created: Timestamp,
    pub triggered: Timestamp,
    /// Finished deliveries (inbox attempts first, then e-mail, push and webhook, each in
    /// trigger order: [`Attempt::order`]).
    pub attempts: Vec<Attempt>,
}

impl TriggeredItem {
    /// The copy of `item` triggered at `now` (a new id, no attempts yet).
    pub fn copy_of(item: &ScheduledItem, now: Timestamp) -> TriggeredItem {
        TriggeredItem {
            id: crate::domain::wire::new_uuid(),
            owner: item.owner,
            tickle: item.tickle.clone(),
            created: item.created,
            triggered: now,
            attempts: Vec::new(),
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "contents": self.tickle.to_json(),
            "created": self.created.to_string(),
            "triggered": {
                "triggeredInfoTriggered": self.triggered.to_string(),
                "triggeredInfoTriggerTriggerAttempts": self.attempts.iter().map(Attempt::to_json).collect::<Vec<_>>(),
            },
        })
    }
}

/// The account's time zone setting (scheduler.md §2.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeZoneSetting {
    /// Minutes east of UTC.
    pub offset: i32,
    pub name: String,
    pub summer: bool,
}

impl Default for TimeZoneSetting {
    fn default() -> Self {
        TimeZoneSetting {
            offset: 0,
            name: "UTC".into(),
            summer: false,
        }
    }
}

impl TimeZoneSetting {
    pub fn parse(v: &Value) -> Result<TimeZoneSetting, DomainError> {
        let tz = v
            .as_object()
            .and_then(|o| o.get("timezone"))
            .and_then(Value::as_object)
            .ok_or_else(|| bad("settings need a timezone object"))?;
        let offset = match tz.get("offset") {
            Some(Value::Number(n)) => n.as_i64().filter(|o| (-1439..=1439).contains(o)),
            _ => None,
        }
        .ok_or_else(|| bad("timezone offset must be an integer from -1439 to 1439 (minutes)"))?;
        let name = match tz.get("name") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(bad("timezone name must be a string")),
        };
        let summer = match tz.get("summer") {
            Some(Value::Bool(b)) => *b,
            _ => return Err(bad("timezone summer must be a boolean")),
        };
        Ok(TimeZoneSetting {
            offset: offset as i32,
            name,
            summer,
        })
    }

    pub fn to_json(&self) -> Value {
        json!({"timezone": {"offset": self.offset, "name": self.name, "summer": self.summer}})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_day() {
        assert_eq!(TimeOfDay::parse("09:00").unwrap().to_string(), "09:00:00");
        assert_eq!(TimeOfDay::parse("07:05:03.250").unwrap().to_string(), "07:05:03.25");
        assert_eq!(TimeOfDay::parse("23:59:60").unwrap().to_string(), "23:59:60");
        for bad in ["9:00", "24:00", "12:60", "12:00:61", "12:00:00.", "12", "12:00:00Z", ""] {
            assert!(TimeOfDay::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn days() {
        assert_eq!(Day::parse("2024-02-29").unwrap().to_string(), "2024-02-29");
        for bad in ["2023-02-29", "2024-13-01", "2024-1-01", "24-01-01", "2024-01-01T"] {
            assert!(Day::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn contents_parse_and_print() {
        let v = json!({"content": "Pay", "scheduled-day": "2024-07-01", "scheduled-time": "08:30",
                       "recurrence": {"every-x-months": {"months": 1, "day": 1}}});
        let t = Tickle::parse(&v).unwrap();
        assert_eq!(
            t.to_json(),
            json!({"content": "Pay", "scheduled-day": "2024-07-01", "scheduled-time": "08:30:00",
                   "recurrence": {"every-x-months": {"months": 1, "day": 1, "time-of-day": null}}})
        );
        let bin = json!({"content": {"type": "text", "data": "/w=="}, "scheduled-day": "2024-07-01"});
        assert_eq!(
            Tickle::parse(&bin).unwrap().content_json(),
            json!({"type": "text", "data": "/w=="})
        );
    }

    #[test]
    fn bad_recurrences() {
        for r in [
            json!({"every-x-days": {"days": 0}}),
            json!({"every-x-months": {"months": 0}}),
            json!({"every-x-months": {"months": 1, "day": 32}}),
            json!({"every-x-months": {"months": 1, "day": 0}}),
            json!({"every-x-days": {"days": 1}, "every-x-months": {"months": 1}}),
            json!({}),
            json!({"every-x-days": {"days": 4294967296u64}}),
        ] {
            assert!(Recurrence::parse(&r).is_err(), "{r}");
        }
        assert!(Recurrence::parse(&json!({"every-x-days": {"days": 4294967295u64}})).is_ok());
    }
}

/// A delivery target of an account (scheduler.md §2.6, §6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trigger {
    pub id: Uuid,
    pub owner: Uuid,
    pub created: Timestamp,
    pub kind: TriggerKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerKind {
    Email {
        address: String,
        verified: bool,
        /// SHA-256 of the current verification key.
        key_digest: [u8; 32],
    },
    Inbox {
        /// Normalised base URL.
        url: String,
        username: String,
        /// Lower-case hex access key.
        access_key: String,
    },
    /// A Web Push subscription (§6.4): its endpoint and keys are the subscriber's
    /// capabilities, never shown again.
    Push {
        subscription: PushSubscription,
        /// The push service said the subscription is gone (404/410): no further deliveries
        /// until the device subscribes again.
        expired: bool,
    },
    /// A webhook (§6.5): the normalised URL (its query may hold a token, never shown).
    Webhook { url: String, format: WebhookFormat },
}

impl TriggerKind {
    /// The kind of target this trigger is.
    pub fn channel(&self) -> Channel {
        match self {
            TriggerKind::Email { .. } => Channel::Email,
            TriggerKind::Inbox { .. } => Channel::Inbox,
            TriggerKind::Push { .. } => Channel::Push,
            TriggerKind::Webhook { .. } => Channel::Webhook,
        }
    }

    /// Whether an item triggered now is delivered to this trigger (§7.1): every inbox and
    /// webhook trigger, verified e-mail triggers, push triggers not expired.
    pub fn receives(&self) -> bool {
        match self {
            TriggerKind::Email { verified, .. } => *verified,
            TriggerKind::Push { expired, .. } => !expired,
            TriggerKind::Inbox { .. } | TriggerKind::Webhook { .. } => true,
        }
    }
}

impl Trigger {
    pub fn to_json(&self) -> Value {
        let info = match &self.kind {
            TriggerKind::Email { address, verified, .. } => json!({
                "typedTriggerInfoType": "email",
                "typedTriggerInfoValue": {"emailTriggerInfoEmailAddress": address, "emailTriggerInfoVerified": verified},
            }),
            TriggerKind::Inbox { url, .. } => json!({
                "typedTriggerInfoType": "inbox",
                "typedTriggerInfoValue": {"inboxTriggerInfoUrl": url},
            }),
            TriggerKind::Push { subscription, expired } => json!({
                "typedTriggerInfoType": "push",
                "typedTriggerInfoValue": {
                    "pushTriggerInfoHost": endpoint_host(&subscription.endpoint),
                    "pushTriggerInfoExpired": expired,
                },
            }),
            TriggerKind::Webhook { url, format } => json!({
                "typedTriggerInfoType": "webhook",
                "typedTriggerInfoValue": {
                    "webhookTriggerInfoUrl": shown_webhook_url(url),
                    "webhookTriggerInfoFormat": format.name(),
                },
            }),
        };
        json!({"uuid": self.id, "info": info})
    }
}

impl Channel {
    /// The kind's name in texts (`inbox`, `e-mail`, `push service`, `webhook`).
    pub fn name(self) -> &'static str {
        match self {
            Channel::Inbox => "inbox",
            Channel::Email => "e-mail",
            Channel::Push => "push service",
            Channel::Webhook => "webhook",
        }
    }

    /// Whether deliveries of this kind travel through the e-mail queue; every other kind is
    /// a pending delivery that the HTTP sender performs.
    pub fn by_email(self) -> bool {
        self == Channel::Email
    }
}

/// The delivery targets of an item that triggers now (§7.1), as they travel: (over HTTP,
/// by e-mail), each in the order of `triggers`.
pub fn targets_now(triggers: &[Trigger]) -> (Vec<Uuid>, Vec<Uuid>) {
    let receiving = triggers.iter().filter(|t| t.kind.receives());
    let (email, http): (Vec<&Trigger>, Vec<&Trigger>) = receiving.partition(|t| t.kind.channel().by_email());
    let ids = |list: Vec<&Trigger>| list.into_iter().map(|t| t.id).collect();
    (ids(http), ids(email))
}

/// What subscribing to push does to an account's `triggers` (§6.4): the push trigger of
/// the same endpoint is renewed (the new keys, no longer expired; its id and creation time
/// kept), else `new` is the trigger to add, unless the account has [`PUSH_TRIGGERS_MAX`] push
/// triggers already (`None`).
pub fn subscribe(triggers: &[Trigger], new: Trigger) -> Option<Trigger> {
    let TriggerKind::Push { subscription, .. } = &new.kind else {
        return Some(new);
    };
    let same = triggers
        .iter()
        .find(|t| matches!(&t.kind, TriggerKind::Push { subscription: s, .. } if s.endpoint == subscription.endpoint));
    if let Some(old) = same {
        return Some(Trigger {
            id: old.id,
            owner: old.owner,
            created: old.created,
            kind: new.kind,
        });
    }
    let pushes = triggers.iter().filter(|t| t.kind.channel() == Channel::Push).count();
    (pushes < PUSH_TRIGGERS_MAX).then_some(new)
}

/// An e-mail address as scheduler.md §6.1 accepts it.
pub fn is_valid_email(address: &str) -> bool {
    let Some((local, domain)) = address.split_once('@') else {
        return false;
    };
    if domain.contains('@') || local.is_empty() || local.len() > 64 || domain.is_empty() || domain.len() > 253 {
        return false;
    }
    let local_ok = local
        .bytes()
        .all(|c| (0x21..=0x7e).contains(&c) && !b"\"(),:;<>@[\\]".contains(&c))
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..");
    let domain_ok = domain.split('.').all(|label| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
    });
    local_ok && domain_ok
}

/// Normalises an inbox service base URL (scheduler.md §6.3); `None` when it is invalid,
/// also when it holds a control character (issue 29 point 1: no engine keeps one in a URL).
pub fn normalise_inbox_url(input: &str) -> Option<String> {
    if input.chars().any(char::is_control) {
        return None;
    }
    let (scheme, rest) = match input.split_once("://") {
        Some((s, r)) => (s.to_ascii_lowercase(), r),
        None => ("http".to_string(), input),
    };
    let default_port = match scheme.as_str() {
        "http" => "80",
        "https" => "443",
        _ => return None,
    };
    if rest.contains(['?', '#']) {
        return None;
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.is_empty() || authority.contains('@') || authority.contains(char::is_whitespace) {
        return None;
    }
    let (host, port) = if let Some(stripped) = authority.strip_prefix('[') {
        let end = stripped.find(']')?;
        let host = &authority[..end + 2];
        let after = &stripped[end + 1..];
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return None,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty()
        || !host
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"-._[]:".contains(&c))
    {
        return None;
    }
    let port = match port {
        Some(p) if p.is_empty() || !p.bytes().all(|c| c.is_ascii_digit()) || p.parse::<u16>().is_err() => return None,
        Some(p) if p == default_port => None,
        other => other,
    };
    let path = path.trim_end_matches('/');
    let mut out = format!("{scheme}://{}", host.to_ascii_lowercase());
    if let Some(p) = port {
        out.push(':');
        out.push_str(p);
    }
    out.push_str(path);
    Some(out)
}

#[cfg(test)]
mod trigger_tests {
    use super::*;

    #[test]
    fn emails() {
        for ok in ["me@example.org", "a.b+c@x-y.example", "x@localhost"] {
            assert!(is_valid_email(ok), "{ok}");
        }
        for bad in [
            "",
            "no-at",
            "a@b@c",
            "@x.org",
            "a@",
            ".a@x.org",
            "a.@x.org",
            "a..b@x.org",
            "a b@x.org",
            "a@-x.org",
            "a@x-.org",
            "a@x..org",
            "a(b)@x.org",
        ] {
            assert!(!is_valid_email(bad), "{bad}");
        }
    }

    fn push(id: u128, endpoint: &str, expired: bool) -> Trigger {
        Trigger {
            id: Uuid::from_u128(id),
            owner: Uuid::from_u128(1),
            created: Timestamp::from_unix(id as i64, 0),
            kind: TriggerKind::Push {
                subscription: PushSubscription {
                    endpoint: endpoint.into(),
                    p256dh: [4; 65],
                    auth: [id as u8; 16],
                },
                expired,
            },
        }
    }

    #[test]
    fn a_subscription_renews_its_endpoints_trigger_and_counts_to_the_limit() {
        let existing = vec![
            push(2, "https://a.example/1", true),
            push(3, "https://a.example/2", false),
        ];
        let renewed = subscribe(&existing, push(99, "https://a.example/1", false)).unwrap();
        assert_eq!((renewed.id, renewed.created), (existing[0].id, existing[0].created));
        assert!(
            matches!(&renewed.kind, TriggerKind::Push { subscription, expired: false } if subscription.auth == [99; 16])
        );
        assert_eq!(
            subscribe(&existing, push(99, "https://a.example/3", false)).unwrap().id,
            Uuid::from_u128(99)
        );
        let full: Vec<Trigger> = (0..PUSH_TRIGGERS_MAX as u128)
            .map(|i| push(10 + i, &format!("https://b.example/{i}"), false))
            .collect();
        assert!(
            subscribe(&full, push(99, "https://a.example/new", false)).is_none(),
            "the 21st"
        );
        assert!(
            subscribe(&full, push(99, "https://b.example/0", false)).is_some(),
            "a renewal still"
        );
    }

    #[test]
    fn who_receives_an_item_that_triggers_now() {
        let email = |verified| Trigger {
            id: Uuid::from_u128(if verified { 5 } else { 6 }),
            owner: Uuid::from_u128(1),
            created: Timestamp::from_unix(0, 0),
            kind: TriggerKind::Email {
                address: "a@b.c".into(),
                verified,
                key_digest: [0; 32],
            },
        };
        let hook = Trigger {
            id: Uuid::from_u128(7),
            owner: Uuid::from_u128(1),
            created: Timestamp::from_unix(0, 0),
            kind: TriggerKind::Webhook {
                url: "https://ntfy.sh/x".into(),
                format: WebhookFormat::Text,
            },
        };
        let all = [
            push(2, "https://a/1", false),
            email(true),
            push(3, "https://a/2", true),
            email(false),
            hook,
        ];
        let (http, mail) = targets_now(&all);
        assert_eq!(http, vec![Uuid::from_u128(2), Uuid::from_u128(7)]);
        assert_eq!(mail, vec![Uuid::from_u128(5)]);
    }

    #[test]
    fn inbox_urls() {
        let n = |s: &str| normalise_inbox_url(s);
        assert_eq!(n("http://127.0.0.1:8001/").as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!(
            n("Inbox.Example.org/base/").as_deref(),
            Some("http://inbox.example.org/base")
        );
        assert_eq!(n("HTTPS://x.org:443").as_deref(), Some("https://x.org"));
        assert_eq!(n("http://x.org:80/a").as_deref(), Some("http://x.org/a"));
        for bad in [
            "ftp://x.org",
            "http://",
            "http://u:p@x.org",
            "http://x.org/?q=1",
            "http://x.org/#f",
            "http://x.org:abc",
        ] {
            assert!(n(bad).is_none(), "{bad}");
        }
    }
}
