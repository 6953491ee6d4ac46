//! The command-line client in the same binary (`pigeonhole setup`, `add`, `inbox`, `next`,
//! `done`, `remind`, `scheduled`, `triggered`). It talks HTTP to a server, local or remote,
//! like any other client, with this machine's access keys from [`settings`]. Output is text
//! for people, or JSON with `--json`; a failure is one line on stderr and exit status 1.

pub mod api;
pub mod defer;
mod queue;
pub mod settings;
mod setup;
mod transfer;
pub mod when;

use crate::config::{AddArgs, ClientOpts, Command, DoneArgs, RemindArgs};
use crate::domain::scheduler::models::{Tickle, TimeZoneSetting};
use crate::domain::scheduler::schedule::Zone;
use crate::domain::wire::{self, Timestamp};
use api::{Credentials, Service};
use reqwest::Method;
use serde_json::{json, Value};
use settings::ClientSettings;
use std::io::Read;

/// Runs a client command; `Err` is the one line to print.
pub async fn run(command: Command) -> Result<(), String> {
    queue::deliver_before(&command).await;
    match command {
        Command::Serve(_)
        | Command::ImportIntray(_)
        | Command::ImportTickler(_)
        | Command::Backup(_)
        | Command::Restore(_) => Err("not a client command".into()),
        Command::Export(args) => transfer::export(args).await,
        Command::Import(args) => transfer::import(args).await,
        Command::Setup(args) => setup::run(args).await,
        Command::Add(args) => add(args).await,
        Command::Inbox(opts) => inbox(opts).await,
        Command::Next(opts) => next(opts).await,
        Command::Done(args) => done(args).await,
        Command::Remind(args) => remind(args).await,
        Command::Scheduled(opts) => scheduled(opts, false).await,
        Command::Triggered(opts) => scheduled(opts, true).await,
        Command::Sync(opts) => queue::sync(opts).await,
        Command::Defer(args) => defer::run(args).await,
    }
}

/// The two services with this machine's keys.
struct Client {
    inbox: Service,
    scheduler: Service,
    json: bool,
}

impl Client {
    fn open(opts: &ClientOpts) -> Result<Client, String> {
        let path = settings::path(opts.client_config.as_deref())?;
        let s = ClientSettings::require(&path)?;
        let http = http_client()?;
        let key = |secret: &str| Credentials::Key {
            username: s.username.clone(),
            secret: secret.to_owned(),
        };
        Ok(Client {
            inbox: Service::new("inbox", &s.inbox_url, http.clone()).with(key(&s.inbox_key)),
            scheduler: Service::new("scheduler", &s.scheduler_url, http).with(key(&s.scheduler_key)),
            json: opts.json,
        })
    }

    /// Prints `value` as JSON with `--json`, else `text`.
    fn print(&self, value: &Value, text: impl FnOnce() -> String) {
        if self.json {
            println!("{value}");
        } else {
            let text = text();
            if !text.is_empty() {
                println!("{text}");
            }
        }
    }

    async fn zone(&self) -> Result<Zone, String> {
        let settings = self.scheduler.get_json("/account/settings").await?;
        let setting = TimeZoneSetting::parse(&settings).map_err(|e| format!("the account's settings: {e}"))?;
        Ok(Zone::of(&setting))
    }
}

pub(crate) fn http_client() -> Result<reqwest::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))
}

