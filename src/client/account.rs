//! The account as one person's (spec README decision 18; issue 27 points 3 and 4):
//! `pigeonhole key` (a capture-only inbox key for a phone, with the command that uses it and
//! its QR code), `pigeonhole password` (one password for both services) and
//! `pigeonhole delete-account` (both services' accounts, asked once).

use super::api::Service;
use super::error::ClientError;
use super::{queue, say, short, Client};
use crate::config::{DeleteAccountArgs, KeyArgs, PasswordArgs};
use reqwest::{Method, StatusCode};
use serde_json::json;
use std::io::{BufRead, IsTerminal, Write};

/// `text` quoted for a POSIX shell.
fn sh_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:@%+=,".contains(&b))
    {
        return text.to_owned();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The `curl` command that adds a note to the inbox at `base` with a key.
fn capture_command(base: &str, username: &str, secret: &str) -> String {
    format!(
        "curl -H {} -H {} --data-binary 'buy milk' {}",
        sh_quote(&format!("Username: {username}")),
        sh_quote(&format!("Access-Key: {secret}")),
        sh_quote(&format!("{}/inbox/text", base.trim_end_matches('/')))
    )
}

/// `text` as a QR code in the terminal: two modules per character with Unicode half blocks,
/// light modules drawn (as `qrencode -t UTF8` does, for a dark terminal), with the quiet
/// zone around it.
pub(crate) fn qr_code(text: &str) -> Result<String, ClientError> {
    use qrcode::render::unicode::Dense1x2;
    let code = qrcode::QrCode::new(text.as_bytes())
        .map_err(|e| ClientError::local(format!("cannot make a QR code of it: {e}")))?;
    Ok(code
        .render::<Dense1x2>()
        .dark_color(Dense1x2::Light)
        .light_color(Dense1x2::Dark)
        .quiet_zone(true)
        .build())
}

/// Whether `base` names this machine only (a phone cannot reach it).
fn is_loopback(base: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default().trim_matches(['[', ']']);
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

pub async fn key(args: KeyArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let name = args.name.trim();
    if name.is_empty() {
        return Err(ClientError::input("--name \"\": a key needs a name to be found again"));
    }
    let base = match &args.url {
        Some(url) => super::service_url(url)?,
        None => client.inbox.base.clone(),
    };
    let created = client
        .inbox
        .post_json(
            "/access-key",
            &json!({"addAccessKeyName": name, "addAccessKeyPermissions": ["PermitAdd"]}),
        )
        .await?;
    let secret = created["accessKeyCreatedKey"]
        .as_str()
        .ok_or(ClientError::answer("the inbox made a key without a secret"))?;
    let id = &created["accessKeyCreatedUUID"];
    let username = &client.settings.username;
    let curl = capture_command(&base, username, secret);
    if client.json {
        say(&json!({"id": id, "name": name, "username": username, "key": secret,
                    "url": format!("{base}/inbox/text"), "curl": curl})
        .to_string());
        return Ok(());
    }
    let qr = qr_code(&curl)?;
    say(&format!(
        "Made the access key {name:?} ({}) on the inbox: it may only add notes.\n\
         On a phone (a shortcut, Termux, any HTTP client) this adds a note, the words after --data-binary:\n\n\
         {curl}\n\n{qr}\n\
         The key is shown only now. It works until it is deleted (the inbox's `DELETE /access-key/{}`).",
        short(id),
        id.as_str().unwrap_or("ID")
    ));
    if is_loopback(&base) {
        eprintln!(
            "pigeonhole: {base} is this machine's own address, which a phone cannot reach: give --url with the \
             address the phone reaches the server at (the server must listen there, e.g. host = \"0.0.0.0\")"
        );
    }
    Ok(())
}

/// A line read from standard input, without its line break.
fn read_line(what: &str) -> Result<String, ClientError> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| ClientError::local(format!("cannot read {what} from standard input: {e}")))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_owned())
}

/// The old and the new password: two lines of standard input, or asked at a terminal (the
/// new one twice).
fn passwords(args: &PasswordArgs) -> Result<(String, String), ClientError> {
    if args.password_stdin {
        let old = read_line("the old password")?;
        let new = read_line("the new password")?;
        return Ok((old, new));
    }
    if !std::io::stdin().is_terminal() {
        return Err(ClientError::input(
            "no password: give --password-stdin (the current password on the first line, the new one on the second)",
        ));
    }
    let ask = |prompt: &str| {
        rpassword::prompt_password(prompt).map_err(|e| ClientError::local(format!("cannot read the password: {e}")))
    };
    let old = ask("Current password: ")?;
    let new = ask("New password: ")?;
    super::setup::check_new_password(&new, "nothing changed")?;
    let again = ask("The new password again, to be sure: ")?;
    if new != again {
        return Err(ClientError::input("the two new passwords differ: nothing changed"));
    }
    Ok((old, new))
}

