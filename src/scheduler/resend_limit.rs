//! The limits on verification e-mails, so that nobody can make the server mail an address
//! over and over: at most [`RESENDS`] resends per trigger in a sliding hour
//! (`POST /trigger/email/resend/:id`), and for every verification e-mail (a new e-mail
//! trigger or a resend) at most [`PER_ADDRESS`] per destination mailbox in a sliding day
//! (the address without its `+tag`, see [`mailbox`]),
//! across all triggers and accounts, and [`PER_ACCOUNT`] per account in a day. Counted in
//! the store's throttles (src/store/throttles.rs), per 16-byte key (a trigger id, an account
//! id, the digest of an address), which bound what they keep.

use crate::store::throttles::{Count, Taken, Throttle, Throttles, Turn};
use crate::store::StoreError;
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

/// Resends allowed per trigger within [`WINDOW`].
pub const RESENDS: usize = 3;
pub const WINDOW: Duration = Duration::from_secs(3600);
/// Verification e-mails to one address within [`DAY`], whoever asks: a first e-mail and the
/// three resends one trigger may have in an hour, and one more.
pub const PER_ADDRESS: usize = 5;
/// Verification e-mails one account may have sent within [`DAY`].
pub const PER_ACCOUNT: usize = 10;
pub const DAY: Duration = Duration::from_secs(24 * 3600);

/// Domains whose mailboxes ignore dots in the local part (`a.nn@gmail.com` is `ann@gmail.com`),
/// and the domain each stands for.
const DOTLESS_DOMAINS: [(&str, &str); 2] = [("gmail.com", "gmail.com"), ("googlemail.com", "gmail.com")];

/// The mailbox an address reaches, for the per-address limit (issue 29 point 5): lower case,
/// without a `+tag` (`ann+1@example.org` is `ann@example.org`: sub-addresses reach one
/// mailbox), and for the domains known to ignore dots, without dots in the local part.
pub fn mailbox(address: &str) -> String {
    let address = address.to_lowercase();
    let Some((local, domain)) = address.rsplit_once('@') else {
        return address;
    };
    let local = local.split_once('+').map_or(local, |(before, _)| before);
    match DOTLESS_DOMAINS.iter().find(|(d, _)| *d == domain) {
        Some((_, canonical)) => format!("{}@{canonical}", local.replace('.', "")),
        None => format!("{local}@{domain}"),
    }
}

/// The key of an e-mail address in the per-address limit: the first 16 bytes of the SHA-256
/// of its [`mailbox`] (a fixed size whatever the address, and no address kept).
pub fn address_key(address: &str) -> Uuid {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(mailbox(address).as_bytes());
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    Uuid::from_bytes(key)
}
/// Why a verification e-mail was refused, and the seconds until it may go (at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The trigger had its [`RESENDS`] within [`WINDOW`].
    Resends(u64),
    /// The destination address had its [`PER_ADDRESS`] within [`DAY`].
    ToAddress(u64),
    /// The account had its [`PER_ACCOUNT`] within [`DAY`].
    OfAccount(u64),
}

/// The limits on verification e-mails, counted in the store's [`Throttles`] (so that every
/// process of one database counts together).
pub struct VerificationLimits {
    throttles: Arc<dyn Throttles>,
}

fn whole_seconds(wait: Duration, window: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.clamp(1, window.as_secs().max(1))
}

impl VerificationLimits {
    pub fn new(throttles: Arc<dyn Throttles>) -> VerificationLimits {
        VerificationLimits { throttles }
    }

    /// Counts the verification e-mail of a new trigger of `owner` to `address`: per address
    /// and per account, both or neither.
    pub async fn first(&self, owner: Uuid, address: &str) -> Result<Result<Taken, Refused>, StoreError> {
        self.take(None, owner, address).await
    }

    /// Counts a resend of `trigger`'s verification e-mail: per trigger, per address and per
    /// account, all or none.
    pub async fn resend(
        &self,
        trigger: Uuid,
        owner: Uuid,
        address: &str,
    ) -> Result<Result<Taken, Refused>, StoreError> {
        self.take(Some(trigger), owner, address).await
    }

    /// Takes back what [`Self::first`] or [`Self::resend`] counted (the e-mail was not queued).
    pub async fn give_back(&self, taken: &Taken) {
        if let Err(e) = self.throttles.give_back(taken).await {
            tracing::warn!("a verification e-mail that was not sent stays counted: {e}");
        }
    }

