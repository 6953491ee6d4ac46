//! The connection loop of both services (spec decision 17): our own accept loop on the bound
//! listener, each connection served by hyper's HTTP/1 with warp's request handling, and the
//! deadlines of hostile or broken connections enforced in the connection's reads and writes:
//!
//! * a connection must send a request's complete headers within the header timeout of the
//!   request's first byte (a new connection: of its accept);
//! * a connection idle between requests for the idle timeout is closed;
//! * reads of a request body are cut off after the body timeout without data (in
//!   [`super::body`]), and an answer whose writing makes no progress for as long is dropped.
//!
//! hyper's own `header_read_timeout` cannot do this: its clock also runs while a keep-alive
//! connection waits for its next request, so it would cut idle connections at 30 s.
//!
//! Open connections are bounded ([`connection_bound`]): at the bound the loop stops
//! accepting until one closes (new ones wait in the listen backlog), so descriptors never run
//! out for the database. Accept errors (EMFILE and friends) are logged and retried after a
//! short back-off; they never end or spin the loop.

use crate::config::Timeouts;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Descriptors kept for other things than client connections: the database and its blobs,
/// the lock and key files, e-mails being written to the outbox, outgoing HTTP and SMTP
/// connections, the runtime's own.
const FILES_NOT_FOR_CONNECTIONS: u64 = 256;
/// At most this many open connections whatever the descriptor limit: each costs a task and
/// its buffers (a Raspberry Pi has little memory), and a personal server has few clients.
const MOST_CONNECTIONS: u64 = 16_384;
/// Even with a tiny descriptor limit, some connections are served.
const FEWEST_CONNECTIONS: u64 = 16;
/// hyper's read and write buffers of one connection grow at most to this, and a request's
/// head may be at most this long (431 beyond): hyper's default, about 400 KB, would let 300
/// half-open connections hold 120 MB of partial headers.
const CONNECTION_BUFFER: usize = 64 * 1024;
const ACCEPT_BACKOFF_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_LONGEST: Duration = Duration::from_secs(1);

/// The TCP peer of a request, handed to warp as a request extension (warp's own remote
/// address is set only by its own server).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// One request in, its answer out: warp's request handling as a shareable function.
pub type Handler = Arc<
    dyn Fn(warp::http::Request<hyper::body::Incoming>) -> Pin<Box<dyn Future<Output = warp::reply::Response> + Send>>
        + Send
        + Sync,
>;

/// What every connection of the process shares: the timeouts and the bound on open
/// connections (one bound for both services: they share the descriptor limit).
pub struct Connections {
    pub timeouts: Timeouts,
    slots: Arc<Semaphore>,
    bound: usize,
}

impl Connections {
    pub fn new(timeouts: Timeouts, bound: usize) -> Connections {
        Connections {
            timeouts,
            slots: Arc::new(Semaphore::new(bound)),
            bound,
        }
    }

    pub fn bound(&self) -> usize {
        self.bound
    }
}

/// Raises the soft limit on open files to the hard limit (spec decision 17) and answers the
/// soft limit now in force.
#[expect(unsafe_code, reason = "std has no safe getrlimit(2) and setrlimit(2)")]
pub fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass, which lives on our stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        tracing::warn!("cannot read the open-file limit: {}", io::Error::last_os_error());
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass; it changes a limit of this process.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!("open-file limit raised from {} to {}", limit.rlim_cur, raised.rlim_cur);
            limit = raised;
        } else {
            tracing::warn!(
                "cannot raise the open-file limit from {} to {}: {}",
                limit.rlim_cur,
                raised.rlim_cur,
                io::Error::last_os_error()
            );
        }
    }
    limit.rlim_cur
}

/// How many connections may be open at once with `open_files` descriptors.
pub fn connection_bound(open_files: u64) -> usize {
    let bound = open_files
        .saturating_sub(FILES_NOT_FOR_CONNECTIONS)
        .clamp(FEWEST_CONNECTIONS, MOST_CONNECTIONS);
    bound as usize
}

