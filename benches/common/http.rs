//! What the benchmarks that drive a server over HTTP share: a minimal HTTP/1.1 client (one
//! keep-alive connection, requests prepared as bytes), a closed-loop load generator and its
//! statistics, and `pigeonhole serve` started on loopback ports (`Server`).

use super::R;
use serde_json::{json, Value};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Bytes of item data (and of the sled values of the server benchmark's ceiling).
pub const ITEM_BYTES: usize = 100;
pub const BENCH_PASSWORD: &str = "bench password";

// ---------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one keep-alive connection, requests prepared as bytes once.
// It costs far less CPU than a general client, which matters on a 2-core machine where the
// load generator and the server share the cores.

pub struct Response {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn text(&self) -> String {
        let t = String::from_utf8_lossy(&self.body);
        t.chars().take(300).collect()
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub fn protocol(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("bad HTTP answer: {what}"))
}

pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    pub async fn fill(&mut self) -> io::Result<()> {
        self.buf.reserve(64 * 1024);
        let n = self.stream.read_buf(&mut self.buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        Ok(())
    }

    pub async fn need(&mut self, len: usize) -> io::Result<()> {
        while self.buf.len() < len {
            self.fill().await?;
        }
        Ok(())
    }

    /// Index of the next CRLF at or after `from`.
    pub async fn line_end(&mut self, from: usize) -> io::Result<usize> {
        loop {
            if let Some(p) = self.buf.get(from..).and_then(|b| find(b, b"\r\n")) {
                return Ok(from + p);
            }
            self.fill().await?;
        }
    }

    pub async fn exchange(&mut self, request: &[u8]) -> io::Result<Response> {
        self.stream.write_all(request).await?;
        self.response().await
    }

    pub async fn response(&mut self) -> io::Result<Response> {
        let head_end = loop {
            if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                break p + 4;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end]).into_owned();
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol("status line"))?;
        let mut response = Response {
            status,
            head,
            body: Vec::new(),
        };
        let chunked = response
            .header("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let length = response.header("content-length").and_then(|v| v.parse::<usize>().ok());
        let consumed = if chunked {
            let mut at = head_end;
            loop {
                let eol = self.line_end(at).await?;
                let size = {
                    let text = String::from_utf8_lossy(&self.buf[at..eol]);
                    let digits = text.split(';').next().unwrap_or("").trim().to_owned();
                    usize::from_str_radix(&digits, 16).map_err(|_| protocol("chunk size"))?
                };
                at = eol + 2;
                if size == 0 {
                    // trailers (normally none), then the empty line
                    loop {
                        let eol = self.line_end(at).await?;
                        let empty = eol == at;
                        at = eol + 2;
                        if empty {
                            break;
                        }
                    }
                    break at;
                }
                self.need(at + size + 2).await?;
                response.body.extend_from_slice(&self.buf[at..at + size]);
                at += size + 2;
            }
        } else {
            let n = length.unwrap_or(0);
            self.need(head_end + n).await?;
            response.body.extend_from_slice(&self.buf[head_end..head_end + n]);
            head_end + n
        };
        self.buf.drain(..consumed);
        Ok(response)
    }
}

/// The bytes of one request; a body is sent as JSON.
pub fn request(method: &str, addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(b) = body {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    text.push_str("\r\n");
    let mut out = text.into_bytes();
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    out
}

pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

pub async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = R<T>>) -> R<T> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| format!("{what}: no answer within {limit:?}"))?
}

/// One request on a new connection (setup steps).
pub async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> R<Response> {
    let auth = token.map(bearer);
    let mut headers = Vec::new();
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    let body = body.map(|b| b.to_string().into_bytes());
    let req = request(method, addr, path, &headers, body.as_deref());
    within(Duration::from_secs(120), &format!("{method} {path}"), async {
        let mut c = Conn::open(addr).await.map_err(|e| format!("{method} {path}: {e}"))?;
        c.exchange(&req).await.map_err(|e| format!("{method} {path}: {e}"))
    })
    .await
}

pub async fn expect(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    status: u16,
) -> R<Response> {
    let r = call(addr, method, path, token, body).await?;
    if r.status != status {
        return Err(format!(
            "{method} {path}: expected {status}, got {} {}",
            r.status,
            r.text()
        ));
    }
    Ok(r)
}

/// Registers `name` and logs in: the bearer token. (The inbox answers a registration
/// with 204, the scheduler with 200, as the originals did.)
pub async fn register_login(addr: SocketAddr, name: &str) -> R<String> {
    let body = json!({"name": name, "password": BENCH_PASSWORD});
    let r = call(addr, "POST", "/register", None, Some(&body)).await?;
    if r.status != 204 && r.status != 200 {
        return Err(format!("POST /register: expected 204 or 200, got {}", r.status));
    }
    login(addr, name).await
}

