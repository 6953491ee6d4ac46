//! The real `pigeonhole` binary as a child process (crash and delivery tests): started on
//! free ports with a data directory, signalled, and killed (SIGKILL) when dropped while
//! still running.

use super::{Api, PASS_WAIT};
use pigeonhole::domain::worker::Worker;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
/// The standard output of a command that must have succeeded; else the test fails showing
/// its status and both outputs.
#[track_caller]
pub fn succeeded(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// The resident memory of process `pid` in KiB (`VmRSS` of /proc/<pid>/status).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

/// Which services the process runs; `api` talks to the first one listed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Services {
    /// Both; `api` is the inbox service.
    Both,
    /// Only the scheduler (`--no-inbox`); `api` is the scheduler service.
    SchedulerOnly,
}

pub struct Proc {
    pub child: Child,
    pub api: Api,
    /// The scheduler service.
    pub scheduler: Api,
    log: PathBuf,
}

impl Proc {
    /// Starts `pigeonhole serve --data-dir <data_dir> --password-iterations 1000 <extra>` on
    /// free ports (the caller's `PIGEONHOLE_*` variables removed, but the log level) and
    /// waits until `GET /pricing` answers.
    pub async fn start(data_dir: &Path, log_dir: &Path, services: Services, extra: &[&str]) -> Proc {
        Proc::start_under(&[], data_dir, log_dir, services, extra).await
    }

    /// Like [`Proc::start`], run by `wrapper` (a program and its arguments, such as
    /// `strace -o FILE`, followed by the binary and its arguments); empty: the binary itself.
    pub async fn start_under(
        wrapper: &[&str],
        data_dir: &Path,
        log_dir: &Path,
        services: Services,
        extra: &[&str],
    ) -> Proc {
        match Proc::try_start_under(wrapper, None, data_dir, log_dir, services, extra, &|_| {}).await {
            Ok(proc) => proc,
            Err(log) => panic!("the pigeonhole binary does not start:\n{log}"),
        }
    }

    /// [`Proc::start`], but a server that does not start (say, because its database does
    /// not open) is an `Err` with the log of its last attempt rather than a panic.
    pub async fn try_start(
        data_dir: &Path,
        log_dir: &Path,
        services: Services,
        extra: &[&str],
    ) -> Result<Proc, String> {
        Proc::try_start_under(&[], None, data_dir, log_dir, services, extra, &|_| {}).await
    }

    /// Like [`Proc::start`], on the given ports (inbox, scheduler) instead of free ones.
    pub async fn start_on_ports(data_dir: &Path, log_dir: &Path, ports: (u16, u16), extra: &[&str]) -> Proc {
        match Proc::try_start_under(&[], Some(ports), data_dir, log_dir, Services::Both, extra, &|_| {}).await {
            Ok(proc) => proc,
            Err(log) => panic!("the pigeonhole binary does not start on ports {ports:?}:\n{log}"),
        }
    }

    /// Like [`Proc::start`], with `adjust` applied to the command before it is spawned.
    pub async fn start_adjusted(
        data_dir: &Path,
        log_dir: &Path,
        services: Services,
        extra: &[&str],
        adjust: impl Fn(&mut Command),
    ) -> Proc {
        match Proc::try_start_under(&[], None, data_dir, log_dir, services, extra, &adjust).await {
            Ok(proc) => proc,
            Err(log) => panic!("the pigeonhole binary does not start:\n{log}"),
        }
    }

