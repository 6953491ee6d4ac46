//! The pool's connections (issue 30): to the first of the hosts that answers within the
//! connect timeout and, with `target_session_attrs=read-write`, takes writes; every wait
//! on one bounded. The server bounds statements and lock waits itself (`statement_timeout`,
//! `lock_timeout` in the session's options); what it cannot bound is its own silence (a
//! frozen server, a partitioned network: the kernel still acknowledges what is sent), so
//! each connection's socket is [`Watched`]: once a request is sent, a reply must begin
//! within the statement timeout and a grace, or the connection fails (its callers get an
//! error; the pool discards it and connects again, to whichever host is primary then).

use super::{Connection, Host};
use deadpool_postgres::tokio_postgres::config::{Host as ConfigHost, SslMode, TargetSessionAttrs};
use deadpool_postgres::tokio_postgres::tls::MakeTlsConnect;
use deadpool_postgres::tokio_postgres::{Client, Config, Error};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio::task::JoinHandle;
use tokio::time::Sleep;

/// How long past the statement timeout a server may take to begin its reply before its
/// connection is given up (the server's own timeout answers first when it can).
pub const GRACE: Duration = Duration::from_secs(2);

/// Fails on a session that takes no writes (the recycling check with
/// `target_session_attrs=read-write`).
pub(super) const STILL_WRITABLE: &str =
    "DO $$BEGIN IF pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on' \
     THEN RAISE EXCEPTION 'this session takes no writes'; END IF; END$$";

/// Every bound on waiting for the database (the `--database-…` settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Connecting to one host, TLS and login included.
    pub connect: Duration,
    /// A statement (`statement_timeout`); `None`: unbounded (the copy of `migrate-store`).
    pub statement: Option<Duration>,
    /// Waiting for a row or table lock (`lock_timeout`); `None`: unbounded.
    pub lock: Option<Duration>,
    /// Connections the pool keeps at most.
    pub pool_size: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            connect: Duration::from_secs(5),
            statement: Some(Duration::from_secs(15)),
            lock: Some(Duration::from_secs(15)),
            pool_size: 16,
        }
    }
}

impl Bounds {
    /// How long a connection may stay silent after a request.
    pub fn silence(&self) -> Option<Duration> {
        self.statement.map(|s| s + GRACE)
    }

    /// The pool's bound on one `get` waiting for a free connection.
    pub fn pool_wait(&self) -> Duration {
        self.statement.map_or(self.connect, |s| s.min(self.connect))
    }

    /// The bound on creating one connection: every host tried once.
    pub fn create(&self, hosts: usize) -> Duration {
        self.connect * u32::try_from(hosts.max(1)).unwrap_or(u32::MAX)
    }
}

/// The `options` of every session: durable commits whatever the role's or database's
/// default, the bounds, then what the URL's `options` adds.
pub(super) fn session_options(connection: &Connection) -> String {
    let mut options = vec!["-c synchronous_commit=on".to_owned()];
    let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis().max(1));
    options.push(format!("-c statement_timeout={}", ms(connection.bounds.statement)));
    options.push(format!("-c lock_timeout={}", ms(connection.bounds.lock)));
    if let Some(more) = &connection.options {
        options.push(more.clone());
    }
    options.join(" ")
}

/// Connects the pool's connections (deadpool's [`deadpool_postgres::Connect`]).
pub(super) struct Connector {
    pub tls: tokio_postgres_rustls::MakeRustlsConnect,
    pub silence: Option<Duration>,
}

impl deadpool_postgres::Connect for Connector {
    fn connect(&self, config: &Config) -> futures_util::future::BoxFuture<'_, Result<(Client, JoinHandle<()>), Error>> {
        let config = config.clone();
        Box::pin(async move { connect(&config, self.tls.clone(), self.silence).await })
    }
}

/// Tries the hosts of `config` in order (each within its connect timeout) and answers the
/// first connection that suits its `target_session_attrs`; the error of the last try.
pub(super) async fn connect(
    config: &Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    silence: Option<Duration>,
) -> Result<(Client, JoinHandle<()>), Error> {
    let ports = config.get_ports();
    let bound = config.get_connect_timeout().copied().unwrap_or(Duration::MAX);
    let mut last = Refused::Io(io::Error::other("no host to connect to"));
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        match tokio::time::timeout(bound, connect_one(config, host, port, tls.clone(), silence)).await {
            Ok(Ok(connected)) => return Ok(connected),
            Ok(Err(e)) => last = e,
            Err(_) => {
                last = Refused::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} did not answer within the connect timeout",
                        describe_host(host, port)
                    ),
                ))
            }
        }
    }
    Err(match last {
        Refused::Driver(e) => e,
        Refused::Io(e) => driver_error(e).await,
    })
}

