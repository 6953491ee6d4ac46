//! The web interface (issue 13, docs/web.md) as served: every page and file of both
//! services with its content type, the security headers and a strong `ETag` that
//! revalidates to 304; unknown files are JSON 404s; the pages are linked from `GET /`; the
//! pages' login answers the token as JSON and sets no cookie; the configuration names the
//! local inbox. The browser suite (tests/browser) drives the pages themselves.

use crate::common;

use common::{Api, Auth, Method, Server};
use serde_json::json;

/// Every page and file of each service, with its media type.
const INBOX_FILES: &[(&str, &str)] = &[
    ("/app/", "text/html"),
    ("/app", "text/html"),
    ("/app/login", "text/html"),
    ("/app/settings", "text/html"),
    ("/app/share", "text/html"),
    ("/app/app.css", "text/css"),
    ("/app/api.js", "text/javascript"),
    ("/app/inbox.js", "text/javascript"),
    ("/app/login.js", "text/javascript"),
    ("/app/settings.js", "text/javascript"),
    ("/app/share.js", "text/javascript"),
    ("/app/push.js", "text/javascript"),
    ("/app/sw.js", "text/javascript"),
    ("/app/notifications", "text/html"),
    ("/app/notifications.js", "text/javascript"),
    ("/app/manifest.webmanifest", "application/manifest+json"),
    ("/app/icon.svg", "image/svg+xml"),
    ("/app/icon-192.png", "image/png"),
    ("/app/icon-512.png", "image/png"),
];

const SCHEDULER_FILES: &[(&str, &str)] = &[
    ("/app/", "text/html"),
    ("/app/login", "text/html"),
    ("/app/settings", "text/html"),
    ("/app/triggered", "text/html"),
    ("/app/triggers", "text/html"),
    ("/app/app.css", "text/css"),
    ("/app/api.js", "text/javascript"),
    ("/app/scheduler.js", "text/javascript"),
    ("/app/triggered.js", "text/javascript"),
    ("/app/triggers.js", "text/javascript"),
    ("/app/login.js", "text/javascript"),
    ("/app/settings.js", "text/javascript"),
    ("/app/push.js", "text/javascript"),
    ("/app/sw.js", "text/javascript"),
    ("/app/notifications", "text/html"),
    ("/app/notifications.js", "text/javascript"),
    ("/app/manifest.webmanifest", "application/manifest+json"),
    ("/app/icon.svg", "image/svg+xml"),
    ("/app/icon-192.png", "image/png"),
];

/// The headers every answer of the web interface carries.
#[track_caller]
fn assert_secure(r: &common::Resp, path: &str) {
    let csp = r
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{path}: no Content-Security-Policy"));
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ] {
        assert!(csp.contains(directive), "{path}: CSP {csp:?} lacks {directive:?}");
    }
    assert!(
        !csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"),
        "{path}: {csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{path}");
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{path}");
    assert_eq!(r.header("referrer-policy"), Some("no-referrer"), "{path}");
    assert!(r.header("set-cookie").is_none(), "{path}: sets a cookie");
}

async fn check_files(api: &Api, files: &[(&str, &str)]) {
    for (path, media) in files {
        let r = api.get(path, &Auth::None).await.expect(200);
        assert_eq!(&r.media_type(), media, "{path}");
        assert!(!r.body.is_empty(), "{path}: empty");
        assert_secure(&r, path);
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{path}");
        let etag = r.header("etag").unwrap_or_else(|| panic!("{path}: no ETag")).to_owned();
        assert!(
            etag.starts_with('"') && etag.ends_with('"'),
            "{path}: a strong ETag, not {etag}"
        );
        // revalidation: the same tag → 304 without a body, still with the headers
        let again = api
            .send(
                api.request(Method::GET, path, &Auth::None)
                    .header("If-None-Match", &etag),
            )
            .await
            .expect(304);
        assert!(again.body.is_empty(), "{path}: 304 with a body");
        assert_eq!(again.header("etag"), Some(etag.as_str()), "{path}");
        assert_secure(&again, path);
        let listed = format!("\"0000000000000000\", W/{etag}");
        api.send(
            api.request(Method::GET, path, &Auth::None)
                .header("If-None-Match", listed),
        )
        .await
        .expect(304);
        // another tag: the file again
        api.send(
            api.request(Method::GET, path, &Auth::None)
                .header("If-None-Match", "\"x\""),
        )
        .await
        .expect(200);
        // HEAD: the headers without the body
        let head = api.send(api.request(Method::HEAD, path, &Auth::None)).await.expect(200);
        assert!(head.body.is_empty(), "{path}: HEAD with a body");
        assert_eq!(head.header("etag"), Some(etag.as_str()), "{path}");
    }
}

