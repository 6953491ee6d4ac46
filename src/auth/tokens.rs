//! Tokens: HS512 JWTs signed with a key generated at first start and kept in the data
//! directory (mode 0600). A token names the service, the account (by UUID), the account's
//! credential epoch, the permissions and, for access-key logins, the key (spec README §4–5).

use crate::domain::account::ServiceKind;
use crate::domain::permissions::Permissions;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::path::Path;
use uuid::Uuid;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Service: "inbox" or "scheduler".
    pub svc: String,
    /// Account UUID.
    pub sub: Uuid,
    /// Credential epoch of the account at issue.
    pub ep: u64,
    /// Permissions (inbox only).
    #[serde(default)]
    pub perms: Permissions,
    /// Access key the token was obtained with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Uuid>,
    pub iat: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
}

pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    lifetime: Option<u64>,
    /// Tokens whose signature was checked, with their claims: a repeated token skips the
    /// HMAC and the JSON (expiry and revocation are still checked on every use).
    verified: std::sync::RwLock<std::collections::HashMap<String, Claims>>,
    /// The Web Push key pair (VAPID), derived from the same secret: kept and shared as it is
    /// ([`crate::webpush`]).
    push: std::sync::Arc<crate::webpush::VapidKey>,
}

/// How many verified tokens are remembered (the map is emptied when it is full).
const VERIFIED_CAP: usize = 4_096;

/// The signing key's file in the data directory.
pub const KEY_FILE: &str = "signing.key";

impl TokenKeys {
    /// Loads the signing key of `data_dir`, generating it on first start. A key file that
    /// other users can read, or that is not the 64 bytes this server writes, stops the
    /// server: its tokens could be forged, and replacing it silently would hide that (and log
    /// everybody out).
    pub fn load_or_create(data_dir: &Path, lifetime: Option<u64>) -> std::io::Result<TokenKeys> {
        let path = data_dir.join(KEY_FILE);
        // every error names the file (a read-only or full disk, wrong owner, …)
        let named = |doing: &str, e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("cannot {doing} {}: {e}", path.display()))
        };
        let secret = match std::fs::read(&path) {
            Ok(bytes) => {
                check_key_file(&path, bytes.len()).map_err(std::io::Error::other)?;
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = crate::domain::wire::random_bytes::<64>().to_vec();
                crate::files::write(&path, crate::files::Access::Private, &secret).map_err(|e| named("write", e))?;
                secret
            }
            Err(e) => return Err(named("read", e)),
        };
        Ok(TokenKeys::from_secret(&secret, lifetime))
    }

    pub fn from_secret(secret: &[u8], lifetime: Option<u64>) -> TokenKeys {
        let mut validation = Validation::new(Algorithm::HS512);
        validation.required_spec_claims.clear();
        validation.validate_exp = false; // checked exactly (no leeway) in `verify`
        validation.validate_aud = false;
        TokenKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
            lifetime,
            verified: Default::default(),
            push: std::sync::Arc::new(crate::webpush::VapidKey::derive(secret)),
        }
    }

    /// The server's Web Push key pair (scheduler.md §6.4), made of the signing secret.
    pub fn push_key(&self) -> &std::sync::Arc<crate::webpush::VapidKey> {
        &self.push
    }

    pub fn issue(
        &self,
        svc: ServiceKind,
        account: Uuid,
        epoch: u64,
        perms: Permissions,
        key: Option<Uuid>,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let now = unix_now();
        let claims = Claims {
            svc: svc.name().to_owned(),
            sub: account,
            ep: epoch,
            perms,
            key,
            iat: now,
            exp: self.lifetime.map(|l| now.saturating_add(l)),
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS512), &claims, &self.encoding)
    }

    /// The claims of a valid, unexpired token of service `svc`.
    pub fn verify(&self, svc: ServiceKind, token: &str) -> Option<Claims> {
        let cached = self
            .verified
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned();
        let claims = match cached {
            Some(claims) => claims,
            None => {
                let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
                    .ok()?
                    .claims;
                let mut map = self.verified.write().unwrap_or_else(|p| p.into_inner());
                if map.len() >= VERIFIED_CAP {
                    map.clear();
                }
                map.insert(token.to_owned(), claims.clone());
                claims
            }
        };
        if claims.svc != svc.name() {
            return None;
        }
        let now = unix_now();
        if claims.exp.is_some_and(|exp| now >= exp) {
            return None;
        }
        // with a lifetime, also tokens issued without an expiry end (spec inbox.md §2.4)
        if self.lifetime.is_some_and(|l| now >= claims.iat.saturating_add(l)) {
            return None;
        }
        Some(claims)
    }
}

/// The length of the keys this server writes.
const KEY_LEN: usize = 64;

