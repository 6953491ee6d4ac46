//! From `--database` (a checked [`DatabaseUrl`] of the settings) to what the PostgreSQL store
//! connects with: the two layers may not name each other (tests/static_checks/layers.rs), so the launch
//! code, above both, translates.

use crate::config::{DatabaseHost, DatabaseUrl, Settings, SslMode};
use crate::store::postgres::{Bounds, Connection, Host, TlsFiles, TlsMode};
use std::time::Duration;

/// The bounds on waiting for the database of `settings` (`--database-…`; the URL's
/// `connect_timeout` before `--database-connect-timeout-secs`).
pub fn bounds(settings: &Settings) -> Bounds {
    let ms = Duration::from_millis;
    Bounds {
        connect: settings
            .database
            .as_ref()
            .and_then(|url| url.connect_timeout)
            .unwrap_or(Duration::from_secs(settings.database_connect_timeout_secs)),
        statement: Some(ms(settings.database_statement_timeout_ms)),
        lock: Some(ms(settings.database_lock_timeout_ms)),
        pool_size: settings.database_pool_size,
    }
}

/// The PostgreSQL store's connection for `url`, with the default bounds but for the URL's
/// `connect_timeout` (the server's are [`bounds`]).
pub fn connection(url: &DatabaseUrl) -> Connection {
    let defaults = Bounds::default();
    Connection {
        user: url.user.clone(),
        password: url.password.clone(),
        hosts: url
            .hosts
            .iter()
            .map(|(host, port)| {
                let host = match host {
                    DatabaseHost::Tcp(name) => Host::Tcp(name.clone()),
                    DatabaseHost::Unix(dir) => Host::Unix(dir.clone()),
                };
                (host, *port)
            })
            .collect(),
        database: url.database.clone(),
        tls: match url.ssl_mode {
            SslMode::Disable => TlsMode::Disable,
            SslMode::Prefer => TlsMode::Prefer,
            SslMode::Require => TlsMode::Require,
            SslMode::VerifyCa => TlsMode::VerifyCa,
            SslMode::VerifyFull => TlsMode::VerifyFull,
        },
        tls_files: TlsFiles {
            root_cert: url.ssl_root_cert.clone(),
            client_cert: url.ssl_client_cert.clone(),
        },
        read_write: url.read_write,
        application_name: url.application_name.clone().unwrap_or_else(|| "pigeonhole".into()),
        options: url.options.clone(),
        bounds: Bounds {
            connect: url.connect_timeout.unwrap_or(defaults.connect),
            ..defaults
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_of_the_url_reaches_the_connection() {
        let url = DatabaseUrl::parse(
            "postgres://pigeon:s%3Acret@db.example:6543,db2/ph?sslmode=verify-ca&sslrootcert=/ca.pem\
             &sslcert=/c.pem&sslkey=/k.pem&target_session_attrs=read-write&application_name=p1&options=-c%20x%3D1",
        )
        .unwrap();
        let c = connection(&url);
        assert_eq!(
            (c.user.as_str(), c.password.as_deref(), c.database.as_str(), c.tls),
            ("pigeon", Some("s:cret"), "ph", TlsMode::VerifyCa)
        );
        assert_eq!(
            c.hosts,
            vec![(Host::Tcp("db.example".into()), 6543), (Host::Tcp("db2".into()), 5432)]
        );
        assert_eq!(
            c.tls_files,
            TlsFiles {
                root_cert: Some("/ca.pem".into()),
                client_cert: Some(("/c.pem".into(), "/k.pem".into()))
            }
        );
        assert!(c.read_write);
        assert_eq!(
            (c.application_name.as_str(), c.options.as_deref()),
            ("p1", Some("-c x=1"))
        );
        let url = DatabaseUrl::parse("postgresql://u@/d?host=/run/pg&port=5433&sslmode=disable").unwrap();
        let c = connection(&url);
        assert_eq!(
            (&c.hosts, c.tls, c.application_name.as_str()),
            (
                &vec![(Host::Unix("/run/pg".into()), 5433)],
                TlsMode::Disable,
                "pigeonhole"
            )
        );
        for (mode, want) in [
            ("prefer", TlsMode::Prefer),
            ("require", TlsMode::Require),
            ("verify-full", TlsMode::VerifyFull),
        ] {
            let url = DatabaseUrl::parse(&format!("postgres://u@h/d?sslmode={mode}")).unwrap();
            assert_eq!(connection(&url).tls, want);
        }
    }

    #[test]
    fn the_settings_bound_every_wait_and_the_urls_connect_timeout_comes_first() {
        let mut settings = Settings::with_data_dir("/nonexistent");
        settings.database_connect_timeout_secs = 9;
        settings.database_statement_timeout_ms = 1500;
        settings.database_lock_timeout_ms = 700;
        settings.database_pool_size = 4;
        let want = Bounds {
            connect: Duration::from_secs(9),
            statement: Some(Duration::from_millis(1500)),
            lock: Some(Duration::from_millis(700)),
            pool_size: 4,
        };
        assert_eq!(bounds(&settings), want);
        settings.database = Some(DatabaseUrl::parse("postgres://u@h/d?connect_timeout=2").unwrap());
        assert_eq!(bounds(&settings).connect, Duration::from_secs(2));
        assert_eq!(
            connection(settings.database.as_ref().unwrap()).bounds.connect,
            Duration::from_secs(2)
        );
    }
}
