//! Shared HTTP plumbing for both services: one warp filter that hands every request to a
//! service's route table, in the order of checks of inbox.md §1.2 (route → 404/405, CORS
//! preflight, declared body size → 413, credentials and permission from the headers alone →
//! 401, only then the body), JSON errors, CORS headers on every answer, `HEAD` as `GET`,
//! long lists streamed, one log line per request; served by our own connection loop
//! ([`server`]) with the deadlines of spec decision 17.

pub mod app;
pub mod body;
mod error;
pub mod routes;
pub mod server;

use bytes::{Buf, Bytes};
use futures_util::Stream;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use warp::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use warp::http::{Method, StatusCode};
use warp::Filter;

pub use error::{ApiError, ErrorKind, UNAVAILABLE_RETRY_AFTER, UNREACHABLE_RETRY_AFTER};

use crate::config::ProxyNet;
use crate::domain::account::Principal;
use crate::metrics::Metrics;

pub use warp::http;

/// What both services share about connections and bodies: timeouts, the bound on open
/// connections, the turns of large public bodies, and how long a stop waits for requests
/// in flight; and the metrics that every answer is counted in.
pub struct Limits {
    pub connections: Arc<server::Connections>,
    pub public_bodies: body::PublicBodies,
    pub grace: Duration,
    pub metrics: Arc<Metrics>,
    /// Where the undecodable records that requests meet are noted (logged once each,
    /// counted by the health check): the store's own set.
    pub undecodable: Arc<crate::store::undecodable::UndecodableRecords>,
}

impl Limits {
    pub fn new(timeouts: crate::config::Timeouts, connection_bound: usize, grace: Duration) -> Limits {
        Limits {
            connections: Arc::new(server::Connections::new(timeouts, connection_bound)),
            public_bodies: body::PublicBodies::default(),
            grace,
            metrics: Arc::new(Metrics::off()),
            undecodable: Arc::default(),
        }
    }

    /// These limits, with undecodable records noted in `records` (the store's).
    pub fn with_undecodable(mut self, records: Arc<crate::store::undecodable::UndecodableRecords>) -> Limits {
        self.undecodable = records;
        self
    }

    /// These limits, with answers counted in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Limits {
        self.metrics = metrics;
        self
    }
}

/// A request before its body: what credentials and permissions are checked on.
pub struct Head {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub peer: Option<SocketAddr>,
    /// The client's address: the peer, or behind a trusted proxy the address it forwarded
    /// for ([`client_address`]).
    pub client: Option<IpAddr>,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.get(name)
    }

    /// 415 unless the body is declared as JSON (`application/json`, parameters allowed,
    /// media type compared case-insensitively).
    pub fn require_json(&self) -> Result<(), ApiError> {
        let is_json = self
            .headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("application/json")
            })
            .unwrap_or(false);
        if is_json {
            Ok(())
        } else {
            Err(ApiError::unsupported_media_type(
                "the request body must be JSON (Content-Type: application/json)",
            ))
        }
    }
}

/// A request as the handlers see it: routed, admitted, body read in full (within the cap;
/// empty for routes that take none). Its head's fields read as its own.
pub struct Request {
    pub head: Head,
    pub body: Bytes,
}

impl Deref for Request {
    type Target = Head;

    fn deref(&self) -> &Head {
        &self.head
    }
}

impl Request {
    /// The JSON content type check, then the body, which must be a JSON object, parsed as
    /// `T` (400 on any failure).
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        self.require_json()?;
        // serde would also read a struct from a JSON array: refuse anything but an object
        if self.body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        parse_json(&self.body)
    }
}

/// Parses exactly one JSON value into `T`; 400 with serde's reason otherwise.
pub fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// `text` safe inside HTML text and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether a request comes from a browser that wants a page rather than JSON.
pub fn wants_html(head: &Head) -> bool {
    head.header("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// The client address of inbox.md §1.7: the TCP peer; when the peer is a trusted proxy, the
/// right-most address of `X-Forwarded-For` (all such headers, in order) that is not itself
/// trusted. An entry that is not an address ends the walk: the hop that forwarded it is
/// the client then (a proxy never writes such an entry, so the client wrote it).
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[ProxyNet]) -> IpAddr {
    let is_trusted = |a: IpAddr| trusted.iter().any(|p| p.contains(a));
    let mut client = peer.to_canonical();
    if !is_trusted(client) {
        return client;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .collect();
    for hop in hops.iter().rev() {
        match parse_hop(hop) {
            Some(addr) => {
                client = addr;
                if !is_trusted(addr) {
                    break;
                }
            }
            None => break,
        }
    }
    client
}

/// One `X-Forwarded-For` entry: an address, also with a port (`1.2.3.4:80`, `[::1]:80`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(a) = hop.parse::<IpAddr>() {
        return Some(a.to_canonical());
    }
    hop.parse::<SocketAddr>().ok().map(|s| s.ip().to_canonical())
}

