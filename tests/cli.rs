//! The command-line client in the same binary (issue 11): from nothing to a reminder in the
//! inbox with `setup`, `add`, `remind` and `inbox`, against the real server.

mod common;

use common::process::{client_command, succeeded, Proc, Services};
use serde_json::Value;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `pigeonhole ARGS` with its client settings under `config_home`.
fn client(config_home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = client_command(config_home, args);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("run the client");
    if let Some(input) = stdin {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("the client ends")
}

/// The texts of the inbox items, from `pigeonhole inbox --json`.
fn inbox_texts(config_home: &Path) -> Vec<String> {
    use base64::Engine;
    let items: Value = serde_json::from_str(&succeeded(&client(config_home, &["inbox", "--json"], None))).unwrap();
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let data = i["contents"]["data"].as_str().unwrap();
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(data).unwrap()).unwrap()
        })
        .collect()
}

/// `setup`, `add`, `remind --in 2s`, and the reminder arrives in `inbox`.
fn from_nothing_to_a_reminder(config_home: &Path, setup_urls: &[&str]) {
    let mut args = vec!["setup", "--username", "alice"];
    args.extend_from_slice(setup_urls);
    let said = succeeded(&client(config_home, &args, None));
    assert!(said.contains("created the account on the inbox service"), "{said}");
    assert!(said.contains("linked the scheduler to the inbox"), "{said}");
    assert!(said.contains("--registration closed"), "{said}");
    let settings = config_home.join("pigeonhole/client.toml");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&settings).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !std::fs::read_to_string(&settings).unwrap().contains("battery"),
        "no password stored"
    );

    succeeded(&client(config_home, &["add", "buy", "milk"], None));
    succeeded(&client(config_home, &["add"], Some("from standard input\n")));
    let said = succeeded(&client(config_home, &["remind", "call", "mum", "--in", "2s"], None));
    assert!(said.contains("Scheduled"), "{said}");
    let scheduled = succeeded(&client(config_home, &["scheduled"], None));
    assert!(scheduled.contains("call mum"), "{scheduled}");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let texts = inbox_texts(config_home);
        if texts.contains(&"call mum".to_string()) {
            assert_eq!(texts[..2], ["buy milk".to_string(), "from standard input".to_string()]);
            break;
        }
        assert!(Instant::now() < deadline, "the reminder did not arrive: {texts:?}");
        std::thread::sleep(Duration::from_millis(200)); // poll
    }
    let triggered = succeeded(&client(config_home, &["triggered"], None));
    assert!(
        triggered.contains("call mum") && triggered.contains("in the inbox"),
        "{triggered}"
    );

    // processing the inbox one item at a time
    let first = succeeded(&client(config_home, &["next"], None));
    assert!(first.starts_with("buy milk"), "{first}");
    assert!(succeeded(&client(config_home, &["done"], None)).contains("Done: buy milk"));
    assert_eq!(inbox_texts(config_home).len(), 2);

    // running setup again is safe: it finds everything and keeps this machine's keys
    let again = succeeded(&client(config_home, &args, None));
    assert!(again.contains("found the account on the scheduler service"), "{again}");
    assert!(
        again.contains("kept this machine's access key on the inbox service"),
        "{again}"
    );
    assert!(
        again.contains("found the scheduler's trigger into the inbox"),
        "{again}"
    );
    assert_eq!(inbox_texts(config_home).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_a_reminder_against_the_local_default_server() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    // the client's defaults: the services on this machine's default ports
    let server = Proc::start_on_ports(data.path(), logs.path(), (8001, 8002), &[]).await;
    let home_path = home.path().to_owned();
    tokio::task::spawn_blocking(move || from_nothing_to_a_reminder(&home_path, &[]))
        .await
        .unwrap();
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_and_a_reminder_against_a_server_given_by_url() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let (inbox, scheduler) = (server.api.base.clone(), server.scheduler.base.clone());
    let home_path = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        from_nothing_to_a_reminder(&home_path, &["--inbox-url", &inbox, "--scheduler-url", &scheduler])
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_one_line_and_a_failure_status() {
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        // no settings yet
        let out = client(&home_path, &["inbox"], None);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.starts_with("pigeonhole: no client settings") && err.trim().lines().count() == 1,
            "{err}"
        );
        // a server that is not there
        let out = client(
            &home_path,
            &[
                "setup",
                "--username",
                "bob",
                "--inbox-url",
                "http://127.0.0.1:9",
                "--scheduler-url",
                "http://127.0.0.1:9",
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            err.contains("cannot reach the inbox service") && err.trim().lines().count() == 1,
            "{err}"
        );
        // bad words
        let out = client(&home_path, &["remind", "x", "--in", "soon"], None);
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await
    .unwrap();
}
