//! `pigeonhole setup`: from nothing to a working account on a running server, in one step.
//! It makes (or finds, when run again) the account on both services, an inbox access key that
//! only adds items plus the scheduler's inbox trigger that uses it (so reminders come back
//! into the inbox), and this machine's own access keys for the client, which it writes to
//! the client settings. The password is used for this only and never stored.

use super::api::{Credentials, Service};
use super::settings::{self, ClientSettings};
use crate::config::SetupArgs;
use crate::domain::scheduler::models::normalise_inbox_url;
use reqwest::Method;
use serde_json::{json, Value};
use std::io::{BufRead, IsTerminal, Write};

/// The name of the inbox key the scheduler's deliveries use.
const TRIGGER_KEY_NAME: &str = "scheduler deliveries";

pub async fn run(args: SetupArgs) -> Result<(), String> {
    let path = settings::path(args.opts.client_config.as_deref())?;
    let existing = ClientSettings::load(&path)?;
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
    let inbox = Service::new("inbox", &args.inbox_url, http.clone());
    let scheduler = Service::new("scheduler", &args.scheduler_url, http);
    let mut done = Vec::new();

    // a password that does not log in on the inbox makes a new account: it must be one a
    // person means (long enough, typed the same twice at a terminal)
    if inbox.login(&username, &password).await?.is_none() {
        new_password(&password, asked)?;
    }
    let inbox_token = account(&inbox, &username, &password, &mut done).await?;
    let scheduler_token = account(&scheduler, &username, &password, &mut done).await?;
    let inbox = inbox.with(Credentials::Bearer(inbox_token));
    let scheduler = scheduler.with(Credentials::Bearer(scheduler_token));

    let key_name = format!("pigeonhole client on {}", hostname());
    let previous = existing.filter(|e| e.username == username);
    let inbox_key = client_key(
        &inbox,
        &username,
        &key_name,
        previous
            .as_ref()
            .filter(|e| e.inbox_url == inbox.base)
            .map(|e| e.inbox_key.as_str()),
        &mut done,
    )
    .await?;
    let scheduler_key = client_key(
        &scheduler,
        &username,
        &key_name,
        previous
            .as_ref()
            .filter(|e| e.scheduler_url == scheduler.base)
            .map(|e| e.scheduler_key.as_str()),
        &mut done,
    )
    .await?;
    inbox_trigger(&inbox, &scheduler, &username, &mut done).await?;
    time_zone(&scheduler, args.zone.as_deref(), &mut done).await?;

    let settings = ClientSettings {
        inbox_url: inbox.base.clone(),
        scheduler_url: scheduler.base.clone(),
        username: username.clone(),
        inbox_key,
        scheduler_key,
    };
    settings.save(&path)?;
    done.push(format!("wrote this machine's client settings to {}", path.display()));
    if args.opts.json {
        super::say(
            &json!({"username": username, "inbox-url": settings.inbox_url, "scheduler-url": settings.scheduler_url,
                   "client-config": path.display().to_string(), "done": done})
            .to_string(),
        );
    } else {
        super::say(&format!("Set up {username}:"));
        for d in &done {
            super::say(&format!("  - {d}"));
        }
        super::say(
            "\nTry: pigeonhole add buy milk · pigeonhole remind \"call mum\" --in 2h · pigeonhole inbox\n\
             If this server is only for you, close registration now: restart it with --registration closed.",
        );
    }
    Ok(())
}

/// The fewest characters of a new password.
const MIN_PASSWORD: usize = 8;

/// The password: from standard input (`--password-stdin`), `PIGEONHOLE_PASSWORD`, or asked
/// without echo at a terminal (then `true`: a new password is asked again to confirm it).
fn password(args: &SetupArgs) -> Result<(String, bool), String> {
    if args.password_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the password from standard input: {e}"))?;
        return Ok((line.trim_end_matches(['\n', '\r']).to_owned(), false));
    }
    if let Ok(p) = std::env::var("PIGEONHOLE_PASSWORD") {
        return Ok((p, false));
    }
    if !std::io::stdin().is_terminal() {
        return Err("no password: give --password-stdin or PIGEONHOLE_PASSWORD".into());
    }
    let p = rpassword::prompt_password("Password: ").map_err(|e| format!("cannot read the password: {e}"))?;
    Ok((p, true))
}

/// Checks a new account's password: at least [`MIN_PASSWORD`] characters, and at a
/// terminal typed the same a second time.
fn new_password(password: &str, asked: bool) -> Result<(), String> {
    check_new_password(password)?;
    if asked {
        let again = rpassword::prompt_password("The same password again, to be sure: ")
            .map_err(|e| format!("cannot read the password: {e}"))?;
        confirm(password, &again)?;
    }
    Ok(())
}

fn check_new_password(password: &str) -> Result<(), String> {
    let n = password.chars().count();
    if n < MIN_PASSWORD {
        return Err(format!(
            "a new account's password needs at least {MIN_PASSWORD} characters, this one has {n}: choose a longer one \
             (a few words are easy to remember); nothing was created"
        ));
    }
    Ok(())
}

fn confirm(password: &str, again: &str) -> Result<(), String> {
    if password != again {
        return Err("the two passwords differ: run `pigeonhole setup` again; nothing was created".into());
    }
    Ok(())
}