/// A clear reason why the key file at `path` must not be used.
fn check_key_file(path: &Path, len: usize) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if len != KEY_LEN {
        return Err(format!(
            "{} holds {len} bytes, not the {KEY_LEN} of a signing key this server made; \
             restore the right file, or delete it to make a new key (every token stops working)",
            path.display()
        ));
    }
    let mode = std::fs::metadata(path).map_err(|e| e.to_string())?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "{} can be read by other users (mode {:03o}), so its tokens could be forged; \
             run `chmod 600 {}` (and delete it instead, which logs everybody out, if someone \
             may have read it)",
            path.display(),
            mode & 0o777,
            path.display()
        ));
    }
    Ok(())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_also_ends_tokens_issued_without_an_expiry() {
        let forever = TokenKeys::from_secret(&[7u8; 64], None);
        let t = forever
            .issue(ServiceKind::Inbox, Uuid::from_u128(5), 0, Permissions::USER, None)
            .unwrap();
        assert!(forever.verify(ServiceKind::Inbox, &t).is_some());
        // the same key, now with a lifetime of 0 s: issued "now" is already too old
        let limited = TokenKeys::from_secret(&[7u8; 64], Some(0));
        assert!(limited.verify(ServiceKind::Inbox, &t).is_none());
        let hour = TokenKeys::from_secret(&[7u8; 64], Some(3600));
        assert!(hour.verify(ServiceKind::Inbox, &t).is_some(), "issued within the hour");
        let old = Claims {
            svc: "inbox".into(),
            sub: Uuid::from_u128(5),
            ep: 0,
            perms: Permissions::USER,
            key: None,
            iat: unix_now() - 3601,
            exp: None,
        };
        let t = jsonwebtoken::encode(&Header::new(Algorithm::HS512), &old, &hour.encoding).unwrap();
        assert!(forever.verify(ServiceKind::Inbox, &t).is_some());
        assert!(hour.verify(ServiceKind::Inbox, &t).is_none(), "issued over an hour ago");
    }

    #[test]
    fn a_key_file_readable_by_others_or_of_the_wrong_length_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = TokenKeys::load_or_create(dir.path(), None).unwrap();
        let path = dir.path().join(KEY_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let t = first
            .issue(ServiceKind::Inbox, Uuid::from_u128(1), 0, Permissions::USER, None)
            .unwrap();
        let again = TokenKeys::load_or_create(dir.path(), None).unwrap();
        assert!(
            again.verify(ServiceKind::Inbox, &t).is_some(),
            "the same key after a restart"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = TokenKeys::load_or_create(dir.path(), None).err().unwrap().to_string();
        assert!(err.contains("chmod 600") && err.contains("644"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, [1u8; 32]).unwrap();
        let err = TokenKeys::load_or_create(dir.path(), None).err().unwrap().to_string();
        assert!(err.contains("32 bytes"), "{err}");
    }

    #[test]
    fn issue_and_verify() {
        let keys = TokenKeys::from_secret(&[7u8; 64], None);
        let id = Uuid::from_u128(5);
        let t = keys.issue(ServiceKind::Inbox, id, 3, Permissions::USER, None).unwrap();
        let c = keys.verify(ServiceKind::Inbox, &t).unwrap();
        assert_eq!(
            (c.sub, c.ep, c.perms, c.key, c.exp),
            (id, 3, Permissions::USER, None, None)
        );
        assert!(
            keys.verify(ServiceKind::Scheduler, &t).is_none(),
            "a token is for one service"
        );
        let other = TokenKeys::from_secret(&[8u8; 64], None);
        assert!(other.verify(ServiceKind::Inbox, &t).is_none());
        let mut tampered = t.clone();
        tampered.pop();
        assert!(keys.verify(ServiceKind::Inbox, &tampered).is_none());
    }

    #[test]
    fn remembered_tokens_still_expire_and_keep_their_service() {
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(1));
        let t = keys
            .issue(ServiceKind::Inbox, Uuid::nil(), 0, Permissions::USER, None)
            .unwrap();
        assert!(keys.verify(ServiceKind::Inbox, &t).is_some());
        assert!(keys.verify(ServiceKind::Inbox, &t).is_some(), "from the cache");
        assert!(
            keys.verify(ServiceKind::Scheduler, &t).is_none(),
            "the cache does not widen the audience"
        );
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert!(
            keys.verify(ServiceKind::Inbox, &t).is_none(),
            "a remembered token expires too"
        );
    }

    #[test]
    fn alg_none_is_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 64], None);
        let t = keys
            .issue(ServiceKind::Inbox, Uuid::nil(), 0, Permissions::USER, None)
            .unwrap();
        let payload = t.split('.').nth(1).unwrap();
        let none_header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"; // {"alg":"none","typ":"JWT"}
        assert!(keys
            .verify(ServiceKind::Inbox, &format!("{none_header}.{payload}."))
            .is_none());
    }

    #[test]
    fn expired_tokens_are_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(0));
        let t = keys
            .issue(ServiceKind::Inbox, Uuid::nil(), 0, Permissions::USER, None)
            .unwrap();
        assert!(keys.verify(ServiceKind::Inbox, &t).is_none());
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(3600));
        let t = keys
            .issue(ServiceKind::Inbox, Uuid::nil(), 0, Permissions::USER, None)
            .unwrap();
        assert!(keys.verify(ServiceKind::Inbox, &t).unwrap().exp.is_some());
    }

    #[test]
    fn key_file_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = TokenKeys::load_or_create(dir.path(), None).unwrap();
        let t = a
            .issue(ServiceKind::Inbox, Uuid::nil(), 0, Permissions::USER, None)
            .unwrap();
        let b = TokenKeys::load_or_create(dir.path(), None).unwrap();
        assert!(b.verify(ServiceKind::Inbox, &t).is_some());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
