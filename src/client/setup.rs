//! `pigeonhole setup`: from nothing to a working account on a running server, in one step.
//! It makes (or finds, when run again) the account on both services, an inbox access key that
//! only adds items plus the scheduler's inbox trigger that uses it (so reminders come back
//! into the inbox), and this machine's own access keys for the client, which it writes to
//! the client settings. The password is used for this only and never stored.
//!
//! It never harms what exists (issue 27 point 5):
//! - this machine's keys are named per client settings file (the host name and a random
//!   suffix, kept in the settings) and only this file's own older key is ever revoked, by
//!   its id, after the new settings are written: another machine's key is never touched;
//! - the account's time zone changes only with `--zone` or for an account this run made;
//! - the checks and logins come first, and when a later step fails, what this run made
//!   (accounts, keys, the trigger, the zone) is undone, so a failed setup changes nothing.

use super::api::{Credentials, Service};
use super::error::ClientError;
use super::settings::{self, ClientSettings};
use crate::config::SetupArgs;
use crate::domain::scheduler::models::normalise_inbox_url;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, IsTerminal, Write};

/// The name of the inbox key the scheduler's deliveries use.
const TRIGGER_KEY_NAME: &str = "scheduler deliveries";

/// Something this run made, and how to take it back.
enum Made {
    /// An account (the service with its token): `DELETE /account`.
    Account(Service),
    /// An access key: `DELETE /access-key/:id`.
    Key(Service, String),
    /// A trigger: `DELETE /trigger/delete/:id`.
    Trigger(Service, String),
    /// The account's settings before this run changed them: `PUT /account/settings`.
    Settings(Service, Value),
}

impl Made {
    async fn undo(&self) -> Result<(), ClientError> {
        match self {
            Made::Account(s) => s.ok(Method::DELETE, "/account", None).await.map(drop),
            Made::Key(s, id) => s.ok(Method::DELETE, &format!("/access-key/{id}"), None).await.map(drop),
            Made::Trigger(s, id) => s
                .ok(Method::DELETE, &format!("/trigger/delete/{id}"), None)
                .await
                .map(drop),
            Made::Settings(s, previous) => s.ok(Method::PUT, "/account/settings", Some(previous)).await.map(drop),
        }
    }
}

/// One run: the steps said, what was made.
#[derive(Default)]
struct Run {
    done: Vec<String>,
    made: Vec<Made>,
}

impl Run {
    /// Takes back what this run made, the latest first; `error` with what became of it.
    async fn undo(self, error: ClientError) -> ClientError {
        if self.made.is_empty() {
            return error.noted("nothing was changed");
        }
        let mut failures = Vec::new();
        for made in self.made.iter().rev() {
            if let Err(e) = made.undo().await {
                failures.push(e.to_string());
            }
        }
        if failures.is_empty() {
            error.noted("what this run had made is undone, nothing was changed")
        } else {
            error.noted(format!(
                "undoing what this run had made failed too ({}): run `pigeonhole setup` again",
                failures.join("; ")
            ))
        }
    }
}

/// What the steps before the settings file leave for it.
struct Outcome {
    inbox_key: Key,
    scheduler_key: Key,
    zone_notice: Option<String>,
}

/// One of this machine's access keys.
struct Key {
    secret: String,
    /// Its id (`None` for a key kept from settings written before ids were kept).
    id: Option<String>,
    /// The id of this settings file's own older key it replaces, to revoke once the new
    /// settings are written.
    replaces: Option<String>,
}

