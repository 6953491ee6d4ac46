//! Talking to an inbox service (Pigeonhole's own or an old Intray server) over HTTP: log in
//! with an access key, add an item (scheduler.md §6.3, §7.2). Redirects are never followed:
//! a redirect would carry the access key or the token to wherever the answer points.

use crate::config::OutboundAllow;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use uuid::Uuid;

/// What kind of address an IP address is, for the outbound policy (`--outbound-allow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressClass {
    Loopback,
    /// RFC 1918, shared address space (100.64.0.0/10), unique local (fc00::/7) and the old
    /// site-local (fec0::/10): the LAN.
    Private,
    Public,
    /// Never connected to: unspecified, link-local (cloud metadata services live there),
    /// multicast, broadcast, documentation, benchmarking, reserved and protocol ranges.
    Special,
}

/// The class of `ip`; an IPv4 address inside IPv6 (mapped, compatible, NAT64, 6to4) is
/// classified as that IPv4 address.
pub fn classify(ip: IpAddr) -> AddressClass {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> AddressClass {
    use AddressClass::*;
    let [a, b, c, _] = ip.octets();
    match (a, b, c) {
        (127, _, _) => Loopback,
        (10, _, _) | (192, 168, _) => Private,
        (172, 16..=31, _) | (100, 64..=127, _) => Private,
        (0, _, _) | (169, 254, _) | (224..=255, _, _) => Special,
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) => Special,
        (192, 88, 99) => Special,
        _ => Public,
    }
}

fn classify_v6(ip: Ipv6Addr) -> AddressClass {
    use AddressClass::*;
    if ip == Ipv6Addr::LOCALHOST {
        return Loopback;
    }
    if ip.is_unspecified() {
        return Special;
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    match s {
        // ::ffff:a.b.c.d (mapped) and ::a.b.c.d (compatible, deprecated)
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => classify_v4(embedded(hi, lo)),
        // NAT64 (64:ff9b::/96) reaches the IPv4 address it carries
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => classify_v4(embedded(hi, lo)),
        // 6to4 (2002:AABB:CCDD::/48) carries an IPv4 address too
        [0x2002, hi, lo, ..] => match classify_v4(embedded(hi, lo)) {
            Public => Public,
            _ => Special,
        },
        _ if s[0] & 0xfe00 == 0xfc00 || s[0] & 0xffc0 == 0xfec0 => Private,
        // link-local fe80::/10, multicast ff00::/8
        _ if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xff00 == 0xff00 => Special,
        // documentation 2001:db8::/32, Teredo and other IETF protocol space 2001::/23,
        // the rest of the IPv4-embedding prefix 64:ff9b:1::/48, discard-only 100::/64
        _ if s[0] == 0x2001 && (s[1] == 0x0db8 || s[1] < 0x200) => Special,
        _ if s[0] == 0x64 && s[1] == 0xff9b => Special,
        _ if s[0] == 0x100 && s[1] == 0 && s[2] == 0 && s[3] == 0 => Special,
        // only global unicast (2000::/3) is public; everything else is reserved
        _ if s[0] & 0xe000 == 0x2000 => Public,
        _ => Special,
    }
}

/// Whether `allow` lets a delivery connect to `ip`.
pub fn permitted(allow: OutboundAllow, ip: IpAddr) -> bool {
    match classify(ip) {
        AddressClass::Loopback => allow.loopback,
        AddressClass::Private => allow.private,
        AddressClass::Public => allow.public,
        AddressClass::Special => false,
    }
}

/// A host whose every address the outbound policy refuses (so nothing was connected to).
#[derive(Debug)]
pub struct Refused {
    pub host: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} has no address that this server's outbound policy allows (--outbound-allow)",
            self.host
        )
    }
}

impl std::error::Error for Refused {}

/// The resolver of the delivery client: the system's, or a fixed answer for the names of
/// `--outbound-resolve`, then only the addresses the policy allows. reqwest connects to the
/// addresses this answers, so what was checked is what is connected to (no DNS rebinding
/// between a check and the connection).
#[derive(Clone)]
struct PolicyResolver {
    allow: OutboundAllow,
    fixed: Arc<Vec<(String, IpAddr)>>,
}

