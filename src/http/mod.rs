//! Shared HTTP plumbing for both services: one warp filter that hands every request to a
//! service's route table, in the order of checks of inbox.md §1.2 (route → 404/405, CORS
//! preflight, body size → 413, then the service's own checks), JSON errors, CORS headers on
//! every answer, `HEAD` as `GET`, and a server with graceful shutdown on a bound listener.

use bytes::{Buf, Bytes};
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use warp::http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use warp::http::{Method, StatusCode};
use warp::Filter;

use crate::config::ProxyNet;

pub use warp::http;

/// A request as the services see it: routed, body read in full (within the limit).
pub struct Request {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub peer: Option<SocketAddr>,
    /// The client's address: the peer, or behind a trusted proxy the address it forwarded
    /// for ([`client_address`]).
    pub client: Option<IpAddr>,
    pub body: Bytes,
}

impl Request {
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
            Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the request body must be JSON (Content-Type: application/json)",
            ))
        }
    }

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
    pub body: Vec<u8>,
    pub content_type: Option<&'static str>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Reply {
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(body) => Reply {
                status: StatusCode::OK,
                body,
                content_type: Some("application/json"),
                headers: Vec::new(),
            },
            Err(e) => ApiError::internal(format!("could not encode the answer: {e}")).into_reply(),
        }
    }

    /// 200 with an empty body.
    pub fn empty() -> Reply {
        Reply {
            status: StatusCode::OK,
            body: Vec::new(),
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

    pub fn html(page: &'static str) -> Reply {
        Reply {
            status: StatusCode::OK,
            body: page.as_bytes().to_vec(),
            content_type: Some("text/html; charset=utf-8"),
            headers: Vec::new(),
        }
    }

    /// The HTTP response: status, content type, extra headers, body.
    pub fn into_response(self) -> warp::reply::Response {
        let mut response = warp::reply::Reply::into_response(self.body);
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

/// An error answer: `{"error": message}` with a JSON content type.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this path")
    }

    pub fn unknown_path() -> ApiError {
        ApiError::not_found("no such path")
    }

    pub fn too_many_logins(retry_after: u64) -> ApiError {
        ApiError::too_many(retry_after, "too many failed logins, try again later")
    }

    /// 429 with `Retry-After: <seconds>`.
    pub fn too_many(retry_after: u64, message: impl Into<String>) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, message)
        }
    }

    pub fn into_reply(self) -> Reply {
        let body = serde_json::json!({ "error": self.message });
        let mut reply = Reply {
            status: self.status,
            body: body.to_string().into_bytes(),
            content_type: Some("application/json"),
            headers: Vec::new(),
        };
        if let Some(secs) = self.retry_after {
            reply
                .headers
                .push((warp::http::header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        reply
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> ApiError {
        tracing::error!("store: {e}");
        ApiError::internal("internal error: the database failed")
    }
}

/// The route of `method` among those a known path serves; 405 when it serves another.
pub fn pick<R>(method: &Method, options: Vec<(Method, R)>) -> Result<R, ApiError> {
    options
        .into_iter()
        .find(|(m, _)| m == method)
        .map(|(_, r)| r)
        .ok_or_else(ApiError::method_not_allowed)
}

/// A `:uuid` path capture: 400 unless it is a canonical UUID.
pub fn path_uuid(segment: &str) -> Result<uuid::Uuid, ApiError> {
    crate::wire::parse_uuid(segment).ok_or_else(|| ApiError::bad_request("invalid UUID in path"))
}

/// A service: a route table and the handlers behind it.
pub trait Service: Send + Sync + 'static {
    type Route: Send + 'static;

    /// The route for a method and the path's segments (the path without its leading `/`,
    /// split at `/`); 404 for an unknown path, 405 for a known path and another method.
    /// `HEAD` arrives here as `GET`.
    fn route(&self, method: &Method, segments: &[&str]) -> Result<Self::Route, ApiError>;

    fn handle(
        self: Arc<Self>,
        route: Self::Route,
        request: Request,
    ) -> impl Future<Output = Result<Reply, ApiError>> + Send;

    /// The request body cap (413 above it).
    fn max_body_bytes(&self) -> u64;

    /// Peers whose `X-Forwarded-For` names the client.
    fn trusted_proxies(&self) -> &[ProxyNet];
}

async fn read_body<S, B>(stream: S, limit: u64) -> Result<Bytes, ApiError>
where
    S: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes"),
        )
    };
    let mut out = Vec::new();
    let mut stream = std::pin::pin!(stream);
    while let Some(chunk) = stream.next().await {
        let mut chunk = chunk.map_err(|e| ApiError::bad_request(format!("could not read the request body: {e}")))?;
        if (out.len() + chunk.remaining()) as u64 > limit {
            return Err(too_large());
        }
        while chunk.has_remaining() {
            let part = chunk.chunk();
            out.extend_from_slice(part);
            let n = part.len();
            chunk.advance(n);
        }
    }
    Ok(Bytes::from(out))
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
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    peer: Option<SocketAddr>,
    body: St,
) -> warp::reply::Response
where
    St: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let has_origin = headers.contains_key("origin");
    let reply = if method == Method::OPTIONS && has_origin && headers.contains_key("access-control-request-method") {
        preflight(&headers)
    } else {
        answer(service, method.clone(), path.clone(), query, headers, peer, body)
            .await
            .unwrap_or_else(ApiError::into_reply)
    };
    tracing::debug!("{} {} → {}", method, path, reply.status.as_u16());
    let mut response = reply.into_response();
    if has_origin {
        response
            .headers_mut()
            .insert("access-control-allow-origin", HeaderValue::from_static("*"));
    }
    response
}