pub async fn run(args: SetupArgs) -> Result<(), ClientError> {
    let path = settings::path(args.opts.client_config.as_deref())?;
    let existing = ClientSettings::load(&path)?;
    let inbox_url = super::service_url(&args.inbox_url)?;
    let scheduler_url = super::service_url(&args.scheduler_url)?;
    // checked before anything is asked or changed
    if let Some(zone) = &args.zone {
        super::zone_setting(zone)?;
    }
    let username = match args
        .username
        .clone()
        .or_else(|| existing.as_ref().map(|e| e.username.clone()))
    {
        Some(u) => u,
        None => ask("Username: ")?,
    };
    let (password, asked) = password(&args)?;
    let http = super::http_client()?;
    let inbox = Service::new("inbox", &inbox_url, http.clone());
    let scheduler = Service::new("scheduler", &scheduler_url, http);

    // 1. the logins: nothing changes yet
    let inbox_token = inbox.login(&username, &password).await?;
    let scheduler_token = scheduler.login(&username, &password).await?;
    if inbox_token.is_none() || scheduler_token.is_none() {
        // an account is to be made: a password a person means (long enough, typed the same
        // twice at a terminal)
        new_password(&username, &password, asked)?;
    }
    let key_name = existing.as_ref().and_then(|e| e.key_name.clone()).unwrap_or_else(|| {
        format!(
            "pigeonhole client on {} ({})",
            hostname(),
            hex::encode(crate::domain::wire::random_bytes::<3>())
        )
    });
    let previous = existing.as_ref().filter(|e| e.username == username);

    // 2. the changes, undone when a later one fails
    let mut run = Run::default();
    let steps = async {
        let inbox = account(&inbox, inbox_token, &username, &password, &mut run).await?;
        let new_scheduler_account = scheduler_token.is_none();
        let scheduler = account(&scheduler, scheduler_token, &username, &password, &mut run).await?;
        let inbox_key = client_key(
            &inbox,
            &username,
            &key_name,
            previous
                .filter(|e| e.inbox_url == inbox.base)
                .map(|e| (e.inbox_key.as_str(), e.inbox_key_id.as_deref())),
            &mut run,
        )
        .await?;
        let scheduler_key = client_key(
            &scheduler,
            &username,
            &key_name,
            previous
                .filter(|e| e.scheduler_url == scheduler.base)
                .map(|e| (e.scheduler_key.as_str(), e.scheduler_key_id.as_deref())),
            &mut run,
        )
        .await?;
        inbox_trigger(&inbox, &scheduler, &username, &mut run).await?;
        let zone_notice = time_zone(&scheduler, args.zone.as_deref(), new_scheduler_account, &mut run).await?;
        Ok::<_, ClientError>((
            inbox,
            scheduler,
            Outcome {
                inbox_key,
                scheduler_key,
                zone_notice,
            },
        ))
    }
    .await;
    let (inbox, scheduler, outcome) = match steps {
        Ok(done) => done,
        Err(e) => return Err(run.undo(e).await),
    };

    // 3. the settings file: the new keys are in use from here on
    let settings = ClientSettings {
        inbox_url: inbox.base.clone(),
        scheduler_url: scheduler.base.clone(),
        username: username.clone(),
        inbox_key: outcome.inbox_key.secret.clone(),
        scheduler_key: outcome.scheduler_key.secret.clone(),
        key_name: Some(key_name.clone()),
        inbox_key_id: outcome.inbox_key.id.clone(),
        scheduler_key_id: outcome.scheduler_key.id.clone(),
        zone_notice: outcome
            .zone_notice
            .or_else(|| existing.as_ref().and_then(|e| e.zone_notice.clone())),
    };
    if let Err(e) = settings.save(&path) {
        return Err(run.undo(e).await);
    }
    run.done
        .push(format!("wrote this machine's client settings to {}", path.display()));

    // 4. only now this settings file's own older keys go
    for (service, key) in [(&inbox, &outcome.inbox_key), (&scheduler, &outcome.scheduler_key)] {
        if let Some(old) = &key.replaces {
            match service.ok(Method::DELETE, &format!("/access-key/{old}"), None).await {
                Ok(_) => run.done.push(format!(
                    "revoked this machine's older access key on the {} service",
                    service.name
                )),
                Err(e) => run.done.push(format!(
                    "could not revoke this machine's older access key {old} on the {} service ({e}): it no longer works anyway",
                    service.name
                )),
            }
        }
    }
    let done = run.done;
    if args.opts.json {
        super::say(
            &json!({"username": username, "inbox-url": settings.inbox_url, "scheduler-url": settings.scheduler_url,
                   "client-config": path.display().to_string(), "key-name": key_name, "done": done})
            .to_string(),
        );
    } else {
        super::say(&format!("Set up {username}:"));
        for d in &done {
            super::say(&format!("  - {d}"));
        }
        super::say(&format!(
            "\nTry: pigeonhole add buy milk · pigeonhole remind \"call mum\" --in 2h · pigeonhole inbox\n{}",
            close_registration(packaged())
        ));
    }
    Ok(())
}

