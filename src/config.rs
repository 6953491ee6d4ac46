//! The settings, parsed once: command-line flag, then `PIGEONHOLE_*` environment variable,
//! then the TOML file of `--config` (keys are the flag names), then the default (cli.md).

use crate::domain::worker::Worker;
mod database;
use clap::{Args as _, FromArgMatches as _, Parser, Subcommand, ValueEnum};
pub use database::{DatabaseHost, DatabaseUrl, DatabaseUrlError, SslMode};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "pigeonhole",
    version,
    about = "A personal inbox and scheduler server (Intray and Tickler compatible)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run both services (and the scheduler's workers) until SIGINT/SIGTERM.
    Serve(Box<Settings>),
    /// Set up an account on a running server (both services, the link from the scheduler to
    /// the inbox, and this machine's command-line client); safe to run again.
    Setup(SetupArgs),
    /// Capture a note into the inbox (the words given, else standard input).
    Add(AddArgs),
    /// List the inbox, oldest first.
    Inbox(ClientOpts),
    /// Show the oldest inbox item (process the inbox one item at a time).
    Next(ClientOpts),
    /// Remove an inbox item when it is dealt with (the oldest, or the one whose id starts with ID).
    Done(DoneArgs),
    /// Schedule a reminder: it comes back into the inbox (or by e-mail) when it is due.
    Remind(RemindArgs),
    /// List scheduled reminders.
    Scheduled(ClientOpts),
    /// List triggered reminders, with how each delivery went.
    Triggered(ClientOpts),
    /// Show one inbox item or reminder whole (its id, or its first characters).
    Show(ShowArgs),
    /// Show the account's time zone, or change it to NAME (an IANA name: Europe/Zurich).
    Zone(ZoneArgs),
    /// Move in from an Intray server: its SQLite database's accounts, access keys and items
    /// become inbox accounts (with the server stopped; docs/moving-in.md).
    ImportIntray(MoveInArgs),
    /// Move in from a Tickler server: its SQLite database's accounts, settings, scheduled and
    /// triggered items and triggers become scheduler accounts (server stopped).
    ImportTickler(MoveInArgs),
    /// Write a consistent copy of the running server's whole database to DEST (docs/backup.md).
    Backup(BackupArgs),
    /// Bring a backup back into the data directory of a stopped server (docs/backup.md).
    Restore(RestoreArgs),
    /// Copy a stopped server's whole database between engines: from a data directory's sled
    /// database into an empty PostgreSQL database, or back (docs/scaling.md).
    MigrateStore(MigrateStoreArgs),
    /// Print this command's completions for bash, zsh or fish (to standard output).
    Completions(CompletionsArgs),
    /// Print the manual page (roff, section 1): `pigeonhole man | man -l -`.
    Man,
    /// Export this machine's account (both services) as JSON to FILE or standard output.
    Export(ExportArgs),
    /// Import an account export into this machine's account (both services).
    Import(ImportArgs),
    /// Send the notes saved locally while the server could not be reached (docs/cli.md).
    Sync(ClientOpts),
    /// Move an inbox item into the scheduler, due then (the oldest, or the one whose id starts with ID).
    Defer(DeferArgs),
    /// Cancel a scheduled reminder (its id, or its first characters).
    Cancel(IdArgs),
    /// Change a scheduled reminder: its text, when it is due, how it repeats.
    Edit(EditArgs),
    /// Move a reminder to a later time: a scheduled one is moved, a triggered one is scheduled again.
    #[command(visible_alias = "reschedule")]
    Snooze(SnoozeArgs),
    /// Delete triggered reminders: the one whose id starts with ID, or all of them (asks first).
    Clear(ClearArgs),
    /// The ways reminders reach you: e-mail, ntfy, webhooks, push, the inbox (add, list, delete, verify).
    Trigger(TriggerArgs),
    /// Make an access key that may only add notes to the inbox (for a phone), and print the
    /// command that captures with it, also as a QR code.
    Key(KeyArgs),
    /// Change the account's password (on both services).
    Password(PasswordArgs),
    /// Delete the account on both services, with everything in it (asks first).
    DeleteAccount(DeleteAccountArgs),
}

impl Command {
    /// The client options of a command of the command-line client (`None` for the server's
    /// own commands and those without an account).
    pub fn client_opts(&self) -> Option<&ClientOpts> {
        match self {
            Command::Inbox(opts) | Command::Next(opts) | Command::Scheduled(opts) | Command::Triggered(opts) => {
                Some(opts)
            }
            Command::Sync(opts) => Some(opts),
            Command::Add(args) => Some(&args.opts),
            Command::Setup(args) => Some(&args.opts),
            Command::Done(args) => Some(&args.opts),
            Command::Remind(args) => Some(&args.opts),
            Command::Export(args) => Some(&args.opts),
            Command::Import(args) => Some(&args.opts),
            Command::Defer(args) => Some(&args.opts),
            Command::Show(args) => Some(&args.opts),
            Command::Zone(args) => Some(&args.opts),
            Command::Cancel(args) => Some(&args.opts),
            Command::Edit(args) => Some(&args.opts),
            Command::Snooze(args) => Some(&args.opts),
            Command::Clear(args) => Some(&args.opts),
            Command::Trigger(args) => Some(args.command.opts()),
            Command::Key(args) => Some(&args.opts),
            Command::Password(args) => Some(&args.opts),
            Command::DeleteAccount(args) => Some(&args.opts),
            Command::Serve(_)
            | Command::ImportIntray(_)
            | Command::ImportTickler(_)
            | Command::Backup(_)
            | Command::Restore(_)
            | Command::MigrateStore(_)
            | Command::Completions(_)
            | Command::Man => None,
        }
    }
}

/// A command on one item by its id (or its first characters).
#[derive(clap::Args, Debug, Clone)]
pub struct IdArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The id, or its first characters
    pub id: String,
}

/// When a reminder is due: `--in` or `--at` (docs/cli.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WhenArgs {
    /// Due after this long: 30m, 2h, 1.5h, "2 hours", 3d, 1w, 1mo
    #[arg(long = "in", value_name = "DURATION", conflicts_with = "at")]
    pub after: Option<String>,
    /// Due then, in the account's time zone: "9am", "tomorrow at 9", "tonight", "in 2 hours",
    /// "mon 09:00", "next week", "next month", "1st of december", "2026-12-01 09:00"
    #[arg(long, value_name = "WHEN")]
    pub at: Option<String>,
    /// Accept an --at that has already passed (it is delivered at once)
    #[arg(long)]
    pub allow_past: bool,
}

/// How a reminder repeats (docs/cli.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RepeatArgs {
    /// Repeat every so long: 3d, 2w, 1mo, 1y, "2 weeks", daily, weekly, monthly, yearly
    #[arg(long, value_name = "EVERY", conflicts_with_all = ["every_month", "every_year"])]
    pub every: Option<String>,
    /// Repeat every month (on the day it is due, or on --day)
    #[arg(long, conflicts_with = "every_year")]
    pub every_month: bool,
    /// Repeat every year (12 months; birthdays)
    #[arg(long)]
    pub every_year: bool,
    /// With a repeat by months: the day of the month (1–31; the last day of shorter months)
    #[arg(long, value_name = "N")]
    pub day: Option<u32>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct EditArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The reminder's id, or its first characters
    pub id: String,
    /// The new text
    #[arg(long)]
    pub text: Option<String>,
    #[command(flatten)]
    pub when: WhenArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
    /// Stop repeating
    #[arg(long, conflicts_with_all = ["every", "every_month", "every_year", "day"])]
    pub no_repeat: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SnoozeArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The reminder's id, or its first characters (scheduled or triggered)
    pub id: String,
    #[command(flatten)]
    pub when: WhenArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ClearArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The triggered reminder's id, or its first characters [default: all triggered reminders]
    pub id: Option<String>,
    /// Do not ask (for scripts)
    #[arg(long)]
    pub yes: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct TriggerArgs {
    #[command(subcommand)]
    pub command: TriggerCommand,
}

