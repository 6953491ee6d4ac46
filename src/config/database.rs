//! `--database URL`: which PostgreSQL database to keep the data in (spec cli.md, issue 21).
//!
//! `postgres://user[:password]@host[:port]/database[?host=/socket/dir&port=N&sslmode=…]`
//! (`postgresql://` too). The URL is checked whole at start, and an error names the part that
//! is wrong. Parts are percent-decoded. What is checked beyond libpq's own rules, to refuse
//! the ambiguous rather than guess: the user and the database are required (no defaults from
//! the operating-system user); the host is given once (in the authority or as `?host=`, not
//! both); a Unix-socket host (`?host=/dir`, an absolute path) takes `sslmode=disable` or
//! `prefer` only (TLS is never used over a Unix socket); unknown parameters are refused.

use std::fmt;
use std::path::PathBuf;

/// A checked `--database` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    pub user: String,
    pub password: Option<String>,
    pub host: DatabaseHost,
    pub port: u16,
    pub database: String,
    pub ssl_mode: SslMode,
}

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseHost {
    /// A host name or IP address (TCP).
    Tcp(String),
    /// The directory of the server's Unix socket (`.s.PGSQL.<port>` in it).
    Unix(PathBuf),
}

/// `sslmode`, as libpq reads it (rustls only: there is no `allow`, which would try without
/// TLS first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, without checking its certificate (libpq's default).
    Prefer,
    /// TLS always, without checking the certificate.
    Require,
    /// TLS always; the certificate must chain to a trusted root (any name).
    VerifyCa,
    /// TLS always; the certificate must chain to a trusted root and name the host.
    VerifyFull,
}

impl SslMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn parse(s: &str) -> Option<SslMode> {
        Some(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }
}

/// What is wrong with a `--database` URL. The text never repeats the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrlError {
    /// Not `postgres://` or `postgresql://` (the scheme given, if any).
    Scheme(String),
    MissingUser,
    MissingHost,
    /// The host is both in the authority and in `?host=`.
    HostTwice,
    /// A host that cannot be one (with the reason).
    BadHost(String),
    /// The port text.
    BadPort(String),
    MissingDatabase,
    /// The `sslmode` value.
    BadSslMode(String),
    /// An `sslmode` that needs TLS with a Unix-socket host.
    TlsOverUnixSocket(SslMode),
    /// A parameter this version does not know.
    UnknownParameter(String),
    /// A parameter given twice.
    RepeatedParameter(String),
    /// A `#fragment` or a parameter without `=`.
    Malformed(String),
}

impl fmt::Display for DatabaseUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHAPE: &str = "postgres://user[:password]@host[:port]/database[?sslmode=…&host=/socket/dir]";
        write!(f, "invalid --database URL: ")?;
        match self {
            DatabaseUrlError::Scheme(s) => {
                write!(
                    f,
                    "the scheme must be postgres:// or postgresql://, not {s:?} (expected {SHAPE})"
                )
            }
            DatabaseUrlError::MissingUser => write!(f, "no user name (expected {SHAPE})"),
            DatabaseUrlError::MissingHost => write!(
                f,
                "no host: give one after the @, or a Unix socket directory as ?host=/dir (expected {SHAPE})"
            ),
            DatabaseUrlError::HostTwice => {
                write!(f, "the host is given twice, after the @ and as ?host=: give it once")
            }
            DatabaseUrlError::BadHost(why) => write!(f, "bad host: {why}"),
            DatabaseUrlError::BadPort(p) => write!(f, "bad port {p:?}: expected a number from 1 to 65535"),
            DatabaseUrlError::MissingDatabase => write!(f, "no database name after the host (expected {SHAPE})"),
            DatabaseUrlError::BadSslMode(m) => write!(
                f,
                "unknown sslmode {m:?}: expected disable, prefer, require, verify-ca or verify-full"
            ),
            DatabaseUrlError::TlsOverUnixSocket(m) => write!(
                f,
                "sslmode={} needs TLS, which is never used over a Unix socket: use sslmode=disable (or prefer) \
                 with ?host=/socket/dir",
                m.as_str()
            ),
            DatabaseUrlError::UnknownParameter(p) => {
                write!(f, "unknown parameter {p:?}: this version knows host, port and sslmode")
            }
            DatabaseUrlError::RepeatedParameter(p) => write!(f, "the parameter {p:?} is given twice"),
            DatabaseUrlError::Malformed(why) => write!(f, "{why}"),
        }
    }
}

impl std::error::Error for DatabaseUrlError {}

fn decode(s: &str) -> String {
    crate::domain::wire::percent_decode(s, false)
}

