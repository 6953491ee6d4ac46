//! Web Push's cryptography (scheduler.md §6.4, §7.6): the server's VAPID key pair (RFC
//! 8292), the message encryption for one subscription (RFC 8291, `aes128gcm` records of RFC
//! 8188), and the `Authorization: vapid` header. Every primitive comes from a library: P-256
//! and ECDH from RustCrypto's `p256`, HKDF from `hkdf`, the RFC 8188 record from
//! `ece-native`, the ES256 JWT from `jsonwebtoken`; what is here is RFC 8291's way of
//! combining them, checked against the RFC's own example (Appendix A) in the tests.
//!
//! The key pair is derived from the token signing key (HKDF, its own label), so it is made
//! once, kept wherever and however the signing key is kept (the data directory's key file,
//! the PostgreSQL database's one row: every process of a database has the same pair), in
//! backups and `migrate-store` copies with it, and it changes only when an operator replaces
//! the signing key (docs/decisions.md).

use crate::domain::scheduler::push::{encode_base64url, endpoint_origin, PushSubscription};
use hkdf::Hkdf;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::pkcs8::EncodePrivateKey;
use p256::{PublicKey, SecretKey};
use sha2::Sha256;

/// The record size of every message: one record, at most 4,096 bytes (RFC 8291 §4).
const RECORD_SIZE: u32 = 4_096;

/// What the VAPID key's derivation is labelled with (a new label would make a new key).
const VAPID_LABEL: &[u8] = b"pigeonhole web push VAPID key v1";

/// How long a VAPID JWT is good for: 12 hours (at most 24, RFC 8292 §2).
const JWT_LIFETIME_SECS: u64 = 12 * 60 * 60;

/// Why a push message could not be made (nothing was sent).
#[derive(Debug)]
pub enum PushError {
    /// The subscription's key is not a point of P-256 (checked at subscription, so only a
    /// damaged record).
    SubscriberKey,
    /// The encryption refused the message (longer than one record: the message is cut
    /// before, so never).
    Encryption(ece_native::Error),
    /// The endpoint has no origin to sign for.
    Endpoint,
    /// Signing the JWT failed.
    Signing(jsonwebtoken::errors::Error),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::SubscriberKey => f.write_str("the subscription's key is not a P-256 point"),
            PushError::Encryption(e) => write!(f, "the message could not be encrypted: {e}"),
            PushError::Endpoint => f.write_str("the endpoint has no origin"),
            PushError::Signing(e) => write!(f, "the VAPID token could not be signed: {e}"),
        }
    }
}

impl std::error::Error for PushError {}

/// The server's VAPID key pair (its application server key).
pub struct VapidKey {
    /// The private key as PKCS#8 DER, as `jsonwebtoken` takes it.
    signing: EncodingKey,
    /// The public key, uncompressed, base64url without padding (`GET /push/key`, `k=`).
    public: String,
}

impl VapidKey {
    /// The key pair derived from the token signing key `signing_secret`.
    pub fn derive(signing_secret: &[u8]) -> VapidKey {
        let hk = Hkdf::<Sha256>::new(None, signing_secret);
        // a scalar of 32 bytes is out of range (zero, or at least the group order) with a
        // chance of about 2^-32: the next counter is taken then
        let secret = (0u8..=255)
            .find_map(|counter| {
                let mut okm = [0u8; 32];
                hk.expand_multi_info(&[VAPID_LABEL, &[counter]], &mut okm).ok()?;
                SecretKey::from_bytes(&okm.into()).ok()
            })
            .unwrap_or_else(|| SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng));
        VapidKey::from_secret(secret)
    }

    fn from_secret(secret: SecretKey) -> VapidKey {
        let public = encode_base64url(secret.public_key().to_encoded_point(false).as_bytes());
        // encoding a valid key as PKCS#8 cannot fail
        let der = secret.to_pkcs8_der().map(|d| d.as_bytes().to_vec()).unwrap_or_default();
        VapidKey {
            signing: EncodingKey::from_ec_der(&der),
            public,
        }
    }

    /// The public key, uncompressed, base64url without padding.
    pub fn public_key(&self) -> &str {
        &self.public
    }

    /// `Authorization: vapid t=<JWT>, k=<public key>` for a request to `endpoint` (RFC 8292
    /// §2–§3): ES256, `aud` the endpoint's origin, `exp` 12 hours after `now_secs`, `sub`
    /// the operator's contact (`mailto:` or a URL).
    pub fn authorization(&self, endpoint: &str, subject: &str, now_secs: u64) -> Result<String, PushError> {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            aud: String,
            exp: u64,
            sub: &'a str,
        }
        let claims = Claims {
            aud: endpoint_origin(endpoint).ok_or(PushError::Endpoint)?,
            exp: now_secs + JWT_LIFETIME_SECS,
            sub: subject,
        };
        let token =
            jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &self.signing).map_err(PushError::Signing)?;
        Ok(format!("vapid t={token}, k={}", self.public))
    }
}