    async fn try_start_under(
        wrapper: &[&str],
        ports: Option<(u16, u16)>,
        data_dir: &Path,
        log_dir: &Path,
        services: Services,
        extra: &[&str],
        adjust: &dyn Fn(&mut Command),
    ) -> Result<Proc, String> {
        let mut last_log = String::new();
        for attempt in 0..5 {
            let (inbox_port, scheduler_port) = ports.unwrap_or_else(|| (free_port(), free_port()));
            let log = log_dir.join(format!("server-{scheduler_port}-{attempt}.log"));
            let binary = env!("CARGO_BIN_EXE_pigeonhole");
            let mut command = match wrapper.split_first() {
                Some((program, args)) => {
                    let mut c = Command::new(program);
                    c.args(args).arg(binary);
                    c
                }
                None => Command::new(binary),
            };
            command
                .arg("serve")
                .arg("--data-dir")
                .arg(data_dir)
                .args(["--host", "127.0.0.1", "--password-iterations", "1000"])
                .args(["--scheduler-port", &scheduler_port.to_string()]);
            let port = match services {
                Services::Both => {
                    command.args(["--inbox-port", &inbox_port.to_string()]);
                    inbox_port
                }
                Services::SchedulerOnly => {
                    command.arg("--no-inbox");
                    scheduler_port
                }
            };
            command
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("create the log file"));
            for (name, _) in std::env::vars() {
                if name.starts_with("PIGEONHOLE_") && name != "PIGEONHOLE_LOG_LEVEL" {
                    command.env_remove(name);
                }
            }
            adjust(&mut command);
            let child = command.spawn().expect("start the pigeonhole binary");
            let mut proc = Proc {
                child,
                api: Api::new(format!("http://127.0.0.1:{port}")),
                scheduler: Api::new(format!("http://127.0.0.1:{scheduler_port}")),
                log,
            };
            if proc.wait_ready().await {
                return Ok(proc);
            }
            // most likely a port was taken meanwhile: try other ports
            last_log = proc.log_text();
            eprintln!("server did not start (attempt {attempt}):\n{last_log}");
        }
        Err(last_log)
    }

    /// `true` once `GET /pricing` answers 200; `false` if the process exited first.
    async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.child.try_wait().expect("poll the child").is_some() {
                return false;
            }
            if let Ok(r) = self.api.http.get(self.api.url("/pricing")).send().await {
                if r.status().as_u16() == 200 {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await; // poll
        }
        panic!("the server did not answer within a minute:\n{}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Like `Server::settle` for the binary, which must run with `--log-level trace`: waits
    /// until each of `workers` in turn has logged the end of a pass that started after the
    /// previous one's (the first: after this call) with no delivery in flight. The workers
    /// are not woken from outside: each takes up to its period.
    pub async fn settle(&self, workers: &[Worker]) {
        for &worker in workers {
            let name = worker.name();
            let log = self.log_text();
            let started = log.lines().rev().find_map(|l| pass_line(l, name, "starts pass "));
            let started = started.map_or(0, |(n, _)| n);
            let deadline = Instant::now() + PASS_WAIT;
            loop {
                let log = self.log_text();
                let mut finished = log.lines().filter_map(|l| pass_line(l, name, "finished pass "));
                if finished.any(|(n, line)| n > started && line.ends_with("; 0 deliveries in flight")) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "worker {name} logged no finished pass after pass {started} within {PASS_WAIT:?} \
                     (is the binary at --log-level trace?):\n{log}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await; // poll
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A `kB` line of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …) in KiB.
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("read /proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field).and_then(|v| v.strip_prefix(':')))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"))
    }

    /// SIGTERM, then waits for the exit (asserting status 0).
    pub async fn stop(mut self) {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit().await;
        assert!(
            status.success(),
            "the server exited with {status}:\n{}",
            self.log_text()
        );
    }

    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id() as libc::pid_t;
        #[expect(
            unsafe_code,
            reason = "std's Child::kill sends only SIGKILL; the tests also send SIGTERM"
        )]
        // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
    }

    pub fn kill_9(&self) {
        self.signal(libc::SIGKILL);
    }

    /// Waits (at most a minute) for the process to exit.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("poll the child") {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // poll
        }
        panic!("the server did not exit within a minute:\n{}", self.log_text());
    }
}

/// The pass number of a worker's `trace` line `worker <name> <what><n>…`, with the line.
fn pass_line<'a>(line: &'a str, name: &str, what: &str) -> Option<(u64, &'a str)> {
    let (_, rest) = line.split_once(&format!("worker {name} {what}"))?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((digits.parse().ok()?, line))
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `pigeonhole ARGS` as the client, with its settings under `config_home`, the password of
/// the client tests and none of the caller's `PIGEONHOLE_*` client settings.
pub fn client_command(config_home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
    command
        .args(args)
        .env("XDG_CONFIG_HOME", config_home)
        .env("PIGEONHOLE_PASSWORD", "correct horse battery staple")
        .env_remove("PIGEONHOLE_CLIENT_CONFIG")
        .env_remove("PIGEONHOLE_INBOX_URL")
        .env_remove("PIGEONHOLE_SCHEDULER_URL")
        .env_remove("PIGEONHOLE_USERNAME");
    command
}

/// Runs the client `pigeonhole ARGS` ([`client_command`]) with `env` added, `stdin` written
/// to it (then closed), and its output.
pub fn run_client(
    config_home: &Path,
    args: &[&str],
    stdin: Option<&str>,
    env: &[(&str, &str)],
) -> std::process::Output {
    use std::process::Stdio;
    let mut command = client_command(config_home, args);
    command.envs(env.iter().copied());
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

/// The one line on standard error of a client command that failed with status 1.
#[track_caller]
pub fn failed(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout: {}\nstderr: {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    err
}

/// Runs `pigeonhole ARGS` at a terminal (util-linux `script` gives it one), answering each
/// prompt in `answers` once it appears; its output.
pub fn at_a_terminal(config_home: &Path, args: &[&str], answers: &[(&str, &str)]) -> String {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let command = std::iter::once(env!("CARGO_BIN_EXE_pigeonhole").to_string())
        .chain(args.iter().map(|a| format!("'{a}'")))
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("XDG_CONFIG_HOME", config_home)
        .env("TZ", "UTC")
        .env_remove("PIGEONHOLE_PASSWORD")
        .env_remove("PIGEONHOLE_CLIENT_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script(1)");
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (prompt, answer) in answers {
        while !seen.contains(prompt) {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&String::from_utf8_lossy(&chunk)),
                Err(_) => panic!("no prompt {prompt:?}: {seen}"),
            }
        }
        seen = seen.replacen(prompt, "", 1);
        stdin.write_all(format!("{answer}\n").as_bytes()).unwrap();
    }
    while let Ok(chunk) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(stdin);
    let _ = child.wait();
    seen
}