#[tokio::test]
async fn every_page_and_file_is_served_with_security_headers_and_an_etag() {
    let server = Server::start().await;
    check_files(&server.api, INBOX_FILES).await;
    check_files(&server.scheduler, SCHEDULER_FILES).await;
    // a page of one service is not a page of the other
    server.api.get("/app/triggers", &Auth::None).await.expect_error(404);
    server.scheduler.get("/app/share", &Auth::None).await.expect_error(404);
}

#[tokio::test]
async fn unknown_files_are_json_404s_and_pages_take_no_other_method() {
    let server = Server::start().await;
    for api in [&server.api, &server.scheduler] {
        for path in [
            "/app/nothing.js",
            "/app/../Cargo.toml",
            "/app/app.css/x",
            "/app/inbox.html",
        ] {
            let status = api.get(path, &Auth::None).await.status;
            assert_eq!(status, 404, "{path}");
        }
        api.get("/app/nothing.js", &Auth::None).await.expect_error(404);
        let r = api.post("/app/", &Auth::None, &json!({})).await;
        r.expect_error(405);
    }
}

#[tokio::test]
async fn the_api_pages_link_the_web_interface_with_the_security_headers_of_every_page() {
    let server = Server::start().await;
    for api in [&server.api, &server.scheduler] {
        let r = api.get("/", &Auth::None).await.expect(200);
        let page = r.text();
        assert!(page.contains("href=\"/app/\""), "{page}");
        // a page like the others: no script, its one style block allowed by its hash, no frames
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("referrer-policy"), Some("no-referrer"));
        let csp = r.header("content-security-policy").expect("a CSP").to_owned();
        let css = page
            .split("<style>")
            .nth(1)
            .and_then(|rest| rest.split("</style>").next())
            .expect("a style block");
        use base64::Engine;
        use sha2::Digest;
        let hash = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(css.as_bytes()));
        assert!(csp.contains(&format!("style-src 'sha256-{hash}'")), "{csp}");
        assert!(
            csp.contains("default-src 'none'") && !csp.contains("script-src"),
            "{csp}"
        );
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!page.contains("<script"), "no script on the API page");
    }
}

