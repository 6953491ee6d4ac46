//! E-mail: the texts of scheduler.md §8 and the two transports, SMTP (lettre over rustls:
//! plain with STARTTLS when offered, STARTTLS required when there are credentials, or
//! implicit TLS) and the zero-config outbox directory of `.eml` files.

use crate::config::{parse_smtp_url, Settings, SmtpUrl};
use crate::domain::email::Message;
use crate::domain::wire;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

/// Why sending failed, and whether trying again later may help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    pub transient: bool,
    pub reason: String,
}

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Outbox(PathBuf),
}

pub struct Mailer {
    transport: Transport,
    from: Mailbox,
}

/// `<web-host>` and `<base>` of scheduler.md §8.1.
pub fn web_host_and_base(settings: &Settings) -> (String, String) {
    let host = settings.web_host.clone();
    let base = if host.starts_with("http://") || host.starts_with("https://") {
        host.trim_end_matches('/').to_owned()
    } else {
        format!("http://{host}")
    };
    (host, base)
}

/// How a connection to the mail server is secured (scheduler.md §8.1): `smtps` is implicit
/// TLS; `smtp` with a user and password requires STARTTLS, so the credentials are never sent
/// in clear (a server that does not offer it fails the attempt, a transient failure);
/// `smtp` without credentials uses STARTTLS when the server offers it, plain otherwise.
fn tls_mode(u: &SmtpUrl, params: TlsParameters) -> Tls {
    match (u.implicit_tls, u.credentials.is_some()) {
        (true, _) => Tls::Wrapper(params),
        (false, true) => Tls::Required(params),
        (false, false) => Tls::Opportunistic(params),
    }
}

/// Builds the SMTP transport (TLS as [`tls_mode`] says).
fn smtp_transport(url: &str) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    let u = parse_smtp_url(url).map_err(|e| e.to_string())?;
    let params = TlsParameters::new(u.host.clone()).map_err(|e| format!("TLS set-up for {}: {e}", u.host))?;
    let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(u.host.clone())
        .port(u.port)
        .timeout(Some(Duration::from_secs(10)))
        .tls(tls_mode(&u, params));
    if let Some((user, pass)) = u.credentials {
        builder = builder.credentials(Credentials::new(user, pass));
    }
    Ok(builder.build())
}

impl Mailer {
    pub fn new(settings: &Settings) -> Result<Mailer, String> {
        let address = settings
            .email_from
            .parse()
            .map_err(|e| format!("invalid --email-from {:?}: {e}", settings.email_from))?;
        let transport = match &settings.smtp_url {
            Some(url) => Transport::Smtp(smtp_transport(url)?),
            None => Transport::Outbox(settings.data_dir.join("outbox")),
        };
        Ok(Mailer {
            transport,
            from: Mailbox::new(Some("Pigeonhole".into()), address),
        })
    }

    fn build(&self, m: &Message) -> Result<lettre::Message, SendError> {
        let permanent = |reason: String| SendError {
            transient: false,
            reason,
        };
        let to: Mailbox =
            m.to.parse()
                .map_err(|e| permanent(format!("invalid recipient {:?}: {e}", m.to)))?;
        lettre::Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(m.subject.clone())
            .date_now()
            .message_id(Some(format!("<{}@pigeonhole>", wire::new_uuid())))
            .multipart(
                MultiPart::alternative()
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_PLAIN)
                            .body(m.text.clone()),
                    )
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_HTML)
                            .body(m.html.clone()),
                    ),
            )
            .map_err(|e| permanent(format!("could not build the message: {e}")))
    }

    /// Sends one message (or writes it to the outbox).
    pub async fn send(&self, m: &Message) -> Result<(), SendError> {
        let message = self.build(m)?;
        match &self.transport {
            Transport::Smtp(smtp) => smtp.send(message).await.map(|_| ()).map_err(|e| SendError {
                transient: !e.is_permanent(),
                reason: format!("sending to {} failed: {e}", m.to),
            }),
            Transport::Outbox(dir) => {
                let dir = dir.clone();
                let bytes = message.formatted();
                tokio::task::spawn_blocking(move || write_eml(&dir, &bytes))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r.map_err(|e| e.to_string()))
                    .map_err(|reason| SendError {
                        transient: true,
                        reason: format!("could not write to the outbox: {reason}"),
                    })
            }
        }
    }
}