/// Where a connection is in its cycle of requests; decides which read deadline applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Receiving a request's headers, whose first byte came at `since` (a new connection:
    /// accepted at `since`).
    Head { since: Instant },
    /// Headers complete, answer not finished: the handler and the body reader are in charge.
    Busy,
    /// Answer finished at `since`, no byte of the next request yet.
    Idle { since: Instant },
}

/// The stage of one connection, shared by its socket wrapper and its service (both are
/// polled by the connection's task, so the lock is never contended).
struct Phase {
    stage: Mutex<Stage>,
    /// The task of a read that waits without a deadline (while busy). hyper may poll its
    /// read before it finishes an answer and not again until data comes: when the answer
    /// finishes, the read must be polled once more so that the idle deadline is armed.
    unarmed_read: Mutex<Option<Waker>>,
}

impl Phase {
    fn new(accepted: Instant) -> Phase {
        Phase {
            stage: Mutex::new(Stage::Head { since: accepted }),
            unarmed_read: Mutex::new(None),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Stage) -> T) -> T {
        f(&mut self.stage.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn read_waits_unarmed(&self, waker: &Waker) {
        *self.unarmed_read.lock().unwrap_or_else(|p| p.into_inner()) = Some(waker.clone());
    }

    fn bytes_arrived(&self, now: Instant) {
        self.with(|s| {
            if let Stage::Idle { .. } = s {
                *s = Stage::Head { since: now };
            }
        })
    }

    fn request_started(&self) {
        self.with(|s| *s = Stage::Busy)
    }

    fn answer_finished(&self, now: Instant) {
        let finished = self.with(|s| {
            let busy = *s == Stage::Busy;
            if busy {
                *s = Stage::Idle { since: now };
            }
            busy
        });
        if finished {
            if let Some(read) = self.unarmed_read.lock().unwrap_or_else(|p| p.into_inner()).take() {
                read.wake();
            }
        }
    }

    fn is_busy(&self) -> bool {
        self.with(|s| *s == Stage::Busy)
    }

    /// When a read that waits for data must give up (`None`: it may wait).
    fn read_deadline(&self, timeouts: &Timeouts) -> Option<Instant> {
        self.with(|s| match *s {
            Stage::Head { since } => Some(since + timeouts.header),
            Stage::Idle { since } => Some(since + timeouts.idle),
            Stage::Busy => None,
        })
    }
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, what.to_owned())
}

/// Polls `timer` set to `deadline` (made on first use): ready once the deadline passed.
fn deadline_passed(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
    let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    timer.as_mut().poll(cx).is_ready()
}

/// A client's socket that enforces the connection's deadlines: a read waiting for data
/// fails once the deadline of the connection's stage passed, and so does a write that made
/// no progress for the body timeout.
struct GuardedSocket {
    stream: TcpStream,
    phase: Arc<Phase>,
    timeouts: Timeouts,
    read_timer: Option<Pin<Box<Sleep>>>,
    /// Since when writes are refused by a full send buffer (the client does not read).
    write_stalled_since: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl GuardedSocket {
    fn watch_write<T>(&mut self, cx: &mut Context<'_>, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if result.is_ready() {
            self.write_stalled_since = None;
            return result;
        }
        let since = *self.write_stalled_since.get_or_insert_with(Instant::now);
        if deadline_passed(&mut self.write_timer, since + self.timeouts.body, cx) {
            return Poll::Ready(Err(timed_out("the client stopped reading the answer")));
        }
        Poll::Pending
    }
}

impl AsyncRead for GuardedSocket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.phase.bytes_arrived(Instant::now());
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        match this.phase.read_deadline(&this.timeouts) {
            Some(deadline) if deadline_passed(&mut this.read_timer, deadline, cx) => {
                Poll::Ready(Err(timed_out("the client sent no complete request in time")))
            }
            Some(_) => Poll::Pending,
            None => {
                this.phase.read_waits_unarmed(cx.waker());
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for GuardedSocket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.watch_write(cx, result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.watch_write(cx, result)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_flush(cx);
        this.watch_write(cx, result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.stream).poll_shutdown(cx);
        this.watch_write(cx, result)
    }
}

/// The body type of warp's answers (its module is private; the type is reachable this way).
trait HasBody {
    type Body;
}

impl<B> HasBody for warp::http::Response<B> {
    type Body = B;
}

type WarpBody = <warp::reply::Response as HasBody>::Body;

/// An answer body that tells the connection when the answer is finished (taken to its
/// end, or dropped, as hyper does after the last byte or for `HEAD`): the idle clock
/// starts then.
struct AnswerBody {
    body: WarpBody,
    phase: Arc<Phase>,
}

impl http_body::Body for AnswerBody {
    type Data = bytes::Bytes;
    type Error = warp::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.phase.answer_finished(Instant::now());
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        self.phase.answer_finished(Instant::now());
    }
}

/// The service of one connection: marks the request as started, passes the peer on.
struct ConnectionService {
    handler: Handler,
    peer: SocketAddr,
    phase: Arc<Phase>,
}

impl hyper::service::Service<warp::http::Request<hyper::body::Incoming>> for ConnectionService {
    type Response = warp::http::Response<AnswerBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn call(&self, mut request: warp::http::Request<hyper::body::Incoming>) -> Self::Future {
        self.phase.request_started();
        request.extensions_mut().insert(Peer(self.peer));
        let answer = (self.handler)(request);
        let phase = self.phase.clone();
        Box::pin(async move { Ok(answer.await.map(|body| AnswerBody { body, phase })) })
    }
}

/// Where connections come from: a listener (tests put failures in between).
pub trait Incoming: Send {
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send;
}

impl Incoming for TcpListener {
    fn accept(&mut self) -> impl Future<Output = io::Result<(TcpStream, SocketAddr)>> + Send {
        TcpListener::accept(self)
    }
}

/// Waits until `flag` turns true (or its sender is gone, which ends the server as well).
async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|on| *on).await;
}

