//! Talking to an inbox service (Pigeonhole's own or an old Intray server) over HTTP: log in
//! with an access key, add an item (scheduler.md §6.3, §7.2).

use std::time::Duration;
use uuid::Uuid;

/// Why a call failed, and whether trying again later may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub transient: bool,
    pub reason: String,
    /// The HTTP status, when the service answered.
    pub status: Option<u16>,
}

impl Failure {
    fn permanent(reason: String) -> Failure {
        Failure {
            transient: false,
            reason,
            status: None,
        }
    }
}

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A client for inbox services: rustls, no proxy (deliveries go where the trigger says).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .no_proxy()
        .build()
        // Building fails only without a TLS provider, which `launch` installs first.
        .unwrap_or_else(|_| reqwest::Client::new())
}

fn status_failure(what: &str, status: reqwest::StatusCode) -> Failure {
    let transient = status.is_server_error() || status == 408 || status == 429;
    Failure {
        transient,
        reason: format!("inbox answered {status} to {what}"),
        status: Some(status.as_u16()),
    }
}

fn request_failure(what: &str, e: reqwest::Error) -> Failure {
    Failure {
        transient: true,
        reason: format!("could not reach the inbox for {what}: {e}"),
        status: None,
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
        return Err(status_failure(what, response.status()));
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
    let mut status = reqwest::StatusCode::NOT_FOUND;
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
        status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            continue;
        }
        if !status.is_success() {
            return Err(status_failure(&what, status));
        }
        let text = response.text().await.map_err(|e| request_failure(&what, e))?;
        return match serde_json::from_str::<String>(&text)
            .ok()
            .and_then(|s| crate::wire::parse_uuid(&s))
        {
            Some(id) => Ok(id),
            None => Err(Failure::permanent(format!(
                "inbox answered {what} with something that is not a UUID"
            ))),
        };
    }
    Err(status_failure("POST /inbox/item and /intray/item", status))
}
