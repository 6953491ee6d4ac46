//! Finishing reminders from the command line (issue 27 point 4): `cancel`, `edit`, `snooze`
//! (alias `reschedule`) and `clear`, each by an unambiguous beginning of the reminder's id.
//!
//! `snooze` of a triggered reminder schedules it again (once, without its repeat: the
//! scheduled original of a repeating reminder is still there) and deletes the triggered copy
//! only once the new one is stored, so the reminder is never in neither place.

use super::error::ClientError;
use super::{
    confirm, due_of, due_words, format, repeat_of, scheduled_json, scheduler_items, short, when, Client, Reminder,
    SAY_WHEN,
};
use crate::config::{ClearArgs, EditArgs, IdArgs, SnoozeArgs};
use crate::domain::scheduler::models::{Recurrence, Tickle, TimeOfDay};
use crate::domain::wire::Timestamp;
use reqwest::Method;
use serde_json::{json, Value};

/// Which reminders a command looks among.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Scheduled,
    Triggered,
    Either,
}

impl Kind {
    fn holds(self, item: &Value) -> bool {
        match self {
            Kind::Scheduled => item["triggered"].is_null(),
            Kind::Triggered => !item["triggered"].is_null(),
            Kind::Either => true,
        }
    }
}

/// The one reminder of `kind` whose id starts with `prefix`; a reminder of the other kind
/// is named with what to do instead.
fn reminder<'a>(all: &'a [Value], prefix: &str, kind: Kind) -> Result<&'a Value, ClientError> {
    let prefix = prefix.trim().to_ascii_lowercase();
    if prefix.is_empty() {
        return Err(ClientError::input(
            "no id given: `pigeonhole scheduled` and `pigeonhole triggered` list the reminders' ids",
        ));
    }
    let matching: Vec<&Value> = all
        .iter()
        .filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with(&prefix)))
        .collect();
    let of_kind: Vec<&Value> = matching.iter().copied().filter(|i| kind.holds(i)).collect();
    match (of_kind.as_slice(), matching.as_slice()) {
        ([one], _) => Ok(one),
        ([_, _, ..], _) => Err(ClientError::input(format!(
            "several reminders' ids start with {prefix:?}: give more of it"
        ))),
        ([], [other]) => {
            let id = short(&other["id"]);
            Err(ClientError::input(match kind {
                Kind::Scheduled => format!(
                    "reminder {id} has already triggered: `pigeonhole snooze {id} --in 1h` schedules it again, \
                     `pigeonhole clear {id}` deletes it"
                ),
                _ => format!("reminder {id} has not triggered yet: `pigeonhole cancel {id}` cancels it"),
            }))
        }
        ([], _) => Err(ClientError::input(format!(
            "no {}reminder's id starts with {prefix:?}: `pigeonhole {}` lists them",
            match kind {
                Kind::Scheduled => "scheduled ",
                Kind::Triggered => "triggered ",
                Kind::Either => "",
            },
            match kind {
                Kind::Triggered => "triggered",
                _ => "scheduled",
            }
        ))),
    }
}

/// A reminder's contents as stored (its bytes, day, time, repeat).
fn contents(item: &Value) -> Result<Tickle, ClientError> {
    Tickle::parse(&item["contents"])
        .map_err(|e| ClientError::answer(format!("the scheduler's reminder cannot be read: {e}")))
}

fn id_of(item: &Value) -> &str {
    item["id"].as_str().unwrap_or_default()
}

/// The repeat of `r` at another time of day (an edit that moves the time moves the repeats).
fn at_time(r: Recurrence, time: Option<TimeOfDay>) -> Recurrence {
    match r {
        Recurrence::EveryDays { days, .. } => Recurrence::EveryDays { days, time },
        Recurrence::EveryMonths { months, day, .. } => Recurrence::EveryMonths { months, day, time },
    }
}

pub async fn cancel(args: IdArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let all = scheduler_items(&client).await?;
    let item = reminder(&all, &args.id, Kind::Scheduled)?;
    let id = id_of(item);
    client
        .scheduler
        .ok(Method::DELETE, &format!("/scheduler/item/delete/{id}"), None)
        .await?;
    if client.json {
        client.print(&json!({ "id": id }), String::new);
        return Ok(());
    }
    let zone = client.zone().await?;
    let r = Reminder::of(item, &zone);
    let mut was = format!("was due {}", r.when(&zone, Timestamp::now()));
    if let Some(rec) = &r.recurrence {
        was.push_str(&format!(", {}", format::recurrence(rec)));
    }
    client.print(&Value::Null, || {
        format!(
            "Cancelled {}: {} ({was}).",
            short(&item["id"]),
            format::one_line(&r.text, format::LINE)
        )
    });
    Ok(())
}

