//! Every file of examples/ runs against a real server, so the scripts people copy keep
//! working: the shell scripts (curl), the Python client (standard library), the server
//! configuration and the systemd unit (`systemd-analyze verify`).
//!
//! Needs sh, curl, base64, GNU date and python3 (and systemd-analyze for the unit; without it
//! that test is skipped unless PIGEONHOLE_REQUIRE_TOOLS=1, which `.ci/run` sets).

use crate::common;

use common::process::{Proc, Services};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

/// A running server with `alice` set up by `pigeonhole setup`; client settings under `home`.
struct Setup {
    _server: Proc,
    home: tempfile::TempDir,
    _data: tempfile::TempDir,
    _logs: tempfile::TempDir,
}

impl Setup {
    async fn new() -> Setup {
        let data = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
        let out = Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
            .args(["setup", "--username", "alice", "--inbox-url", &server.api.base])
            .args(["--scheduler-url", &server.scheduler.base])
            .env("XDG_CONFIG_HOME", home.path())
            .env("PIGEONHOLE_PASSWORD", "a password of eight or more")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Setup {
            _server: server,
            home,
            _data: data,
            _logs: logs,
        }
    }

    /// Runs `program args` in examples/ with the client settings, and `stdin`.
    fn run(&self, program: &str, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(examples())
            .env("XDG_CONFIG_HOME", self.home.path())
            .env("PIGEONHOLE_OFFLINE_FILE", self.home.path().join("offline.json"))
            .env_remove("PIGEONHOLE_CLIENT_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    #[track_caller]
    fn ok(&self, program: &str, args: &[&str], stdin: &str) -> String {
        let out = self.run(program, args, stdin);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}\nstdout: {}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The inbox's texts, through the command-line client.
    fn inbox(&self) -> Vec<String> {
        let out = Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
            .args(["inbox", "--json"])
            .env("XDG_CONFIG_HOME", self.home.path())
            .output()
            .unwrap();
        let items: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // `--json` gives text items' text as text (docs/cli.md)
        items
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["text"].as_str().unwrap().to_owned())
            .collect()
    }

    fn wait_for_inbox(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.inbox().iter().any(|t| t == text) {
            assert!(Instant::now() < deadline, "{text:?} did not arrive: {:?}", self.inbox());
            std::thread::sleep(Duration::from_millis(200)); // poll
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shell_scripts_capture_remind_process_and_digest() {
    let s = Setup::new().await;
    tokio::task::spawn_blocking(move || {
        // the digest below schedules reminders for the UTC day's last seconds: in its last
        // two minutes they would come due while the test runs, so start in the next day
        let seconds_of_day = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                % 86_400
        };
        if seconds_of_day() >= 86_280 {
            std::thread::sleep(Duration::from_secs(86_400 - seconds_of_day() + 1));
            // until the day turns
        }
        s.ok("./capture.sh", &["buy", "milk"], "");
        s.ok("./capture.sh", &[], "a note with \"quotes\" & ümlauts\nand two lines\n");
        assert_eq!(
            s.inbox(),
            ["buy milk", "a note with \"quotes\" & ümlauts\nand two lines"]
        );

        // a reminder two seconds from now comes back into the inbox
        let due = s.ok("./remind.sh", &["2 seconds", "call", "mum"], "");
        assert!(due.trim().trim_matches('"').len() == 36, "a UUID: {due}");
        s.wait_for_inbox("call mum");

        // the digest: the inbox and what is scheduled today
        s.ok("./remind.sh", &["today 23:59:59", "late", "today"], "");
        // made out of order, listed in the order they come due
        for (at, text) in [
            ("23:59:57", "third"),
            ("23:59:55", "first"),
            ("23:59:58", "fourth"),
            ("23:59:56", "second"),
        ] {
            s.ok("./remind.sh", &[&format!("today {at}"), text], "");
        }
        let digest = s.ok("./daily-digest.sh", &[], "");
        assert!(digest.contains("Inbox: 3 item(s)."), "{digest}");
        assert!(digest.contains("  - buy milk"), "{digest}");
        assert!(digest.contains("  - 23:59:59 late today"), "{digest}");
        let due: Vec<&str> = digest
            .lines()
            .skip_while(|l| !l.starts_with("Due today"))
            .skip(1)
            .collect();
        assert!(
            due == [
                "  - 23:59:55 first",
                "  - 23:59:56 second",
                "  - 23:59:57 third",
                "  - 23:59:58 fourth",
                "  - 23:59:59 late today"
            ],
            "{digest}"
        );

        // processing: keep the first, done with the second, quit
        let said = s.ok("./process-inbox.sh", &[], "k\nd\nq\n");
        assert!(
            said.contains("---- 1 of 3 ----") && said.contains("kept.") && said.contains("done."),
            "{said}"
        );
        assert_eq!(s.inbox(), ["buy milk", "call mum"]);

        // without credentials: a clear message and status 2
        let out = Command::new("./capture.sh")
            .arg("x")
            .current_dir(examples())
            .env("XDG_CONFIG_HOME", "/nonexistent")
            .env_remove("PIGEONHOLE_INBOX_URL")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no credentials"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_keeps_an_offline_copy_in_sync() {
    let s = Setup::new().await;
    tokio::task::spawn_blocking(move || {
        s.ok("./capture.sh", &["from", "the", "server"], "");
        // offline: nothing reaches the server until the sync
        s.ok("python3", &["pigeonhole_client.py", "add", "written", "offline"], "");
        assert_eq!(s.inbox(), ["from the server"]);
        let synced = s.ok("python3", &["pigeonhole_client.py", "sync"], "");
        assert!(synced.contains("synced: 2 item(s)"), "{synced}");
        assert_eq!(s.inbox(), ["from the server", "written offline"]);
        let listed = s.ok("python3", &["pigeonhole_client.py", "list"], "");
        assert!(
            listed.contains("from the server") && listed.contains("written offline"),
            "{listed}"
        );
        // done offline, then gone from the server at the next sync
        let id = listed
            .lines()
            .find(|l| l.contains("from the server"))
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .to_owned();
        s.ok("python3", &["pigeonhole_client.py", "done", &id[..8]], "");
        s.ok("python3", &["pigeonhole_client.py", "sync"], "");
        assert_eq!(s.inbox(), ["written offline"]);
        // syncing again changes nothing
        let again = s.ok("python3", &["pigeonhole_client.py", "sync"], "");
        assert!(again.contains("synced: 1 item(s) (was 1)"), "{again}");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_example_configuration_starts_a_server() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let config = examples().join("pigeonhole.toml");
    // the flags Proc adds (data dir, ports) override the file's
    let server = Proc::start(
        data.path(),
        logs.path(),
        Services::Both,
        &["--config", config.to_str().unwrap()],
    )
    .await;
    server.api.get("/pricing", &common::Auth::None).await.expect(200);
    assert!(server.log_text().contains("inbox service listening"));
}

#[test]
fn the_systemd_unit_verifies() {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("PIGEONHOLE_REQUIRE_TOOLS").is_none(),
            "systemd-analyze is required (PIGEONHOLE_REQUIRE_TOOLS is set) but not installed"
        );
        eprintln!("SKIPPED: systemd-analyze is not installed (apt-get install systemd)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(examples().join("pigeonhole.service")).unwrap();
    // verify checks that ExecStart's program exists: point it at the binary under test
    let unit = unit.replace("/usr/local/bin/pigeonhole", env!("CARGO_BIN_EXE_pigeonhole"));
    let path = dir.path().join("pigeonhole.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}
