//! Passwords: PBKDF2-HMAC-SHA256 with a per-account random salt in PHC string format,
//! computed off the async runtime (spec README §7).

use pbkdf2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use pbkdf2::{Algorithm, Params, Pbkdf2};

#[derive(Debug)]
pub struct HashError(pub String);

/// Hashes `password` with `iterations` rounds (blocking: call through [`hash_off_runtime`]).
pub fn hash(password: &str, iterations: u32) -> Result<String, HashError> {
    let salt = SaltString::encode_b64(&crate::wire::random_bytes::<16>()).map_err(|e| HashError(e.to_string()))?;
    let params = Params {
        rounds: iterations.max(1),
        output_length: 32,
    };
    Pbkdf2
        .hash_password_customized(
            password.as_bytes(),
            Some(Algorithm::Pbkdf2Sha256.ident()),
            None,
            params,
            &salt,
        )
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// True when `password` matches the PHC string `phc` (blocking).
pub fn verify(password: &str, phc: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(parsed) => Pbkdf2.verify_password(password.as_bytes(), &parsed).is_ok(),
        Err(_) => false,
    }
}

pub async fn hash_off_runtime(password: String, iterations: u32) -> Result<String, HashError> {
    tokio::task::spawn_blocking(move || hash(&password, iterations))
        .await
        .map_err(|e| HashError(e.to_string()))?
}

/// Verifies off the async runtime. With `phc = None` (unknown user) it verifies against a
/// decoy hash of the same cost, so both cases take the same time, and answers `false`.
pub async fn verify_off_runtime(password: String, phc: Option<String>, decoy: std::sync::Arc<String>) -> bool {
    tokio::task::spawn_blocking(move || match phc {
        Some(phc) => verify(&password, &phc),
        None => {
            verify(&password, &decoy);
            false
        }
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_verify() {
        let h = hash("correct horse", 1000).unwrap();
        assert!(h.starts_with("$pbkdf2-sha256$i=1000,l=32$"), "{h}");
        assert!(verify("correct horse", &h));
        assert!(!verify("correct horse ", &h));
        assert!(!verify("", &h));
        let empty = hash("", 1000).unwrap();
        assert!(verify("", &empty));
        assert_ne!(hash("x", 1000).unwrap(), hash("x", 1000).unwrap(), "salts differ");
    }

    #[test]
    fn nul_and_long_passwords_count_whole() {
        let h = hash("a\0b", 1000).unwrap();
        assert!(!verify("a", &h));
        let long = "y".repeat(5000);
        let h = hash(&long, 1000).unwrap();
        assert!(!verify(&long[..4999], &h));
        assert!(verify(&long, &h));
    }
}
