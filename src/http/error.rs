//! The error answer of both services: an [`ErrorKind`] (which gives the status and the
//! headers), the message of the JSON body `{"error": message}`, and the error it was made
//! from, when there is one (a store error, a failed hash, …), kept for the log and for what
//! the dispatcher notes (an undecodable record).

use std::fmt;

use warp::http::header::{HeaderValue, RETRY_AFTER};
use warp::http::StatusCode;

use super::{Payload, Reply};
use crate::store::{StoreError, Undecodable};

/// The error an [`ApiError`] was made from.
pub type Source = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong, as the client is told it: each kind is one HTTP status (and its
/// headers: `Retry-After` for the kinds that carry one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request breaks a rule (a value, a field, the JSON).
    BadRequest,
    /// 401: no credentials, or wrong ones.
    Unauthorized,
    /// 402: the free item limit.
    PaymentRequired,
    /// 403: the credentials do not allow this.
    Forbidden,
    /// 404: no such path or record.
    NotFound,
    /// 405: the path exists, not with this method.
    MethodNotAllowed,
    /// 408: the request body stalled.
    RequestTimeout,
    /// 409: the name is taken.
    Conflict,
    /// 413: the body is larger than the route takes.
    PayloadTooLarge,
    /// 415: the body is not JSON.
    UnsupportedMediaType,
    /// 429 with `Retry-After: <seconds>`.
    TooMany { retry_after: u64 },
    /// 500: the server failed.
    Internal,
    /// 503, with `Retry-After: <seconds>` when it is known when to try again.
    Unavailable { retry_after: Option<u64> },
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::PaymentRequired => StatusCode::PAYMENT_REQUIRED,
            ErrorKind::Forbidden => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorKind::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The seconds of the `Retry-After` header, for the kinds that have one.
    pub fn retry_after(self) -> Option<u64> {
        match self {
            ErrorKind::TooMany { retry_after } => Some(retry_after),
            ErrorKind::Unavailable { retry_after } => retry_after,
            _ => None,
        }
    }
}