/// Writes `<UTC time>-<uuid>.eml` under a temporary name, fsyncs, renames.
fn write_eml(dir: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        // the new directory's name must survive a power cut too
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
    }
    let stamp = jiff::Timestamp::now().strftime("%Y%m%dT%H%M%S%6fZ").to_string();
    let name = format!("{stamp}-{}.eml", Uuid::new_v4());
    crate::files::write(&dir.join(name), crate::files::Access::Shared, bytes)
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_page(paragraphs: &[String]) -> String {
    let body: String = paragraphs
        .iter()
        .map(|p| format!("<p>{}</p>\n", html_escape(p).replace('\n', "<br>\n")))
        .collect();
    format!("<!DOCTYPE html>\n<html><body>\n{body}</body></html>\n")
}

/// The verification e-mail (scheduler.md §8.2).
pub fn verification(settings: &Settings, to: &str, trigger: Uuid, key: &str) -> Message {
    let (host, base) = web_host_and_base(settings);
    let link = format!("POST {base}/trigger/email/verify/{trigger}/{key}");
    let page = format!("{base}/verify-email/{trigger}/{key}");
    let text = format!(
        "This address was added as an e-mail trigger of a scheduler account at {host}.\n\
         To confirm it, open this page and press its button:\n\n\
         {page}\n\n\
         Or the account owner confirms it by calling, with the account's token:\n\n\
         {link}\n\n\
         Trigger: {trigger}\n\
         Key: {key}\n\n\
         If you did not expect this message, ignore it: nothing is sent to this address\n\
         unless the trigger is verified.\n"
    );
    let html = html_page(&[
        format!("This address was added as an e-mail trigger of a scheduler account at {host}. To confirm it, open this page and press its button:"),
        page,
        "Or the account owner confirms it by calling, with the account's token:".into(),
        link,
        format!("Trigger: {trigger}\nKey: {key}"),
        "If you did not expect this message, ignore it: nothing is sent to this address unless the trigger is verified.".into(),
    ]);
    Message {
        to: to.to_owned(),
        subject: "Please verify your e-mail trigger".into(),
        text,
        html,
    }
}

/// `[Pigeonhole] ` and the first 50 characters of the content without control characters.
pub fn triggered_subject(content: &str) -> String {
    let clean: String = content.chars().filter(|c| !c.is_control()).take(50).collect();
    format!("[Pigeonhole] {clean}")
}

/// `text` as an e-mail may carry it (issue 29 point 1): control characters other than line
/// breaks and tabs (NUL, escape, …; RFC 5322 has no place for them, and PostgreSQL's text
/// none for NUL) become U+FFFD, as bytes that are not UTF-8 do.
pub fn mailable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\r' | '\t' => c,
            c if c.is_control() => char::REPLACEMENT_CHARACTER,
            c => c,
        })
        .collect()
}

/// The triggered-item e-mail (scheduler.md §8.3).
pub fn triggered(settings: &Settings, to: &str, content: &[u8]) -> Message {
    let (host, _) = web_host_and_base(settings);
    let content = mailable(&String::from_utf8_lossy(content));
    let text = format!(
        "A scheduled item was triggered:\n\n{content}\n\n\
         You receive this because this address is a verified e-mail trigger at {host}.\n"
    );
    let html = html_page(&[
        "A scheduled item was triggered:".into(),
        content.to_string(),
        format!("You receive this because this address is a verified e-mail trigger at {host}."),
    ]);
    Message {
        to: to.to_owned(),
        subject: triggered_subject(&content),
        text,
        html,
    }
}