pub async fn login(addr: SocketAddr, name: &str) -> R<String> {
    let body = json!({"username": name, "password": BENCH_PASSWORD});
    let r = expect(addr, "POST", "/login", None, Some(&body), 204).await?;
    r.header("set-cookie")
        .and_then(|c| c.strip_prefix("JWT-Cookie="))
        .and_then(|c| c.split(';').next())
        .map(str::to_owned)
        .ok_or_else(|| "login: no JWT-Cookie in the answer".to_owned())
}

// ---------------------------------------------------------------------------------------
// Load generation and statistics.

#[derive(Default)]
pub struct Load {
    /// Answers with the expected status inside the measured window.
    pub ok: u64,
    /// Answers with the expected status, warm-up and window (of `http_closed_with`).
    pub answered: u64,
    pub errors: u64,
    pub secs: f64,
    pub lat_us: Vec<u32>,
    pub first_error: Option<String>,
}

impl Load {
    pub fn add(&mut self, other: Load) {
        self.ok += other.ok;
        self.answered += other.answered;
        self.errors += other.errors;
        self.secs += other.secs;
        self.lat_us.extend(other.lat_us);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }

    pub fn error(&mut self, counted: bool, what: String) {
        if counted {
            self.errors += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }

    /// Counts the answer `r` to a request (an error unless its status is `status`; inside
    /// the measured window when `counted`) and its `latency`: whether it was answered with
    /// `status`.
    pub fn record(&mut self, r: R<Response>, status: u16, counted: bool, latency: Duration) -> bool {
        match r {
            Ok(resp) if resp.status == status => {
                self.answered += 1;
                if counted {
                    self.ok += 1;
                    self.lat_us.push(micros(latency));
                }
                true
            }
            Ok(resp) => {
                self.error(counted, format!("status {} {}", resp.status, resp.text()));
                false
            }
            Err(e) => {
                self.error(counted, e);
                false
            }
        }
    }

    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.secs.max(1e-9)
    }

    pub fn pct_ms(&self, p: f64) -> f64 {
        percentile(&self.lat_us, p) / 1000.0
    }

    pub fn check(&self, what: &str) -> R<()> {
        if self.ok == 0 || self.errors * 100 > self.ok {
            return Err(format!(
                "{what}: {} ok, {} errors, first error: {}",
                self.ok,
                self.errors,
                self.first_error.as_deref().unwrap_or("none")
            ));
        }
        Ok(())
    }
}

/// The `p` quantile (0..=1) of the samples, nearest rank.
pub fn percentile<T: Copy + Into<f64> + PartialOrd>(samples: &[T], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut v: Vec<f64> = samples.iter().map(|&s| s.into()).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

pub fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len().max(1) as f64
}

pub fn micros(d: Duration) -> u32 {
    d.as_micros().min(u32::MAX as u128) as u32
}

/// `conns` connections, each sending `req` back to back for `warmup` + `secs`; only requests
/// that start and end inside the measured window count.
pub async fn http_closed(
    addr: SocketAddr,
    req: Arc<Vec<u8>>,
    conns: usize,
    warmup: f64,
    secs: f64,
    status: u16,
) -> Load {
    let requests = |_| {
        let req = req.clone();
        move || req.clone()
    };
    http_closed_with(addr, conns, warmup, secs, status, requests, None).await
}

