//! "In two hours", "at 09:00", "every 3 days": the words of `pigeonhole remind`, turned into
//! a scheduled day, time and recurrence in the account's time zone (scheduler.md §2.2–2.3).

use crate::domain::scheduler::models::{Day, Recurrence, TimeOfDay};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::Timestamp;
use std::time::Duration;

/// `90s`, `30m`, `2h`, `1h30m`, `3d`, `1w` (units may follow each other, each once).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 90s, 30m, 2h, 1h30m, 3d or 1w");
    let mut total: u64 = 0;
    let mut digits = String::new();
    let mut any = false;
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 7 * 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = n.checked_mul(unit).and_then(|s| total.checked_add(s)).ok_or_else(bad)?;
        digits.clear();
        any = true;
    }
    if !digits.is_empty() || !any {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// A whole number of days for `--every`: `3d`, `2w`, or a number of days.
pub fn parse_days(text: &str) -> Result<u32, String> {
    let bad = || format!("{text:?} is not a number of days such as 3d or 2w");
    let text = text.trim();
    let (n, per) = match text.strip_suffix('w') {
        Some(n) => (n, 7),
        None => (text.strip_suffix('d').unwrap_or(text), 1),
    };
    let n: u32 = n.parse().map_err(|_| bad())?;
    n.checked_mul(per).filter(|d| *d >= 1).ok_or_else(bad)
}

/// Monday = 0 … Sunday = 6.
pub fn weekday(day: Day) -> i64 {
    (day.number() + 3).rem_euclid(7)
}

const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// A weekday's name or its first three (or more) letters: Monday = 0.
fn weekday_named(word: &str) -> Option<i64> {
    (word.len() >= 3)
        .then(|| WEEKDAYS.iter().position(|w| w.starts_with(word)))
        .flatten()
        .map(|i| i as i64)
}

/// A month's name or its first three (or more) letters: January = 1.
fn month_named(word: &str) -> Option<u32> {
    (word.len() >= 3)
        .then(|| MONTHS.iter().position(|m| m.starts_with(word)))
        .flatten()
        .map(|i| i as u32 + 1)
}

/// A day of the month: `3`, `03`, `3rd`, `1st`, `22nd`, `4th`.
fn day_of_month(word: &str) -> Option<u32> {
    let digits = ["st", "nd", "rd", "th"]
        .iter()
        .find_map(|s| word.strip_suffix(s))
        .unwrap_or(word);
    if digits.is_empty() || digits.len() > 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

fn year(word: &str) -> Option<i64> {
    (word.len() == 4 && word.bytes().all(|b| b.is_ascii_digit()))
        .then(|| word.parse().ok())
        .flatten()
}

/// A time of day: `9:00`, `09:00`, `21:30`, `9:00:30`, `9am`, `9pm`, `9:30pm`, `noon`
/// (`am`/`pm` may also be the next word).
fn time_of_day(word: &str, next: Option<&str>) -> Option<(TimeOfDay, bool)> {
    if word == "noon" {
        return Some((
            TimeOfDay {
                hour: 12,
                minute: 0,
                second: 0,
                nanos: 0,
            },
            false,
        ));
    }
    let (clock, meridiem, used_next) = if let Some(c) = word.strip_suffix("am") {
        (c, Some(false), false)
    } else if let Some(c) = word.strip_suffix("pm") {
        (c, Some(true), false)
    } else {
        match next {
            Some("am") => (word, Some(false), true),
            Some("pm") => (word, Some(true), true),
            _ => (word, None, false),
        }
    };
    let mut parts = clock.split(':');
    let number = |p: Option<&str>, max: u32| -> Option<u32> {
        let p = p?;
        if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        p.parse().ok().filter(|n| *n <= max)
    };
    let hour = number(parts.next(), 23)?;
    let (minute, second) = match (parts.next(), parts.next(), parts.next()) {
        (None, _, _) if meridiem.is_some() => (0, 0),
        (Some(m), None, _) if m.len() == 2 => (number(Some(m), 59)?, 0),
        (Some(m), Some(s), None) if m.len() == 2 && s.len() == 2 => (number(Some(m), 59)?, number(Some(s), 59)?),
        _ => return None,
    };
    let hour = match meridiem {
        None => hour,
        Some(_) if !(1..=12).contains(&hour) => return None,
        Some(false) => hour % 12,
        Some(true) => hour % 12 + 12,
    };
    Some((
        TimeOfDay {
            hour,
            minute,
            second,
            nanos: 0,
        },
        used_next,
    ))
}

/// The first day on or after `from` with this month and day (a 29 February waits for its
/// year).
fn next_date(from: Day, month: u32, day: u32) -> Option<Day> {
    (from.year..from.year + 9)
        .filter_map(|year| Day::parse(&format!("{year:04}-{month:02}-{day:02}")))
        .find(|d| *d >= from)
}

fn explicit_date(year: i64, month: u32, day: u32) -> Option<Day> {
    Day::parse(&format!("{year:04}-{month:02}-{day:02}"))
}

/// What `--at` names, read in the account's zone at `now`: a day and perhaps a time.
///
/// Days: `today`, `tomorrow`, a weekday (`mon`, `monday`: the next one after today),
/// `next week` (the coming Monday), `2026-12-01`, `3 Dec`, `Dec 3`, `3rd december 2027`
/// (a date without a year: its next occurrence, today included). Times: `9:00`, `21:30`,
/// `9am`, `9:30 pm`, `noon`. Either or both, in either order (`at` may stand between). A time
/// alone is its next occurrence; a day alone is the day without a time.
pub fn parse_at(text: &str, zone: &Zone, now: Timestamp) -> Result<(Day, Option<TimeOfDay>), String> {
    let bad = |why: &str| {
        format!(
            "{text:?} is not a time I can read ({why}): try \"9:00\", \"9am\", \"tomorrow 9am\", \"mon 09:00\", \
             \"next week\", \"3 Dec\", \"2026-12-01 09:00\""
        )
    };
    let (today, _) = schedule::local(now, zone).ok_or_else(|| bad("now is outside the calendar"))?;
    let lowered = text.trim().to_lowercase().replace(',', " ");
    // 2026-12-01T09:00 as two words
    let lowered = match lowered.split_once('t') {
        Some((d, t)) if Day::parse(d).is_some() && !t.is_empty() => format!("{d} {t}"),
        _ => lowered,
    };
    let words: Vec<&str> = lowered.split_whitespace().collect();
    let mut day: Option<Day> = None;
    let mut time: Option<TimeOfDay> = None;
    let set_day = |d: Option<Day>, day: &mut Option<Day>| -> Result<(), String> {
        let d = d.ok_or_else(|| bad("no such date"))?;
        match day.replace(d) {
            Some(_) => Err(bad("two days")),
            None => Ok(()),
        }
    };
    let plus = |n: i64| Day::from_number(today.number() + n);
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        let next = words.get(i + 1).copied();
        let after = words.get(i + 2).copied();
        i += 1;
        if word == "at" || word == "on" {
            continue;
        }
        if word == "today" {
            set_day(Some(today), &mut day)?;
        } else if word == "tomorrow" {
            set_day(plus(1), &mut day)?;
        } else if word == "next" && next == Some("week") {
            i += 1;
            set_day(plus(7 - weekday(today)), &mut day)?;
        } else if let Some(w) =
            weekday_named(word).or_else(|| (word == "next").then(|| next.and_then(weekday_named)).flatten())
        {
            if word == "next" {
                i += 1;
            }
            let ahead = (w - weekday(today)).rem_euclid(7);
            set_day(plus(if ahead == 0 { 7 } else { ahead }), &mut day)?;
        } else if let Some(d) = Day::parse(word) {
            set_day(Some(d), &mut day)?;
        } else if let (Some(m), Some(d)) = (month_named(word), next.and_then(day_of_month)) {
            // Dec 3 [2027]
            i += 1;
            match after.and_then(year) {
                Some(y) => {
                    i += 1;
                    set_day(explicit_date(y, m, d), &mut day)?
                }
                None => set_day(next_date(today, m, d), &mut day)?,
            }
        } else if let (Some(d), Some(m)) = (day_of_month(word), next.and_then(month_named)) {
            // 3 Dec [2027]
            i += 1;
            match after.and_then(year) {
                Some(y) => {
                    i += 1;
                    set_day(explicit_date(y, m, d), &mut day)?
                }
                None => set_day(next_date(today, m, d), &mut day)?,
            }
        } else if let Some((t, used_next)) = time_of_day(word, next) {
            if used_next {
                i += 1;
            }
            if time.replace(t).is_some() {
                return Err(bad("two times"));
            }
        } else {
            return Err(bad(&format!("{word:?} is not a day or a time")));
        }
    }
    match (day, time) {
        (Some(day), time) => Ok((day, time)),
        (None, Some(time)) => {
            let at = |day: Day| schedule::instant(day, time.seconds(), time.nanos, zone);
            let day = if at(today) > now {
                today
            } else {
                plus(1).ok_or_else(|| bad("no such date"))?
            };
            Ok((day, Some(time)))
        }
        (None, None) => Err(bad("nothing given")),
    }
}

/// Whether `day` (at `time`, else as a whole day) has passed at `now` in `zone`: a day
/// without a time passes at its end (today's date alone is not past).
pub fn has_passed(day: Day, time: Option<TimeOfDay>, zone: &Zone, now: Timestamp) -> bool {
    match time {
        Some(t) => schedule::instant(day, t.seconds(), t.nanos, zone) <= now,
        None => schedule::local(now, zone).is_some_and(|(today, _)| day < today),
    }
}

/// The day and time in `zone` that lies `after` from `now`.
pub fn in_from_now(after: Duration, zone: &Zone, now: Timestamp) -> Result<(Day, TimeOfDay), String> {
    schedule::local(now.plus(after), zone).ok_or_else(|| "that is too far in the future".to_string())
}

/// The recurrence of `--every` / `--every-month [--day N]`; the time of day repeats the
/// first occurrence's.
pub fn recurrence(
    every: Option<&str>,
    every_month: bool,
    day: Option<u32>,
    time: Option<TimeOfDay>,
) -> Result<Option<Recurrence>, String> {
    if let Some(days) = every {
        return Ok(Some(Recurrence::EveryDays {
            days: parse_days(days)?,
            time,
        }));
    }
    if every_month {
        if let Some(d) = day.filter(|d| !(1..=31).contains(d)) {
            return Err(format!("--day {d}: a day of the month is 1 to 31"));
        }
        return Ok(Some(Recurrence::EveryMonths { months: 1, day, time }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2w").unwrap(), Duration::from_secs(14 * 86_400));
        for bad in ["", "2", "h", "2x", "1.5h", "-1h", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_days("3d").unwrap(), 3);
        assert_eq!(parse_days("2w").unwrap(), 14);
        assert_eq!(parse_days("5").unwrap(), 5);
        assert!(parse_days("0d").is_err() && parse_days("xd").is_err());
    }

    #[test]
    fn times_are_read_in_the_accounts_zone() {
        let zurich = Zone::Named(jiff::tz::TimeZone::get("Europe/Zurich").unwrap());
        let now = Timestamp::parse("2026-07-01T10:00:00Z").unwrap(); // 12:00 in Zurich
        let (day, time) = parse_at("13:30", &zurich, now).unwrap();
        assert_eq!(
            (day.to_string(), time.unwrap().to_string()),
            ("2026-07-01".into(), "13:30:00".into())
        );
        let (day, _) = parse_at("11:00", &zurich, now).unwrap();
        assert_eq!(day.to_string(), "2026-07-02", "already past today: tomorrow");
        let (day, time) = parse_at("2026-12-01 09:00", &zurich, now).unwrap();
        assert_eq!(
            (day.to_string(), time.unwrap().to_string()),
            ("2026-12-01".into(), "09:00:00".into())
        );
        assert_eq!(parse_at("2026-12-01", &zurich, now).unwrap().1, None);
        let (day, time) = in_from_now(Duration::from_secs(7200), &zurich, now).unwrap();
        assert_eq!(
            (day.to_string(), time.to_string()),
            ("2026-07-01".into(), "14:00:00".into())
        );
    }

    fn zurich() -> Zone {
        Zone::Named(jiff::tz::TimeZone::get("Europe/Zurich").unwrap())
    }

    /// `--at text` at `now` in Zurich, as "YYYY-MM-DD HH:MM:SS" or "YYYY-MM-DD".
    fn at(text: &str, now: &str) -> String {
        let (day, time) = parse_at(text, &zurich(), Timestamp::parse(now).unwrap()).unwrap();
        match time {
            Some(t) => format!("{day} {t}"),
            None => day.to_string(),
        }
    }

    #[test]
    fn natural_times() {
        // Thursday 2026-11-26, 12:00 in Zurich
        let now = "2026-11-26T11:00:00Z";
        assert_eq!(at("9:00", now), "2026-11-27 09:00:00");
        assert_eq!(at("9am", now), "2026-11-27 09:00:00");
        assert_eq!(at("9 AM", now), "2026-11-27 09:00:00");
        assert_eq!(at("9pm", now), "2026-11-26 21:00:00");
        assert_eq!(at("9:30pm", now), "2026-11-26 21:30:00");
        assert_eq!(at("12am", now), "2026-11-27 00:00:00");
        assert_eq!(at("12pm", now), "2026-11-27 12:00:00");
        assert_eq!(at("noon", now), "2026-11-27 12:00:00");
        assert_eq!(at("21:30", now), "2026-11-26 21:30:00");
        assert_eq!(at("tomorrow", now), "2026-11-27");
        assert_eq!(at("today", now), "2026-11-26");
        assert_eq!(at("tomorrow 9am", now), "2026-11-27 09:00:00");
        assert_eq!(at("tomorrow at 9am", now), "2026-11-27 09:00:00");
        assert_eq!(at("9am tomorrow", now), "2026-11-27 09:00:00");
        assert_eq!(at("mon 09:00", now), "2026-11-30 09:00:00");
        assert_eq!(at("Monday", now), "2026-11-30");
        assert_eq!(at("next monday", now), "2026-11-30");
        assert_eq!(at("thu", now), "2026-12-03", "a weekday is the next one after today");
        assert_eq!(at("fri 8pm", now), "2026-11-27 20:00:00");
        assert_eq!(at("next week", now), "2026-11-30");
        assert_eq!(at("next week 10:00", now), "2026-11-30 10:00:00");
        assert_eq!(at("3 Dec", now), "2026-12-03");
        assert_eq!(at("Dec 3", now), "2026-12-03");
        assert_eq!(at("3rd December 9:15", now), "2026-12-03 09:15:00");
        assert_eq!(at("1 Jan", now), "2027-01-01", "without a year: the next one");
        assert_eq!(at("26 nov", now), "2026-11-26", "today counts");
        assert_eq!(at("3 Dec 2027", now), "2027-12-03");
        assert_eq!(at("Dec 3, 2027 18:00", now), "2027-12-03 18:00:00");
        assert_eq!(at("2026-12-01", now), "2026-12-01");
        assert_eq!(at("2026-12-01 09:00", now), "2026-12-01 09:00:00");
        assert_eq!(at("2026-12-01T09:00", now), "2026-12-01 09:00:00");
        assert_eq!(at("29 feb", now), "2028-02-29", "the next leap year's");
        let zone = zurich();
        let now = Timestamp::parse(now).unwrap();
        for bad in [
            "",
            "soon",
            "25:00",
            "13pm",
            "0am",
            "9:5",
            "31 Feb 2027",
            "tomorrow today",
            "9am 10am",
            "mo",
            "3 foo",
            "2026-13-01",
            "next",
            "9:00:00:00",
        ] {
            let e = parse_at(bad, &zone, now).unwrap_err();
            assert!(e.contains("try \"9:00\""), "{bad}: {e}");
        }
    }

    #[test]
    fn past_moments_are_noticed_but_not_today_without_a_time() {
        let zone = zurich();
        let now = Timestamp::parse("2026-11-26T11:00:00Z").unwrap(); // 12:00 in Zurich
        let day = |s| Day::parse(s).unwrap();
        let t = |s| TimeOfDay::parse(s);
        assert!(has_passed(day("2020-01-01"), None, &zone, now));
        assert!(has_passed(day("2026-11-25"), None, &zone, now));
        assert!(!has_passed(day("2026-11-26"), None, &zone, now), "today's date alone");
        assert!(has_passed(day("2026-11-26"), t("11:59"), &zone, now));
        assert!(!has_passed(day("2026-11-26"), t("12:01"), &zone, now));
        // a time alone is never past: it is its next occurrence
        let (d, time) = parse_at("11:00", &zone, now).unwrap();
        assert!(!has_passed(d, time, &zone, now));
    }

    #[test]
    fn natural_times_across_daylight_saving_changes() {
        let zone = zurich();
        // Saturday 2026-03-28 10:00 CET; the clocks go 02:00 → 03:00 on Sunday 29 March
        let now = "2026-03-28T09:00:00Z";
        assert_eq!(at("tomorrow 9am", now), "2026-03-29 09:00:00");
        let (d, t) = parse_at("tomorrow 9am", &zone, Timestamp::parse(now).unwrap()).unwrap();
        let t = t.unwrap();
        assert_eq!(
            schedule::instant(d, t.seconds(), 0, &zone).to_string(),
            "2026-03-29T07:00:00Z",
            "09:00 summer time"
        );
        // 01:30 CET on the night of the change: 02:30 does not exist today, it is due at 03:00
        let now = "2026-03-29T00:30:00Z";
        assert_eq!(at("2:30", now), "2026-03-29 02:30:00");
        assert_eq!(at("9:00", now), "2026-03-29 09:00:00");
        // 03:30 CEST: 02:30 has passed (the gap is behind), so it is tomorrow's
        assert_eq!(at("2:30", "2026-03-29T01:30:00Z"), "2026-03-30 02:30:00");
        // Saturday 2026-10-24 the clocks go back on Sunday 25 October 03:00 → 02:00
        let now = "2026-10-24T20:00:00Z"; // 22:00 CEST
        assert_eq!(at("tomorrow 9am", now), "2026-10-25 09:00:00");
        let (d, t) = parse_at("tomorrow 9am", &zone, Timestamp::parse(now).unwrap()).unwrap();
        let t = t.unwrap();
        assert_eq!(
            schedule::instant(d, t.seconds(), 0, &zone).to_string(),
            "2026-10-25T08:00:00Z",
            "09:00 winter time"
        );
        assert_eq!(at("sun", now), "2026-10-25");
        // 02:30 CEST (00:30Z), first pass: 02:30 again comes an hour later but is the same wall time
        let first = Timestamp::parse("2026-10-25T00:30:00Z").unwrap();
        assert!(has_passed(
            Day::parse("2026-10-25").unwrap(),
            TimeOfDay::parse("02:00"),
            &zone,
            first
        ));
        // --in across the change: 24 hours after Saturday 12:00 CET is Sunday 13:00 CEST
        let (day, time) = in_from_now(
            Duration::from_secs(86_400),
            &zone,
            Timestamp::parse("2026-03-28T11:00:00Z").unwrap(),
        )
        .unwrap();
        assert_eq!(format!("{day} {time}"), "2026-03-29 13:00:00");
    }

    #[test]
    fn recurrences() {
        assert_eq!(
            recurrence(Some("3d"), false, None, None).unwrap(),
            Some(Recurrence::EveryDays { days: 3, time: None })
        );
        assert_eq!(
            recurrence(None, true, Some(1), None).unwrap(),
            Some(Recurrence::EveryMonths {
                months: 1,
                day: Some(1),
                time: None
            })
        );
        assert!(recurrence(None, true, Some(32), None).is_err());
        assert_eq!(recurrence(None, false, None, None).unwrap(), None);
    }
}
