//! The command-line client in the same binary (`pigeonhole setup`, `add`, `inbox`, `next`,
//! `done`, `show`, `remind`, `scheduled`, `triggered`, `zone`, and the reminder loop and
//! account commands of `reminders.rs`, `triggers.rs` and `account.rs`). It talks HTTP to a server,
//! local or remote, like any other client, with this machine's access keys from
//! [`settings`]. Output is text for people (times in the account's zone), or JSON with
//! `--json` (docs/cli.md); a failure is one line on stderr and exit status 1; a closed pipe
//! ends the command quietly with status 0.

mod account;
pub mod api;
pub mod defer;
pub mod error;
mod format;
mod queue;
mod reminders;
pub mod settings;
mod setup;
mod transfer;
mod triggers;
pub mod when;

use crate::config::{AddArgs, ClientOpts, Command, DoneArgs, RemindArgs, RepeatArgs, ShowArgs, WhenArgs, ZoneArgs};
use crate::domain::scheduler::models::{Day, Recurrence, Tickle, TimeOfDay, TimeZoneSetting};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::{self, Timestamp};
use api::{Credentials, Service};
pub use error::ClientError;
use reqwest::Method;
use serde_json::{json, Value};
use settings::ClientSettings;
use std::io::{Read, Write};

/// The server's request body cap unless it was configured otherwise (`--max-body-bytes`).
const DEFAULT_BODY_CAP: u64 = 16 << 20;

/// Prints `text` and a newline on standard output. A reader that went away (`| head -1`)
/// ends the command quietly with status 0; any other failure to write ends it with status 1.
pub(crate) fn say(text: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{text}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        let _ = writeln!(std::io::stderr(), "pigeonhole: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// Runs a client command; `Err` is the one line to print.
pub async fn run(command: Command) -> Result<(), ClientError> {
    queue::deliver_before(&command).await;
    match command {
        Command::Serve(_)
        | Command::ImportIntray(_)
        | Command::ImportTickler(_)
        | Command::Backup(_)
        | Command::Restore(_)
        | Command::MigrateStore(_)
        | Command::Completions(_)
        | Command::Man => Err(ClientError::input("not a client command")),
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
        Command::Show(args) => show(args).await,
        Command::Zone(args) => zone(args).await,
        Command::Sync(opts) => queue::sync(opts).await,
        Command::Defer(args) => defer::run(args).await,
        Command::Cancel(args) => reminders::cancel(args).await,
        Command::Edit(args) => reminders::edit(args).await,
        Command::Snooze(args) => reminders::snooze(args).await,
        Command::Clear(args) => reminders::clear(args).await,
        Command::Trigger(args) => triggers::run(args.command).await,
        Command::Key(args) => account::key(args).await,
        Command::Password(args) => account::password(args).await,
        Command::DeleteAccount(args) => account::delete(args).await,
    }
}

/// The two services with this machine's keys.
struct Client {
    inbox: Service,
    scheduler: Service,
    json: bool,
    /// The client settings and where they are.
    path: std::path::PathBuf,
    settings: ClientSettings,
}

impl Client {
    fn open(opts: &ClientOpts) -> Result<Client, ClientError> {
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
            path,
            settings: s,
        })
    }

    /// Says once (per pair of zones, remembered in the client settings) on standard error
    /// that this machine's time zone is not the account's `account`.
    fn notice_zone(&self, account: &str) {
        let Some(machine) = machine_zone() else {
            return;
        };
        let Some(pair) = zone_notice(&machine, account) else {
            return;
        };
        if self.settings.zone_notice.as_deref() == Some(pair.as_str()) {
            return;
        }
        eprintln!(
            "pigeonhole: this machine's time zone is {machine}, the account's is {account}: times are shown and read \
             in the account's (`pigeonhole zone {machine}` changes it; said once)"
        );
        // read again: another command may have written the settings meanwhile
        if let Ok(Some(mut fresh)) = ClientSettings::load(&self.path) {
            fresh.zone_notice = Some(pair);
            let _ = fresh.save(&self.path);
        }
    }

    /// Prints `value` as JSON with `--json`, else `text`.
    fn print(&self, value: &Value, text: impl FnOnce() -> String) {
        if self.json {
            say(&value.to_string());
        } else {
            let text = text();
            if !text.is_empty() {
                say(&text);
            }
        }
    }

    async fn zone(&self) -> Result<Zone, ClientError> {
        let settings = self.scheduler.get_json("/account/settings").await?;
        let setting = TimeZoneSetting::parse(&settings)
            .map_err(|e| ClientError::answer(format!("the account's settings: {e}")))?;
        self.notice_zone(&setting.name);
        Ok(Zone::of(&setting))
    }
}

