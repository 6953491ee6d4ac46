//! A Tickler server's database → scheduler accounts: `user`, `user_settings`,
//! `tickler_item`, `triggered_item`, `intray_trigger`, `email_trigger` (with their owners
//! in `user_trigger` until May 2022, in their own `user` column since), and for the
//! outcomes of deliveries `triggered_intray_item`, `triggered_email` and `email`. Every
//! layout of `tickler-data/src/Tickler/Data/DB.hs` since items had a triggering time
//! (2018-06-10) reads (docs/moving-in.md lists them): the layout is told by the tables and
//! columns present. The e-mail queue, verification e-mails, admin notices and the payment
//! tables are not read.

use super::error::FileError;
use super::intray::{account_of, item_type};
use super::sqlite::{OldDatabase, Row, ScanRows};
use super::values::{self, boolean, bytes, day, opt_text, opt_time_of_day, opt_uuid, text, time, uuid};
use super::Notes;
use crate::domain::account::Account;
use crate::domain::inbox::models::ItemType;
use crate::domain::scheduler::models::{
    self as models, Attempt, Outcome, Recurrence, ScheduledItem, Tickle, TimeZoneSetting, Trigger, TriggerKind,
    TriggeredItem,
};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::secrets;
use crate::domain::wire::{self, Timestamp};
use crate::store::moving_in::SchedulerMoving;
use std::collections::HashMap;
use uuid::Uuid;

const USER: &[&str] = &["identifier", "username", "hashed_password", "created", "last_login"];
const SETTINGS: &[&str] = &["user_id", "time_zone"];
const ITEM: &[&str] = &["identifier", "user_id", "contents", "created"];
/// Columns an item has in some layouts only.
const ITEM_SOMETIMES: &[&str] = &["type", "recurrence", "server_time"];
const USER_TRIGGER: &[&str] = &["user_id", "trigger_type", "trigger_id"];
const INTRAY_TRIGGER: &[&str] = &["identifier", "url", "username", "access_key", "added"];
const EMAIL_TRIGGER: &[&str] = &["identifier", "address", "verification_key", "verified", "added"];
/// persistent's column for the field `intrayItemUUID`: each capital its own word.
const TRIGGERED_INTRAY: &[&str] = &["item", "trigger", "intray_item_u_u_i_d"];
const TRIGGERED_EMAIL: &[&str] = &["item", "trigger", "email"];
const EMAIL: &[&str] = &["id", "status"];
/// The reason of a failure: `send_error` (before 2018-05-23 `error`).
const EMAIL_SOMETIMES: &[&str] = &["send_error", "error"];

/// Which of the layouts a Tickler file has (docs/moving-in.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Items kept their schedule as one `scheduled` instant (before 2018-06-14).
    pub instant: bool,
    /// Items had a `type` (until 2022-04-16).
    pub item_type: bool,
    /// Items had `synced` (2018-06-10 to 2020-02-10; not read).
    pub synced: bool,
    /// Scheduled items had `server_time` (2020-02-24 to 2022-04-15).
    pub server_time: bool,
    /// The table `user_trigger` (until 2022-05-07).
    pub user_trigger: bool,
    /// The trigger tables' own `user` column (since 2022-05-07).
    pub trigger_user: bool,
}

impl Layout {
    pub fn detect(db: &OldDatabase) -> Result<Layout, FileError> {
        db.require("user", USER)?;
        for table in ["tickler_item", "triggered_item"] {
            db.require(table, ITEM)?;
        }
        db.require("triggered_item", &["triggered"])?;
        let instant = !db.has_column("tickler_item", "scheduled_day") && db.has_column("tickler_item", "scheduled");
        let schedule: &[&str] = match instant {
            true => &["scheduled"],
            false => &["scheduled_day", "scheduled_time"],
        };
        for table in ["tickler_item", "triggered_item"] {
            db.require(table, schedule)?;
        }
        db.require("intray_trigger", INTRAY_TRIGGER)?;
        db.require("email_trigger", EMAIL_TRIGGER)?;
        let user_trigger = db.has_table("user_trigger");
        let trigger_user = db.has_column("intray_trigger", "user") && db.has_column("email_trigger", "user");
        if !user_trigger && !trigger_user {
            // neither way of knowing whose a trigger is
            let table = match db.has_column("intray_trigger", "user") {
                true => "email_trigger",
                false => "intray_trigger",
            };
            return Err(db.missing(table, "user"));
        }
        Ok(Layout {
            instant,
            item_type: db.has_column("tickler_item", "type"),
            synced: db.has_column("tickler_item", "synced"),
            server_time: db.has_column("tickler_item", "server_time"),
            user_trigger,
            trigger_user,
        })
    }