/// A successful answer.
pub struct Reply {
    pub status: StatusCode,
    pub body: Payload,
    pub content_type: Option<&'static str>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// The body of an answer: all of it, or chunks made while the answer is sent.
pub enum Payload {
    Full(Vec<u8>),
    Chunks(Chunks),
    /// Chunks made by an async reader (pages read from the store while the answer is sent).
    Stream(ChunkStream),
}

/// Chunks of an answer body from an async source; an error ends the connection, as with
/// [`Chunks`].
pub struct ChunkStream(std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, ApiError>> + Send>>);

/// warp wants a `Sync` stream; the stream is only ever polled by the task sending it.
struct SyncStream(std::sync::Mutex<ChunkStream>);

impl Stream for SyncStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let inner = self.get_mut().0.get_mut().unwrap_or_else(|p| p.into_inner());
        inner
            .0
            .as_mut()
            .poll_next(cx)
            .map(|c| c.map(|c| c.map_err(|e| std::io::Error::other(e.message))))
    }
}

/// A page of a listing read from the store: its items, and the cursor of the next page
/// (`None`: this was the last).
pub type Page<T, C> = std::pin::Pin<Box<dyn Future<Output = Result<(Vec<T>, Option<C>), ApiError>> + Send>>;

/// Chunks of an answer body, made on demand; an error ends the connection (the answer's
/// status is sent by then), so the client sees a broken answer, never a short list. Lists
/// of stored records are checked before they are streamed ([`Reply::json_list`]), so only
/// an I/O error met while sending can do this.
pub struct Chunks(Box<dyn Iterator<Item = Result<Bytes, ApiError>> + Send>);

impl Chunks {
    fn into_stream(self) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + Sync + 'static {
        // warp wants a Sync stream; the iterator is only ever used by the task sending it
        let chunks = std::sync::Mutex::new(self.0);
        futures_util::stream::iter(std::iter::from_fn(move || {
            let mut chunks = chunks.lock().unwrap_or_else(|p| p.into_inner());
            chunks.next().map(|c| c.map_err(|e| std::io::Error::other(e.message)))
        }))
    }
}

/// A JSON array answer is sent in chunks of about this size.
const JSON_CHUNK: usize = 64 * 1024;
/// A list whose JSON is at most this long is answered from memory ([`Reply::json_list`]).
const LIST_BUFFER: usize = 1024 * 1024;

