//! The reminder loop in the command line (issue 27 point 4) against the real server:
//! cancel, edit, snooze and clear by id prefix, the time phrases, yearly repeats, triggers
//! and the capture key for a phone.

use crate::common;

use common::process::{at_a_terminal, failed, run_client, succeeded, Proc, Services};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// A running server with `alice` set up under `home` (her zone Europe/Zurich, as this
/// "machine's" for every command).
struct Alice {
    server: Proc,
    home: tempfile::TempDir,
    data: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

impl Alice {
    async fn new() -> Alice {
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
        let alice = Alice {
            server,
            home,
            data,
            _logs: logs,
        };
        let (inbox, scheduler) = (alice.server.api.base.clone(), alice.server.scheduler.base.clone());
        let home = alice.home.path().to_owned();
        tokio::task::spawn_blocking(move || {
            let args = [
                "setup",
                "--username",
                "alice",
                "--inbox-url",
                &inbox,
                "--scheduler-url",
                &scheduler,
            ];
            succeeded(&run_client(&home, &args, None, &[("TZ", "Europe/Zurich")]));
        })
        .await
        .unwrap();
        alice
    }

    fn home(&self) -> PathBuf {
        self.home.path().to_owned()
    }
}

fn client(home: &Path, args: &[&str]) -> Output {
    run_client(home, args, None, &[("TZ", "Europe/Zurich")])
}

fn json_of(out: &Output) -> Value {
    serde_json::from_str(&succeeded(out)).unwrap()
}

fn list(home: &Path, which: &str) -> Vec<Value> {
    json_of(&client(home, &[which, "--json"])).as_array().unwrap().clone()
}

fn texts(items: &[Value]) -> Vec<String> {
    items.iter().map(|i| i["text"].as_str().unwrap().to_owned()).collect()
}

/// Waits until the reminder `text` has triggered: the triggered copy's id.
fn wait_triggered(home: &Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(item) = list(home, "triggered").iter().find(|i| i["text"] == text) {
            return item["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "{text:?} did not trigger");
        std::thread::sleep(Duration::from_millis(200)); // poll
    }
}

/// Today and tomorrow in Zurich.
fn zurich_days() -> (jiff::civil::Date, jiff::civil::Date) {
    let zurich = jiff::tz::TimeZone::get("Europe/Zurich").unwrap();
    let today = zurich.to_datetime(jiff::Timestamp::now()).date();
    (today, today.tomorrow().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reminders_are_cancelled_edited_snoozed_and_cleared_by_the_beginning_of_their_id() {
    let alice = Alice::new().await;
    let home = alice.home();
    tokio::task::spawn_blocking(move || {
        let (_, tomorrow) = zurich_days();
        let made = json_of(&client(
            &home,
            &[
                "remind",
                "call",
                "mum",
                "--at",
                "tomorrow 9am",
                "--every",
                "3d",
                "--json",
            ],
        ));
        let id = made["id"].as_str().unwrap().to_owned();

        // edit: the text and the time; the repeats move to the new time of day
        let said = succeeded(&client(
            &home,
            &["edit", &id[..6], "--text", "call dad", "--at", "tomorrow at 10"],
        ));
        assert!(
            said.starts_with(&format!(
                "Changed {}: call dad, due tomorrow 10:00, then every 3 days.",
                &id[..8]
            )),
            "{said}"
        );
        let items = list(&home, "scheduled");
        let item = &items[0];
        assert_eq!(item["text"], "call dad");
        assert_eq!(item["scheduled-day"], tomorrow.to_string());
        assert_eq!(item["scheduled-time"], "10:00:00");
        assert_eq!(item["recurrence"]["every-x-days"]["time-of-day"], "10:00:00");
        // the repeat: yearly, then none
        let json = json_of(&client(&home, &["edit", &id[..8], "--every-year", "--json"]));
        assert_eq!(json["repeats"], "yearly");
        assert_eq!(json["recurrence"]["every-x-months"]["months"], 12);
        let json = json_of(&client(&home, &["edit", &id[..8], "--no-repeat", "--json"]));
        assert!(json["recurrence"].is_null(), "{json}");
        assert_eq!(list(&home, "scheduled")[0]["repeats"], Value::Null);
        let err = failed(&client(&home, &["edit", &id[..8]]));
        assert!(err.contains("nothing to change"), "{err}");
        let err = failed(&client(&home, &["edit", "ffffffff", "--text", "x"]));
        assert!(
            err.contains("no scheduled reminder's id starts with \"ffffffff\""),
            "{err}"
        );

        // snooze a scheduled one: moved
        let json = json_of(&client(&home, &["snooze", &id[..8], "--at", "in 3 hours", "--json"]));
        assert_eq!(json["id"], id.as_str());
        let later = list(&home, "scheduled");
        assert_eq!(later.len(), 1);
        assert_eq!(later[0]["scheduled-time"], json["scheduled-time"]);

        // cancel
        let said = succeeded(&client(&home, &["cancel", &id[..8]]));
        assert!(
            said.starts_with(&format!("Cancelled {}: call dad (was due ", &id[..8])),
            "{said}"
        );
        assert!(list(&home, "scheduled").is_empty());

        // a triggered one: snoozed = scheduled again, the triggered copy goes
        succeeded(&client(&home, &["remind", "water", "plants", "--in", "1s"]));
        let triggered_id = wait_triggered(&home, "water plants");
        let err = failed(&client(&home, &["cancel", &triggered_id[..8]]));
        assert!(
            err.contains("has already triggered") && err.contains("pigeonhole snooze"),
            "{err}"
        );
        let json = json_of(&client(
            &home,
            &["reschedule", &triggered_id[..8], "--in", "2h", "--json"],
        ));
        assert_eq!(json["triggered-id"], triggered_id.as_str());
        assert!(list(&home, "triggered").is_empty(), "the triggered copy is gone");
        let scheduled = list(&home, "scheduled");
        assert_eq!(texts(&scheduled), ["water plants"]);
        assert_eq!(scheduled[0]["id"], json["id"]);
        assert!(scheduled[0]["recurrence"].is_null());

        // clear: one by id, then all (asked at a terminal; --yes for scripts)
        for text in ["one", "two", "three"] {
            succeeded(&client(&home, &["remind", text, "--in", "1s"]));
        }
        let one = ["three", "two", "one"].map(|t| wait_triggered(&home, t))[2].clone();
        let said = succeeded(&client(&home, &["clear", &one[..8]]));
        assert!(said.starts_with("Cleared ") && said.contains(": one."), "{said}");
        let err = failed(&client(&home, &["clear"]));
        assert!(err.contains("give --yes"), "{err}");
        assert_eq!(list(&home, "triggered").len(), 2, "nothing cleared without a yes");
        let err = failed(&client(&home, &["clear", &scheduled[0]["id"].as_str().unwrap()[..8]]));
        assert!(err.contains("has not triggered yet"), "{err}");
        if script_available() {
            let said = at_a_terminal(&home, &["clear"], &[("Delete all 2 triggered reminders? [y/N] ", "n")]);
            assert!(said.contains("nothing was done"), "{said}");
            assert_eq!(list(&home, "triggered").len(), 2);
            let said = at_a_terminal(&home, &["clear"], &[("Delete all 2 triggered reminders? [y/N] ", "y")]);
            assert!(said.contains("Cleared 2 triggered reminders."), "{said}");
        } else {
            succeeded(&client(&home, &["clear", "--yes"]));
        }
        assert!(list(&home, "triggered").is_empty());
        assert_eq!(
            texts(&list(&home, "scheduled")),
            ["water plants"],
            "scheduled ones stay"
        );
        let said = succeeded(&client(&home, &["clear", "--yes"]));
        assert!(said.contains("Nothing has triggered"), "{said}");
    })
    .await
    .unwrap();
}

fn script_available() -> bool {
    std::process::Command::new("script").arg("--version").output().is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phrases_people_say_and_yearly_reminders() {
    let alice = Alice::new().await;
    let home = alice.home();
    tokio::task::spawn_blocking(move || {
        let zurich = jiff::tz::TimeZone::get("Europe/Zurich").unwrap();
        let (today, tomorrow) = zurich_days();
        let remind = |at: &[&str]| {
            let mut args = vec!["remind", "x", "--json"];
            args.extend_from_slice(at);
            json_of(&client(&home, &args))
        };
        let due = |json: &Value| json["due"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
        let now = jiff::Timestamp::now();
        for (args, hours) in [
            (&["--at", "in 2 hours"][..], 2.0),
            (&["--in", "2 hours"][..], 2.0),
            (&["--in", "1.5h"][..], 1.5),
            (&["--in", "2H"][..], 2.0),
            (&["--in", "90m"][..], 1.5),
        ] {
            let json = remind(args);
            // to the second: the due moment has no fraction, `now` has
            let ahead = due(&json).duration_since(now).as_secs_f64() / 3600.0;
            assert!((hours - 0.001..hours + 0.05).contains(&ahead), "{args:?}: {json}");
        }
        let json = remind(&["--at", "tomorrow at 9"]);
        assert_eq!(
            (json["scheduled-day"].as_str().unwrap(), json["scheduled-time"].as_str()),
            (tomorrow.to_string().as_str(), Some("09:00:00"))
        );
        let json = remind(&["--at", "next month"]);
        assert_eq!(
            json["scheduled-day"],
            today.checked_add(jiff::Span::new().months(1)).unwrap().to_string()
        );
        assert!(json["scheduled-time"].is_null());
        let json = remind(&["--at", "1st of december"]);
        assert!(json["scheduled-day"].as_str().unwrap().ends_with("-12-01"), "{json}");
        // tonight: today at 20:00 in the account's zone, refused once that has passed
        let out = client(&home, &["remind", "x", "--at", "tonight", "--json"]);
        let eight = today
            .at(20, 0, 0, 0)
            .to_zoned_datetime(zurich.clone())
            .unwrap()
            .timestamp();
        if jiff::Timestamp::now() < eight {
            assert_eq!(json_of(&out)["scheduled-time"], "20:00:00");
        } else {
            assert!(String::from_utf8_lossy(&out.stderr).contains("which has passed"));
        }
        // yearly: --every 1y and --every-year are 12 months
        let json = remind(&["--at", "3 Dec 2099", "--every", "1y"]);
        assert_eq!(json["repeats"], "yearly");
        assert_eq!(json["recurrence"]["every-x-months"]["months"], 12);
        let json = remind(&["--at", "29 feb 2096", "--every-year"]);
        assert_eq!(
            json["recurrence"]["every-x-months"]["day"], 29,
            "a leap day comes back on the 29th"
        );
        // refusals say what is wrong and what works
        let err = failed(&client(&home, &["remind", "foo"]));
        assert!(err.contains("--in") && err.contains("--at"), "{err}");
        let err = failed(&client(&home, &["remind", "foo", "--in", "1.5d"]));
        assert!(err.contains("not a duration") && err.contains("1.5h"), "{err}");
        let err = failed(&client(&home, &["remind", "foo", "--at", "tomorrow at 25"]));
        assert!(err.contains("\"25\" is not a day or a time"), "{err}");
        let err = failed(&client(&home, &["remind", "foo", "--in", "1h", "--every", "2h"]));
        assert!(err.contains("whole days, weeks, months or years"), "{err}");
    })
    .await
    .unwrap();
}

/// The verification key of the latest e-mail in the server's outbox that names `trigger`.
fn verification_key(data: &Path, trigger: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let outbox = data.join("outbox");
        for entry in std::fs::read_dir(&outbox).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path())
                .unwrap_or_default()
                .replace("=\r\n", "")
                .replace("=\n", "");
            if let Some((_, rest)) = text.split_once(&format!("{trigger}/")) {
                let key: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
                if key.len() == 32 {
                    return key;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "no verification e-mail for {trigger} in {}",
            outbox.display()
        );
        std::thread::sleep(Duration::from_millis(200)); // poll
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_from_the_command_line() {
    let alice = Alice::new().await;
    let home = alice.home();
    let data = alice.data.path().to_owned();
    let inbox_url = alice.server.api.base.clone();
    tokio::task::spawn_blocking(move || {
        // setup's trigger into the inbox
        let triggers = json_of(&client(&home, &["trigger", "list", "--json"]));
        assert_eq!(
            triggers,
            serde_json::json!([{"id": triggers[0]["id"], "kind": "inbox", "url": inbox_url}])
        );
        let json = json_of(&client(&home, &["trigger", "add", "email", "me@example.org", "--json"]));
        let id = json["id"].as_str().unwrap().to_owned();
        let text = succeeded(&client(&home, &["trigger", "list"]));
        assert!(
            text.contains(&format!("{}  email    me@example.org (not verified yet", &id[..8])),
            "{text}"
        );
        assert!(text.contains("  inbox    http://127.0.0.1:"), "{text}");
        let err = failed(&client(&home, &["trigger", "verify", &id[..8], &"0".repeat(32)]));
        assert!(err.contains("not the key"), "{err}");
        let key = verification_key(&data, &id);
        let said = succeeded(&client(&home, &["trigger", "verify", &id[..8], &key]));
        assert!(said.contains("Verified me@example.org"), "{said}");
        let triggers = json_of(&client(&home, &["trigger", "list", "--json"]));
        assert_eq!(triggers[1]["verified"], true);
        let said = succeeded(&client(&home, &["trigger", "delete", &id[..8]]));
        assert!(
            said.contains("Deleted trigger") && said.contains("me@example.org"),
            "{said}"
        );
        assert_eq!(
            json_of(&client(&home, &["trigger", "list", "--json"]))
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let err = failed(&client(&home, &["trigger", "delete", "ffff"]));
        assert!(err.contains("no trigger's id starts with \"ffff\""), "{err}");
    })
    .await
    .unwrap();
}

/// Needs the scheduler's `POST /trigger/webhook` (scheduler.md §6.5): fails on a server
/// without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_add_ntfy_and_webhook_then_list_and_delete() {
    let alice = Alice::new().await;
    let home = alice.home();
    tokio::task::spawn_blocking(move || {
        let said = succeeded(&client(
            &home,
            &["trigger", "add", "ntfy", "http://127.0.0.1:9/my-topic"],
        ));
        assert!(
            said.contains("Added ntfy trigger") && said.contains("http://127.0.0.1:9/my-topic"),
            "{said}"
        );
        let json = json_of(&client(
            &home,
            &[
                "trigger",
                "add",
                "webhook",
                "http://127.0.0.1:9/message?token=secret",
                "--format",
                "json",
                "--json",
            ],
        ));
        assert_eq!(json["url"], "http://127.0.0.1:9/message?…");
        let triggers = json_of(&client(&home, &["trigger", "list", "--json"]));
        let hooks: Vec<&Value> = triggers
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "webhook")
            .collect();
        assert_eq!(hooks.len(), 2, "{triggers}");
        assert_eq!(hooks[0]["format"], "text");
        assert_eq!(hooks[1]["format"], "json");
        let text = succeeded(&client(&home, &["trigger", "list"]));
        assert!(text.contains("webhook  http://127.0.0.1:9/my-topic (text)"), "{text}");
        assert!(!text.contains("secret"), "the token is never shown: {text}");
        succeeded(&client(
            &home,
            &["trigger", "delete", &json["id"].as_str().unwrap()[..8]],
        ));
        let triggers = json_of(&client(&home, &["trigger", "list", "--json"]));
        assert_eq!(triggers.as_array().unwrap().len(), 2, "{triggers}");
    })
    .await
    .unwrap();
}

/// The terminal's half-block QR code as modules (`true` = dark), read back with rqrr.
fn read_qr(drawn: &str) -> String {
    let lines: Vec<Vec<char>> = drawn.lines().map(|l| l.chars().collect()).collect();
    let width = lines.iter().map(Vec::len).max().unwrap();
    let height = lines.len() * 2;
    // light modules are drawn: a space is dark
    let dark = |x: usize, y: usize| -> bool {
        let c = lines[y / 2].get(x).copied().unwrap_or(' ');
        !matches!((c, y % 2), ('█', _) | ('▀', 0) | ('▄', 1))
    };
    let scale = 4;
    let mut image = rqrr::PreparedImage::prepare_from_greyscale(width * scale, height * scale, |x, y| {
        if dark(x / scale, y / scale) {
            0
        } else {
            255
        }
    });
    let grids = image.detect_grids();
    assert_eq!(grids.len(), 1, "one QR code:\n{drawn}");
    grids[0].decode().expect("a readable QR code").1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_key_for_a_phone_with_its_command_and_qr_code() {
    let alice = Alice::new().await;
    let home = alice.home();
    let inbox_url = alice.server.api.base.clone();
    let port = inbox_url.rsplit(':').next().unwrap().to_owned();
    tokio::task::spawn_blocking(move || {
        // the address as "the phone" reaches it, without a scheme
        let out = client(&home, &["key", "--name", "my phone", "--url", &format!("localhost:{port}")]);
        let said = succeeded(&out);
        let curl = said.lines().find(|l| l.starts_with("curl ")).unwrap().to_owned();
        assert_eq!(
            curl,
            format!(
                "curl -H 'Username: alice' -H 'Access-Key: {}' --data-binary 'buy milk' http://localhost:{port}/inbox/text",
                curl.split("Access-Key: ").nth(1).unwrap().split('\'').next().unwrap()
            )
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("a phone cannot reach"), "a loopback address is named");
        // the QR code is the command
        let qr: String = said
            .lines()
            .skip_while(|l| !l.starts_with("curl "))
            .skip(2)
            .take_while(|l| !l.is_empty() && l.chars().all(|c| matches!(c, ' ' | '▀' | '▄' | '█')))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(read_qr(&qr), curl);
        // the command works, and the key only adds
        let ran = std::process::Command::new("sh")
            .args(["-c", &curl.replace("'buy milk'", "'from the phone'")])
            .output()
            .unwrap();
        assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
        let inbox = json_of(&client(&home, &["inbox", "--json"]));
        assert_eq!(inbox[0]["text"], "from the phone");
        let json = json_of(&client(&home, &["key", "--json"]));
        assert_eq!(json["name"], "phone");
        let secret = json["key"].as_str().unwrap();
        assert!(json["curl"].as_str().unwrap().contains(secret));
        let listed = std::process::Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Username: alice"])
            .args(["-H", &format!("Access-Key: {secret}"), &format!("{inbox_url}/inbox/items")])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&listed.stdout), "401", "the key may only add");
    })
    .await
    .unwrap();
}
