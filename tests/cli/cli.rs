//! The command-line client in the same binary (issue 11): from nothing to a reminder in the
//! inbox with `setup`, `add`, `remind` and `inbox`, against the real server.

use crate::common;

use common::process::{at_a_terminal, client_command, failed, run_client, succeeded, Proc, Services};
use serde_json::Value;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `pigeonhole ARGS` with its client settings under `config_home`.
fn client(config_home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    client_with(config_home, args, stdin, &[])
}

/// Like [`client`], with more environment variables.
fn client_with(config_home: &Path, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
    let mut all = vec![("TZ", "UTC")];
    all.extend_from_slice(env);
    run_client(config_home, args, stdin, &all)
}

/// The texts of the inbox items, from `pigeonhole inbox --json`.
fn inbox_texts(config_home: &Path) -> Vec<String> {
    let items: Value = serde_json::from_str(&succeeded(&client(config_home, &["inbox", "--json"], None))).unwrap();
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap().to_owned())
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
            err.contains("no server at http://127.0.0.1:9: is `pigeonhole serve` running?")
                && err.trim().lines().count() == 1,
            "{err}"
        );
        // bad words
        let out = client(&home_path, &["remind", "x", "--in", "soon"], None);
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    })
    .await
    .unwrap();
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&succeeded(out)).unwrap()
}