/// Accept errors that concern only the connection being accepted.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Serves connections from `incoming` with `handler` until `shutdown` turns true; then
/// stops accepting, closes idle connections, lets requests in flight finish (for at most
/// `grace`) and closes the rest.
pub async fn run(
    mut incoming: impl Incoming,
    handler: Handler,
    connections: Arc<Connections>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    // Every connection task holds a sender: when all are gone, every connection is closed.
    let (open, mut all_closed) = mpsc::channel::<()>(1);
    let (close_now, closing) = watch::channel(false);
    let mut backoff = ACCEPT_BACKOFF_FIRST;
    loop {
        // Backpressure: a slot first, then accept; at the bound, clients wait in the
        // listen backlog until a connection closes.
        let slot = tokio::select! {
            slot = connections.slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = stopped(&mut shutdown) => break,
        };
        let accepted = tokio::select! {
            accepted = incoming.accept() => accepted,
            _ = stopped(&mut shutdown) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF_FIRST;
                let connection = Connection {
                    handler: handler.clone(),
                    timeouts: connections.timeouts,
                    _slot: slot,
                    _open: open.clone(),
                };
                tokio::spawn(connection.serve(stream, peer, shutdown.clone(), closing.clone()));
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                // Most likely out of descriptors (EMFILE): connections closing will free
                // some. Waiting a little keeps the loop from spinning meanwhile.
                tracing::warn!("cannot accept a connection: {e}; trying again in {backoff:?}");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopped(&mut shutdown) => break,
                }
                backoff = (backoff * 2).min(ACCEPT_BACKOFF_LONGEST);
            }
        }
    }
    drop(incoming);
    drop(open);
    if tokio::time::timeout(grace, all_closed.recv()).await.is_err() {
        tracing::warn!("requests still open after {grace:?}; closing them");
        let _ = close_now.send(true);
        let _ = all_closed.recv().await;
    }
}

/// One accepted connection and what it holds while open.
struct Connection {
    handler: Handler,
    timeouts: Timeouts,
    _slot: OwnedSemaphorePermit,
    _open: mpsc::Sender<()>,
}