#[derive(Subcommand, Debug, Clone)]
pub enum TriggerCommand {
    /// Add a way for reminders to reach you.
    #[command(subcommand)]
    Add(TriggerAdd),
    /// List the ways reminders reach you.
    List(ClientOpts),
    /// Delete one (its id, or its first characters).
    Delete(IdArgs),
    /// Verify an e-mail address with the key from the e-mail it received.
    Verify(VerifyArgs),
}

impl TriggerCommand {
    pub fn opts(&self) -> &ClientOpts {
        match self {
            TriggerCommand::Add(TriggerAdd::Email(a)) => &a.opts,
            TriggerCommand::Add(TriggerAdd::Ntfy(a)) => &a.opts,
            TriggerCommand::Add(TriggerAdd::Webhook(a)) => &a.opts,
            TriggerCommand::List(opts) => opts,
            TriggerCommand::Delete(a) => &a.opts,
            TriggerCommand::Verify(a) => &a.opts,
        }
    }
}

#[derive(Subcommand, Debug, Clone)]
pub enum TriggerAdd {
    /// Reminders by e-mail to ADDRESS (once it is verified: the e-mail says how).
    Email(EmailTriggerArgs),
    /// Reminders as ntfy notifications: URL is the topic's, e.g. https://ntfy.sh/my-secret-topic.
    Ntfy(NtfyTriggerArgs),
    /// Reminders posted to URL (Gotify, chat bridges, scripts): the text, or JSON with --format json.
    Webhook(WebhookTriggerArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub struct EmailTriggerArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The e-mail address
    pub address: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct NtfyTriggerArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The topic's URL
    pub url: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct WebhookTriggerArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// Where to post (a query such as ?token=… is kept and never shown again)
    pub url: String,
    /// What to post: the reminder's text, or JSON {"title", "message", "item", "due"}
    #[arg(long, value_enum, default_value = "text")]
    pub format: WebhookFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WebhookFormat {
    Text,
    Json,
}

#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The e-mail trigger's id, or its first characters
    pub id: String,
    /// The key from the verification e-mail (32 hex digits)
    pub key: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct KeyArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The key's name, as the pages and `GET /access-key` list it
    #[arg(long, default_value = "phone")]
    pub name: String,
    /// The inbox's address as the phone reaches it [default: this machine's client settings']
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PasswordArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// Read the old password from the first line of standard input and the new one from the second
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DeleteAccountArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// Do not ask (for scripts)
    #[arg(long)]
    pub yes: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct CompletionsArgs {
    /// The shell: `pigeonhole completions bash > /usr/share/bash-completion/completions/pigeonhole`
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Options of `import-intray` and `import-tickler`.
#[derive(clap::Args, Debug, Clone)]
pub struct MoveInArgs {
    /// The old server's SQLite database
    #[arg(value_name = "FILE.sqlite3")]
    pub file: PathBuf,
    /// The data directory to move into (the server must not be running on it)
    /// [default: $XDG_DATA_HOME/pigeonhole]
    #[arg(long, env = "PIGEONHOLE_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct BackupArgs {
    /// The backup file to write (it appears whole or not at all)
    pub dest: PathBuf,
    /// The running server's data directory [default: $XDG_DATA_HOME/pigeonhole]
    #[arg(long, env = "PIGEONHOLE_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    /// The backup file to read
    pub src: PathBuf,
    /// The stopped server's data directory [default: $XDG_DATA_HOME/pigeonhole]
    #[arg(long, env = "PIGEONHOLE_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Replace a database that is already there (it is kept as db.replaced-<time>)
    #[arg(long)]
    pub force: bool,
}

#[derive(clap::Args, Debug, Clone)]
pub struct MigrateStoreArgs {
    /// The data: a data directory (its sled database and signing key) or
    /// postgres://user[:pass]@host[:port]/db[?host=/socket/dir] (no server running on either)
    #[arg(long, value_name = "DIR|URL")]
    pub from: String,
    /// Where to copy it: a data directory without a database, or an empty PostgreSQL database
    #[arg(long, value_name = "DIR|URL")]
    pub to: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ExportArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// Where to write the export [default: standard output]
    pub file: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ImportArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The export to import
    pub file: PathBuf,
}

/// Options of `defer` (docs/cli.md).
#[derive(clap::Args, Debug, Clone)]
pub struct DeferArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The item's id, or its first characters [default: the oldest item, the one `next` shows]
    pub id: Option<String>,
    /// Due after this long: 30m, 2h, 1.5h, "2 hours", 3d, 1w
    #[arg(long = "in", value_name = "DURATION", conflicts_with = "at")]
    pub after: Option<String>,
    /// Due then, in the account's time zone (as `remind --at`)
    #[arg(long, value_name = "WHEN")]
    pub at: Option<String>,
}

/// Options of every client command.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClientOpts {
    /// Print JSON for scripts instead of text
    #[arg(long)]
    pub json: bool,
    /// The client's settings [default: $XDG_CONFIG_HOME/pigeonhole/client.toml]
    #[arg(long, env = "PIGEONHOLE_CLIENT_CONFIG", value_name = "FILE")]
    pub client_config: Option<PathBuf>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SetupArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The server's inbox service
    #[arg(
        long,
        env = "PIGEONHOLE_INBOX_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8001"
    )]
    pub inbox_url: String,
    /// The server's scheduler service
    #[arg(
        long,
        env = "PIGEONHOLE_SCHEDULER_URL",
        value_name = "URL",
        default_value = "http://127.0.0.1:8002"
    )]
    pub scheduler_url: String,
    /// The account's name [default: asked]
    #[arg(long, env = "PIGEONHOLE_USERNAME", value_name = "NAME")]
    pub username: Option<String>,
    /// Read the password from the first line of standard input (else PIGEONHOLE_PASSWORD, else asked)
    #[arg(long)]
    pub password_stdin: bool,
    /// The account's time zone (an IANA name) [default: this machine's, from TZ or /etc/localtime]
    #[arg(long, value_name = "NAME")]
    pub zone: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ShowArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The item's id, or its first characters
    pub id: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct ZoneArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The new time zone, e.g. Europe/Zurich or UTC [default: show the current one]
    pub name: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AddArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The note (all words); none: standard input
    pub text: Vec<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct DoneArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// The item's id, or its first characters [default: the oldest item]
    pub id: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RemindArgs {
    #[command(flatten)]
    pub opts: ClientOpts,
    /// What to be reminded of (all words)
    #[arg(required = true)]
    pub text: Vec<String>,
    #[command(flatten)]
    pub when: WhenArgs,
    #[command(flatten)]
    pub repeat: RepeatArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Registration {
    Open,
    Closed,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Lines for people (the default).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

/// The settings of `pigeonhole serve`, each written once, as one field: its doc comment is
/// its `--help` line, `#[arg]` names its flag, its environment variable and its default
/// (`--help` shows it), and serde reads it from the TOML file of `--config` under the flag's
/// name (`inbox-port = 9001`; an unknown key is refused). [`Settings::resolve`] layers them:
/// the flag, else its variable, else the file, else the default (docs/configuration.md).
///
/// The fields after the settings are not settings: they are what the program uses, computed
/// from the settings by [`Settings::finish`] (a parsed URL, the payment plan, the workers
/// turned off, durations …); tests set them directly.
#[derive(clap::Args, serde::Deserialize, Clone, Debug)]
#[command(args_override_self = true)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Settings {
    /// TOML file with any of the settings below (keys are the flag names)
    #[arg(long, env = "PIGEONHOLE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Database, signing key and e-mail outbox [default: $XDG_DATA_HOME/pigeonhole]
    #[arg(long = "data-dir", env = "PIGEONHOLE_DATA_DIR", value_name = "DIR")]
    #[serde(rename = "data-dir")]
    pub data_dir_setting: Option<PathBuf>,
    /// postgres://user[:pass]@host[:port]/db[?sslmode=…&host=/socket/dir]: keep all data in that PostgreSQL database [default: sled in the data directory]
    #[arg(long = "database", env = "PIGEONHOLE_DATABASE", value_name = "URL")]
    #[serde(rename = "database")]
    pub database_setting: Option<String>,
    /// With --database: seconds a claim on a due item, delivery or e-mail outlives its process (renewed every third of it while the process lives): how soon another process takes over the work of one that died
    #[arg(
        long,
        env = "PIGEONHOLE_DATABASE_LEASE_SECS",
        value_name = "SECS",
        default_value_t = 20
    )]
    pub database_lease_secs: u64,
    /// With --database: milliseconds a statement may run, and a request wait for the database's answer (with 2 s grace), before it fails
    #[arg(
        long,
        env = "PIGEONHOLE_DATABASE_STATEMENT_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 15_000
    )]
    pub database_statement_timeout_ms: u64,
    /// With --database: milliseconds a statement may wait for a row or table lock (writes to one account queue for its row)
    #[arg(
        long,
        env = "PIGEONHOLE_DATABASE_LOCK_TIMEOUT_MS",
        value_name = "MS",
        default_value_t = 15_000
    )]
    pub database_lock_timeout_ms: u64,
    /// With --database: seconds to connect to one database host, TLS and login included (the URL's connect_timeout comes first)
    #[arg(
        long,
        env = "PIGEONHOLE_DATABASE_CONNECT_TIMEOUT_SECS",
        value_name = "SECS",
        default_value_t = 5,
        hide = true
    )]
    pub database_connect_timeout_secs: u64,
    /// With --database: connections each process keeps to the database at most
    #[arg(long, env = "PIGEONHOLE_DATABASE_POOL_SIZE", value_name = "N", default_value_t = 16)]
    pub database_pool_size: usize,
    /// With --database: seconds the start waits for an unreachable database (trying again with back-off) before giving up
    #[arg(
        long,
        env = "PIGEONHOLE_DATABASE_WAIT_SECS",
        value_name = "SECS",
        default_value_t = 60
    )]
    pub database_wait_secs: u64,
    /// Address both services bind to
    #[arg(long, env = "PIGEONHOLE_HOST", value_name = "ADDR", default_value_t = IpAddr::from([127, 0, 0, 1]))]
    pub host: IpAddr,
    /// Inbox service port
    #[arg(long, env = "PIGEONHOLE_INBOX_PORT", value_name = "N", default_value_t = 8001)]
    pub inbox_port: u16,
    /// Scheduler service port
    #[arg(long, env = "PIGEONHOLE_SCHEDULER_PORT", value_name = "N", default_value_t = 8002)]
    pub scheduler_port: u16,
    /// Do not run the inbox service
    #[arg(long, env = "PIGEONHOLE_NO_INBOX", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false, hide_default_value = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_inbox: bool,
    /// Do not run the scheduler service
    #[arg(long, env = "PIGEONHOLE_NO_SCHEDULER", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false, hide_default_value = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub no_scheduler: bool,
    /// Admin username (repeatable)
    #[arg(long = "admin", env = "PIGEONHOLE_ADMIN", value_name = "NAME", value_delimiter = ',')]
    #[serde(rename = "admin", deserialize_with = "one_or_many")]
    pub admins: Vec<String>,
    /// Username that never pays (repeatable)
    #[arg(
        long = "freeloader",
        env = "PIGEONHOLE_FREELOADER",
        value_name = "NAME",
        value_delimiter = ','
    )]
    #[serde(rename = "freeloader", deserialize_with = "one_or_many")]
    pub freeloaders: Vec<String>,
    /// `closed`: POST /register answers 403
    #[arg(long, env = "PIGEONHOLE_REGISTRATION", value_enum, default_value_t = Registration::Open)]
    pub registration: Registration,
    /// PBKDF2 iterations for new password hashes
    #[arg(
        long,
        env = "PIGEONHOLE_PASSWORD_ITERATIONS",
        value_name = "N",
        default_value_t = 600_000
    )]
    pub password_iterations: u32,
    /// Expiry (seconds) added to new tokens [default: none]
    #[arg(long, env = "PIGEONHOLE_TOKEN_LIFETIME", value_name = "SECS")]
    pub token_lifetime: Option<u64>,
    /// Request body cap in bytes
    #[arg(long, env = "PIGEONHOLE_MAX_BODY_BYTES", value_name = "N", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: u64,
    /// error, warn, info, debug or trace
    #[arg(long, env = "PIGEONHOLE_LOG_LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,
    /// text (for people) or json (one JSON object per line)
    #[arg(long, env = "PIGEONHOLE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Serve metrics in the Prometheus text format on a listener of their own (GET /metrics)
    #[arg(long, env = "PIGEONHOLE_METRICS", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false, hide_default_value = true, value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics: bool,
    /// Address of the metrics listener (with --metrics): loopback only by default
    #[arg(long = "metrics-address", env = "PIGEONHOLE_METRICS_ADDRESS", value_name = "ADDR", default_value_t = SocketAddr::from(([127, 0, 0, 1], 9464)))]
    #[serde(rename = "metrics-address")]
    pub metrics_address_setting: SocketAddr,
    /// Payment plan identifier (turns monetisation on)
    #[arg(long = "payment-plan", env = "PIGEONHOLE_PAYMENT_PLAN", value_name = "ID")]
    #[serde(rename = "payment-plan")]
    pub payment_plan_setting: Option<String>,
    /// Price in the currency's smallest unit
    #[arg(long, env = "PIGEONHOLE_PAYMENT_PRICE", value_name = "N", default_value_t = 0)]
    pub payment_price: u64,
    /// Lower-case currency code
    #[arg(
        long,
        env = "PIGEONHOLE_PAYMENT_CURRENCY",
        value_name = "CODE",
        default_value = "eur"
    )]
    pub payment_currency: String,
    /// Trial period in days [default: none]
    #[arg(long, env = "PIGEONHOLE_PAYMENT_TRIAL_DAYS", value_name = "N")]
    pub payment_trial_days: Option<u64>,
    /// Public key of the payment provider [default: ""]
    #[arg(
        long,
        env = "PIGEONHOLE_PAYMENT_PUBLISHABLE_KEY",
        value_name = "KEY",
        default_value = "",
        hide_default_value = true
    )]
    pub payment_publishable_key: String,
    /// Secret key of the payment provider; enables the payments workers
    #[arg(long, env = "PIGEONHOLE_PAYMENT_SECRET_KEY", value_name = "KEY")]
    pub payment_secret_key: Option<String>,
    /// Base URL of the payment provider's REST API
    #[arg(
        long,
        env = "PIGEONHOLE_PAYMENT_API_URL",
        value_name = "URL",
        default_value = "https://api.stripe.com"
    )]
    pub payment_api_url: String,
    /// Free items per account while not paid
    #[arg(long, env = "PIGEONHOLE_MAX_ITEMS_FREE", value_name = "N", default_value_t = 5)]
    pub max_items_free: u64,
    /// Default period of every worker, seconds
    #[arg(long, env = "PIGEONHOLE_LOOPER_PERIOD", value_name = "SECS", default_value_t = 60)]
    pub looper_period: u64,
    /// Retry delay after a worker error, µs
    #[arg(
        long,
        env = "PIGEONHOLE_LOOPER_RETRY_DELAY_US",
        value_name = "N",
        default_value_t = 1_000_000
    )]
    pub looper_retry_delay_us: u64,
    /// Retries before a worker is reported errored
    #[arg(long, env = "PIGEONHOLE_LOOPER_RETRY_AMOUNT", value_name = "N", default_value_t = 7)]
    pub looper_retry_amount: u32,
    /// Turn one worker off (repeatable)
    #[arg(long, env = "PIGEONHOLE_DISABLE_LOOPER", value_name = "NAME", value_delimiter = ',')]
    #[serde(deserialize_with = "one_or_many")]
    pub disable_looper: Vec<String>,
    /// Host used in e-mail texts and links [default: localhost:<scheduler-port>]
    #[arg(long = "web-host", env = "PIGEONHOLE_WEB_HOST", value_name = "HOST")]
    #[serde(rename = "web-host")]
    pub web_host_setting: Option<String>,
    /// Public address of the inbox's pages behind a proxy (https://inbox.example.org) [default: this host at the inbox port]
    #[arg(long, env = "PIGEONHOLE_INBOX_WEB_HOST", value_name = "HOST")]
    pub inbox_web_host: Option<String>,
    /// smtp://[user:pass@]host[:port] or smtps://… [default: write .eml files to <data-dir>/outbox]
    #[arg(long, env = "PIGEONHOLE_SMTP_URL", value_name = "URL")]
    pub smtp_url: Option<String>,
    /// Sender of e-mails
    #[arg(
        long,
        env = "PIGEONHOLE_EMAIL_FROM",
        value_name = "ADDR",
        default_value = "pigeonhole@localhost"
    )]
    pub email_from: String,
    /// Where admin notifications go [default: only logged]
    #[arg(long, env = "PIGEONHOLE_ADMIN_EMAIL", value_name = "ADDR")]
    pub admin_email: Option<String>,
    /// Reverse proxy address or network (`10.0.0.0/8`) whose X-Forwarded-For is believed (repeatable)
    #[arg(long, env = "PIGEONHOLE_TRUSTED_PROXY", value_name = "ADDR", value_delimiter = ',')]
    #[serde(deserialize_with = "one_or_many")]
    pub trusted_proxy: Vec<String>,
    /// Where deliveries may connect: loopback, private, public (comma-separated) [default: loopback,private,public]; link-local and other special addresses never
    #[arg(
        long = "outbound-allow",
        env = "PIGEONHOLE_OUTBOUND_ALLOW",
        value_name = "KINDS",
        value_delimiter = ','
    )]
    #[serde(rename = "outbound-allow", deserialize_with = "one_or_many")]
    pub outbound_allow_setting: Vec<String>,
    /// NAME=IP: resolve NAME to IP for deliveries (tests; the outbound policy still applies)
    #[arg(
        long = "outbound-resolve",
        env = "PIGEONHOLE_OUTBOUND_RESOLVE",
        value_name = "NAME=IP",
        value_delimiter = ',',
        hide = true
    )]
    #[serde(rename = "outbound-resolve", deserialize_with = "one_or_many")]
    pub outbound_resolve_setting: Vec<String>,
    /// Seconds a connection may take to send a request's headers, from its first byte [default: `Timeouts::default()`]
    #[arg(long, env = "PIGEONHOLE_HEADER_TIMEOUT_SECS", value_name = "SECS", hide = true)]
    pub header_timeout_secs: Option<u64>,
    /// Seconds a connection may stay idle between requests [default: `Timeouts::default()`]
    #[arg(long, env = "PIGEONHOLE_IDLE_TIMEOUT_SECS", value_name = "SECS", hide = true)]
    pub idle_timeout_secs: Option<u64>,
    /// Seconds a request or answer body may go without progress [default: `Timeouts::default()`]
    #[arg(long, env = "PIGEONHOLE_BODY_TIMEOUT_SECS", value_name = "SECS", hide = true)]
    pub body_timeout_secs: Option<u64>,

    // Computed by `finish` from the settings above: not flags, not keys of the file.
    /// `--data-dir`, else `$XDG_DATA_HOME/pigeonhole`, else `~/.local/share/pigeonhole`.
    #[arg(skip)]
    #[serde(skip)]
    pub data_dir: PathBuf,
    /// `--database`: a PostgreSQL database instead of sled in the data directory.
    #[arg(skip)]
    #[serde(skip)]
    pub database: Option<DatabaseUrl>,
    /// `--database-lease-secs`: how long a process's claim on queued work lasts when it
    /// stops renewing it (it died): then another process takes the work over.
    #[arg(skip)]
    #[serde(skip)]
    pub database_lease: Duration,
    /// Not `--no-inbox`.
    #[arg(skip)]
    #[serde(skip)]
    pub run_inbox: bool,
    /// Not `--no-scheduler`.
    #[arg(skip)]
    #[serde(skip)]
    pub run_scheduler: bool,
    /// `--registration open`.
    #[arg(skip)]
    #[serde(skip)]
    pub registration_open: bool,
    /// Where the metrics listener binds; `None`: metrics are off (the default).
    #[arg(skip)]
    #[serde(skip)]
    pub metrics_address: Option<SocketAddr>,
    /// `--payment-plan` with its price, currency, trial and key.
    #[arg(skip)]
    #[serde(skip)]
    pub payment_plan: Option<PaymentPlan>,
    /// `--disable-looper`.
    #[arg(skip)]
    #[serde(skip)]
    pub disabled_loopers: Vec<Worker>,
    /// `--web-host`, else `localhost:<scheduler-port>`.
    #[arg(skip)]
    #[serde(skip)]
    pub web_host: String,
    /// Where browsers reach each service's pages when the operator said so (`--web-host`,
    /// `--inbox-web-host`): each page finds the other service there (docs/web.md).
    #[arg(skip)]
    #[serde(skip)]
    pub web_origins: WebOrigins,
    /// Peers whose `X-Forwarded-For` names the client (inbox.md §1.7).
    #[arg(skip)]
    #[serde(skip)]
    pub trusted_proxies: Vec<ProxyNet>,
    /// Deadlines of hostile or broken connections (spec decision 17).
    #[arg(skip)]
    #[serde(skip)]
    pub timeouts: Timeouts,
    /// The kinds of addresses deliveries may connect to (`--outbound-allow`).
    #[arg(skip)]
    #[serde(skip)]
    pub outbound_allow: OutboundAllow,
    /// Host names resolved to fixed addresses for deliveries (tests: `--outbound-resolve`).
    #[arg(skip)]
    #[serde(skip)]
    pub outbound_resolve: Vec<(String, IpAddr)>,
}