    /// The layout's name and the originals' commits that wrote it.
    pub fn describe(self) -> &'static str {
        let Layout {
            instant,
            item_type,
            synced,
            server_time,
            user_trigger,
            trigger_user,
        } = self;
        match (instant, item_type, synced, server_time, user_trigger, trigger_user) {
            (true, true, true, false, true, false) => {
                "Tickler 2018-06-10 to 2018-06-14 (5b1350f..93d50c8: one scheduled instant per item)"
            }
            (false, true, true, false, true, false) => "Tickler 2018-06-14 to 2020-02-10 (93d50c8..1d854bb)",
            (false, true, false, false, true, false) => {
                "Tickler 2020-02-10 to 2020-02-24 or 2022-04-15 (1d854bb..69c7053, fc70109..9bbe1d7)"
            }
            (false, true, false, true, true, false) => "Tickler 2020-02-24 to 2022-04-15 (69c7053..fc70109)",
            (false, false, false, false, true, false) => {
                "Tickler 2022-04-16 to 2022-05-07 (9bbe1d7..d5f0f7e; golden migration.sql of ec78709)"
            }
            (false, false, false, false, true, true) => {
                "Tickler 2022-05-07 (d5f0f7e..f777fc5; golden migration.sql of d5f0f7e)"
            }
            (false, false, false, false, false, true) => {
                "Tickler since 2022-05-07 (f777fc5..; golden migration.sql of 79a68ed)"
            }
            _ => "Tickler, a mixture of its layouts (read by the columns present)",
        }
    }
}

fn with(base: &[&'static str], more: &[&'static str]) -> Vec<&'static str> {
    base.iter().chain(more).copied().collect()
}

/// What the first pass keeps of a file: its accounts with their settings and triggers
/// (few per person); the items are read again to be written.
#[derive(Debug)]
pub struct Checked {
    pub layout: Layout,
    pub accounts: Vec<SchedulerMoving>,
    /// When each trigger of the file was added (attempts are ordered by it).
    pub trigger_created: HashMap<Uuid, Timestamp>,
}

/// The columns of an item (scheduled or, with `triggered`, triggered) in this layout.
fn item_columns(layout: Layout, triggered: bool) -> Vec<&'static str> {
    let schedule: &[&str] = match layout.instant {
        true => &["scheduled"],
        false => &["scheduled_day", "scheduled_time"],
    };
    let columns = with(ITEM, schedule);
    match triggered {
        true => with(&columns, &["triggered"]),
        false => columns,
    }
}