pub async fn password(args: PasswordArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let (old, new) = passwords(&args)?;
    super::setup::check_new_password(&new, "nothing changed")?;
    if old == new {
        return Err(ClientError::input(
            "the new password is the current one: nothing changed",
        ));
    }
    let body = json!({"old-passphrase": old, "new-passphrase": new});
    let answer = client.inbox.call(Method::POST, "/account", Some(&body)).await?;
    match answer.status {
        s if s.is_success() => {}
        StatusCode::FORBIDDEN => return Err(ClientError::input("the current password is wrong: nothing changed")),
        _ => return Err(client.inbox.refusal("changing the password", &answer)),
    }
    // the server changes the scheduler's account too when the old password opened it
    let http = super::http_client()?;
    let scheduler = Service::new("scheduler", &client.scheduler.base, http);
    let both = scheduler.login(&client.settings.username, &new).await?.is_some();
    let changed: Vec<&str> = if both {
        vec!["inbox", "scheduler"]
    } else {
        vec!["inbox"]
    };
    client.print(&json!({ "changed": changed }), || {
        if both {
            "Changed the password on both services (inbox and scheduler). This machine's access keys keep working."
                .into()
        } else {
            format!(
                "Changed the password on the inbox service. The scheduler's account {} at {} had another password \
                 and keeps it. This machine's access keys keep working.",
                client.settings.username, client.scheduler.base
            )
        }
    });
    Ok(())
}

pub async fn delete(args: DeleteAccountArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let username = client.settings.username.clone();
    if !args.yes {
        if !std::io::stdin().is_terminal() {
            return Err(ClientError::input(
                "not asked at a terminal: give --yes to delete the account without a question",
            ));
        }
        eprint!(
            "This deletes the account {username} on both services (the inbox at {} and the scheduler at {}) with \
             every note, reminder, trigger and access key in them. Type the username to delete it: ",
            client.inbox.base, client.scheduler.base
        );
        let _ = std::io::stderr().flush();
        let answer = read_line("the answer")?;
        if answer.trim() != username {
            return Err(ClientError::input(format!(
                "nothing was deleted: the answer was not {username:?}"
            )));
        }
    }
    // the scheduler first: its deliveries into the inbox end with it
    let scheduler = client.scheduler.call(Method::DELETE, "/account", None).await?;
    let scheduler_gone = match scheduler.status {
        s if s.is_success() => true,
        // run again after the inbox failed: this key went with the account
        StatusCode::UNAUTHORIZED => false,
        _ => {
            return Err(client
                .scheduler
                .refusal("deleting the account", &scheduler)
                .noted("nothing was deleted"))
        }
    };
    if let Err(e) = client.inbox.ok(Method::DELETE, "/account", None).await {
        return Err(if scheduler_gone {
            ClientError::local(format!(
                "the scheduler's account is deleted, but the inbox's is not ({e}): run `pigeonhole delete-account` again"
            ))
        } else {
            e
        });
    }
    let dropped = forget(&client.path)?;
    let json = json!({"deleted": username, "client-config-removed": client.path.display().to_string(),
                      "notes-saved-locally-dropped": dropped});
    client.print(&json, || {
        let mut said = format!(
            "Deleted the account {username} on both services. This machine's client settings ({}) are removed.",
            client.path.display()
        );
        if dropped > 0 {
            said.push_str(&format!(" {dropped} note(s) saved locally for it were dropped."));
        }
        said
    });
    Ok(())
}

/// Removes the client settings at `path` and their local queue: the notes it held.
fn forget(path: &std::path::Path) -> Result<usize, ClientError> {
    let dropped = queue::discard(path)?;
    match std::fs::remove_file(path) {
        Ok(()) => Ok(dropped),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(dropped),
        Err(e) => Err(ClientError::local(format!(
            "the account is deleted, but {} cannot be removed: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capture_command_is_quoted_for_the_shell() {
        let curl = capture_command("http://192.0.2.1:8001/", "alice", "00ff");
        assert_eq!(
            curl,
            "curl -H 'Username: alice' -H 'Access-Key: 00ff' --data-binary 'buy milk' http://192.0.2.1:8001/inbox/text"
        );
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert!(is_loopback("http://127.0.0.1:8001") && is_loopback("http://localhost:8001"));
        assert!(is_loopback("http://[::1]:8001") && !is_loopback("http://192.0.2.1:8001"));
    }

    #[test]
    fn the_qr_code_is_drawn_with_half_blocks() {
        let qr = qr_code("curl -H 'Username: alice' http://192.0.2.1:8001/inbox/text").unwrap();
        let lines: Vec<&str> = qr.lines().collect();
        assert!(lines.len() > 10, "{qr}");
        assert!(qr.chars().all(|c| matches!(c, ' ' | '▀' | '▄' | '█' | '\n')), "{qr}");
        // the quiet zone: the first line is all light (drawn)
        assert!(lines[0].chars().all(|c| c == '█'), "{qr}");
    }
}