pub async fn edit(args: EditArgs) -> Result<(), ClientError> {
    let repeat = repeat_of(&args.repeat);
    let moves = args.when.after.is_some() || args.when.at.is_some();
    if args.text.is_none() && !moves && !repeat.given() && !args.no_repeat {
        return Err(ClientError::input(
            "nothing to change: give --text, --in or --at, --every, --every-month, --every-year or --no-repeat",
        ));
    }
    if args.text.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(ClientError::input("--text \"\": a reminder needs words"));
    }
    let client = Client::open(&args.opts)?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let all = scheduler_items(&client).await?;
    let item = reminder(&all, &args.id, Kind::Scheduled)?;
    let id = id_of(item);
    let mut tickle = contents(item)?;
    let old_time = tickle.time;
    if let Some(text) = &args.text {
        tickle.content = text.clone().into_bytes();
    }
    if let Some((day, time)) = due_of(&args.when, &zone, now)? {
        tickle.day = day;
        tickle.time = time;
    }
    tickle.recurrence = match (tickle.recurrence, args.no_repeat) {
        (_, true) => None,
        // --day alone: another day of the month for a repeat by months
        (Some(Recurrence::EveryMonths { months, time, .. }), false)
            if repeat.day.is_some() && repeat.every.is_none() && !repeat.every_month && !repeat.every_year =>
        {
            let day = repeat.day.filter(|d| (1..=31).contains(d));
            let day = day.ok_or_else(|| {
                ClientError::input(format!(
                    "--day {}: a day of the month is 1 to 31",
                    repeat.day.unwrap_or(0)
                ))
            })?;
            Some(Recurrence::EveryMonths {
                months,
                day: Some(day),
                time: if tickle.time != old_time { tickle.time } else { time },
            })
        }
        (_, false) if repeat.given() => {
            when::recurrence(repeat, tickle.day, tickle.time).map_err(ClientError::Input)?
        }
        // the repeats follow a new time of day
        (Some(r), false) if tickle.time != old_time => Some(at_time(r, tickle.time)),
        (r, false) => r,
    };
    store_edit(&client, id, &tickle).await?;
    let when = due_words(tickle.day, tickle.time, tickle.recurrence.as_ref(), &zone, now);
    let text = String::from_utf8_lossy(&tickle.content).into_owned();
    client.print(&scheduled_json(&item["id"], &tickle, &zone), || {
        format!(
            "Changed {}: {}, due {when}.",
            short(&item["id"]),
            format::one_line(&text, format::LINE)
        )
    });
    Ok(())
}

/// `POST /scheduler/item/info/:id`: the scheduled item `id` becomes `tickle`.
async fn store_edit(client: &Client, id: &str, tickle: &Tickle) -> Result<(), ClientError> {
    client
        .scheduler
        .ok(
            Method::POST,
            &format!("/scheduler/item/info/{id}"),
            Some(&tickle.to_json()),
        )
        .await?;
    Ok(())
}

