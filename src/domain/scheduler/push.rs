//! Reminders pushed to the person (scheduler.md §6.4–§6.5, §7.6–§7.7): a browser's Web Push
//! subscription as it arrives, webhook URLs, and the texts that travel — the push message
//! (RFC 8291 plain text, at most [`PUSH_PLAIN_MAX`] bytes) and the webhook bodies.

use crate::domain::wire::Timestamp;
use crate::domain::DomainError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde_json::{json, Value};
use uuid::Uuid;

/// The longest endpoint or webhook URL taken (§6.4, §6.5).
pub const URL_MAX: usize = 2_048;

/// The most push triggers one account may have (§6.4).
pub const PUSH_TRIGGERS_MAX: usize = 20;

/// The most plain-text bytes of one push message: one record of 4,096 bytes less its
/// header (86), padding delimiter (1) and tag (16) (§7.6; RFC 8291 §4).
pub const PUSH_PLAIN_MAX: usize = 3_993;

/// A browser's `PushSubscription.toJSON()` (§6.4), checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushSubscription {
    /// The push resource: an absolute URL, as the URL standard writes it.
    pub endpoint: String,
    /// The subscriber's P-256 public key, uncompressed (`0x04` first).
    pub p256dh: [u8; 65],
    /// The subscriber's authentication secret.
    pub auth: [u8; 16],
}

/// How a webhook receives a reminder (§7.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookFormat {
    /// `text/plain`, the content as the body, a `Title` header (ntfy).
    Text,
    /// `application/json` with title, message, item and due (Gotify, chat bridges).
    Json,
}

impl WebhookFormat {
    pub fn name(self) -> &'static str {
        match self {
            WebhookFormat::Text => "text",
            WebhookFormat::Json => "json",
        }
    }

    pub fn parse(name: &str) -> Option<WebhookFormat> {
        match name {
            "text" => Some(WebhookFormat::Text),
            "json" => Some(WebhookFormat::Json),
            _ => None,
        }
    }
}

fn bad(msg: impl Into<String>) -> DomainError {
    DomainError::invalid(msg)
}

/// base64url with or without padding (browsers give it without; some libraries with).
fn decode_base64url(s: &str) -> Option<Vec<u8>> {
    const EITHER: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    EITHER.decode(s.trim()).ok()
}

/// base64url without padding, as `applicationServerKey` and VAPID's `k=` take it.
pub fn encode_base64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether an uncompressed point (65 bytes, `0x04` first) lies on P-256 (the caller's
/// cryptography answers it).
pub type PointCheck = fn(&[u8; 65]) -> bool;

impl PushSubscription {
    /// The subscription of `POST /trigger/push` (§6.4). The endpoint must be `https`, or
    /// `http` (answered as such in [`EndpointScheme`]: the caller lets it through only to a
    /// loopback or private address); `on_curve` checks the key (the domain does no curve
    /// arithmetic of its own). Unknown keys are ignored.
    pub fn parse(v: &Value, on_curve: PointCheck) -> Result<(PushSubscription, EndpointScheme), DomainError> {
        let obj = v
            .as_object()
            .ok_or_else(|| bad("a push subscription is a JSON object (PushSubscription.toJSON())"))?;
        let endpoint = match obj.get("endpoint") {
            Some(Value::String(s)) => s,
            _ => return Err(bad("the subscription needs an endpoint (a URL string)")),
        };
        let (endpoint, scheme) = Some(endpoint)
            .filter(|e| e.contains("://"))
            .and_then(|e| checked_url(e, false))
            .ok_or_else(|| bad("the endpoint must be an absolute https URL of at most 2048 characters, without user info or fragment"))?;
        let keys = obj
            .get("keys")
            .and_then(Value::as_object)
            .ok_or_else(|| bad("the subscription needs keys {p256dh, auth}"))?;
        let key = |name: &str| match keys.get(name) {
            Some(Value::String(s)) => decode_base64url(s),
            _ => None,
        };
        let p256dh: [u8; 65] = key("p256dh")
            .and_then(|k| k.try_into().ok())
            .filter(|k: &[u8; 65]| k[0] == 0x04 && on_curve(k))
            .ok_or_else(|| bad("keys.p256dh must be base64url of an uncompressed P-256 point (65 bytes)"))?;
        let auth: [u8; 16] = key("auth")
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| bad("keys.auth must be base64url of 16 bytes"))?;
        Ok((PushSubscription { endpoint, p256dh, auth }, scheme))
    }
}