/// Why one host was not connected to.
enum Refused {
    Driver(Error),
    Io(io::Error),
}

impl From<Error> for Refused {
    fn from(e: Error) -> Refused {
        Refused::Driver(e)
    }
}

/// One host: its socket, TLS as the configuration says, the login, and the check of
/// `target_session_attrs=read-write` (`primary` is read as that too: a standby is in
/// recovery, and its sessions are read-only).
async fn connect_one(
    config: &Config,
    host: &ConfigHost,
    port: u16,
    mut tls: tokio_postgres_rustls::MakeRustlsConnect,
    silence: Option<Duration>,
) -> Result<(Client, JoinHandle<()>), Refused> {
    let (socket, name) = match host {
        ConfigHost::Tcp(name) => (
            Socket::Tcp(TcpStream::connect((name.as_str(), port)).await.map_err(Refused::Io)?),
            name.as_str(),
        ),
        ConfigHost::Unix(dir) => (
            Socket::Unix(
                UnixStream::connect(dir.join(format!(".s.PGSQL.{port}")))
                    .await
                    .map_err(Refused::Io)?,
            ),
            "localhost",
        ),
    };
    let tls =
        MakeTlsConnect::<Watched>::make_tls_connect(&mut tls, name).map_err(|e| Refused::Io(io::Error::other(e)))?;
    // never TLS over a Unix socket
    let unix;
    let config = match host {
        ConfigHost::Tcp(_) => config,
        ConfigHost::Unix(_) => {
            unix = config.clone().ssl_mode(SslMode::Disable).clone();
            &unix
        }
    };
    let (client, connection) = config.connect_raw(Watched::new(socket, silence), tls).await?;
    let task = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("a database connection ended: {e}");
        }
    });
    if config.get_target_session_attrs() == TargetSessionAttrs::ReadWrite {
        let read_only = client
            .query_one(
                "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only') = 'on'",
                &[],
            )
            .await
            .and_then(|row| row.try_get::<_, bool>(0));
        if !matches!(read_only, Ok(false)) {
            task.abort();
            return Err(match read_only {
                Err(e) => Refused::Driver(e),
                Ok(_) => Refused::Io(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!(
                        "{} takes no writes (a standby, or read-only)",
                        describe_host(host, port)
                    ),
                )),
            });
        }
    }
    Ok((client, task))
}

/// One host for messages.
fn describe_host(host: &ConfigHost, port: u16) -> String {
    match host {
        ConfigHost::Tcp(name) => format!("{name}:{port}"),
        ConfigHost::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
    }
}

/// An I/O failure as the driver's error (the pool's error type): the driver makes its
/// errors only itself, so this is the error it answers for a stream that fails at once.
async fn driver_error(e: io::Error) -> Error {
    let mut config = Config::new();
    config.user("-").ssl_mode(SslMode::Disable);
    match config
        .connect_raw(Failing(Some(e)), deadpool_postgres::tokio_postgres::NoTls)
        .await
    {
        Err(e) => e,
        Ok(_) => unreachable!("a stream that fails every read and write cannot log in"),
    }
}

/// A stream whose first read or write fails with its error (then every one, as closed).
struct Failing(Option<io::Error>);

impl Failing {
    fn fail<T>(&mut self) -> Poll<io::Result<T>> {
        Poll::Ready(Err(self
            .0
            .take()
            .unwrap_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))))
    }
}

impl AsyncRead for Failing {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.get_mut().fail()
    }
}

