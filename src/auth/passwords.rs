//! Passwords: PBKDF2-HMAC-SHA256 with a per-account random salt in PHC string format,
//! computed off the async runtime (spec README §7). Accounts and access keys moved in from
//! Intray or Tickler bring bcrypt hashes, which are verified here until they are replaced.

use pbkdf2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use pbkdf2::{Algorithm, Params, Pbkdf2};

use crate::domain::account;

#[derive(Debug)]
pub struct HashError(pub String);

/// Hashes `password` with `iterations` rounds (blocking: call through [`hash_off_runtime`]).
pub fn hash(password: &str, iterations: u32) -> Result<String, HashError> {
    let salt =
        SaltString::encode_b64(&crate::domain::wire::random_bytes::<16>()).map_err(|e| HashError(e.to_string()))?;
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

/// True when `password` matches the account's hash, whichever kind it is (blocking).
pub fn verify_account(password: &str, hash: &account::PasswordHash) -> bool {
    match hash {
        account::PasswordHash::Pbkdf2(phc) => verify(password, phc),
        account::PasswordHash::LegacyBcrypt(h) => verify_bcrypt(password, h),
    }
}

/// True when `password` matches a bcrypt hash made by Intray or Tickler (blocking). Their
/// bcrypt library (Haskell's `bcrypt`, OpenBSD's C code) read the password as a C string:
/// it ended at the first NUL byte and only its first 72 bytes counted; the same happens
/// here, so every password that logged in there logs in here.
pub fn verify_bcrypt(password: &str, hash: &str) -> bool {
    let as_c_string = password.split('\0').next().unwrap_or_default();
    bcrypt::verify(as_c_string, hash).unwrap_or(false)
}

/// At most this many hashes are computed at once; more wait their turn (each one is tens of
/// milliseconds of one core's time at the default cost, so running more at once only makes
/// every one of them slower).
const CONCURRENT_HASHES: usize = 4;

static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(CONCURRENT_HASHES);

/// Runs `work` on a thread of its own at a lower CPU priority (nice 10), so that password
/// hashing yields the cores to request handling and the database writer: a burst of logins
/// must not delay other requests, nor preempt the writer while it holds sled's lock.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    // The semaphore is never closed, so acquiring only waits.
    let _turn = HASHING.acquire().await.ok()?;
    let (done, result) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("pigeonhole-hash".into())
        .spawn(move || {
            lower_priority();
            let _ = done.send(work());
        })
        .ok()?;
    result.await.ok()
}

fn lower_priority() {
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code, reason = "std has no safe setpriority(2)")]
    // SAFETY: setpriority only changes a scheduling attribute. On Linux, PRIO_PROCESS with
    // id 0 applies to the calling thread only (a documented deviation from POSIX threads).
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

pub async fn hash_off_runtime(password: String, iterations: u32) -> Result<String, HashError> {
    off_runtime(move || hash(&password, iterations))
        .await
        .ok_or_else(|| HashError("the password hashing thread could not run".into()))?
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
                let made = off_runtime(move || hash("decoy password", iterations)).await;
                // The settings checked the cost at start, so hashing cannot fail; if it did,
                // the decoy would be an empty string that verifies as false at once.
                std::sync::Arc::new(made.and_then(Result::ok).unwrap_or_default())
            })
            .await
            .clone()
    }
}

/// Verifies off the async runtime. With `hash = None` (unknown user) it verifies against
/// the decoy hash of the same cost, so both cases take the same time, and answers `false`.
/// A bcrypt hash from the old servers is much cheaper (cost 4) than the PBKDF2 cost: the
/// decoy is verified after it too, so that the time of a wrong password does not tell
/// which accounts were moved in and have not logged in since.
pub async fn verify_off_runtime(password: String, hash: Option<account::PasswordHash>, decoy: &Decoy) -> bool {
    let pad = match &hash {
        None | Some(account::PasswordHash::LegacyBcrypt(_)) => Some(decoy.get().await),
        Some(account::PasswordHash::Pbkdf2(_)) => None,
    };
    off_runtime(move || {
        let ok = hash.is_some_and(|hash| verify_account(&password, &hash));
        if let Some(decoy) = pad {
            verify(&password, &decoy);
        }
        ok
    })
    .await
    .unwrap_or(false)
}