/// The note of `add`: its words, else standard input.
fn note_text(words: &[String]) -> Result<String, String> {
    if !words.is_empty() {
        return Ok(words.join(" "));
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read the note from standard input: {e}"))?;
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.is_empty() {
        return Err("nothing to add: give the note as words or on standard input".into());
    }
    Ok(text)
}

/// An inbox item's text for people: its first line, or what it is when it is not text.
fn item_text(item: &Value, whole: bool) -> String {
    let kind = item["contents"]["type"].as_str().unwrap_or("?");
    let data = item["contents"]["data"]
        .as_str()
        .and_then(wire::decode_base64)
        .unwrap_or_default();
    match (kind, String::from_utf8(data.clone())) {
        ("text", Ok(text)) if whole => text,
        ("text", Ok(text)) => text.lines().next().unwrap_or("").to_owned(),
        _ => format!("[{kind}, {} bytes]", data.len()),
    }
}

fn short(id: &Value) -> String {
    id.as_str().unwrap_or("?").chars().take(8).collect()
}

async fn add(args: AddArgs) -> Result<(), String> {
    let client = Client::open(&args.opts)?;
    let text = note_text(&args.text)?;
    queue::add(&args.opts, &client, &text).await
}

async fn items(client: &Client) -> Result<Vec<Value>, String> {
    let items = client.inbox.get_json("/inbox/items").await?;
    items
        .as_array()
        .cloned()
        .ok_or_else(|| "the inbox answered something that is not a list".into())
}

async fn inbox(opts: ClientOpts) -> Result<(), String> {
    let client = Client::open(&opts)?;
    let items = items(&client).await?;
    client.print(&Value::Array(items.clone()), || {
        if items.is_empty() {
            return "The inbox is empty.".into();
        }
        items
            .iter()
            .map(|i| {
                format!(
                    "{}  {}  {}",
                    short(&i["id"]),
                    i["created"].as_str().unwrap_or(""),
                    item_text(i, false)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

async fn next(opts: ClientOpts) -> Result<(), String> {
    let client = Client::open(&opts)?;
    let first = client.inbox.get_json("/inbox/show-item").await?;
    let size = client.inbox.get_json("/inbox/size").await?;
    client.print(&first, || match &first {
        Value::Null => "The inbox is empty.".into(),
        item => format!(
            "{}\n\n({} of {} · `pigeonhole done` when dealt with)",
            item_text(item, true),
            short(&item["id"]),
            size
        ),
    });
    Ok(())
}

async fn done(args: DoneArgs) -> Result<(), String> {
    let client = Client::open(&args.opts)?;
    let items = items(&client).await?;
    let item = match &args.id {
        None => items.first().ok_or("the inbox is empty")?,
        Some(prefix) => {
            let prefix = prefix.to_ascii_lowercase();
            let matching: Vec<&Value> = items
                .iter()
                .filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with(&prefix)))
                .collect();
            match matching.as_slice() {
                [one] => *one,
                [] => return Err(format!("no inbox item's id starts with {prefix:?}")),
                _ => {
                    return Err(format!(
                        "several inbox items' ids start with {prefix:?}: give more of it"
                    ))
                }
            }
        }
    };
    let id = item["id"].as_str().unwrap_or_default();
    client
        .inbox
        .ok(Method::DELETE, &format!("/inbox/item/{id}"), None)
        .await?;
    client.print(&json!({ "id": id }), || format!("Done: {}", item_text(item, false)));
    Ok(())
}

async fn remind(args: RemindArgs) -> Result<(), String> {
    let client = Client::open(&args.opts)?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let (day, time) = match (&args.after, &args.at) {
        (Some(after), _) => {
            let (day, time) = when::in_from_now(when::parse_duration(after)?, &zone, now)?;
            (day, Some(time))
        }
        (None, Some(at)) => when::parse_at(at, &zone, now)?,
        (None, None) => return Err("say when: --in DURATION or --at WHEN".into()),
    };
    let recurrence = when::recurrence(args.every.as_deref(), args.every_month, args.day, time)?;
    let tickle = Tickle {
        content: args.text.join(" ").into_bytes(),
        day,
        time,
        recurrence,
    };
    let id = client.scheduler.post_json("/scheduler/item", &tickle.to_json()).await?;
    let when = match time {
        Some(t) => format!("{day} {t}"),
        None => day.to_string(),
    };
    client.print(
        &json!({"id": id, "scheduled-day": day.to_string(), "scheduled-time": time.map(|t| t.to_string())}),
        || format!("Scheduled {} for {when} (the account's time zone).", short(&id)),
    );
    Ok(())
}

/// The outcome of one delivery attempt, for people.
fn attempt_text(attempt: &Value) -> String {
    let result = &attempt["contents"][1];
    match result["tag"].as_str() {
        Some("InboxAdditionSuccess") => "in the inbox".into(),
        Some("InboxAdditionFailure") => format!("inbox failed: {}", result["contents"].as_str().unwrap_or("?")),
        Some("EmailResultSent") => "e-mailed".into(),
        Some("EmailResultError") => format!("e-mail failed: {}", result["contents"].as_str().unwrap_or("?")),
        _ => "?".into(),
    }
}

async fn scheduled(opts: ClientOpts, triggered: bool) -> Result<(), String> {
    let client = Client::open(&opts)?;
    let all = client.scheduler.get_json("/scheduler/items").await?;
    let chosen: Vec<Value> = all
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["triggered"].is_null() != triggered)
        .cloned()
        .collect();
    client.print(&Value::Array(chosen.clone()), || {
        if chosen.is_empty() {
            return if triggered {
                "Nothing has triggered yet."
            } else {
                "Nothing is scheduled."
            }
            .into();
        }
        chosen
            .iter()
            .map(|i| {
                let c = &i["contents"];
                let content = match &c["content"] {
                    Value::String(s) => s.lines().next().unwrap_or("").to_owned(),
                    _ => "[binary]".into(),
                };
                let at = format!(
                    "{} {}",
                    c["scheduled-day"].as_str().unwrap_or(""),
                    c["scheduled-time"].as_str().unwrap_or("")
                );
                let mut line = format!("{}  {}  {content}", short(&i["id"]), at.trim_end());
                if !c["recurrence"].is_null() {
                    line.push_str("  (repeats)");
                }
                if triggered {
                    let attempts = i["triggered"]["triggeredInfoTriggerTriggerAttempts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let outcome = if attempts.is_empty() {
                        "no delivery (yet)".to_string()
                    } else {
                        attempts.iter().map(attempt_text).collect::<Vec<_>>().join(", ")
                    };
                    line.push_str(&format!("  → {outcome}"));
                }
                line
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}