impl Reply {
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(body) => Reply {
                status: StatusCode::OK,
                body: Payload::Full(body),
                content_type: Some("application/json"),
                headers: Vec::new(),
            },
            Err(e) => ApiError::internal(format!("could not encode the answer: {e}")).into_reply(),
        }
    }

    /// A JSON array of the items that `list` reads, answered only once every item has been
    /// read and decoded, so that an error anywhere in the list (an undecodable record) is
    /// the answer, a JSON error, and never a connection broken off after a 200. A list of
    /// up to [`LIST_BUFFER`] bytes of JSON is read once and answered from memory; a longer
    /// one is read to its end to check it (one item in memory at a time), then read again
    /// by a second call of `list` and streamed ([`Reply::json_array`]). Only records this
    /// version wrote can appear between the two readings, and they decode.
    pub fn json_list<T, I, F>(list: F) -> Result<Reply, ApiError>
    where
        T: Serialize + Send + 'static,
        I: Iterator<Item = Result<T, ApiError>> + Send + 'static,
        F: Fn() -> I,
    {
        let encoding = |e: serde_json::Error| ApiError::internal(format!("could not encode the answer: {e}"));
        let mut items = list();
        let mut out = vec![b'['];
        loop {
            match items.next() {
                None => {
                    out.push(b']');
                    return Ok(Reply {
                        status: StatusCode::OK,
                        body: Payload::Full(out),
                        content_type: Some("application/json"),
                        headers: Vec::new(),
                    });
                }
                Some(item) => {
                    if out.len() > 1 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut out, &item?).map_err(encoding)?;
                    if out.len() > LIST_BUFFER {
                        break;
                    }
                }
            }
        }
        drop(out);
        for item in items {
            item?;
        }
        Ok(Reply::json_array(list()))
    }

    /// [`Reply::json_list`] of a listing read in pages by `read` (called with the cursor of
    /// the page, `None` for the first): a list of up to [`LIST_BUFFER`] bytes of JSON is
    /// read once and answered from memory; a longer one is read to its end to check it (one
    /// page in memory at a time), then read again and streamed, a page at a time.
    pub async fn json_pages<T, C, F>(read: F) -> Result<Reply, ApiError>
    where
        T: Serialize + Send + 'static,
        C: Clone + Send + 'static,
        F: Fn(Option<C>) -> Page<T, C> + Send + Sync + 'static,
    {
        let encoding = |e: serde_json::Error| ApiError::internal(format!("could not encode the answer: {e}"));
        let mut out = vec![b'['];
        let mut buffering = true;
        let mut cursor = None;
        loop {
            let (page, next) = read(cursor.take()).await?;
            if buffering {
                for item in &page {
                    if out.len() > 1 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut out, item).map_err(encoding)?;
                }
                if out.len() > LIST_BUFFER {
                    buffering = false;
                    out = Vec::new();
                }
            }
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if buffering {
            out.push(b']');
            return Ok(Reply {
                status: StatusCode::OK,
                body: Payload::Full(out),
                content_type: Some("application/json"),
                headers: Vec::new(),
            });
        }
        // (the cursor of the next page, whether an item was sent); `None`: finished
        let start: Option<(Option<C>, bool)> = Some((None, false));
        let chunks = futures_util::stream::unfold((read, start), move |(read, state)| async move {
            let (cursor, started) = state?;
            let mut out = Vec::with_capacity(JSON_CHUNK);
            if cursor.is_none() && !started {
                out.push(b'[');
            }
            let (page, next) = match read(cursor).await {
                Ok(page) => page,
                Err(e) => return Some((Err(e), (read, None))),
            };
            let mut started = started;
            for item in &page {
                if started {
                    out.push(b',');
                }
                started = true;
                if let Err(e) = serde_json::to_writer(&mut out, item) {
                    let e = ApiError::internal(format!("could not encode the answer: {e}"));
                    return Some((Err(e), (read, None)));
                }
            }
            let state = match next {
                Some(next) => Some((Some(next), started)),
                None => {
                    out.push(b']');
                    None
                }
            };
            Some((Ok(Bytes::from(out)), (read, state)))
        });
        Ok(Reply {
            status: StatusCode::OK,
            body: Payload::Stream(ChunkStream(Box::pin(chunks))),
            content_type: Some("application/json"),
            headers: Vec::new(),
        })
    }

    /// A JSON array of `items`, encoded and sent a chunk at a time while they are read
    /// (memory: one chunk and one item, however long the list). An error before the first
    /// item is the answer; a later one breaks the connection.
    pub fn json_array<T, I>(items: I) -> Reply
    where
        T: Serialize + Send + 'static,
        I: Iterator<Item = Result<T, ApiError>> + Send + 'static,
    {
        let mut items = items.peekable();
        if let Some(Err(_)) = items.peek() {
            if let Some(Err(e)) = items.next() {
                return e.into_reply();
            }
        }
        let mut started = false;
        let mut finished = false;
        let chunks = std::iter::from_fn(move || {
            if finished {
                return None;
            }
            let mut out = Vec::with_capacity(JSON_CHUNK);
            if !started {
                out.push(b'[');
            }
            while out.len() < JSON_CHUNK {
                match items.next() {
                    Some(Ok(item)) => {
                        if started {
                            out.push(b',');
                        }
                        started = true;
                        if let Err(e) = serde_json::to_writer(&mut out, &item) {
                            finished = true;
                            return Some(Err(ApiError::internal(format!("could not encode the answer: {e}"))));
                        }
                    }
                    Some(Err(e)) => {
                        finished = true;
                        return Some(Err(e));
                    }
                    None => {
                        started = true;
                        finished = true;
                        out.push(b']');
                        break;
                    }
                }
            }
            Some(Ok(Bytes::from(out)))
        });
        Reply {
            status: StatusCode::OK,
            body: Payload::Chunks(Chunks(Box::new(chunks))),
            content_type: Some("application/json"),
            headers: Vec::new(),
        }
    }

    /// 200 with an empty body.
    pub fn empty() -> Reply {
        Reply {
            status: StatusCode::OK,
            body: Payload::Full(Vec::new()),
            content_type: None,
            headers: Vec::new(),
        }
    }

    /// 204 with an empty body.
    pub fn no_content() -> Reply {
        Reply {
            status: StatusCode::NO_CONTENT,
            ..Reply::empty()
        }
    }

    /// A small page of the server's own (`title`, then paragraphs, then optional raw HTML
    /// such as a form), every text escaped.
    pub fn simple_page(status: StatusCode, title: &str, paragraphs: &[String], form: Option<&str>) -> Reply {
        let mut body = String::new();
        for p in paragraphs {
            body.push_str(&format!("<p>{}</p>\n", escape_html(p)));
        }
        let page = format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{t}</title></head>\n<body>\n<main>\n<h1>{t}</h1>\n{body}{form}</main>\n</body></html>\n",
            t = escape_html(title),
            form = form.unwrap_or("")
        );
        Reply::html_page(status, page)
    }

    /// A page made for this request (`status`), framed by no other site and loading
    /// nothing but itself.
    pub fn html_page(status: StatusCode, page: String) -> Reply {
        Reply {
            status,
            body: Payload::Full(page.into_bytes()),
            content_type: Some("text/html; charset=utf-8"),
            headers: vec![
                (
                    HeaderName::from_static("content-security-policy"),
                    HeaderValue::from_static(
                        "default-src 'none'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
                    ),
                ),
                (HeaderName::from_static("x-frame-options"), HeaderValue::from_static("DENY")),
                (
                    HeaderName::from_static("x-content-type-options"),
                    HeaderValue::from_static("nosniff"),
                ),
                (HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer")),
            ],
        }
    }

    /// A JSON document kept as text in the binary (the `GET /openapi.json` documents).
    pub fn json_text(document: &'static str) -> Reply {
        Reply {
            status: StatusCode::OK,
            body: Payload::Full(document.as_bytes().to_vec()),
            content_type: Some("application/json"),
            headers: Vec::new(),
        }
    }

    pub fn html(page: &'static str) -> Reply {
        let static_value = HeaderValue::from_static;
        let headers = vec![
            (
                HeaderName::from_static("content-security-policy"),
                HeaderValue::from_str(&static_page_policy(page))
                    .unwrap_or(static_value("default-src 'none'; frame-ancestors 'none'")),
            ),
            (HeaderName::from_static("x-frame-options"), static_value("DENY")),
            (
                HeaderName::from_static("x-content-type-options"),
                static_value("nosniff"),
            ),
            (HeaderName::from_static("referrer-policy"), static_value("no-referrer")),
        ];
        Reply {
            status: StatusCode::OK,
            body: Payload::Full(page.as_bytes().to_vec()),
            content_type: Some("text/html; charset=utf-8"),
            headers,
        }
    }

    /// The HTTP response: status, content type, extra headers, body.
    pub fn into_response(self) -> warp::reply::Response {
        let mut response = match self.body {
            Payload::Full(bytes) => warp::reply::Reply::into_response(bytes),
            Payload::Chunks(chunks) => warp::reply::Reply::into_response(warp::reply::stream(chunks.into_stream())),
            Payload::Stream(chunks) => {
                warp::reply::Reply::into_response(warp::reply::stream(SyncStream(std::sync::Mutex::new(chunks))))
            }
        };
        *response.status_mut() = self.status;
        let h = response.headers_mut();
        h.remove(CONTENT_TYPE);
        if let Some(ct) = self.content_type {
            h.insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        for (name, value) in self.headers {
            h.append(name, value);
        }
        response
    }

    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Reply {
        self.headers.push((name, value));
        self
    }
}

/// A JSON array written element by element as they come (each element's encoding is
/// appended and the element dropped), for lists whose elements are made asynchronously.
pub struct JsonArray {
    out: Vec<u8>,
    error: Option<serde_json::Error>,
}

impl Default for JsonArray {
    fn default() -> JsonArray {
        JsonArray {
            out: vec![b'['],
            error: None,
        }
    }
}

impl JsonArray {
    pub fn push<T: Serialize + ?Sized>(&mut self, item: &T) {
        if self.out.len() > 1 {
            self.out.push(b',');
        }
        if let Err(e) = serde_json::to_writer(&mut self.out, item) {
            self.error.get_or_insert(e);
        }
    }

    pub fn into_reply(mut self) -> Reply {
        if let Some(e) = self.error {
            return ApiError::internal(format!("could not encode the answer: {e}")).into_reply();
        }
        self.out.push(b']');
        Reply {
            status: StatusCode::OK,
            body: Payload::Full(self.out),
            content_type: Some("application/json"),
            headers: Vec::new(),
        }
    }
}

/// The Content-Security-Policy of a static page of ours (the `GET /` API descriptions): no
/// script at all, and no style but the page's own `<style>` block, allowed by its SHA-256.
fn static_page_policy(page: &str) -> String {
    use base64::Engine;
    use sha2::Digest;
    let style = page
        .split_once("<style>")
        .and_then(|(_, rest)| rest.split_once("</style>"))
        .map_or_else(
            || "'none'".to_owned(),
            |(css, _)| {
                let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(css.as_bytes()));
                format!("'sha256-{hash}'")
            },
        );
    format!(
        "default-src 'none'; style-src {style}; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    )
}

/// A `:uuid` path capture: 400 unless it is a canonical UUID.
pub fn path_uuid(segment: &str) -> Result<uuid::Uuid, ApiError> {
    crate::domain::wire::parse_uuid(segment).ok_or_else(|| ApiError::bad_request("invalid UUID in path"))
}

/// A service: its route table, and how it admits the callers of the table's routes.
pub trait Service: Send + Sync + Sized + 'static {
    /// `inbox` or `scheduler`, for the log.
    fn name(&self) -> &'static str;

    /// The routes, their access, body use and handlers.
    fn table(&self) -> &routes::Table<Self>;

    /// Checks 3 and 4 of inbox.md §1.2, from the headers alone, before any body is read:
    /// `None` for a public route, else the caller, whose credentials carry the row's
    /// permissions (its access's and `also_needs`); 401 otherwise (403 for `POST /register`
    /// while registration is closed).
    fn admit(
        &self,
        row: &routes::Row<Self>,
        head: &Head,
    ) -> impl Future<Output = Result<Option<Principal>, ApiError>> + Send;

    /// The settings: the body cap (413 above it), the trusted proxies.
    fn settings(&self) -> &crate::config::Settings;
}