async fn answer<S: Service, St, B>(
    service: Arc<S>,
    method: Method,
    path: String,
    query: String,
    headers: HeaderMap,
    peer: Option<SocketAddr>,
    body: St,
) -> Result<Reply, ApiError>
where
    St: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let route_method = if method == Method::HEAD {
        Method::GET
    } else {
        method.clone()
    };
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(&path).split('/').collect();
    let route = service.route(&route_method, &segments)?;
    let limit = service.max_body_bytes();
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {limit} bytes"),
        ));
    }
    let body = read_body(body, limit).await?;
    let client = peer.map(|p| client_address(p.ip(), &headers, service.trusted_proxies()));
    let request = Request {
        method,
        path,
        query,
        headers,
        peer,
        client,
        body,
    };
    service.handle(route, request).await
}

/// Serves `service` on `listener` until `shutdown` turns true; then stops accepting, lets
/// requests in flight finish (for at most `grace`), and returns.
pub async fn serve<S: Service>(
    service: Arc<S>,
    listener: tokio::net::TcpListener,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let filter = warp::method()
        .and(warp::path::full())
        .and(warp::query::raw().or(warp::any().map(String::new)).unify())
        .and(warp::header::headers_cloned())
        .and(warp::addr::remote())
        .and(warp::body::stream())
        .then(
            move |method: Method,
                  path: warp::path::FullPath,
                  query: String,
                  headers: HeaderMap,
                  peer: Option<SocketAddr>,
                  body| {
                let service = service.clone();
                async move {
                    let answer = dispatch(service, method, path.as_str().to_owned(), query, headers, peer, body).await;
                    crate::memory::note_activity();
                    answer
                }
            },
        )
        .recover(|_| async {
            Ok::<_, Infallible>(ApiError::internal("unexpected request").into_reply().into_response())
        });
    let mut signal = shutdown.clone();
    let server = warp::serve(filter).incoming(listener).graceful(async move {
        let _ = signal.wait_for(|stop| *stop).await;
    });
    tokio::select! {
        _ = server.run() => {}
        _ = async {
            let _ = shutdown.wait_for(|stop| *stop).await;
            tokio::time::sleep(grace).await;
        } => {
            tracing::warn!("requests still open after {grace:?}; closing them");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