/// The configured payment plan (monetisation is on when there is one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentPlan {
    pub plan: String,
    pub price: u64,
    pub currency: String,
    pub trial_days: Option<u64>,
    pub publishable_key: String,
}

/// The kinds of addresses that deliveries (and the check of a new inbox trigger) may connect
/// to. Link-local, unspecified, multicast, broadcast, documentation and other special
/// addresses are never allowed, whatever this says (`outbound::classify`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundAllow {
    pub loopback: bool,
    pub private: bool,
    pub public: bool,
}

impl Default for OutboundAllow {
    /// A home server's: its inbox may be on this machine or the LAN.
    fn default() -> OutboundAllow {
        OutboundAllow {
            loopback: true,
            private: true,
            public: true,
        }
    }
}

impl OutboundAllow {
    /// `loopback`, `private`, `public`, separated by commas (or given as a list).
    pub fn parse(kinds: &[String]) -> Result<OutboundAllow, ConfigError> {
        let mut allow = OutboundAllow {
            loopback: false,
            private: false,
            public: false,
        };
        for kind in kinds.iter().flat_map(|k| k.split(',')).map(str::trim) {
            match kind {
                "loopback" => allow.loopback = true,
                "private" => allow.private = true,
                "public" => allow.public = true,
                other => {
                    return Err(ConfigError::UnknownName {
                        what: "kind",
                        flag: "outbound-allow",
                        name: other.to_owned(),
                        known: "loopback, private, public".to_owned(),
                    })
                }
            }
        }
        Ok(allow)
    }

