//! Tokens: HS512 JWTs signed with a key generated at first start and kept in the data
//! directory (mode 0600). A token names the service, the account (by UUID), the account's
//! credential epoch, the permissions and, for access-key logins, the key (spec README §4–5).

use crate::auth::Permissions;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use std::io::Write;
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
}

/// How many verified tokens are remembered (the map is emptied when it is full).
const VERIFIED_CAP: usize = 4_096;

const KEY_FILE: &str = "signing.key";

impl TokenKeys {
    /// Loads the signing key of `data_dir`, generating it on first start.
    pub fn load_or_create(data_dir: &Path, lifetime: Option<u64>) -> std::io::Result<TokenKeys> {
        let path = data_dir.join(KEY_FILE);
        let secret = match std::fs::read(&path) {
            Ok(bytes) if bytes.len() >= 32 => bytes,
            Ok(_) => {
                let msg = format!("{} is too short to be a signing key", path.display());
                return Err(std::io::Error::other(msg));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = crate::wire::random_bytes::<64>().to_vec();
                write_private(data_dir, &path, &secret)?;
                secret
            }
            Err(e) => return Err(e),
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
        }
    }

    pub fn issue(
        &self,
        svc: &str,
        account: Uuid,
        epoch: u64,
        perms: Permissions,
        key: Option<Uuid>,
    ) -> Result<String, jsonwebtoken::errors::Error> {
        let now = unix_now();
        let claims = Claims {
            svc: svc.to_owned(),
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
    pub fn verify(&self, svc: &str, token: &str) -> Option<Claims> {
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
        if claims.svc != svc {
            return None;
        }
        if let Some(exp) = claims.exp {
            if unix_now() >= exp {
                return None;
            }
        }
        Some(claims)
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Writes `bytes` to `path` with mode 0600: a temporary file, fsynced, renamed.
fn write_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{KEY_FILE}.tmp"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_and_verify() {
        let keys = TokenKeys::from_secret(&[7u8; 64], None);
        let id = Uuid::from_u128(5);
        let t = keys.issue("inbox", id, 3, Permissions::USER, None).unwrap();
        let c = keys.verify("inbox", &t).unwrap();
        assert_eq!(
            (c.sub, c.ep, c.perms, c.key, c.exp),
            (id, 3, Permissions::USER, None, None)
        );
        assert!(keys.verify("scheduler", &t).is_none(), "a token is for one service");
        let other = TokenKeys::from_secret(&[8u8; 64], None);
        assert!(other.verify("inbox", &t).is_none());
        let mut tampered = t.clone();
        tampered.pop();
        assert!(keys.verify("inbox", &tampered).is_none());
    }

    #[test]
    fn remembered_tokens_still_expire_and_keep_their_service() {
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(1));
        let t = keys.issue("inbox", Uuid::nil(), 0, Permissions::USER, None).unwrap();
        assert!(keys.verify("inbox", &t).is_some());
        assert!(keys.verify("inbox", &t).is_some(), "from the cache");
        assert!(
            keys.verify("scheduler", &t).is_none(),
            "the cache does not widen the audience"
        );
        std::thread::sleep(std::time::Duration::from_millis(2100));
        assert!(keys.verify("inbox", &t).is_none(), "a remembered token expires too");
    }

    #[test]
    fn alg_none_is_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 64], None);
        let t = keys.issue("inbox", Uuid::nil(), 0, Permissions::USER, None).unwrap();
        let payload = t.split('.').nth(1).unwrap();
        let none_header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"; // {"alg":"none","typ":"JWT"}
        assert!(keys.verify("inbox", &format!("{none_header}.{payload}.")).is_none());
    }

    #[test]
    fn expired_tokens_are_refused() {
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(0));
        let t = keys.issue("inbox", Uuid::nil(), 0, Permissions::USER, None).unwrap();
        assert!(keys.verify("inbox", &t).is_none());
        let keys = TokenKeys::from_secret(&[7u8; 64], Some(3600));
        let t = keys.issue("inbox", Uuid::nil(), 0, Permissions::USER, None).unwrap();
        assert!(keys.verify("inbox", &t).unwrap().exp.is_some());
    }

    #[test]
    fn key_file_is_private_and_stable() {
        let dir = tempfile::tempdir().unwrap();
        let a = TokenKeys::load_or_create(dir.path(), None).unwrap();
        let t = a.issue("inbox", Uuid::nil(), 0, Permissions::USER, None).unwrap();
        let b = TokenKeys::load_or_create(dir.path(), None).unwrap();
        assert!(b.verify("inbox", &t).is_some());
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
