//! The scheduler's due → inbox latency on one or several `pigeonhole serve` processes
//! sharing a database (benches/scaling.rs, benches/peers.rs), driven with reqwest.

use super::R;
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

/// The base URLs (`http://127.0.0.1:PORT`) of one process's two services.
pub struct Services {
    pub inbox: String,
    pub scheduler: String,
}

async fn send(request: reqwest::RequestBuilder) -> R<(u16, String)> {
    let r = request.send().await.map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| e.to_string())?;
    Ok((status, text))
}

async fn expect(request: reqwest::RequestBuilder, status: &[u16], what: &str) -> R<String> {
    let (got, text) = send(request).await?;
    if status.contains(&got) {
        Ok(text)
    } else {
        Err(format!("{what}: {got} {text}"))
    }
}

/// Registers `name` on the service at `base` and logs in: the bearer token.
pub async fn account(http: &reqwest::Client, base: &str, name: &str) -> R<String> {
    let body = json!({"name": name, "password": "benchmark password"});
    expect(
        http.post(format!("{base}/register")).json(&body),
        &[200, 204],
        "register",
    )
    .await?;
    let body = json!({"username": name, "password": "benchmark password"});
    let r = http
        .post(format!("{base}/login"))
        .json(&body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let cookie = r
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .ok_or(format!("login of {name}: {}", r.status()))?;
    let token = cookie.split(';').next().unwrap_or("").trim_start_matches("JWT-Cookie=");
    Ok(token.to_owned())
}

/// Latencies (seconds) from the due second to the arrival in the inbox of `due` reminders;
/// `round` tells the accounts of one call from another's on the same servers.
pub async fn due_to_inbox(http: &reqwest::Client, processes: &[Services], due: usize, round: usize) -> R<Vec<f64>> {
    let first = &processes[0];
    let (target, reminders) = (format!("target{round}"), format!("reminders{round}"));
    let inbox_token = account(http, &first.inbox, &target).await?;
    let key = expect(
        http.post(format!("{}/access-key", first.inbox))
            .bearer_auth(&inbox_token)
            .json(&json!({"addAccessKeyName": "scheduler", "addAccessKeyPermissions": ["PermitAdd"]})),
        &[200],
        "access key",
    )
    .await?;
    let key: Value = serde_json::from_str(&key).map_err(|e| e.to_string())?;
    let token = account(http, &first.scheduler, &reminders).await?;
    expect(
        http.post(format!("{}/trigger/inbox", first.scheduler))
            .bearer_auth(&token)
            .json(&json!({
                "addInboxTriggerUrl": first.inbox,
                "addInboxTriggerUsername": target,
                "addInboxTriggerAccessKey": key["accessKeyCreatedKey"],
            })),
        &[200],
        "inbox trigger",
    )
    .await?;
    // a whole second far enough ahead for every reminder to be stored first
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|e| e.to_string())?;
    let due_at = now.as_secs() + 3 + (due as u64) / 200;
    let due_time = time::OffsetDateTime::from_unix_timestamp(due_at as i64).map_err(|e| e.to_string())?;
    let day = format!(
        "{:04}-{:02}-{:02}",
        due_time.year(),
        u8::from(due_time.month()),
        due_time.day()
    );
    let tod = format!(
        "{:02}:{:02}:{:02}",
        due_time.hour(),
        due_time.minute(),
        due_time.second()
    );
    let adds: Vec<_> = (0..due)
        .map(|n| {
            let base = processes[n % processes.len()].scheduler.clone();
            let (http, token) = (http.clone(), token.clone());
            let body = json!({"content": format!("reminder {n}"), "scheduled-day": day, "scheduled-time": tod});
            tokio::spawn(async move {
                expect(
                    http.post(format!("{base}/scheduler/item"))
                        .bearer_auth(&token)
                        .json(&body),
                    &[200],
                    "add",
                )
                .await
            })
        })
        .collect();
    for a in adds {
        a.await.map_err(|e| e.to_string())??;
    }
    let due_instant = SystemTime::UNIX_EPOCH + Duration::from_secs(due_at);
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120 + due as u64 / 10);
    let size = || async {
        let size = expect(
            http.get(format!("{}/inbox/size", first.inbox))
                .bearer_auth(&inbox_token),
            &[200],
            "size",
        )
        .await?;
        size.trim().parse::<usize>().map_err(|e| format!("size {size}: {e}"))
    };
    while latencies.len() < due {
        let size = size().await?;
        let at = SystemTime::now()
            .duration_since(due_instant)
            .map_or(0.0, |d| d.as_secs_f64());
        if size > due {
            return Err(format!("{size} items arrived for {due} reminders"));
        }
        while latencies.len() < size {
            latencies.push(at);
        }
        if Instant::now() > deadline {
            return Err(format!("only {} of {due} reminders arrived", latencies.len()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // and none twice
    tokio::time::sleep(Duration::from_secs(1)).await;
    let size = size().await?;
    if size != due {
        return Err(format!("{size} items arrived for {due} reminders"));
    }
    Ok(latencies)
}