    pub fn as_text(&self) -> String {
        let kinds = [
            (self.loopback, "loopback"),
            (self.private, "private"),
            (self.public, "public"),
        ];
        let on: Vec<&str> = kinds.iter().filter(|(on, _)| *on).map(|(_, k)| *k).collect();
        if on.is_empty() {
            "none".to_owned()
        } else {
            on.join(",")
        }
    }
}

/// `NAME=IP` of `--outbound-resolve`.
fn parse_resolve(text: &str) -> Result<(String, IpAddr), ConfigError> {
    let bad = || ConfigError::Invalid {
        flag: "outbound-resolve",
        value: text.to_owned(),
        reason: "expected NAME=IP".to_owned(),
    };
    let (name, ip) = text.split_once('=').ok_or_else(bad)?;
    let ip = ip.trim().parse::<IpAddr>().map_err(|_| bad())?;
    let name = name.trim().to_ascii_lowercase();
    if name.is_empty() {
        return Err(bad());
    }
    Ok((name, ip))
}

/// The public origins (`scheme://host[:port]`) of the two services' pages, as browsers
/// reach them behind a proxy; `None`: the same host as the page, at the service's port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebOrigins {
    /// `--inbox-web-host`.
    pub inbox: Option<String>,
    /// `--web-host` when it was given and names an origin (no path).
    pub scheduler: Option<String>,
}

