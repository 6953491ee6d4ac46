//! The command-line client's settings: where the services are and this machine's
//! credentials, in `$XDG_CONFIG_HOME/pigeonhole/client.toml` (mode 0600), written by
//! `pigeonhole setup`.

use super::error::ClientError;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ClientSettings {
    pub inbox_url: String,
    pub scheduler_url: String,
    pub username: String,
    /// The secret of this machine's inbox access key.
    pub inbox_key: String,
    /// The secret of this machine's scheduler access key.
    pub scheduler_key: String,
    /// The name of this machine's access keys on both services: the host name and a random
    /// suffix, made once per settings file, so that no other machine's key has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_name: Option<String>,
    /// The id of this machine's inbox access key (settings written before it have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_key_id: Option<String>,
    /// The id of this machine's scheduler access key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_key_id: Option<String>,
    /// "machine zone / account zone" when the client last said that they differ, so that it
    /// says so once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_notice: Option<String>,
}

/// The settings file: the one given, else `$XDG_CONFIG_HOME/pigeonhole/client.toml`, else
/// `~/.config/pigeonhole/client.toml`.
pub fn path(given: Option<&Path>) -> Result<PathBuf, ClientError> {
    if let Some(p) = given {
        return Ok(p.to_path_buf());
    }
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("pigeonhole/client.toml"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".config/pigeonhole/client.toml")),
        None => Err(ClientError::input(
            "neither XDG_CONFIG_HOME nor HOME is set: give --client-config FILE",
        )),
    }
}

impl ClientSettings {
    /// The settings at `path`; `Ok(None)` when there are none yet.
    pub fn load(path: &Path) -> Result<Option<ClientSettings>, ClientError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ClientError::file("cannot read", path, e)),
        };
        toml::from_str(&text).map(Some).map_err(|e| ClientError::NotA {
            path: path.to_owned(),
            what: "a client settings file",
            why: e.to_string(),
        })
    }

    /// The settings at `path`, which must exist.
    pub fn require(path: &Path) -> Result<ClientSettings, ClientError> {
        ClientSettings::load(path)?.ok_or_else(|| {
            ClientError::input(format!(
                "no client settings at {}: run `pigeonhole setup` first",
                path.display()
            ))
        })
    }

    /// Writes the settings to `path` (mode 0600, its directory 0700): a temporary file,
    /// synced, renamed.
    pub fn save(&self, path: &Path) -> Result<(), ClientError> {
        let fail = |e: std::io::Error| ClientError::file("cannot write", path, e);
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(fail)?;
        let text = format!(
            "# Written by `pigeonhole setup`: this machine's credentials. Keep it private.\n{}",
            toml::to_string(self).map_err(|e| ClientError::local(e.to_string()))?
        );
        write_private(path, text.as_bytes())
    }
}

/// Writes `bytes` to `path` for this user only (mode 0600), whole or not at all
/// ([`crate::files`]). Client settings and account exports hold credentials.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    crate::files::write(path, crate::files::Access::Private, bytes)
        .map_err(|e| ClientError::file("cannot write", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saved_settings_are_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("conf/pigeonhole/client.toml");
        assert_eq!(ClientSettings::load(&path).unwrap(), None);
        let s = ClientSettings {
            inbox_url: "http://127.0.0.1:8001".into(),
            scheduler_url: "http://127.0.0.1:8002".into(),
            username: "alice".into(),
            inbox_key: "0123456789abcdef0123456789abcdef".into(),
            scheduler_key: "fedcba9876543210fedcba9876543210".into(),
            key_name: Some("pigeonhole client on pi (3f9a1c)".into()),
            inbox_key_id: Some("7d3c3c7e-6b1a-4a59-9d5e-2f0c4f1e8a11".into()),
            scheduler_key_id: None,
            zone_notice: None,
        };
        s.save(&path).unwrap();
        assert_eq!(ClientSettings::load(&path).unwrap(), Some(s));
        // settings written before the key names and ids still read
        std::fs::write(
            &path,
            "inbox-url = \"u\"\nscheduler-url = \"v\"\nusername = \"a\"\ninbox-key = \"k\"\nscheduler-key = \"l\"\n",
        )
        .unwrap();
        assert_eq!(ClientSettings::load(&path).unwrap().unwrap().key_name, None);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&path, "nonsense = [").unwrap();
        assert!(ClientSettings::load(&path).is_err());
        assert_eq!(
            super::path(Some(Path::new("/x/y.toml"))).unwrap(),
            PathBuf::from("/x/y.toml")
        );
    }
}
