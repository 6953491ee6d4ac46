//! The Debian package's postinst (pkg/debian/postinst) says when the service does not start
//! (issue 27 point 7) instead of hiding it behind `|| true`. It runs here with stand-ins on
//! PATH for the commands it calls (systemctl answers as told; the others do nothing) and
//! with its check for a running systemd pointed at a temporary directory: nothing on this
//! machine is touched. pkg/test-deb installs the real package in CI.

use std::path::Path;
use std::process::Command;

/// Runs postinst `args` with systemctl answering `start` with status `start_status` and
/// `is-active` with `state`; its status, standard error and systemctl's calls.
fn postinst(args: &[&str], start_status: u8, state: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let systemd = dir.path().join("run-systemd-system");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&systemd).unwrap();
    let calls = dir.path().join("calls");
    let stub = |name: &str, body: &str| {
        let path = bin.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    for name in ["getent", "groupadd", "useradd", "install", "chown", "chmod", "sleep"] {
        stub(name, "exit 0");
    }
    stub(
        "systemctl",
        &format!(
            "echo \"$*\" >> '{}'\ncase \"$1\" in\n  start|try-restart) exit {start_status} ;;\n  is-active) echo {state}; [ {state} = active ] ;;\n  *) exit 0 ;;\nesac",
            calls.display()
        ),
    );
    let script = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("pkg/debian/postinst"))
        .unwrap()
        .replace("/run/systemd/system", &systemd.display().to_string());
    assert!(
        script.contains(&systemd.display().to_string()),
        "postinst checks for systemd"
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(&script)
        .arg("postinst")
        .args(args)
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&calls).unwrap_or_default(),
    )
}

#[test]
fn a_service_that_does_not_start_is_said_plainly() {
    // first installation, the service ends a moment after its start (a wrong setting)
    let (status, err, calls) = postinst(&["configure", ""], 0, "activating");
    assert_eq!(status, 0, "the package stays configured: {err}");
    assert!(
        err.contains("pigeonhole: the service did not start (activating)")
            && err.contains("journalctl -u pigeonhole")
            && err.contains("/etc/pigeonhole/pigeonhole.toml"),
        "{err}"
    );
    assert!(
        calls.contains("enable pigeonhole.service") && calls.contains("start pigeonhole.service"),
        "{calls}"
    );
    // systemctl start itself fails
    let (status, err, _) = postinst(&["configure", ""], 1, "failed");
    assert_eq!(status, 0);
    assert!(err.contains("the service did not start (failed)"), "{err}");
    // an upgrade whose restart fails
    let (_, err, calls) = postinst(&["configure", "0.1.0"], 1, "failed");
    assert!(err.contains("the service did not start (failed)"), "{err}");
    assert!(calls.contains("try-restart pigeonhole.service"), "{calls}");
}

#[test]
fn a_service_that_starts_is_not_complained_about() {
    let (status, err, _) = postinst(&["configure", ""], 0, "active");
    assert_eq!((status, err.as_str()), (0, ""));
    // an upgrade of a service that was not running: it stays stopped, which is fine
    let (status, err, _) = postinst(&["configure", "0.1.0"], 0, "inactive");
    assert_eq!((status, err.as_str()), (0, ""));
}
