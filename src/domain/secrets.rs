//! High-entropy secrets (access keys, e-mail verification keys): 16 bytes from the OS
//! CSPRNG shown as 32 lower-case hex characters, stored only as a SHA-256 digest.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A new secret: (hex text shown once, digest to store).
pub fn new_secret() -> (String, [u8; 32]) {
    let text = hex::encode(crate::domain::wire::random_bytes::<16>());
    let d = digest(&text);
    (text, d)
}

/// SHA-256 of the lower-cased secret text (hex digits may arrive in either case).
pub fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.to_ascii_lowercase().as_bytes()).into()
}

pub fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.ct_eq(b).into()
}

/// True for exactly 32 hex digits (either case).
pub fn looks_like_secret(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit())
}
