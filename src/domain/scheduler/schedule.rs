//! When items are due (scheduler.md §5.1, §2.7) and their next occurrences (§5.3).

use super::models::{Day, Recurrence, Tickle, TimeOfDay, TimeZoneSetting};
use crate::domain::wire::{self, Timestamp};

/// The zone an account's wall-clock times are read in.
#[derive(Clone, Debug)]
pub enum Zone {
    /// Minutes east of UTC.
    Fixed(i32),
    /// An IANA zone, with its daylight saving rules (built into the binary).
    Named(jiff::tz::TimeZone),
}

impl Zone {
    /// A `name` of the form `Area/Location` known to the built-in database wins over the
    /// offset; any other name leaves the offset in charge.
    pub fn of(setting: &TimeZoneSetting) -> Zone {
        if setting.name.contains('/') {
            if let Ok(tz) = jiff::tz::TimeZone::get(&setting.name) {
                return Zone::Named(tz);
            }
        }
        Zone::Fixed(setting.offset)
    }
}

/// The instant at which a wall-clock time (day, seconds since midnight, nanoseconds) occurs
/// in `zone`. Wall times skipped by a daylight-saving change are due at the first instant
/// after the gap; repeated ones at their earlier instant.
pub fn instant(day: Day, seconds: i64, nanos: u32, zone: &Zone) -> Timestamp {
    let local = day.number() * 86_400 + seconds;
    let secs = match zone {
        Zone::Fixed(minutes) => local - *minutes as i64 * 60,
        Zone::Named(tz) => named_instant(tz, day, seconds, nanos).unwrap_or(local),
    };
    Timestamp::from_unix(secs, nanos)
}

fn named_instant(tz: &jiff::tz::TimeZone, day: Day, seconds: i64, nanos: u32) -> Option<i64> {
    use jiff::tz::AmbiguousOffset;
    let dt = jiff::civil::DateTime::new(
        i16::try_from(day.year).ok()?,
        day.month as i8,
        day.day as i8,
        (seconds / 3600) as i8,
        ((seconds % 3600) / 60) as i8,
        (seconds % 60) as i8,
        nanos as i32,
    )
    .ok()?;
    let local = day.number() * 86_400 + seconds;
    Some(match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => local - offset.seconds() as i64,
        AmbiguousOffset::Fold { before, .. } => local - before.seconds() as i64,
        AmbiguousOffset::Gap { after, .. } => {
            // the transition is the first one after this wall time read with the later offset
            let probe = jiff::Timestamp::from_second(local - after.seconds() as i64).ok()?;
            tz.following(probe).next()?.timestamp().as_second()
        }
    })
}

/// The wall-clock day and time of `at` in `zone` (to whole seconds): the inverse of
/// [`instant`], for clients that read "in two hours" in the account's zone.
pub fn local(at: Timestamp, zone: &Zone) -> Option<(Day, TimeOfDay)> {
    let offset = match zone {
        Zone::Fixed(minutes) => i64::from(*minutes) * 60,
        Zone::Named(tz) => i64::from(tz.to_offset(jiff::Timestamp::from_second(at.secs).ok()?).seconds()),
    };
    let local = at.secs + offset;
    let day = Day::from_number(local.div_euclid(86_400))?;
    let second = local.rem_euclid(86_400) as u32;
    let time = TimeOfDay {
        hour: second / 3600,
        minute: second % 3600 / 60,
        second: second % 60,
        nanos: 0,
    };
    Some((day, time))
}

/// The due instant of an item (midnight when it has no time).
pub fn due(tickle: &Tickle, zone: &Zone) -> Timestamp {
    let (seconds, nanos) = tickle.time.map(|t| (t.seconds(), t.nanos)).unwrap_or((0, 0));
    instant(tickle.day, seconds, nanos, zone)
}

fn add_months(day: Day, months: u64) -> Option<(i64, u32)> {
    let index = day.year * 12 + (day.month as i64 - 1) + i64::try_from(months).ok()?;
    let year = index.div_euclid(12);
    (year <= 9999).then_some((year, (index.rem_euclid(12) + 1) as u32))
}

