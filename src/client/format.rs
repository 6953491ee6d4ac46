//! How the client shows things to people: moments in the account's zone, short ("today
//! 14:05", "Tue 3 Dec 09:00"), recurrences in words ("every 3 days", "monthly on the 1st"),
//! notes cut to one line with a marker, sizes.

use super::when::weekday;
use crate::domain::scheduler::models::{Day, Recurrence, TimeOfDay};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::wire::Timestamp;

const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const MONTH_NAMES: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// `today`, `tomorrow`, `yesterday`, else `Tue 3 Dec` (with the year when it is not `today`'s).
pub fn day(day: Day, today: Day) -> String {
    match day.number() - today.number() {
        0 => "today".into(),
        1 => "tomorrow".into(),
        -1 => "yesterday".into(),
        _ => {
            let name = DAY_NAMES[weekday(day) as usize];
            let month = MONTH_NAMES[(day.month as usize).clamp(1, 12) - 1];
            if day.year == today.year {
                format!("{name} {} {month}", day.day)
            } else {
                format!("{name} {} {month} {}", day.day, day.year)
            }
        }
    }
}

/// `09:05`, or `09:05:30` when the seconds are not zero.
pub fn time(t: TimeOfDay) -> String {
    if t.second == 0 {
        format!("{:02}:{:02}", t.hour, t.minute)
    } else {
        format!("{:02}:{:02}:{:02}", t.hour, t.minute, t.second)
    }
}

/// A wall-clock day and perhaps time, relative to `today`: "today 14:05", "Tue 3 Dec 09:00".
pub fn wall(d: Day, t: Option<TimeOfDay>, today: Day) -> String {
    match t {
        Some(t) => format!("{} {}", day(d, today), time(t)),
        None => day(d, today),
    }
}

/// An instant as the account reads it in `zone`, relative to `now`, to the minute.
pub fn moment(at: Timestamp, zone: &Zone, now: Timestamp) -> String {
    match (schedule::local(at, zone), schedule::local(now, zone)) {
        (Some((d, t)), Some((today, _))) => wall(d, Some(TimeOfDay { second: 0, ..t }), today),
        _ => at.to_string(),
    }
}

fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// "every day", "every 3 days", "every 2 weeks", "monthly on the 1st", "every 3 months".
pub fn recurrence(r: &Recurrence) -> String {
    match *r {
        Recurrence::EveryDays { days: 1, .. } => "every day".into(),
        Recurrence::EveryDays { days: 7, .. } => "every week".into(),
        Recurrence::EveryDays { days, .. } if days.is_multiple_of(7) => format!("every {} weeks", days / 7),
        Recurrence::EveryDays { days, .. } => format!("every {days} days"),
        Recurrence::EveryMonths { months, day, .. } => {
            let every = match months {
                1 => "monthly".to_string(),
                12 => "yearly".to_string(),
                n => format!("every {n} months"),
            };
            match day {
                Some(d) => format!("{every} on the {}", ordinal(d)),
                None => every,
            }
        }
    }
}

/// The longest a note's line is shown in a list, in characters.
pub const LINE: usize = 72;

/// A note on one line: its first line, cut at `width` characters with "…", and "(+N lines)"
/// when more lines follow.
pub fn one_line(text: &str, width: usize) -> String {
    let mut lines = text.trim_end().lines();
    let first = lines.next().unwrap_or("");
    let more = lines.count();
    let mut shown: String = first.chars().take(width).collect();
    if first.chars().nth(width).is_some() {
        shown.push('…');
    }
    if more > 0 {
        shown.push_str(&format!(" (+{more} line{})", if more == 1 { "" } else { "s" }));
    }
    shown
}

/// A size for people: "20.0 MB", "512 bytes".
pub fn size(bytes: u64) -> String {
    match bytes {
        0..=999 => format!("{bytes} bytes"),
        1_000..=999_999 => format!("{:.1} kB", bytes as f64 / 1e3),
        _ => format!("{:.1} MB", bytes as f64 / 1e6),
    }
}

