//! The two services as the client sees them: requests with credentials, and failures as one
//! clear line (the server's own words when it gave some).

use reqwest::{Method, RequestBuilder, StatusCode};
use serde_json::Value;

pub use super::error::KEY_NO_LONGER_VALID;
use super::error::{ClientError, NetworkFailure, Refusal};

/// How a request identifies itself.
#[derive(Clone, Debug)]
pub enum Credentials {
    None,
    Bearer(String),
    /// The `Username` + `Access-Key` header pair.
    Key {
        username: String,
        secret: String,
    },
}

/// One service at `base`.
#[derive(Clone)]
pub struct Service {
    pub name: &'static str,
    pub base: String,
    http: reqwest::Client,
    pub credentials: Credentials,
}

/// A request's answer: status and body.
pub struct Answer {
    pub status: StatusCode,
    pub body: Vec<u8>,
    pub headers: reqwest::header::HeaderMap,
}

impl Answer {
    pub fn json(&self) -> Result<Value, ClientError> {
        serde_json::from_slice(&self.body)
            .map_err(|e| ClientError::answer(format!("the server's answer is not JSON: {e}")))
    }

    /// The server's reason of an error answer (`{"error": …}`), else the status.
    pub fn reason(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| self.status.to_string())
    }
}

impl Service {
    pub fn new(name: &'static str, base: &str, http: reqwest::Client) -> Service {
        Service {
            name,
            base: base.trim_end_matches('/').to_owned(),
            http,
            credentials: Credentials::None,
        }
    }

    pub fn with(&self, credentials: Credentials) -> Service {
        Service {
            credentials,
            ..self.clone()
        }
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.base));
        match &self.credentials {
            Credentials::None => rb,
            Credentials::Bearer(t) => rb.bearer_auth(t),
            Credentials::Key { username, secret } => rb.header("Username", username).header("Access-Key", secret),
        }
    }

    /// Why a request got no answer, and what to do.
    pub fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let failure = if e.is_connect() {
            NetworkFailure::Connect
        } else if e.is_timeout() {
            NetworkFailure::Timeout
        } else {
            NetworkFailure::Other(e.to_string())
        };
        self.network(failure)
    }

    fn network(&self, failure: NetworkFailure) -> ClientError {
        ClientError::Network {
            service: self.name,
            base: self.base.clone(),
            failure,
        }
    }

    /// A refusal for people: what failed and what to do.
    pub fn refusal(&self, what: &str, answer: &Answer) -> ClientError {
        let retry_after = answer
            .headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        ClientError::Refused(Refusal {
            service: self.name,
            what: what.to_owned(),
            status: answer.status,
            reason: answer.reason(),
            retry_after,
            with_key: matches!(self.credentials, Credentials::Key { .. }),
        })
    }

    /// Sends `method path` with an optional JSON body; any answer is returned.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Answer, ClientError> {
        let mut rb = self.request(method.clone(), path);
        if let Some(body) = body {
            rb = rb.json(body);
        }
        let response = rb.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|e| self.network(NetworkFailure::BrokeOff(e.to_string())))?
            .to_vec();
        Ok(Answer { status, body, headers })
    }

    /// Sends `POST path` with `body`, bytes of JSON; any answer is returned.
    pub async fn post_bytes(&self, path: &str, body: Vec<u8>) -> Result<Answer, ClientError> {
        match self.try_post_bytes(path, body).await {
            Ok(answer) => Ok(answer),
            Err(e) => Err(self.unreachable(&e)),
        }
    }

    /// Like [`Service::post_bytes`] for a request that may wait its turn at the server and
    /// take long (an import: one runs at a time per server), within `limit` rather than the
    /// client's usual 30 s.
    pub async fn post_bytes_within(
        &self,
        path: &str,
        body: Vec<u8>,
        limit: std::time::Duration,
    ) -> Result<Answer, ClientError> {
        match self.send_bytes(path, body, Some(limit)).await {
            Ok(answer) => Ok(answer),
            Err(e) => Err(self.unreachable(&e)),
        }
    }

    /// Like [`Service::post_bytes`], with the transport's error as it is.
    pub async fn try_post_bytes(&self, path: &str, body: Vec<u8>) -> Result<Answer, reqwest::Error> {
        self.send_bytes(path, body, None).await
    }

    async fn send_bytes(
        &self,
        path: &str,
        body: Vec<u8>,
        limit: Option<std::time::Duration>,
    ) -> Result<Answer, reqwest::Error> {
        let mut request = self
            .request(Method::POST, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(limit) = limit {
            request = request.timeout(limit);
        }
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.bytes().await?.to_vec();
        Ok(Answer { status, body, headers })
    }

    /// Like [`Service::call`], but anything other than a 2xx answer is an error naming
    /// what was asked and the server's reason.
    pub async fn ok(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Answer, ClientError> {
        let answer = self.call(method.clone(), path, body).await?;
        if answer.status.is_success() {
            Ok(answer)
        } else {
            Err(self.refusal(&format!("{method} {path}"), &answer))
        }
    }

    pub async fn get_json(&self, path: &str) -> Result<Value, ClientError> {
        self.ok(Method::GET, path, None).await?.json()
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.ok(Method::POST, path, Some(body)).await?.json()
    }

    /// `POST /login`: the token of the `JWT-Cookie`, `Ok(None)` for wrong credentials.
    pub async fn login(&self, username: &str, password: &str) -> Result<Option<String>, ClientError> {
        let body = serde_json::json!({"username": username, "password": password});
        let answer = self.call(Method::POST, "/login", Some(&body)).await?;
        if answer.status == StatusCode::UNAUTHORIZED {
            return Ok(None);
        }
        if !answer.status.is_success() {
            return Err(self.refusal("logging in", &answer));
        }
        let token = answer
            .headers
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(|c| c.split(';').next()?.trim().strip_prefix("JWT-Cookie="))
            .next()
            .map(str::to_owned);
        token
            .map(Some)
            .ok_or_else(|| ClientError::answer(format!("the {} service answered the login without a token", self.name)))
    }
}
