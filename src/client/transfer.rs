//! `pigeonhole export [FILE]` and `pigeonhole import FILE`: one account of both services as
//! one JSON file, `{"format": "pigeonhole-export", "version": 1, "inbox": …, "scheduler": …}`
//! (docs/backup.md), through each service's `/account/export` and `/account/import`.
//!
//! Import sends each service's part in pieces of at most [`PIECE_BYTES`] of items, so that
//! no request meets the server's body cap (16 MiB by default) however large the account:
//! first every piece as a check (`"dry-run": true`, nothing stored), then every piece for
//! real. A file with a bad item is refused before anything is stored; each piece is stored
//! atomically, and importing again after an interruption completes the rest (what is there
//! is kept).

use super::Client;
use crate::config::{ExportArgs, ImportArgs};
use crate::domain::transfer::{FILE_FORMAT, VERSION};
use serde_json::{json, Map, Value};
use std::io::Write;

/// The most bytes of items one import request carries (well under the default body cap).
const PIECE_BYTES: usize = 4 * 1024 * 1024;

pub async fn export(args: ExportArgs) -> Result<(), String> {
    let client = Client::open(&args.opts)?;
    let inbox = client.inbox.get_json("/account/export").await?;
    let scheduler = client.scheduler.get_json("/account/export").await?;
    let file = json!({"format": FILE_FORMAT, "version": VERSION, "inbox": inbox, "scheduler": scheduler});
    let mut text = serde_json::to_vec_pretty(&file).map_err(|e| e.to_string())?;
    text.push(b'\n');
    match &args.file {
        None => std::io::stdout()
            .write_all(&text)
            .map_err(|e| format!("cannot write the export: {e}")),
        Some(path) => {
            // private: an inbox trigger's access key is in it
            super::settings::write_private(path, &text)?;
            let count = |v: &Value, k: &str| v[k].as_array().map_or(0, Vec::len);
            eprintln!(
                "exported {} inbox items, {} scheduled and {} triggered items, {} triggers to {}",
                count(&inbox, "items"),
                count(&scheduler, "scheduled"),
                count(&scheduler, "triggered"),
                count(&scheduler, "triggers"),
                path.display()
            );
            Ok(())
        }
    }
}

/// The pieces of one service's part: the part without its item lists, and each list cut
/// into runs of at most `limit` bytes (an item larger than that goes alone); the first
/// piece also carries everything else.
fn pieces(part: &Value, lists: &[&str], limit: usize) -> Result<Vec<Value>, String> {
    let obj = part.as_object().ok_or("the export's parts must be JSON objects")?;
    let mut base: Map<String, Value> = obj.clone();
    for l in lists {
        base.insert((*l).to_owned(), json!([]));
    }
    let mut out = vec![Value::Object(base.clone())];
    let mut bytes = 0usize;
    for l in lists {
        let Some(items) = obj.get(*l).and_then(Value::as_array) else {
            continue;
        };
        for item in items {
            let size = item.to_string().len();
            if bytes > 0 && bytes + size > limit {
                let mut next = base.clone();
                for l in lists {
                    next.insert((*l).to_owned(), json!([]));
                }
                // later pieces carry only items
                next.remove("settings");
                next.insert("triggers".into(), json!([]));
                next.insert("access-keys".into(), json!([]));
                out.push(Value::Object(next));
                bytes = 0;
            }
            if let Some(list) = out.last_mut().and_then(|p| p[*l].as_array_mut()) {
                list.push(item.clone());
            }
            bytes += size;
        }
    }
    Ok(out)
}

