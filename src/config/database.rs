//! `--database URL`: which PostgreSQL database to keep the data in (spec cli.md, issues 21
//! and 30), in either of libpq's forms:
//!
//! * `postgres://user[:password]@host[:port][,host[:port]…]/database[?param=value&…]`
//!   (`postgresql://` too; a Unix-socket directory as `?host=/dir`);
//! * `host=a,b port=5432,5433 dbname=… user=… [param=value …]` (values quoted `'…'` when
//!   they hold spaces, `\'` and `\\` inside).
//!
//! Several hosts are tried in order (failover); `target_session_attrs=read-write` (or
//! `primary`, read the same way) passes over a host that takes no writes. The parameters:
//! host, port, dbname, user, password, sslmode, sslrootcert, sslcert, sslkey,
//! target_session_attrs, connect_timeout, application_name, options; any other is refused by
//! name. The string is checked whole at start, and an error names the part that is wrong.
//! URL parts are percent-decoded. What is checked beyond libpq's own rules, to refuse the
//! ambiguous rather than guess: the user and the database are required (no defaults from
//! the operating-system user); the hosts are given once (in the authority or as `host=`, not
//! both); a Unix-socket host takes `sslmode=disable` or `prefer` only (TLS is never used
//! over a Unix socket); `sslcert` and `sslkey` come together.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A checked `--database` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl {
    pub user: String,
    pub password: Option<String>,
    /// The hosts in the order they are tried, each with its port.
    pub hosts: Vec<(DatabaseHost, u16)>,
    pub database: String,
    pub ssl_mode: SslMode,
    /// `sslrootcert`: the PEM roots the server's certificate must chain to (instead of the
    /// public ones); `system` (or nothing): the public ones.
    pub ssl_root_cert: Option<PathBuf>,
    /// `sslcert` and `sslkey`: the client's certificate (chain) and key, PEM.
    pub ssl_client_cert: Option<(PathBuf, PathBuf)>,
    /// `target_session_attrs=read-write` or `primary`.
    pub read_write: bool,
    /// `connect_timeout` (seconds): each host's bound, instead of `--database-connect-timeout-secs`.
    pub connect_timeout: Option<Duration>,
    pub application_name: Option<String>,
    /// `options`: `-c name=value …` for every session.
    pub options: Option<String>,
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

/// The parameters this version knows.
const KNOWN: [&str; 13] = [
    "host",
    "port",
    "dbname",
    "user",
    "password",
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "target_session_attrs",
    "connect_timeout",
    "application_name",
    "options",
];

/// What is wrong with a `--database` URL. The text never repeats the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseUrlError {
    /// Not `postgres://` or `postgresql://` (the scheme given, if any), nor `key=value …`.
    Scheme(String),
    MissingUser,
    MissingHost,
    /// The host is both in the authority and in `?host=`.
    HostTwice,
    /// A host that cannot be one (with the reason).
    BadHost(String),
    /// The port text.
    BadPort(String),
    /// Neither one port for every host nor one per host: (hosts, ports).
    PortCount(usize, usize),
    MissingDatabase,
    /// The `sslmode` value.
    BadSslMode(String),
    /// An `sslmode` that needs TLS with a Unix-socket host.
    TlsOverUnixSocket(SslMode),
    /// A parameter's value that it cannot take: the parameter, the value, what it takes.
    BadValue(&'static str, String, &'static str),
    /// `sslcert` without `sslkey`, or the other way round: the one given.
    Unpaired(&'static str),
    /// A parameter this version does not know.
    UnknownParameter(String),
    /// A parameter given twice.
    RepeatedParameter(String),
    /// A `#fragment`, a parameter without `=`, an unclosed quote.
    Malformed(String),
}