/// The first pass: reads and decodes every row of the file (a bad value or a missing column
/// is an error naming its table and row), keeping only the accounts with their settings
/// and triggers; an item uuid that two rows have is an error too (SQLite finds it, see
/// [`OldDatabase::repeated`]). Nothing is written here.
pub fn check(db: &OldDatabase, notes: &mut Notes) -> Result<Checked, FileError> {
    let layout = Layout::detect(db)?;
    notes.layout = layout.describe().to_owned();

    let mut accounts = Vec::new();
    let mut index = HashMap::new();
    db.each_row("user", USER, &[], |n, row| {
        let account = user(&row).map_err(|e| FileError::row("user", n, e))?;
        index.insert(account.id, accounts.len());
        accounts.push(SchedulerMoving {
            account,
            settings: None,
            triggers: Vec::new(),
        });
        Ok::<(), FileError>(())
    })?;
    if db.has_table("user_settings") {
        db.each_row("user_settings", SETTINGS, &[], |n, row| {
            let (owner, setting) = settings(&row).map_err(|e| FileError::row("user_settings", n, e))?;
            match index.get(&owner) {
                Some(&i) => accounts[i].settings = Some(setting),
                None => notes.orphans += 1,
            }
            Ok::<(), FileError>(())
        })?;
    }
    // triggers: whose they are (their `user`, or before May 2022 `user_trigger`), then
    // what they are
    let mut owners = HashMap::new();
    if layout.user_trigger {
        db.each_row("user_trigger", USER_TRIGGER, &[], |n, row| {
            let at = |e: String| FileError::row("user_trigger", n, e);
            let owner = uuid(row.get("user_id")).map_err(at)?;
            let trigger = uuid(row.get("trigger_id")).map_err(at)?;
            owners.insert(trigger, owner);
            Ok::<(), FileError>(())
        })?;
    }
    let mut triggers = Vec::new();
    for (table, columns, decode) in [
        (
            "intray_trigger",
            INTRAY_TRIGGER,
            inbox_trigger as fn(&Row) -> Result<Trigger, String>,
        ),
        ("email_trigger", EMAIL_TRIGGER, email_trigger),
    ] {
        db.each_row(table, columns, &["user"], |n, row| {
            let at = |e: String| FileError::row(table, n, e);
            triggers.push((decode(&row).map_err(at)?, opt_uuid(row.get("user")).map_err(at)?));
            Ok::<(), FileError>(())
        })?;
    }
    let mut trigger_created = HashMap::new();
    for (t, _) in &triggers {
        if trigger_created.insert(t.id, t.created).is_some() {
            return Err(FileError::Other(format!(
                "the trigger uuid {} is in the file twice",
                t.id
            )));
        }
    }
    for (mut trigger, user) in triggers {
        let owner = user.or_else(|| owners.get(&trigger.id).copied());
        match owner.and_then(|o| index.get(&o).map(|i| (o, *i))) {
            Some((owner, i)) => {
                trigger.owner = owner;
                accounts[i].triggers.push(trigger);
            }
            None => notes.orphans += 1,
        }
    }
    for a in &mut accounts {
        // stable: triggers added in the same instant keep the order of their rows
        a.triggers.sort_by_key(|t| t.created);
    }

    // the outcomes of deliveries: every row decodes
    let created_of = |t: Uuid| {
        trigger_created
            .get(&t)
            .copied()
            .unwrap_or_else(|| Timestamp::from_unix(0, 0))
    };
    if db.has_table("triggered_intray_item") {
        db.each_row("triggered_intray_item", TRIGGERED_INTRAY, &["error"], |n, row| {
            let found = inbox_attempt(&row, created_of).map_err(|e| FileError::row("triggered_intray_item", n, e))?;
            if found.is_none() {
                notes.unfinished_deliveries += 1;
            }
            Ok::<(), FileError>(())
        })?;
    }
    if db.has_table("triggered_email") {
        db.each_row("email", EMAIL, EMAIL_SOMETIMES, |n, row| {
            email_outcome(&row).map_err(|e| FileError::row("email", n, e))?;
            Ok::<(), FileError>(())
        })?;
        db.each_row("triggered_email", TRIGGERED_EMAIL, &["error"], |n, row| {
            let found = email_attempt(&row, created_of, |id| email_of(db, id).map_err(|e| e.to_string()))
                .map_err(|e| FileError::row("triggered_email", n, e))?;
            if found.is_none() {
                notes.unfinished_deliveries += 1;
            }
            Ok::<(), FileError>(())
        })?;
    }

    // the items: every row decodes, each uuid once
    for (table, is_triggered) in [("tickler_item", false), ("triggered_item", true)] {
        db.each_row(table, &item_columns(layout, is_triggered), ITEM_SOMETIMES, |n, row| {
            let owner = match is_triggered {
                false => scheduled(&row).map(|i| i.owner),
                true => triggered(&row).map(|i| i.owner),
            };
            if !index.contains_key(&owner.map_err(|e| FileError::row(table, n, e))?) {
                notes.orphans += 1;
            }
            Ok::<(), FileError>(())
        })?;
    }
    if let Some(id) = db.repeated_across("tickler_item", "triggered_item", "identifier")? {
        let id = uuid(&id).map(|u| u.to_string()).unwrap_or_else(|_| format!("{id:?}"));
        return Err(FileError::Other(format!(
            "tickler_item, triggered_item: the item uuid {id} is in the file twice"
        )));
    }
    // the outcomes whose triggered item the file does not have
    let checked = Checked {
        layout,
        accounts,
        trigger_created,
    };
    notes.orphans += each_triggered(db, &checked, |_| Ok::<(), FileError>(()))?;
    Ok(checked)
}