/// A server and `alice` set up on it (with this machine's zone Europe/Zurich) under `home`.
async fn alice(home: &Path) -> (Proc, tempfile::TempDir, tempfile::TempDir, Vec<String>) {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let urls = vec![
        "--inbox-url".to_string(),
        server.api.base.clone(),
        "--scheduler-url".to_string(),
        server.scheduler.base.clone(),
    ];
    let home = home.to_owned();
    let args = urls.clone();
    tokio::task::spawn_blocking(move || {
        let mut setup = vec!["setup", "--username", "alice"];
        setup.extend(args.iter().map(String::as_str));
        let said = succeeded(&client_with(&home, &setup, None, &[("TZ", "Europe/Zurich")]));
        assert!(
            said.contains("set the account's time zone to Europe/Zurich (this machine's"),
            "{said}"
        );
    })
    .await
    .unwrap();
    (server, data, logs, urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_wants_a_password_a_person_means_and_takes_the_machines_zone() {
    let home = tempfile::tempdir().unwrap();
    let (_server, _data, _logs, urls) = alice(home.path()).await;
    let home = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let with = |extra: &[&str]| {
            let mut args: Vec<&str> = extra.to_vec();
            args.extend(urls.iter().map(String::as_str));
            args.into_iter().map(str::to_owned).collect::<Vec<_>>()
        };
        let other = tempfile::tempdir().unwrap();
        // a new account with a short or empty password is refused, and nothing is made
        for short in ["", "1234567"] {
            let args = with(&["setup", "--username", "bob", "--password-stdin"]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let err = failed(&client(other.path(), &args, Some(&format!("{short}\n"))));
            assert!(err.contains("needs at least 8 characters"), "{err}");
            assert!(!other.path().join("pigeonhole/client.toml").exists());
        }
        let args = with(&[
            "setup",
            "--username",
            "bob",
            "--password-stdin",
            "--zone",
            "America/New_York",
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let said = succeeded(&client(other.path(), &args, Some("eight chars\n")));
        assert!(said.contains("created the account on the inbox service"), "{said}");
        assert!(
            said.contains("set the account's time zone to America/New_York (as asked"),
            "{said}"
        );

        // the zone: shown, changed, refused when unknown
        let shown = succeeded(&client(&home, &["zone"], None));
        assert!(
            shown.starts_with("The account's time zone is Europe/Zurich (UTC+0"),
            "{shown}"
        );
        let json = json_of(&client(&home, &["zone", "Asia/Tokyo", "--json"], None));
        assert_eq!(
            json,
            serde_json::json!({"name": "Asia/Tokyo", "offset": 540, "summer": false})
        );
        let err = failed(&client(&home, &["zone", "Mars/Olympus"], None));
        assert!(err.contains("\"Mars/Olympus\" is not a time zone I know"), "{err}");
        let shown = succeeded(&client(&home, &["zone", "Europe/Zurich"], None));
        assert!(shown.contains("is now Europe/Zurich"), "{shown}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn natural_times_in_the_accounts_zone_and_lists_in_the_order_that_matters() {
    let home = tempfile::tempdir().unwrap();
    let (_server, _data, _logs, _urls) = alice(home.path()).await;
    let home = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let zurich = jiff::tz::TimeZone::get("Europe/Zurich").unwrap();
        let today = zurich.to_datetime(jiff::Timestamp::now()).date();
        let tomorrow = today.tomorrow().unwrap();
        // in the account's zone (Europe/Zurich), not UTC
        let json = json_of(&client(
            &home,
            &["remind", "water", "plants", "--at", "tomorrow 9am", "--json"],
            None,
        ));
        assert_eq!(json["scheduled-day"], tomorrow.to_string());
        assert_eq!(json["scheduled-time"], "09:00:00");
        let due: jiff::Timestamp = json["due"].as_str().unwrap().parse().unwrap();
        assert_eq!(zurich.to_datetime(due).time(), jiff::civil::time(9, 0, 0, 0));
        for at in [
            "9:00",
            "9am",
            "21:30",
            "tomorrow",
            "mon 09:00",
            "next week",
            "3 Dec",
            "Dec 3 2099 10:00",
        ] {
            let said = succeeded(&client(&home, &["remind", "natural", "--at", at], None));
            assert!(said.starts_with("Scheduled "), "{at}: {said}");
        }
        // a moment already past is refused unless --allow-past; today's date alone is not past
        let err = failed(&client(&home, &["remind", "old", "--at", "2020-01-01"], None));
        assert!(err.contains("has passed") && err.contains("--allow-past"), "{err}");
        succeeded(&client(
            &home,
            &["remind", "old", "--at", "2020-01-01", "--allow-past"],
            None,
        ));
        succeeded(&client(&home, &["remind", "today", "--at", &today.to_string()], None));
        let err = failed(&client(&home, &["remind", "x", "--at", "someday"], None));
        assert!(err.contains("try \"9:00\""), "{err}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_lists_next_due_first_with_the_recurrence_in_words() {
    let home = tempfile::tempdir().unwrap();
    let (_server, _data, _logs, _urls) = alice(home.path()).await;
    let home = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        succeeded(&client(&home, &["remind", "far", "--at", "2099-12-01 09:00"], None));
        succeeded(&client(
            &home,
            &["remind", "rent", "--at", "2098-01-01", "--every-month", "--day", "1"],
            None,
        ));
        succeeded(&client(&home, &["remind", "soon", "--in", "2h", "--every", "3d"], None));
        let json = json_of(&client(&home, &["scheduled", "--json"], None));
        let texts: Vec<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["soon", "rent", "far"]);
        assert_eq!(json[0]["repeats"], "every 3 days");
        assert_eq!(json[1]["repeats"], "monthly on the 1st");
        assert_eq!(json[2]["scheduled-time"], "09:00:00");
        let text = succeeded(&client(&home, &["scheduled"], None));
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[0].contains("soon") && lines[0].contains("(every 3 days)"),
            "{text}"
        );
        assert!(
            lines[1].contains("Wed 1 Jan 2098  rent  (monthly on the 1st)"),
            "{text}"
        );
        assert!(lines[2].contains("Tue 1 Dec 2099 09:00  far"), "{text}");
        assert!(!text.contains("repeats"), "{text}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_for_people_and_for_scripts() {
    let home = tempfile::tempdir().unwrap();
    let (_server, _data, _logs, _urls) = alice(home.path()).await;
    let home = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        succeeded(&client(&home, &["add"], Some("shopping\neggs\nflour\n")));
        let long = "x".repeat(200_000);
        succeeded(&client(&home, &["add"], Some(&long)));
        // `add ""` is refused like empty standard input
        let err = failed(&client(&home, &["add", ""], None));
        assert!(err.contains("nothing to add"), "{err}");
        let err = failed(&client(&home, &["add"], Some("")));
        assert!(err.contains("nothing to add"), "{err}");

        let text = succeeded(&client(&home, &["inbox"], None));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(lines[0].ends_with("  shopping (+2 lines)"), "{text}");
        assert!(
            lines[0].contains("  today "),
            "the time in the account's zone, short: {text}"
        );
        assert!(!text.contains('Z'), "no wire timestamps: {text}");
        assert!(
            lines[1].ends_with("x…") && lines[1].chars().count() < 120,
            "{}",
            &lines[1][..100]
        );

        // --json: the text as text
        let json = json_of(&client(&home, &["inbox", "--json"], None));
        assert_eq!(json[0]["text"], "shopping\neggs\nflour");
        assert_eq!(json[0]["type"], "text");
        assert!(json[0]["data"].is_null() && json[0]["contents"].is_null());
        let first = json_of(&client(&home, &["next", "--json"], None));
        assert_eq!(first["text"], "shopping\neggs\nflour");

        // show: the whole note, by the first characters of its id
        let id = json[0]["id"].as_str().unwrap();
        let shown = succeeded(&client(&home, &["show", &id[..6]], None));
        assert!(shown.starts_with("shopping\neggs\nflour\n"), "{shown}");
        let shown = json_of(&client(&home, &["show", id, "--json"], None));
        assert_eq!(shown["text"], "shopping\neggs\nflour");
        let json = json_of(&client(&home, &["remind", "call\nmum", "--in", "1h", "--json"], None));
        let shown = succeeded(&client(&home, &["show", &json["id"].as_str().unwrap()[..8]], None));
        // an hour from now in the account's zone (Zurich): today, or tomorrow late at night
        let zurich = jiff::tz::TimeZone::get("Europe/Zurich").unwrap();
        let now = jiff::Timestamp::now();
        let later = now + jiff::SignedDuration::from_hours(1);
        let day = if zurich.to_datetime(later).date() == zurich.to_datetime(now).date() {
            "due today"
        } else {
            "due tomorrow"
        };
        assert!(shown.starts_with("call\nmum\n") && shown.contains(day), "{shown}");
        let err = failed(&client(&home, &["show", "ffffffff"], None));
        assert!(err.contains("no inbox item or reminder"), "{err}");

        // a reader that goes away ends the command quietly, with status 0
        for command in ["inbox", "scheduled", "triggered", "next"] {
            let mut child = client_command(&home, &[command])
                .env("TZ", "UTC")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            drop(child.stdout.take()); // `| head -0`
            let out = child.wait_with_output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.stderr.is_empty(),
                "{command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_failed_and_what_to_do() {
    let home = tempfile::tempdir().unwrap();
    let (server, _data, _logs, urls) = alice(home.path()).await;
    let inbox_url = server.api.base.clone();
    let home = home.path().to_owned();
    let home2 = home.clone();
    tokio::task::spawn_blocking(move || {
        // a note larger than the server takes
        let big = "x".repeat(20_000_000);
        let err = failed(&client(&home, &["add"], Some(&big)));
        assert!(
            err.contains("the note is 20.0 MB; the server takes at most 16 MiB"),
            "{err}"
        );

        // too many wrong passwords: the wait the server asked for, in words
        let mut args = vec!["setup", "--username", "alice", "--password-stdin"];
        args.extend(urls.iter().map(String::as_str));
        let other = tempfile::tempdir().unwrap();
        let mut said = String::new();
        for _ in 0..12 {
            said = failed(&client(other.path(), &args, Some("not the password\n")));
            if said.contains("too many") {
                break;
            }
        }
        assert!(said.contains("too many attempts: try again in 10 minutes"), "{said}");

        // an access key that no longer works
        let settings = home.join("pigeonhole/client.toml");
        let text = std::fs::read_to_string(&settings).unwrap();
        let line = text.lines().find(|l| l.starts_with("inbox-key")).unwrap();
        std::fs::write(
            &settings,
            text.replace(line, "inbox-key = \"00000000000000000000000000000000\""),
        )
        .unwrap();
        let err = failed(&client(&home, &["inbox"], None));
        assert_eq!(
            err.trim(),
            "pigeonhole: this machine's access key is no longer valid: run `pigeonhole setup` again"
        );
    })
    .await
    .unwrap();
    // no server
    drop(server);
    tokio::task::spawn_blocking(move || {
        let err = failed(&client(&home2, &["scheduled"], None));
        assert!(
            err.contains("no server at http://127.0.0.1:") && err.contains("is `pigeonhole serve` running?"),
            "{err}"
        );
        let _ = inbox_url;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_terminal_a_new_password_is_asked_twice() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no script(1) to give the client a terminal");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let (inbox, scheduler) = (server.api.base.clone(), server.scheduler.base.clone());
    let home = home.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let args = [
            "setup",
            "--username",
            "tina",
            "--inbox-url",
            &inbox,
            "--scheduler-url",
            &scheduler,
        ];
        let said = at_a_terminal(
            &home,
            &args,
            &[("Password: ", "long enough"), ("again, to be sure: ", "long enuogh")],
        );
        assert!(said.contains("the two passwords differ"), "{said}");
        assert!(!home.join("pigeonhole/client.toml").exists());
        let said = at_a_terminal(
            &home,
            &args,
            &[("Password: ", "long enough"), ("again, to be sure: ", "long enough")],
        );
        assert!(said.contains("created the account on the inbox service"), "{said}");
        // the account exists now: its password is asked once
        let said = at_a_terminal(&home, &args, &[("Password: ", "long enough")]);
        assert!(
            said.contains("found the account on the inbox service") && !said.contains("again"),
            "{said}"
        );
    })
    .await
    .unwrap();
}