/// [`http_closed`] with requests made by `requests(connection)`, called once per connection:
/// a generator of that connection's requests, one call per request (for requests that must
/// differ, such as records with a fresh id and the next index). `progress`, when given,
/// counts the answers with `status` as they come (to relate what a server did between two
/// instants to the requests it answered meanwhile).
pub async fn http_closed_with<G>(
    addr: SocketAddr,
    conns: usize,
    warmup: f64,
    secs: f64,
    status: u16,
    requests: impl Fn(usize) -> G,
    progress: Option<&Arc<AtomicU64>>,
) -> Load
where
    G: FnMut() -> Arc<Vec<u8>> + Send + 'static,
{
    let begin = Instant::now() + Duration::from_secs_f64(warmup);
    let end = begin + Duration::from_secs_f64(secs);
    let mut set = JoinSet::new();
    for i in 0..conns {
        let mut next = requests(i);
        let progress = progress.cloned();
        set.spawn(async move {
            let mut l = Load::default();
            let mut conn: Option<Conn> = None;
            while Instant::now() < end {
                if let Err(e) = connected(&mut conn, addr).await {
                    l.error(true, e);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let req = next();
                let t0 = Instant::now();
                let r = exchange_on(&mut conn, &req).await;
                let t1 = Instant::now();
                let counted = t0 >= begin && t1 <= end;
                if l.record(r, status, counted, t1 - t0) {
                    if let Some(p) = &progress {
                        p.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            l
        });
    }
    gather(set, secs).await
}

/// The loads of the tasks of `set` added up, over `secs` measured seconds.
pub async fn gather(mut set: JoinSet<Load>, secs: f64) -> Load {
    let mut total = Load::default();
    while let Some(r) = set.join_next().await {
        match r {
            Ok(l) => total.add(l),
            Err(e) => total.error(true, format!("worker: {e}")),
        }
    }
    total.secs = secs;
    total
}

/// Opens the load generator's connection `conn` to `addr` unless it is open.
pub async fn connected(conn: &mut Option<Conn>, addr: SocketAddr) -> R<()> {
    if conn.is_none() {
        *conn = Some(Conn::open(addr).await.map_err(|e| format!("connect: {e}"))?);
    }
    Ok(())
}

/// One request on the open connection `conn` (see [`connected`]), answered within 30 s; the
/// connection is dropped after an error.
pub async fn exchange_on(conn: &mut Option<Conn>, req: &[u8]) -> R<Response> {
    let Some(c) = conn.as_mut() else {
        return Err("not connected".into());
    };
    let r = match tokio::time::timeout(Duration::from_secs(30), c.exchange(req)).await {
        Ok(Ok(resp)) => return Ok(resp),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer within 30 s".into(),
    };
    *conn = None;
    Err(r)
}

/// The last lines of the log file at `path`, on one line.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

pub fn free_port() -> R<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

pub struct Server {
    pub child: Child,
    pub inbox: SocketAddr,
    pub scheduler: SocketAddr,
    pub started: Instant,
    pub log: PathBuf,
}

impl Server {
    /// Starts `bin serve` on fresh loopback ports and waits until both services answer
    /// `GET /pricing` with 200; answers the server and the time from spawn to that.
    pub async fn start(bin: &Path, data: &Path, log: &Path, extra: &[&str]) -> R<(Server, Duration)> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (ip, sp) = (free_port()?, free_port()?);
            let stderr = std::fs::File::options()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| format!("{}: {e}", log.display()))?;
            let started = Instant::now();
            let child = Command::new(bin)
                .arg("serve")
                .arg("--data-dir")
                .arg(data)
                .args(["--host", "127.0.0.1", "--log-level", "warn"])
                .args(["--inbox-port", &ip.to_string(), "--scheduler-port", &sp.to_string()])
                .args(extra)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .map_err(|e| format!("start {}: {e}", bin.display()))?;
            let mut server = Server {
                child,
                inbox: SocketAddr::from(([127, 0, 0, 1], ip)),
                scheduler: SocketAddr::from(([127, 0, 0, 1], sp)),
                started,
                log: log.to_owned(),
            };
            match server.ready(Duration::from_secs(120)).await {
                Ok(d) => return Ok((server, d)),
                Err(e) => {
                    let tail = server.log_tail();
                    if attempt < 3 && tail.contains("cannot listen") {
                        continue; // a port was taken between choosing and binding it
                    }
                    return Err(format!("{e}; server log: {tail}"));
                }
            }
        }
    }

    pub async fn ready(&mut self, limit: Duration) -> R<Duration> {
        let deadline = self.started + limit;
        let mut up = [false, false];
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("the server exited during start-up ({status})"));
            }
            for (i, addr) in [self.inbox, self.scheduler].into_iter().enumerate() {
                if !up[i] {
                    let req = request("GET", addr, "/pricing", &[], None);
                    let attempt = async {
                        let mut c = Conn::open(addr).await?;
                        c.exchange(&req).await
                    };
                    if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(30), attempt).await {
                        up[i] = r.status == 200;
                    }
                }
            }
            if up == [true, true] {
                return Ok(self.started.elapsed());
            }
            if Instant::now() > deadline {
                return Err(format!("the server did not answer within {limit:?}"));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    pub fn log_tail(&self) -> String {
        log_tail(&self.log)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// VmRSS in bytes.
    pub fn rss(&self) -> R<u64> {
        rss_of(self.pid())
    }

    /// SIGTERM, then waits (at most 30 s, then SIGKILL).
    pub async fn stop(mut self) -> R<ExitStatus> {
        stop_child(&mut self.child, libc::SIGTERM, "the server").await
    }
}

/// Sends `signal` to our child process `child`, then waits for it to exit (at most 30 s,
/// then SIGKILL).
pub async fn stop_child(child: &mut Child, signal: libc::c_int, what: &str) -> R<ExitStatus> {
    if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
        return Ok(status);
    }
    #[expect(
        unsafe_code,
        reason = "std's Child::kill sends only SIGKILL; a graceful stop is SIGTERM (SIGINT for strace)"
    )]
    // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (try_wait
    // above saw it running, and only this function or Drop reaps it).
    unsafe {
        libc::kill(child.id() as libc::pid_t, signal);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{what} did not stop within 30 s of signal {signal} (killed)"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn rss_of(pid: u32) -> R<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmRSS".into())
}

/// A body of `POST /inbox/item` with `ITEM_BYTES` of text.
pub fn item_data(n: usize) -> String {
    use base64::Engine;
    let mut text = format!("benchmark item {n} ").into_bytes();
    text.resize(ITEM_BYTES, b'x');
    base64::engine::general_purpose::STANDARD.encode(text)
}