impl PolicyResolver {
    /// The addresses of `host` that the policy allows (in the resolver's order); an error
    /// when there are none.
    async fn allowed(&self, host: &str) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
        let host = host.to_ascii_lowercase();
        let found: Vec<SocketAddr> = match self.fixed.iter().find(|(n, _)| *n == host) {
            Some((_, ip)) => vec![SocketAddr::new(*ip, 0)],
            None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
        };
        let allowed: Vec<SocketAddr> = found.into_iter().filter(|a| permitted(self.allow, a.ip())).collect();
        if allowed.is_empty() {
            return Err(Box::new(Refused { host }));
        }
        Ok(allowed)
    }
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let resolver = self.clone();
        Box::pin(async move {
            let allowed = resolver.allowed(name.as_str()).await?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The most requests in flight to one socket address (IP address and port) at once,
/// whatever the names, triggers and accounts they come from (deliveries and trigger checks
/// together): the server cannot be used to flood one service. The port counts: a slow
/// service of a stranger on another port of the same machine (the usual case for the
/// server's own inbox on 127.0.0.1) takes no place of the owner's. The server's own inbox
/// (a loopback address at the port of this process's inbox service:
/// [`InboxClient::with_own_inbox`]) has no such bound: the deliveries' bounds per account
/// and overall hold what goes there.
pub const REQUESTS_PER_ADDRESS: usize = 4;

/// The places of requests in flight per destination socket address. Entries exist only
/// while a request holds or awaits one, so the map is bounded by the requests in flight.
#[derive(Default)]
struct AddressSlots {
    slots: std::sync::Mutex<std::collections::HashMap<SocketAddr, Arc<tokio::sync::Semaphore>>>,
}

/// A place for one request to a socket address; given back when dropped.
struct AddressSlot {
    slots: Arc<AddressSlots>,
    ip: SocketAddr,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl AddressSlots {
    async fn take(self: &Arc<Self>, ip: SocketAddr) -> AddressSlot {
        let semaphore = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            // a place dropped while its waiter was being cancelled may have left its entry:
            // swept here, so the map never holds more than this plus the requests in flight
            if slots.len() >= 64 {
                slots.retain(|_, s| Arc::strong_count(s) > 1);
            }
            slots
                .entry(ip)
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(REQUESTS_PER_ADDRESS)))
                .clone()
        };
        // made before waiting, so that a waiter cancelled meanwhile still cleans up
        let mut slot = AddressSlot {
            slots: self.clone(),
            ip,
            permit: None,
        };
        // never closed: acquiring only waits
        slot.permit = semaphore.acquire_owned().await.ok();
        slot
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut slots = self.slots.slots.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.permit.take());
        // the map's reference is the last: nobody holds or awaits a place there
        if slots.get(&self.ip).is_some_and(|s| Arc::strong_count(s) == 1) {
            slots.remove(&self.ip);
        }
    }
}

/// The client that talks to inbox services on behalf of users: [`client`]'s rules, and the
/// outbound policy checked on every address before a connection (literal addresses in the
/// URL here, names in the resolver).
#[derive(Clone)]
pub struct InboxClient {
    http: reqwest::Client,
    resolver: PolicyResolver,
    slots: Arc<AddressSlots>,
    /// The port of this process's inbox service, if it runs one.
    own_inbox: Option<u16>,
}

impl InboxClient {
    pub fn new(allow: OutboundAllow, fixed: Vec<(String, IpAddr)>) -> InboxClient {
        let resolver = PolicyResolver {
            allow,
            fixed: Arc::new(fixed),
        };
        let http = built(builder().dns_resolver(Arc::new(resolver.clone())));
        InboxClient {
            http,
            resolver,
            slots: Arc::default(),
            own_inbox: None,
        }
    }

    /// This client, knowing that this process's inbox service listens at `port`: requests
    /// to it on a loopback address wait for no place ([`REQUESTS_PER_ADDRESS`]).
    pub fn with_own_inbox(mut self, port: Option<u16>) -> InboxClient {
        self.own_inbox = port;
        self
    }

