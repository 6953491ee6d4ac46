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

/// The wall-clock day and time in `zone` that `--at` names: `YYYY-MM-DD HH:MM[:SS]` (also
/// with `T`), `YYYY-MM-DD` (the day, no time) or `HH:MM[:SS]` (its next occurrence after
/// `now`).
pub fn parse_at(text: &str, zone: &Zone, now: Timestamp) -> Result<(Day, Option<TimeOfDay>), String> {
    let bad = || format!("{text:?} is not a time such as \"2026-12-01 09:00\", \"2026-12-01\" or \"09:00\"");
    let text = text.trim();
    if let Some(time) = TimeOfDay::parse(text) {
        let (today, _) = schedule::local(now, zone).ok_or_else(bad)?;
        let at = |day: Day| schedule::instant(day, time.seconds(), time.nanos, zone);
        let day = if at(today) > now {
            today
        } else {
            Day::from_number(today.number() + 1).ok_or_else(bad)?
        };
        return Ok((day, Some(time)));
    }
    if let Some(day) = Day::parse(text) {
        return Ok((day, None));
    }
    let (day, time) = text.split_once(' ').or_else(|| text.split_once('T')).ok_or_else(bad)?;
    let day = Day::parse(day.trim()).ok_or_else(bad)?;
    let time = TimeOfDay::parse(time.trim()).ok_or_else(bad)?;
    Ok((day, Some(time)))
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
        assert!(parse_at("tomorrow", &zurich, now).is_err());
        let (day, time) = in_from_now(Duration::from_secs(7200), &zurich, now).unwrap();
        assert_eq!(
            (day.to_string(), time.to_string()),
            ("2026-07-01".into(), "14:00:00".into())
        );
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