/// The scheme of an endpoint or webhook URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointScheme {
    Https,
    Http,
}

/// A URL for an outgoing request, as the URL standard writes it (scheme and host lower
/// case, the default port dropped), with its scheme; `None` unless it is an absolute
/// `http(s)` URL with a host, of at most [`URL_MAX`] characters, without user info or
/// fragment (and without a query unless `query`). Without `://` a URL is taken as `http://`.
fn checked_url(input: &str, query: bool) -> Option<(String, EndpointScheme)> {
    if input.len() > URL_MAX || input.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return None;
    }
    let with_scheme;
    let input = if input.contains("://") {
        input
    } else {
        with_scheme = format!("http://{input}");
        &with_scheme
    };
    // the URL standard takes `http:///host` and `http:\\host` as `http://host`: not here
    let (_, after) = input.split_once("://")?;
    if after.starts_with(['/', '\\']) {
        return None;
    }
    let url = url::Url::parse(input).ok()?;
    let scheme = match url.scheme() {
        "https" => EndpointScheme::Https,
        "http" => EndpointScheme::Http,
        _ => return None,
    };
    let no_user = url.username().is_empty() && url.password().is_none();
    let host_ok = url.host_str().is_some_and(|h| !h.is_empty());
    if !no_user || !host_ok || url.fragment().is_some() || (!query && url.query().is_some()) {
        return None;
    }
    let out: String = url.into();
    (out.len() <= URL_MAX).then_some((out, scheme))
}

/// The URL of `POST /trigger/webhook` (§6.5), normalised; `None` when it breaks a rule.
pub fn normalise_webhook_url(input: &str) -> Option<String> {
    checked_url(input, true).map(|(url, _)| url)
}

/// A webhook URL as shown back: its query (a token, often) replaced by `?…` (§6.5).
pub fn shown_webhook_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

/// The host of an endpoint, as a push trigger shows it (§2.6).
pub fn endpoint_host(endpoint: &str) -> String {
    url::Url::parse(endpoint)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The origin of an endpoint (`scheme://host[:port]`), VAPID's `aud` (RFC 8292 §2).
pub fn endpoint_origin(endpoint: &str) -> Option<String> {
    let url = url::Url::parse(endpoint).ok()?;
    Some(url.origin().ascii_serialization()).filter(|o| o != "null")
}

/// The content of an item as text a person reads: the text itself, or what it is when it
/// is not text.
pub fn content_text(content: &[u8]) -> String {
    match std::str::from_utf8(content) {
        Ok(text) => text.to_owned(),
        Err(_) => format!("(a note of {} bytes that is not text)", content.len()),
    }
}

/// What a reminder message says: its text, its triggered item, when it was due, and the
/// page that lists it (when the server knows its address).
#[derive(Clone, Debug)]
pub struct Reminder<'a> {
    pub content: &'a [u8],
    pub item: Uuid,
    pub due: Timestamp,
    pub url: Option<&'a str>,
}

const TITLE: &str = "Reminder";
const CUT: char = '…';

impl Reminder<'_> {
    /// The plain text of a push message (§7.6): the UTF-8 JSON, its body cut at a character
    /// boundary (ending with `…`) so that the whole is at most [`PUSH_PLAIN_MAX`] bytes.
    pub fn push_message(&self) -> Vec<u8> {
        let with = |body: &str| {
            let mut v = json!({"title": TITLE, "body": body, "item": self.item, "due": self.due.to_string()});
            if let Some(url) = self.url {
                v["url"] = json!(url);
            }
            serde_json::to_vec(&v).unwrap_or_default()
        };
        let text = content_text(self.content);
        let whole = with(&text);
        if whole.len() <= PUSH_PLAIN_MAX {
            return whole;
        }
        // room for the body: what the rest takes, and the cut mark
        let room = PUSH_PLAIN_MAX.saturating_sub(with("").len() + escaped_len(CUT));
        let mut used = 0;
        let mut cut = String::new();
        for c in text.chars() {
            used += escaped_len(c);
            if used > room {
                break;
            }
            cut.push(c);
        }
        cut.push(CUT);
        with(&cut)
    }

    /// A webhook's body (§7.7): the content as text, or the JSON object.
    pub fn webhook_body(&self, format: WebhookFormat) -> Vec<u8> {
        let text = content_text(self.content);
        match format {
            WebhookFormat::Text => text.into_bytes(),
            WebhookFormat::Json => serde_json::to_vec(
                &json!({"title": TITLE, "message": text, "item": self.item, "due": self.due.to_string()}),
            )
            .unwrap_or_default(),
        }
    }

    pub fn title() -> &'static str {
        TITLE
    }
}

