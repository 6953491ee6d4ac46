//! `pigeonhole trigger add|list|delete|verify` (issue 27 point 4): the ways reminders reach
//! the person, as the scheduler keeps them (scheduler.md §6): e-mail, the inbox, push, and
//! webhooks (`ntfy` is a webhook that posts the text, §6.5).

use super::error::ClientError;
use super::{short, Client};
use crate::config::{TriggerAdd, TriggerCommand, WebhookFormat};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

pub async fn run(command: TriggerCommand) -> Result<(), ClientError> {
    match command {
        TriggerCommand::Add(TriggerAdd::Email(args)) => {
            let client = Client::open(&args.opts)?;
            let address = args.address.trim();
            let id = add(&client, "/trigger/email", &json!({ "addEmailTrigger": address })).await?;
            client.print(
                &json!({"id": id, "kind": "email", "address": address, "verified": false}),
                || {
                    format!(
                        "Added e-mail trigger {} for {address}. The server sent it an e-mail: reminders go there once \
                         the address is verified (the link in the e-mail, or `pigeonhole trigger verify {} KEY` with \
                         the key it gives).",
                        short(&id),
                        short(&id)
                    )
                },
            );
            Ok(())
        }
        TriggerCommand::Add(TriggerAdd::Ntfy(args)) => {
            let url = webhook_url(&args.url, true)?;
            webhook(&args.opts, &url, WebhookFormat::Text, "ntfy").await
        }
        TriggerCommand::Add(TriggerAdd::Webhook(args)) => {
            let url = webhook_url(&args.url, false)?;
            webhook(&args.opts, &url, args.format, "webhook").await
        }
        TriggerCommand::List(opts) => list(&opts).await,
        TriggerCommand::Delete(args) => {
            let client = Client::open(&args.opts)?;
            let all = triggers(&client).await?;
            let trigger = by_prefix(&all, &args.id)?;
            let id = trigger["uuid"].as_str().unwrap_or_default();
            client
                .scheduler
                .ok(Method::DELETE, &format!("/trigger/delete/{id}"), None)
                .await?;
            let (kind, what) = describe(trigger);
            client.print(&json!({ "id": id }), || {
                format!("Deleted trigger {} ({kind} {what}).", short(&trigger["uuid"]))
            });
            Ok(())
        }
        TriggerCommand::Verify(args) => {
            let client = Client::open(&args.opts)?;
            let all = triggers(&client).await?;
            let trigger = by_prefix(&all, &args.id)?;
            let id = trigger["uuid"].as_str().unwrap_or_default();
            let key = args.key.trim();
            if key.len() != 32 || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ClientError::input(format!(
                    "{key:?} is not a verification key: it is the 32 hex digits the e-mail gives"
                )));
            }
            let path = format!("/trigger/email/verify/{id}/{key}");
            let answer = client.scheduler.call(Method::POST, &path, None).await?;
            match answer.status {
                s if s.is_success() => {}
                StatusCode::NOT_FOUND => {
                    return Err(ClientError::input(format!(
                        "trigger {} is not an e-mail trigger",
                        short(&trigger["uuid"])
                    )))
                }
                StatusCode::BAD_REQUEST => {
                    return Err(ClientError::input(format!(
                        "that is not the key of trigger {}'s latest e-mail ({}): nothing changed",
                        short(&trigger["uuid"]),
                        answer.reason()
                    )))
                }
                _ => return Err(client.scheduler.refusal("verifying the address", &answer)),
            }
            let (_, address) = describe(trigger);
            client.print(&json!({"id": id, "verified": true}), || {
                format!("Verified {address}: reminders are e-mailed there.")
            });
            Ok(())
        }
    }
}

/// `POST path body` for a new trigger: its id. A server without the endpoint is named as
/// too old for it.
async fn add(client: &Client, path: &str, body: &Value) -> Result<Value, ClientError> {
    let answer = client.scheduler.call(Method::POST, path, Some(body)).await?;
    if answer.status == StatusCode::NOT_FOUND {
        return Err(ClientError::answer(format!(
            "the scheduler at {} has no {path}: it is older than this client; update the server",
            client.scheduler.base
        )));
    }
    if !answer.status.is_success() {
        return Err(client.scheduler.refusal("adding the trigger", &answer));
    }
    let id = answer.json()?;
    match id {
        Value::String(_) => Ok(id),
        other => Err(ClientError::answer(format!(
            "the scheduler answered {other} instead of the new trigger's id"
        ))),
    }
}