/// The origin a `--web-host`-style value names: `host[:port]` (taken as `http://`) or an
/// `http(s)://` URL without a path, query, fragment or user.
pub fn web_origin(value: &str) -> Result<String, String> {
    let value = value.trim();
    let url = if value.starts_with("http://") || value.starts_with("https://") {
        value.to_owned()
    } else {
        format!("http://{value}")
    };
    let url = url::Url::parse(&url).map_err(|e| format!("{e}"))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("no user or password belongs in it".into());
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("the pages are at /app/ of the host: give the scheme, host and port only".into());
    }
    Ok(url.origin().ascii_serialization())
}

/// How long a connection may take at each stage before it is cut off (spec decision 17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// From the first byte of a request (of a new connection: from its accept) until its
    /// headers are complete.
    pub header: Duration,
    /// Between the end of an answer and the first byte of the next request.
    pub idle: Duration,
    /// Longest pause while a request body is read or an answer is written.
    pub body: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            header: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            body: Duration::from_secs(30),
        }
    }
}

/// An address or a network (`ADDR/PREFIX`) of `--trusted-proxy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProxyNet {
    net: IpAddr,
    prefix: u8,
}

impl ProxyNet {
    pub fn parse(text: &str) -> Result<ProxyNet, ConfigError> {
        let bad = || ConfigError::Invalid {
            flag: "trusted-proxy",
            value: text.to_owned(),
            reason: "expected an IP address or ADDR/PREFIX".to_owned(),
        };
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p.parse::<u8>().map_err(|_| bad())?)),
            None => (text.trim(), None),
        };
        let net = addr.parse::<IpAddr>().map_err(|_| bad())?.to_canonical();
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = prefix.unwrap_or(max);
        if prefix > max {
            return Err(bad());
        }
        Ok(ProxyNet { net, prefix })
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        match (self.net, addr.to_canonical()) {
            (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), self.prefix),
            _ => false,
        }
    }
}

/// Whether the first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let bits = usize::from(bits);
    let whole = bits / 8;
    if a[..whole] != b[..whole] {
        return false;
    }
    let rest = bits % 8;
    rest == 0 || (a[whole] ^ b[whole]) >> (8 - rest) == 0
}

impl Default for Settings {
    /// The defaults of the settings (as `--help` shows them), before [`Settings::finish`]:
    /// `pigeonhole serve` with no flag, no environment variable and no file.
    fn default() -> Settings {
        let command = Settings::augment_args(clap::Command::new("serve")).mut_args(|arg| arg.env(None));
        // every setting has a default or may be absent: an empty command line always parses
        let matches = command.try_get_matches_from(["serve"]).expect("the defaults parse");
        Settings::from_arg_matches(&matches).expect("the defaults parse")
    }
}

impl Settings {
    /// Settings for tests and embedding: the defaults with a given data directory.
    pub fn with_data_dir(dir: impl Into<PathBuf>) -> Settings {
        let settings = Settings {
            data_dir_setting: Some(dir.into()),
            ..Settings::default()
        };
        // The defaults of an empty configuration always resolve.
        settings.finish().expect("default settings")
    }

    /// The settings of `pigeonhole serve`'s parsed command line (`matches`, its environment
    /// variables applied by clap): the flags and variables given there over the `--config`
    /// file over the defaults, checked.
    pub fn resolve(matches: &clap::ArgMatches) -> Result<Settings, ConfigError> {
        let mut given = matches.clone();
        let defaulted: Vec<String> = matches
            .ids()
            .map(|id| id.as_str().to_owned())
            .filter(|id| matches.value_source(id) == Some(clap::parser::ValueSource::DefaultValue))
            .collect();
        for id in defaulted {
            // the ids are the matches' own: clearing one cannot fail
            let _ = given.try_clear_id(&id);
        }
        let config = Settings::from_arg_matches(matches).map_err(ConfigError::Command)?;
        let mut settings = match &config.config {
            Some(path) => Settings::from_file(path)?,
            None => Settings::default(),
        };
        settings.update_from_arg_matches(&given).map_err(ConfigError::Command)?;
        settings.finish()
    }

    /// The defaults with the settings of the TOML file at `path` over them.
    fn from_file(path: &std::path::Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let file = text.parse::<toml::Table>().map_err(|source| ConfigError::Syntax {
            path: path.to_owned(),
            source,
        })?;
        let command = Settings::augment_args(clap::Command::new("serve"));
        let known: Vec<&str> = command.get_arguments().filter_map(|arg| arg.get_long()).collect();
        if let Some(key) = file.keys().find(|key| !known.contains(&key.as_str())) {
            return Err(ConfigError::UnknownKey(key.clone()));
        }
        // each value on its own first, so that a wrong one is named
        for (key, value) in &file {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            toml::Value::Table(one)
                .try_into::<Settings>()
                .map_err(|source| ConfigError::Value {
                    key: key.clone(),
                    source,
                })?;
        }
        toml::Value::Table(file)
            .try_into()
            .map_err(|source| ConfigError::Syntax {
                path: path.to_owned(),
                source,
            })
    }

    /// Computes what the program uses from the settings, and checks them.
    pub fn finish(mut self) -> Result<Settings, ConfigError> {
        self.data_dir = match &self.data_dir_setting {
            Some(dir) => dir.clone(),
            None => default_data_dir()?,
        };
        self.database = self
            .database_setting
            .as_deref()
            .map(DatabaseUrl::parse)
            .transpose()
            .map_err(ConfigError::Database)?;
        self.database_lease = Duration::from_secs(self.database_lease_secs.clamp(1, 86_400));
        // every wait is bounded, none so short that nothing can be done
        self.database_statement_timeout_ms = self.database_statement_timeout_ms.clamp(100, 86_400_000);
        self.database_lock_timeout_ms = self.database_lock_timeout_ms.clamp(10, 86_400_000);
        self.database_connect_timeout_secs = self.database_connect_timeout_secs.clamp(1, 3600);
        self.database_pool_size = self.database_pool_size.clamp(1, 1000);
        self.database_wait_secs = self.database_wait_secs.min(86_400);
        self.run_inbox = !self.no_inbox;
        self.run_scheduler = !self.no_scheduler;
        self.admins = tidy(&self.admins);
        self.freeloaders = tidy(&self.freeloaders);
        self.registration_open = self.registration == Registration::Open;
        self.password_iterations = self.password_iterations.max(1);
        self.looper_period = self.looper_period.max(1);
        self.metrics_address = self.metrics.then_some(self.metrics_address_setting);
        self.payment_currency = self.payment_currency.to_lowercase();
        self.payment_plan = self.payment_plan_setting.clone().map(|plan| PaymentPlan {
            plan,
            price: self.payment_price,
            currency: self.payment_currency.clone(),
            trial_days: self.payment_trial_days,
            publishable_key: self.payment_publishable_key.clone(),
        });
        self.disabled_loopers = tidy(&self.disable_looper)
            .iter()
            .map(|name| {
                Worker::parse(name).ok_or_else(|| ConfigError::UnknownName {
                    what: "worker name",
                    flag: "disable-looper",
                    name: name.clone(),
                    known: Worker::ALL.iter().map(|w| w.name()).collect::<Vec<_>>().join(", "),
                })
            })
            .collect::<Result<_, _>>()?;
        self.web_host = match &self.web_host_setting {
            Some(host) => host.clone(),
            None => format!("localhost:{}", self.scheduler_port),
        };
        self.web_origins = WebOrigins {
            inbox: match &self.inbox_web_host {
                Some(host) => Some(web_origin(host).map_err(|reason| ConfigError::Invalid {
                    flag: "inbox-web-host",
                    value: host.clone(),
                    reason,
                })?),
                None => None,
            },
            // a web host with a path still makes the e-mails' links; the pages then find
            // the scheduler on their own host
            scheduler: self.web_host_setting.as_deref().and_then(|host| web_origin(host).ok()),
        };
        self.trusted_proxies = tidy(&self.trusted_proxy)
            .iter()
            .map(|p| ProxyNet::parse(p))
            .collect::<Result<_, _>>()?;
        let kinds = tidy(&self.outbound_allow_setting);
        self.outbound_allow = if kinds.is_empty() {
            OutboundAllow::default()
        } else {
            OutboundAllow::parse(&kinds)?
        };
        self.outbound_resolve = tidy(&self.outbound_resolve_setting)
            .iter()
            .map(|r| parse_resolve(r))
            .collect::<Result<_, _>>()?;
        // 0 would cut every connection at once: raised to 1 like the other periods
        let secs = |given: Option<u64>, default: Duration| given.map_or(default, |s| Duration::from_secs(s.max(1)));
        let default = Timeouts::default();
        self.timeouts = Timeouts {
            header: secs(self.header_timeout_secs, default.header),
            idle: secs(self.idle_timeout_secs, default.idle),
            body: secs(self.body_timeout_secs, default.body),
        };
        check_email_settings(&self)?;
        if !self.run_inbox && !self.run_scheduler {
            return Err(ConfigError::NothingToRun);
        }
        Ok(self)
    }