    /// Whether `url` is this server's own inbox: a loopback address (or `localhost`) at the
    /// port of this process's inbox service ([`InboxClient::with_own_inbox`]). (Its public
    /// name behind a proxy is not known here: such a URL is bounded like any host.)
    pub fn is_own_inbox(&self, url: &str) -> bool {
        let Some(own) = self.own_inbox else { return false };
        let Ok(url) = reqwest::Url::parse(url) else {
            return false;
        };
        let loopback = match url.host() {
            Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            None => false,
        };
        loopback && url.port_or_known_default() == Some(own)
    }

    /// Refuses a URL whose host is an address the policy does not allow (a literal here:
    /// reqwest resolves no literal, so the resolver never sees those; a name through the
    /// resolver), and waits for a place among the requests to its socket address
    /// ([`REQUESTS_PER_ADDRESS`], keyed by the first allowed address and the URL's port). The request then
    /// resolves the name again through the same policy: a name whose answers change between
    /// the two lookups escapes this bound (not the policy), and is still held to the
    /// per-host and per-account bounds of the deliveries.
    async fn place(&self, url: &str) -> Result<AddressSlot, Failure> {
        let parsed = reqwest::Url::parse(url).map_err(|_| Failure::permanent(format!("{url} is not a URL")))?;
        let host = parsed.host_str().unwrap_or_default();
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let ip = match literal {
            Some(ip) if !permitted(self.resolver.allow, ip) => {
                return Err(Failure::permanent(Refused { host: host.to_owned() }.to_string()))
            }
            Some(ip) => ip,
            None => match self.resolver.allowed(host).await {
                Ok(addresses) => addresses[0].ip(),
                Err(e) if e.is::<Refused>() => return Err(Failure::permanent(e.to_string())),
                Err(e) => {
                    return Err(Failure {
                        transient: true,
                        reason: format!("cannot resolve {host}: {e}"),
                        status: None,
                        retry_after: None,
                        shown: None,
                    })
                }
            },
        };
        let port = parsed.port_or_known_default().unwrap_or(0);
        if ip.is_loopback() && self.own_inbox == Some(port) {
            return Ok(AddressSlot {
                slots: self.slots.clone(),
                ip: SocketAddr::new(ip, port),
                permit: None,
            });
        }
        Ok(self.slots.take(SocketAddr::new(ip, port)).await)
    }

    /// Whether every address of `url`'s host that the policy allows is a loopback or
    /// private one (and there is one): where a plain `http` push endpoint may point (a test,
    /// a distributor on the LAN; scheduler.md §6.4). Nothing is connected to.
    pub async fn is_local(&self, url: &str) -> bool {
        let Ok(parsed) = reqwest::Url::parse(url) else {
            return false;
        };
        let host = parsed.host_str().unwrap_or_default();
        let local = |ip: IpAddr| matches!(classify(ip), AddressClass::Loopback | AddressClass::Private);
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => local(ip) && permitted(self.resolver.allow, ip),
            Err(_) => match self.resolver.allowed(host).await {
                Ok(addresses) => addresses.iter().all(|a| local(a.ip())),
                Err(_) => false,
            },
        }
    }

    /// [`login`] through this client.
    pub async fn login(&self, url: &str, username: &str, key: &str) -> Result<String, Failure> {
        let _place = self.place(url).await?;
        login(&self.http, url, username, key).await
    }

    /// [`add_item`] through this client.
    pub async fn add_item(
        &self,
        url: &str,
        token: &str,
        idempotency_key: Uuid,
        data_base64: &str,
    ) -> Result<Uuid, Failure> {
        let _place = self.place(url).await?;
        add_item(&self.http, url, token, idempotency_key, data_base64).await
    }
}

/// What a push service or webhook answered to a POST.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    /// How long it asked us to wait (`Retry-After` of a 429 or 503 answer).
    pub retry_after: Option<Duration>,
    /// Whether the answer came from a loopback or private address (the LAN), whose
    /// services a stranger must not tell apart through their own triggers' outcomes.
    pub local: bool,
}

impl InboxClient {
    /// `POST url` with `headers` and `body`, under the outbound policy and the per-address
    /// bound, without following redirects (push deliveries and webhooks, scheduler.md
    /// §7.6–§7.7): the answer, whatever its status, or why there was none (transient, but
    /// for an address the policy refuses).
    pub async fn post(&self, url: &str, headers: HeaderMap, body: Vec<u8>) -> Result<Answer, Failure> {
        let _place = self.place(url).await?;
        let response = self
            .http
            .post(url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|e| request_failure("POST", e))?;
        let status = response.status();
        let asked = status == 429 || status == 503;
        Ok(Answer {
            status,
            retry_after: asked
                .then(|| retry_after(response.headers(), SystemTime::now()))
                .flatten(),
            local: from_the_lan(response.remote_addr()),
        })
    }
}