impl fmt::Display for DatabaseUrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHAPE: &str =
            "postgres://user[:password]@host[:port][,host2[:port]]/database[?sslmode=…&host=/socket/dir] \
                             or host=… port=… dbname=… user=…";
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
            DatabaseUrlError::PortCount(hosts, ports) => write!(
                f,
                "{ports} ports for {hosts} hosts: give one port for every host, or one per host in the same order"
            ),
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
            DatabaseUrlError::BadValue(name, value, expected) => {
                write!(f, "bad {name} {value:?}: expected {expected}")
            }
            DatabaseUrlError::Unpaired(given) => write!(
                f,
                "{given} is given without {}: a client certificate needs both sslcert and sslkey",
                if *given == "sslcert" { "sslkey" } else { "sslcert" }
            ),
            DatabaseUrlError::UnknownParameter(p) => {
                write!(f, "unknown parameter {p:?}: this version knows {}", KNOWN.join(", "))
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

/// The parameters given, each once, by name.
#[derive(Default)]
struct Params(Vec<(&'static str, String)>);

impl Params {
    fn set(&mut self, name: &str, value: String) -> Result<(), DatabaseUrlError> {
        let Some(known) = KNOWN.iter().find(|k| **k == name) else {
            return Err(DatabaseUrlError::UnknownParameter(name.to_owned()));
        };
        if self.get(known).is_some() {
            return Err(DatabaseUrlError::RepeatedParameter(name.to_owned()));
        }
        self.0.push((known, value));
        Ok(())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

/// The `key=value` form's pairs (libpq's quoting: `'…'`, `\` escapes the next character).
fn key_values(text: &str, params: &mut Params) -> Result<(), DatabaseUrlError> {
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(());
        }
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            name.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(DatabaseUrlError::Malformed(format!(
                "the parameter {name:?} has no value"
            )));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => {
                        return Err(DatabaseUrlError::Malformed(format!(
                            "the value of {name:?} has no closing quote"
                        )))
                    }
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.extend(chars.next()),
                    c => value.push(c),
                }
            }
        }
        params.set(&name, value)?;
    }
}