    /// One line for the log at start: what runs where and how, never a secret (no SMTP
    /// password, no payment keys; the token signing key is not a setting at all).
    pub fn summary(&self) -> String {
        let mut parts = vec![format!("data-dir={}", self.data_dir.display())];
        if let Some(db) = &self.database {
            parts.push(format!("database={}", db.redacted()));
        }
        if self.run_inbox {
            parts.push(format!("inbox={}:{}", self.host, self.inbox_port));
        }
        if self.run_scheduler {
            parts.push(format!("scheduler={}:{}", self.host, self.scheduler_port));
        }
        parts.push(format!(
            "metrics={}",
            self.metrics_address.map_or_else(|| "off".to_owned(), |a| a.to_string())
        ));
        parts.push(format!(
            "registration={}",
            if self.registration_open { "open" } else { "closed" }
        ));
        parts.push(format!("admins={}", self.admins.len()));
        parts.push(format!("log-level={}", self.log_level.as_str()));
        parts.push(format!(
            "e-mail={}",
            match self.smtp_url.as_deref().map(parse_smtp_url) {
                None => "outbox".to_owned(),
                // host and port only: the URL's user and password stay out of the log
                Some(Ok(u)) => format!(
                    "{}://{}:{}{}",
                    if u.implicit_tls { "smtps" } else { "smtp" },
                    u.host,
                    u.port,
                    if u.credentials.is_some() {
                        " (with credentials)"
                    } else {
                        ""
                    }
                ),
                Some(Err(_)) => "invalid".to_owned(),
            }
        ));
        parts.push(format!(
            "payments={}",
            match (&self.payment_plan, &self.payment_secret_key) {
                (None, _) => "off",
                (Some(_), None) => "plan without provider key",
                (Some(_), Some(_)) => "on",
            }
        ));
        let off: Vec<&str> = self.disabled_loopers.iter().map(|w| w.name()).collect();
        if !off.is_empty() {
            parts.push(format!("disabled-workers={}", off.join(",")));
        }
        parts.push(format!("outbound={}", self.outbound_allow.as_text()));
        parts.push(format!("looper-period={}s", self.looper_period));
        parts.push(format!("max-body-bytes={}", self.max_body_bytes));
        parts.join(" ")
    }

    pub fn is_admin(&self, username: &str) -> bool {
        self.admins.iter().any(|a| a == username)
    }

    pub fn is_freeloader(&self, username: &str) -> bool {
        self.freeloaders.iter().any(|a| a == username)
    }
}

/// Why the settings cannot be used: `pigeonhole serve` says it on one line and stops with
/// exit status 2.
#[derive(Debug)]
pub enum ConfigError {
    /// The `--config` file cannot be read.
    Read { path: PathBuf, source: std::io::Error },
    /// The `--config` file is not TOML.
    Syntax { path: PathBuf, source: toml::de::Error },
    /// A key of the `--config` file that is no setting.
    UnknownKey(String),
    /// A value of the `--config` file of the wrong type or out of range.
    Value { key: String, source: toml::de::Error },
    /// A value that does not say what its setting takes.
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    /// A name that is none of the known ones (`--disable-looper`, `--outbound-allow`).
    UnknownName {
        what: &'static str,
        flag: &'static str,
        name: String,
        known: String,
    },
    /// `--database` is no PostgreSQL URL that can be used.
    Database(DatabaseUrlError),
    /// No `--data-dir` and nowhere to put the default one.
    NoDataDir,
    /// `--no-inbox` with `--no-scheduler`.
    NothingToRun,
    /// The command line does not give the settings (only if its definition is wrong).
    Command(clap::Error),
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Read { path, source } => write!(f, "cannot read config file {}: {source}", path.display()),
            ConfigError::Syntax { path, source } => write!(f, "invalid config file {}: {source}", path.display()),
            ConfigError::UnknownKey(key) => write!(f, "unknown setting {key:?} in the config file"),
            ConfigError::Value { key, source } => {
                write!(f, "invalid value for {key:?} in the config file: {}", source.message())
            }
            ConfigError::Invalid { flag, value, reason } => write!(f, "invalid --{flag} {value:?}: {reason}"),
            ConfigError::UnknownName {
                what,
                flag,
                name,
                known,
            } => write!(f, "unknown {what} {name:?} for --{flag} (known: {known})"),
            ConfigError::Database(e) => write!(f, "{e}"),
            ConfigError::NoDataDir => write!(f, "no --data-dir given and neither XDG_DATA_HOME nor HOME is set"),
            ConfigError::NothingToRun => write!(f, "--no-inbox and --no-scheduler together leave nothing to run"),
            ConfigError::Command(e) => write!(f, "{}", e.to_string().trim_end()),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Read { source, .. } => Some(source),
            ConfigError::Syntax { source, .. } | ConfigError::Value { source, .. } => Some(source),
            ConfigError::Database(e) => Some(e),
            ConfigError::Command(e) => Some(e),
            _ => None,
        }
    }
}

/// The entries of a list setting, trimmed, without empty ones (`PIGEONHOLE_ADMIN="a, b,"`).
fn tidy(values: &[String]) -> Vec<String> {
    values
        .iter()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect()
}

/// A list setting in the file: a TOML array of strings or one string.
fn one_or_many<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged, expecting = "expected a string or an array of strings")]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match serde::Deserialize::deserialize(deserializer)? {
        OneOrMany::One(one) => vec![one],
        OneOrMany::Many(many) => many,
    })
}

/// Checks the e-mail settings without building anything (start-up validation).
/// The parts of `--smtp-url`.
#[derive(Debug, PartialEq, Eq)]
pub struct SmtpUrl {
    pub implicit_tls: bool,
    pub host: String,
    pub port: u16,
    pub credentials: Option<(String, String)>,
}

/// Parses `smtp://[user:pass@]host[:port]` (port 25) or `smtps://…` (port 465).
pub fn parse_smtp_url(url: &str) -> Result<SmtpUrl, ConfigError> {
    let bad = || ConfigError::Invalid {
        flag: "smtp-url",
        value: url.to_owned(),
        reason: "expected smtp://[user:pass@]host[:port] or smtps://…".to_owned(),
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
    let implicit_tls = match scheme.to_ascii_lowercase().as_str() {
        "smtp" => false,
        "smtps" => true,
        _ => return Err(bad()),
    };
    let rest = rest.trim_end_matches('/');
    let (userinfo, hostport) = match rest.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, rest),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(bad)?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None if implicit_tls => 465,
        None => 25,
    };
    if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
        return Err(bad());
    }
    let credentials = userinfo.map(|u| {
        let (user, pass) = u.split_once(':').unwrap_or((u, ""));
        (
            crate::domain::wire::percent_decode(user, false),
            crate::domain::wire::percent_decode(pass, false),
        )
    });
    Ok(SmtpUrl {
        implicit_tls,
        host: host.to_owned(),
        port,
        credentials,
    })
}