fn preflight(headers: &HeaderMap) -> Reply {
    let requested = headers
        .get("access-control-request-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut allowed: Vec<String> = [
        "authorization",
        "content-type",
        "username",
        "access-key",
        "idempotency-key",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for h in requested.split(',').map(|h| h.trim().to_ascii_lowercase()) {
        if !h.is_empty() && !allowed.contains(&h) {
            allowed.push(h);
        }
    }
    let mut reply = Reply::empty();
    let allow_headers = HeaderValue::from_str(&allowed.join(", ")).unwrap_or(HeaderValue::from_static(
        "authorization, content-type, username, access-key",
    ));
    reply.headers.push((
        HeaderName::from_static("access-control-allow-methods"),
        HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS"),
    ));
    reply
        .headers
        .push((HeaderName::from_static("access-control-allow-headers"), allow_headers));
    reply.headers.push((
        HeaderName::from_static("access-control-max-age"),
        HeaderValue::from_static("86400"),
    ));
    reply
}

async fn dispatch<S: Service, St, B>(
    service: Arc<S>,
    limits: Arc<Limits>,
    head: Head,
    body: St,
) -> warp::reply::Response
where
    St: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let started = std::time::Instant::now();
    let (method, path, client) = (head.method.clone(), head.path.clone(), head.client);
    let has_origin = head.headers.contains_key("origin");
    // what the metrics count the request under: a path of no route is `unknown`
    let mut route = "unknown";
    let reply = if method == Method::OPTIONS && has_origin && head.headers.contains_key("access-control-request-method")
    {
        route = "Preflight";
        preflight(&head.headers)
    } else {
        answer(service.clone(), &limits, head, body, &mut route)
            .await
            .unwrap_or_else(|e| {
                if let Some(record) = e.undecodable() {
                    limits.undecodable.note(record);
                }
                e.into_reply()
            })
    };
    limits
        .metrics
        .request(service.name(), route, reply.status.as_u16(), started.elapsed());
    tracing::debug!(
        service = service.name(),
        client = %client.map_or_else(|| "-".to_owned(), |c| c.to_string()),
        method = %method,
        path = %loggable_path(&path),
        status = reply.status.as_u16(),
        duration = ?started.elapsed(),
        "request"
    );
    let mut response = reply.into_response();
    if has_origin {
        response
            .headers_mut()
            .insert("access-control-allow-origin", HeaderValue::from_static("*"));
    }
    response
}