/// The URL form into `params`; answers the hosts of the authority, each with its port if
/// given.
fn url_parts(rest: &str, params: &mut Params) -> Result<Vec<(String, Option<u16>)>, DatabaseUrlError> {
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
    let (userinfo, hostlist) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if let Some(u) = userinfo {
        let (user, password) = match u.split_once(':') {
            Some((user, pass)) => (decode(user), Some(decode(pass))),
            None => (decode(u), None),
        };
        if !user.is_empty() {
            params.set("user", user)?;
        }
        if let Some(p) = password {
            params.set("password", p)?;
        }
    }
    let database = decode(path.trim_end_matches('/'));
    if !database.is_empty() {
        params.set("dbname", database)?;
    }
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| DatabaseUrlError::Malformed(format!("the parameter {pair:?} has no value")))?;
        params.set(name, decode(value))?;
    }
    let mut hosts = Vec::new();
    if hostlist.is_empty() {
        return Ok(hosts);
    }
    for hostport in hostlist.split(',') {
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
        if host.is_empty() {
            return Err(DatabaseUrlError::BadHost(format!("an empty host in {hostlist:?}")));
        }
        hosts.push((host, port));
    }
    Ok(hosts)
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, DatabaseUrlError> {
        let mut params = Params::default();
        let authority_hosts = match url.split_once("://") {
            Some((scheme, rest)) => {
                if !matches!(scheme.to_ascii_lowercase().as_str(), "postgres" | "postgresql") {
                    return Err(DatabaseUrlError::Scheme(scheme.to_owned()));
                }
                url_parts(rest, &mut params)?
            }
            None if url.contains('=') => {
                key_values(url, &mut params)?;
                Vec::new()
            }
            None => return Err(DatabaseUrlError::Scheme(String::new())),
        };
        let user = params.get("user").unwrap_or_default().to_owned();
        if user.is_empty() {
            return Err(DatabaseUrlError::MissingUser);
        }
        let ports: Vec<u16> = match params.get("port") {
            Some(list) => list.split(',').map(parse_port).collect::<Result<_, _>>()?,
            None => Vec::new(),
        };
        let named: Vec<(String, Option<u16>)> = match (authority_hosts.is_empty(), params.get("host")) {
            (false, Some(_)) => return Err(DatabaseUrlError::HostTwice),
            (false, None) => {
                if !ports.is_empty() && authority_hosts.iter().any(|(_, p)| p.is_some()) {
                    return Err(DatabaseUrlError::RepeatedParameter("port".into()));
                }
                authority_hosts
            }
            (true, None) => return Err(DatabaseUrlError::MissingHost),
            (true, Some(list)) => list.split(',').map(|h| (h.to_owned(), None)).collect(),
        };
        let port_of = |i: usize, own: Option<u16>| match (own, ports.len()) {
            (Some(p), _) => Ok(p),
            (None, 0) => Ok(5432),
            (None, 1) => Ok(ports[0]),
            (None, n) if n == named.len() => Ok(ports[i]),
            (None, n) => Err(DatabaseUrlError::PortCount(named.len(), n)),
        };
        let mut hosts = Vec::with_capacity(named.len());
        for (i, (name, own)) in named.iter().enumerate() {
            let host = if name.starts_with('/') {
                DatabaseHost::Unix(PathBuf::from(name))
            } else if name.is_empty() {
                return Err(DatabaseUrlError::MissingHost);
            } else if name.contains(['/', ' ', '@', '?']) {
                return Err(DatabaseUrlError::BadHost(format!(
                    "{name:?} is neither a host name nor an address (a Unix socket directory is given as ?host=/dir)"
                )));
            } else {
                DatabaseHost::Tcp(name.clone())
            };
            hosts.push((host, port_of(i, *own)?));
        }
        let database = params.get("dbname").unwrap_or_default().to_owned();
        if database.is_empty() {
            return Err(DatabaseUrlError::MissingDatabase);
        }
        let ssl_mode = match params.get("sslmode") {
            Some(m) => SslMode::parse(m).ok_or_else(|| DatabaseUrlError::BadSslMode(m.to_owned()))?,
            None => SslMode::Prefer,
        };
        if hosts.iter().any(|(h, _)| matches!(h, DatabaseHost::Unix(_)))
            && matches!(ssl_mode, SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull)
        {
            return Err(DatabaseUrlError::TlsOverUnixSocket(ssl_mode));
        }
        let read_write = match params.get("target_session_attrs") {
            None | Some("any") => false,
            Some("read-write" | "primary") => true,
            Some(other) => {
                return Err(DatabaseUrlError::BadValue(
                    "target_session_attrs",
                    other.to_owned(),
                    "any, read-write or primary (Pigeonhole writes: a standby will not do)",
                ))
            }
        };
        let connect_timeout = match params.get("connect_timeout") {
            None => None,
            Some(t) => match t.parse::<u64>() {
                Ok(secs @ 1..=3600) => Some(Duration::from_secs(secs)),
                _ => {
                    return Err(DatabaseUrlError::BadValue(
                        "connect_timeout",
                        t.to_owned(),
                        "whole seconds from 1 to 3600 (every wait is bounded: 0, for ever, is not taken)",
                    ))
                }
            },
        };
        let path = |name: &'static str| -> Result<Option<PathBuf>, DatabaseUrlError> {
            match params.get(name) {
                None => Ok(None),
                Some("") => Err(DatabaseUrlError::BadValue(
                    name,
                    String::new(),
                    "the path of a PEM file",
                )),
                Some(p) => Ok(Some(PathBuf::from(p))),
            }
        };
        let ssl_root_cert = match params.get("sslrootcert") {
            Some("system") => None,
            _ => path("sslrootcert")?,
        };
        let ssl_client_cert = match (path("sslcert")?, path("sslkey")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err(DatabaseUrlError::Unpaired("sslcert")),
            (None, Some(_)) => return Err(DatabaseUrlError::Unpaired("sslkey")),
        };
        let text = |name| params.get(name).filter(|v| !v.is_empty()).map(str::to_owned);
        Ok(DatabaseUrl {
            user,
            password: params.get("password").map(str::to_owned),
            hosts,
            database,
            ssl_mode,
            ssl_root_cert,
            ssl_client_cert,
            read_write,
            connect_timeout,
            application_name: text("application_name"),
            options: text("options"),
        })
    }

    /// The URL without its password (for logs and messages), in the URL form.
    pub fn redacted(&self) -> String {
        let pass = if self.password.is_some() { ":***" } else { "" };
        let mut query = Vec::new();
        let authority = if self.hosts.iter().any(|(h, _)| matches!(h, DatabaseHost::Unix(_))) {
            let names: Vec<String> = self
                .hosts
                .iter()
                .map(|(h, _)| match h {
                    DatabaseHost::Tcp(name) => name.clone(),
                    DatabaseHost::Unix(dir) => dir.display().to_string(),
                })
                .collect();
            let ports: Vec<String> = self.hosts.iter().map(|(_, p)| p.to_string()).collect();
            query.push(format!("host={}", names.join(",")));
            query.push(format!("port={}", ports.join(",")));
            String::new()
        } else {
            query.push(format!("sslmode={}", self.ssl_mode.as_str()));
            let hosts: Vec<String> = self
                .hosts
                .iter()
                .map(|(h, port)| match h {
                    DatabaseHost::Tcp(name) if name.contains(':') => format!("[{name}]:{port}"),
                    DatabaseHost::Tcp(name) => format!("{name}:{port}"),
                    DatabaseHost::Unix(_) => String::new(),
                })
                .collect();
            hosts.join(",")
        };
        if self.read_write {
            query.push("target_session_attrs=read-write".into());
        }
        format!(
            "postgres://{}{pass}@{authority}/{}?{}",
            self.user,
            self.database,
            query.join("&")
        )
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

    fn tcp(name: &str, port: u16) -> (DatabaseHost, u16) {
        (DatabaseHost::Tcp(name.into()), port)
    }

    #[test]
    fn tcp_urls_with_every_part() {
        let u = ok("postgres://pigeon:s%40cret@db.example:6543/pigeonhole?sslmode=verify-full");
        assert_eq!(u.user, "pigeon");
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert_eq!(u.hosts, vec![tcp("db.example", 6543)]);
        assert_eq!(u.database, "pigeonhole");
        assert_eq!(u.ssl_mode, SslMode::VerifyFull);
        assert!(!u.read_write);
        let u = ok("postgresql://p@[::1]/d");
        assert_eq!((u.hosts, u.ssl_mode), (vec![tcp("::1", 5432)], SslMode::Prefer));
        let u = ok("POSTGRES://p@10.0.0.1:5433/d?sslmode=require");
        assert_eq!((u.hosts, u.ssl_mode), (vec![tcp("10.0.0.1", 5433)], SslMode::Require));
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
        assert_eq!(u.hosts, vec![(DatabaseHost::Unix("/tmp/pg x".into()), 5432)]);
        assert_eq!(
            ok("postgres://u@/d?host=/run/pg&port=5433&sslmode=disable").hosts,
            vec![(DatabaseHost::Unix("/run/pg".into()), 5433)]
        );
        assert_eq!(
            err("postgres://u@/d?host=/run/pg&sslmode=require"),
            DatabaseUrlError::TlsOverUnixSocket(SslMode::Require)
        );
        // a host name as a parameter is a TCP host
        assert_eq!(ok("postgres://u@/d?host=db").hosts, vec![tcp("db", 5432)]);
    }

    #[test]
    fn several_hosts_in_the_url_form() {
        let u = ok("postgres://u@a:5432,b:5433/db?target_session_attrs=read-write");
        assert_eq!(u.hosts, vec![tcp("a", 5432), tcp("b", 5433)]);
        assert!(u.read_write);
        // a host without its port takes the default
        assert_eq!(
            ok("postgres://u@a,[::1]:7/db").hosts,
            vec![tcp("a", 5432), tcp("::1", 7)]
        );
        // hosts and ports as parameters: one port for all, or one per host
        assert_eq!(
            ok("postgres://u@/db?host=/run/a,/run/b&port=5433&target_session_attrs=primary").hosts,
            vec![
                (DatabaseHost::Unix("/run/a".into()), 5433),
                (DatabaseHost::Unix("/run/b".into()), 5433)
            ]
        );
        assert_eq!(
            ok("postgres://u@/db?host=a,b&port=1,2").hosts,
            vec![tcp("a", 1), tcp("b", 2)]
        );
        assert_eq!(
            err("postgres://u@/db?host=a,b&port=1,2,3"),
            DatabaseUrlError::PortCount(2, 3)
        );
        assert!(matches!(err("postgres://u@a,,b/db"), DatabaseUrlError::BadHost(_)));
        assert_eq!(
            err("postgres://u@a:1,b/db?port=2"),
            DatabaseUrlError::RepeatedParameter("port".into())
        );
        // a Unix socket among the hosts takes no TLS
        assert_eq!(
            err("postgres://u@/d?host=db,/run/pg&sslmode=verify-full"),
            DatabaseUrlError::TlsOverUnixSocket(SslMode::VerifyFull)
        );
    }

    #[test]
    fn the_key_value_form() {
        let u = ok("host=a,b port=5432,5433 dbname=pigeonhole user=pigeon password=secret \
                    target_session_attrs=read-write");
        assert_eq!(u.hosts, vec![tcp("a", 5432), tcp("b", 5433)]);
        assert_eq!((u.user.as_str(), u.database.as_str()), ("pigeon", "pigeonhole"));
        assert!(u.read_write);
        // quoting: spaces, \' and \\ inside quotes; = with spaces around
        let u = ok(r"host = /run/p\ g dbname='my db' user=u password='a\'b\\c' options='-c search_path=x'");
        assert_eq!(u.hosts, vec![(DatabaseHost::Unix("/run/p g".into()), 5432)]);
        assert_eq!(u.database, "my db");
        assert_eq!(u.password.as_deref(), Some(r"a'b\c"));
        assert_eq!(u.options.as_deref(), Some("-c search_path=x"));
        assert!(matches!(err("host=a dbname='x user=u"), DatabaseUrlError::Malformed(_)));
        assert!(matches!(err("host=a dbname user=u"), DatabaseUrlError::Malformed(_)));
        assert_eq!(err("host=a dbname=d"), DatabaseUrlError::MissingUser);
        assert_eq!(err("dbname=d user=u"), DatabaseUrlError::MissingHost);
        assert_eq!(err("host=a user=u"), DatabaseUrlError::MissingDatabase);
        assert_eq!(
            err("host=a dbname=d user=u keepalives=1"),
            DatabaseUrlError::UnknownParameter("keepalives".into())
        );
        assert_eq!(
            err("host=a host=b dbname=d user=u"),
            DatabaseUrlError::RepeatedParameter("host".into())
        );
    }

    #[test]
    fn the_further_parameters() {
        let u = ok(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=/etc/ca.pem&sslcert=/etc/c.pem&sslkey=/etc/k.pem\
                    &connect_timeout=3&application_name=pigeon-1&options=-c%20work_mem%3D8MB",
        );
        assert_eq!(u.ssl_root_cert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(
            u.ssl_client_cert,
            Some((PathBuf::from("/etc/c.pem"), PathBuf::from("/etc/k.pem")))
        );
        assert_eq!(u.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(u.application_name.as_deref(), Some("pigeon-1"));
        assert_eq!(u.options.as_deref(), Some("-c work_mem=8MB"));
        assert_eq!(ok("postgres://u@h/d?sslrootcert=system").ssl_root_cert, None);
        assert!(!ok("postgres://u@h/d?target_session_attrs=any").read_write);
        assert_eq!(
            err("postgres://u@h/d?sslcert=/c.pem"),
            DatabaseUrlError::Unpaired("sslcert")
        );
        assert_eq!(
            err("postgres://u@h/d?sslkey=/k.pem"),
            DatabaseUrlError::Unpaired("sslkey")
        );
        for bad in ["0", "x", "3601"] {
            assert!(matches!(
                err(&format!("postgres://u@h/d?connect_timeout={bad}")),
                DatabaseUrlError::BadValue("connect_timeout", _, _)
            ));
        }
        let e = err("postgres://u@h/d?target_session_attrs=standby");
        assert!(matches!(e, DatabaseUrlError::BadValue("target_session_attrs", _, _)));
        assert!(e.to_string().contains("target_session_attrs \"standby\""), "{e}");
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
        let unknown = err("postgres://u@h/d?fallback_application_name=x");
        assert_eq!(
            unknown,
            DatabaseUrlError::UnknownParameter("fallback_application_name".into())
        );
        assert!(unknown.to_string().contains("\"fallback_application_name\""));
        assert_eq!(
            err("postgres://u@h/d?sslmode=disable&sslmode=require"),
            DatabaseUrlError::RepeatedParameter("sslmode".into())
        );
        assert!(matches!(err("postgres://u@h/d#x"), DatabaseUrlError::Malformed(_)));
        assert!(matches!(
            err("postgres://u@h/d?sslmode"),
            DatabaseUrlError::Malformed(_)
        ));
        assert!(matches!(err("postgres://u@[::1/d"), DatabaseUrlError::BadHost(_)));
        assert!(err("postgres://u@h/d?sslmode=allow").to_string().contains("sslmode"));
    }

    #[test]
    fn the_password_never_shows() {
        let u = ok("postgres://u:hunter2@h/d");
        assert!(!format!("{u:?}").contains("hunter2"));
        assert!(!u.redacted().contains("hunter2"));
        assert!(u.redacted().contains(":***@"));
        let u = ok("host=a,/run/b user=u password=hunter2 dbname=d target_session_attrs=read-write");
        assert_eq!(
            u.redacted(),
            "postgres://u:***@/d?host=a,/run/b&port=5432,5432&target_session_attrs=read-write"
        );
        assert_eq!(
            ok("postgres://u:hunter2@a:1,b:2/d").redacted(),
            "postgres://u:***@a:1,b:2/d?sslmode=prefer"
        );
        // nor in an error
        let e = DatabaseUrl::parse("postgres://u:hunter2@h/d?x=1").unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
    }
}
