//! One store test suite for every engine (issue 21): each scenario takes a concern's trait
//! object and asserts what the trait promises, whatever stands behind it. The sled store
//! runs it here; the PostgreSQL store runs the same functions in its own tests (against a
//! throwaway cluster). Concerns join as their PostgreSQL implementations do.

use super::{Accounts, Registration};
use crate::domain::account::{AccessKey, Account, KeySecret, PasswordHash};
use crate::domain::permissions::Permissions;
use crate::domain::wire::{new_uuid, Timestamp};
use std::sync::Arc;

/// Every field of an account, to compare (the domain type has no equality of its own).
fn fields(a: &Account) -> (uuid::Uuid, &str, &PasswordHash, Timestamp, Option<Timestamp>, u64) {
    (a.id, &a.username, &a.password_hash, a.created, a.last_login, a.epoch)
}

type KeyFields = (uuid::Uuid, String, Timestamp, u64, u32, KeySecret);

/// Every field of an access key, to compare.
fn key_fields(k: &AccessKey) -> KeyFields {
    (
        k.id,
        k.name.clone(),
        k.created,
        k.seq,
        k.permissions.0,
        k.secret.clone(),
    )
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix(secs, 123_456_789)
}

/// Registering, finding, logins, passwords and their epochs, customers, access keys, and
/// exactly one winner among concurrent registrations of one username.
pub(crate) async fn accounts(accounts: Arc<dyn Accounts>) {
    let registered = accounts
        .register("alice", "hash-1".into(), at(10))
        .await
        .expect("register");
    let alice = match registered.durable().await.expect("durable") {
        Registration::Created(a) => a,
        Registration::Taken => panic!("a fresh store has no alice"),
    };
    assert_eq!(alice.username, "alice");
    assert_eq!(alice.created, at(10), "nanoseconds kept");
    let again = accounts
        .register("alice", "hash-2".into(), at(11))
        .await
        .expect("register");
    assert!(!again.changed());
    assert!(matches!(again.durable().await.expect("durable"), Registration::Taken));
    let got = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(fields(&got), fields(&alice));
    let found = accounts.by_username("alice").await.expect("find").expect("alice");
    assert_eq!(fields(&found), fields(&alice));
    assert!(
        accounts.by_username("Alice").await.expect("find").is_none(),
        "case counts"
    );
    assert!(accounts.get(new_uuid()).await.expect("get").is_none());

    // logins and passwords
    assert!(accounts
        .set_last_login(alice.id, at(20))
        .await
        .expect("login")
        .durable()
        .await
        .expect("durable"));
    assert!(!accounts
        .set_last_login(new_uuid(), at(20))
        .await
        .expect("login")
        .durable()
        .await
        .expect("durable"));
    let alice = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(alice.last_login, Some(at(20)));
    let stale = PasswordHash::Pbkdf2("not the hash".into());
    assert!(!accounts
        .change_password(alice.id, &stale, "hash-3".into())
        .await
        .expect("change")
        .durable()
        .await
        .expect("durable"));
    assert!(accounts
        .change_password(alice.id, &alice.password_hash, "hash-3".into())
        .await
        .expect("change")
        .durable()
        .await
        .expect("durable"));
    let changed = accounts.get(alice.id).await.expect("get").expect("alice");
    assert_eq!(changed.password_hash, PasswordHash::Pbkdf2("hash-3".into()));
    assert_eq!(changed.epoch, alice.epoch + 1, "a new credential epoch");

    // the payment customer
    assert_eq!(accounts.customer(alice.id).await.expect("customer"), None);
    assert!(accounts
        .set_customer(alice.id, "cus_1")
        .await
        .expect("set")
        .durable()
        .await
        .expect("durable"));
    assert_eq!(
        accounts.customer(alice.id).await.expect("customer").as_deref(),
        Some("cus_1")
    );

    // access keys
    let s1 = accounts.next_key_seq().await.expect("seq");
    let s2 = accounts.next_key_seq().await.expect("seq");
    assert!(s2 > s1, "{s1} then {s2}");
    let key = |name: &str, seq, secret| AccessKey {
        id: new_uuid(),
        name: name.into(),
        created: at(30),
        seq,
        permissions: Permissions(0b1011),
        secret,
    };
    let first = key("first", s1, KeySecret::Digest([1; 32]));
    let second = key("second", s2, KeySecret::Digest([2; 32]));
    for k in [&second, &first] {
        assert!(accounts
            .add_access_key(alice.id, k)
            .await
            .expect("add")
            .durable()
            .await
            .expect("durable"));
    }
    assert!(!accounts
        .add_access_key(new_uuid(), &key("nobody's", s2 + 1, KeySecret::Digest([3; 32])))
        .await
        .expect("add")
        .durable()
        .await
        .expect("durable"));
    let listed: Vec<KeyFields> = accounts
        .access_keys(alice.id)
        .await
        .expect("keys")
        .iter()
        .map(key_fields)
        .collect();
    assert_eq!(
        listed,
        vec![key_fields(&first), key_fields(&second)],
        "in order of creation"
    );
    let got = accounts
        .access_key(alice.id, second.id)
        .await
        .expect("key")
        .expect("the key");
    assert_eq!(key_fields(&got), key_fields(&second));
    assert!(
        accounts.access_key(new_uuid(), second.id).await.expect("key").is_none(),
        "only the owner's"
    );
    let (owner, found) = accounts
        .access_key_by_digest(&[2; 32])
        .await
        .expect("by digest")
        .expect("found");
    assert_eq!((owner, key_fields(&found)), (alice.id, key_fields(&second)));
    assert!(accounts
        .access_key_by_digest(&[9; 32])
        .await
        .expect("by digest")
        .is_none());
    assert!(accounts.legacy_access_keys(alice.id).await.expect("legacy").is_empty());
    assert!(accounts
        .delete_access_key(alice.id, first.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    assert!(!accounts
        .delete_access_key(alice.id, first.id)
        .await
        .expect("delete")
        .durable()
        .await
        .expect("durable"));
    let listed: Vec<KeyFields> = accounts
        .access_keys(alice.id)
        .await
        .expect("keys")
        .iter()
        .map(key_fields)
        .collect();
    assert_eq!(listed, vec![key_fields(&second)]);

    // twelve registrations of one name at once: exactly one account
    let racing: Vec<_> = (0..12)
        .map(|i| {
            let accounts = accounts.clone();
            tokio::spawn(async move {
                let written = accounts
                    .register("bob", format!("hash-{i}"), at(40))
                    .await
                    .expect("register");
                written.durable().await.expect("durable")
            })
        })
        .collect();
    let mut created = 0;
    for r in racing {
        created += usize::from(matches!(r.await.expect("task"), Registration::Created(_)));
    }
    assert_eq!(created, 1);
    let mut names: Vec<String> = accounts
        .all()
        .await
        .expect("all")
        .into_iter()
        .map(|a| a.username)
        .collect();
    names.sort();
    assert_eq!(names, ["alice", "bob"]);
}

#[cfg(test)]
mod sled {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn accounts_on_sled() {
        let dir = tempfile::tempdir().expect("a directory");
        let store = crate::store::Store::open(dir.path()).expect("open");
        accounts(store.inbox.accounts.clone()).await;
    }
}
