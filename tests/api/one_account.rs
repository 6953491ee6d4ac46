//! One person, one password (spec README decision 18, issue 27 point 3): a passphrase change
//! on either service also changes the other service's account of the same name when the old
//! passphrase opens it too, and revokes its tokens as a change there would; an account whose
//! password is another, or that does not exist, is left alone; the answer is the same.
//! In-process servers: with `PIGEONHOLE_TEST_POSTGRES` (.ci/run) the same tests run on
//! PostgreSQL.

use crate::common;

use common::{Api, Auth, Server};
use serde_json::json;

/// `name` registered on both services with the passwords given, and a token of each.
async fn both(server: &Server, name: &str, inbox_password: &str, scheduler_password: &str) -> (Auth, Auth) {
    server.api.register(name, inbox_password).await.expect_registered();
    server
        .scheduler
        .register(name, scheduler_password)
        .await
        .expect_registered();
    (
        server.api.login_ok(name, inbox_password).await,
        server.scheduler.login_ok(name, scheduler_password).await,
    )
}

/// Whether `password` opens `name`'s account on `api`.
async fn opens(api: &Api, name: &str, password: &str) -> bool {
    match api.login(name, password).await.status {
        204 => true,
        401 => false,
        other => panic!("login answered {other}"),
    }
}

/// The passphrase change of `api`: `POST /account` on the inbox, `POST /` on the scheduler.
async fn change(api: &Api, path: &str, auth: &Auth, old: &str, new: &str) -> u16 {
    api.post(path, auth, &json!({"old-passphrase": old, "new-passphrase": new}))
        .await
        .status
}

#[tokio::test]
async fn a_change_on_either_service_changes_both_when_the_old_password_opens_both() {
    let server = Server::start().await;
    let (inbox_token, scheduler_token) = both(&server, "alice", "old password", "old password").await;
    // on the inbox
    assert_eq!(
        change(&server.api, "/account", &inbox_token, "old password", "new password").await,
        204
    );
    for api in [&server.api, &server.scheduler] {
        assert!(opens(api, "alice", "new password").await);
        assert!(!opens(api, "alice", "old password").await);
    }
    // the scheduler's earlier tokens are revoked as by a change there
    let r = server.scheduler.get("/account", &scheduler_token).await;
    assert_eq!(r.status, 401, "{}", r.text());
    // and back, on the scheduler
    let scheduler_token = server.scheduler.login_ok("alice", "new password").await;
    let inbox_token = server.api.login_ok("alice", "new password").await;
    assert_eq!(
        change(
            &server.scheduler,
            "/",
            &scheduler_token,
            "new password",
            "third password"
        )
        .await,
        204
    );
    for api in [&server.api, &server.scheduler] {
        assert!(opens(api, "alice", "third password").await);
        assert!(!opens(api, "alice", "new password").await);
    }
    let r = server.api.get("/account", &inbox_token).await;
    assert_eq!(r.status, 401, "{}", r.text());
}

#[tokio::test]
async fn an_account_the_old_password_does_not_open_is_left_alone() {
    let server = Server::start().await;
    let (inbox_token, scheduler_token) = both(&server, "bob", "inbox password", "scheduler password").await;
    assert_eq!(
        change(&server.api, "/account", &inbox_token, "inbox password", "new password").await,
        204
    );
    assert!(opens(&server.api, "bob", "new password").await);
    assert!(opens(&server.scheduler, "bob", "scheduler password").await, "unchanged");
    assert!(!opens(&server.scheduler, "bob", "new password").await);
    let r = server.scheduler.get("/account", &scheduler_token).await;
    assert_eq!(r.status, 200, "its tokens still work: {}", r.text());

    // the other way round: the scheduler's change leaves the inbox's other password alone
    assert_eq!(
        change(
            &server.scheduler,
            "/",
            &scheduler_token,
            "scheduler password",
            "fourth password"
        )
        .await,
        204
    );
    assert!(opens(&server.scheduler, "bob", "fourth password").await);
    assert!(opens(&server.api, "bob", "new password").await, "unchanged");

    // a wrong old password changes neither
    let (inbox_token, _) = both(&server, "carol", "same password", "same password").await;
    assert_eq!(
        change(&server.api, "/account", &inbox_token, "wrong password", "new password").await,
        403
    );
    for api in [&server.api, &server.scheduler] {
        assert!(opens(api, "carol", "same password").await);
    }

    // no account of the name on the other service: the change is this service's alone
    server.api.register("dave", "dave password").await.expect_registered();
    let token = server.api.login_ok("dave", "dave password").await;
    assert_eq!(
        change(&server.api, "/account", &token, "dave password", "new password").await,
        204
    );
    assert!(opens(&server.api, "dave", "new password").await);
    assert!(!opens(&server.scheduler, "dave", "new password").await);
}

#[tokio::test]
async fn a_change_with_an_access_key_follows_on_the_scheduler_and_the_key_keeps_working() {
    let server = Server::start().await;
    both(&server, "erin", "old password", "old password").await;
    let token = server.api.login_ok("erin", "old password").await;
    let (secret, _) = server
        .api
        .add_key(
            &token,
            "client",
            &["PermitPostChangePassphrase", "PermitGetAccountInfo"],
        )
        .await;
    let key = Auth::key("erin", &secret);
    assert_eq!(
        change(&server.api, "/account", &key, "old password", "new password").await,
        204
    );
    assert!(opens(&server.scheduler, "erin", "new password").await);
    let r = server.api.get("/account", &key).await;
    assert_eq!(r.status, 200, "access keys stay valid: {}", r.text());
}
