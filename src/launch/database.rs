//! From `--database` (a checked [`DatabaseUrl`] of the settings) to what the PostgreSQL store
//! connects with: the two layers may not name each other (tests/static_checks/layers.rs), so the launch
//! code, above both, translates.

use crate::config::{DatabaseHost, DatabaseUrl, SslMode};
use crate::store::postgres::{Connection, Host, TlsMode};

/// The PostgreSQL store's connection for `url`.
pub fn connection(url: &DatabaseUrl) -> Connection {
    Connection {
        user: url.user.clone(),
        password: url.password.clone(),
        host: match &url.host {
            DatabaseHost::Tcp(name) => Host::Tcp(name.clone()),
            DatabaseHost::Unix(dir) => Host::Unix(dir.clone()),
        },
        port: url.port,
        database: url.database.clone(),
        tls: match url.ssl_mode {
            SslMode::Disable => TlsMode::Disable,
            SslMode::Prefer => TlsMode::Prefer,
            SslMode::Require => TlsMode::Require,
            SslMode::VerifyCa => TlsMode::VerifyCa,
            SslMode::VerifyFull => TlsMode::VerifyFull,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_of_the_url_reaches_the_connection() {
        let url = DatabaseUrl::parse("postgres://pigeon:s%3Acret@db.example:6543/ph?sslmode=verify-ca").unwrap();
        let c = connection(&url);
        assert_eq!(
            (
                c.user.as_str(),
                c.password.as_deref(),
                &c.host,
                c.port,
                c.database.as_str(),
                c.tls
            ),
            (
                "pigeon",
                Some("s:cret"),
                &Host::Tcp("db.example".into()),
                6543,
                "ph",
                TlsMode::VerifyCa
            )
        );
        let url = DatabaseUrl::parse("postgresql://u@/d?host=/run/pg&port=5433&sslmode=disable").unwrap();
        let c = connection(&url);
        assert_eq!(
            (&c.host, c.port, c.tls),
            (&Host::Unix("/run/pg".into()), 5433, TlsMode::Disable)
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
}