pub async fn snooze(args: SnoozeArgs) -> Result<(), ClientError> {
    if args.when.after.is_none() && args.when.at.is_none() {
        return Err(ClientError::input(SAY_WHEN));
    }
    let client = Client::open(&args.opts)?;
    let zone = client.zone().await?;
    let now = Timestamp::now();
    let all = scheduler_items(&client).await?;
    let item = reminder(&all, &args.id, Kind::Either)?;
    let id = id_of(item).to_owned();
    let (day, time) = due_of(&args.when, &zone, now)?.ok_or(ClientError::input(SAY_WHEN))?;
    let mut tickle = contents(item)?;
    tickle.day = day;
    tickle.time = time;
    let text = String::from_utf8_lossy(&tickle.content).into_owned();
    let text = format::one_line(&text, format::LINE);
    if item["triggered"].is_null() {
        // scheduled: moved (a repeating one goes on from there)
        store_edit(&client, &id, &tickle).await?;
        let when = due_words(day, time, tickle.recurrence.as_ref(), &zone, now);
        client.print(&scheduled_json(&item["id"], &tickle, &zone), || {
            format!("Snoozed {} to {when}: {text}.", short(&item["id"]))
        });
        return Ok(());
    }
    // triggered: scheduled again once; the triggered copy goes only once that is stored
    tickle.recurrence = None;
    let scheduled = client
        .scheduler
        .post_json("/scheduler/item", &tickle.to_json())
        .await
        .map_err(|e| e.noted("nothing was snoozed: the triggered reminder is as it was"))?;
    let when = due_words(day, time, None, &zone, now);
    if let Err(e) = client
        .scheduler
        .ok(Method::DELETE, &format!("/scheduler/item/delete/{id}"), None)
        .await
    {
        return Err(ClientError::local(format!(
            "scheduled again as {} for {when}, but removing the triggered copy failed ({e}): \
             `pigeonhole clear {}` removes it",
            short(&scheduled),
            short(&item["id"])
        )));
    }
    let mut json = scheduled_json(&scheduled, &tickle, &zone);
    json["triggered-id"] = json!(id);
    client.print(&json, || {
        format!(
            "Snoozed {} to {when}: {text} (scheduled again as {}).",
            short(&item["id"]),
            short(&scheduled)
        )
    });
    Ok(())
}

pub async fn clear(args: ClearArgs) -> Result<(), ClientError> {
    let client = Client::open(&args.opts)?;
    let all = scheduler_items(&client).await?;
    if let Some(prefix) = &args.id {
        let item = reminder(&all, prefix, Kind::Triggered)?;
        let id = id_of(item);
        client
            .scheduler
            .ok(Method::DELETE, &format!("/scheduler/item/delete/{id}"), None)
            .await?;
        let text = match &item["contents"]["content"] {
            Value::String(s) => format::one_line(s, format::LINE),
            _ => "[not UTF-8]".into(),
        };
        client.print(&json!({"cleared": 1, "id": id}), || {
            format!("Cleared {}: {text}.", short(&item["id"]))
        });
        return Ok(());
    }
    let n = all.iter().filter(|i| Kind::Triggered.holds(i)).count();
    if n == 0 {
        client.print(&json!({"cleared": 0}), || {
            "Nothing has triggered: nothing to clear.".into()
        });
        return Ok(());
    }
    let plural = if n == 1 { "" } else { "s" };
    confirm(
        &format!("Delete all {n} triggered reminder{plural}? [y/N] "),
        args.yes,
        "clear the triggered reminders",
    )?;
    client
        .scheduler
        .ok(Method::POST, "/scheduler/item/delete-triggereds", None)
        .await?;
    client.print(&json!({ "cleared": n }), || {
        format!("Cleared {n} triggered reminder{plural}.")
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reminders_by_the_beginning_of_their_id() {
        let all = vec![
            json!({"id": "aaaa1111-0000-4000-8000-000000000000", "triggered": null}),
            json!({"id": "aaaa2222-0000-4000-8000-000000000000", "triggered": {"triggeredInfoTriggered": "2026-01-01T00:00:00Z"}}),
            json!({"id": "bbbb1111-0000-4000-8000-000000000000", "triggered": null}),
        ];
        assert_eq!(
            id_of(reminder(&all, "AAAA1", Kind::Scheduled).unwrap()),
            "aaaa1111-0000-4000-8000-000000000000"
        );
        // only one scheduled reminder starts with aaaa: not ambiguous for cancel
        assert_eq!(
            id_of(reminder(&all, "aaaa", Kind::Scheduled).unwrap()),
            "aaaa1111-0000-4000-8000-000000000000"
        );
        assert!(reminder(&all, "aaaa", Kind::Either)
            .unwrap_err()
            .to_string()
            .contains("several"));
        let e = reminder(&all, "aaaa2", Kind::Scheduled).unwrap_err().to_string();
        assert!(
            e.contains("already triggered") && e.contains("pigeonhole clear aaaa2222"),
            "{e}"
        );
        let e = reminder(&all, "bbbb", Kind::Triggered).unwrap_err().to_string();
        assert!(
            e.contains("not triggered yet") && e.contains("pigeonhole cancel bbbb1111"),
            "{e}"
        );
        let e = reminder(&all, "c", Kind::Scheduled).unwrap_err().to_string();
        assert!(e.contains("no scheduled reminder's id starts with \"c\""), "{e}");
        assert!(reminder(&all, " ", Kind::Either)
            .unwrap_err()
            .to_string()
            .contains("no id given"));
    }
}