/// The outcome of the `email` row `id` (`None`: no such row).
fn email_of(db: &OldDatabase, id: i64) -> Result<Option<Option<Outcome>>, FileError> {
    match db.row_by_id("email", EMAIL, EMAIL_SOMETIMES, id)? {
        Some(row) => Ok(Some(
            email_outcome(&row)
                .map_err(|e| FileError::Other(format!("email (id {id}): {e}")))?
                .1,
        )),
        None => Ok(None),
    }
}

/// The owner and uuid of each item (scheduled and triggered) of the file, one row at a time
/// (reads no contents).
pub fn each_item_id<E: From<FileError>>(
    db: &OldDatabase,
    mut each: impl FnMut(Uuid, Uuid) -> Result<(), E>,
) -> Result<(), E> {
    for table in ["tickler_item", "triggered_item"] {
        db.each_row(table, &["identifier", "user_id"], &[], |n, row| {
            let at = |e: String| E::from(FileError::row(table, n, e));
            let id = uuid(row.get("identifier")).map_err(at)?;
            let owner = uuid(row.get("user_id")).map_err(at)?;
            each(owner, id)
        })?;
    }
    Ok(())
}

/// Each scheduled item of the file, one row at a time (the second pass).
pub fn each_scheduled<E: From<FileError>>(
    db: &OldDatabase,
    layout: Layout,
    mut each: impl FnMut(ScheduledItem) -> Result<(), E>,
) -> Result<(), E> {
    db.each_row(
        "tickler_item",
        &item_columns(layout, false),
        ITEM_SOMETIMES,
        |n, row| each(scheduled(&row).map_err(|e| E::from(FileError::row("tickler_item", n, e)))?),
    )
}

/// Decodes a row of outcomes: (triggered item, attempt), or `None` for an unfinished one.
type DecodeOutcome<'a> = &'a dyn Fn(&Row) -> Result<Option<(Uuid, Attempt)>, String>;

/// The outcomes of finished deliveries of one of the tables `triggered_intray_item` and
/// `triggered_email`, read in the order of their triggered item's uuid beside the triggered
/// items ([`each_triggered`]).
struct Outcomes<'s> {
    table: &'static str,
    rows: Option<ScanRows<'s>>,
    /// The next finished one (triggered item, attempt).
    next: Option<(Uuid, Attempt)>,
}

impl Outcomes<'_> {
    /// Reads up to the next finished delivery (skipping unfinished ones).
    fn advance(&mut self, decode: DecodeOutcome<'_>) -> Result<(), FileError> {
        let last = self.next.take().map(|(item, _)| item);
        let Some(rows) = &mut self.rows else { return Ok(()) };
        while let Some((_, row)) = rows.next_row()? {
            let table = self.table;
            if let Some((item, attempt)) = decode(&row).map_err(|e| FileError::Other(format!("{table}: {e}")))? {
                if last.is_some_and(|l| item < l) {
                    return Err(unordered(table));
                }
                self.next = Some((item, attempt));
                break;
            }
        }
        Ok(())
    }
}

fn unordered(table: &str) -> FileError {
    FileError::Other(format!(
        "{table}: the uuids are not all kept alike (16-byte values), so the rows cannot be matched"
    ))
}

