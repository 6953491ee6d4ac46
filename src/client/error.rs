//! What goes wrong in a client command, by kind; its `Display` is the one line the command
//! prints on standard error (docs/cli.md).

use reqwest::StatusCode;
use std::fmt;
use std::path::PathBuf;

/// What every command says when the server no longer takes this machine's access key.
pub const KEY_NO_LONGER_VALID: &str = "this machine's access key is no longer valid: run `pigeonhole setup` again";

/// A client command's failure.
#[derive(Debug)]
pub enum ClientError {
    /// The server answered, refusing (a status that is not 2xx).
    Refused(Refusal),
    /// The server could not be reached, did not answer in time, or broke off its answer.
    Network {
        service: &'static str,
        base: String,
        failure: NetworkFailure,
    },
    /// The server answered something this client cannot use (not JSON, not a list, a login
    /// without a token, …): what.
    Answer(String),
    /// A file of this machine (the client settings, the local queue, an export) could not be
    /// read, written or removed: what was done (`"cannot read"`), which file, the cause.
    File {
        doing: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file that is not what it should be: which, what it should be (`"a client settings
    /// file"`), why not.
    NotA {
        path: PathBuf,
        what: &'static str,
        why: String,
    },
    /// What was given on the command line or typed is not usable: the line says what to give.
    Input(String),
    /// Something else on this machine failed (the terminal, the local queue, the HTTP
    /// client, the clock): the line.
    Local(String),
    /// An error and what it means for what was asked (`"nothing was imported"`).
    Noted(Box<ClientError>, String),
}

impl ClientError {
    /// This error, followed by what it means for the command (`"; nothing was imported"`).
    pub fn noted(self, note: impl Into<String>) -> ClientError {
        ClientError::Noted(Box::new(self), note.into())
    }

    pub fn input(line: impl Into<String>) -> ClientError {
        ClientError::Input(line.into())
    }

    pub fn local(line: impl Into<String>) -> ClientError {
        ClientError::Local(line.into())
    }

    pub fn answer(line: impl Into<String>) -> ClientError {
        ClientError::Answer(line.into())
    }

