//! "In two hours", "at 09:00", "every 3 days": the words of `pigeonhole remind`, turned into
//! a scheduled day, time and recurrence in the account's time zone (scheduler.md §2.2–2.3).

use crate::domain::scheduler::models::{Day, Recurrence, TimeOfDay};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::Timestamp;

/// The durations of `--in` (and of `--at "in …"`): jiff's friendly format, case aside:
/// `90s`, `30m`, `2h`, `1.5h`, `2H`, `1h30m`, `2 hours`, `an hour`, `3d`, `1w`, `2 weeks`,
/// `1mo`, `1y`. `m` is minutes, `mo` months. Days and longer are calendar units (`--in 1d`
/// is tomorrow at this time, also across a daylight-saving change); hours and shorter are
/// elapsed time.
pub fn parse_duration(text: &str) -> Result<jiff::Span, String> {
    let bad = |why: &str| {
        format!("{text:?} is not a duration ({why}): try 30m, 2h, 1.5h, \"2 hours\", 1h30m, 3d, 1w, 1mo or 1y")
    };
    let lowered = text.trim().to_lowercase();
    let lowered = lowered.strip_prefix("in ").map(str::trim_start).unwrap_or(&lowered);
    // "an hour", "a week": one
    let lowered = match lowered.split_once(' ') {
        Some(("a" | "an", rest)) => format!("1 {rest}"),
        _ => lowered.to_owned(),
    };
    if lowered.is_empty() {
        return Err(bad("nothing given"));
    }
    if lowered.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("a number needs its unit"));
    }
    let span = jiff::fmt::friendly::SpanParser::new()
        .parse_span(lowered.as_str())
        .map_err(|_| bad("not a number and a unit, or too large"))?;
    if span.is_negative() {
        return Err(bad("it lies in the past"));
    }
    if span.is_zero() {
        return Err(bad("that is no time at all"));
    }
    Ok(span)
}

/// How often `--every` repeats: a number of days, or of months.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Every {
    Days(u32),
    Months(u32),
}

/// `--every`: `3d`, `2w`, `5` (days), `1mo`, `6 months`, `1y`, `2 years`, or a unit alone
/// (`day`, `week`, `month`, `year`, and `daily`, `weekly`, `monthly`, `yearly`). Days and
/// weeks repeat every so many days, months and years every so many months (a year is 12
/// months: scheduler.md §2.3 knows days and months only).
pub fn parse_every(text: &str) -> Result<Every, String> {
    let bad = || {
        format!(
            "{text:?} is not a repeat such as 3d, 2w, 1mo, 1y, \"2 weeks\" or yearly: repeats are in whole days, \
             weeks, months or years"
        )
    };
    let lowered = text.trim().to_lowercase();
    let unit = match lowered.as_str() {
        "daily" | "day" => "1d",
        "weekly" | "week" => "1w",
        "monthly" | "month" => "1mo",
        "yearly" | "year" | "annually" => "1y",
        digits if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            let days: u32 = digits.parse().map_err(|_| bad())?;
            return (days >= 1).then_some(Every::Days(days)).ok_or_else(bad);
        }
        other => other,
    };
    let span = jiff::fmt::friendly::SpanParser::new()
        .parse_span(unit)
        .map_err(|_| bad())?;
    let count = |n: i64, per: i64| u32::try_from(n.checked_mul(per)?).ok();
    let calendar_days = (span.get_days() as i64, span.get_weeks() as i64);
    let months = (span.get_months() as i64, span.get_years() as i64);
    let finer = span.get_hours() != 0
        || span.get_minutes() != 0
        || span.get_seconds() != 0
        || span.get_milliseconds() != 0
        || span.get_microseconds() != 0
        || span.get_nanoseconds() != 0;
    if span.is_negative() || finer {
        return Err(bad());
    }
    let every = match (calendar_days, months) {
        ((d, w), (0, 0)) => Every::Days(
            count(d, 1)
                .zip(count(w, 7))
                .and_then(|(d, w)| d.checked_add(w))
                .ok_or_else(bad)?,
        ),
        ((0, 0), (m, y)) => Every::Months(
            count(m, 1)
                .zip(count(y, 12))
                .and_then(|(m, y)| m.checked_add(y))
                .ok_or_else(bad)?,
        ),
        _ => return Err(bad()),
    };
    match every {
        Every::Days(0) | Every::Months(0) => Err(bad()),
        every => Ok(every),
    }
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

