//! Account imports are bounded and all-or-nothing (issue 17, point 5).

mod common;

use common::process::{Proc, Services};
use common::Auth;
use serde_json::json;

/// An inbox import body of `n` small text items, as `GET /account/export` writes them.
fn inbox_body(n: usize, dry_run: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * 140);
    out.extend_from_slice(br#"{"format":"pigeonhole-inbox-export","version":1,"username":"x","access-keys":[],"#);
    if dry_run {
        out.extend_from_slice(br#""dry-run":true,"#);
    }
    out.extend_from_slice(br#""items":["#);
    for i in 0..n {
        if i > 0 {
            out.push(b',');
        }
        let id = uuid::Uuid::from_u128(0x1234_0000_0000_4000_8000_0000_0000_0000 | i as u128);
        out.extend_from_slice(
            format!(
                r#"{{"contents":{{"data":"{:08}","type":"text"}},"created":"2024-01-01T00:00:00.{:06}Z","id":"{id}"}}"#,
                i,
                i % 1_000_000
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(b"]}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn measure() {
    let data = tempfile::tempdir().unwrap();
    let logs = tempfile::tempdir().unwrap();
    let server = Proc::start(data.path(), logs.path(), Services::Both, &[]).await;
    let alice = server.api.user("alice").await;
    let body = inbox_body(125_000, std::env::var("DRY").is_ok());
    eprintln!("body {} bytes", body.len());
    eprintln!(
        "before: hwm {} rss {}",
        server.status_kib("VmHWM"),
        server.status_kib("VmRSS")
    );
    let r = server
        .api
        .post_raw("/account/import", &alice, Some("application/json"), body)
        .await;
    eprintln!("status {} {}", r.status, r.text().chars().take(300).collect::<String>());
    eprintln!(
        "after: hwm {} rss {}",
        server.status_kib("VmHWM"),
        server.status_kib("VmRSS")
    );
    let _ = json!(null);
    let _ = Auth::None;
}
