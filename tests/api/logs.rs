//! Logs for machines (issue 12, docs/operations.md): `--log-format json` writes one JSON
//! object per stderr line, and the start is one line with the version and a summary of
//! the settings that never holds a secret. The real binary, as a process.

use crate::common;

use common::process::{free_port, Proc, Services};
use common::scheduler::{tickle, utc_ago, wait_for, wait_for_verification_key_in};
use common::{token_of, Auth};
use serde_json::{json, Value};

const SMTP_PASSWORD: &str = "s3cr3t-smtp-pass";
const PAYMENT_SECRET: &str = "sk_live_very_secret_key";
const PUBLISHABLE_KEY: &str = "pk_live_publishable_key";

/// Every line of `log` as a JSON object (panics on the first that is not one).
fn json_lines(log: &str) -> Vec<Value> {
    let lines: Vec<Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<Value>(l) {
            Ok(v) if v.is_object() => v,
            _ => panic!("not a JSON object per line: {l:?}\nin:\n{log}"),
        })
        .collect();
    assert!(!lines.is_empty(), "no log lines");
    lines
}

/// The start line: the one with the version and the settings summary.
fn start_line(lines: &[Value]) -> &Value {
    let starts: Vec<&Value> = lines.iter().filter(|l| l.get("settings").is_some()).collect();
    assert_eq!(starts.len(), 1, "one start line: {lines:#?}");
    starts[0]
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_and_the_start_line_names_no_secret() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let smtp = format!("smtp://mailer:{SMTP_PASSWORD}@127.0.0.1:{}", free_port());
    // a provider that does not answer: the payments workers fail and log it, in JSON too
    let provider = format!("http://127.0.0.1:{}", free_port());
    let metrics = format!("127.0.0.1:{}", free_port());
    let proc = Proc::start(
        data.path(),
        logs.path(),
        Services::Both,
        &[
            "--log-format",
            "json",
            "--log-level",
            "debug",
            "--smtp-url",
            &smtp,
            "--payment-plan",
            "plan_x",
            "--payment-secret-key",
            PAYMENT_SECRET,
            "--payment-publishable-key",
            PUBLISHABLE_KEY,
            "--payment-api-url",
            &provider,
            "--metrics",
            "--metrics-address",
            &metrics,
        ],
    )
    .await;
    // requests (logged at debug), an unknown path, a failed login
    let auth = proc.api.user("dora").await;
    proc.api.add_text(&auth, "hello").await;
    proc.api.get("/no/such/path", &Auth::None).await.expect_error(404);
    proc.api.login("dora", "wrong").await.expect_error(401);
    let log = proc.log_text();
    proc.stop().await;

    let lines = json_lines(&log);
    let start = start_line(&lines);
    assert_eq!(start["version"], env!("CARGO_PKG_VERSION"), "{start}");
    assert_eq!(start["level"], "INFO");
    let message = start["message"].as_str().unwrap_or_default();
    assert!(message.contains(env!("CARGO_PKG_VERSION")), "{start}");
    let summary = start["settings"].as_str().expect("the summary as a string");
    assert!(summary.contains(&format!("metrics={metrics}")), "{summary}");
    assert!(
        summary.contains("e-mail=smtp://127.0.0.1:") && summary.contains("(with credentials)"),
        "{summary}"
    );
    assert!(summary.contains("payments=on"), "{summary}");
    // no secret anywhere in the log, the summary first
    for secret in [SMTP_PASSWORD, PAYMENT_SECRET, PUBLISHABLE_KEY] {
        assert!(!summary.contains(secret), "{secret} in the summary {summary}");
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    // the request lines are objects with their fields
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "request" && l["status"] == 404 && l["path"] == "/no/such/path"),
        "{log}"
    );
}

#[tokio::test]
async fn the_log_format_comes_from_the_environment_too_and_text_is_the_default() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let proc = Proc::start_adjusted(data.path(), logs.path(), Services::Both, &[], |c| {
        c.env("PIGEONHOLE_LOG_FORMAT", "json");
    })
    .await;
    let log = proc.log_text();
    proc.stop().await;
    assert_eq!(start_line(&json_lines(&log))["version"], env!("CARGO_PKG_VERSION"));

    let data = tempfile::tempdir().unwrap();
    let proc = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let log = proc.log_text();
    proc.stop().await;
    let first = log.lines().find(|l| l.contains("starting")).expect("a start line");
    assert!(
        serde_json::from_str::<Value>(first).is_err(),
        "text by default: {first}"
    );
    assert!(
        first.contains(env!("CARGO_PKG_VERSION")) && first.contains("metrics=off"),
        "{first}"
    );
}

