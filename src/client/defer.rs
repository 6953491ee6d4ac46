//! `pigeonhole defer [ID] --in 3d | --at WHEN` (issue 19 point 6): the GTD loop across both
//! services. An inbox item becomes a scheduled item with the same text, due then in the
//! account's time zone, and leaves the inbox only once the scheduler has stored it (its
//! answer is durable): at every moment the item is in the inbox, the scheduler, or (when
//! the removal fails) both, never in neither.

use super::error::ClientError;
use super::{item_text, items, short, when, Client};
use crate::config::DeferArgs;
use crate::domain::scheduler::models::Tickle;
use crate::domain::wire::{self, Timestamp};
use reqwest::Method;
use serde_json::{json, Value};

/// The item `id` names (the start of its id), else the oldest.
fn pick<'a>(items: &'a [Value], id: Option<&str>) -> Result<&'a Value, ClientError> {
    let Some(prefix) = id else {
        return items
            .first()
            .ok_or_else(|| ClientError::input("the inbox is empty: nothing to defer"));
    };
    let prefix = prefix.to_ascii_lowercase();
    let matching: Vec<&Value> = items
        .iter()
        .filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with(&prefix)))
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(ClientError::input(format!("no inbox item's id starts with {prefix:?}"))),
        _ => Err(ClientError::input(format!(
            "several inbox items' ids start with {prefix:?}: give more of it"
        ))),
    }
}

/// The text of an inbox item, which must be a text item (the scheduler keeps only text).
fn text_of(item: &Value) -> Result<String, ClientError> {
    let contents = &item["contents"];
    if contents["type"].as_str() != Some("text") {
        return Err(ClientError::input(format!(
            "inbox item {} is of type {}: only text items can be deferred (the scheduler keeps text)",
            short(&item["id"]),
            contents["type"]
        )));
    }
    contents["data"]
        .as_str()
        .and_then(wire::decode_base64)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| ClientError::input(format!("inbox item {} is not UTF-8 text", short(&item["id"]))))
}

pub async fn run(args: DeferArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let items = items(&client).await?;
    let item = pick(&items, args.id.as_deref())?;
    let id = item["id"].as_str().unwrap_or_default().to_owned();
    let text = text_of(item)?;

    let zone = client.zone().await?;
    let now = Timestamp::now();
    let (day, time) = match (&args.after, &args.at) {
        (Some(after), _) => {
            let after = when::parse_duration(after).map_err(ClientError::Input)?;
            let (day, time) = when::in_from_now(after, &zone, now).map_err(ClientError::Input)?;
            (day, Some(time))
        }
        (None, Some(at)) => when::parse_at(at, &zone, now).map_err(ClientError::Input)?,
        (None, None) => return Err(ClientError::input(super::SAY_WHEN)),
    };
    let due = match time {
        Some(t) => format!("{day} {t}"),
        None => day.to_string(),
    };
    let tickle = Tickle {
        content: text.into_bytes(),
        day,
        time,
        recurrence: None,
    };
    // 1. the scheduled item; the inbox is not touched unless it is stored
    let scheduled = client
        .scheduler
        .post_json("/scheduler/item", &tickle.to_json())
        .await
        .map_err(|e| {
            e.noted(
                "nothing was deferred: the item is still in the inbox (if the scheduler stored it nevertheless, \
                 `pigeonhole scheduled` shows it)",
            )
        })?;
    // 2. only now out of the inbox
    if let Err(e) = client
        .inbox
        .ok(Method::DELETE, &format!("/inbox/item/{id}"), None)
        .await
    {
        return Err(ClientError::local(format!(
            "the item is now in both: scheduled as {} for {due}, but removing it from the inbox failed ({e}); \
             run `pigeonhole done {}` to remove it from the inbox",
            short(&scheduled),
            short(&Value::String(id.clone()))
        )));
    }
    client.print(
        &json!({"inbox-id": id, "scheduled-id": scheduled, "scheduled-day": day.to_string(),
                "scheduled-time": time.map(|t| t.to_string())}),
        || {
            format!(
                "Deferred to {due} (the account's time zone): {} (scheduled as {}).",
                item_text(item, false),
                short(&scheduled)
            )
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picking_an_item() {
        let items = vec![
            json!({"id": "aaaa1111-0000-4000-8000-000000000000", "contents": {"type": "text", "data": "b25l"}}),
            json!({"id": "aaaa2222-0000-4000-8000-000000000000", "contents": {"type": "image/png", "data": "AA=="}}),
        ];
        assert_eq!(pick(&items, None).unwrap()["id"], items[0]["id"]);
        assert_eq!(pick(&items, Some("AAAA2")).unwrap()["id"], items[1]["id"]);
        assert!(pick(&items, Some("aaaa")).unwrap_err().to_string().contains("several"));
        assert!(pick(&items, Some("b"))
            .unwrap_err()
            .to_string()
            .contains("no inbox item"));
        assert!(pick(&[], None).unwrap_err().to_string().contains("empty"));
        assert_eq!(text_of(&items[0]).unwrap(), "one");
        assert!(text_of(&items[1]).unwrap_err().to_string().contains("only text items"));
    }
}
