//! The web interface's files (docs/web.md): compiled into the binary, served under `/app/`
//! by each service with a strong `ETag` (revalidated with `If-None-Match` → 304), `no-cache`
//! (so a new binary's files are picked up at once) and the security headers every page
//! carries: a Content-Security-Policy that loads nothing but this origin, no framing, no
//! sniffing, no referrer.

use super::{ApiError, Head, Payload, Reply};
use warp::http::header::{HeaderName, HeaderValue};
use warp::http::StatusCode;

/// One file of the web interface, by the name it has after `/app/`.
pub struct Asset {
    pub name: &'static str,
    pub content_type: &'static str,
    pub bytes: &'static [u8],
    /// A hash of the bytes, made at compile time: the `ETag` changes with the file.
    pub tag: u64,
}

impl Asset {
    pub const fn new(name: &'static str, content_type: &'static str, bytes: &'static [u8]) -> Asset {
        Asset {
            name,
            content_type,
            bytes,
            tag: fnv1a(bytes),
        }
    }

    /// The strong entity tag: quoted hex of the hash.
    pub fn etag(&self) -> String {
        format!("\"{:016x}\"", self.tag)
    }
}

/// FNV-1a, 64 bits: enough to tell versions of a file apart, and a `const fn`.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

pub const HTML: &str = "text/html; charset=utf-8";
pub const JS: &str = "text/javascript; charset=utf-8";
pub const CSS: &str = "text/css; charset=utf-8";
pub const SVG: &str = "image/svg+xml";
pub const PNG: &str = "image/png";
pub const MANIFEST: &str = "application/manifest+json";

/// The files both services serve: the style, the shared scripts, the pages that are the
/// same on both (log in, settings, the help page on notifications), the service worker and
/// the icons.
pub static COMMON: &[Asset] = &[
    Asset::new("app.css", CSS, include_bytes!("../../assets/app/app.css")),
    Asset::new("api.js", JS, include_bytes!("../../assets/app/api.js")),
    Asset::new("login", HTML, include_bytes!("../../assets/app/login.html")),
    Asset::new("login.js", JS, include_bytes!("../../assets/app/login.js")),
    Asset::new("settings", HTML, include_bytes!("../../assets/app/settings.html")),
    Asset::new("settings.js", JS, include_bytes!("../../assets/app/settings.js")),
    Asset::new("push.js", JS, include_bytes!("../../assets/app/push.js")),
    // the service worker: scope /app/, shows pushed reminders (docs/web.md)
    Asset::new("sw.js", JS, include_bytes!("../../assets/app/sw.js")),
    Asset::new(
        "notifications",
        HTML,
        include_bytes!("../../assets/app/notifications.html"),
    ),
    Asset::new(
        "notifications.js",
        JS,
        include_bytes!("../../assets/app/notifications.js"),
    ),
    Asset::new("icon.svg", SVG, include_bytes!("../../assets/app/icon.svg")),
    Asset::new("icon-192.png", PNG, include_bytes!("../../assets/app/icon-192.png")),
    Asset::new("icon-512.png", PNG, include_bytes!("../../assets/app/icon-512.png")),
];

/// The Content-Security-Policy of the web interface: scripts, styles, images and
/// connections from this origin only (`connect` adds the other service's origin for the
/// pages that call it), no plugins, no framing, no `<base>`, forms posted here only.
pub fn content_security_policy(connect: &[String]) -> String {
    let mut connect_src = String::from("'self'");
    for origin in connect {
        connect_src.push(' ');
        connect_src.push_str(origin);
    }
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src {connect_src}; manifest-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'"
    )
}

/// The headers every answer of the web interface carries.
pub fn security_headers(connect: &[String]) -> Vec<(HeaderName, HeaderValue)> {
    let csp = HeaderValue::from_str(&content_security_policy(connect)).unwrap_or(HeaderValue::from_static(
        "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    ));
    vec![
        (HeaderName::from_static("content-security-policy"), csp),
        (
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ),
        (
            HeaderName::from_static("x-content-type-options"),
            HeaderValue::from_static("nosniff"),
        ),
        (
            HeaderName::from_static("referrer-policy"),
            HeaderValue::from_static("no-referrer"),
        ),
    ]
}

/// The origin `http(s)://<the host the browser asked for>:<port>` in both schemes, for the
/// CSP of a page that calls the other service; none when the `Host` header is not a plain
/// host name or address (so nothing odd ends up in the header).
pub fn sibling_origins(head: &Head, port: u16) -> Vec<String> {
    let Some(host) = head.header("host").and_then(|h| h.to_str().ok()) else {
        return Vec::new();
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, _)) => format!("[{addr}]"),
            None => return Vec::new(),
        },
        None => host.split(':').next().unwrap_or("").to_owned(),
    };
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    if name.is_empty() || !name.chars().all(plain) {
        return Vec::new();
    }
    vec![format!("http://{name}:{port}"), format!("https://{name}:{port}")]
}