/// No secret in any log line at any level (issue 17): a trace-level run exercises every route
/// that carries a secret (passwords in bodies, tokens, access keys in headers, in logins and in
/// an inbox trigger that the scheduler then uses, e-mail verification keys in both link paths),
/// and the log holds none of them.
#[tokio::test]
async fn a_trace_level_run_logs_no_secret_of_any_route() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let proc = Proc::start(
        data.path(),
        logs.path(),
        Services::Both,
        &["--log-level", "trace", "--looper-period", "1"],
    )
    .await;
    let (inbox, scheduler) = (&proc.api, &proc.scheduler);
    let mut secrets: Vec<String> = Vec::new();

    // the inbox: passwords, tokens, an access key in headers and as a login password
    let first_password = "first-Pa55word-inbox";
    inbox.register("logan", first_password).await.expect_empty(204);
    let login = inbox.login("logan", first_password).await.expect_empty(204);
    let token = token_of(&login);
    let auth = Auth::Bearer(token.clone());
    inbox.add_text(&auth, "a note").await;
    let (key, _) = inbox
        .add_key(&auth, "phone", &["PermitAdd", "PermitSize", "PermitGetItems"])
        .await;
    inbox
        .get("/inbox/size", &Auth::key("logan", &key))
        .await
        .expect_json(200);
    let key_login = inbox.login("logan", &key).await.expect_empty(204);
    let page_token = inbox
        .post(
            "/app/token",
            &Auth::None,
            &json!({"username": "logan", "password": first_password}),
        )
        .await
        .expect_json(200)["token"]
        .as_str()
        .expect("a token")
        .to_owned();
    let second_password = "second-Pa55word-inbox";
    inbox
        .post(
            "/account/change-passphrase",
            &auth,
            &json!({"old-passphrase": first_password, "new-passphrase": second_password}),
        )
        .await
        .expect_empty(204);
    inbox.login("logan", "wrong-Pa55word-inbox").await.expect_error(401);
    secrets.extend([
        first_password.to_owned(),
        second_password.to_owned(),
        "wrong-Pa55word-inbox".to_owned(),
        token,
        token_of(&key_login),
        page_token,
        key.clone(),
    ]);

    // the scheduler: its password and token, an access key, e-mail verification keys in both
    // link paths, and an inbox trigger carrying the inbox access key, used by a delivery
    let scheduler_password = "Pa55word-of-the-scheduler";
    scheduler.register("logan", scheduler_password).await.expect_empty(200);
    let login = scheduler.login("logan", scheduler_password).await.expect_empty(204);
    let s_token = token_of(&login);
    let s_auth = Auth::Bearer(s_token.clone());
    let (s_key, _) = scheduler.add_key(&s_auth, "script", &["PermitGetItems"]).await;
    let s_key_login = scheduler.login("logan", &s_key).await.expect_empty(204);
    secrets.extend([scheduler_password.to_owned(), s_token, token_of(&s_key_login), s_key]);
    let outbox = data.path().join("outbox");
    for (n, verify) in ["page", "link", "api"].into_iter().enumerate() {
        let trigger = scheduler
            .add_email_trigger(&s_auth, &format!("logan{n}@example.org"))
            .await;
        let secret = wait_for_verification_key_in(&outbox, &trigger, 1).await;
        let status = match verify {
            "page" => {
                scheduler
                    .get(&format!("/verify-email/{trigger}/{secret}"), &Auth::None)
                    .await
                    .status
            }
            "link" => {
                scheduler
                    .post_raw(&format!("/verify-email/{trigger}/{secret}"), &Auth::None, None, "")
                    .await
                    .status
            }
            _ => {
                scheduler
                    .post_raw(&format!("/trigger/email/verify/{trigger}/{secret}"), &s_auth, None, "")
                    .await
                    .status
            }
        };
        assert!(status < 400, "verifying by {verify} answered {status}");
        secrets.push(secret);
    }
    let added = scheduler
        .post(
            "/trigger/inbox",
            &s_auth,
            &json!({"addInboxTriggerUrl": inbox.base, "addInboxTriggerUsername": "logan",
                    "addInboxTriggerAccessKey": key}),
        )
        .await
        .expect_json(200);
    assert!(added.get("Right").is_some(), "{added}");
    let (day, time) = utc_ago(60);
    scheduler
        .add_tickle(&s_auth, &tickle("due now", &day, Some(&time), None))
        .await;
    let key_auth = Auth::key("logan", &key);
    wait_for("the delivery into the inbox", || async {
        let size = inbox.get("/inbox/size", &key_auth).await.expect_json(200);
        (size.as_u64() == Some(2)).then_some(())
    })
    .await;

    let log = proc.log_text();
    proc.stop().await;
    assert!(log.contains("TRACE"), "a trace-level log:\n{log}");
    assert!(
        log.contains("/verify-email/"),
        "the verification requests are logged:\n{log}"
    );
    for secret in &secrets {
        assert!(
            !log.contains(secret.as_str()),
            "the secret {secret} is in the log:\n{log}"
        );
    }
}