/// The bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4";
    const AUTH: &str = "BTBZMqHH6r4Tts7J_aSIgg";

    fn any_point(_: &[u8; 65]) -> bool {
        true
    }

    fn sub(endpoint: &str) -> Value {
        json!({"endpoint": endpoint, "expirationTime": null, "keys": {"p256dh": KEY, "auth": AUTH}, "extra": 1})
    }

    #[test]
    fn subscriptions_as_browsers_give_them() {
        let (s, scheme) =
            PushSubscription::parse(&sub("https://Push.Example.net:443/wpush/v2/abc"), any_point).unwrap();
        assert_eq!(s.endpoint, "https://push.example.net/wpush/v2/abc");
        assert_eq!(scheme, EndpointScheme::Https);
        assert_eq!(s.p256dh[0], 4);
        assert_eq!(s.auth.len(), 16);
        // padded base64url too
        let padded =
            json!({"endpoint": "https://x.org/a", "keys": {"p256dh": format!("{KEY}="), "auth": format!("{AUTH}==")}});
        assert!(PushSubscription::parse(&padded, any_point).is_ok());
        let (_, scheme) = PushSubscription::parse(&sub("http://127.0.0.1:9000/push"), any_point).unwrap();
        assert_eq!(scheme, EndpointScheme::Http);
    }

    #[test]
    fn bad_subscriptions_are_refused() {
        let long = format!("https://x.org/{}", "a".repeat(URL_MAX));
        for endpoint in [
            "ftp://x.org/a",
            "https://user:pw@x.org/a",
            "https://x.org/a#frag",
            "/relative",
            "https://",
            long.as_str(),
            "https://x.org/a b",
        ] {
            assert!(
                PushSubscription::parse(&sub(endpoint), any_point).is_err(),
                "{endpoint}"
            );
        }
        let with = |p: Value, a: Value| json!({"endpoint": "https://x.org/a", "keys": {"p256dh": p, "auth": a}});
        for (p, a) in [
            (json!(KEY), json!("AAAA")),
            (json!("BAAA"), json!(AUTH)),
            (json!(KEY.replacen('B', "A", 1)), json!(AUTH)),
            (json!(1), json!(AUTH)),
            (json!(KEY), json!(null)),
            (json!("!!"), json!(AUTH)),
        ] {
            assert!(
                PushSubscription::parse(&with(p.clone(), a.clone()), any_point).is_err(),
                "{p} {a}"
            );
        }
        assert!(PushSubscription::parse(&json!([]), any_point).is_err());
        assert!(PushSubscription::parse(&json!({"endpoint": "https://x.org/a"}), any_point).is_err());
        assert!(
            PushSubscription::parse(&sub("https://x.org/a"), |_| false).is_err(),
            "off the curve"
        );
    }

    #[test]
    fn webhook_urls() {
        assert_eq!(
            normalise_webhook_url("HTTPS://NTFY.sh/my-reminders").as_deref(),
            Some("https://ntfy.sh/my-reminders")
        );
        assert_eq!(
            normalise_webhook_url("gotify.lan:8080/message?token=abc").as_deref(),
            Some("http://gotify.lan:8080/message?token=abc")
        );
        assert_eq!(
            shown_webhook_url("http://gotify.lan:8080/message?token=abc"),
            "http://gotify.lan:8080/message?…"
        );
        assert_eq!(shown_webhook_url("https://ntfy.sh/x"), "https://ntfy.sh/x");
        for bad in [
            "ftp://x.org",
            "http://u:p@x.org/",
            "http://x.org/#f",
            "http://",
            "https://x.org/\u{0}",
            "/relative",
            "https:///x.org/a",
            "x.org/a b",
        ] {
            assert!(normalise_webhook_url(bad).is_none(), "{bad}");
        }
        assert_eq!(
            endpoint_origin("http://127.0.0.1:9000/push/1").as_deref(),
            Some("http://127.0.0.1:9000")
        );
        assert_eq!(
            endpoint_origin("https://fcm.googleapis.com/fcm/send/x").as_deref(),
            Some("https://fcm.googleapis.com")
        );
        assert_eq!(
            endpoint_host("https://fcm.googleapis.com/fcm/send/x"),
            "fcm.googleapis.com"
        );
    }

    fn reminder(content: &[u8]) -> Reminder<'_> {
        Reminder {
            content,
            item: Uuid::from_u128(7),
            due: Timestamp::from_unix(1_800_000_000, 0),
            url: Some("https://pi.home/app/triggered"),
        }
    }

    #[test]
    fn push_messages_fit_one_record() {
        let short: Value = serde_json::from_slice(&reminder(b"Call mum").push_message()).unwrap();
        assert_eq!(
            short,
            json!({"title": "Reminder", "body": "Call mum", "item": Uuid::from_u128(7),
                   "due": "2027-01-15T08:00:00Z", "url": "https://pi.home/app/triggered"})
        );
        for long in [
            "x".repeat(10_000),
            "é\"\n".repeat(3_000),
            "🦀".repeat(2_000),
            "\u{1}".repeat(1_000),
        ] {
            let message = reminder(long.as_bytes()).push_message();
            assert!(message.len() <= PUSH_PLAIN_MAX, "{}", message.len());
            assert!(message.len() > PUSH_PLAIN_MAX - 8, "{}: little wasted", message.len());
            let v: Value = serde_json::from_slice(&message).unwrap();
            let body = v["body"].as_str().unwrap();
            assert!(body.ends_with('…') && long.starts_with(body.trim_end_matches('…')));
        }
        let binary: Value = serde_json::from_slice(&reminder(&[0xff, 0xfe, 0]).push_message()).unwrap();
        assert_eq!(binary["body"], "(a note of 3 bytes that is not text)");
    }

    #[test]
    fn webhook_bodies() {
        let r = reminder(b"Water the plants");
        assert_eq!(r.webhook_body(WebhookFormat::Text), b"Water the plants");
        let v: Value = serde_json::from_slice(&r.webhook_body(WebhookFormat::Json)).unwrap();
        assert_eq!(
            v,
            json!({"title": "Reminder", "message": "Water the plants", "item": Uuid::from_u128(7), "due": "2027-01-15T08:00:00Z"})
        );
        assert_eq!(WebhookFormat::parse("json"), Some(WebhookFormat::Json));
        assert_eq!(WebhookFormat::parse("xml"), None);
    }
}