/// Whether this is the Debian package's binary, configured by its settings file.
fn packaged() -> bool {
    std::env::current_exe().is_ok_and(|p| p == std::path::Path::new("/usr/bin/pigeonhole"))
        && std::path::Path::new(PACKAGE_SETTINGS).exists()
}

/// The Debian package's settings file (pkg/build-deb).
const PACKAGE_SETTINGS: &str = "/etc/pigeonhole/pigeonhole.toml";

/// How to close registration: in the package's settings file, else with the flag.
fn close_registration(packaged: bool) -> String {
    if packaged {
        format!(
            "If this server is only for you, close registration now: set registration = \"closed\" in \
             {PACKAGE_SETTINGS} and run `sudo systemctl restart pigeonhole`."
        )
    } else {
        "If this server is only for you, close registration now: restart it with --registration closed \
         (or registration = \"closed\" in its --config file)."
            .into()
    }
}

/// The fewest characters of a new password.
const MIN_PASSWORD: usize = 8;

/// The password: from standard input (`--password-stdin`), `PIGEONHOLE_PASSWORD`, or asked
/// without echo at a terminal (then `true`: a new password is asked again to confirm it).
fn password(args: &SetupArgs) -> Result<(String, bool), ClientError> {
    if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| ClientError::local(format!("cannot read the password from standard input: {e}")))?;
        return Ok((line.trim_end_matches(['\n', '\r']).to_owned(), false));
    }
    if let Ok(p) = std::env::var("PIGEONHOLE_PASSWORD") {
        return Ok((p, false));
    }
    if !std::io::stdin().is_terminal() {
        return Err(ClientError::input(
            "no password: give --password-stdin or PIGEONHOLE_PASSWORD",
        ));
    }
    let p = rpassword::prompt_password("Password: ")
        .map_err(|e| ClientError::local(format!("cannot read the password: {e}")))?;
    Ok((p, true))
}

/// Checks a new account's password: at least [`MIN_PASSWORD`] characters, and at a
/// terminal typed the same a second time.
fn new_password(username: &str, password: &str, asked: bool) -> Result<(), ClientError> {
    check_new_password(password, "nothing was created")?;
    if asked {
        let again = rpassword::prompt_password(format!(
            "No account {username} opens with this password: to create it, the same password again, to be sure: "
        ))
        .map_err(|e| ClientError::local(format!("cannot read the password: {e}")))?;
        confirm(password, &again)?;
    }
    Ok(())
}

/// At least [`MIN_PASSWORD`] characters, not all of them spaces; `unchanged` says what the
/// refusal left as it was.
pub(super) fn check_new_password(password: &str, unchanged: &str) -> Result<(), ClientError> {
    if !password.is_empty() && password.chars().all(char::is_whitespace) {
        return Err(ClientError::input(format!(
            "a new password needs a character other than spaces: choose another one; {unchanged}"
        )));
    }
    let n = password.chars().count();
    if n < MIN_PASSWORD {
        return Err(ClientError::input(format!(
            "a new password needs at least {MIN_PASSWORD} characters, this one has {n}: choose a longer one \
             (a few words are easy to remember); {unchanged}"
        )));
    }
    Ok(())
}

fn confirm(password: &str, again: &str) -> Result<(), ClientError> {
    if password != again {
        return Err(ClientError::input(
            "the two passwords differ: run `pigeonhole setup` again; nothing was created",
        ));
    }
    Ok(())
}