    async fn take(
        &self,
        trigger: Option<Uuid>,
        owner: Uuid,
        address: &str,
    ) -> Result<Result<Taken, Refused>, StoreError> {
        let per_trigger = trigger.map(|id| Count {
            throttle: Throttle::Resend,
            key: id.into_bytes(),
            most: RESENDS as u32,
            window: WINDOW,
        });
        let counts: Vec<Count> = per_trigger
            .into_iter()
            .chain([
                Count {
                    throttle: Throttle::VerificationsTo,
                    key: address_key(address).into_bytes(),
                    most: PER_ADDRESS as u32,
                    window: DAY,
                },
                Count {
                    throttle: Throttle::VerificationsOf,
                    key: owner.into_bytes(),
                    most: PER_ACCOUNT as u32,
                    window: DAY,
                },
            ])
            .collect();
        Ok(match self.throttles.take(&counts).await? {
            Turn::Counted(taken) => Ok(taken),
            Turn::Wait { throttle, after } => Err(match throttle {
                Throttle::Resend => Refused::Resends(whole_seconds(after, WINDOW)),
                Throttle::VerificationsTo => Refused::ToAddress(whole_seconds(after, DAY)),
                _ => Refused::OfAccount(whole_seconds(after, DAY)),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::throttles::MemoryThrottles;

    fn limits() -> (Arc<MemoryThrottles>, VerificationLimits) {
        let throttles = Arc::new(MemoryThrottles::manual(None));
        (throttles.clone(), VerificationLimits::new(throttles))
    }

    #[tokio::test]
    async fn a_few_resends_per_trigger_in_a_sliding_hour() {
        let (clock, limits) = limits();
        let owner = Uuid::new_v4();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        // different addresses, so that only the per-trigger limit is reached
        for (i, secs) in [0u64, 10, 10].into_iter().enumerate() {
            clock.advance(Duration::from_secs(secs));
            limits
                .resend(a, owner, &format!("{i}@example.org"))
                .await
                .unwrap()
                .expect("allowed");
        }
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            limits.resend(a, owner, "x@example.org").await.unwrap(),
            Err(Refused::Resends(3570)),
            "until the first leaves the hour"
        );
        limits
            .resend(b, owner, "y@example.org")
            .await
            .unwrap()
            .expect("other triggers are not affected");
        clock.advance(Duration::from_secs(3569));
        assert_eq!(
            limits.resend(a, owner, "x@example.org").await.unwrap(),
            Err(Refused::Resends(1))
        );
        clock.advance(Duration::from_secs(1));
        let taken = limits
            .resend(a, owner, "x@example.org")
            .await
            .unwrap()
            .expect("the first left");
        assert!(limits.resend(a, owner, "z@example.org").await.unwrap().is_err());
        limits.give_back(&taken).await;
        limits
            .resend(a, owner, "z@example.org")
            .await
            .unwrap()
            .expect("a resend taken back");
    }

    #[tokio::test]
    async fn per_address_whoever_asks_and_per_account_both_or_neither() {
        let (_, limits) = limits();
        let to = "Ann@Example.org";
        for _ in 0..PER_ADDRESS {
            limits.first(Uuid::new_v4(), to).await.unwrap().expect("allowed");
        }
        assert!(matches!(
            limits.first(Uuid::new_v4(), "ann@example.org").await.unwrap(),
            Err(Refused::ToAddress(_))
        ));
        let owner = Uuid::new_v4();
        for i in 0..PER_ACCOUNT {
            limits
                .first(owner, &format!("{i}@example.org"))
                .await
                .unwrap()
                .expect("allowed");
        }
        assert!(matches!(
            limits.first(owner, "fresh@example.org").await.unwrap(),
            Err(Refused::OfAccount(_))
        ));
        // the refusal counted nothing against the fresh address
        for _ in 0..PER_ADDRESS {
            limits
                .first(Uuid::new_v4(), "fresh@example.org")
                .await
                .unwrap()
                .expect("allowed");
        }
    }

    #[test]
    fn addresses_are_keyed_by_mailbox() {
        assert_eq!(address_key("Ann@Example.org"), address_key("ann@example.org"));
        assert_ne!(address_key("ann@example.org"), address_key("bob@example.org"));
        for (address, mailbox_of) in [
            ("Ann+1@Example.org", "ann@example.org"),
            ("ann+@example.org", "ann@example.org"),
            ("ann+a+b@example.org", "ann@example.org"),
            ("a.nn@example.org", "a.nn@example.org"),
            ("A.n.n+x@GMail.com", "ann@gmail.com"),
            ("a.nn@googlemail.com", "ann@gmail.com"),
            ("\"a@b\"@example.org", "\"a@b\"@example.org"),
            ("no-at-sign", "no-at-sign"),
        ] {
            assert_eq!(mailbox(address), mailbox_of, "{address}");
        }
        assert_eq!(address_key("ann+1@example.org"), address_key("ann+15@example.org"));
    }
}