/// Issue 29 point 1: the structured strings a record keeps (usernames, e-mail addresses,
/// inbox, webhook and push URLs) are refused at the edge when they hold a control
/// character, so that no engine meets one (PostgreSQL's text holds no NUL); what the edge
/// gives back never holds one. The free text (key names, zone names, reasons) is the store
/// suite's `free_text`.
#[cfg(test)]
mod structured_strings {
    use super::*;
    use crate::domain::scheduler::models::{is_valid_email, normalise_inbox_url};
    use crate::domain::wire::is_valid_username;
    use proptest::prelude::*;

    /// A string that looks like one of the structured kinds, with characters of every kind
    /// (control characters included) put in at any place.
    fn near_valid() -> impl Strategy<Value = String> {
        let base = prop::sample::select(vec![
            "alice",
            "ann@example.org",
            "https://push.example.org/send/abc?x=1",
            "http://127.0.0.1:8000",
            "ntfy.example.org/topic",
        ]);
        (base, proptest::collection::vec((0usize..40, any::<char>()), 0..4)).prop_map(|(base, inserts)| {
            let mut chars: Vec<char> = base.chars().collect();
            for (at, c) in inserts {
                chars.insert(at.min(chars.len()), c);
            }
            chars.into_iter().collect()
        })
    }

    fn plain(s: &str) -> bool {
        !s.chars().any(char::is_control)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        #[test]
        fn what_the_edge_accepts_holds_no_control_character(s in prop_oneof![near_valid(), any::<String>()]) {
            if is_valid_username(&s) || is_valid_email(&s) {
                prop_assert!(plain(&s), "{s:?}");
            }
            for accepted in [normalise_inbox_url(&s), normalise_webhook_url(&s)].into_iter().flatten() {
                prop_assert!(plain(&accepted), "{s:?} → {accepted:?}");
            }
        }
    }

    #[test]
    fn nul_and_other_control_characters_are_refused() {
        for bad in [
            "al\0ice",
            "ann\0@example.org",
            "https://example.org/\0",
            "http://127.0.0.1:8000/\u{1b}",
            "alice\u{85}",
        ] {
            assert!(!is_valid_username(bad) && !is_valid_email(bad), "{bad:?}");
            assert_eq!(normalise_webhook_url(bad), None, "{bad:?}");
            assert!(normalise_inbox_url(bad).is_none_or(|u| plain(&u)), "{bad:?}");
        }
    }
}
