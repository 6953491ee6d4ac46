//! Accounts, access keys and who is calling: the same shapes for both services (each keeps
//! its own accounts).

use super::permissions::Permissions;
use super::wire::{self, Timestamp};
use super::DomainError;
use uuid::Uuid;

/// The most characters a new account's username may have (inbox.md §2.1). Accounts moved in
/// from the originals keep longer names, and logins take any valid username.
pub const MAX_NEW_USERNAME_CHARS: usize = 64;

/// A username that a new account may take: valid (inbox.md §2.1) and at most
/// [`MAX_NEW_USERNAME_CHARS`] characters. Checked before anything is hashed or stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewUsername(String);

impl NewUsername {
    pub fn parse(name: String) -> Result<NewUsername, DomainError> {
        // the length first: a huge name is refused without looking at every character
        if name.len() > MAX_NEW_USERNAME_CHARS * 2 || name.chars().count() > MAX_NEW_USERNAME_CHARS {
            return Err(DomainError::invalid(format!(
                "invalid username: at most {MAX_NEW_USERNAME_CHARS} characters"
            )));
        }
        if !wire::is_valid_username(&name) {
            return Err(DomainError::invalid("invalid username"));
        }
        Ok(NewUsername(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A password that registration and a passphrase change accept: any string but the empty
/// one (spec README decision 7; the set-up and the pages ask for more).
pub struct NewPassword(String);

impl NewPassword {
    pub fn parse(password: String) -> Result<NewPassword, DomainError> {
        if password.is_empty() {
            return Err(DomainError::invalid("the password must not be empty"));
        }
        Ok(NewPassword(password))
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// An account of one service.
#[derive(Clone, Debug)]
pub struct Account {
    pub id: Uuid,
    pub username: String,
    pub password_hash: PasswordHash,
    pub created: Timestamp,
    pub last_login: Option<Timestamp>,
    /// Credential epoch: raised by a password change, which revokes earlier tokens.
    pub epoch: u64,
}

/// How an account's password is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordHash {
    /// PBKDF2 PHC string: every password set here.
    Pbkdf2(String),
    /// A bcrypt hash (`$2y$…`) brought from an Intray or Tickler server: verified as such
    /// and replaced by a PBKDF2 hash at the first login that succeeds with it.
    LegacyBcrypt(String),
}

/// An inbox access key (the secret itself is never stored).
#[derive(Clone, Debug)]
pub struct AccessKey {
    pub id: Uuid,
    pub name: String,
    pub created: Timestamp,
    /// Creation order among keys with equal `created`.
    pub seq: u64,
    pub permissions: Permissions,
    pub secret: KeySecret,
}

/// How an access key's secret is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySecret {
    /// SHA-256 of the secret (indexed, so a secret finds its key at once).
    Digest([u8; 32]),
    /// A bcrypt hash of the secret's hex text, brought from an Intray server: checked at a
    /// password login of its account, and replaced by the digest the first time it matches.
    LegacyBcrypt(String),
}

impl KeySecret {
    /// The digest of a key that has one (not an imported key that was never used).
    pub fn digest(&self) -> Option<&[u8; 32]> {
        match self {
            KeySecret::Digest(d) => Some(d),
            KeySecret::LegacyBcrypt(_) => None,
        }
    }
}

/// Who is calling, as established by a token or the access-key headers.
#[derive(Clone, Debug)]
pub struct Principal {
    pub account: Account,
    pub permissions: Permissions,
    /// The access key the credentials came from, if any.
    pub key: Option<Uuid>,
}

/// Latest `last-login` first; accounts that never logged in last, oldest registration first.
pub fn sort_for_admin(accounts: &mut [Account]) {
    accounts.sort_by(|a, b| match (a.last_login, b.last_login) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.created.cmp(&b.created),
    });
}

/// The `active-users` object of the admin statistics: accounts whose last login lies within
/// the last 1, 7, 30 and 365 days (a day = 86 400 s).
pub fn active_users(accounts: &[Account], now: Timestamp) -> serde_json::Value {
    let active = |days: i64| {
        accounts
            .iter()
            .filter(|a| a.last_login.is_some_and(|t| now.secs - t.secs <= days * 86_400))
            .count()
    };
    serde_json::json!({"daily": active(1), "weekly": active(7), "monthly": active(30), "yearly": active(365)})
}

/// Which of the two services an account, a login or a token belongs to (each service has
/// accounts of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    Inbox,
    Scheduler,
}

impl ServiceKind {
    /// The name in logs and in tokens (the `svc` claim).
    pub fn name(self) -> &'static str {
        match self {
            ServiceKind::Inbox => "inbox",
            ServiceKind::Scheduler => "scheduler",
        }
    }
}

#[cfg(test)]
mod new_credentials_tests {
    use super::*;

    #[test]
    fn new_usernames_have_at_most_64_characters() {
        let ok = "a".repeat(64);
        assert_eq!(NewUsername::parse(ok.clone()).map(|n| n.as_str().to_owned()), Ok(ok));
        // Latin-1 letters are two bytes each: 64 of them are still fine
        assert!(NewUsername::parse("é".repeat(64)).is_ok());
        assert!(NewUsername::parse("a".repeat(65)).is_err());
        assert!(NewUsername::parse("é".repeat(65)).is_err());
        assert!(NewUsername::parse("a".repeat(1 << 20)).is_err());
        assert!(NewUsername::parse("ab".into()).is_err());
        assert!(NewUsername::parse("a b c".into()).is_err());
        // a longer (moved-in) name is still a valid username for logging in
        assert!(wire::is_valid_username(&"a".repeat(200)));
    }

    #[test]
    fn new_passwords_are_not_empty() {
        assert!(NewPassword::parse(String::new()).is_err());
        assert_eq!(
            NewPassword::parse(" ".into()).map(NewPassword::into_string).ok(),
            Some(" ".into())
        );
        assert_eq!(
            NewPassword::parse("\u{0}".into()).map(NewPassword::into_string).ok(),
            Some("\u{0}".into())
        );
    }
}
