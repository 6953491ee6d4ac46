//! The one error of the domain: a value that breaks a rule of the spec. The HTTP layer
//! answers it with 400 and its message.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainError {
    pub message: String,
}

impl DomainError {
    /// A value that breaks a rule (`message` says which, for the client).
    pub fn invalid(message: impl Into<String>) -> DomainError {
        DomainError {
            message: message.into(),
        }
    }
}

impl fmt::Display for DomainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DomainError {}
