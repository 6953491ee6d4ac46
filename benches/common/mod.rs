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

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/throwaway-postgres"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}