/// An error answer: `{"error": message}` with a JSON content type, the status and headers
/// of its kind.
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    /// The text of the JSON answer.
    pub message: String,
    /// The error this one was made from (a [`StoreError`] among others): logged where the
    /// conversion logs, and the undecodable record the dispatcher notes.
    pub source: Option<Source>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// This error, made from `source`.
    pub fn with_source(mut self, source: impl Into<Source>) -> ApiError {
        self.source = Some(source.into());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadRequest, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unauthorized, message)
    }

    pub fn payment_required(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::PaymentRequired, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    pub fn request_timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::RequestTimeout, message)
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Conflict, message)
    }

    pub fn payload_too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::PayloadTooLarge, message)
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::UnsupportedMediaType, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Internal, message)
    }

    /// 503, with `Retry-After: <seconds>` when `retry_after` is given.
    pub fn unavailable(retry_after: Option<u64>, message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unavailable { retry_after }, message)
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(ErrorKind::MethodNotAllowed, "method not allowed on this path")
    }

    pub fn unknown_path() -> ApiError {
        ApiError::not_found("no such path")
    }

    /// `POST /register` while registration is closed (checked before the body is read).
    pub fn registration_closed() -> ApiError {
        ApiError::forbidden("registration is closed on this server")
    }

    pub fn too_many_logins(retry_after: u64) -> ApiError {
        ApiError::too_many(retry_after, "too many failed logins, try again later")
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn too_many(retry_after: u64, message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::TooMany { retry_after }, message)
    }

    /// The stored record that could not be decoded, when that is the error (noted once the
    /// answer is made: logged once per record, counted by the health check).
    pub fn undecodable(&self) -> Option<&Undecodable> {
        match self.source.as_deref()?.downcast_ref::<StoreError>()? {
            StoreError::Undecodable(record) => Some(record),
            _ => None,
        }
    }

    pub fn into_reply(self) -> Reply {
        let body = serde_json::json!({ "error": self.message });
        let mut reply = Reply {
            status: self.kind.status(),
            body: Payload::Full(body.to_string().into_bytes()),
            content_type: Some("application/json"),
            headers: Vec::new(),
        };
        if let Some(secs) = self.kind.retry_after() {
            reply.headers.push((RETRY_AFTER, HeaderValue::from(secs)));
        }
        reply
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<crate::domain::DomainError> for ApiError {
    /// A value that breaks a rule of the spec: 400 with the rule's message.
    fn from(e: crate::domain::DomainError) -> ApiError {
        ApiError::bad_request(e.message)
    }
}

/// `Retry-After` of a write refused while the database takes no writes: it does again only
/// after an operator freed space and restarted the server.
pub const UNAVAILABLE_RETRY_AFTER: u64 = 300;

/// `Retry-After` of a request refused because the database cannot be reached right now (a
/// PostgreSQL server that is down or restarting): the server reconnects by itself as soon as
/// it is back.
pub const UNREACHABLE_RETRY_AFTER: u64 = 5;

impl From<StoreError> for ApiError {
    /// 503 when the database takes no writes or cannot be reached (with `Retry-After`);
    /// otherwise 500, an undecodable record named by its kind in the answer (its key only in
    /// the log, once: see [`super::dispatch`]). The store error is kept as the source.
    fn from(e: StoreError) -> ApiError {
        let answer = match &e {
            StoreError::Unavailable(why) => {
                // the reason is the server's state, not a secret; logged once by the writer
                tracing::debug!("store: the database takes no writes: {why}");
                ApiError::unavailable(
                    Some(UNAVAILABLE_RETRY_AFTER),
                    format!("the server cannot store changes at the moment (reads still work): {why}"),
                )
            }
            StoreError::Unreachable(_) => {
                tracing::error!("store: {e}");
                ApiError::unavailable(
                    Some(UNREACHABLE_RETRY_AFTER),
                    "the database cannot be reached at the moment: try again later",
                )
            }
            StoreError::Undecodable(record) => ApiError::internal(format!(
                "internal error: a stored {} record cannot be read by this version of the server",
                record.kind
            )),
            _ => {
                tracing::error!("store: {e}");
                ApiError::internal("internal error: the database failed")
            }
        };
        answer.with_source(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(reply: &Reply) -> serde_json::Value {
        match &reply.body {
            Payload::Full(bytes) => serde_json::from_slice(bytes).expect("a JSON body"),
            _ => panic!("an error answer has its whole body"),
        }
    }

    fn retry_after_of(reply: &Reply) -> Option<String> {
        reply
            .headers
            .iter()
            .find(|(name, _)| name == RETRY_AFTER)
            .map(|(_, v)| v.to_str().unwrap_or_default().to_owned())
    }

    #[test]
    fn each_kind_answers_its_status_and_only_the_waiting_kinds_say_when_to_retry() {
        let cases = [
            (ApiError::bad_request("m"), 400, None),
            (ApiError::unauthorized("m"), 401, None),
            (ApiError::payment_required("m"), 402, None),
            (ApiError::forbidden("m"), 403, None),
            (ApiError::not_found("m"), 404, None),
            (ApiError::method_not_allowed(), 405, None),
            (ApiError::request_timeout("m"), 408, None),
            (ApiError::conflict("m"), 409, None),
            (ApiError::payload_too_large("m"), 413, None),
            (ApiError::unsupported_media_type("m"), 415, None),
            (ApiError::too_many(7, "m"), 429, Some("7")),
            (ApiError::internal("m"), 500, None),
            (ApiError::unavailable(None, "m"), 503, None),
            (ApiError::unavailable(Some(9), "m"), 503, Some("9")),
        ];
        for (error, status, retry_after) in cases {
            let message = error.message.clone();
            let reply = error.into_reply();
            assert_eq!(reply.status.as_u16(), status, "{message}");
            assert_eq!(reply.content_type, Some("application/json"));
            assert_eq!(body_of(&reply), serde_json::json!({ "error": message }));
            assert_eq!(retry_after_of(&reply).as_deref(), retry_after, "{status}");
        }
    }

    #[test]
    fn an_unreachable_database_answers_503_with_retry_after_and_keeps_the_cause() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = ApiError::from(StoreError::Unreachable(Box::new(cause)));
        assert_eq!(
            error.kind,
            ErrorKind::Unavailable {
                retry_after: Some(UNREACHABLE_RETRY_AFTER)
            }
        );
        let source = std::error::Error::source(&error).expect("the store error is kept");
        assert!(matches!(
            source.downcast_ref::<StoreError>(),
            Some(StoreError::Unreachable(_))
        ));
        assert_eq!(source.to_string(), "database error: refused");
        let reply = error.into_reply();
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(retry_after_of(&reply), Some(UNREACHABLE_RETRY_AFTER.to_string()));
        assert_eq!(
            body_of(&reply),
            serde_json::json!({ "error": "the database cannot be reached at the moment: try again later" })
        );
    }

    #[test]
    fn a_failing_engine_answers_500_without_its_text_and_keeps_the_cause() {
        let error = ApiError::from(StoreError::Engine("disk on fire".into()));
        assert_eq!(error.kind, ErrorKind::Internal);
        assert_eq!(error.message, "internal error: the database failed");
        let source = std::error::Error::source(&error).expect("the store error is kept");
        assert_eq!(source.to_string(), "database error: disk on fire");
        assert!(error.undecodable().is_none());
        assert!(retry_after_of(&error.into_reply()).is_none());
    }

    #[test]
    fn a_database_that_takes_no_writes_answers_503_retry_after_300() {
        let error = ApiError::from(StoreError::Unavailable("disk full".into()));
        assert_eq!(error.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            error.message,
            "the server cannot store changes at the moment (reads still work): disk full"
        );
        assert_eq!(retry_after_of(&error.into_reply()), Some("300".into()));
    }

    #[test]
    fn an_undecodable_record_is_named_by_kind_and_kept_for_the_dispatcher() {
        let record = Undecodable {
            kind: "inbox item",
            key: vec![1, 2],
            reason: "bad".into(),
        };
        let error = ApiError::from(StoreError::Undecodable(Box::new(record.clone())));
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            error.message,
            "internal error: a stored inbox item record cannot be read by this version of the server"
        );
        assert_eq!(error.undecodable(), Some(&record));
    }

    #[test]
    fn a_source_given_is_kept_and_the_answer_stays_the_message() {
        let cause = std::io::Error::other("no entropy");
        let error = ApiError::internal("could not sign a token").with_source(cause);
        assert_eq!(error.to_string(), "could not sign a token");
        assert_eq!(
            std::error::Error::source(&error).map(|s| s.to_string()).as_deref(),
            Some("no entropy")
        );
    }
}