#[tokio::test]
async fn the_page_login_answers_the_token_as_json_without_a_cookie() {
    let server = Server::start().await;
    for api in [&server.api, &server.scheduler] {
        api.register("webber", "pw").await.expect_registered();
        let r = api
            .post(
                "/app/token",
                &Auth::None,
                &json!({"username": "webber", "password": "pw"}),
            )
            .await;
        assert!(r.header("set-cookie").is_none());
        let token = r.expect_json(200)["token"].as_str().expect("a token").to_owned();
        api.get("/account", &Auth::Bearer(token)).await.expect_json(200);
        // the same refusals as POST /login
        api.post(
            "/app/token",
            &Auth::None,
            &json!({"username": "webber", "password": "no"}),
        )
        .await
        .expect_error(401);
        api.post("/app/token", &Auth::None, &json!({"username": "x y", "password": "no"}))
            .await
            .expect_error(400);
        let not_json = api
            .send(
                api.request(Method::POST, "/app/token", &Auth::None)
                    .body(r#"{"username":"webber","password":"pw"}"#),
            )
            .await;
        not_json.expect_error(415);
    }
}

#[tokio::test]
async fn the_configuration_names_the_local_inbox() {
    let server = Server::start().await;
    let inbox_port: u16 = server.api.base.rsplit(':').next().unwrap().parse().unwrap();
    let r = server.scheduler.get("/app/config.json", &Auth::None).await;
    assert_secure(&r, "/app/config.json");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let config = r.expect_json(200);
    assert_eq!(config["service"], "scheduler");
    assert_eq!(config["registration"], true);
    assert_eq!(config["inbox"]["port"], inbox_port);
    assert_eq!(config["inbox"]["url"], format!("http://127.0.0.1:{inbox_port}"));
    let config = server.api.get("/app/config.json", &Auth::None).await.expect_json(200);
    assert_eq!(config["service"], "inbox");
    // the pages that call the other service of this server may, on the host the browser
    // used: the scheduler's triggers, login and settings pages the inbox (the one-form local
    // inbox, registration, deleting and the password on both), the inbox's own page
    // ("Later…"), login and settings pages the scheduler
    let scheduler_port: u16 = server.scheduler.base.rsplit(':').next().unwrap().parse().unwrap();
    for (api, own, other, pages) in [
        (
            &server.scheduler,
            scheduler_port,
            inbox_port,
            ["/app/triggers", "/app/login", "/app/settings"],
        ),
        (
            &server.api,
            inbox_port,
            scheduler_port,
            ["/app/", "/app/login", "/app/settings"],
        ),
    ] {
        for page in pages {
            let r = api
                .send(
                    api.request(Method::GET, page, &Auth::None)
                        .header("Host", format!("localhost:{own}")),
                )
                .await
                .expect(200);
            let csp = r.header("content-security-policy").unwrap();
            assert!(
                csp.contains(&format!(
                    "connect-src 'self' http://localhost:{other} https://localhost:{other};"
                )),
                "{page}: {csp}"
            );
        }
    }
    // the other pages call their own origin only
    for (api, page) in [
        (&server.scheduler, "/app/"),
        (&server.scheduler, "/app/triggered"),
        (&server.api, "/app/share"),
    ] {
        let r = api.get(page, &Auth::None).await.expect(200);
        assert!(
            r.header("content-security-policy")
                .unwrap()
                .contains("connect-src 'self';"),
            "{page}"
        );
    }
}

#[tokio::test]
async fn without_an_inbox_the_configuration_offers_none() {
    // the scheduler alone: the binary with --no-inbox
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let proc =
        common::process::Proc::start(dir.path(), logs.path(), common::process::Services::SchedulerOnly, &[]).await;
    let config = proc
        .scheduler
        .get("/app/config.json", &Auth::None)
        .await
        .expect_json(200);
    assert_eq!(config["inbox"], serde_json::Value::Null);
}

#[tokio::test]
async fn the_service_worker_is_a_script_of_each_origin_the_pages_may_register() {
    // `/app/sw.js` (scope /app/, the default of its path) on both services; the pages' CSP
    // lets them register it: `worker-src` is not set, so it falls back to `script-src 'self'`
    let server = Server::start().await;
    for api in [&server.api, &server.scheduler] {
        let worker = api.get("/app/sw.js", &Auth::None).await.expect(200);
        assert_eq!(worker.media_type(), "text/javascript");
        assert!(String::from_utf8_lossy(&worker.body).contains("addEventListener('push'"));
        for page in ["/app/", "/app/notifications"] {
            let r = api.get(page, &Auth::None).await.expect(200);
            let csp = r.header("content-security-policy").unwrap();
            assert!(csp.contains("script-src 'self'"), "{page}: {csp}");
            assert!(
                !csp.contains("worker-src") && !csp.contains("child-src"),
                "{page}: {csp}"
            );
        }
    }
}

#[tokio::test]
async fn behind_a_proxy_each_service_names_the_others_public_address() {
    // two host names on a TLS proxy: the pages find the other service there, not at this
    // host's other port (docs/web.md), and may call it
    let dir = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let proc = common::process::Proc::start(
        dir.path(),
        logs.path(),
        common::process::Services::Both,
        &[
            "--inbox-web-host",
            "https://inbox.example.org",
            "--web-host",
            "https://scheduler.example.org/",
        ],
    )
    .await;
    let config = proc.api.get("/app/config.json", &Auth::None).await.expect_json(200);
    assert_eq!(config["scheduler"]["origin"], "https://scheduler.example.org");
    let config = proc
        .scheduler
        .get("/app/config.json", &Auth::None)
        .await
        .expect_json(200);
    assert_eq!(config["inbox"]["origin"], "https://inbox.example.org");
    for (api, page, other) in [
        (&proc.api, "/app/", "https://scheduler.example.org"),
        (&proc.api, "/app/settings", "https://scheduler.example.org"),
        (&proc.scheduler, "/app/triggers", "https://inbox.example.org"),
        (&proc.scheduler, "/app/login", "https://inbox.example.org"),
    ] {
        let r = api.get(page, &Auth::None).await.expect(200);
        let csp = r.header("content-security-policy").unwrap();
        let connect = csp.split(';').find(|d| d.trim().starts_with("connect-src")).unwrap();
        assert!(connect.split_whitespace().any(|o| o == other), "{page}: {csp}");
    }
    // pages that call no other service still allow only their own origin
    let r = proc.scheduler.get("/app/triggered", &Auth::None).await.expect(200);
    assert!(r
        .header("content-security-policy")
        .unwrap()
        .contains("connect-src 'self';"));
    // without the settings: no public address, the pages use this host
    let server = Server::start().await;
    let config = server.api.get("/app/config.json", &Auth::None).await.expect_json(200);
    assert_eq!(config["scheduler"]["origin"], serde_json::Value::Null);
}