/// Why a call failed, and whether trying again later may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub transient: bool,
    pub reason: String,
    /// The HTTP status, when the service answered.
    pub status: Option<u16>,
    /// How long the service asked us to wait (`Retry-After` of a 429 or 503 answer).
    pub retry_after: Option<Duration>,
    /// What the owner of the delivery reads instead of `reason` (which then goes only to
    /// the operator's log); `None`: the reason itself.
    pub shown: Option<String>,
}

impl Failure {
    pub fn permanent(reason: String) -> Failure {
        Failure {
            transient: false,
            reason,
            status: None,
            retry_after: None,
            shown: None,
        }
    }
}

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The process's HTTP client (inbox services, the payment provider): rustls, no proxy
/// (deliveries go where the trigger says), and no redirects (README decision 17).
pub fn client() -> reqwest::Client {
    built(builder())
}

/// [`client`]'s rules: the time-out, no proxy, no redirects.
fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
}

fn built(builder: reqwest::ClientBuilder) -> reqwest::Client {
    builder
        .build()
        // Building fails only without a TLS provider, which `launch` installs first.
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// Whether an answer came from a loopback or private address (the LAN): `peer` is the
/// address the connection really had (none known: taken as local, the cautious side).
fn from_the_lan(peer: Option<SocketAddr>) -> bool {
    peer.is_none_or(|a| matches!(classify(a.ip()), AddressClass::Loopback | AddressClass::Private))
}

/// What the owner of a delivery reads when its cause must not be told (no oracle: a
/// stranger's trigger may point at any service the policy lets the server reach): the same
/// text whatever happened, the cause only in the operator's log.
pub fn withheld(what: &str, url: &str) -> String {
    let host = reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    format!("not delivered to the {what} at {host} (this server's log has the cause)")
}

impl Failure {
    /// This failure as the owner of a delivery to `url` reads it: withheld when there was
    /// no answer (whatever the cause) or the answer came from the LAN (`lan`).
    fn seen_by_owner(mut self, url: &str, lan: bool) -> Failure {
        if lan || self.status.is_none() && self.transient {
            self.shown = Some(withheld("inbox", url));
        }
        self
    }
}

/// A non-2xx answer: 5xx, 408 and 429 are transient, everything else (3xx included) is
/// permanent.
fn status_failure(what: &str, status: StatusCode, headers: &HeaderMap) -> Failure {
    let transient = status.is_server_error() || status == 408 || status == 429;
    let mut reason = format!("inbox answered {status} to {what}");
    if status.is_redirection() {
        reason.push_str(" (redirects are not followed)");
    }
    let asked = status == 429 || status == 503;
    Failure {
        transient,
        reason,
        status: Some(status.as_u16()),
        retry_after: asked.then(|| retry_after(headers, SystemTime::now())).flatten(),
        shown: None,
    }
}

/// `Retry-After` as delta seconds or an HTTP date (a date in the past: no wait).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn request_failure(what: &str, e: reqwest::Error) -> Failure {
    // the policy refused every address of the host: nothing was sent, and trying again
    // will not help (unless the operator changes the policy: a retry by the owner)
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return Failure::permanent(refused.to_string());
        }
        source = cause.source();
    }
    Failure {
        transient: true,
        reason: format!("could not reach the inbox for {what}: {e}"),
        status: None,
        retry_after: None,
        shown: None,
    }
}

/// `POST <url>/login` with the access key as password; the token of the `JWT-Cookie`.
async fn login(client: &reqwest::Client, url: &str, username: &str, key: &str) -> Result<String, Failure> {
    let what = "POST /login";
    let response = client
        .post(format!("{url}/login"))
        .json(&serde_json::json!({"username": username, "password": key}))
        .send()
        .await
        .map_err(|e| request_failure(what, e).seen_by_owner(url, false))?;
    let lan = from_the_lan(response.remote_addr());
    if !response.status().is_success() {
        return Err(status_failure(what, response.status(), response.headers()).seen_by_owner(url, lan));
    }
    for value in response.headers().get_all(reqwest::header::SET_COOKIE) {
        let Ok(text) = value.to_str() else { continue };
        let first = text.split(';').next().unwrap_or("");
        if let Some((name, token)) = first.split_once('=') {
            if name.trim() == "JWT-Cookie" && !token.trim().is_empty() {
                return Ok(token.trim().to_owned());
            }
        }
    }
    Err(Failure::permanent("the inbox login answer had no JWT-Cookie".into()).seen_by_owner(url, lan))
}

