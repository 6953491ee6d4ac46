//! What the real binary does with its data directory and settings at start: private file
//! modes, a signing key it refuses to trust, token lifetimes that also end old tokens, and a
//! warning for admin names nobody registered yet (issue 9, spec decision 17).

use crate::common;

use common::process::{Proc, Services};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
}

/// Every entry below `dir`, with its mode.
fn modes(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        out.push((path.display().to_string(), mode(&path)));
        if path.is_dir() {
            out.extend(modes(&path));
        }
    }
    out
}

#[tokio::test]
async fn the_data_directory_and_everything_in_it_are_private() {
    let root = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut server = Proc::start(&data, logs.path(), Services::Both, &[]).await;
    let alice = server.api.user("alice").await;
    server.api.add_text(&alice, "a note").await;
    // an e-mail trigger writes a verification e-mail into the outbox
    let bob = server.scheduler.user("bob").await;
    server
        .scheduler
        .post(
            "/trigger/email",
            &bob,
            &serde_json::json!({"addEmailTrigger": "bob@example.org"}),
        )
        .await
        .expect(200);
    let outbox = data.join("outbox");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&outbox).map_or(true, |d| d.count() == 0) {
        assert!(Instant::now() < deadline, "no e-mail in the outbox");
        tokio::time::sleep(Duration::from_millis(50)).await; // poll
    }
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit().await.success());

    assert_eq!(mode(&data), 0o700);
    let all = modes(&data);
    assert!(all.iter().any(|(p, _)| p.contains("outbox")), "{all:?}");
    for (path, m) in &all {
        let wanted = if Path::new(path).is_dir() { 0o700 } else { 0o600 };
        assert_eq!(*m, wanted, "{path} has mode {m:03o}");
    }
}

#[tokio::test]
async fn an_existing_directory_is_tightened_with_a_warning() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    first.signal(libc::SIGTERM);
    first.wait_exit().await;
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(data.path().join("db"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(data.path().join("notes.txt"), b"left by someone").unwrap();
    std::fs::set_permissions(data.path().join("notes.txt"), std::fs::Permissions::from_mode(0o664)).unwrap();
    let second = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    assert_eq!(mode(data.path()), 0o700);
    assert_eq!(mode(&data.path().join("db")), 0o700);
    assert_eq!(mode(&data.path().join("notes.txt")), 0o600);
    assert!(second.log_text().contains("made private"), "{}", second.log_text());
}

#[tokio::test]
async fn a_signing_key_others_can_read_stops_the_server() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    first.signal(libc::SIGTERM);
    first.wait_exit().await;
    let key = data.path().join("signing.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Proc::try_start(data.path(), logs.path(), Services::Both, &[])
        .await
        .err()
        .expect("the server must not start");
    assert!(err.contains("signing.key") && err.contains("chmod 600"), "{err}");
    // a key of the wrong length, too
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&key, b"short").unwrap();
    let err = Proc::try_start(data.path(), logs.path(), Services::Both, &[])
        .await
        .err()
        .expect("the server must not start");
    assert!(err.contains("5 bytes"), "{err}");
}

#[tokio::test]
async fn a_token_lifetime_also_ends_tokens_issued_without_one() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut first = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let alice = first.api.user("alice").await;
    first.signal(libc::SIGTERM);
    first.wait_exit().await;
    let second = Proc::start(data.path(), logs.path(), Services::Both, &["--token-lifetime", "2"]).await;
    // the old token (no expiry) works until two seconds after it was issued, then never again
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = second.api.get("/inbox/size", &alice).await.status;
        if status == 401 {
            break;
        }
        assert_eq!(status, 200);
        assert!(Instant::now() < deadline, "the old token is still accepted");
        tokio::time::sleep(Duration::from_millis(100)).await; // poll
    }
    let fresh = second.api.login_ok("alice", "alice-password").await;
    second.api.get("/inbox/size", &fresh).await.expect(200);
    second.api.get("/inbox/size", &alice).await.expect_error(401);
}

#[tokio::test]
async fn unregistered_admin_names_are_warned_about() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let mut server = Proc::start(data.path(), logs.path(), Services::Both, &["--admin", "root"]).await;
    let log = server.log_text();
    assert!(
        log.contains("\"root\" is not registered on the inbox service")
            && log.contains("\"root\" is not registered on the scheduler service"),
        "{log}"
    );
    server.api.register("root", "pw").await.expect_empty(204);
    server.signal(libc::SIGTERM);
    server.wait_exit().await;
    let again = Proc::start(data.path(), logs.path(), Services::Both, &["--admin", "root"]).await;
    let log = again.log_text();
    assert!(!log.contains("not registered on the inbox service"), "{log}");
    assert!(log.contains("not registered on the scheduler service"), "{log}");
}

/// A read-only bind mount of `dir` over itself, undone when dropped; `None` (or a panic with
/// PIGEONHOLE_REQUIRE_TOOLS set, as in CI) when this machine cannot mount (not root).
struct ReadOnly(std::path::PathBuf);

impl ReadOnly {
    fn mount(dir: &Path) -> Option<ReadOnly> {
        let ok = std::process::Command::new("mount")
            .args(["--bind", "-o", "ro"])
            .arg(dir)
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("PIGEONHOLE_REQUIRE_TOOLS").is_none(),
                "a read-only bind mount is required (PIGEONHOLE_REQUIRE_TOOLS is set) but failed"
            );
            eprintln!("skipped: cannot make a read-only bind mount here (needs root)");
            return None;
        }
        Some(ReadOnly(dir.to_owned()))
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The server's exit status and stderr when it starts on `data` (and cannot).
fn failed_start(data: &Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"))
        .args([
            "serve",
            "--host",
            "127.0.0.1",
            "--inbox-port",
            "0",
            "--scheduler-port",
            "0",
        ])
        .arg("--data-dir")
        .arg(data)
        .env_remove("PIGEONHOLE_LOG_LEVEL")
        .output()
        .expect("run the binary");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Starting on a read-only file system stops with exit status 1 and a message that names the
/// file it could not write, for a new data directory and for an existing database.
#[tokio::test]
async fn a_read_only_file_system_is_named_in_the_start_error() {
    let mount = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let existing = mount.path().join("existing");
    let mut first = Proc::start(&existing, logs.path(), Services::Both, &[]).await;
    first.signal(libc::SIGTERM);
    first.wait_exit().await;
    let fresh = mount.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o700)).unwrap();
    let Some(_read_only) = ReadOnly::mount(mount.path()) else {
        return;
    };
    let (status, stderr) = failed_start(&fresh);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}", fresh.join("signing.key").display())) && stderr.contains("Read-only"),
        "{stderr}"
    );
    let (status, stderr) = failed_start(&existing);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}", existing.join("pigeonhole.lock").display())) && stderr.contains("Read-only"),
        "{stderr}"
    );
}