/// The time a part of the day stands for: `morning` 09:00, `noon` 12:00, `afternoon` 15:00,
/// `evening` 18:00, `night` 20:00, `midnight` 00:00.
fn part_of_day(word: &str) -> Option<TimeOfDay> {
    let hour = match word {
        "morning" => 9,
        "afternoon" => 15,
        "evening" => 18,
        "night" => 20,
        "midnight" => 0,
        _ => return None,
    };
    Some(hour_of_day(hour))
}

fn hour_of_day(hour: u32) -> TimeOfDay {
    TimeOfDay {
        hour,
        minute: 0,
        second: 0,
        nanos: 0,
    }
}

/// An hour without minutes, `0` to `23` (`tomorrow at 9`): only after `at` or a day.
fn bare_hour(word: &str) -> Option<TimeOfDay> {
    if word.is_empty() || word.len() > 2 || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok().filter(|h| *h <= 23).map(hour_of_day)
}

/// The day `months` calendar months after `day`, its day of the month clipped to the month's
/// length (31 January + 1 month = 28 or 29 February).
fn months_after(day: Day, months: i64) -> Option<Day> {
    let date = crate::domain::wire::civil_date(day.year, day.month, day.day)?;
    let later = date.checked_add(jiff::Span::new().try_months(months).ok()?).ok()?;
    Some(Day {
        year: i64::from(later.year()),
        month: later.month() as u32,
        day: later.day() as u32,
    })
}