async fn webhook(
    opts: &crate::config::ClientOpts,
    url: &str,
    format: WebhookFormat,
    kind: &str,
) -> Result<(), ClientError> {
    let client = Client::open(opts)?;
    let format = match format {
        WebhookFormat::Text => "text",
        WebhookFormat::Json => "json",
    };
    let id = add(
        &client,
        "/trigger/webhook",
        &json!({"addWebhookTriggerUrl": url, "addWebhookTriggerFormat": format}),
    )
    .await?;
    let shown = without_query(url);
    client.print(
        &json!({"id": id, "kind": "webhook", "url": shown, "format": format}),
        || {
            let what = match (kind, format) {
                ("ntfy", _) => "reminders are posted there as ntfy notifications".to_string(),
                (_, "json") => "reminders are posted there as JSON".to_string(),
                _ => "reminders are posted there as text".to_string(),
            };
            format!("Added {kind} trigger {} for {shown}: {what}.", short(&id))
        },
    );
    Ok(())
}

/// A webhook's URL as given, `https://` put in front when it has no scheme. An ntfy URL
/// names its topic (a path).
fn webhook_url(given: &str, ntfy: bool) -> Result<String, ClientError> {
    let given = given.trim();
    let full = if given.contains("://") {
        given.to_owned()
    } else {
        format!("https://{given}")
    };
    let url = reqwest::Url::parse(&full).map_err(|e| ClientError::input(format!("{given:?} is not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(ClientError::input(format!(
            "{given:?} is not an http:// or https:// URL"
        )));
    }
    if ntfy && url.path().trim_matches('/').is_empty() {
        return Err(ClientError::input(format!(
            "{given:?} names no topic: an ntfy URL is the server's and the topic's, e.g. https://ntfy.sh/my-secret-topic"
        )));
    }
    Ok(full)
}

/// A URL with its query (a token) replaced by `?…`, as the server shows it.
fn without_query(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_owned(),
    }
}

async fn triggers(client: &Client) -> Result<Vec<Value>, ClientError> {
    let all = client.scheduler.get_json("/trigger").await?;
    all.as_array()
        .cloned()
        .ok_or_else(|| ClientError::answer("the scheduler answered something that is not a list"))
}

fn by_prefix<'a>(all: &'a [Value], prefix: &str) -> Result<&'a Value, ClientError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    let matching: Vec<&Value> = all
        .iter()
        .filter(|t| {
            t["uuid"]
                .as_str()
                .is_some_and(|id| !prefix.is_empty() && id.starts_with(&prefix))
        })
        .collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(ClientError::input(format!(
            "no trigger's id starts with {prefix:?}: `pigeonhole trigger list` lists them"
        ))),
        _ => Err(ClientError::input(format!(
            "several triggers' ids start with {prefix:?}: give more of it"
        ))),
    }
}

/// A trigger's kind and what it reaches, for people.
fn describe(trigger: &Value) -> (String, String) {
    let info = &trigger["info"];
    let value = &info["typedTriggerInfoValue"];
    let kind = info["typedTriggerInfoType"].as_str().unwrap_or("?").to_owned();
    let text = |key: &str| value[key].as_str().unwrap_or("?").to_owned();
    let what = match kind.as_str() {
        "email" => {
            let address = text("emailTriggerInfoEmailAddress");
            match value["emailTriggerInfoVerified"].as_bool() {
                Some(false) => format!(
                    "{address} (not verified yet: `pigeonhole trigger verify {} KEY` with the key from its e-mail)",
                    short(&trigger["uuid"])
                ),
                _ => address,
            }
        }
        "inbox" => text("inboxTriggerInfoUrl"),
        "push" => match value["pushTriggerInfoExpired"].as_bool() {
            Some(true) => format!(
                "{} (expired: subscribe again on that device)",
                text("pushTriggerInfoHost")
            ),
            _ => text("pushTriggerInfoHost"),
        },
        "webhook" => format!(
            "{} ({})",
            text("webhookTriggerInfoUrl"),
            text("webhookTriggerInfoFormat")
        ),
        _ => value.to_string(),
    };
    (kind, what)
}

