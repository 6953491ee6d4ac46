//! A throwaway PostgreSQL cluster for tests: `initdb` in a temporary directory, `pg_ctl start`
//! listening only on a Unix socket in that directory (no TCP port, nothing shared with the
//! machine), `fsync` and `synchronous_commit` on (durable means committed, as in production),
//! a fresh database per test, and `pg_ctl stop -m immediate` when the [`Cluster`] is dropped.
//!
//! Self-contained (std and tempfile only): the library's own tests include this same file
//! (`src/store/postgres/tests.rs`), so there is one cluster helper, not two.
//!
//! Finding PostgreSQL: `PIGEONHOLE_PG_BIN` (a directory holding `initdb`, `pg_ctl`,
//! `createdb`), else `initdb` on `PATH`, else the newest `/usr/lib/postgresql/*/bin` (where
//! Debian's `postgresql` package puts it, off `PATH`). When there is none the tests that need
//! it are skipped with a loud message, unless `PIGEONHOLE_REQUIRE_POSTGRES=1` (CI), when they
//! fail (docs/decisions.md, "Storage engines").
//!
//! PostgreSQL refuses to run as root: when the tests run as root (CI, containers) `initdb`,
//! `pg_ctl` and so the server run as an unprivileged user through `runuser -u USER`
//! (`PIGEONHOLE_PG_USER`, default `nobody`), and the temporary directory is handed to that
//! user. The tests themselves (root) still reach the socket and remove the directory.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// A running throwaway cluster; stopped (immediately) and removed on drop.
pub struct Cluster {
    bin: PathBuf,
    /// The user the server runs as when the tests run as root.
    run_as: Option<String>,
    dir: tempfile::TempDir,
    next_db: AtomicU32,
    /// The loopback TCP port of a cluster that also serves TLS ([`Cluster::start_with_tls_or_skip`]).
    tls_port: Option<u16>,
}

/// Where the PostgreSQL programs are, if anywhere.
pub fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PIGEONHOLE_PG_BIN").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return dir.join("initdb").is_file().then_some(dir);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let initdb = dir.join("initdb");
            if initdb.is_file() {
                // `/usr/local/bin/initdb` may be a link into the real bin directory, where
                // pg_ctl and createdb are too.
                let real = std::fs::canonicalize(&initdb).unwrap_or(initdb);
                let real_dir = real.parent().map(Path::to_path_buf).unwrap_or(dir.clone());
                if real_dir.join("pg_ctl").is_file() && real_dir.join("createdb").is_file() {
                    return Some(real_dir);
                }
                if dir.join("pg_ctl").is_file() && dir.join("createdb").is_file() {
                    return Some(dir);
                }
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Whether a missing PostgreSQL fails the tests rather than skipping them.
pub fn required() -> bool {
    std::env::var("PIGEONHOLE_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
}

/// The uid and gid of `user` from /etc/passwd.
fn ids_of(user: &str) -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next() != Some(user) {
            return None;
        }
        let uid = fields.nth(1)?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some((uid, gid))
    })
}