/// "machine / account" when the zones differ (`UTC` and `Etc/UTC` are the same), else `None`.
pub(crate) fn zone_notice(machine: &str, account: &str) -> Option<String> {
    let plain = |name: &str| {
        let name = name.strip_prefix("Etc/").unwrap_or(name);
        match name {
            "UCT" | "Universal" | "Zulu" | "GMT" | "Greenwich" => "UTC".to_owned(),
            other => other.to_owned(),
        }
    };
    (plain(machine) != plain(account)).then(|| format!("{machine} / {account}"))
}

pub(crate) fn http_client() -> Result<reqwest::Client, ClientError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        // each request has its time limit; reqwest's default TCP user timeout (30 s of
        // unacknowledged data) would end an upload that waits for its turn at the server
        // (an import behind another) however long its own limit
        .tcp_user_timeout(None)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ClientError::local(format!("cannot make an HTTP client: {e}")))
}

/// A service's base URL as given on the command line: `127.0.0.1:8001` is taken as
/// `http://127.0.0.1:8001` (a server on this machine or the LAN speaks plain HTTP unless a
/// proxy is put in front); only `http` and `https` URLs with a host are taken.
pub(crate) fn service_url(given: &str) -> Result<String, ClientError> {
    let given = given.trim();
    let full = if given.contains("://") {
        given.to_owned()
    } else {
        format!("http://{given}")
    };
    let url = reqwest::Url::parse(&full).map_err(|e| {
        ClientError::input(format!(
            "{given:?} is not a URL ({e}): give one such as http://127.0.0.1:8001"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(ClientError::input(format!(
            "{given:?} is not an http:// or https:// URL of a server"
        )));
    }
    Ok(full.trim_end_matches('/').to_owned())
}

/// The setting for the time zone `name` (an IANA name such as Europe/Zurich, or UTC), with
/// its offset and summer time as they are now.
pub(crate) fn zone_setting(name: &str) -> Result<TimeZoneSetting, ClientError> {
    let tz = jiff::tz::TimeZone::get(name).map_err(|_| {
        ClientError::input(format!(
            "{name:?} is not a time zone I know: give an IANA name such as Europe/Zurich, America/New_York or UTC"
        ))
    })?;
    let info = tz.to_offset_info(jiff::Timestamp::now());
    Ok(TimeZoneSetting {
        offset: info.offset().seconds() / 60,
        name: tz.iana_name().unwrap_or(name).to_owned(),
        summer: info.dst().is_dst(),
    })
}

/// This machine's time zone: `TZ` when it names a zone, else the zone `/etc/localtime`
/// links to, else `/etc/timezone`.
pub(crate) fn machine_zone() -> Option<String> {
    let known = |name: &str| {
        let name = name.trim().trim_start_matches(':');
        jiff::tz::TimeZone::get(name).ok().map(|_| name.to_owned())
    };
    if let Some(tz) = std::env::var("TZ").ok().filter(|t| !t.is_empty()) {
        if let Some(name) = known(&tz) {
            return Some(name);
        }
    }
    if let Ok(target) = std::fs::read_link("/etc/localtime") {
        let target = target.to_string_lossy().into_owned();
        if let Some((_, name)) = target.split_once("zoneinfo/") {
            if let Some(name) = known(name) {
                return Some(name);
            }
        }
    }
    std::fs::read_to_string("/etc/timezone").ok().and_then(|t| known(&t))
}

/// Asks `question` once at a terminal; `y` or `yes` goes on. `--yes` (`yes`) skips the
/// question, and without a terminal it is needed (`what` says what it allows).
fn confirm(question: &str, yes: bool, what: &str) -> Result<(), ClientError> {
    use std::io::{BufRead, IsTerminal};
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(ClientError::input(format!(
            "not asked at a terminal: give --yes to {what} without a question"
        )));
    }
    eprint!("{question}");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| ClientError::local(format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(ClientError::input("nothing was done: the answer was not yes")),
    }
}

/// The note of `add`: its words, else standard input; empty either way is refused.
fn note_text(words: &[String]) -> Result<String, ClientError> {
    let empty = || ClientError::input("nothing to add: give the note as words or on standard input");
    if !words.is_empty() {
        let text = words.join(" ");
        if text.trim().is_empty() {
            return Err(empty());
        }
        return Ok(text);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| ClientError::local(format!("cannot read the note from standard input: {e}")))?;
    let text = text.trim_end_matches(['\n', '\r']).to_owned();
    if text.trim().is_empty() {
        return Err(empty());
    }
    Ok(text)
}

/// An inbox item's contents: its text when it is a UTF-8 text item, else its type and bytes.
fn item_contents(item: &Value) -> (String, Result<String, Vec<u8>>) {
    let kind = item["contents"]["type"].as_str().unwrap_or("?").to_owned();
    let data = item["contents"]["data"]
        .as_str()
        .and_then(wire::decode_base64)
        .unwrap_or_default();
    if kind != "text" {
        return (kind, Err(data));
    }
    let text = String::from_utf8(data).map_err(|e| e.into_bytes());
    (kind, text)
}

/// An inbox item's text for people: the whole note, or one line of it; what it is when it is
/// not text.
fn item_text(item: &Value, whole: bool) -> String {
    match item_contents(item) {
        (_, Ok(text)) if whole => text,
        (_, Ok(text)) => format::one_line(&text, format::LINE),
        (kind, Err(data)) => format!("[{kind}, {}]", format::size(data.len() as u64)),
    }
}

/// An inbox item for scripts: `{"id", "created", "type": "text", "text"}`, or `"data"`
/// (base64) in place of `"text"` for other types.
fn item_json(item: &Value) -> Value {
    let mut out = json!({"id": item["id"], "created": item["created"]});
    match item_contents(item) {
        (kind, Ok(text)) => {
            out["type"] = json!(kind);
            out["text"] = json!(text);
        }
        (kind, Err(_)) => {
            out["type"] = json!(kind);
            out["data"] = item["contents"]["data"].clone();
        }
    }
    out
}

fn short(id: &Value) -> String {
    id.as_str().unwrap_or("?").chars().take(8).collect()
}

/// The note is larger than the server takes.
fn too_big(note: usize, cap: u64) -> ClientError {
    ClientError::input(format!(
        "the note is {}; the server takes at most {} (about {} of note once encoded): keep big things in a file and add where it is",
        format::size(note as u64),
        format::limit(cap),
        format::size(cap / 4 * 3)
    ))
}

async fn add(args: AddArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let text = note_text(&args.text)?;
    // A note over the server's body cap is refused here, never kept to be sent again and
    // again: a server refuses an over-long body before reading it and may close the
    // connection while the note is still being sent, which would look like a server that
    // cannot be reached. The sync request carries the note in base64.
    let request = 4 * text.len().div_ceil(3) + 256;
    if request as u64 > DEFAULT_BODY_CAP {
        return Err(too_big(text.len(), DEFAULT_BODY_CAP));
    }
    queue::add(&args.opts, &client, &text).await
}

/// The inbox, oldest first (the order it is processed in).
async fn items(client: &Client) -> Result<Vec<Value>, ClientError> {
    let items = client.inbox.get_json("/inbox/items").await?;
    let mut items = items
        .as_array()
        .cloned()
        .ok_or_else(|| ClientError::answer("the inbox answered something that is not a list"))?;
    items.sort_by_key(|i| {
        i["created"]
            .as_str()
            .and_then(Timestamp::parse)
            .map(|t| t.as_unix_nanos())
    });
    Ok(items)
}

async fn inbox(opts: ClientOpts) -> Result<(), ClientError> {
    let client = Client::open(&opts)?;
    let items = items(&client).await?;
    let json = Value::Array(items.iter().map(item_json).collect());
    if client.json {
        client.print(&json, String::new);
        return Ok(());
    }
    let zone = client.zone().await?;
    let now = Timestamp::now();
    client.print(&json, || {
        if items.is_empty() {
            return "The inbox is empty.".into();
        }
        items
            .iter()
            .map(|i| {
                let created = i["created"]
                    .as_str()
                    .and_then(Timestamp::parse)
                    .map(|t| format::moment(t, &zone, now))
                    .unwrap_or_default();
                format!("{}  {created}  {}", short(&i["id"]), item_text(i, false))
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(())
}

async fn next(opts: ClientOpts) -> Result<(), ClientError> {
    let client = Client::open(&opts)?;
    let first = client.inbox.get_json("/inbox/show-item").await?;
    let size = client.inbox.get_json("/inbox/size").await?;
    let json = match &first {
        Value::Null => Value::Null,
        item => item_json(item),
    };
    client.print(&json, || match &first {
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

/// The one item whose id starts with `prefix`; `Ok(None)` when none does.
fn by_prefix<'a>(items: &'a [Value], prefix: &str, what: &str) -> Result<Option<&'a Value>, ClientError> {
    let prefix = prefix.to_ascii_lowercase();
    let matching: Vec<&Value> = items
        .iter()
        .filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with(&prefix)))
        .collect();
    match matching.as_slice() {
        [one] => Ok(Some(*one)),
        [] => Ok(None),
        _ => Err(ClientError::input(format!(
            "several {what} ids start with {prefix:?}: give more of it"
        ))),
    }
}

async fn done(args: DoneArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let items = items(&client).await?;
    let item = match &args.id {
        None => items.first().ok_or(ClientError::input("the inbox is empty"))?,
        Some(prefix) => by_prefix(&items, prefix, "inbox items'")?.ok_or_else(|| {
            ClientError::input(format!(
                "no inbox item's id starts with {:?}: `pigeonhole inbox` lists them",
                prefix.to_ascii_lowercase()
            ))
        })?,
    };
    let id = item["id"].as_str().unwrap_or_default();
    client
        .inbox
        .ok(Method::DELETE, &format!("/inbox/item/{id}"), None)
        .await?;
    client.print(&json!({ "id": id }), || format!("Done: {}", item_text(item, false)));
    Ok(())
}

async fn show(args: ShowArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let items = items(&client).await?;
    if let Some(item) = by_prefix(&items, &args.id, "inbox items'")? {
        let mut json = item_json(item);
        json["kind"] = json!("inbox");
        if client.json {
            client.print(&json, String::new);
            return Ok(());
        }
        let zone = client.zone().await?;
        let created = item["created"]
            .as_str()
            .and_then(Timestamp::parse)
            .map(|t| format::moment(t, &zone, Timestamp::now()))
            .unwrap_or_default();
        client.print(&json, || {
            format!(
                "{}\n\n(inbox item {}, added {created})",
                item_text(item, true),
                item["id"].as_str().unwrap_or("?")
            )
        });
        return Ok(());
    }
    let all = scheduler_items(&client).await?;
    let item = by_prefix(&all, &args.id, "items'")?.ok_or_else(|| {
        ClientError::input(format!(
            "no inbox item or reminder has an id that starts with {:?}: `pigeonhole inbox` and `pigeonhole scheduled` list them",
            args.id.to_ascii_lowercase()
        ))
    })?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let reminder = Reminder::of(item, &zone);
    let json = reminder.json(item);
    client.print(&json, || {
        let mut text = format!(
            "{}\n\n(reminder {}, ",
            reminder.text,
            item["id"].as_str().unwrap_or("?")
        );
        match reminder.triggered {
            Some(t) => text.push_str(&format!("triggered {}", format::moment(t, &zone, now))),
            None => text.push_str(&format!("due {}", reminder.when(&zone, now))),
        }
        if let Some(r) = &reminder.recurrence {
            text.push_str(&format!(", {}", format::recurrence(r)));
        }
        text.push(')');
        text
    });
    Ok(())
}

/// The day and perhaps time `--in` / `--at` name (`None` when neither is given), read in
/// `zone` at `now`; an `--at` that has passed is refused unless `--allow-past`.
fn due_of(when: &WhenArgs, zone: &Zone, now: Timestamp) -> Result<Option<(Day, Option<TimeOfDay>)>, ClientError> {
    match (&when.after, &when.at) {
        (Some(after), _) => {
            let after = when::parse_duration(after).map_err(ClientError::Input)?;
            let (day, time) = when::in_from_now(after, zone, now).map_err(ClientError::Input)?;
            Ok(Some((day, Some(time))))
        }
        (None, Some(at)) => {
            let (day, time) = when::parse_at(at, zone, now).map_err(ClientError::Input)?;
            if !when.allow_past && when::has_passed(day, time, zone, now) {
                let today = schedule::local(now, zone).map(|(d, _)| d).unwrap_or(day);
                return Err(ClientError::input(format!(
                    "--at {at:?} is {} ({day}), which has passed: give a later time, or --allow-past to have it delivered at once",
                    format::wall(day, time, today)
                )));
            }
            Ok(Some((day, time)))
        }
        (None, None) => Ok(None),
    }
}

/// What to say when neither `--in` nor `--at` was given.
const SAY_WHEN: &str =
    "say when: --in DURATION (30m, 2h, 3d) or --at WHEN (\"tomorrow at 9\", \"tonight\", \"1st of december\")";

fn repeat_of(args: &RepeatArgs) -> when::Repeat<'_> {
    when::Repeat {
        every: args.every.as_deref(),
        every_month: args.every_month,
        every_year: args.every_year,
        day: args.day,
    }
}

/// "tomorrow 09:00", with ", then every 3 days" when it repeats.
fn due_words(
    day: Day,
    time: Option<TimeOfDay>,
    recurrence: Option<&Recurrence>,
    zone: &Zone,
    now: Timestamp,
) -> String {
    let today = schedule::local(now, zone).map(|(d, _)| d).unwrap_or(day);
    let mut when = format::wall(day, time, today);
    if let Some(r) = recurrence {
        when.push_str(&format!(", then {}", format::recurrence(r)));
    }
    when
}

/// A scheduled reminder for scripts: `{"id", "scheduled-day", "scheduled-time", "due", "recurrence", "repeats"}`.
fn scheduled_json(id: &Value, tickle: &Tickle, zone: &Zone) -> Value {
    json!({"id": id, "scheduled-day": tickle.day.to_string(), "scheduled-time": tickle.time.map(|t| t.to_string()),
           "due": schedule_instant(tickle.day, tickle.time, zone).to_string(),
           "recurrence": tickle.recurrence.map(|r| r.to_json()),
           "repeats": tickle.recurrence.as_ref().map(format::recurrence)})
}

async fn remind(args: RemindArgs) -> Result<(), ClientError> {
    if args.when.after.is_none() && args.when.at.is_none() {
        return Err(ClientError::input(SAY_WHEN));
    }
    let text = args.text.join(" ");
    if text.trim().is_empty() {
        return Err(ClientError::input(
            "nothing to be reminded of: give the reminder's words",
        ));
    }
    let client = Client::open(&args.opts)?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let (day, time) = due_of(&args.when, &zone, now)?.ok_or(ClientError::input(SAY_WHEN))?;
    let recurrence = when::recurrence(repeat_of(&args.repeat), day, time).map_err(ClientError::Input)?;
    let tickle = Tickle {
        content: text.into_bytes(),
        day,
        time,
        recurrence,
    };
    let id = client.scheduler.post_json("/scheduler/item", &tickle.to_json()).await?;
    let when = due_words(day, time, recurrence.as_ref(), &zone, now);
    client.print(&scheduled_json(&id, &tickle, &zone), || {
        format!("Scheduled {} for {when}.", short(&id))
    });
    Ok(())
}

/// When a day (at its start when it has no time) and time are due in `zone`.
fn schedule_instant(day: Day, time: Option<TimeOfDay>, zone: &Zone) -> Timestamp {
    let (seconds, nanos) = time.map(|t| (t.seconds(), t.nanos)).unwrap_or((0, 0));
    schedule::instant(day, seconds, nanos, zone)
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

/// A scheduler item as the client reads it.
struct Reminder {
    text: String,
    day: Option<Day>,
    time: Option<TimeOfDay>,
    recurrence: Option<Recurrence>,
    /// When it is due (scheduled) or was due (triggered), in the account's zone.
    due: Option<Timestamp>,
    triggered: Option<Timestamp>,
}

impl Reminder {
    fn of(item: &Value, zone: &Zone) -> Reminder {
        let c = &item["contents"];
        let text = match &c["content"] {
            Value::String(s) => s.clone(),
            other => format!(
                "[{} bytes that are not UTF-8]",
                other["data"]
                    .as_str()
                    .and_then(wire::decode_base64)
                    .unwrap_or_default()
                    .len()
            ),
        };
        let day = c["scheduled-day"].as_str().and_then(Day::parse);
        let time = c["scheduled-time"].as_str().and_then(TimeOfDay::parse);
        let recurrence = Recurrence::parse(&c["recurrence"]).ok();
        let triggered = item["triggered"]["triggeredInfoTriggered"]
            .as_str()
            .and_then(Timestamp::parse);
        Reminder {
            text,
            day,
            time,
            recurrence,
            due: day.map(|d| schedule_instant(d, time, zone)),
            triggered,
        }
    }

    /// "Tue 1 Dec 09:00", or the day alone.
    fn when(&self, zone: &Zone, now: Timestamp) -> String {
        let today = schedule::local(now, zone).map(|(d, _)| d);
        match (self.day, today) {
            (Some(day), Some(today)) => format::wall(day, self.time, today),
            _ => "?".into(),
        }
    }

    /// For scripts: `{"id", "created", "text" (or "data": base64 when it is not UTF-8),
    /// "scheduled-day", "scheduled-time", "due", "recurrence", "repeats"}` and for a
    /// triggered one `"triggered"` and `"deliveries"`.
    fn json(&self, item: &Value) -> Value {
        let c = &item["contents"];
        let mut out = json!({
            "id": item["id"],
            "created": item["created"],
            "scheduled-day": c["scheduled-day"],
            "scheduled-time": c["scheduled-time"],
            "due": self.due.map(|t| t.to_string()),
            "recurrence": c["recurrence"],
            "repeats": self.recurrence.as_ref().map(format::recurrence),
        });
        match &c["content"] {
            Value::String(s) => out["text"] = json!(s),
            other => out["data"] = other["data"].clone(),
        }
        if let Some(t) = self.triggered {
            out["triggered"] = json!(t.to_string());
            out["deliveries"] = json!(item["triggered"]["triggeredInfoTriggerTriggerAttempts"]
                .as_array()
                .into_iter()
                .flatten()
                .map(attempt_text)
                .collect::<Vec<_>>());
        }
        out
    }
}

async fn scheduler_items(client: &Client) -> Result<Vec<Value>, ClientError> {
    let all = client.scheduler.get_json("/scheduler/items").await?;
    all.as_array()
        .cloned()
        .ok_or_else(|| ClientError::answer("the scheduler answered something that is not a list"))
}

/// `scheduled`: next due first. `triggered`: the latest first.
async fn scheduled(opts: ClientOpts, triggered: bool) -> Result<(), ClientError> {
    let client = Client::open(&opts)?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let all = scheduler_items(&client).await?;
    let mut chosen: Vec<(Reminder, &Value)> = all
        .iter()
        .filter(|i| i["triggered"].is_null() != triggered)
        .map(|i| (Reminder::of(i, &zone), i))
        .collect();
    if triggered {
        chosen.sort_by_key(|(r, _)| std::cmp::Reverse(r.triggered.map(|t| t.as_unix_nanos())));
    } else {
        chosen.sort_by_key(|(r, _)| r.due.map(|t| t.as_unix_nanos()));
    }
    let json = Value::Array(chosen.iter().map(|(r, i)| r.json(i)).collect());
    client.print(&json, || {
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
            .map(|(r, i)| {
                let when = match (triggered, r.triggered) {
                    (true, Some(t)) => format::moment(t, &zone, now),
                    _ => r.when(&zone, now),
                };
                let mut line = format!(
                    "{}  {when}  {}",
                    short(&i["id"]),
                    format::one_line(&r.text, format::LINE)
                );
                if let Some(rec) = &r.recurrence {
                    line.push_str(&format!("  ({})", format::recurrence(rec)));
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

async fn zone(args: ZoneArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    if let Some(name) = &args.name {
        let setting = zone_setting(name)?;
        client
            .scheduler
            .ok(Method::PUT, "/account/settings", Some(&setting.to_json()))
            .await?;
    }
    let settings = client.scheduler.get_json("/account/settings").await?;
    let setting =
        TimeZoneSetting::parse(&settings).map_err(|e| ClientError::answer(format!("the account's settings: {e}")))?;
    let zone = Zone::of(&setting);
    let now = Timestamp::now();
    let (_, time) = schedule::local(now, &zone).ok_or(ClientError::local("the clock is outside the calendar"))?;
    let offset = setting.offset.unsigned_abs();
    let sign = if setting.offset < 0 { '-' } else { '+' };
    client.print(&setting.to_json()["timezone"], || {
        let verb = if args.name.is_some() { "is now" } else { "is" };
        format!(
            "The account's time zone {verb} {} (UTC{sign}{:02}:{:02}; it is {} there now).",
            setting.name,
            offset / 60,
            offset % 60,
            format::time(TimeOfDay { second: 0, ..time })
        )
    });
    Ok(())
}