pub async fn import(args: ImportArgs) -> Result<(), String> {
    let client = Client::open(&args.opts)?;
    let text = std::fs::read(&args.file).map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let file: Value = serde_json::from_slice(&text).map_err(|e| format!("{} is not JSON: {e}", args.file.display()))?;
    if file["format"] != FILE_FORMAT || file["version"] != VERSION {
        return Err(format!(
            "{} is not a Pigeonhole export (format {FILE_FORMAT:?}, version {VERSION})",
            args.file.display()
        ));
    }
    let services = [
        (&client.inbox, pieces(&file["inbox"], &["items"], PIECE_BYTES)?),
        (
            &client.scheduler,
            pieces(&file["scheduler"], &["scheduled", "triggered"], PIECE_BYTES)?,
        ),
    ];
    // everything is checked before anything is stored
    for (service, parts) in &services {
        for part in parts {
            let mut check = part.clone();
            check["dry-run"] = json!(true);
            service
                .ok(reqwest::Method::POST, "/account/import", Some(&check))
                .await?;
        }
    }
    let mut totals: Map<String, Value> = Map::new();
    for (service, parts) in &services {
        for part in parts {
            let answer = service.post_json("/account/import", part).await?;
            for (k, v) in answer.as_object().into_iter().flatten() {
                let key = format!("{}-{k}", service.name);
                match (totals.get(&key).and_then(Value::as_u64), v.as_u64()) {
                    (Some(a), Some(b)) => totals.insert(key, json!(a + b)),
                    _ if v.as_array().is_some_and(Vec::is_empty) && totals.contains_key(&key) => None,
                    _ => totals.insert(key, v.clone()),
                };
            }
        }
    }
    let summary = Value::Object(totals);
    if client.json {
        println!("{summary}");
    } else {
        let n = |k: &str| summary[k].as_u64().unwrap_or(0);
        println!(
            "imported {} inbox items ({} were there), {} scheduled items ({} were there), {} triggered items, {} triggers",
            n("inbox-items-added"),
            n("inbox-items-kept"),
            n("scheduler-scheduled-added"),
            n("scheduler-scheduled-kept"),
            n("scheduler-triggered-added"),
            n("scheduler-triggers-added"),
        );
        for (service, key) in [
            ("inbox", "inbox-access-keys-to-recreate"),
            ("scheduler", "scheduler-access-keys-to-recreate"),
        ] {
            for k in summary[key].as_array().into_iter().flatten() {
                println!("recreate the {service} access key {} ({})", k["name"], k["permissions"]);
            }
        }
        for id in summary["scheduler-email-triggers-to-verify"]
            .as_array()
            .into_iter()
            .flatten()
        {
            println!("the e-mail trigger {id} needs verifying again (resend its verification e-mail)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_part_is_cut_into_pieces_that_together_hold_every_item_once() {
        let item = |n: usize| json!({"id": n, "data": "x".repeat(40)});
        let part = json!({
            "format": "f", "version": 1, "settings": {"s": 1}, "triggers": [1, 2], "access-keys": [3],
            "scheduled": (0..10).map(item).collect::<Vec<_>>(),
            "triggered": (10..15).map(item).collect::<Vec<_>>(),
        });
        let limit = 3 * item(0).to_string().len();
        let got = pieces(&part, &["scheduled", "triggered"], limit).unwrap();
        assert!(got.len() >= 5, "{got:?}");
        let mut ids = Vec::new();
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p["format"], "f");
            let items: Vec<&Value> = ["scheduled", "triggered"]
                .iter()
                .flat_map(|l| p[*l].as_array().unwrap())
                .collect();
            assert!(items.iter().map(|v| v.to_string().len()).sum::<usize>() <= limit);
            ids.extend(items.iter().map(|v| v["id"].as_u64().unwrap()));
            if i == 0 {
                assert_eq!(p["settings"], json!({"s": 1}));
                assert_eq!(p["triggers"], json!([1, 2]));
            } else {
                assert!(p.get("settings").is_none(), "settings only once");
                assert_eq!(p["triggers"], json!([]));
                assert_eq!(p["access-keys"], json!([]));
            }
        }
        assert_eq!(ids, (0..15).collect::<Vec<u64>>());
        // a small part is one piece, as it is
        assert_eq!(
            pieces(&part, &["scheduled", "triggered"], usize::MAX).unwrap(),
            vec![part]
        );
    }
}