fn check(what: &str, out: std::io::Result<Output>) -> Result<Output, String> {
    let out = out.map_err(|e| format!("{what}: cannot run: {e}"))?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl Cluster {
    /// A new cluster, or `None` (after a loud message on stderr) when PostgreSQL is not
    /// installed and not required. Panics when it is required but missing, or when it is
    /// there but cannot be started.
    pub fn start_or_skip(test: &str) -> Option<Cluster> {
        Cluster::start_or_skip_with(test, false)
    }

    /// As [`Cluster::start_or_skip`], and the server also listens on 127.0.0.1 (a free port,
    /// [`Cluster::tls_port`]) with TLS on, its certificate self-signed for `localhost` and
    /// 127.0.0.1 (made with the `openssl` program, which Debian's PostgreSQL depends on).
    pub fn start_with_tls_or_skip(test: &str) -> Option<Cluster> {
        Cluster::start_or_skip_with(test, true)
    }

    fn start_or_skip_with(test: &str, tls: bool) -> Option<Cluster> {
        let Some(bin) = find_bin() else {
            if required() {
                panic!("{test}: PIGEONHOLE_REQUIRE_POSTGRES=1 but no PostgreSQL (initdb) was found");
            }
            eprintln!(
                "\n*** SKIPPED {test}: PostgreSQL (initdb) not found on PATH, in /usr/lib/postgresql/*/bin \
                 or PIGEONHOLE_PG_BIN; install Debian's `postgresql` package (CI sets \
                 PIGEONHOLE_REQUIRE_POSTGRES=1 to make this a failure) ***\n"
            );
            return None;
        };
        match Cluster::start(bin, tls) {
            Ok(c) => Some(c),
            Err(e) => panic!("{test}: cannot start a throwaway PostgreSQL cluster: {e}"),
        }
    }

    /// A temporary directory the cluster's user can use, and that user (as root); an
    /// empty cluster of it, not started.
    fn empty(bin: PathBuf) -> Result<Cluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("pg")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        // The owner of a directory we just made is our effective user.
        let me = std::fs::metadata(dir.path()).map_err(|e| e.to_string())?.uid();
        // As root, the cluster's user must reach the directory: under /tmp (world-searchable),
        // wherever TMPDIR points (it may be under root's own home). Short, too, as a Unix
        // socket's path must be (at most 107 bytes).
        let dir = if me == 0 && !dir.path().starts_with("/tmp/") {
            tempfile::Builder::new()
                .prefix("pg")
                .tempdir_in("/tmp")
                .map_err(|e| format!("temporary directory in /tmp: {e}"))?
        } else {
            dir
        };
        let run_as = if me == 0 {
            let user = std::env::var("PIGEONHOLE_PG_USER").unwrap_or_else(|_| "nobody".into());
            let (uid, gid) = ids_of(&user).ok_or_else(|| format!("no user {user:?} to run PostgreSQL as"))?;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
            Some(user)
        } else {
            None
        };
        Ok(Cluster {
            bin,
            run_as,
            dir,
            next_db: AtomicU32::new(0),
            tls_port: None,
        })
    }

    fn start(bin: PathBuf, tls: bool) -> Result<Cluster, String> {
        // pg_stat_statements (contrib, in Debian's package) when there: tests count the
        // statements of an operation with it
        let preload = match bin.join("../lib/pg_stat_statements.so").exists() {
            true => "shared_preload_libraries = 'pg_stat_statements'\n",
            false => "",
        };
        let mut cluster = Cluster::empty(bin)?;
        let data = cluster.data_dir();
        // --no-sync: the cluster's own files at creation need no fsync (a throwaway);
        // the server itself runs with fsync on.
        check(
            "initdb",
            cluster
                .command("initdb")
                .arg("-D")
                .arg(&data)
                .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
                .output(),
        )?;
        // in postgresql.conf rather than on the command line, so that a test may still change
        // a setting with ALTER SYSTEM
        let settings = format!(
            "\n# throwaway test cluster (tests/common/postgres.rs)\nlisten_addresses = ''\n\
             unix_socket_directories = '{}'\nfsync = on\nsynchronous_commit = on\nmax_connections = 100\n{preload}",
            cluster.socket_dir().display()
        );
        let settings = if tls {
            // a free loopback port (the race with another program taking it meanwhile is
            // small and fails the start loudly)
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("a free port: {e}"))?
                .port();
            cluster.tls_port = Some(port);
            check(
                "openssl",
                cluster
                    .user_command(Path::new("openssl"))
                    .args([
                        "req",
                        "-x509",
                        "-newkey",
                        "rsa:2048",
                        "-nodes",
                        "-days",
                        "2",
                        "-subj",
                        "/CN=localhost",
                    ])
                    .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
                    .arg("-keyout")
                    .arg(data.join("server.key"))
                    .arg("-out")
                    .arg(data.join("server.crt"))
                    .output(),
            )?;
            settings.replace("listen_addresses = ''", "listen_addresses = '127.0.0.1'")
                + &format!("port = {port}\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        } else {
            settings
        };
        {
            use std::io::Write;
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(data.join("postgresql.conf"))
                .map_err(|e| format!("postgresql.conf: {e}"))?;
            conf.write_all(settings.as_bytes())
                .map_err(|e| format!("postgresql.conf: {e}"))?;
        }
        let started = cluster
            .command("pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(cluster.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "start"])
            .stdin(Stdio::null())
            // pg_ctl leaves the server holding its output: do not wait on a pipe
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl: cannot run: {e}"))?;
        if !started.success() {
            let log = std::fs::read_to_string(cluster.dir.path().join("server.log")).unwrap_or_default();
            return Err(format!("pg_ctl start failed ({started}):\n{log}"));
        }
        Ok(cluster)
    }

    /// One of PostgreSQL's programs, as the cluster's user.
    fn command(&self, program: &str) -> Command {
        self.user_command(&self.bin.join(program))
    }

    /// `program` (a path, or a name looked up on PATH), as the cluster's user.
    fn user_command(&self, program: &Path) -> Command {
        let mut c = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(program);
                c
            }
            None => Command::new(program),
        };
        // the programs must not look for a home or a locale of the user they run as
        c.env("HOME", self.dir.path())
            .env("LC_ALL", "C")
            .current_dir(self.dir.path());
        c
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The loopback port on which a cluster started with TLS takes TCP connections.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The port in the name of the Unix socket (`.s.PGSQL.<port>`).
    pub fn port(&self) -> u16 {
        self.tls_port.unwrap_or(5432)
    }

    /// The directory holding the server's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The superuser's URL of database `db` (over the Unix socket).
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@/{db}?host={}&port={}",
            self.socket_dir().display(),
            self.port()
        )
    }

    /// The admin URL, as `PIGEONHOLE_TEST_POSTGRES` takes it.
    pub fn admin_url(&self) -> String {
        self.url("postgres")
    }

    /// A fresh, empty database; its name ([`Cluster::url`] makes its URL).
    pub fn fresh_database(&self) -> String {
        let name = format!("test{}", self.next_db.fetch_add(1, Ordering::SeqCst));
        let out = check(
            "createdb",
            self.command("createdb")
                .arg("-h")
                .arg(self.socket_dir())
                .args(["-p", &self.port().to_string(), "-U", "postgres", &name])
                .output(),
        );
        if let Err(e) = out {
            panic!("{e}");
        }
        name
    }

    /// Runs `sql` with `psql` in database `db`; its output (unaligned, tuples only).
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = check(
            "psql",
            self.command("psql")
                .arg("-h")
                .arg(self.socket_dir())
                .args([
                    "-U",
                    "postgres",
                    "-d",
                    db,
                    "-X",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    sql,
                ])
                .output(),
        )?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), started, on a Unix socket
    /// of its own in its own temporary directory; stopped and removed on drop like any.
    pub fn standby(&self) -> Result<Cluster, String> {
        let standby = Cluster::empty(self.bin.clone())?;
        check(
            "pg_basebackup",
            standby
                .command("pg_basebackup")
                .arg("-h")
                .arg(self.socket_dir())
                .args([
                    "-p",
                    &self.port().to_string(),
                    "-U",
                    "postgres",
                    "-R",
                    "-X",
                    "stream",
                    // a checkpoint at once, not spread over minutes
                    "-c",
                    "fast",
                    "-D",
                ])
                .arg(standby.data_dir())
                .output(),
        )?;
        {
            use std::io::Write;
            let mut conf = std::fs::OpenOptions::new()
                .append(true)
                .open(standby.data_dir().join("postgresql.conf"))
                .map_err(|e| format!("postgresql.conf: {e}"))?;
            writeln!(
                conf,
                "\n# the standby's own socket\nunix_socket_directories = '{}'",
                standby.socket_dir().display()
            )
            .map_err(|e| format!("postgresql.conf: {e}"))?;
        }
        standby.start_again()?;
        Ok(standby)
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`, as a crash or a pulled plug):
    /// its clients' connections break and new ones are refused until
    /// [`Cluster::start_again`] (which recovers from the WAL).
    pub fn stop_now(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"])
    }

    /// Promotes a standby to primary (`pg_ctl promote`, waiting for it).
    pub fn promote(&self) -> Result<(), String> {
        self.pg_ctl(&["-w", "-t", "60", "promote"])
    }

    /// Stops the server (`pg_ctl stop -m fast`); [`Cluster::start_again`] starts it again.
    pub fn stop(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "fast", "-w", "stop"])
    }

    /// Starts the stopped server again (same data, same socket).
    pub fn start_again(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log");
        self.pg_ctl(&["-l", &log.display().to_string(), "-w", "-t", "60", "start"])
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let status = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(args)
            .stdin(Stdio::null())
            // pg_ctl leaves the server holding its output: do not wait on a pipe
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("pg_ctl: cannot run: {e}"))?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("pg_ctl {args:?} failed ({status}):\n{}", self.log())),
        }
    }

    /// The server's processes: the postmaster (first line of `postmaster.pid`) and every
    /// process whose parent it is (the backends and helpers), this cluster's only.
    pub fn processes(&self) -> Vec<i32> {
        let Ok(pid_file) = std::fs::read_to_string(self.data_dir().join("postmaster.pid")) else {
            return Vec::new();
        };
        let Some(postmaster) = pid_file.lines().next().and_then(|l| l.trim().parse::<i32>().ok()) else {
            return Vec::new();
        };
        let mut all = vec![postmaster];
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            // /proc/PID/stat: "pid (comm) state ppid …"; comm may hold spaces, not ')'
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if parent == Some(postmaster) {
                all.push(pid);
            }
        }
        all
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