impl AsyncWrite for Failing {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().fail()
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().fail()
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The hosts of `connection` as the driver's configuration takes them.
pub(super) fn add_hosts(config: &mut Config, connection: &Connection) {
    for (host, port) in &connection.hosts {
        match host {
            Host::Tcp(name) => config.host(name),
            Host::Unix(dir) => config.host_path(dir),
        };
        config.port(*port);
    }
}

/// A socket of either kind.
enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A socket that fails a read once a request has waited longer than `silence` for the
/// first byte of its reply. Idle, it waits for ever (a listening connection may be quiet).
pub(super) struct Watched {
    socket: Socket,
    silence: Option<Duration>,
    /// Armed by a write while no reply is awaited; disarmed by any byte read.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Watched {
    fn new(socket: Socket, silence: Option<Duration>) -> Watched {
        Watched {
            socket,
            silence,
            deadline: None,
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.socket {
            Socket::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Socket::Unix(s) => Pin::new(s).poll_read(cx, buf),
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.deadline = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let expired = this.deadline.as_mut().is_some_and(|d| d.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the database did not answer for {} s (statement timeout and grace): given up as lost",
                        this.silence.unwrap_or_default().as_secs_f64()
                    ),
                )))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Watched {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = match &mut this.socket {
            Socket::Tcp(s) => Pin::new(s).poll_write(cx, data),
            Socket::Unix(s) => Pin::new(s).poll_write(cx, data),
        };
        if let (Poll::Ready(Ok(n)), Some(silence), None) = (&polled, this.silence, &this.deadline) {
            if *n > 0 {
                // polled once now, so that its expiry wakes the connection's task even if
                // nothing else does (the reads registered no timer while it was unarmed)
                let mut deadline = Box::pin(tokio::time::sleep(silence));
                let _ = deadline.as_mut().poll(cx);
                this.deadline = Some(deadline);
            }
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().socket {
            Socket::Tcp(s) => Pin::new(s).poll_flush(cx),
            Socket::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().socket {
            Socket::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Socket::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn watched_pair(silence: Duration) -> (Watched, UnixStream) {
        let (ours, theirs) = UnixStream::pair().expect("a socket pair");
        (Watched::new(Socket::Unix(ours), Some(silence)), theirs)
    }

    /// A request without a reply fails the read after the silence; a reply in time does
    /// not; an idle socket (nothing asked) waits for ever.
    #[tokio::test(start_paused = true)]
    async fn a_request_unanswered_for_the_silence_fails_the_read() {
        let silence = Duration::from_secs(3);
        let (mut watched, mut server) = watched_pair(silence);
        let mut buf = [0u8; 16];

        // idle: no deadline, however long
        assert!(tokio::time::timeout(Duration::from_secs(3600), watched.read(&mut buf))
            .await
            .is_err());

        // asked and answered within the silence: the reply is read
        watched.write_all(b"ask").await.expect("write");
        tokio::time::sleep(silence - Duration::from_millis(100)).await;
        server.write_all(b"answer").await.expect("reply");
        assert_eq!(watched.read(&mut buf).await.expect("read"), 6);

        // answered, so idle again: no deadline
        assert!(tokio::time::timeout(Duration::from_secs(3600), watched.read(&mut buf))
            .await
            .is_err());

        // asked and never answered: the read fails once the silence has passed, even when,
        // as in the driver's task, the read was polled before the request was written in
        // the same poll (only the deadline's own timer can wake the task then)
        let asked = tokio::time::Instant::now();
        let mut wrote = false;
        let read = std::future::poll_fn(|cx| {
            let mut into = ReadBuf::new(&mut buf);
            if let Poll::Ready(r) = Pin::new(&mut watched).poll_read(cx, &mut into) {
                return Poll::Ready(r);
            }
            if !wrote {
                assert!(matches!(
                    Pin::new(&mut watched).poll_write(cx, b"ask again"),
                    Poll::Ready(Ok(9))
                ));
                wrote = true;
            }
            Poll::Pending
        });
        let e = tokio::time::timeout(Duration::from_secs(3600), read)
            .await
            .expect("woken by the deadline")
            .expect_err("a timeout");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(asked.elapsed(), silence);
        drop(server);
    }

    #[test]
    fn the_sessions_options_bound_statements_and_locks_then_add_the_urls() {
        let mut c = Connection::new("u", Host::Tcp("h".into()), 5432, "d", super::super::TlsMode::Prefer);
        c.bounds.statement = Some(Duration::from_millis(1500));
        c.bounds.lock = None;
        c.options = Some("-c work_mem=8MB".into());
        assert_eq!(
            session_options(&c),
            "-c synchronous_commit=on -c statement_timeout=1500 -c lock_timeout=0 -c work_mem=8MB"
        );
    }

    #[test]
    fn the_pools_waits_follow_from_the_bounds() {
        let b = Bounds {
            connect: Duration::from_secs(2),
            statement: Some(Duration::from_secs(10)),
            lock: Some(Duration::from_secs(1)),
            pool_size: 4,
        };
        assert_eq!(b.silence(), Some(Duration::from_secs(12)));
        assert_eq!(b.pool_wait(), Duration::from_secs(2));
        assert_eq!(b.create(3), Duration::from_secs(6));
        let unbounded = Bounds { statement: None, ..b };
        assert_eq!(
            (unbounded.silence(), unbounded.pool_wait()),
            (None, Duration::from_secs(2))
        );
    }
}