/// `POST <url>/inbox/item` (then `/intray/item` on 404) with an idempotency key.
async fn add_item(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    idempotency_key: Uuid,
    data_base64: &str,
) -> Result<Uuid, Failure> {
    let body = serde_json::json!({"type": "text", "data": data_base64});
    let mut lan = true;
    for path in ["/inbox/item", "/intray/item"] {
        let what = format!("POST {path}");
        let response = client
            .post(format!("{url}{path}"))
            .bearer_auth(token)
            .header("Idempotency-Key", idempotency_key.to_string())
            .json(&body)
            .send()
            .await
            .map_err(|e| request_failure(&what, e).seen_by_owner(url, false))?;
        let status = response.status();
        lan = from_the_lan(response.remote_addr());
        if status == StatusCode::NOT_FOUND {
            continue;
        }
        if !status.is_success() {
            return Err(status_failure(&what, status, response.headers()).seen_by_owner(url, lan));
        }
        let text = response
            .text()
            .await
            .map_err(|e| request_failure(&what, e).seen_by_owner(url, lan))?;
        return match serde_json::from_str::<String>(&text)
            .ok()
            .and_then(|s| crate::domain::wire::parse_uuid(&s))
        {
            Some(id) => Ok(id),
            None => Err(
                Failure::permanent(format!("inbox answered {what} with something that is not a UUID"))
                    .seen_by_owner(url, lan),
            ),
        };
    }
    Err(status_failure(
        "POST /inbox/item and /intray/item",
        StatusCode::NOT_FOUND,
        &HeaderMap::new(),
    )
    .seen_by_owner(url, lan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(retry_after: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_str(retry_after).unwrap());
        h
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        let wait = |v: &str| retry_after(&headers(v), now);
        assert_eq!(wait("120"), Some(Duration::from_secs(120)));
        assert_eq!(wait(" 0 "), Some(Duration::ZERO));
        assert_eq!(wait("Sun, 06 Nov 1994 08:50:07 GMT"), Some(Duration::from_secs(30)));
        // the two obsolete date forms HTTP still asks recipients to accept
        assert_eq!(wait("Sunday, 06-Nov-94 08:49:47 GMT"), Some(Duration::from_secs(10)));
        assert_eq!(wait("Sun Nov  6 08:49:57 1994"), Some(Duration::from_secs(20)));
        assert_eq!(
            wait("Sun, 06 Nov 1994 08:00:00 GMT"),
            Some(Duration::ZERO),
            "in the past"
        );
        for bad in ["-5", "1.5", "soon", ""] {
            assert_eq!(wait(bad), None, "{bad:?}");
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn statuses() {
        let f = status_failure("POST /inbox/item", StatusCode::SERVICE_UNAVAILABLE, &headers("7"));
        assert!(f.transient);
        assert_eq!(f.retry_after, Some(Duration::from_secs(7)));
        let f = status_failure("POST /login", StatusCode::TOO_MANY_REQUESTS, &headers("3"));
        assert_eq!((f.transient, f.retry_after), (true, Some(Duration::from_secs(3))));
        // Retry-After counts only on 429 and 503
        let f = status_failure("POST /login", StatusCode::BAD_GATEWAY, &headers("3"));
        assert_eq!((f.transient, f.retry_after), (true, None));
        for redirect in [301, 302, 303, 307, 308] {
            let f = status_failure("POST /login", StatusCode::from_u16(redirect).unwrap(), &headers("3"));
            assert!(!f.transient, "{redirect}");
            assert!(f.reason.contains("redirects are not followed"), "{}", f.reason);
        }
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;
    use reqwest::dns::Resolve;

    #[tokio::test]
    async fn requests_to_one_address_take_turns_and_the_map_forgets_idle_addresses() {
        let slots = Arc::new(AddressSlots::default());
        let a: SocketAddr = "127.0.0.1:8001".parse().unwrap();
        // another port of the same address is another service
        let b: SocketAddr = "127.0.0.1:9000".parse().unwrap();
        let mut held = Vec::new();
        for _ in 0..REQUESTS_PER_ADDRESS {
            held.push(slots.take(a).await);
        }
        // the next one to that address waits; another address does not
        let waiting = slots.take(a);
        let mut waiting = Box::pin(waiting);
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        let other = slots.take(b).await;
        assert_eq!(slots.len(), 2);
        drop(other);
        assert_eq!(slots.len(), 1, "an idle address is forgotten");
        held.pop();
        let turn = waiting.await;
        drop(turn);
        drop(held);
        assert_eq!(slots.len(), 0);
    }

    #[tokio::test]
    async fn requests_to_the_own_inbox_take_no_turns() {
        let client = InboxClient::new(OutboundAllow::default(), Vec::new()).with_own_inbox(Some(8001));
        let mut held = Vec::new();
        for url in [
            "http://127.0.0.1:8001/",
            "http://localhost:8001/item",
            "http://[::1]:8001",
        ] {
            for _ in 0..REQUESTS_PER_ADDRESS + 2 {
                held.push(client.place(url).await.expect("a place"));
            }
        }
        assert_eq!(client.slots.len(), 0, "no places kept for the own inbox");
        // another port of the machine is another service, with its turns
        for _ in 0..REQUESTS_PER_ADDRESS {
            held.push(client.place("http://127.0.0.1:9000").await.expect("a place"));
        }
        let mut waiting = Box::pin(client.place("http://127.0.0.1:9000"));
        assert!(futures_util::poll!(waiting.as_mut()).is_pending());
        let elsewhere = InboxClient::new(OutboundAllow::default(), Vec::new());
        for _ in 0..REQUESTS_PER_ADDRESS {
            held.push(elsewhere.place("http://127.0.0.1:8001").await.expect("a place"));
        }
        let mut waiting = Box::pin(elsewhere.place("http://127.0.0.1:8001"));
        assert!(
            futures_util::poll!(waiting.as_mut()).is_pending(),
            "a process without that inbox takes turns there"
        );
    }

    #[test]
    fn the_own_inbox_is_a_loopback_address_at_the_inbox_port() {
        let client = |own| InboxClient::new(OutboundAllow::default(), Vec::new()).with_own_inbox(own);
        let own = client(Some(8001));
        for url in [
            "http://127.0.0.1:8001",
            "http://127.0.0.1:8001/",
            "http://LOCALHOST:8001/inbox",
            "http://[::1]:8001",
            "http://127.1.2.3:8001",
        ] {
            assert!(own.is_own_inbox(url), "{url}");
        }
        for url in [
            "http://127.0.0.1:8002",
            "http://127.0.0.1",
            "http://192.168.1.2:8001",
            "http://example.com:8001",
            "http://localhost.example.com:8001",
            "not a url",
        ] {
            assert!(!own.is_own_inbox(url), "{url}");
        }
        assert!(
            !client(None).is_own_inbox("http://127.0.0.1:8001"),
            "no inbox in this process"
        );
        assert!(client(Some(80)).is_own_inbox("http://localhost"));
    }

    fn class(ip: &str) -> AddressClass {
        classify(ip.parse().unwrap())
    }

    #[test]
    fn addresses_are_classified() {
        use AddressClass::*;
        for (ip, want) in [
            ("127.0.0.1", Loopback),
            ("127.255.0.9", Loopback),
            ("::1", Loopback),
            ("::ffff:127.0.0.1", Loopback),
            ("10.1.2.3", Private),
            ("172.16.0.1", Private),
            ("172.31.255.255", Private),
            ("192.168.1.10", Private),
            ("100.64.0.1", Private),
            ("fd12:3456::1", Private),
            ("::ffff:192.168.0.1", Private),
            ("64:ff9b::a00:1", Private),
            ("8.8.8.8", Public),
            ("172.32.0.1", Public),
            ("100.128.0.1", Public),
            ("2606:4700::1111", Public),
            ("::ffff:1.1.1.1", Public),
            ("2002:0808:0808::1", Public),
            // never: cloud metadata, unspecified, multicast, broadcast, documentation, …
            ("169.254.169.254", Special),
            ("0.0.0.0", Special),
            ("0.1.2.3", Special),
            ("224.0.0.1", Special),
            ("239.255.255.250", Special),
            ("255.255.255.255", Special),
            ("240.0.0.1", Special),
            ("192.0.2.1", Special),
            ("198.51.100.7", Special),
            ("203.0.113.9", Special),
            ("198.18.0.1", Special),
            ("192.0.0.8", Special),
            ("::", Special),
            ("fe80::1", Special),
            ("febf::1", Special),
            ("ff02::1", Special),
            ("2001:db8::1", Special),
            ("2001::1", Special),
            ("::ffff:169.254.169.254", Special),
            ("64:ff9b::a9fe:a9fe", Special),
            ("2002:7f00:0001::1", Special),
            ("2002:a9fe:a9fe::1", Special),
            ("100::1", Special),
            ("4000::1", Special),
        ] {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[test]
    fn the_policy_allows_what_it_names_and_never_special_addresses() {
        let only = |kinds: &str| OutboundAllow::parse(&[kinds.to_owned()]).unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let home = OutboundAllow::default();
        assert!(
            permitted(home, ip("127.0.0.1")) && permitted(home, ip("192.168.1.2")) && permitted(home, ip("8.8.8.8"))
        );
        assert!(!permitted(home, ip("169.254.169.254")) && !permitted(home, ip("fe80::1")));
        let hosted = only("public");
        assert!(!permitted(hosted, ip("127.0.0.1")) && !permitted(hosted, ip("10.0.0.1")));
        assert!(!permitted(hosted, ip("::ffff:10.0.0.1")) && permitted(hosted, ip("8.8.8.8")));
        assert!(permitted(only("loopback"), ip("::1")) && !permitted(only("loopback"), ip("8.8.8.8")));
        assert!(OutboundAllow::parse(&["public,intranet".into()]).is_err());
        assert_eq!(only("public, loopback").as_text(), "loopback,public");
    }

    /// The resolver answers only allowed addresses, and refuses a name with none (before
    /// anything connects); the literal check refuses literal addresses the same way.
    #[tokio::test]
    async fn names_and_literals_are_checked_before_connecting() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let fixed = vec![
            ("metadata.test".to_owned(), "169.254.169.254".parse().unwrap()),
            ("lan.test".to_owned(), "192.168.1.20".parse().unwrap()),
            ("here.test".to_owned(), "127.0.0.1".parse().unwrap()),
        ];
        let resolver = PolicyResolver {
            allow: OutboundAllow::default(),
            fixed: Arc::new(fixed.clone()),
        };
        let resolve = |name: &str| resolver.resolve(name.parse().unwrap());
        let err = resolve("metadata.test").await.err().expect("refused").to_string();
        assert!(
            err.contains("metadata.test") && err.contains("outbound policy"),
            "{err}"
        );
        let addrs: Vec<SocketAddr> = resolve("LAN.test").await.expect("allowed").collect();
        assert_eq!(addrs, vec!["192.168.1.20:0".parse().unwrap()]);

        let hosted = InboxClient::new(OutboundAllow::parse(&["public".into()]).unwrap(), fixed.clone());
        for url in [
            "http://127.0.0.1:9",
            "http://[::1]:9",
            "http://169.254.169.254",
            "http://[::ffff:10.0.0.1]",
        ] {
            let f = hosted.place(url).await.err().expect(url);
            assert!(
                !f.transient && f.reason.contains("outbound policy"),
                "{url}: {}",
                f.reason
            );
        }
        // names are checked before the place is taken, and again by the resolver
        let f = hosted.place("http://lan.test:8001").await.err().expect("a LAN name");
        assert!(!f.transient && f.reason.contains("lan.test"), "{}", f.reason);
        let home = InboxClient::new(OutboundAllow::default(), fixed.clone());
        assert!(home.place("http://LAN.test:8001").await.is_ok());
        // a refused name fails for good, without a connection
        let f = hosted
            .login("http://here.test:9", "alice", "00ff")
            .await
            .expect_err("refused");
        assert!(!f.transient && f.reason.contains("here.test"), "{}", f.reason);
    }
}
