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

/// A password hash of the configured cost, verified for unknown usernames so that they cost
/// as much as a wrong password. It is made in the background when the server starts (at the
/// default cost that takes longer than everything else in a start), once for both services;
/// a login that needs it before it is ready waits for it.
#[derive(Clone)]
pub struct Decoy {
    hash: std::sync::Arc<tokio::sync::OnceCell<std::sync::Arc<String>>>,
    iterations: u32,
}

impl Decoy {
    /// Starts making the decoy hash (call inside the runtime).
    pub fn start(iterations: u32) -> Decoy {
        let decoy = Decoy {
            hash: Default::default(),
            iterations,
        };
        let early = decoy.clone();
        tokio::spawn(async move {
            early.get().await;
        });
        decoy
    }

    async fn get(&self) -> std::sync::Arc<String> {
        let iterations = self.iterations;
        self.hash
            .get_or_init(|| async move {
                let made = tokio::task::spawn_blocking(move || hash("decoy password", iterations)).await;
                // The settings checked the cost at start, so hashing cannot fail; if it did,
                // the decoy would be an empty string that verifies as false at once.
                std::sync::Arc::new(made.ok().and_then(Result::ok).unwrap_or_default())
            })
            .await
            .clone()
    }
}

/// Verifies off the async runtime. With `phc = None` (unknown user) it verifies against the
/// decoy hash of the same cost, so both cases take the same time, and answers `false`.
pub async fn verify_off_runtime(password: String, phc: Option<String>, decoy: &Decoy) -> bool {
    let phc = match phc {
        Some(phc) => Ok(phc),
        None => Err(decoy.get().await),
    };
    tokio::task::spawn_blocking(move || match phc {
        Ok(phc) => verify(&password, &phc),
        Err(decoy) => {
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

    #[tokio::test]
    async fn the_decoy_is_made_once_in_the_background_and_shared() {
        let decoy = Decoy::start(1000);
        let other_service = decoy.clone();
        assert!(!verify_off_runtime("decoy password?".into(), None, &decoy).await);
        let made = decoy
            .hash
            .get()
            .expect("made by the first unknown-user login at the latest");
        assert!(made.starts_with("$pbkdf2-sha256$i=1000,l=32$"), "{made}");
        assert!(
            std::sync::Arc::ptr_eq(made, &other_service.get().await),
            "one hash for both services"
        );
        // Even the decoy's own password is refused: an unknown user never logs in.
        assert!(!verify_off_runtime("decoy password".into(), None, &other_service).await);
        assert!(verify_off_runtime("decoy password".into(), Some(made.to_string()), &decoy).await);
    }

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