/// Whether `point` is an uncompressed point of P-256 (the subscriber's `p256dh`).
pub fn is_p256_point(point: &[u8; 65]) -> bool {
    PublicKey::from_sec1_bytes(point).is_ok()
}

/// The body of a push message carrying `plain` to `subscription` (RFC 8291): a fresh
/// ephemeral key and salt each time.
pub fn encrypt(plain: &[u8], subscription: &PushSubscription) -> Result<Vec<u8>, PushError> {
    let mut salt = [0u8; 16];
    getrandom::getrandom(&mut salt).map_err(|_| PushError::Encryption(ece_native::Error::Aes128Gcm))?;
    let ephemeral = SecretKey::random(&mut p256::elliptic_curve::rand_core::OsRng);
    encrypt_with(plain, subscription, &ephemeral, salt)
}

/// [`encrypt`] with a given ephemeral key and salt (RFC 8291 §3.4, §4).
fn encrypt_with(
    plain: &[u8],
    subscription: &PushSubscription,
    ephemeral: &SecretKey,
    salt: [u8; 16],
) -> Result<Vec<u8>, PushError> {
    let ua_public = PublicKey::from_sec1_bytes(&subscription.p256dh).map_err(|_| PushError::SubscriberKey)?;
    let as_public = ephemeral.public_key().to_encoded_point(false);
    let shared = p256::ecdh::diffie_hellman(ephemeral.to_nonzero_scalar(), ua_public.as_affine());
    // RFC 8291 §3.3: IKM = HKDF(salt = auth, ikm = ECDH secret,
    //                          info = "WebPush: info" 0x00 ua_public as_public, L = 32)
    let hk = Hkdf::<Sha256>::new(Some(&subscription.auth), shared.raw_secret_bytes());
    let mut ikm = [0u8; 32];
    hk.expand_multi_info(
        &[b"WebPush: info\0", &subscription.p256dh, as_public.as_bytes()],
        &mut ikm,
    )
    .map_err(|_| PushError::Encryption(ece_native::Error::Aes128Gcm))?;
    ece_native::encrypt(
        ikm,
        salt,
        as_public.as_bytes(),
        std::iter::once(plain.to_vec()),
        RECORD_SIZE,
    )
    .map_err(PushError::Encryption)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn b64(s: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(s).unwrap()
    }

    /// RFC 8291 Appendix A, byte for byte: the same keys, salt and message give the RFC's
    /// encrypted body.
    #[test]
    fn the_rfc_example_encrypts_to_the_rfc_body() {
        let subscription = PushSubscription {
            endpoint: "https://push.example.net/push/JzLQ3raZJfFBR0aqvOMsLrt54w4rJUsV".into(),
            p256dh: b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4")
                .try_into()
                .unwrap(),
            auth: b64("BTBZMqHH6r4Tts7J_aSIgg").try_into().unwrap(),
        };
        let as_private = SecretKey::from_slice(&b64("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")).unwrap();
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body = encrypt_with(
            b"When I grow up, I want to be a watermelon",
            &subscription,
            &as_private,
            salt,
        )
        .unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.encode(body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
    }

    #[test]
    fn the_key_is_derived_from_the_signing_key_and_stays() {
        let a = VapidKey::derive(&[7; 64]);
        assert_eq!(a.public_key(), VapidKey::derive(&[7; 64]).public_key());
        assert_ne!(a.public_key(), VapidKey::derive(&[8; 64]).public_key());
        let point = b64(a.public_key());
        assert_eq!((point.len(), point[0]), (65, 4));
        assert!(is_p256_point(&point.clone().try_into().unwrap()));
        assert!(!is_p256_point(&[4; 65]));
    }

    /// The JWT is ES256 under the public key it names, for the endpoint's origin (port
    /// included), with `exp` within 24 hours and the contact as `sub`.
    #[test]
    fn vapid_authorization() {
        let key = VapidKey::derive(&[1; 64]);
        let header = key
            .authorization(
                "http://127.0.0.1:8123/push/abc?x=1",
                "mailto:me@example.org",
                1_800_000_000,
            )
            .unwrap();
        let (t, k) = header
            .strip_prefix("vapid t=")
            .and_then(|rest| rest.split_once(", k="))
            .unwrap();
        assert_eq!(k, key.public_key());
        let point = b64(k);
        let decoding = jsonwebtoken::DecodingKey::from_ec_components(
            &URL_SAFE_NO_PAD.encode(&point[1..33]),
            &URL_SAFE_NO_PAD.encode(&point[33..]),
        )
        .unwrap();
        let mut validation = jsonwebtoken::Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.set_audience(&["http://127.0.0.1:8123"]);
        let data = jsonwebtoken::decode::<serde_json::Value>(t, &decoding, &validation).unwrap();
        assert_eq!(data.claims["sub"], "mailto:me@example.org");
        assert_eq!(data.claims["exp"], 1_800_000_000u64 + 12 * 3600);
        assert!(key.authorization("not a url", "mailto:x@y", 0).is_err());
    }
}
