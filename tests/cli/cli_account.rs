//! The account from the command line (issue 27 points 3, 5 and 7) against the real server:
//! `setup` never harms what exists (other machines' keys, the account's zone, a failed run),
//! `password` changes both services, `delete-account` deletes both after one question, and
//! a revoked key reads the same from every command.

use crate::common;

use common::process::{at_a_terminal, failed, run_client, succeeded, Proc, Services};
use common::{Api, Auth};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

/// The client password of the tests (tests/common/process.rs).
const PASSWORD: &str = "correct horse battery staple";

struct Server {
    proc: Proc,
    _data: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

impl Server {
    async fn start() -> Server {
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let proc = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
        Server {
            proc,
            _data: data,
            _logs: logs,
        }
    }

    fn urls(&self) -> [String; 4] {
        [
            "--inbox-url".into(),
            self.proc.api.base.clone(),
            "--scheduler-url".into(),
            self.proc.scheduler.base.clone(),
        ]
    }
}

/// `pigeonhole ARGS` with this "machine's" zone `tz` and standard input `stdin`.
fn client(home: &Path, tz: &str, args: &[&str], stdin: Option<&str>) -> Output {
    run_client(home, args, stdin, &[("TZ", tz)])
}

/// `setup --username NAME <urls> EXTRA` on `home` with the zone `tz`.
fn setup(home: &Path, tz: &str, name: &str, urls: &[String], extra: &[&str]) -> Output {
    let mut args = vec!["setup", "--username", name];
    args.extend(urls.iter().map(String::as_str));
    args.extend_from_slice(extra);
    client(home, tz, &args, None)
}

/// A setting of the client settings file under `home`.
fn setting(home: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(home.join("pigeonhole/client.toml")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
        .map(|v| v.trim_end_matches('"').to_owned())
        .unwrap_or_else(|| panic!("no {key} in\n{text}"))
}

fn set_setting(home: &Path, key: &str, value: &str) {
    let path = home.join("pigeonhole/client.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let old = format!("{key} = \"{}\"", setting(home, key));
    std::fs::write(&path, text.replace(&old, &format!("{key} = \"{value}\""))).unwrap();
}

/// Runs async API calls from the blocking test body, on the test's runtime.
fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(f)
}

fn api(base: &str) -> Api {
    Api::new(base.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_machines_of_one_host_name_keep_each_their_own_key() {
    let server = Server::start().await;
    let urls = server.urls().to_vec();
    let inbox = server.proc.api.base.clone();
    tokio::task::spawn_blocking(move || {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (one, two) = (one.path(), two.path());
        succeeded(&setup(one, "Europe/Zurich", "alice", &urls, &[]));
        succeeded(&setup(two, "Europe/Zurich", "alice", &urls, &[]));
        // both machines work: the second setup did not revoke the first one's key
        for home in [one, two] {
            succeeded(&client(home, "Europe/Zurich", &["inbox"], None));
            succeeded(&client(home, "Europe/Zurich", &["scheduled"], None));
        }
        let (name_one, name_two) = (setting(one, "key-name"), setting(two, "key-name"));
        assert_ne!(name_one, name_two);
        assert!(
            name_one.starts_with("pigeonhole client on ") && name_one.ends_with(')'),
            "{name_one}"
        );

        // machine one's key is lost: a new one replaces it, and only it
        let lost = setting(one, "inbox-key");
        set_setting(one, "inbox-key", &"0".repeat(32));
        let said = succeeded(&setup(one, "Europe/Zurich", "alice", &urls, &[]));
        assert!(
            said.contains("made an access key for this machine on the inbox service")
                && said.contains("revoked this machine's older access key on the inbox service")
                && said.contains("kept this machine's access key on the scheduler service"),
            "{said}"
        );
        assert_eq!(
            setting(one, "key-name"),
            name_one,
            "the name stays with the settings file"
        );
        for home in [one, two] {
            succeeded(&client(home, "Europe/Zurich", &["inbox"], None));
        }
        let inbox = api(&inbox);
        let keys = block(async {
            let token = inbox.login_ok("alice", PASSWORD).await;
            let lost_key = inbox.get("/inbox/items", &Auth::key("alice", &lost)).await.status;
            (inbox.get("/access-key", &token).await.json(), lost_key)
        });
        assert_eq!(keys.1, 401, "the lost key is revoked");
        let names: Vec<&str> = keys
            .0
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["name"].as_str().unwrap())
            .collect();
        assert_eq!(names.iter().filter(|n| **n == name_one).count(), 1, "{names:?}");
        assert_eq!(names.iter().filter(|n| **n == name_two).count(), 1, "{names:?}");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_moves_the_accounts_zone_only_when_asked_and_a_differing_one_is_said_once() {
    let server = Server::start().await;
    let urls = server.urls().to_vec();
    tokio::task::spawn_blocking(move || {
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (one, two) = (one.path(), two.path());
        let said = succeeded(&setup(one, "Europe/Zurich", "alice", &urls, &[]));
        assert!(
            said.contains("set the account's time zone to Europe/Zurich (this machine's"),
            "{said}"
        );
        // a UTC machine set up later leaves it
        let said = succeeded(&setup(two, "UTC", "alice", &urls, &[]));
        assert!(
            said.contains("left the account's time zone at Europe/Zurich; this machine's is UTC"),
            "{said}"
        );
        let zone = serde_json::from_str::<Value>(&succeeded(&client(two, "UTC", &["zone", "--json"], None))).unwrap();
        assert_eq!(zone["name"], "Europe/Zurich");
        // setup said it: the commands do not say it again
        let out = client(two, "UTC", &["scheduled"], None);
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // a command on a machine in another zone says so once
        let out = client(one, "America/New_York", &["scheduled"], None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success()
                && err.contains("this machine's time zone is America/New_York, the account's is Europe/Zurich"),
            "{err}"
        );
        let out = client(one, "America/New_York", &["inbox"], None);
        assert!(
            out.stderr.is_empty(),
            "said once: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // asked: moved
        let said = succeeded(&setup(two, "UTC", "alice", &urls, &["--zone", "Asia/Tokyo"]));
        assert!(
            said.contains("set the account's time zone to Asia/Tokyo (as asked"),
            "{said}"
        );
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_setup_changes_nothing_and_a_wrong_password_reads_as_one() {
    let server = Server::start().await;
    let urls = server.urls().to_vec();
    let (inbox, scheduler) = (server.proc.api.base.clone(), server.proc.scheduler.base.clone());
    tokio::task::spawn_blocking(move || {
        let (inbox, scheduler) = (api(&inbox), api(&scheduler));
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        // bob has a scheduler account with another password: the inbox account this run
        // made is deleted again
        block(scheduler.register("bob", "bob's own password")).expect_registered();
        let err = failed(&setup(home, "UTC", "bob", &urls, &[]));
        assert!(
            err.contains("wrong password for bob on the scheduler service")
                && err.contains("undone, nothing was changed")
                && !err.contains("taken"),
            "{err}"
        );
        assert!(!home.join("pigeonhole/client.toml").exists());
        assert_eq!(
            block(inbox.register("bob", "anything at all")).status,
            204,
            "no inbox account was left"
        );

        // alice exists: a wrong password says so, and nothing is made
        let other = tempfile::tempdir().unwrap();
        succeeded(&setup(other.path(), "UTC", "alice", &urls, &[]));
        let mut args = vec!["setup", "--username", "alice", "--password-stdin"];
        args.extend(urls.iter().map(String::as_str));
        let err = failed(&client(home, "UTC", &args, Some("not her password\n")));
        assert!(
            err.contains("wrong password for alice on the inbox service") && !err.contains("taken"),
            "{err}"
        );
        assert!(!home.join("pigeonhole/client.toml").exists());

        // a zone that does not exist is refused before anything is made
        let err = failed(&setup(home, "UTC", "carol", &urls, &["--zone", "Mars/Olympus"]));
        assert!(err.contains("not a time zone I know"), "{err}");
        assert_eq!(block(inbox.register("carol", "anything at all")).status, 204);

        // a URL without its scheme is taken as http://
        let bare: Vec<String> = urls
            .iter()
            .map(|u| u.trim_start_matches("http://").to_owned())
            .collect();
        succeeded(&setup(home, "UTC", "dave", &bare, &[]));
        assert_eq!(setting(home, "inbox-url"), urls[1]);
        succeeded(&client(home, "UTC", &["inbox"], None));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_password_for_both_services_and_one_question_to_delete_both() {
    let server = Server::start().await;
    let urls = server.urls().to_vec();
    let (inbox, scheduler) = (server.proc.api.base.clone(), server.proc.scheduler.base.clone());
    tokio::task::spawn_blocking(move || {
        let (inbox, scheduler) = (api(&inbox), api(&scheduler));
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        succeeded(&setup(home, "UTC", "alice", &urls, &[]));
        let change = |stdin: &str| client(home, "UTC", &["password", "--password-stdin"], Some(stdin));
        let err = failed(&change("not the password\nnew password here\n"));
        assert!(err.contains("the current password is wrong: nothing changed"), "{err}");
        let err = failed(&change(&format!("{PASSWORD}\nshort\n")));
        assert!(err.contains("at least 8 characters"), "{err}");
        let err = failed(&change(&format!("{PASSWORD}\n          \n")));
        assert!(err.contains("a character other than spaces"), "{err}");
        let said = succeeded(&change(&format!("{PASSWORD}\nnew password here\n")));
        assert!(said.contains("Changed the password on both services"), "{said}");
        for api in [&inbox, &scheduler] {
            assert_eq!(block(api.login("alice", "new password here")).status, 204);
            assert_eq!(block(api.login("alice", PASSWORD)).status, 401);
        }
        succeeded(&client(home, "UTC", &["inbox"], None)); // the keys keep working
        if std::process::Command::new("script").arg("--version").output().is_ok() {
            let said = at_a_terminal(
                home,
                &["password"],
                &[
                    ("Current password: ", "new password here"),
                    ("New password: ", "a third password"),
                    ("again, to be sure: ", "a third passwort"),
                ],
            );
            assert!(said.contains("the two new passwords differ: nothing changed"), "{said}");
            let said = at_a_terminal(
                home,
                &["password", "--json"],
                &[
                    ("Current password: ", "new password here"),
                    ("New password: ", "a third password"),
                    ("again, to be sure: ", "a third password"),
                ],
            );
            assert!(said.contains(r#"{"changed":["inbox","scheduler"]}"#), "{said}");
            // deleting: the username typed, or nothing happens
            let said = at_a_terminal(
                home,
                &["delete-account"],
                &[("Type the username to delete it: ", "alcie")],
            );
            assert!(said.contains("nothing was deleted"), "{said}");
            succeeded(&client(home, "UTC", &["inbox"], None));
            let said = at_a_terminal(
                home,
                &["delete-account"],
                &[("Type the username to delete it: ", "alice")],
            );
            assert!(said.contains("Deleted the account alice on both services"), "{said}");
        } else {
            let err = failed(&client(home, "UTC", &["delete-account"], None));
            assert!(err.contains("give --yes"), "{err}");
            succeeded(&client(home, "UTC", &["delete-account", "--yes"], None));
        }
        assert!(
            !home.join("pigeonhole/client.toml").exists(),
            "the client settings are forgotten"
        );
        for api in [&inbox, &scheduler] {
            assert_eq!(block(api.login("alice", "a third password")).status, 401);
            assert_eq!(block(api.login("alice", "new password here")).status, 401);
        }

        // for scripts: --yes, and without it (and without a terminal) nothing happens
        succeeded(&setup(home, "UTC", "bob", &urls, &[]));
        let err = failed(&client(home, "UTC", &["delete-account"], None));
        assert!(err.contains("give --yes"), "{err}");
        succeeded(&client(home, "UTC", &["inbox"], None));
        let json: Value = serde_json::from_str(&succeeded(&client(
            home,
            "UTC",
            &["delete-account", "--yes", "--json"],
            None,
        )))
        .unwrap();
        assert_eq!(json["deleted"], "bob");
        assert_eq!(block(inbox.login("bob", PASSWORD)).status, 401);
        assert_eq!(block(scheduler.login("bob", PASSWORD)).status, 401);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_reads_the_same_from_every_command() {
    let server = Server::start().await;
    let urls = server.urls().to_vec();
    tokio::task::spawn_blocking(move || {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        succeeded(&setup(home, "UTC", "alice", &urls, &[]));
        set_setting(home, "inbox-key", &"0".repeat(32));
        set_setting(home, "scheduler-key", &"0".repeat(32));
        let expected = "pigeonhole: this machine's access key is no longer valid: run `pigeonhole setup` again";
        let err = failed(&client(home, "UTC", &["add", "buy", "milk"], None));
        assert!(err.starts_with(expected), "{err}");
        for args in [
            &["inbox"][..],
            &["scheduled"],
            &["remind", "x", "--in", "1h"],
            &["trigger", "list"],
            &["key"],
            &["cancel", "abc"],
        ] {
            let err = failed(&client(home, "UTC", args, None));
            assert_eq!(err.trim(), expected, "{args:?}");
        }
    })
    .await
    .unwrap();
}