/// The imported access key among `keys` whose bcrypt hash `secret` matches, checked off
/// the async runtime (each check costs what the old server's hashing policy made it cost).
pub async fn find_legacy_key(secret: String, keys: Vec<account::AccessKey>) -> Option<account::AccessKey> {
    off_runtime(move || {
        keys.into_iter().find(|k| match &k.secret {
            account::KeySecret::LegacyBcrypt(h) => verify_bcrypt(&secret, h),
            account::KeySecret::Digest(_) => false,
        })
    })
    .await
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[cfg(target_os = "linux")]
    #[tokio::test]
    #[expect(unsafe_code, reason = "std has no safe getpriority(2)")]
    async fn hashing_runs_at_a_lower_priority_on_threads_of_its_own() {
        // SAFETY: getpriority only reads the calling thread's nice value.
        let runtime_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        let (name, nice) = off_runtime(|| {
            let name = std::thread::current().name().map(str::to_owned);
            // SAFETY: as above.
            (name, unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
        })
        .await
        .expect("ran");
        assert_eq!(name.as_deref(), Some("pigeonhole-hash"));
        assert!(nice >= 10, "nice {nice}");
        // SAFETY: as above.
        let caller_nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(caller_nice, runtime_nice, "the caller is untouched");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_four_hashes_run_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let jobs: Vec<_> = (0..12)
            .map(|_| {
                let (running, most) = (running.clone(), most.clone());
                tokio::spawn(off_runtime(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    running.fetch_sub(1, Ordering::SeqCst);
                }))
            })
            .collect();
        for job in jobs {
            job.await.expect("joined").expect("ran");
        }
        // Other tests of this binary may hold a turn meanwhile, hence not exactly the limit.
        let most = most.load(Ordering::SeqCst);
        assert!((2..=CONCURRENT_HASHES).contains(&most), "{most} at once");
    }

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
        let hash = account::PasswordHash::Pbkdf2(made.to_string());
        assert!(verify_off_runtime("decoy password".into(), Some(hash), &decoy).await);
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

    /// A wrong password of a moved-in account costs a decoy verification on top of bcrypt
    /// (what a PBKDF2 account costs); a PBKDF2 account's login does not need the decoy.
    #[tokio::test]
    async fn a_moved_in_hash_is_padded_to_the_cost_of_the_decoy() {
        let unmade = || Decoy {
            hash: Default::default(),
            iterations: 1000,
        };
        let decoy = unmade();
        let legacy = account::PasswordHash::LegacyBcrypt(bcrypt::hash("pw", 4).unwrap());
        assert!(!verify_off_runtime("wrong".into(), Some(legacy.clone()), &decoy).await);
        assert!(decoy.hash.get().is_some(), "the decoy was made and verified too");
        assert!(verify_off_runtime("pw".into(), Some(legacy), &unmade()).await);
        let decoy = unmade();
        let pbkdf2 = account::PasswordHash::Pbkdf2(hash("pw", 1000).unwrap());
        assert!(verify_off_runtime("pw".into(), Some(pbkdf2), &decoy).await);
        assert!(decoy.hash.get().is_none());
    }

    #[test]
    fn bcrypt_hashes_of_the_old_servers_verify() {
        // Intray and Tickler hashed with "$2y$" and cost 4 (fastBcryptHashingPolicy)
        let h = bcrypt::hash_with_result("old secret", 4)
            .unwrap()
            .format_for_version(bcrypt::Version::TwoY);
        assert!(h.starts_with("$2y$04$"), "{h}");
        let legacy = account::PasswordHash::LegacyBcrypt(h.clone());
        assert!(verify_account("old secret", &legacy));
        assert!(!verify_account("old secret!", &legacy));
        assert!(!verify_account("", &legacy));
        // as a C string: up to the first NUL, and 72 bytes at most
        assert!(verify_bcrypt("old secret\0ignored", &h));
        let long = "z".repeat(72);
        let h = bcrypt::hash(&long, 4).unwrap();
        assert!(verify_bcrypt(&format!("{long}tail"), &h));
        assert!(!verify_bcrypt("not a hash", "$2y$04$short"));
        // a bcrypt string is never taken for a PBKDF2 one, nor the other way round
        assert!(!verify_account("old secret", &account::PasswordHash::Pbkdf2(h)));
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