/// Each triggered item of the file with the outcomes of its finished deliveries, one at a
/// time, in the order of their uuids: `triggered_item` and the two tables of outcomes are
/// read side by side, each sorted by the item's uuid (SQLite sorts within its cache budget,
/// spilling to a temporary file), so none of them is held. Answers how many outcomes are of
/// an item the file does not have.
pub fn each_triggered<E: From<FileError>>(
    db: &OldDatabase,
    checked: &Checked,
    mut each: impl FnMut(TriggeredItem) -> Result<(), E>,
) -> Result<usize, E> {
    let created_of = |t: Uuid| {
        checked
            .trigger_created
            .get(&t)
            .copied()
            .unwrap_or_else(|| Timestamp::from_unix(0, 0))
    };
    let inbox_decode = |row: &Row| inbox_attempt(row, created_of);
    let email_decode = |row: &Row| email_attempt(row, created_of, |id| email_of(db, id).map_err(|e| e.to_string()));
    let decoders: [DecodeOutcome<'_>; 2] = [&inbox_decode, &email_decode];
    let mut scans = Vec::new();
    for (table, columns) in [
        ("triggered_intray_item", TRIGGERED_INTRAY),
        ("triggered_email", TRIGGERED_EMAIL),
    ] {
        let scan = match db.has_table(table) {
            true => Some(db.scan(table, columns, &["error"], Some("item"))?),
            false => None,
        };
        scans.push((table, scan));
    }
    let mut outcomes = Vec::new();
    for (table, scan) in &mut scans {
        let rows = match scan {
            Some(scan) => Some(scan.rows()?),
            None => None,
        };
        outcomes.push(Outcomes {
            table,
            rows,
            next: None,
        });
    }
    for (o, decode) in outcomes.iter_mut().zip(decoders) {
        o.advance(decode)?;
    }
    let mut orphans = 0;
    let mut items = db.scan(
        "triggered_item",
        &item_columns(checked.layout, true),
        ITEM_SOMETIMES,
        Some("identifier"),
    )?;
    let mut items = items.rows()?;
    let mut last = None;
    while let Some((_, row)) = items.next_row()? {
        let mut item = triggered(&row).map_err(|e| FileError::Other(format!("triggered_item: {e}")))?;
        if last.is_some_and(|l| item.id <= l) {
            return Err(unordered("triggered_item").into());
        }
        last = Some(item.id);
        for (o, decode) in outcomes.iter_mut().zip(decoders) {
            while let Some((of, _)) = &o.next {
                if *of > item.id {
                    break;
                }
                if *of < item.id {
                    orphans += 1;
                } else if let Some((_, attempt)) = o.next.take() {
                    item.attempts.push(attempt);
                }
                o.advance(decode)?;
            }
        }
        item.attempts
            .sort_by_key(|a| (a.outcome.is_email(), a.trigger_created, a.trigger));
        each(item)?;
    }
    for (o, decode) in outcomes.iter_mut().zip(decoders) {
        while o.next.is_some() {
            orphans += 1;
            o.advance(decode)?;
        }
    }
    Ok(orphans)
}

pub fn user(row: &Row) -> Result<Account, String> {
    account_of(row, "created")
}

/// (owner, setting) of a `user_settings` row: the time zone as JSON
/// (`{"offset": minutes, "summer": bool, "name": text}`).
pub fn settings(row: &Row) -> Result<(Uuid, TimeZoneSetting), String> {
    let zone = values::opt_json(row.get("time_zone"))?.ok_or("no time zone")?;
    let setting = TimeZoneSetting::parse(&serde_json::json!({ "timezone": zone })).map_err(|e| e.to_string())?;
    Ok((uuid(row.get("user_id"))?, setting))
}

/// The contents and schedule of a `tickler_item` or `triggered_item` row.
pub fn tickle(row: &Row) -> Result<Tickle, String> {
    // until 2022-04-16 items had a type (only ever text), then their contents were text
    if row.has("type") && item_type(row.get("type"))? != ItemType::Text {
        return Err("only text items are scheduled".into());
    }
    let content = bytes(row.get("contents"))?;
    let (day, time) = match row.get("scheduled_day") {
        rusqlite::types::Value::Null if !row.has("scheduled_day") => {
            // versions before 2019 kept one instant in UTC
            let at = time(row.get("scheduled"))?;
            let (day, tod) = schedule::local(at, &Zone::of(&TimeZoneSetting::default()))
                .ok_or("the scheduled instant is out of range")?;
            (day, Some(tod))
        }
        v => (day(v)?, opt_time_of_day(row.get("scheduled_time"))?),
    };
    let recurrence = match values::opt_json(row.get("recurrence"))? {
        Some(r) => Some(Recurrence::parse(&r).map_err(|e| format!("recurrence: {e}"))?),
        None => None,
    };
    Ok(Tickle {
        content,
        day,
        time,
        recurrence,
    })
}

pub fn scheduled(row: &Row) -> Result<ScheduledItem, String> {
    let server_time = match row.get("server_time") {
        rusqlite::types::Value::Integer(n) => u64::try_from(*n).map_err(|_| "negative server time")?,
        _ => 0,
    };
    Ok(ScheduledItem {
        id: uuid(row.get("identifier"))?,
        owner: uuid(row.get("user_id"))?,
        tickle: tickle(row)?,
        created: time(row.get("created"))?,
        server_time,
    })
}

/// A `triggered_item` row, without its attempts yet.
pub fn triggered(row: &Row) -> Result<TriggeredItem, String> {
    Ok(TriggeredItem {
        id: uuid(row.get("identifier"))?,
        owner: uuid(row.get("user_id"))?,
        tickle: tickle(row)?,
        created: time(row.get("created"))?,
        triggered: time(row.get("triggered"))?,
        attempts: Vec::new(),
    })
}

/// An `intray_trigger` row (its owner is filled in from `user_trigger`). The access key
/// was kept as its 16 bytes; the trigger keeps it as hex text, as Pigeonhole does.
pub fn inbox_trigger(row: &Row) -> Result<Trigger, String> {
    let url = text(row.get("url"))?;
    let url = models::normalise_inbox_url(&url).ok_or_else(|| format!("not an inbox URL: {url:?}"))?;
    let access_key = match row.get("access_key") {
        rusqlite::types::Value::Blob(b) => hex::encode(b),
        v => text(v)?.to_ascii_lowercase(),
    };
    if !secrets::looks_like_secret(&access_key) {
        return Err("the access key is not 16 bytes".into());
    }
    let username = text(row.get("username"))?;
    if !crate::domain::wire::is_valid_username(&username) {
        let shown: String = username.chars().take(64).collect();
        return Err(format!("the inbox username {shown:?} is not valid"));
    }
    Ok(Trigger {
        id: uuid(row.get("identifier"))?,
        owner: Uuid::nil(),
        created: time(row.get("added"))?,
        kind: TriggerKind::Inbox {
            url,
            username,
            access_key,
        },
    })
}

/// An `email_trigger` row: the verification key (16 bytes) is kept as the digest of its
/// hex text, so the old verification link still verifies an unverified address.
pub fn email_trigger(row: &Row) -> Result<Trigger, String> {
    let address = text(row.get("address"))?;
    if !models::is_valid_email(&address) {
        return Err(format!("not an e-mail address: {address:?}"));
    }
    let key = match row.get("verification_key") {
        rusqlite::types::Value::Blob(b) => hex::encode(b),
        v => text(v)?,
    };
    Ok(Trigger {
        id: uuid(row.get("identifier"))?,
        owner: Uuid::nil(),
        created: time(row.get("added"))?,
        kind: TriggerKind::Email {
            address,
            verified: boolean(row.get("verified"))?,
            key_digest: secrets::digest(&key),
        },
    })
}

/// (triggered item, attempt) of a `triggered_intray_item` row; `None` for a delivery that
/// had not finished.
pub fn inbox_attempt(
    row: &Row,
    trigger_created: impl Fn(Uuid) -> Timestamp,
) -> Result<Option<(Uuid, Attempt)>, String> {
    let outcome = match (opt_uuid(row.get("intray_item_u_u_i_d")), opt_text(row.get("error"))?) {
        (_, Some(error)) => Outcome::InboxFailed(error),
        (Ok(Some(added)), None) => Outcome::InboxAdded(added),
        (Ok(None), None) => return Ok(None),
        (Err(e), None) => return Err(e),
    };
    let trigger = uuid(row.get("trigger"))?;
    let attempt = Attempt {
        trigger,
        trigger_created: trigger_created(trigger),
        delivery: wire::new_uuid(),
        outcome,
    };
    Ok(Some((uuid(row.get("item"))?, attempt)))
}

/// (email id, outcome) of an `email` row: `None` while it was unsent or sending. The reason
/// of a failure is in `send_error` (before 2018-05-23: `error`).
pub fn email_outcome(row: &Row) -> Result<(i64, Option<Outcome>), String> {
    let rusqlite::types::Value::Integer(id) = row.get("id") else {
        return Err("no id".into());
    };
    let outcome = match text(row.get("status"))?.as_str() {
        "sent" => Some(Outcome::EmailSent),
        "error" => Some(Outcome::EmailFailed(
            opt_text(row.get("send_error"))?
                .or(opt_text(row.get("error"))?)
                .unwrap_or_else(|| "sending failed".into()),
        )),
        "unsent" | "sending" => None,
        other => return Err(format!("unknown e-mail status {other:?}")),
    };
    Ok((*id, outcome))
}

/// (triggered item, attempt) of a `triggered_email` row; `None` for an e-mail not sent yet.
/// `email` finds the outcome of an `email` row by its id (`None`: no such row).
pub fn email_attempt(
    row: &Row,
    trigger_created: impl Fn(Uuid) -> Timestamp,
    email: impl Fn(i64) -> Result<Option<Option<Outcome>>, String>,
) -> Result<Option<(Uuid, Attempt)>, String> {
    let outcome = match (opt_text(row.get("error"))?, row.get("email")) {
        (Some(error), _) => Outcome::EmailFailed(error),
        (None, rusqlite::types::Value::Integer(id)) => match email(*id)? {
            Some(Some(outcome)) => outcome,
            _ => return Ok(None),
        },
        (None, _) => return Ok(None),
    };
    let trigger = uuid(row.get("trigger"))?;
    let attempt = Attempt {
        trigger,
        trigger_created: trigger_created(trigger),
        delivery: wire::new_uuid(),
        outcome,
    };
    Ok(Some((uuid(row.get("item"))?, attempt)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value;

    fn row(pairs: &[(&str, Value)]) -> Row {
        Row::of(pairs)
    }

    fn t(s: &str) -> Value {
        Value::Text(s.into())
    }

    fn item_row(extra: &[(&str, Value)]) -> Row {
        let mut r = row(&[
            ("identifier", Value::Blob(vec![2; 16])),
            ("user_id", Value::Blob(vec![1; 16])),
            ("type", Value::Blob(b"text".to_vec())),
            ("contents", Value::Blob(b"Pay rent".to_vec())),
            ("created", t("2021-02-03T04:05:06.789")),
        ]);
        r.0.extend(row(extra).0);
        r
    }

    #[test]
    fn scheduled_items_keep_day_time_recurrence_and_server_time() {
        let r = item_row(&[
            ("scheduled_day", t("2021-07-01")),
            ("scheduled_time", t("08:30:00")),
            (
                "recurrence",
                t(r#"{"every-x-months":{"months":1,"day":1,"time-of-day":"09:00:00"}}"#),
            ),
            ("server_time", Value::Integer(7)),
        ]);
        let item = scheduled(&r).unwrap();
        assert_eq!(item.id, Uuid::from_bytes([2; 16]));
        assert_eq!(item.owner, Uuid::from_bytes([1; 16]));
        assert_eq!(item.tickle.content, b"Pay rent");
        assert_eq!(item.tickle.day.to_string(), "2021-07-01");
        assert_eq!(item.tickle.time.unwrap().to_string(), "08:30:00");
        assert!(matches!(
            item.tickle.recurrence,
            Some(Recurrence::EveryMonths {
                months: 1,
                day: Some(1),
                time: Some(_)
            })
        ));
        assert_eq!(item.server_time, 7);
        assert_eq!(item.created.to_string(), "2021-02-03T04:05:06.789Z");
        let bad = item_row(&[
            ("scheduled_day", t("2021-07-01")),
            ("recurrence", t(r#"{"every-x-days":{"days":0}}"#)),
        ]);
        assert!(scheduled(&bad).unwrap_err().contains("recurrence"));
    }

    #[test]
    fn the_oldest_schedule_was_one_instant() {
        let r = item_row(&[("scheduled", t("2019-01-02 03:04:05 UTC"))]);
        let item = scheduled(&r).unwrap();
        assert_eq!(
            (item.tickle.day.to_string(), item.tickle.time.unwrap().to_string()),
            ("2019-01-02".into(), "03:04:05".into())
        );
        assert_eq!(item.server_time, 0);
    }

    #[test]
    fn settings_and_triggers() {
        let s = row(&[
            ("user_id", Value::Blob(vec![1; 16])),
            ("time_zone", t(r#"{"offset":60,"summer":false,"name":"Europe/Zurich"}"#)),
        ]);
        let (owner, zone) = settings(&s).unwrap();
        assert_eq!(owner, Uuid::from_bytes([1; 16]));
        assert_eq!(
            (zone.offset, zone.name.as_str(), zone.summer),
            (60, "Europe/Zurich", false)
        );

        let inbox = row(&[
            ("identifier", Value::Blob(vec![4; 16])),
            ("url", t("https://intray.example.org")),
            ("username", t("alice")),
            ("access_key", Value::Blob(vec![0xab; 16])),
            ("added", t("2021-01-01T00:00:00")),
        ]);
        let trig = inbox_trigger(&inbox).unwrap();
        let TriggerKind::Inbox {
            url,
            username,
            access_key,
        } = &trig.kind
        else {
            panic!("inbox")
        };
        assert_eq!(
            (url.as_str(), username.as_str()),
            ("https://intray.example.org", "alice")
        );
        assert_eq!(access_key, &"ab".repeat(16));

        let email = row(&[
            ("identifier", Value::Blob(vec![5; 16])),
            ("address", t("me@example.org")),
            ("verification_key", Value::Blob(vec![0x01; 16])),
            ("verified", Value::Integer(0)),
            ("added", t("2021-01-01T00:00:01")),
        ]);
        let trig = email_trigger(&email).unwrap();
        assert_eq!(
            trig.kind,
            TriggerKind::Email {
                address: "me@example.org".into(),
                verified: false,
                key_digest: secrets::digest(&"01".repeat(16))
            }
        );
    }

    #[test]
    fn delivery_outcomes() {
        let at = |_| Timestamp::from_unix(5, 0);
        let base = [
            ("item", Value::Blob(vec![2; 16])),
            ("trigger", Value::Blob(vec![4; 16])),
        ];
        let added = row(&[
            base[0].clone(),
            base[1].clone(),
            ("intray_item_u_u_i_d", Value::Blob(vec![9; 16])),
            ("error", Value::Null),
        ]);
        let (item, a) = inbox_attempt(&added, at).unwrap().unwrap();
        assert_eq!(
            (item, a.outcome),
            (
                Uuid::from_bytes([2; 16]),
                Outcome::InboxAdded(Uuid::from_bytes([9; 16]))
            )
        );
        assert_eq!(a.trigger_created, Timestamp::from_unix(5, 0));
        let failed = row(&[
            base[0].clone(),
            base[1].clone(),
            ("intray_item_u_u_i_d", Value::Null),
            ("error", t("402")),
        ]);
        assert_eq!(
            inbox_attempt(&failed, at).unwrap().unwrap().1.outcome,
            Outcome::InboxFailed("402".into())
        );
        let pending = row(&[
            base[0].clone(),
            base[1].clone(),
            ("intray_item_u_u_i_d", Value::Null),
            ("error", Value::Null),
        ]);
        assert!(inbox_attempt(&pending, at).unwrap().is_none());

        let emails: HashMap<i64, Option<Outcome>> = [
            email_outcome(&row(&[
                ("id", Value::Integer(1)),
                ("status", Value::Blob(b"sent".to_vec())),
                ("send_error", Value::Null),
            ]))
            .unwrap(),
            email_outcome(&row(&[
                ("id", Value::Integer(2)),
                ("status", Value::Blob(b"unsent".to_vec())),
                ("send_error", Value::Null),
            ]))
            .unwrap(),
        ]
        .into_iter()
        .collect();
        let sent = row(&[
            base[0].clone(),
            base[1].clone(),
            ("email", Value::Integer(1)),
            ("error", Value::Null),
        ]);
        assert_eq!(
            email_attempt(&sent, at, |id| Ok(emails.get(&id).cloned()))
                .unwrap()
                .unwrap()
                .1
                .outcome,
            Outcome::EmailSent
        );
        let queued = row(&[
            base[0].clone(),
            base[1].clone(),
            ("email", Value::Integer(2)),
            ("error", Value::Null),
        ]);
        assert!(email_attempt(&queued, at, |id| Ok(emails.get(&id).cloned()))
            .unwrap()
            .is_none());
    }
}
