//! Talking to an inbox service (Pigeonhole's own or an old Intray server) over HTTP: log in
//! with an access key, add an item (scheduler.md §6.3, §7.2). Redirects are never followed:
//! a redirect would carry the access key or the token to wherever the answer points.

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// Why a call failed, and whether trying again later may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub transient: bool,
    pub reason: String,
    /// The HTTP status, when the service answered.
    pub status: Option<u16>,
    /// How long the service asked us to wait (`Retry-After` of a 429 or 503 answer).
    pub retry_after: Option<Duration>,
}

impl Failure {
    fn permanent(reason: String) -> Failure {
        Failure {
            transient: false,
            reason,
            status: None,
            retry_after: None,
        }
    }
}

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The process's HTTP client (inbox services, the payment provider): rustls, no proxy
/// (deliveries go where the trigger says), and no redirects (README decision 17).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // Building fails only without a TLS provider, which `launch` installs first.
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// A non-2xx answer: 5xx, 408 and 429 are transient, everything else (3xx included) is
/// permanent.
fn status_failure(what: &str, status: StatusCode, headers: &HeaderMap) -> Failure {
    let transient = status.is_server_error() || status == 408 || status == 429;
    let mut reason = format!("inbox answered {status} to {what}");
    if status.is_redirection() {
        reason.push_str(" (redirects are not followed)");
    }
    let asked = status == 429 || status == 503;
    Failure {
        transient,
        reason,
        status: Some(status.as_u16()),
        retry_after: asked.then(|| retry_after(headers, SystemTime::now())).flatten(),
    }
}

/// `Retry-After` as delta seconds or an HTTP date (a date in the past: no wait).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn request_failure(what: &str, e: reqwest::Error) -> Failure {
    Failure {
        transient: true,
        reason: format!("could not reach the inbox for {what}: {e}"),
        status: None,
        retry_after: None,
    }
}

/// `POST <url>/login` with the access key as password; the token of the `JWT-Cookie`.
pub async fn login(client: &reqwest::Client, url: &str, username: &str, key: &str) -> Result<String, Failure> {
    let what = "POST /login";
    let response = client
        .post(format!("{url}/login"))
        .json(&serde_json::json!({"username": username, "password": key}))
        .send()
        .await
        .map_err(|e| request_failure(what, e))?;
    if !response.status().is_success() {
        return Err(status_failure(what, response.status(), response.headers()));
    }
    for value in response.headers().get_all(reqwest::header::SET_COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        let first = text.split(';').next().unwrap_or("");
        if let Some((name, token)) = first.split_once('=') {
            if name.trim() == "JWT-Cookie" && !token.trim().is_empty() {
                return Ok(token.trim().to_owned());
            }
        }
    }
    Err(Failure::permanent("the inbox login answer had no JWT-Cookie".into()))
}

/// `POST <url>/inbox/item` (then `/intray/item` on 404) with an idempotency key.
pub async fn add_item(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    idempotency_key: Uuid,
    data_base64: &str,
) -> Result<Uuid, Failure> {
    let body = serde_json::json!({"type": "text", "data": data_base64});
    for path in ["/inbox/item", "/intray/item"] {
        let what = format!("POST {path}");
        let response = client
            .post(format!("{url}{path}"))
            .bearer_auth(token)
            .header("Idempotency-Key", idempotency_key.to_string())
            .json(&body)
            .send()
            .await
            .map_err(|e| request_failure(&what, e))?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            continue;
        }
        if !status.is_success() {
            return Err(status_failure(&what, status, response.headers()));
        }
        let text = response.text().await.map_err(|e| request_failure(&what, e))?;
        return match serde_json::from_str::<String>(&text)
            .ok()
            .and_then(|s| crate::domain::wire::parse_uuid(&s))
        {
            Some(id) => Ok(id),
            None => Err(Failure::permanent(format!(
                "inbox answered {what} with something that is not a UUID"
            ))),
        };
    }
    Err(status_failure(
        "POST /inbox/item and /intray/item",
        StatusCode::NOT_FOUND,
        &HeaderMap::new(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(retry_after).unwrap());
        h
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let wait = |v: &str| retry_after(&headers(v), now);
        assert_eq!(wait("120"), Some(Duration::from_secs(120)));
        assert_eq!(wait(" 0 "), Some(Duration::ZERO));
        assert_eq!(wait("Sun, 06 Nov 1994 08:50:07 GMT"), Some(Duration::from_secs(30)));
        // the two obsolete date forms HTTP still asks recipients to accept
        assert_eq!(wait("Sunday, 06-Nov-94 08:49:47 GMT"), Some(Duration::from_secs(10)));
        assert_eq!(wait("Sun Nov  6 08:49:57 1994"), Some(Duration::from_secs(20)));
        assert_eq!(
            wait("Sun, 06 Nov 1994 08:00:00 GMT"),
            Some(Duration::ZERO),
            "in the past"
        );
        for bad in ["-5", "1.5", "soon", ""] {
            assert_eq!(wait(bad), None, "{bad:?}");
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn statuses() {
        let f = status_failure("POST /inbox/item", StatusCode::SERVICE_UNAVAILABLE, &headers("7"));
        assert!(f.transient);
        assert_eq!(f.retry_after, Some(Duration::from_secs(7)));
        let f = status_failure("POST /login", StatusCode::TOO_MANY_REQUESTS, &headers("3"));
        assert_eq!((f.transient, f.retry_after), (true, Some(Duration::from_secs(3))));
        // Retry-After counts only on 429 and 503
        let f = status_failure("POST /login", StatusCode::BAD_GATEWAY, &headers("3"));
        assert_eq!((f.transient, f.retry_after), (true, None));
        for redirect in [301, 302, 303, 307, 308] {
            let f = status_failure("POST /login", StatusCode::from_u16(redirect).unwrap(), &headers("3"));
            assert!(!f.transient, "{redirect}");
            assert!(f.reason.contains("redirects are not followed"), "{}", f.reason);
        }
    }
}
