//! What several benchmarks share: settings from the environment, and a throwaway
//! PostgreSQL cluster (tools/throwaway-postgres). Each benchmark includes it with
//! `#[path = "common/mod.rs"] mod common;` and uses what it needs.

#![allow(dead_code)]

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

/// A throwaway cluster (tools/throwaway-postgres), stopped and removed when dropped.
pub struct Cluster {
    dir: PathBuf,
    admin: String,
}

impl Cluster {
    pub fn start(dir: &Path) -> R<Cluster> {
        let dir = dir.join("cluster");
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tools/throwaway-postgres"))
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
        let out = Command::new("psql")
            .args([self.admin.as_str(), "-qc", &format!("CREATE DATABASE {name}")])
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(self.admin.replacen("/postgres?", &format!("/{name}?"), 1))
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