/// `path` as it may be logged. The key of an e-mail verification link is a credential, in
/// both of its paths (`/trigger/email/verify/:id/:key`, `/verify-email/:id/:key`): everything
/// after the trigger's id is cut, whatever it is (also on paths that are not routes).
fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    for prefix in ["/trigger/email/verify/", "/verify-email/"] {
        if let Some(rest) = path.strip_prefix(prefix) {
            if let Some((id, _secret)) = rest.split_once('/') {
                return format!("{prefix}{id}/…").into();
            }
        }
    }
    path.into()
}

#[cfg(test)]
mod loggable_path_tests {
    use super::loggable_path;

    #[test]
    fn verification_keys_are_cut_from_both_paths() {
        let key = "0123456789abcdef0123456789abcdef";
        for prefix in ["/trigger/email/verify/", "/verify-email/"] {
            let path = format!("{prefix}id-1/{key}");
            assert_eq!(loggable_path(&path), format!("{prefix}id-1/…"));
            let longer = format!("{prefix}id-1/{key}/more");
            assert!(!loggable_path(&longer).contains(key), "{longer}");
        }
        assert_eq!(loggable_path("/verify-email/id-1"), "/verify-email/id-1");
        assert_eq!(loggable_path("/inbox/items"), "/inbox/items");
        assert_eq!(loggable_path("/access-key/x"), "/access-key/x");
    }
}