/// One step of a recurrence from `day` (§5.3); `None` past 9999-12-31.
pub fn step(day: Day, recurrence: &Recurrence) -> Option<(Day, Option<TimeOfDay>)> {
    step_by(day, recurrence, 1)
}

/// `k` steps at once where that gives the same result as stepping (days; months with a
/// fixed day), else one step.
fn step_by(day: Day, recurrence: &Recurrence, k: u64) -> Option<(Day, Option<TimeOfDay>)> {
    let next = match *recurrence {
        Recurrence::EveryDays { days, time } => {
            let n = day.number().checked_add(i64::try_from(days as u64 * k).ok()?)?;
            (Day::from_number(n)?, time)
        }
        Recurrence::EveryMonths {
            months,
            day: fixed,
            time,
        } => {
            let k = if fixed.is_some() { k } else { 1 };
            let (year, month) = add_months(day, months as u64 * k)?;
            let len = wire::days_in_month(year, month);
            let d = fixed.unwrap_or(day.day).min(len);
            (Day { year, month, day: d }, time)
        }
    };
    (next.0.year <= 9999).then_some(next)
}

/// The item moved to its first occurrence strictly after `now` (§5.2); `None` when there is
/// none before year 10000. Long gaps are crossed in big steps where that is exact.
pub fn first_after(tickle: &Tickle, zone: &Zone, now: Timestamp) -> Option<Tickle> {
    let recurrence = tickle.recurrence?;
    let mut current = tickle.clone();
    loop {
        let behind_days = (now.secs / 86_400 - current.day.number() - 2).max(0) as u64;
        let k = match recurrence {
            Recurrence::EveryDays { days, .. } => behind_days / days as u64,
            Recurrence::EveryMonths { months, .. } => behind_days / 31 / months as u64,
        };
        let (day, time) = step_by(current.day, &recurrence, k.max(1))?;
        current.day = day;
        current.time = time;
        if due(&current, zone) > now {
            return Some(current);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_wall_time_is_the_inverse_of_instant() {
        let zurich = Zone::Named(jiff::tz::TimeZone::get("Europe/Zurich").unwrap());
        for (zone, text) in [
            (&zurich, "2026-07-01T10:15:30Z"),
            (&zurich, "2026-01-01T23:30:00Z"),
            (&Zone::Fixed(-300), "2026-03-01T02:00:00Z"),
        ] {
            let at = Timestamp::parse(text).unwrap();
            let (day, time) = local(at, zone).unwrap();
            assert_eq!(instant(day, time.seconds(), 0, zone), at, "{text}");
        }
        let (day, time) = local(Timestamp::parse("2026-07-01T10:15:30Z").unwrap(), &zurich).unwrap();
        assert_eq!(
            (day.to_string(), time.to_string()),
            ("2026-07-01".into(), "12:15:30".into())
        );
    }

    fn day(s: &str) -> Day {
        Day::parse(s).unwrap()
    }

    fn tod(s: &str) -> Option<TimeOfDay> {
        TimeOfDay::parse(s)
    }

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn tickle(d: &str, t: Option<&str>, r: Option<Recurrence>) -> Tickle {
        Tickle {
            content: vec![],
            day: day(d),
            time: t.and_then(tod),
            recurrence: r,
        }
    }

    fn zone(offset: i32, name: &str) -> Zone {
        Zone::of(&TimeZoneSetting {
            offset,
            name: name.into(),
            summer: false,
        })
    }

    #[test]
    fn fixed_offsets() {
        assert_eq!(
            due(&tickle("2024-03-05", Some("09:00"), None), &zone(600, "x")),
            ts("2024-03-04T23:00:00Z")
        );
        assert_eq!(
            due(&tickle("2024-03-05", None, None), &zone(-300, "UTC-5")),
            ts("2024-03-05T05:00:00Z")
        );
        assert_eq!(
            due(&tickle("2016-12-31", Some("23:59:60.5"), None), &zone(0, "UTC")),
            ts("2016-12-31T23:59:59.5Z")
        );
    }

    #[test]
    fn named_zones_follow_daylight_saving() {
        let z = zone(0, "Europe/Zurich");
        assert!(matches!(z, Zone::Named(_)));
        assert_eq!(
            due(&tickle("2024-01-15", Some("09:00"), None), &z),
            ts("2024-01-15T08:00:00Z")
        );
        assert_eq!(
            due(&tickle("2024-07-15", Some("09:00"), None), &z),
            ts("2024-07-15T07:00:00Z")
        );
        // spring forward 2024-03-31 02:00 → 03:00: 02:30 is due at the first instant after the gap
        assert_eq!(
            due(&tickle("2024-03-31", Some("02:30"), None), &z),
            ts("2024-03-31T01:00:00Z")
        );
        // fall back 2024-10-27 03:00 → 02:00: 02:30 happens twice, the earlier counts
        assert_eq!(
            due(&tickle("2024-10-27", Some("02:30"), None), &z),
            ts("2024-10-27T00:30:00Z")
        );
        assert!(matches!(zone(60, "UTC+1"), Zone::Fixed(60)));
        assert!(matches!(zone(60, "Nowhere/Atlantis"), Zone::Fixed(60)));
    }

    fn steps(start: &str, r: Recurrence, n: usize) -> Vec<String> {
        let mut d = day(start);
        (0..n)
            .map(|_| {
                d = step(d, &r).unwrap().0;
                d.to_string()
            })
            .collect()
    }

    #[test]
    fn worked_examples() {
        let r = Recurrence::EveryDays {
            days: 3,
            time: tod("09:00"),
        };
        assert_eq!(step(day("2024-01-10"), &r), Some((day("2024-01-13"), tod("09:00"))));
        let months = |m, d| Recurrence::EveryMonths {
            months: m,
            day: d,
            time: None,
        };
        assert_eq!(steps("1970-01-01", months(4, Some(7)), 1), ["1970-05-07"]);
        assert_eq!(steps("2024-11-15", months(3, None), 1), ["2025-02-15"]);
        assert_eq!(
            steps("2023-01-31", months(1, None), 3),
            ["2023-02-28", "2023-03-28", "2023-04-28"]
        );
        assert_eq!(
            steps("2023-01-31", months(1, Some(31)), 3),
            ["2023-02-28", "2023-03-31", "2023-04-30"]
        );
        assert_eq!(steps("2024-01-31", months(1, None), 1), ["2024-02-29"]);
        assert_eq!(
            steps("2020-02-29", months(12, None), 4),
            ["2021-02-28", "2022-02-28", "2023-02-28", "2024-02-28"]
        );
        assert_eq!(
            steps("2020-02-29", months(12, Some(29)), 4),
            ["2021-02-28", "2022-02-28", "2023-02-28", "2024-02-29"]
        );
        assert_eq!(
            step(day("9999-12-31"), &Recurrence::EveryDays { days: 1, time: None }),
            None
        );
    }

    #[test]
    fn missed_occurrences_collapse() {
        let r = Recurrence::EveryDays {
            days: 1,
            time: tod("08:00"),
        };
        let t = tickle("2024-03-01", Some("08:00"), Some(r));
        let next = first_after(&t, &zone(0, "UTC"), ts("2024-03-05T10:00:00Z")).unwrap();
        assert_eq!((next.day, next.time), (day("2024-03-06"), tod("08:00")));
    }

    #[test]
    fn long_gaps_are_crossed_quickly() {
        let r = Recurrence::EveryDays { days: 1, time: None };
        let now = ts("2026-11-23T12:00:00Z");
        let next = first_after(&tickle("1900-01-01", None, Some(r)), &zone(0, "UTC"), now).unwrap();
        assert_eq!(next.day, day("2026-11-24"));
        let m = Recurrence::EveryMonths {
            months: 1,
            day: None,
            time: None,
        };
        let next = first_after(&tickle("0001-01-31", None, Some(m)), &zone(0, "UTC"), now).unwrap();
        assert_eq!(next.day, day("2026-11-28"));
        let m = Recurrence::EveryMonths {
            months: 1,
            day: Some(31),
            time: None,
        };
        let next = first_after(&tickle("0001-01-31", None, Some(m)), &zone(0, "UTC"), now).unwrap();
        assert_eq!(next.day, day("2026-11-30"));
    }
}