/// Sets the account's time zone to `given`, else to this machine's.
async fn time_zone(scheduler: &Service, given: Option<&str>, done: &mut Vec<String>) -> Result<(), String> {
    let (name, whose) = match given {
        Some(name) => (name.to_owned(), "as asked"),
        None => match super::machine_zone() {
            Some(name) => (name, "this machine's"),
            None => {
                done.push(
                    "could not tell this machine's time zone: set the account's with `pigeonhole zone NAME`".into(),
                );
                return Ok(());
            }
        },
    };
    let setting = super::zone_setting(&name)?;
    scheduler
        .ok(Method::PUT, "/account/settings", Some(&setting.to_json()))
        .await?;
    done.push(format!(
        "set the account's time zone to {} ({whose}; `pigeonhole zone NAME` changes it)",
        setting.name
    ));
    Ok(())
}

fn ask(prompt: &str) -> Result<String, String> {
    if !std::io::stdin().is_terminal() {
        return Err("no username: give --username or PIGEONHOLE_USERNAME".into());
    }
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the answer: {e}"))?;
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

/// Logs in to `service`, registering the account first when it does not exist yet; the
/// token.
async fn account(service: &Service, username: &str, password: &str, done: &mut Vec<String>) -> Result<String, String> {
    if let Some(token) = service.login(username, password).await? {
        done.push(format!("found the account on the {} service", service.name));
        return Ok(token);
    }
    let body = json!({"name": username, "password": password});
    let answer = service.call(Method::POST, "/register", Some(&body)).await?;
    match answer.status.as_u16() {
        // 204 from the inbox service, 200 from the scheduler (the originals' statuses)
        200 | 204 => done.push(format!("created the account on the {} service", service.name)),
        409 => {
            return Err(format!(
                "the username {username:?} is taken on the {} service, and the password is not its password",
                service.name
            ))
        }
        403 => {
            return Err(format!(
                "registration is closed on the {} service and {username:?} has no account there",
                service.name
            ))
        }
        _ => return Err(service.refusal("registering", &answer)),
    }
    service
        .login(username, password)
        .await?
        .ok_or_else(|| format!("the new account on the {} service does not log in", service.name))
}

/// The secret of this machine's access key on `service`: the one from the last set-up when
/// it still works, else a new key with every permission of the account (older keys of the
/// same name are deleted).
async fn client_key(
    service: &Service,
    username: &str,
    name: &str,
    previous: Option<&str>,
    done: &mut Vec<String>,
) -> Result<String, String> {
    if let Some(secret) = previous {
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
            done.push(format!(
                "kept this machine's access key on the {} service",
                service.name
            ));
            return Ok(secret.to_owned());
        }
    }
    let permissions = service.get_json("/permissions").await?;
    let secret = add_key(service, name, permissions).await?;
    delete_older_keys_named(service, name).await?;
    done.push(format!(
        "made an access key for this machine on the {} service",
        service.name
    ));
    Ok(secret)
}

/// Creates an access key; its secret.
async fn add_key(service: &Service, name: &str, permissions: Value) -> Result<String, String> {
    let created = service
        .post_json(
            "/access-key",
            &json!({"addAccessKeyName": name, "addAccessKeyPermissions": permissions}),
        )
        .await?;
    created["accessKeyCreatedKey"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("the {} service made a key without a secret", service.name))
}

/// Deletes the keys called `name` but the newest (the one just made).
async fn delete_older_keys_named(service: &Service, name: &str) -> Result<(), String> {
    let keys = service.get_json("/access-key").await?;
    let mut named: Vec<&Value> = keys
        .as_array()
        .into_iter()
        .flatten()
        .filter(|k| k["name"].as_str() == Some(name))
        .collect();
    // listed oldest first: the newest is the one just made
    named.pop();
    for key in named {
        if let Some(id) = key["uuid"].as_str() {
            service.ok(Method::DELETE, &format!("/access-key/{id}"), None).await?;
        }
    }
    Ok(())
}

/// The scheduler's inbox trigger into this inbox, made once with an inbox key that may only
/// add items.
async fn inbox_trigger(
    inbox: &Service,
    scheduler: &Service,
    username: &str,
    done: &mut Vec<String>,
) -> Result<(), String> {
    let url = normalise_inbox_url(&inbox.base).ok_or_else(|| format!("{} is not an inbox URL", inbox.base))?;
    let triggers = scheduler.get_json("/trigger").await?;
    let exists = triggers
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["info"]["typedTriggerInfoValue"]["inboxTriggerInfoUrl"].as_str() == Some(url.as_str()));
    if exists {
        done.push("found the scheduler's trigger into the inbox".into());
        return Ok(());
    }
    let secret = add_key(inbox, TRIGGER_KEY_NAME, json!(["PermitAdd"])).await?;
    let answer = scheduler
        .post_json(
            "/trigger/inbox",
            &json!({"addInboxTriggerUrl": url, "addInboxTriggerUsername": username, "addInboxTriggerAccessKey": secret}),
        )
        .await?;
    if let Some(reason) = answer["Left"].as_str() {
        return Err(format!("the scheduler could not reach the inbox at {url}: {reason}"));
    }
    done.push(format!(
        "linked the scheduler to the inbox at {url}: reminders arrive there"
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_passwords_are_long_enough_and_typed_the_same_twice() {
        let short = check_new_password("1234567").unwrap_err();
        assert!(short.contains("at least 8 characters, this one has 7"), "{short}");
        assert!(check_new_password("").is_err());
        assert!(check_new_password("äöüäöüäö").is_ok(), "characters, not bytes");
        assert!(check_new_password("correct horse").is_ok());
        assert!(confirm("correct horse", "correct horse").is_ok());
        assert!(confirm("correct horse", "correct hose").unwrap_err().contains("differ"));
    }
}