/// What a route does with its request body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyUse {
    /// Not read: only counted for the 413 rule.
    Discard,
    /// Read within the cap before the handler runs.
    Read,
    /// An account import: read only once the process's import turn is held, which is kept
    /// until the handler is done ([`body::IMPORTS_AT_ONCE`]).
    Import,
}

/// The order of checks of inbox.md §1.2; the body is read only once the request may have
/// it read (spec decision 17).
async fn answer<S: Service, St, B>(
    service: Arc<S>,
    limits: &Limits,
    head: Head,
    body: St,
    route_label: &mut &'static str,
) -> Result<Reply, ApiError>
where
    St: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let route_method = if head.method == Method::HEAD {
        Method::GET
    } else {
        head.method.clone()
    };
    let segments: Vec<&str> = head.path.strip_prefix('/').unwrap_or(&head.path).split('/').collect();
    let (row, captures) = service.table().find(&route_method, &segments)?;
    *route_label = row.name;
    let limit = service.settings().max_body_bytes;
    let declared = head
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(body::too_large(limit));
    }
    let body = std::pin::pin!(body);
    let incoming = body::Incoming::new(body, limit, limits.connections.timeouts.body, declared);
    let caller = match service.admit(row, &head).await {
        Ok(caller) => caller,
        Err(refused) => {
            // only counted: a body over the cap is still a 413 (checked before credentials)
            incoming.discard().await?;
            return Err(refused);
        }
    };
    let mut _turn = None;
    let mut _import_turn = None;
    let body = match (row.body, &caller) {
        (BodyUse::Discard, _) => {
            incoming.discard().await?;
            Bytes::new()
        }
        (BodyUse::Import, Some(_)) => {
            // the turn first: an import waiting for it holds no body
            _import_turn = Some(body::import_turn().await?);
            incoming.read().await?
        }
        (BodyUse::Read, Some(_)) => incoming.read().await?,
        (BodyUse::Read | BodyUse::Import, None) => {
            let (body, turn) = incoming.read_public(&limits.public_bodies).await?;
            // held until the handler is done with the body
            _turn = turn;
            body
        }
    };
    row.call(&service, routes::Call::new(caller, Request { head, body }, captures))
        .await
}

/// Serves the metrics (`GET /metrics`, also `HEAD`; 404 elsewhere, 405 for another
/// method) on a listener of their own, with the connection deadlines of the services,
/// until `shutdown` turns true.
pub async fn serve_metrics(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
    limits: Arc<Limits>,
    shutdown: watch::Receiver<bool>,
) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!("metrics listening on http://{addr}/metrics");
    }
    let handler: server::Handler = Arc::new(move |request: warp::http::Request<hyper::body::Incoming>| {
        let metrics = metrics.clone();
        Box::pin(async move {
            let reply = match (request.method(), request.uri().path()) {
                (&Method::GET | &Method::HEAD, "/metrics") => Reply {
                    status: StatusCode::OK,
                    body: Payload::Full(metrics.scrape().await.into_bytes()),
                    content_type: Some(crate::metrics::CONTENT_TYPE),
                    headers: Vec::new(),
                },
                (_, "/metrics") => ApiError::method_not_allowed().into_reply(),
                _ => ApiError::unknown_path().into_reply(),
            };
            // hyper sends no body for HEAD
            reply.into_response()
        })
    });
    server::run(listener, handler, limits.connections.clone(), shutdown, limits.grace).await
}