/// What `--at` names, read in the account's zone at `now`: a day and perhaps a time.
///
/// - `in` and a duration (`in 2 hours`, `in 3 days`): as `--in`.
/// - Days: `today`, `tomorrow`, `tonight` (today at 20:00), a weekday (`mon`, `monday`: the
///   next one after today), `next monday`, `next week` (the coming Monday), `next month`
///   and `next year` (this day then), `2026-12-01`, `3 Dec`, `Dec 3`, `3rd december 2027`,
///   `1st of december` (a date without a year: its next occurrence, today included).
/// - Times: `9:00`, `21:30`, `9am`, `9:30 pm`, `noon`, `midnight`, the parts of the day
///   `morning` 09:00, `afternoon` 15:00, `evening` 18:00, `night` 20:00 (`this evening` is
///   today's), and an hour alone after `at` or a day (`tomorrow at 9`, `mon 18`).
///
/// Either or both, in either order; `at`, `on`, `the` and `of` may stand between. A time
/// alone is its next occurrence; a day alone is the day without a time.
pub fn parse_at(text: &str, zone: &Zone, now: Timestamp) -> Result<(Day, Option<TimeOfDay>), String> {
    let bad = |why: &str| {
        format!(
            "{text:?} is not a time I can read ({why}): try \"9:00\", \"9am\", \"tomorrow at 9\", \"tonight\", \
             \"in 2 hours\", \"mon 09:00\", \"next week\", \"next month\", \"1st of december\", \"2026-12-01 09:00\""
        )
    };
    let (today, _) = schedule::local(now, zone).ok_or_else(|| bad("now is outside the calendar"))?;
    let lowered = text.trim().to_lowercase().replace(',', " ");
    if let Some(rest) = lowered
        .strip_prefix("in")
        .filter(|rest| rest.is_empty() || rest.starts_with(' '))
    {
        let (day, time) = in_from_now(parse_duration(rest).map_err(|e| bad(&e))?, zone, now)?;
        return Ok((day, Some(time)));
    }
    // 2026-12-01T09:00 as two words
    let lowered = match lowered.split_once('t') {
        Some((d, t)) if Day::parse(d).is_some() && !t.is_empty() => format!("{d} {t}"),
        _ => lowered,
    };
    let words: Vec<&str> = lowered
        .split_whitespace()
        .filter(|w| !matches!(*w, "on" | "the" | "of"))
        .collect();
    let mut day: Option<Day> = None;
    let mut time: Option<TimeOfDay> = None;
    let set_day = |d: Option<Day>, day: &mut Option<Day>| -> Result<(), String> {
        let d = d.ok_or_else(|| bad("no such date"))?;
        match day.replace(d) {
            Some(_) => Err(bad("two days")),
            None => Ok(()),
        }
    };
    let set_time = |t: TimeOfDay, time: &mut Option<TimeOfDay>| -> Result<(), String> {
        match time.replace(t) {
            Some(_) => Err(bad("two times")),
            None => Ok(()),
        }
    };
    let plus = |n: i64| Day::from_number(today.number() + n);
    let mut after_at = false;
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        let next = words.get(i + 1).copied();
        let after = words.get(i + 2).copied();
        let at_before = std::mem::take(&mut after_at);
        i += 1;
        if word == "at" {
            after_at = true;
            continue;
        }
        if word == "today" {
            set_day(Some(today), &mut day)?;
        } else if word == "tomorrow" {
            set_day(plus(1), &mut day)?;
        } else if word == "tonight" {
            set_day(Some(today), &mut day)?;
            set_time(hour_of_day(20), &mut time)?;
        } else if word == "this" {
            // this morning / afternoon / evening: today's
            let t = next
                .and_then(part_of_day)
                .ok_or_else(|| bad("\"this\" goes with morning, afternoon or evening"))?;
            i += 1;
            set_day(Some(today), &mut day)?;
            set_time(t, &mut time)?;
        } else if word == "next" && next == Some("week") {
            i += 1;
            set_day(plus(7 - weekday(today)), &mut day)?;
        } else if word == "next" && next == Some("month") {
            i += 1;
            set_day(months_after(today, 1), &mut day)?;
        } else if word == "next" && next == Some("year") {
            i += 1;
            set_day(months_after(today, 12), &mut day)?;
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
            // 3 Dec [2027], 1st of December
            i += 1;
            match after.and_then(year) {
                Some(y) => {
                    i += 1;
                    set_day(explicit_date(y, m, d), &mut day)?
                }
                None => set_day(next_date(today, m, d), &mut day)?,
            }
        } else if let Some(t) = part_of_day(word) {
            set_time(t, &mut time)?;
        } else if let Some((t, used_next)) = time_of_day(word, next) {
            if used_next {
                i += 1;
            }
            set_time(t, &mut time)?;
        } else if let Some(t) = bare_hour(word).filter(|_| at_before || day.is_some()) {
            set_time(t, &mut time)?;
        } else if bare_hour(word).is_some() {
            return Err(bad(&format!(
                "{word:?} alone is no time: say \"at {word}\", \"{word}:00\" or \"{word}am\""
            )));
        } else {
            return Err(bad(&format!("{word:?} is not a day or a time")));
        }
    }
    if after_at {
        return Err(bad("\"at\" what?"));
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

/// The day and time in `zone` that lies `after` from `now`: calendar units (days, weeks,
/// months, years) move the wall clock's date and keep its time, hours and shorter are
/// elapsed time (jiff's arithmetic on a zoned date-time).
pub fn in_from_now(after: jiff::Span, zone: &Zone, now: Timestamp) -> Result<(Day, TimeOfDay), String> {
    let too_far = || "that is too far in the future".to_string();
    let tz = match zone {
        Zone::Named(tz) => tz.clone(),
        Zone::Fixed(minutes) => jiff::tz::TimeZone::fixed(
            jiff::tz::Offset::from_seconds(minutes.saturating_mul(60)).map_err(|_| too_far())?,
        ),
    };
    let start = jiff::Timestamp::new(now.secs, now.nanos as i32).map_err(|_| too_far())?;
    let later = start.to_zoned_datetime(tz).checked_add(after).map_err(|_| too_far())?;
    let (date, clock) = (later.date(), later.time());
    let day = Day::parse(&format!("{:04}-{:02}-{:02}", date.year(), date.month(), date.day())).ok_or_else(too_far)?;
    Ok((
        day,
        TimeOfDay {
            hour: clock.hour() as u32,
            minute: clock.minute() as u32,
            second: clock.second() as u32,
            nanos: 0,
        },
    ))
}

/// How a reminder repeats, as the command line says it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Repeat<'a> {
    /// `--every`
    pub every: Option<&'a str>,
    /// `--every-month`
    pub every_month: bool,
    /// `--every-year`
    pub every_year: bool,
    /// `--day N`
    pub day: Option<u32>,
}