impl Connection {
    async fn serve(
        self,
        stream: TcpStream,
        peer: SocketAddr,
        mut shutdown: watch::Receiver<bool>,
        mut closing: watch::Receiver<bool>,
    ) {
        // Answers are written in one go or streamed in chunks: never wait for an ACK
        // before sending the next segment.
        let _ = stream.set_nodelay(true);
        let phase = Arc::new(Phase::new(Instant::now()));
        let socket = GuardedSocket {
            stream,
            phase: phase.clone(),
            timeouts: self.timeouts,
            read_timer: None,
            write_stalled_since: None,
            write_timer: None,
        };
        let service = ConnectionService {
            handler: self.handler.clone(),
            peer,
            phase: phase.clone(),
        };
        let mut http = hyper::server::conn::http1::Builder::new();
        http.header_read_timeout(None)
            .max_buf_size(CONNECTION_BUFFER)
            .max_header_size(CONNECTION_BUFFER);
        let connection = http.serve_connection(hyper_util::rt::TokioIo::new(socket), service);
        let mut connection = std::pin::pin!(connection);
        let result = tokio::select! {
            result = connection.as_mut() => result,
            _ = stopped(&mut shutdown) => {
                if !phase.is_busy() {
                    return; // nothing in flight: close at once
                }
                connection.as_mut().graceful_shutdown();
                tokio::select! {
                    result = connection.as_mut() => result,
                    _ = stopped(&mut closing) => return,
                }
            }
        };
        if let Err(e) = result {
            // hyper names the step that failed; its source says why (one of our deadlines)
            match std::error::Error::source(&e) {
                Some(why) => tracing::debug!("connection from {peer} ended: {e}: {why}"),
                None => tracing::debug!("connection from {peer} ended: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_bounded_by_the_descriptors_left() {
        assert_eq!(connection_bound(1024), 768);
        assert_eq!(connection_bound(20_000), 16_384);
        assert_eq!(connection_bound(u64::MAX), 16_384);
        assert_eq!(connection_bound(100), 16);
    }

    #[test]
    #[expect(unsafe_code, reason = "std has no safe getrlimit(2)")]
    fn the_soft_open_file_limit_is_raised_to_the_hard_limit() {
        let soft = raise_open_file_limit();
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit only writes the struct on our stack.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) }, 0);
        assert_eq!((soft, limit.rlim_cur), (limit.rlim_max, limit.rlim_max));
    }

    #[test]
    fn the_stage_decides_the_read_deadline() {
        let timeouts = Timeouts {
            header: Duration::from_secs(3),
            idle: Duration::from_secs(7),
            body: Duration::from_secs(5),
        };
        let t0 = Instant::now();
        let phase = Phase::new(t0);
        assert_eq!(phase.read_deadline(&timeouts), Some(t0 + timeouts.header));
        phase.bytes_arrived(t0 + Duration::from_secs(1)); // still the same request head
        assert_eq!(phase.read_deadline(&timeouts), Some(t0 + timeouts.header));
        phase.request_started();
        assert_eq!(phase.read_deadline(&timeouts), None);
        phase.bytes_arrived(t0 + Duration::from_secs(2)); // body bytes
        assert_eq!(phase.read_deadline(&timeouts), None);
        let t1 = t0 + Duration::from_secs(4);
        phase.answer_finished(t1);
        assert_eq!(phase.read_deadline(&timeouts), Some(t1 + timeouts.idle));
        phase.answer_finished(t1 + Duration::from_secs(1)); // a second drop changes nothing
        assert_eq!(phase.read_deadline(&timeouts), Some(t1 + timeouts.idle));
        let t2 = t1 + Duration::from_secs(6);
        phase.bytes_arrived(t2);
        assert_eq!(phase.read_deadline(&timeouts), Some(t2 + timeouts.header));
    }