/// Serves `service` on `listener` until `shutdown` turns true; then stops accepting, lets
/// requests in flight finish (for at most the grace of `limits`), and returns.
pub async fn serve<S: Service>(
    service: Arc<S>,
    listener: tokio::net::TcpListener,
    limits: Arc<Limits>,
    shutdown: watch::Receiver<bool>,
) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!("{} service listening on http://{addr}", service.name());
    }
    let (connections, grace) = (limits.connections.clone(), limits.grace);
    let filter = warp::method()
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::ext::optional::<server::Peer>())
        .and(warp::body::stream())
        .then(
            move |method: Method,
                  path: warp::path::FullPath,
                  query: String,
                  headers: HeaderMap,
                  peer: Option<server::Peer>,
                  body| {
                let service = service.clone();
                let limits = limits.clone();
                async move {
                    let peer = peer.map(|p| p.0);
                    let client = peer.map(|p| client_address(p.ip(), &headers, &service.settings().trusted_proxies));
                    let head = Head {
                        method,
                        path: path.as_str().to_owned(),
                        query,
                        headers,
                        peer,
                        client,
                    };
                    let answer = dispatch(service, limits, head, body).await;
                    crate::memory::note_activity();
                    answer
                }
            },
        )
        .recover(|_| async {
            Ok::<_, Infallible>(ApiError::internal("unexpected request").into_reply().into_response())
        });
    let warp_service = warp::service(filter);
    let handler: server::Handler = Arc::new(move |request| {
        let mut warp_service = warp_service.clone();
        Box::pin(async move {
            match tower_service::Service::call(&mut warp_service, request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        })
    });
    server::run(listener, handler, connections, shutdown, grace).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_of(reply: Reply) -> Vec<Result<Vec<u8>, String>> {
        let Payload::Chunks(Chunks(chunks)) = reply.body else {
            panic!("not a streamed answer");
        };
        chunks.map(|c| c.map(|b| b.to_vec()).map_err(|e| e.message)).collect()
    }

    /// `n` items of about 1 KB in pages of 10; reading the page at `fail_at` fails.
    fn pages_of(n: usize, fail_at: Option<usize>) -> impl Fn(Option<usize>) -> Page<String, usize> + Send + Sync {
        move |at| {
            let start = at.unwrap_or(0);
            Box::pin(async move {
                if fail_at == Some(start) {
                    return Err(ApiError::internal("broken"));
                }
                let end = (start + 10).min(n);
                let page = (start..end).map(|i| format!("{i}{}", "x".repeat(1000))).collect();
                Ok((page, (end < n).then_some(end)))
            })
        }
    }

    #[tokio::test]
    async fn pages_are_answered_whole_when_short_streamed_when_long_and_an_error_is_the_answer() {
        use futures_util::StreamExt;
        let short = Reply::json_pages(pages_of(25, None))
            .await
            .map_err(|e| e.message)
            .unwrap();
        let Payload::Full(body) = short.body else {
            panic!("a short list is answered from memory");
        };
        assert_eq!(serde_json::from_slice::<Vec<String>>(&body).unwrap().len(), 25);
        let empty = Reply::json_pages(pages_of(0, None))
            .await
            .map_err(|e| e.message)
            .unwrap();
        assert!(matches!(empty.body, Payload::Full(ref b) if b == b"[]"));

        let long = Reply::json_pages(pages_of(2000, None))
            .await
            .map_err(|e| e.message)
            .unwrap();
        let Payload::Stream(ChunkStream(chunks)) = long.body else {
            panic!("a long list is streamed");
        };
        let chunks: Vec<_> = chunks.collect().await;
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let whole: Vec<u8> = chunks
            .into_iter()
            .flat_map(|c| c.map_err(|e| e.message).unwrap().to_vec())
            .collect();
        let list: Vec<String> = serde_json::from_slice(&whole).unwrap();
        assert_eq!(list.len(), 2000);
        assert!(list[1999].starts_with("1999x"));

        let failing = Reply::json_pages(pages_of(2000, Some(1500))).await;
        assert_eq!(failing.err().expect("the error is the answer").message, "broken");
    }

    #[test]
    fn a_json_array_is_sent_in_chunks_as_its_items_are_read() {
        let empty = chunks_of(Reply::json_array(std::iter::empty::<Result<u32, ApiError>>()));
        assert_eq!(empty, vec![Ok(b"[]".to_vec())]);
        let big = "x".repeat(1000);
        let items = (0..200).map(move |i| Ok(format!("{i}{big}")));
        let chunks = chunks_of(Reply::json_array(items));
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        let whole: Vec<u8> = chunks.into_iter().flat_map(Result::unwrap).collect();
        let list: Vec<String> = serde_json::from_slice(&whole).unwrap();
        assert_eq!(list.len(), 200);
        assert!(list[199].starts_with("199x"));
    }

    #[test]
    fn a_json_array_that_fails_answers_the_error_or_breaks_off() {
        let failing_first = vec![Err(ApiError::internal("broken")), Ok(1)];
        let reply = Reply::json_array(failing_first.into_iter());
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        let failing_later = vec![Ok(1), Err(ApiError::internal("broken")), Ok(3)];
        let chunks = chunks_of(Reply::json_array(failing_later.into_iter()));
        assert_eq!(chunks, vec![Err("broken".to_owned())]);
    }

    /// A list is answered only once it has been read to its end: an error anywhere, also
    /// past the first chunk and past the buffer, is the answer (never a broken 200).
    #[test]
    fn a_json_list_with_an_error_anywhere_is_the_error() {
        let item = "x".repeat(1000);
        // small: answered from memory
        let small = Reply::json_list(|| (0..10).map(|i| Ok(format!("{i}"))));
        assert!(
            matches!(small.map(|r| r.body), Ok(Payload::Full(b)) if b == br#"["0","1","2","3","4","5","6","7","8","9"]"#)
        );
        // long (over the buffer): checked, then streamed whole
        let long = || {
            let item = item.clone();
            (0..3000).map(move |i| Ok(format!("{i}{item}")))
        };
        let reply = Reply::json_list(long).map_err(|e| e.message).unwrap();
        let whole: Vec<u8> = chunks_of(reply).into_iter().flat_map(Result::unwrap).collect();
        assert_eq!(serde_json::from_slice::<Vec<String>>(&whole).unwrap().len(), 3000);
        // an error within the buffer, and one after it
        for bad in [5, 2999] {
            let item = item.clone();
            let failing = move || {
                let item = item.clone();
                (0..3000).map(move |i| match i == bad {
                    true => Err(ApiError::internal("a stored inbox item record cannot be read")),
                    false => Ok(format!("{i}{item}")),
                })
            };
            let err = Reply::json_list(failing).err().expect("the error is the answer");
            assert_eq!(err.status(), StatusCode::INTERNAL_SERVER_ERROR, "at {bad}");
        }
    }

    #[test]
    fn a_json_array_written_element_by_element() {
        let mut array = JsonArray::default();
        assert!(matches!(array.into_reply().body, Payload::Full(b) if b == b"[]"));
        array = JsonArray::default();
        array.push(&serde_json::json!({"a": 1}));
        array.push("b");
        assert!(matches!(array.into_reply().body, Payload::Full(b) if b == br#"[{"a":1},"b"]"#));
    }

    fn forwarded(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn client(peer: &str, values: &[&str], trusted: &[&str]) -> String {
        let trusted: Vec<ProxyNet> = trusted.iter().map(|t| ProxyNet::parse(t).unwrap()).collect();
        client_address(peer.parse().unwrap(), &forwarded(values), &trusted).to_string()
    }

    #[test]
    fn verification_keys_are_not_logged() {
        assert_eq!(
            loggable_path("/trigger/email/verify/abc/0123456789abcdef"),
            "/trigger/email/verify/abc/…"
        );
        assert_eq!(loggable_path("/inbox/items"), "/inbox/items");
    }

    #[test]
    fn the_client_is_the_right_most_untrusted_forwarded_address() {
        // not behind a trusted proxy: the header is the client's own words
        assert_eq!(client("127.0.0.1", &["203.0.113.5"], &[]), "127.0.0.1");
        assert_eq!(client("127.0.0.1", &["203.0.113.5"], &["127.0.0.1"]), "203.0.113.5");
        // a client cannot choose its address by prepending one
        assert_eq!(
            client("127.0.0.1", &["198.51.100.7, 203.0.113.5"], &["127.0.0.1"]),
            "203.0.113.5"
        );
        // a chain of trusted proxies is walked through; headers are read in order
        assert_eq!(
            client(
                "127.0.0.1",
                &["198.51.100.7, 10.0.0.2", "10.0.0.3"],
                &["127.0.0.1", "10.0.0.0/8"]
            ),
            "198.51.100.7"
        );
        // garbage ends the walk at the hop that forwarded it
        assert_eq!(
            client("127.0.0.1", &["nonsense, 10.0.0.2"], &["127.0.0.1", "10.0.0.0/8"]),
            "10.0.0.2"
        );
        assert_eq!(client("127.0.0.1", &[], &["127.0.0.1"]), "127.0.0.1");
        // ports and IPv4-mapped peers
        assert_eq!(
            client("::ffff:127.0.0.1", &["[2001:db8::1]:443"], &["127.0.0.1"]),
            "2001:db8::1"
        );
        assert_eq!(client("127.0.0.1", &["192.0.2.1:5000"], &["127.0.0.1"]), "192.0.2.1");
        // every hop trusted: the left-most one is the client
        assert_eq!(
            client("127.0.0.1", &["10.0.0.9"], &["127.0.0.1", "10.0.0.0/8"]),
            "10.0.0.9"
        );
    }
}