/// A limit in bytes for people: "16 MiB" when it is whole mebibytes, else the bytes.
pub fn limit(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// A wait for people: "10 minutes", "30 seconds", "2 hours".
pub fn wait(seconds: u64) -> String {
    let plural = |n: u64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    match seconds {
        0..=59 => plural(seconds.max(1), "second"),
        60..=5399 => plural(seconds.div_ceil(60), "minute"),
        _ => plural(seconds.div_ceil(3600), "hour"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Day {
        Day::parse(s).unwrap()
    }

    #[test]
    fn days_and_moments_are_short_and_relative() {
        let today = d("2026-11-26"); // a Thursday
        assert_eq!(day(today, today), "today");
        assert_eq!(day(d("2026-11-27"), today), "tomorrow");
        assert_eq!(day(d("2026-11-25"), today), "yesterday");
        assert_eq!(day(d("2026-12-03"), today), "Thu 3 Dec");
        assert_eq!(day(d("2026-12-01"), today), "Tue 1 Dec");
        assert_eq!(day(d("2027-01-04"), today), "Mon 4 Jan 2027");
        let nine = TimeOfDay::parse("09:00").unwrap();
        assert_eq!(wall(d("2026-12-01"), Some(nine), today), "Tue 1 Dec 09:00");
        assert_eq!(time(TimeOfDay::parse("14:05:30").unwrap()), "14:05:30");
        let zurich = Zone::Named(jiff::tz::TimeZone::get("Europe/Zurich").unwrap());
        let now = Timestamp::parse("2026-11-26T12:00:00Z").unwrap();
        let at = Timestamp::parse("2026-11-26T13:05:06.003818024Z").unwrap();
        assert_eq!(moment(at, &zurich, now), "today 14:05", "to the minute");
        let at = Timestamp::parse("2026-07-01T07:00:00Z").unwrap();
        assert_eq!(moment(at, &zurich, now), "Wed 1 Jul 09:00", "summer time");
        assert_eq!(moment(at, &Zone::Fixed(0), now), "Wed 1 Jul 07:00");
        // late in the evening in UTC is already tomorrow in Zurich
        let at = Timestamp::parse("2026-11-26T23:30:00Z").unwrap();
        assert_eq!(moment(at, &zurich, now), "tomorrow 00:30");
    }

    #[test]
    fn recurrences_in_words() {
        let days = |days| Recurrence::EveryDays { days, time: None };
        assert_eq!(recurrence(&days(1)), "every day");
        assert_eq!(recurrence(&days(3)), "every 3 days");
        assert_eq!(recurrence(&days(7)), "every week");
        assert_eq!(recurrence(&days(14)), "every 2 weeks");
        let months = |months, day| Recurrence::EveryMonths {
            months,
            day,
            time: None,
        };
        assert_eq!(recurrence(&months(1, Some(1))), "monthly on the 1st");
        assert_eq!(recurrence(&months(1, Some(22))), "monthly on the 22nd");
        assert_eq!(recurrence(&months(1, Some(13))), "monthly on the 13th");
        assert_eq!(recurrence(&months(1, None)), "monthly");
        assert_eq!(recurrence(&months(3, Some(31))), "every 3 months on the 31st");
        assert_eq!(recurrence(&months(12, None)), "yearly");
    }

    #[test]
    fn notes_on_one_line_say_what_is_cut() {
        assert_eq!(one_line("buy milk", LINE), "buy milk");
        assert_eq!(one_line("buy milk\n", LINE), "buy milk");
        assert_eq!(one_line("shopping\neggs\nflour", LINE), "shopping (+2 lines)");
        assert_eq!(one_line("a\nb", LINE), "a (+1 line)");
        assert_eq!(one_line("abcdef", 3), "abc…");
        assert_eq!(one_line("äöüß\nx", 2), "äö… (+1 line)");
        assert_eq!(one_line("", LINE), "");
        let long = "x".repeat(200_000);
        assert_eq!(one_line(&long, LINE).chars().count(), LINE + 1);
    }

    #[test]
    fn sizes_limits_and_waits() {
        assert_eq!(size(20_000_000), "20.0 MB");
        assert_eq!(size(512), "512 bytes");
        assert_eq!(size(2_500), "2.5 kB");
        assert_eq!(limit(16 << 20), "16 MiB");
        assert_eq!(limit(1000), "1000 bytes");
        assert_eq!(wait(599), "10 minutes");
        assert_eq!(wait(600), "10 minutes");
        assert_eq!(wait(1), "1 second");
        assert_eq!(wait(30), "30 seconds");
        assert_eq!(wait(60), "1 minute");
        assert_eq!(wait(7200), "2 hours");
    }
}