fn parse_port(p: &str) -> Result<u16, DatabaseUrlError> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(DatabaseUrlError::BadPort(p.to_owned())),
    }
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, DatabaseUrlError> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(DatabaseUrlError::Scheme(String::new()));
        };
        if !matches!(scheme.to_ascii_lowercase().as_str(), "postgres" | "postgresql") {
            return Err(DatabaseUrlError::Scheme(scheme.to_owned()));
        }
        if rest.contains('#') {
            return Err(DatabaseUrlError::Malformed("a URL fragment (#…) is not allowed".into()));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((a, p)) => (a, p),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (decode(user), Some(decode(pass))),
                None => (decode(u), None),
            },
            None => (String::new(), None),
        };
        if user.is_empty() {
            return Err(DatabaseUrlError::MissingUser);
        }
        let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| DatabaseUrlError::BadHost("an IPv6 address without its closing ]".into()))?;
            match after {
                "" => (host.to_owned(), None),
                _ => match after.strip_prefix(':') {
                    Some(p) => (host.to_owned(), Some(parse_port(p)?)),
                    None => return Err(DatabaseUrlError::BadHost(format!("unexpected {after:?} after ]"))),
                },
            }
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (decode(h), Some(parse_port(p)?)),
                None => (decode(hostport), None),
            }
        };
        if hostport.contains(',') {
            return Err(DatabaseUrlError::BadHost(
                "several hosts are not supported: give one".into(),
            ));
        }
        let database = decode(path.trim_end_matches('/'));
        let mut query_host = None;
        let mut query_port = None;
        let mut ssl_mode = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| DatabaseUrlError::Malformed(format!("the parameter {pair:?} has no value")))?;
            let value = decode(value);
            let slot = match name {
                "host" => &mut query_host,
                "port" => &mut query_port,
                "sslmode" => &mut ssl_mode,
                other => return Err(DatabaseUrlError::UnknownParameter(other.to_owned())),
            };
            if slot.replace(value).is_some() {
                return Err(DatabaseUrlError::RepeatedParameter(name.to_owned()));
            }
        }
        let host = match (host.is_empty(), query_host) {
            (false, Some(_)) => return Err(DatabaseUrlError::HostTwice),
            (true, None) => return Err(DatabaseUrlError::MissingHost),
            (true, Some(q)) if q.starts_with('/') => DatabaseHost::Unix(PathBuf::from(q)),
            (true, Some(q)) if q.is_empty() => return Err(DatabaseUrlError::MissingHost),
            (true, Some(q)) => DatabaseHost::Tcp(q),
            (false, None) => DatabaseHost::Tcp(host),
        };
        if let DatabaseHost::Tcp(name) = &host {
            if name.contains(['/', ' ', '@', '?']) {
                return Err(DatabaseUrlError::BadHost(format!(
                    "{name:?} is neither a host name nor an address (a Unix socket directory is given as ?host=/dir)"
                )));
            }
        }
        let port = match (port, query_port) {
            (Some(_), Some(_)) => return Err(DatabaseUrlError::RepeatedParameter("port".into())),
            (Some(p), None) => p,
            (None, Some(q)) => parse_port(&q)?,
            (None, None) => 5432,
        };
        if database.is_empty() {
            return Err(DatabaseUrlError::MissingDatabase);
        }
        let ssl_mode = match ssl_mode {
            Some(m) => SslMode::parse(&m).ok_or(DatabaseUrlError::BadSslMode(m))?,
            None => SslMode::Prefer,
        };
        if matches!(host, DatabaseHost::Unix(_))
            && matches!(ssl_mode, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
        {
            return Err(DatabaseUrlError::TlsOverUnixSocket(ssl_mode));
        }
        Ok(DatabaseUrl {
            user,
            password,
            host,
            port,
            database,
            ssl_mode,
        })
    }

    /// The URL without its password (for logs and messages).
    pub fn redacted(&self) -> String {
        let pass = if self.password.is_some() { ":***" } else { "" };
        match &self.host {
            DatabaseHost::Tcp(h) if h.contains(':') => format!(
                "postgres://{}{pass}@[{h}]:{}/{}?sslmode={}",
                self.user,
                self.port,
                self.database,
                self.ssl_mode.as_str()
            ),
            DatabaseHost::Tcp(h) => format!(
                "postgres://{}{pass}@{h}:{}/{}?sslmode={}",
                self.user,
                self.port,
                self.database,
                self.ssl_mode.as_str()
            ),
            DatabaseHost::Unix(dir) => format!(
                "postgres://{}{pass}@/{}?host={}&port={}",
                self.user,
                self.database,
                dir.display(),
                self.port
            ),
        }
    }
}