/// The origins a page that calls the other service of this process (at `port`) may connect
/// to: the host the browser used at that port ([`sibling_origins`]), and the other service's
/// public origin when the operator gave one (`--web-host`, `--inbox-web-host`).
pub fn sibling_connect(head: &Head, port: u16, public: Option<&str>) -> Vec<String> {
    let mut origins = sibling_origins(head, port);
    origins.extend(public.map(str::to_owned));
    origins
}

/// Whether `If-None-Match` names `etag` (or is `*`); weak tags compare by their value.
fn not_modified(head: &Head, etag: &str) -> bool {
    head.headers
        .get_all("if-none-match")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim())
        .any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

/// `GET /app/<name>`: the file of that name among `tables` (the first that has it), or a
/// JSON 404. `connect` as for [`content_security_policy`].
pub fn serve(head: &Head, tables: &[&[Asset]], name: &str, connect: &[String]) -> Result<Reply, ApiError> {
    let asset = tables
        .iter()
        .flat_map(|t| t.iter())
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::not_found("no such page or file of the web interface"))?;
    let etag = asset.etag();
    let mut headers = security_headers(connect);
    headers.push((
        HeaderName::from_static("cache-control"),
        HeaderValue::from_static("no-cache"),
    ));
    if let Ok(value) = HeaderValue::from_str(&etag) {
        headers.push((HeaderName::from_static("etag"), value));
    }
    if not_modified(head, &etag) {
        return Ok(Reply {
            status: StatusCode::NOT_MODIFIED,
            body: Payload::Full(Vec::new()),
            content_type: None,
            headers,
        });
    }
    Ok(Reply {
        status: StatusCode::OK,
        body: Payload::Full(asset.bytes.to_vec()),
        content_type: Some(asset.content_type),
        headers,
    })
}

/// A small JSON answer for the pages (`/app/config.json`): never cached, same headers.
pub fn config(value: &serde_json::Value) -> Reply {
    let mut reply = Reply::json(value);
    reply.headers.extend(security_headers(&[]));
    reply.headers.push((
        HeaderName::from_static("cache-control"),
        HeaderValue::from_static("no-store"),
    ));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use warp::http::{HeaderMap, Method};

    fn head(headers: &[(&'static str, &str)]) -> Head {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        Head {
            method: Method::GET,
            path: "/app/".into(),
            query: String::new(),
            headers: map,
            peer: None,
            client: None,
        }
    }

    #[test]
    fn tags_differ_with_the_bytes_and_revalidate() {
        let a = Asset::new("a", CSS, b"body{}");
        let b = Asset::new("a", CSS, b"body{ }");
        assert_ne!(a.etag(), b.etag());
        let tables: &[&[Asset]] = &[std::slice::from_ref(&a)];
        let fresh = serve(&head(&[]), tables, "a", &[]).unwrap();
        assert_eq!(fresh.status, StatusCode::OK);
        let again = serve(
            &head(&[("if-none-match", &format!("W/{}", a.etag()))]),
            tables,
            "a",
            &[],
        )
        .unwrap();
        assert_eq!(again.status, StatusCode::NOT_MODIFIED);
        let other = serve(&head(&[("if-none-match", &b.etag())]), tables, "a", &[]).unwrap();
        assert_eq!(other.status, StatusCode::OK);
        let missing = serve(&head(&[]), tables, "b", &[]).err().map(|e| e.status());
        assert_eq!(missing, Some(StatusCode::NOT_FOUND));
    }

    #[test]
    fn the_sibling_origin_comes_from_a_plain_host_only() {
        assert_eq!(
            sibling_origins(&head(&[("host", "pi.local:8002")]), 8001),
            vec!["http://pi.local:8001", "https://pi.local:8001"]
        );
        assert_eq!(
            sibling_origins(&head(&[("host", "[::1]:8002")]), 8001)[0],
            "http://[::1]:8001"
        );
        assert!(sibling_origins(&head(&[("host", "evil; script-src *")]), 8001).is_empty());
        assert!(sibling_origins(&head(&[]), 8001).is_empty());
    }
}