/// The account's time zone: set to `given` (`--zone`), or for an account this run made to
/// this machine's; otherwise left as it is, and when it differs from this machine's the
/// output says so once (the "machine / account" pair, kept in the settings so that the
/// commands do not say it again).
async fn time_zone(
    scheduler: &Service,
    given: Option<&str>,
    new_account: bool,
    run: &mut Run,
) -> Result<Option<String>, ClientError> {
    let machine = super::machine_zone();
    let (name, whose) = match (given, &machine) {
        (Some(name), _) => (name.to_owned(), "as asked"),
        (None, Some(name)) if new_account => (name.clone(), "this machine's"),
        (None, None) if new_account => {
            run.done
                .push("could not tell this machine's time zone: set the account's with `pigeonhole zone NAME`".into());
            return Ok(None);
        }
        (None, _) => {
            let current = scheduler.get_json("/account/settings").await?;
            let account = current["timezone"]["name"].as_str().unwrap_or("UTC").to_owned();
            let notice = machine.as_deref().and_then(|m| super::zone_notice(m, &account));
            run.done.push(match (&machine, &notice) {
                (Some(m), Some(_)) => format!(
                    "left the account's time zone at {account}; this machine's is {m} (`pigeonhole zone {m}` changes it)"
                ),
                _ => format!("kept the account's time zone, {account}"),
            });
            return Ok(notice);
        }
    };
    let setting = super::zone_setting(&name)?;
    if !new_account {
        let previous = scheduler.get_json("/account/settings").await?;
        run.made.push(Made::Settings(scheduler.clone(), previous));
    }
    scheduler
        .ok(Method::PUT, "/account/settings", Some(&setting.to_json()))
        .await?;
    run.done.push(format!(
        "set the account's time zone to {} ({whose}; `pigeonhole zone NAME` changes it)",
        setting.name
    ));
    Ok(None)
}

fn ask(prompt: &str) -> Result<String, ClientError> {
    if !std::io::stdin().is_terminal() {
        return Err(ClientError::input(
            "no username: give --username or PIGEONHOLE_USERNAME",
        ));
    }
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| ClientError::local(format!("cannot read the answer: {e}")))?;
    Ok(line.trim().to_owned())
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "this machine".into())
}

/// The service with a token of the account: the login's, else the account is registered
/// first (the login failed: this is a new account) and undone if a later step fails.
async fn account(
    service: &Service,
    token: Option<String>,
    username: &str,
    password: &str,
    run: &mut Run,
) -> Result<Service, ClientError> {
    if let Some(token) = token {
        run.done
            .push(format!("found the account on the {} service", service.name));
        return Ok(service.with(Credentials::Bearer(token)));
    }
    let body = json!({"name": username, "password": password});
    let answer = service.call(Method::POST, "/register", Some(&body)).await?;
    match answer.status.as_u16() {
        // 204 from the inbox service, 200 from the scheduler (the originals' statuses)
        200 | 204 => {}
        409 => {
            return Err(ClientError::input(format!(
                "wrong password for {username} on the {} service (the account exists there): give its password",
                service.name
            )))
        }
        403 => {
            return Err(ClientError::input(format!(
                "registration is closed on the {} service and {username:?} has no account there",
                service.name
            )))
        }
        _ => return Err(service.refusal("registering", &answer)),
    }
    let token = service.login(username, password).await?.ok_or_else(|| {
        ClientError::answer(format!(
            "the new account on the {} service does not log in",
            service.name
        ))
    })?;
    let service = service.with(Credentials::Bearer(token));
    run.made.push(Made::Account(service.clone()));
    run.done
        .push(format!("created the account on the {} service", service.name));
    Ok(service)
}

/// This machine's access key on `service`: the one of this settings file (`previous`:
/// secret and id) when it still works, else a new key named `name` with every permission
/// of the account, which replaces the previous one once the settings are written.
async fn client_key(
    service: &Service,
    username: &str,
    name: &str,
    previous: Option<(&str, Option<&str>)>,
    run: &mut Run,
) -> Result<Key, ClientError> {
    if let Some((secret, id)) = previous {
        let with_key = service.with(Credentials::Key {
            username: username.to_owned(),
            secret: secret.to_owned(),
        });
        if with_key
            .call(Method::GET, "/permissions", None)
            .await?
            .status
            .is_success()
        {
            run.done.push(format!(
                "kept this machine's access key on the {} service",
                service.name
            ));
            return Ok(Key {
                secret: secret.to_owned(),
                id: id.map(str::to_owned),
                replaces: None,
            });
        }
    }
    let permissions = service.get_json("/permissions").await?;
    let (secret, id) = add_key(service, name, permissions).await?;
    run.made.push(Made::Key(service.clone(), id.clone()));
    run.done.push(format!(
        "made an access key for this machine on the {} service ({name})",
        service.name
    ));
    Ok(Key {
        secret,
        id: Some(id),
        replaces: previous.and_then(|(_, id)| id.map(str::to_owned)),
    })
}