/// The admin notification (scheduler.md §8.4).
pub fn admin_notice(to: &str, worker: &str, error: &str) -> Message {
    let error = mailable(error);
    let text = format!(
        "The worker {worker} failed repeatedly; it goes on trying, and runs again once the cause is gone.\n\nLast error: {error}\n"
    );
    Message {
        to: to.to_owned(),
        subject: "Pigeonhole admin notification".into(),
        html: html_page(&[
            format!("The worker {worker} failed repeatedly; it goes on trying, and runs again once the cause is gone."),
            format!("Last error: {error}"),
        ]),
        text,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mails_carry_no_control_characters_but_line_breaks_and_tabs() {
        assert_eq!(
            super::mailable("a\0b\u{1b}[31m\u{7f}\u{85}c\r\n\td"),
            "a\u{fffd}b\u{fffd}[31m\u{fffd}\u{fffd}c\r\n\td"
        );
        assert_eq!(super::mailable("plain ünïcödé ☃"), "plain ünïcödé ☃");
    }

    use super::*;

    #[test]
    fn subjects_drop_control_characters() {
        let s = triggered_subject("Water\nthe\tplants and then do a lot more things until it is long enough END");
        assert_eq!(s, "[Pigeonhole] Watertheplants and then do a lot more things until");
        assert_eq!(triggered_subject("Grüße ✓"), "[Pigeonhole] Grüße ✓");
    }

    #[test]
    fn link_base() {
        let mut s = Settings::with_data_dir("/tmp/x");
        assert_eq!(web_host_and_base(&s).1, "http://localhost:8002");
        s.web_host = "https://tickle.example.org/".into();
        assert_eq!(web_host_and_base(&s).1, "https://tickle.example.org");
    }

    #[test]
    fn smtp_url_parts() {
        let u = parse_smtp_url("smtps://user:p%40ss@Mail.example.org").unwrap();
        assert_eq!(
            (u.implicit_tls, u.host.as_str(), u.port),
            (true, "Mail.example.org", 465)
        );
        assert_eq!(u.credentials, Some(("user".into(), "p@ss".into())));
        let u = parse_smtp_url("smtp://[::1]:2525").unwrap();
        assert_eq!(
            (u.implicit_tls, u.host.as_str(), u.port, u.credentials),
            (false, "::1", 2525, None)
        );
        assert_eq!(parse_smtp_url("smtp://127.0.0.1").unwrap().port, 25);
        for bad in ["http://x", "smtp://:25", "smtp://x:port", "smtp//x", "smtp://[::1"] {
            assert!(parse_smtp_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_require_tls() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mode = |url: &str| {
            let u = parse_smtp_url(url).unwrap();
            let params = TlsParameters::new(u.host.clone()).unwrap();
            match tls_mode(&u, params) {
                Tls::Wrapper(_) => "implicit",
                Tls::Required(_) => "required",
                Tls::Opportunistic(_) => "opportunistic",
                _ => "none",
            }
        };
        assert_eq!(mode("smtp://user:secret@mail.example.org:587"), "required");
        assert_eq!(mode("smtp://user@mail.example.org"), "required");
        assert_eq!(mode("smtp://mail.example.org"), "opportunistic");
        assert_eq!(mode("smtps://user:secret@mail.example.org"), "implicit");
        assert_eq!(mode("smtps://mail.example.org"), "implicit");
    }

    #[tokio::test]
    async fn smtp_urls() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        assert!(smtp_transport("smtp://127.0.0.1:2525").is_ok());
        assert!(smtp_transport("smtps://user:p%40ss@mail.example.org").is_ok());
        assert!(smtp_transport("http://x").is_err());
        assert!(smtp_transport("smtp://:25").is_err());
    }
}