/// Checks the e-mail settings without building anything (start-up validation).
pub fn check_email_settings(settings: &Settings) -> Result<(), ConfigError> {
    let address = |flag: &'static str, value: &str| {
        value
            .parse::<lettre::Address>()
            .map(|_| ())
            .map_err(|e| ConfigError::Invalid {
                flag,
                value: value.to_owned(),
                reason: e.to_string(),
            })
    };
    address("email-from", &settings.email_from)?;
    if let Some(to) = &settings.admin_email {
        address("admin-email", to)?;
    }
    match &settings.smtp_url {
        Some(url) => parse_smtp_url(url).map(|_| ()),
        None => Ok(()),
    }
}

/// The data directory when none is given: `$XDG_DATA_HOME/pigeonhole`, else
/// `~/.local/share/pigeonhole`.
pub fn default_data_dir() -> Result<PathBuf, ConfigError> {
    if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("pigeonhole"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/pigeonhole")),
        None => Err(ConfigError::NoDataDir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, String> {
        resolve(args).map_err(|e| e.to_string())
    }

    /// `pigeonhole serve ARGS` as `main` resolves it (a command line clap refuses panics).
    fn resolve(args: &[&str]) -> Result<Settings, ConfigError> {
        let mut full = vec!["pigeonhole", "serve"];
        full.extend_from_slice(args);
        let matches = <Cli as clap::CommandFactory>::command()
            .try_get_matches_from(full)
            .unwrap();
        Settings::resolve(matches.subcommand_matches("serve").unwrap())
    }

    /// `pigeonhole serve --data-dir /a --config FILE ARGS`, FILE holding `toml`.
    fn with_file(toml: &str, args: &[&str]) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, toml).unwrap();
        let mut full = vec!["--data-dir", "/a", "--config", path.to_str().unwrap()];
        full.extend_from_slice(args);
        resolve(&full)
    }

    #[test]
    fn defaults() {
        let s = parse(&["--data-dir", "/tmp/x"]).unwrap();
        assert_eq!((s.inbox_port, s.scheduler_port), (8001, 8002));
        assert_eq!(s.host.to_string(), "127.0.0.1");
        assert_eq!(s.password_iterations, 600_000);
        assert_eq!(s.max_body_bytes, 16_777_216);
        assert_eq!(s.web_host, "localhost:8002");
        assert!(s.registration_open && s.payment_plan.is_none() && s.run_inbox && s.run_scheduler);
    }

    #[test]
    fn the_public_addresses_of_the_pages() {
        let s = parse(&["--data-dir", "/a"]).unwrap();
        assert_eq!(s.web_origins, WebOrigins::default());
        let s = parse(&[
            "--data-dir",
            "/a",
            "--inbox-web-host",
            "https://Inbox.example.org/",
            "--web-host",
            "https://scheduler.example.org:8443",
        ])
        .unwrap();
        assert_eq!(s.web_origins.inbox.as_deref(), Some("https://inbox.example.org"));
        assert_eq!(
            s.web_origins.scheduler.as_deref(),
            Some("https://scheduler.example.org:8443")
        );
        // host and port alone are http; a web host with a path makes the e-mails' links only
        let s = parse(&[
            "--data-dir",
            "/a",
            "--inbox-web-host",
            "pi.local:8001",
            "--web-host",
            "https://example.org/tickler",
        ])
        .unwrap();
        assert_eq!(s.web_origins.inbox.as_deref(), Some("http://pi.local:8001"));
        assert_eq!(s.web_origins.scheduler, None);
        for bad in [
            "https://inbox.example.org/app/",
            "https://me:pw@inbox.example.org",
            "https://inbox.example.org/?x=1",
            "https://inbox.example.org/#top",
            "",
            "https://in box.example.org",
        ] {
            let e = parse(&["--data-dir", "/a", "--inbox-web-host", bad]).unwrap_err();
            assert!(e.starts_with("invalid --inbox-web-host"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn last_value_wins_and_lists_repeat() {
        let s = parse(&[
            "--data-dir",
            "/a",
            "--inbox-port",
            "1",
            "--inbox-port",
            "2",
            "--admin",
            "x",
            "--admin",
            "y",
        ])
        .unwrap();
        assert_eq!(s.inbox_port, 2);
        assert_eq!(s.admins, ["x", "y"]);
    }

    #[test]
    fn config_file_is_below_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "inbox-port = 9001\nscheduler-port = 9002\nadmin = [\"root\"]\npayment-plan = \"p\"\npayment-currency = \"CHF\"\n").unwrap();
        let s = parse(&[
            "--data-dir",
            "/a",
            "--config",
            path.to_str().unwrap(),
            "--inbox-port",
            "7",
        ])
        .unwrap();
        assert_eq!((s.inbox_port, s.scheduler_port), (7, 9002));
        assert_eq!(s.admins, ["root"]);
        assert_eq!(s.payment_plan.unwrap().currency, "chf");
        std::fs::write(&path, "no-such-setting = 1\n").unwrap();
        assert!(parse(&["--data-dir", "/a", "--config", path.to_str().unwrap()]).is_err());
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let s = parse(&[
            "--data-dir",
            "/a",
            "--trusted-proxy",
            "127.0.0.1",
            "--trusted-proxy",
            "10.1.0.0/16,::1",
        ])
        .unwrap();
        let ip = |t: &str| t.parse::<IpAddr>().unwrap();
        let trusted = |a: &str| s.trusted_proxies.iter().any(|p| p.contains(ip(a)));
        assert!(trusted("127.0.0.1") && trusted("10.1.255.3") && trusted("::1") && trusted("::ffff:127.0.0.1"));
        assert!(!trusted("127.0.0.2") && !trusted("10.2.0.1") && !trusted("::2"));
        assert!(ProxyNet::parse("0.0.0.0/0").unwrap().contains(ip("203.0.113.9")));
        assert!(ProxyNet::parse("10.0.0.0/12").unwrap().contains(ip("10.15.1.1")));
        assert!(!ProxyNet::parse("10.0.0.0/12").unwrap().contains(ip("10.16.1.1")));
        for bad in ["localhost", "10.0.0.0/33", "::/129", "1.2.3.4/x"] {
            assert!(parse(&["--data-dir", "/a", "--trusted-proxy", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_timeouts_are_hidden_settings() {
        let s = parse(&["--data-dir", "/a"]).unwrap();
        assert_eq!(s.timeouts, Timeouts::default());
        assert_eq!(
            (s.timeouts.header, s.timeouts.idle, s.timeouts.body),
            (
                Duration::from_secs(30),
                Duration::from_secs(60),
                Duration::from_secs(30)
            )
        );
        let s = parse(&[
            "--data-dir",
            "/a",
            "--header-timeout-secs",
            "2",
            "--idle-timeout-secs",
            "0",
            "--body-timeout-secs",
            "5",
        ])
        .unwrap();
        assert_eq!(
            (s.timeouts.header, s.timeouts.idle, s.timeouts.body),
            (Duration::from_secs(2), Duration::from_secs(1), Duration::from_secs(5))
        );
        let mut help = Vec::new();
        let mut cmd = <Cli as clap::CommandFactory>::command();
        let serve = cmd.find_subcommand_mut("serve").unwrap();
        serve.write_help(&mut help).unwrap();
        let help = String::from_utf8(help).unwrap();
        assert!(
            help.contains("--max-body-bytes") && !help.contains("timeout-secs"),
            "{help}"
        );
    }

    #[test]
    fn metrics_are_off_by_default_and_on_at_a_loopback_address() {
        let s = parse(&["--data-dir", "/a"]).unwrap();
        assert_eq!((s.metrics_address, s.log_format), (None, LogFormat::Text));
        let s = parse(&["--data-dir", "/a", "--metrics", "--log-format", "json"]).unwrap();
        assert_eq!(s.metrics_address, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(s.log_format, LogFormat::Json);
        let s = parse(&["--data-dir", "/a", "--metrics", "--metrics-address", "127.0.0.1:0"]).unwrap();
        assert_eq!(s.metrics_address, Some("127.0.0.1:0".parse().unwrap()));
        // an address alone does not turn metrics on
        let s = parse(&["--data-dir", "/a", "--metrics-address", "127.0.0.1:1"]).unwrap();
        assert_eq!(s.metrics_address, None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            "metrics = true\nmetrics-address = \"[::1]:9500\"\nlog-format = \"json\"\n",
        )
        .unwrap();
        let s = parse(&["--data-dir", "/a", "--config", path.to_str().unwrap()]).unwrap();
        assert_eq!(s.metrics_address, Some("[::1]:9500".parse().unwrap()));
        assert_eq!(s.log_format, LogFormat::Json);
    }

    #[test]
    fn the_summary_names_no_secret() {
        let s = parse(&[
            "--data-dir",
            "/a",
            "--smtp-url",
            "smtps://mailer:hunter2secret@mail.example:2465",
            "--payment-plan",
            "plan",
            "--payment-secret-key",
            "sk_live_topsecret",
            "--payment-publishable-key",
            "pk_live_public",
        ])
        .unwrap();
        let line = s.summary();
        assert!(line.contains("smtps://mail.example:2465 (with credentials)"), "{line}");
        assert!(
            line.contains("inbox=127.0.0.1:8001") && line.contains("payments=on"),
            "{line}"
        );
        for secret in ["hunter2secret", "mailer", "sk_live_topsecret", "pk_live_public"] {
            assert!(!line.contains(secret), "{secret} in {line}");
        }
        assert!(!line.contains('\n'));
    }

    #[test]
    fn unknown_worker_names_are_refused() {
        let err = parse(&["--data-dir", "/a", "--disable-looper", "no-such-worker"]).unwrap_err();
        assert!(err.contains("no-such-worker"), "{err}");
        assert!(parse(&["--data-dir", "/a", "--disable-looper", "emailer"]).is_ok());
    }

    /// The names serde gives `Settings`' fields (the keys of the file): a deserializer that
    /// only records them.
    fn file_keys() -> Vec<&'static str> {
        #[derive(Debug)]
        struct Keys(Vec<&'static str>);
        impl std::fmt::Display for Keys {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }
        impl std::error::Error for Keys {}
        impl serde::de::Error for Keys {
            fn custom<T: std::fmt::Display>(_: T) -> Keys {
                Keys(Vec::new())
            }
        }
        struct Recorder;
        impl<'de> serde::Deserializer<'de> for Recorder {
            type Error = Keys;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Keys> {
                Err(Keys(Vec::new()))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Keys> {
                Err(Keys(fields.to_vec()))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
                ignored_any
            }
        }
        <Settings as serde::Deserialize>::deserialize(Recorder).unwrap_err().0
    }

    #[test]
    fn the_keys_of_the_file_are_the_flags() {
        let command = Settings::augment_args(clap::Command::new("serve"));
        let mut flags: Vec<&str> = command.get_arguments().filter_map(|a| a.get_long()).collect();
        let mut keys = file_keys();
        flags.sort_unstable();
        keys.sort_unstable();
        assert_eq!(flags, keys);
        assert!(keys.contains(&"inbox-port") && keys.contains(&"admin") && keys.contains(&"payment-plan"));
        // what `finish` computes is no key
        assert!(!keys.contains(&"admins") && !keys.contains(&"run-inbox") && !keys.contains(&"timeouts"));
        // each flag has its variable
        for arg in command.get_arguments().filter(|a| a.get_long().is_some()) {
            let long = arg.get_long().unwrap();
            let env = format!("PIGEONHOLE_{}", long.to_uppercase().replace('-', "_"));
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env.as_str()), "--{long}");
        }
    }

    #[test]
    fn config_errors_are_typed_and_name_what_is_wrong() {
        let err = with_file("no-such-setting = 1\n", &[]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::UnknownKey(k) if k == "no-such-setting"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "unknown setting \"no-such-setting\" in the config file"
        );
        for (toml, key) in [
            ("inbox-port = \"x\"\n", "inbox-port"),
            ("inbox-port = 70000\n", "inbox-port"),
            ("scheduler-port = 9002\nadmin = 3\n", "admin"),
            ("host = \"localhost\"\n", "host"),
            ("metrics-address = \"nowhere\"\n", "metrics-address"),
            ("log-level = \"loud\"\n", "log-level"),
        ] {
            let err = with_file(toml, &[]).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Value { key: k, .. } if k == key),
                "{toml}: {err:?}"
            );
            let line = err.to_string();
            assert!(
                line.starts_with(&format!("invalid value for {key:?} in the config file: ")) && !line.contains('\n'),
                "{line}"
            );
        }
        let err = with_file("inbox-port = \n", &[]).unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
        let err = resolve(&["--data-dir", "/a", "--config", "/nonexistent/p.toml"]).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        let err = resolve(&["--data-dir", "/a", "--no-inbox", "--no-scheduler"]).unwrap_err();
        assert!(matches!(err, ConfigError::NothingToRun), "{err:?}");
        let err = resolve(&["--data-dir", "/a", "--database", "mysql://x"]).unwrap_err();
        assert!(matches!(err, ConfigError::Database(_)), "{err:?}");
        let err = resolve(&["--data-dir", "/a", "--outbound-allow", "intranet"]).unwrap_err();
        assert!(
            matches!(&err, ConfigError::UnknownName { flag: "outbound-allow", name, .. } if name == "intranet"),
            "{err:?}"
        );
        let err = resolve(&["--data-dir", "/a", "--email-from", "nobody"]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { flag: "email-from", .. }),
            "{err:?}"
        );
    }

    #[test]
    fn the_file_takes_every_setting_and_lists_as_one_string() {
        let s = with_file(
            "admin = \"root\"\ntrusted-proxy = \"10.0.0.0/8\"\nno-inbox = true\nregistration = \"closed\"\n\
             database-lease-secs = 5\nheader-timeout-secs = 3\ndatabase-pool-size = 3\n\
             database-statement-timeout-ms = 0\ndatabase-wait-secs = 7\nweb-host = \"example.org\"\n\
             payment-plan = \"p\"\npayment-price = 700\ndisable-looper = [\"emailer\"]\nconfig = \"ignored.toml\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(s.admins, ["root"]);
        assert!(s.trusted_proxies[0].contains("10.9.8.7".parse().unwrap()));
        assert!(!s.run_inbox && s.run_scheduler && !s.registration_open);
        assert_eq!(
            (s.database_lease, s.timeouts.header),
            (Duration::from_secs(5), Duration::from_secs(3))
        );
        // the database's bounds; a statement timeout of 0 is raised to the least one
        assert_eq!(
            (
                s.database_pool_size,
                s.database_statement_timeout_ms,
                s.database_wait_secs
            ),
            (3, 100, 7)
        );
        assert_eq!(
            (s.database_lock_timeout_ms, s.database_connect_timeout_secs),
            (15_000, 5)
        );
        assert_eq!(s.web_host, "example.org");
        assert_eq!(s.payment_plan.map(|p| (p.plan, p.price)), Some(("p".to_owned(), 700)));
        assert_eq!(s.disabled_loopers, [Worker::Emailer]);
        // a flag's default never hides the file's value; a flag given does
        let s = with_file("no-inbox = true\nlooper-period = 9\n", &["--no-inbox=false"]).unwrap();
        assert!(s.run_inbox);
        assert_eq!(s.looper_period, 9);
    }

    #[test]
    fn the_environment_is_below_flags_and_above_the_file() {
        // a variable no other test reads
        std::env::set_var("PIGEONHOLE_MAX_ITEMS_FREE", "11");
        let from_env = with_file("max-items-free = 9\n", &[]).map(|s| s.max_items_free);
        let from_flag = with_file("max-items-free = 9\n", &["--max-items-free", "12"]).map(|s| s.max_items_free);
        std::env::remove_var("PIGEONHOLE_MAX_ITEMS_FREE");
        let from_file = with_file("max-items-free = 9\n", &[]).map(|s| s.max_items_free);
        assert_eq!((from_flag.unwrap(), from_env.unwrap(), from_file.unwrap()), (12, 11, 9));
        // the defaults know no environment
        assert_eq!(Settings::with_data_dir("/a").max_items_free, 5);
    }
}