/// Creates an access key; its secret and id.
async fn add_key(service: &Service, name: &str, permissions: Value) -> Result<(String, String), ClientError> {
    let created = service
        .post_json(
            "/access-key",
            &json!({"addAccessKeyName": name, "addAccessKeyPermissions": permissions}),
        )
        .await?;
    let field = |key: &str| {
        created[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ClientError::answer(format!("the {} service made a key without its {key}", service.name)))
    };
    Ok((field("accessKeyCreatedKey")?, field("accessKeyCreatedUUID")?))
}

/// The scheduler's inbox trigger into this inbox, made once with an inbox key that may only
/// add items.
async fn inbox_trigger(inbox: &Service, scheduler: &Service, username: &str, run: &mut Run) -> Result<(), ClientError> {
    let url = normalise_inbox_url(&inbox.base)
        .ok_or_else(|| ClientError::input(format!("{} is not an inbox URL", inbox.base)))?;
    let triggers = scheduler.get_json("/trigger").await?;
    let exists = triggers
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["info"]["typedTriggerInfoValue"]["inboxTriggerInfoUrl"].as_str() == Some(url.as_str()));
    if exists {
        run.done.push("found the scheduler's trigger into the inbox".into());
        return Ok(());
    }
    let (secret, key_id) = add_key(inbox, TRIGGER_KEY_NAME, json!(["PermitAdd"])).await?;
    run.made.push(Made::Key(inbox.clone(), key_id));
    let answer = scheduler
        .post_json(
            "/trigger/inbox",
            &json!({"addInboxTriggerUrl": url, "addInboxTriggerUsername": username, "addInboxTriggerAccessKey": secret}),
        )
        .await?;
    if let Some(reason) = answer["Left"].as_str() {
        return Err(ClientError::answer(format!(
            "the scheduler could not reach the inbox at {url}: {reason}"
        )));
    }
    if let Some(id) = answer["Right"].as_str() {
        run.made.push(Made::Trigger(scheduler.clone(), id.to_owned()));
    }
    run.done.push(format!(
        "linked the scheduler to the inbox at {url}: reminders arrive there"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_passwords_are_long_enough_and_typed_the_same_twice() {
        let short = check_new_password("1234567", "nothing was created")
            .unwrap_err()
            .to_string();
        assert!(short.contains("at least 8 characters, this one has 7"), "{short}");
        assert!(short.ends_with("; nothing was created"), "{short}");
        assert!(check_new_password("", "").is_err());
        for blank in ["   ", "          ", "\t \u{a0}\u{3000}        "] {
            let err = check_new_password(blank, "nothing changed").unwrap_err().to_string();
            assert!(err.contains("other than spaces"), "{blank:?}: {err}");
        }
        assert!(check_new_password("  a     ", "").is_ok());
        assert!(check_new_password("äöüäöüäö", "").is_ok(), "characters, not bytes");
        assert!(check_new_password("correct horse", "").is_ok());
        assert!(confirm("correct horse", "correct horse").is_ok());
        assert!(confirm("correct horse", "correct hose")
            .unwrap_err()
            .to_string()
            .contains("differ"));
    }

    #[test]
    fn package_users_are_told_to_edit_the_settings_file() {
        let packaged = close_registration(true);
        assert!(
            packaged.contains("registration = \"closed\" in /etc/pigeonhole/pigeonhole.toml")
                && packaged.contains("systemctl restart pigeonhole")
                && !packaged.contains("--registration"),
            "{packaged}"
        );
        assert!(close_registration(false).contains("restart it with --registration closed"));
    }
}