    pub fn file(doing: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> ClientError {
        ClientError::File {
            doing,
            path: path.into(),
            source,
        }
    }
}

/// Why a request got no answer.
#[derive(Debug)]
pub enum NetworkFailure {
    /// No connection: nothing listens there.
    Connect,
    /// No answer in time.
    Timeout,
    /// Another transport failure: the cause.
    Other(String),
    /// The answer was broken off: the cause.
    BrokeOff(String),
}

/// A refusal by a service: what was asked, and the answer.
#[derive(Debug)]
pub struct Refusal {
    pub service: &'static str,
    /// What was asked, for people (`"GET /items"`, `"logging in"`).
    pub what: String,
    pub status: StatusCode,
    /// The server's reason (`{"error": …}`), else the status.
    pub reason: String,
    /// The seconds of `Retry-After`, when given.
    pub retry_after: Option<u64>,
    /// Whether the request was made with this machine's access key.
    pub with_key: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (service, reason) = (self.service, &self.reason);
        match self.status {
            StatusCode::UNAUTHORIZED if self.with_key => f.write_str(KEY_NO_LONGER_VALID),
            StatusCode::FORBIDDEN if self.with_key => write!(
                f,
                "this machine's access key may not do that ({} on the {service} service: {reason}): run `pigeonhole \
                 setup` again",
                self.what
            ),
            StatusCode::TOO_MANY_REQUESTS => match self.retry_after {
                Some(secs) => write!(f, "too many attempts: try again in {}", super::format::wait(secs)),
                None => f.write_str("too many attempts: try again later"),
            },
            StatusCode::SERVICE_UNAVAILABLE => match self.retry_after {
                Some(secs) => write!(
                    f,
                    "the {service} service cannot do that now ({reason}): try again in {}",
                    super::format::wait(secs)
                ),
                None => write!(
                    f,
                    "the {service} service cannot do that now ({reason}): try again later"
                ),
            },
            _ => write!(f, "{} on the {service} service: {reason}", self.what),
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Refused(r) => r.fmt(f),
            ClientError::Network { service, base, failure } => match failure {
                NetworkFailure::Connect => write!(f, "no server at {base}: is `pigeonhole serve` running?"),
                NetworkFailure::Timeout => {
                    write!(f, "the {service} service at {base} did not answer in time: try again")
                }
                NetworkFailure::Other(e) => write!(f, "cannot reach the {service} service at {base}: {e}"),
                NetworkFailure::BrokeOff(e) => write!(f, "the {service} service broke off its answer: {e}"),
            },
            ClientError::Answer(line) | ClientError::Input(line) | ClientError::Local(line) => f.write_str(line),
            ClientError::File { doing, path, source } => write!(f, "{doing} {}: {source}", path.display()),
            ClientError::NotA { path, what, why } => write!(f, "{} is not {what}: {why}", path.display()),
            ClientError::Noted(e, note) => write!(f, "{e}; {note}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::File { source, .. } => Some(source),
            ClientError::Noted(e, _) => Some(e.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(status: StatusCode, retry_after: Option<u64>, with_key: bool) -> String {
        ClientError::Refused(Refusal {
            service: "inbox",
            what: "GET /items".into(),
            status,
            reason: "why".into(),
            retry_after,
            with_key,
        })
        .to_string()
    }

    #[test]
    fn a_refusal_says_what_to_do_by_its_status() {
        assert_eq!(refusal(StatusCode::UNAUTHORIZED, None, true), KEY_NO_LONGER_VALID);
        assert_eq!(
            refusal(StatusCode::UNAUTHORIZED, None, false),
            "GET /items on the inbox service: why"
        );
        assert_eq!(
            refusal(StatusCode::FORBIDDEN, None, true),
            "this machine's access key may not do that (GET /items on the inbox service: why): run `pigeonhole \
             setup` again"
        );
        assert_eq!(
            refusal(StatusCode::TOO_MANY_REQUESTS, None, false),
            "too many attempts: try again later"
        );
        assert_eq!(
            refusal(StatusCode::SERVICE_UNAVAILABLE, None, true),
            "the inbox service cannot do that now (why): try again later"
        );
        assert!(refusal(StatusCode::SERVICE_UNAVAILABLE, Some(5), true)
            .starts_with("the inbox service cannot do that now (why): try again in "));
        assert_eq!(
            refusal(StatusCode::BAD_REQUEST, None, true),
            "GET /items on the inbox service: why"
        );
    }

    #[test]
    fn each_kind_is_one_line_naming_what_failed() {
        let file = ClientError::file(
            "cannot read",
            "/x/client.toml",
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied"),
        );
        assert_eq!(file.to_string(), "cannot read /x/client.toml: denied");
        assert!(std::error::Error::source(&file).is_some());
        let network = |failure| ClientError::Network {
            service: "scheduler",
            base: "http://h:1".into(),
            failure,
        };
        assert_eq!(
            network(NetworkFailure::Connect).to_string(),
            "no server at http://h:1: is `pigeonhole serve` running?"
        );
        assert_eq!(
            network(NetworkFailure::Timeout).to_string(),
            "the scheduler service at http://h:1 did not answer in time: try again"
        );
        assert_eq!(
            network(NetworkFailure::BrokeOff("eof".into())).to_string(),
            "the scheduler service broke off its answer: eof"
        );
        let noted = ClientError::input("bad day").noted("nothing was snoozed");
        assert_eq!(noted.to_string(), "bad day; nothing was snoozed");
        let not_a = ClientError::NotA {
            path: "/e.json".into(),
            what: "a Pigeonhole export",
            why: "EOF".into(),
        };
        assert_eq!(not_a.to_string(), "/e.json is not a Pigeonhole export: EOF");
    }
}