    #[test]
    fn a_read_waiting_while_busy_is_woken_when_the_answer_finishes() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let phase = Phase::new(Instant::now());
        phase.request_started();
        phase.read_waits_unarmed(&waker);
        assert!(!flag.0.load(std::sync::atomic::Ordering::SeqCst));
        phase.answer_finished(Instant::now());
        assert!(
            flag.0.load(std::sync::atomic::Ordering::SeqCst),
            "the read was not polled again"
        );
    }

    /// A listener that fails with EMFILE a number of times before it accepts.
    struct FailingFirst {
        listener: TcpListener,
        failures_left: usize,
        attempts: Arc<Mutex<Vec<Instant>>>,
    }

    impl Incoming for FailingFirst {
        async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
            if self.failures_left > 0 {
                self.failures_left -= 1;
                self.attempts.lock().unwrap().push(Instant::now());
                return Err(io::Error::from_raw_os_error(libc::EMFILE));
            }
            self.listener.accept().await
        }
    }

    /// Runs the loop on `incoming` with a handler that answers `text`, at most `bound`
    /// connections; answers the stop switch and the loop's task.
    fn spawn_loop(
        incoming: impl Incoming + 'static,
        text: &'static str,
        bound: usize,
    ) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let handler: Handler = Arc::new(move |_| Box::pin(async move { warp::reply::Reply::into_response(text) }));
        let connections = Arc::new(Connections::new(Timeouts::default(), bound));
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(run(incoming, handler, connections, stopped, Duration::from_secs(1)));
        (stop, task)
    }

    async fn get(addr: SocketAddr) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    #[tokio::test]
    async fn accept_errors_back_off_and_the_loop_goes_on() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let incoming = FailingFirst {
            listener,
            failures_left: 5,
            attempts: attempts.clone(),
        };
        let (stop, server) = spawn_loop(incoming, "still here", 16);
        let answer = tokio::time::timeout(Duration::from_secs(10), get(addr))
            .await
            .expect("answered after the accept errors");
        assert!(answer.ends_with("still here"), "{answer}");
        let attempts = attempts.lock().unwrap().clone();
        assert_eq!(attempts.len(), 5);
        // backing off: 10 + 20 + 40 + 80 ms between the five failures, no spinning
        let waited = attempts[4] - attempts[0];
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
        stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the loop ends at shutdown")
            .unwrap();
    }

    /// A listener that counts the calls to accept.
    struct Counting {
        listener: TcpListener,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Incoming for Counting {
        async fn accept(&mut self) -> io::Result<(TcpStream, SocketAddr)> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.listener.accept().await
        }
    }

    /// Sends one keep-alive request and reads its answer, `hello`.
    async fn keep_alive_request(stream: &mut TcpStream) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut answer = Vec::new();
        let mut buf = [0u8; 1024];
        while !answer.ends_with(b"\r\n\r\nhello") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "connection closed");
            answer.extend_from_slice(&buf[..n]);
        }
    }

    // current_thread: the accept loop runs until it waits before a connection task runs, so
    // once a connection has been served the loop has either called accept again or is
    // waiting for a slot.
    #[tokio::test(flavor = "current_thread")]
    async fn at_the_bound_the_loop_stops_accepting_until_a_connection_closes() {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let incoming = Counting {
            listener,
            calls: calls.clone(),
        };
        let (stop, server) = spawn_loop(incoming, "hello", 2);
        // two keep-alive connections, each served once, hold both slots
        let mut first = TcpStream::connect(addr).await.unwrap();
        keep_alive_request(&mut first).await;
        let mut second = TcpStream::connect(addr).await.unwrap();
        keep_alive_request(&mut second).await;
        keep_alive_request(&mut first).await;
        assert_eq!(calls.load(Ordering::SeqCst), 2, "accepting beyond the bound");
        // a slot frees when a connection closes: the loop accepts again
        drop(first);
        let deadline = Instant::now() + Duration::from_secs(10);
        while calls.load(Ordering::SeqCst) < 3 {
            assert!(Instant::now() < deadline, "no accept after a connection closed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let answer = tokio::time::timeout(Duration::from_secs(10), get(addr)).await.unwrap();
        assert!(answer.ends_with("hello"), "{answer}");
        drop(second);
        stop.send(true).unwrap();
        server.await.unwrap();
    }
}