/// Never prints the password.
impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str) -> DatabaseUrl {
        DatabaseUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn err(url: &str) -> DatabaseUrlError {
        match DatabaseUrl::parse(url) {
            Ok(u) => panic!("{url} parsed as {u:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn tcp_urls_with_every_part() {
        let u = ok("postgres://pigeon:s%40cret@db.example:6543/pigeonhole?sslmode=verify-full");
        assert_eq!(u.user, "pigeon");
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert_eq!(u.host, DatabaseHost::Tcp("db.example".into()));
        assert_eq!(u.port, 6543);
        assert_eq!(u.database, "pigeonhole");
        assert_eq!(u.ssl_mode, SslMode::VerifyFull);
        let u = ok("postgresql://p@[::1]/d");
        assert_eq!(
            (u.host, u.port, u.ssl_mode),
            (DatabaseHost::Tcp("::1".into()), 5432, SslMode::Prefer)
        );
        let u = ok("POSTGRES://p@10.0.0.1:5433/d?sslmode=require");
        assert_eq!((u.port, u.ssl_mode), (5433, SslMode::Require));
        for (mode, want) in [
            ("disable", SslMode::Disable),
            ("prefer", SslMode::Prefer),
            ("verify-ca", SslMode::VerifyCa),
        ] {
            assert_eq!(ok(&format!("postgres://p@h/d?sslmode={mode}")).ssl_mode, want);
        }
    }

    #[test]
    fn unix_socket_urls() {
        let u = ok("postgres://postgres@/postgres?host=/tmp/pg%20x");
        assert_eq!(u.host, DatabaseHost::Unix("/tmp/pg x".into()));
        assert_eq!(u.port, 5432);
        assert_eq!(ok("postgres://u@/d?host=/run/pg&port=5433&sslmode=disable").port, 5433);
        assert_eq!(
            err("postgres://u@/d?host=/run/pg&sslmode=require"),
            DatabaseUrlError::TlsOverUnixSocket(SslMode::Require)
        );
        // a host name as a parameter is a TCP host
        assert_eq!(ok("postgres://u@/d?host=db").host, DatabaseHost::Tcp("db".into()));
    }

    #[test]
    fn what_is_wrong_is_named() {
        assert_eq!(err("mysql://u@h/d"), DatabaseUrlError::Scheme("mysql".into()));
        assert_eq!(err("u@h/d"), DatabaseUrlError::Scheme(String::new()));
        assert_eq!(err("postgres://h/d"), DatabaseUrlError::MissingUser);
        assert_eq!(err("postgres://:pw@h/d"), DatabaseUrlError::MissingUser);
        assert_eq!(err("postgres://u@/d"), DatabaseUrlError::MissingHost);
        assert_eq!(err("postgres://u@h/d?host=/x"), DatabaseUrlError::HostTwice);
        assert_eq!(err("postgres://u@h:0/d"), DatabaseUrlError::BadPort("0".into()));
        assert_eq!(err("postgres://u@h:99999/d"), DatabaseUrlError::BadPort("99999".into()));
        assert_eq!(err("postgres://u@h:x/d"), DatabaseUrlError::BadPort("x".into()));
        assert_eq!(
            err("postgres://u@h:1/d?port=2"),
            DatabaseUrlError::RepeatedParameter("port".into())
        );
        assert_eq!(err("postgres://u@h"), DatabaseUrlError::MissingDatabase);
        assert_eq!(err("postgres://u@h/"), DatabaseUrlError::MissingDatabase);
        assert_eq!(
            err("postgres://u@h/d?sslmode=allow"),
            DatabaseUrlError::BadSslMode("allow".into())
        );
        assert_eq!(
            err("postgres://u@h/d?application_name=x"),
            DatabaseUrlError::UnknownParameter("application_name".into())
        );
        assert_eq!(
            err("postgres://u@h/d?sslmode=disable&sslmode=require"),
            DatabaseUrlError::RepeatedParameter("sslmode".into())
        );
        assert!(matches!(err("postgres://u@h/d#x"), DatabaseUrlError::Malformed(_)));
        assert!(matches!(
            err("postgres://u@h/d?sslmode"),
            DatabaseUrlError::Malformed(_)
        ));
        assert!(matches!(err("postgres://u@h1,h2/d"), DatabaseUrlError::BadHost(_)));
        assert!(matches!(err("postgres://u@[::1/d"), DatabaseUrlError::BadHost(_)));
        assert!(err("postgres://u@h/d?sslmode=allow").to_string().contains("sslmode"));
    }

    #[test]
    fn the_password_never_shows() {
        let u = ok("postgres://u:hunter2@h/d");
        assert!(!format!("{u:?}").contains("hunter2"));
        assert!(!u.redacted().contains("hunter2"));
        assert!(u.redacted().contains(":***@"));
        // nor in an error
        let e = DatabaseUrl::parse("postgres://u:hunter2@h/d?x=1").unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
    }
}