impl Repeat<'_> {
    /// Whether anything was said.
    pub fn given(&self) -> bool {
        self.every.is_some() || self.every_month || self.every_year || self.day.is_some()
    }
}

/// The recurrence of `--every` / `--every-month` / `--every-year` (`--day N` for the ones by
/// months) for a reminder first due on `first` at `time`: the time of day repeats the first
/// occurrence's. A yearly reminder first due on 29 February comes back on the 29th in leap
/// years (scheduler.md §5.3).
pub fn recurrence(repeat: Repeat<'_>, first: Day, time: Option<TimeOfDay>) -> Result<Option<Recurrence>, String> {
    let every = match (repeat.every, repeat.every_month, repeat.every_year) {
        (Some(text), _, _) => parse_every(text)?,
        (None, true, _) => Every::Months(1),
        (None, false, true) => Every::Months(12),
        (None, false, false) if repeat.day.is_some() => {
            return Err("--day N goes with a repeat by months: --every-month, --every 3mo or --every-year".into())
        }
        (None, false, false) => return Ok(None),
    };
    if let Some(d) = repeat.day.filter(|d| !(1..=31).contains(d)) {
        return Err(format!("--day {d}: a day of the month is 1 to 31"));
    }
    Ok(Some(match every {
        Every::Days(days) if repeat.day.is_none() => Recurrence::EveryDays { days, time },
        Every::Days(_) => {
            return Err(
                "--day N goes with a repeat by months (--every-month, --every 3mo, --every-year), not by days".into(),
            )
        }
        Every::Months(months) => {
            let leap_day = months % 12 == 0 && first.month == 2 && first.day == 29;
            Recurrence::EveryMonths {
                months,
                day: repeat.day.or(leap_day.then_some(29)),
                time,
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(text: &str) -> i64 {
        let span = parse_duration(text).unwrap();
        span.total((jiff::Unit::Second, jiff::civil::date(2026, 1, 1))).unwrap() as i64
    }

    #[test]
    fn durations() {
        assert_eq!(secs("90s"), 90);
        assert_eq!(secs("1h30m"), 5400);
        assert_eq!(secs("2w"), 14 * 86_400);
        assert_eq!(secs("1.5h"), 5400);
        assert_eq!(secs("2H"), 7200);
        assert_eq!(secs("90m"), 5400);
        assert_eq!(secs("2 hours"), 7200);
        assert_eq!(secs("in 2 hours"), 7200);
        assert_eq!(secs("an hour"), 3600);
        assert_eq!(secs("a week"), 7 * 86_400);
        assert_eq!(secs("2d"), 2 * 86_400);
        assert_eq!(secs("1 hour 30 minutes"), 5400);
        assert_eq!(parse_duration("1mo").unwrap().get_months(), 1);
        assert_eq!(parse_duration("1y").unwrap().get_years(), 1);
        for (bad, why) in [
            ("", "nothing given"),
            ("2", "needs its unit"),
            ("h", "not a number and a unit"),
            ("2x", "not a number and a unit"),
            ("1.5d", "not a number and a unit"),
            ("-1h", "in the past"),
            ("0m", "no time at all"),
            ("99999999999999999999d", "too large"),
            ("soon", "not a number and a unit"),
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains(why) && e.contains("try 30m, 2h, 1.5h"), "{bad}: {e}");
        }
    }

    #[test]
    fn repeats() {
        assert_eq!(parse_every("3d").unwrap(), Every::Days(3));
        assert_eq!(parse_every("2w").unwrap(), Every::Days(14));
        assert_eq!(parse_every("5").unwrap(), Every::Days(5));
        assert_eq!(parse_every("2 weeks").unwrap(), Every::Days(14));
        assert_eq!(parse_every("Daily").unwrap(), Every::Days(1));
        assert_eq!(parse_every("1y").unwrap(), Every::Months(12));
        assert_eq!(parse_every("2 years").unwrap(), Every::Months(24));
        assert_eq!(parse_every("yearly").unwrap(), Every::Months(12));
        assert_eq!(parse_every("6mo").unwrap(), Every::Months(6));
        assert_eq!(parse_every("1y6mo").unwrap(), Every::Months(18));
        for bad in [
            "",
            "0d",
            "0",
            "xd",
            "2h",
            "1m",
            "1w2mo",
            "-3d",
            "1.5d",
            "soon",
            "99999999999y",
        ] {
            let e = parse_every(bad).unwrap_err();
            assert!(
                e.contains("repeats are in whole days, weeks, months or years"),
                "{bad}: {e}"
            );
        }
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
        let (day, time) = in_from_now(parse_duration("2h").unwrap(), &zurich, now).unwrap();
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
        // --in across the change: 24 hours after Saturday 12:00 CET is Sunday 13:00 CEST,
        // one day after it is Sunday 12:00 (a calendar day keeps the wall clock)
        let saturday = Timestamp::parse("2026-03-28T11:00:00Z").unwrap();
        let (day, time) = in_from_now(parse_duration("24h").unwrap(), &zone, saturday).unwrap();
        assert_eq!(format!("{day} {time}"), "2026-03-29 13:00:00");
        let (day, time) = in_from_now(parse_duration("1d").unwrap(), &zone, saturday).unwrap();
        assert_eq!(format!("{day} {time}"), "2026-03-29 12:00:00");
        assert_eq!(at("in 1 day", "2026-03-28T11:00:00Z"), "2026-03-29 12:00:00");
    }

    #[test]
    fn recurrences() {
        let day = |s| Day::parse(s).unwrap();
        let first = day("2026-12-01");
        let every = |text| Repeat {
            every: Some(text),
            ..Repeat::default()
        };
        assert_eq!(
            recurrence(every("3d"), first, None).unwrap(),
            Some(Recurrence::EveryDays { days: 3, time: None })
        );
        let monthly_on_1st = Repeat {
            every_month: true,
            day: Some(1),
            ..Repeat::default()
        };
        assert_eq!(
            recurrence(monthly_on_1st, first, None).unwrap(),
            Some(Recurrence::EveryMonths {
                months: 1,
                day: Some(1),
                time: None
            })
        );
        let yearly = Repeat {
            every_year: true,
            ..Repeat::default()
        };
        let nine = TimeOfDay::parse("09:00");
        assert_eq!(
            recurrence(yearly, first, nine).unwrap(),
            Some(Recurrence::EveryMonths {
                months: 12,
                day: None,
                time: nine
            })
        );
        assert_eq!(recurrence(every("1y"), first, None), recurrence(yearly, first, None));
        // a birthday on 29 February comes back on the 29th in leap years
        assert_eq!(
            recurrence(yearly, day("2028-02-29"), None).unwrap(),
            Some(Recurrence::EveryMonths {
                months: 12,
                day: Some(29),
                time: None
            })
        );
        let err = recurrence(
            Repeat {
                every_month: true,
                day: Some(32),
                ..Repeat::default()
            },
            first,
            None,
        )
        .unwrap_err();
        assert!(err.contains("1 to 31"), "{err}");
        let err = recurrence(
            Repeat {
                every: Some("3d"),
                day: Some(1),
                ..Repeat::default()
            },
            first,
            None,
        )
        .unwrap_err();
        assert!(err.contains("goes with a repeat by months"), "{err}");
        assert_eq!(recurrence(Repeat::default(), first, None).unwrap(), None);
    }

    #[test]
    fn phrases_people_say() {
        // Thursday 2026-11-26, 12:00 in Zurich
        let now = "2026-11-26T11:00:00Z";
        assert_eq!(at("in 2 hours", now), "2026-11-26 14:00:00");
        assert_eq!(at("In 90m", now), "2026-11-26 13:30:00");
        assert_eq!(at("in an hour", now), "2026-11-26 13:00:00");
        assert_eq!(at("in 3 days", now), "2026-11-29 12:00:00");
        assert_eq!(at("tonight", now), "2026-11-26 20:00:00");
        assert_eq!(at("this evening", now), "2026-11-26 18:00:00");
        assert_eq!(at("this afternoon", now), "2026-11-26 15:00:00");
        assert_eq!(at("tomorrow morning", now), "2026-11-27 09:00:00");
        assert_eq!(at("tomorrow evening", now), "2026-11-27 18:00:00");
        assert_eq!(at("monday morning", now), "2026-11-30 09:00:00");
        assert_eq!(at("evening", now), "2026-11-26 18:00:00", "its next occurrence");
        assert_eq!(at("morning", now), "2026-11-27 09:00:00", "its next occurrence");
        assert_eq!(at("midnight", now), "2026-11-27 00:00:00");
        assert_eq!(at("tomorrow at 9", now), "2026-11-27 09:00:00");
        assert_eq!(at("tomorrow 9", now), "2026-11-27 09:00:00");
        assert_eq!(at("tomorrow 9am", now), "2026-11-27 09:00:00");
        assert_eq!(at("at 9", now), "2026-11-27 09:00:00");
        assert_eq!(at("at 18:30", now), "2026-11-26 18:30:00");
        assert_eq!(at("mon 18", now), "2026-11-30 18:00:00");
        assert_eq!(at("next month", now), "2026-12-26");
        assert_eq!(at("next month at 9am", now), "2026-12-26 09:00:00");
        assert_eq!(at("next year", now), "2027-11-26");
        assert_eq!(at("1st of december", now), "2026-12-01");
        assert_eq!(at("on the 1st of December at 9", now), "2026-12-01 09:00:00");
        assert_eq!(at("December 1st", now), "2026-12-01");
        assert_eq!(at("dec 1", now), "2026-12-01");
        assert_eq!(at("1st of november", now), "2027-11-01", "the next one");
        // next month from the 31st: the last day of the next month
        assert_eq!(at("next month", "2027-01-31T11:00:00Z"), "2027-02-28");
        // in the account's zone: 23:30 UTC is already tomorrow in Zurich
        assert_eq!(at("tonight", "2026-11-26T23:30:00Z"), "2026-11-27 20:00:00");
        let zone = zurich();
        let now = Timestamp::parse(now).unwrap();
        for (bad, why) in [
            ("in soon", "not a duration"),
            ("in -2h", "in the past"),
            ("in", "nothing given"),
            ("9", "alone is no time"),
            ("this", "goes with morning"),
            ("this monday", "goes with morning"),
            ("tonight tomorrow", "two days"),
            ("tonight at 9pm", "two times"),
            ("tomorrow at 25", "\"25\" is not a day or a time"),
            ("tomorrow at", "\"at\" what?"),
            ("next", "\"next\" is not a day or a time"),
            ("31st of february", "no such date"),
        ] {
            let e = parse_at(bad, &zone, now).unwrap_err();
            assert!(e.contains(why) && e.contains("try \"9:00\""), "{bad}: {e}");
        }
    }
}