/// A trigger for scripts: `{"id", "kind"}` and what it reaches.
fn trigger_json(trigger: &Value) -> Value {
    let value = &trigger["info"]["typedTriggerInfoValue"];
    let kind = trigger["info"]["typedTriggerInfoType"].clone();
    let mut out = json!({"id": trigger["uuid"], "kind": kind});
    match kind.as_str() {
        Some("email") => {
            out["address"] = value["emailTriggerInfoEmailAddress"].clone();
            out["verified"] = value["emailTriggerInfoVerified"].clone();
        }
        Some("inbox") => out["url"] = value["inboxTriggerInfoUrl"].clone(),
        Some("push") => {
            out["host"] = value["pushTriggerInfoHost"].clone();
            out["expired"] = value["pushTriggerInfoExpired"].clone();
        }
        Some("webhook") => {
            out["url"] = value["webhookTriggerInfoUrl"].clone();
            out["format"] = value["webhookTriggerInfoFormat"].clone();
        }
        _ => out["info"] = value.clone(),
    }
    out
}

async fn list(opts: &crate::config::ClientOpts) -> Result<(), ClientError> {
    let client = Client::open(opts)?;
    let all = triggers(&client).await?;
    let json = Value::Array(all.iter().map(trigger_json).collect());
    client.print(&json, || {
        if all.is_empty() {
            return "No triggers: reminders only show on the Triggered page. `pigeonhole setup` links the inbox, \
                    `pigeonhole trigger add email|ntfy|webhook` adds others."
                .into();
        }
        all.iter()
            .map(|t| {
                let (kind, what) = describe(t);
                format!("{}  {kind:<8} {what}", short(&t["uuid"]))
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls() {
        assert_eq!(
            webhook_url("ntfy.sh/my-topic", true).unwrap(),
            "https://ntfy.sh/my-topic"
        );
        assert_eq!(
            webhook_url("http://127.0.0.1:8080/topic", true).unwrap(),
            "http://127.0.0.1:8080/topic"
        );
        assert!(webhook_url("https://ntfy.sh/", true)
            .unwrap_err()
            .to_string()
            .contains("names no topic"));
        assert_eq!(
            webhook_url("https://gotify.example/message?token=abc", false).unwrap(),
            "https://gotify.example/message?token=abc"
        );
        assert!(webhook_url("ftp://x/y", false)
            .unwrap_err()
            .to_string()
            .contains("not an http"));
        assert!(webhook_url("https://", false).is_err());
        assert_eq!(without_query("https://g.example/m?token=abc"), "https://g.example/m?…");
    }

    #[test]
    fn every_kind_of_trigger_in_words_and_for_scripts() {
        let t = |kind: &str, value: Value| {
            json!({"uuid": "0a1b2c3d-0000-4000-8000-000000000000",
                   "info": {"typedTriggerInfoType": kind, "typedTriggerInfoValue": value}})
        };
        let email = t(
            "email",
            json!({"emailTriggerInfoEmailAddress": "me@example.org", "emailTriggerInfoVerified": false}),
        );
        let (kind, what) = describe(&email);
        assert_eq!(kind, "email");
        assert!(what.starts_with("me@example.org (not verified yet: `pigeonhole trigger verify 0a1b2c3d KEY`"));
        let push = t(
            "push",
            json!({"pushTriggerInfoHost": "fcm.googleapis.com", "pushTriggerInfoExpired": true}),
        );
        assert_eq!(
            describe(&push).1,
            "fcm.googleapis.com (expired: subscribe again on that device)"
        );
        assert_eq!(trigger_json(&push)["host"], "fcm.googleapis.com");
        assert_eq!(trigger_json(&push)["expired"], true);
        let hook = t(
            "webhook",
            json!({"webhookTriggerInfoUrl": "https://ntfy.sh/x", "webhookTriggerInfoFormat": "text"}),
        );
        assert_eq!(describe(&hook).1, "https://ntfy.sh/x (text)");
        assert_eq!(
            trigger_json(&hook),
            json!({"id": "0a1b2c3d-0000-4000-8000-000000000000", "kind": "webhook", "url": "https://ntfy.sh/x", "format": "text"})
        );
        let inbox = t("inbox", json!({"inboxTriggerInfoUrl": "http://127.0.0.1:8001"}));
        assert_eq!(describe(&inbox), ("inbox".into(), "http://127.0.0.1:8001".into()));
    }
}
