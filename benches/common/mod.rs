//! What several benchmarks share: settings from the environment, and a throwaway
//! PostgreSQL cluster (tools/throwaway-postgres). Each benchmark includes it with
//! `#[path = "common/mod.rs"] mod common;` and uses what it needs.

#![allow(dead_code)]

pub mod due;
pub mod http;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::Command;

type R<T> = Result<T, String>;

/// The number in the environment variable `name` (`_` allowed between digits), else
/// `default`.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The binary under test: `PIGEONHOLE_BIN`, else the release build that `cargo bench` made
/// along with this program.
pub fn binary() -> PathBuf {
    std::env::var_os("PIGEONHOLE_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pigeonhole")), PathBuf::from)
}

/// A throwaway cluster (tools/throwaway-postgres), stopped and removed when dropped.
pub struct Cluster {
    dir: PathBuf,
    admin: String,
}

impl Cluster {
    pub fn start(dir: &Path) -> R<Cluster> {
        Cluster::launch(
            dir,
            Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/throwaway-postgres")),
        )
    }

    /// A cluster started with more server options (`-c name=value …`, added to the tool's
    /// own by `PIGEONHOLE_PG_OPTIONS`).
    pub fn start_with(dir: &Path, options: &str) -> R<Cluster> {
        let mut tool = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/throwaway-postgres"));
        tool.env("PIGEONHOLE_PG_OPTIONS", options);
        Cluster::launch(dir, tool)
    }

    fn launch(dir: &Path, mut tool: Command) -> R<Cluster> {
        let dir = dir.join("cluster");
        let out = tool
            .arg("start")
            .arg(&dir)
            .output()
            .map_err(|e| format!("tools/throwaway-postgres: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "tools/throwaway-postgres start: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let admin = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(Cluster { dir, admin })
    }

    /// A new database; its URL.
    pub fn database(&self, name: &str) -> R<String> {
        self.psql("postgres", &format!("CREATE DATABASE {name}"))?;
        Ok(self.url(name))
    }

    /// The URL of the database `name` (`postgres://postgres@/NAME?host=DIR`).
    pub fn url(&self, name: &str) -> String {
        self.admin.replacen("/postgres?", &format!("/{name}?"), 1)
    }

    /// The directory of the cluster's Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `sql` in the database `db` as the cluster's superuser: its output, unaligned
    /// and without headers (`psql -Atqc`).
    pub fn psql(&self, db: &str, sql: &str) -> R<String> {
        let out = Command::new("psql")
            .args([self.url(db).as_str(), "-Atqc", sql])
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }
}

impl Cluster {
    /// pgbench run on the database `db` with `clients` clients (2 threads at most) for `secs`
    /// seconds, each running the statements of `script` in a loop (prepared): their
    /// transactions per second (without the initial connection time).
    pub fn pgbench(&self, db: &str, clients: usize, secs: u64, script: &Path) -> R<f64> {
        let out = Command::new(pg_program("pgbench")?)
            .args([
                "-h",
                &self.dir.to_string_lossy(),
                "-U",
                "postgres",
                "-n",
                "-M",
                "prepared",
            ])
            .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string()])
            .args(["-T", &secs.to_string(), "-f", &script.to_string_lossy(), db])
            .output()
            .map_err(|e| format!("pgbench: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!("pgbench: {}{text}", String::from_utf8_lossy(&out.stderr)));
        }
        text.lines()
            .find_map(|l| l.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| format!("pgbench said no tps: {text}"))
    }
}

/// A PostgreSQL program, found as tools/throwaway-postgres finds the server's: in
/// `PIGEONHOLE_PG_BIN`, on `PATH`, else in the newest `/usr/lib/postgresql/*/bin`.
fn pg_program(name: &str) -> R<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PIGEONHOLE_PG_BIN")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .collect();
    versions.sort();
    dirs.extend(versions.into_iter().rev().map(|(_, bin)| bin));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} not found (PIGEONHOLE_PG_BIN, PATH, /usr/lib/postgresql/*/bin)"))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/throwaway-postgres"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}
