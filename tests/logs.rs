//! Logs for machines (issue 12, docs/operations.md): `--log-format json` writes one JSON
//! object per stderr line, and the start is one line with the version and a summary of
//! the settings that never holds a secret. The real binary, as a process.

mod common;

use common::process::{free_port, Proc, Services};
use common::Auth;
use serde_json::Value;

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
