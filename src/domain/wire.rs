//! Wire encodings shared by both services (spec README §11, inbox.md §1.4): timestamps with
//! nanoseconds and leap seconds, strict UUIDs, strict padded base64, usernames.

use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// An instant with nanosecond precision. A leap second `:60` is kept as second `:59` with
/// `nanos` in `1_000_000_000..2_000_000_000`, so ordering by `(secs, nanos)` is time order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

/// First second of year 0000 and first second after 9999-12-31, as Unix seconds.
const MIN_SECS: i64 = -62_167_219_200;
const MAX_SECS: i64 = 253_402_300_800;

impl Timestamp {
    pub fn now() -> Timestamp {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }

    pub fn from_unix(secs: i64, nanos: u32) -> Timestamp {
        Timestamp { secs, nanos }
    }

    /// This instant plus `d` (a leap second counts as its minute's last second).
    pub fn plus(&self, d: std::time::Duration) -> Timestamp {
        let nanos = self.nanos.min(999_999_999) as u64 + d.subsec_nanos() as u64;
        Timestamp {
            secs: self.secs + d.as_secs() as i64 + (nanos / 1_000_000_000) as i64,
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }

    /// Nanoseconds since the Unix epoch (a leap second counts as the last second of its
    /// minute, continued).
    pub fn as_unix_nanos(&self) -> i128 {
        self.secs as i128 * 1_000_000_000 + self.nanos as i128
    }

    /// Seconds elapsed from `self` to `later` (negative when `later` is earlier).
    pub fn seconds_until(&self, later: &Timestamp) -> f64 {
        (later.as_unix_nanos() - self.as_unix_nanos()) as f64 / 1e9
    }

    /// 12 bytes whose byte order is time order (for sled keys).
    pub fn to_key(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        out[..8].copy_from_slice(&((self.secs as u64) ^ (1 << 63)).to_be_bytes());
        out[8..].copy_from_slice(&self.nanos.to_be_bytes());
        out
    }

    pub fn from_key(bytes: &[u8]) -> Option<Timestamp> {
        if bytes.len() < 12 {
            return None;
        }
        let secs = u64::from_be_bytes(bytes[..8].try_into().ok()?) ^ (1 << 63);
        let nanos = u32::from_be_bytes(bytes[8..12].try_into().ok()?);
        Some(Timestamp {
            secs: secs as i64,
            nanos,
        })
    }

    /// Parses RFC 3339 as inbox.md §1.4 describes; `None` for anything else.
    pub fn parse(s: &str) -> Option<Timestamp> {
        let b = s.as_bytes();
        if b.len() < 20 {
            return None;
        }
        let (date, rest) = parse_date_prefix(b)?;
        if !matches!(rest[0], b'T' | b't' | b' ') {
            return None;
        }
        let rest = &rest[1..];
        let (h, mi, sec, nanos, rest) = parse_time_prefix(rest, true)?;
        let offset_secs: i64 = match rest {
            [b'Z'] | [b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let oh = two_digits(*h1, *h2)? as i64;
                let om = two_digits(*m1, *m2)? as i64;
                if oh > 23 || om > 59 {
                    return None;
                }
                let off = oh * 3600 + om * 60;
                if *sign == b'+' {
                    off
                } else {
                    -off
                }
            }
            _ => return None,
        };
        let days = days_from_civil(date.0, date.1, date.2)?;
        let (s59, extra) = if sec == 60 { (59, 1_000_000_000) } else { (sec, 0) };
        let secs = days * 86_400 + h as i64 * 3600 + mi as i64 * 60 + s59 as i64 - offset_secs;
        if !in_supported_range(secs) {
            return None; // an offset must not carry the instant outside years 0000–9999
        }
        Some(Timestamp {
            secs,
            nanos: nanos + extra,
        })
    }
}

impl fmt::Display for Timestamp {
    /// `YYYY-MM-DDTHH:MM:SS[.F]Z`, the fraction only when non-zero, trailing zeros dropped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (secs, nanos, leap) = if self.nanos >= 1_000_000_000 {
            (self.secs, self.nanos - 1_000_000_000, true)
        } else {
            (self.secs, self.nanos, false)
        };
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        // every stored instant lies in years 0000–9999, well within the calendar's range
        let (y, m, d) = civil_from_days(days).unwrap_or((1970, 1, 1));
        let (h, mi, mut s) = (sod / 3600, (sod % 3600) / 60, sod % 60);
        if leap {
            s += 1;
        }
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}")?;
        write_fraction(f, nanos)?;
        f.write_str("Z")
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            (self.secs, self.nanos).serialize(s)
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            Timestamp::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("invalid timestamp {s:?}")))
        } else {
            let (secs, nanos) = <(i64, u32)>::deserialize(d)?;
            Ok(Timestamp { secs, nanos })
        }
    }
}

/// Writes `.F` (up to nine digits, trailing zeros removed) when `nanos` is not zero.
pub fn write_fraction(f: &mut impl fmt::Write, nanos: u32) -> fmt::Result {
    if nanos == 0 {
        return Ok(());
    }
    let digits = format!("{nanos:09}");
    write!(f, ".{}", digits.trim_end_matches('0'))
}

fn two_digits(a: u8, b: u8) -> Option<u32> {
    if a.is_ascii_digit() && b.is_ascii_digit() {
        Some(((a - b'0') * 10 + (b - b'0')) as u32)
    } else {
        None
    }
}

/// Year, month, day.
pub type Date = (i64, u32, u32);

/// `YYYY-MM-DD` at the start of `b`, a real calendar date; returns the rest.
pub(crate) fn parse_date_prefix(b: &[u8]) -> Option<(Date, &[u8])> {
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    if !b[..4].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let y = b[..4].iter().fold(0i64, |a, c| a * 10 + (c - b'0') as i64);
    let m = two_digits(b[5], b[6])?;
    let d = two_digits(b[8], b[9])?;
    civil_date(y, m, d)?;
    Some(((y, m, d), &b[10..]))
}

/// `HH:MM[:SS[.f…]]` at the start of `b` (`HH:MM` only when `need_seconds` is false);
/// returns hour, minute, second (0–60), nanoseconds (digits after the ninth dropped), rest.
pub(crate) fn parse_time_prefix(b: &[u8], need_seconds: bool) -> Option<(u32, u32, u32, u32, &[u8])> {
    if b.len() < 5 || b[2] != b':' {
        return None;
    }
    let h = two_digits(b[0], b[1])?;
    let mi = two_digits(b[3], b[4])?;
    if h > 23 || mi > 59 {
        return None;
    }
    let mut rest = &b[5..];
    let mut sec = 0;
    let mut nanos = 0u32;
    if rest.first() == Some(&b':') && rest.len() >= 3 {
        sec = two_digits(rest[1], rest[2])?;
        if sec > 60 {
            return None;
        }
        rest = &rest[3..];
        if rest.first() == Some(&b'.') {
            let digits = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            for (i, c) in rest[1..1 + digits].iter().enumerate() {
                if i < 9 {
                    nanos = nanos * 10 + (c - b'0') as u32;
                }
            }
            for _ in digits..9 {
                nanos *= 10;
            }
            rest = &rest[1 + digits..];
        }
    } else if need_seconds {
        return None;
    }
    Some((h, mi, sec, nanos, rest))
}

/// The calendar date `y-m-d` (proleptic Gregorian, years -9999–9999), when it exists.
pub fn civil_date(y: i64, m: u32, d: u32) -> Option<jiff::civil::Date> {
    let (y, m, d) = (i16::try_from(y).ok()?, i8::try_from(m).ok()?, i8::try_from(d).ok()?);
    jiff::civil::Date::new(y, m, d).ok()
}

const EPOCH_DAY: jiff::civil::Date = jiff::civil::date(1970, 1, 1);

pub fn days_in_month(y: i64, m: u32) -> u32 {
    civil_date(y, m, 1).map_or(0, |d| d.days_in_month() as u32)
}

/// Days since 1970-01-01 of a date (`None` when there is no such date).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> Option<i64> {
    let span = civil_date(y, m, d)?.since(EPOCH_DAY).ok()?;
    Some(i64::from(span.get_days()))
}

/// The date of a day number since 1970-01-01 (`None` outside the years -9999–9999).
pub fn civil_from_days(z: i64) -> Option<(i64, u32, u32)> {
    let date = EPOCH_DAY.checked_add(jiff::Span::new().try_days(z).ok()?).ok()?;
    Some((i64::from(date.year()), date.month() as u32, date.day() as u32))
}

/// True when `secs` lies within years 0000–9999.
pub fn in_supported_range(secs: i64) -> bool {
    (MIN_SECS..MAX_SECS).contains(&secs)
}

/// A UUID in the canonical hyphenated form only (either case); other forms → `None`.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        };
        if !ok {
            return None;
        }
    }
    Uuid::parse_str(s).ok()
}

const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_encode_padding(true)
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
);

/// Strict padded standard base64 (inbox.md §1.4).
pub fn decode_base64(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(4) {
        return None;
    }
    BASE64.decode(s).ok()
}

pub fn encode_base64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// Bytes that serialise as a padded base64 string, encoded straight into the output (no
/// string of their own in between).
pub struct Base64<'a>(pub &'a [u8]);

impl Serialize for Base64<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&base64::display::Base64Display::new(self.0, &BASE64))
    }
}

/// A JSON object whose entries are made while it is written, one at a time (no tree of
/// the whole object in between).
pub struct ObjectOf<F>(pub F);

impl<F, I, K, V> Serialize for ObjectOf<F>
where
    F: Fn() -> I,
    I: Iterator<Item = (K, V)>,
    K: Serialize,
    V: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map((self.0)())
    }
}

/// Usernames of inbox.md §2.1: at least 3 characters, each `-`, `_` or a Latin-1 letter or
/// number.
pub fn is_valid_username(name: &str) -> bool {
    name.chars().count() >= 3 && name.chars().all(is_username_char)
}

fn is_username_char(c: char) -> bool {
    match c {
        '-' | '_' => true,
        c if (c as u32) > 0xFF => false,
        c if c.is_ascii() => c.is_ascii_alphanumeric(),
        // Latin-1 letters and numbers: ª ² ³ µ ¹ º ¼ ½ ¾ and À–ÿ except × and ÷
        'ª' | '²' | '³' | 'µ' | '¹' | 'º' | '¼' | '½' | '¾' => true,
        '×' | '÷' => false,
        c => (c as u32) >= 0xC0,
    }
}

/// Sorts and de-duplicates UUIDs (wire arrays are sorted lower-case strings; the canonical
/// lower-case hex form sorts like the bytes).
pub fn sorted_unique(mut ids: Vec<Uuid>) -> Vec<Uuid> {
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Decodes `%XX` escapes (and `+` as a space when `plus_as_space`, as in query strings).
pub fn percent_decode(s: &str, plus_as_space: bool) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
                continue;
            }
            (b'+', _) if plus_as_space => out.push(b' '),
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes everything but unreserved characters (for query values).
pub fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Random bytes from the OS CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    // The OS CSPRNG does not fail on supported platforms; if it ever does we must not
    // hand out predictable secrets, so stopping the request (not the process) is right.
    getrandom::getrandom(&mut out).expect("the OS random number generator failed");
    out
}

/// A random (version 4) UUID from the OS CSPRNG.
pub fn new_uuid() -> Uuid {
    uuid::Builder::from_random_bytes(random_bytes::<16>()).into_uuid()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_and_normalise() {
        let cases = [
            ("2024-05-01T09:00:02.25Z", "2024-05-01T09:00:02.25Z"),
            ("2024-05-01T10:00:00+02:00", "2024-05-01T08:00:00Z"),
            ("2020-06-01T09:59:59.123456789-00:30", "2020-06-01T10:29:59.123456789Z"),
            ("2020-06-01t09:59:59.1234567891z", "2020-06-01T09:59:59.123456789Z"),
            ("2016-12-31T23:59:60Z", "2016-12-31T23:59:60Z"),
            ("2016-12-31 23:59:60.5Z", "2016-12-31T23:59:60.5Z"),
            ("0000-01-01T00:00:00Z", "0000-01-01T00:00:00Z"),
            ("9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.999999999Z"),
            ("1969-12-31T23:59:59.5Z", "1969-12-31T23:59:59.5Z"),
        ];
        for (input, output) in cases {
            let t = Timestamp::parse(input).unwrap_or_else(|| panic!("{input}"));
            assert_eq!(t.to_string(), output, "{input}");
        }
    }

    #[test]
    fn bad_timestamps_are_refused() {
        for s in [
            "2020-01-01T00:00:00",
            "2020-01-01T00:00Z",
            "2020-02-30T00:00:00Z",
            "2020-01-01T24:00:00Z",
            "2020-01-01T00:00:61Z",
            "2020-01-01T00:00:00.Z",
            "2020-01-01T00:00:00+0100",
            "20-01-01T00:00:00Z",
            "yesterday",
            "2020-01-01T00:00:00Z ",
            "0000-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
        ] {
            assert!(Timestamp::parse(s).is_none(), "{s}");
        }
    }

    #[test]
    fn leap_second_sorts_between_59_and_next_minute() {
        let a = Timestamp::parse("2016-12-31T23:59:59.9Z").unwrap();
        let b = Timestamp::parse("2016-12-31T23:59:60Z").unwrap();
        let c = Timestamp::parse("2017-01-01T00:00:00Z").unwrap();
        assert!(a < b && b < c);
        assert!(a.to_key() < b.to_key() && b.to_key() < c.to_key());
        assert_eq!(Timestamp::from_key(&b.to_key()), Some(b));
    }

    #[test]
    fn key_order_is_time_order_across_the_epoch() {
        let a = Timestamp::parse("1960-01-01T00:00:00Z").unwrap();
        let b = Timestamp::parse("1970-01-01T00:00:00Z").unwrap();
        assert!(a.to_key() < b.to_key());
    }

    #[test]
    fn civil_conversion_round_trips() {
        for days in (-800_000..800_000).step_by(997) {
            let (y, m, d) = civil_from_days(days).expect("within the calendar");
            assert_eq!(days_from_civil(y, m, d), Some(days));
        }
        assert_eq!(days_from_civil(2000, 3, 1), Some(11_017));
        assert_eq!(days_from_civil(1969, 12, 31), Some(-1));
        assert_eq!(days_from_civil(2023, 2, 29), None, "not a date");
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(civil_from_days(10_000_000), None, "beyond year 9999");
    }

    #[test]
    fn strict_uuids() {
        assert!(parse_uuid("0F8C6B1E-3D2A-4C5B-9E7F-1A2B3C4D5E6F").is_some());
        assert!(parse_uuid("00000000-0000-0000-0000-000000000000").is_some());
        for s in [
            "0f8c6b1e3d2a4c5b9e7f1a2b3c4d5e6f",
            "{0f8c6b1e-3d2a-4c5b-9e7f-1a2b3c4d5e6f}",
            "urn:uuid:0f8c6b1e-3d2a-4c5b-9e7f-1a2b3c4d5e6f",
            " 0f8c6b1e-3d2a-4c5b-9e7f-1a2b3c4d5e6f",
            "0f8c6b1e-3d2a-4c5b-9e7f-1a2b3c4d5e6g",
        ] {
            assert!(parse_uuid(s).is_none(), "{s}");
        }
    }

    #[test]
    fn streamed_encodings_match_their_values() {
        for bytes in [&b""[..], b"a", b"ab", b"abc", b"\xff\x00\x10 hello"] {
            assert_eq!(
                serde_json::to_string(&Base64(bytes)).unwrap(),
                format!("\"{}\"", encode_base64(bytes))
            );
        }
        let pairs = [("b", 2), ("a", 1)];
        assert_eq!(
            serde_json::to_string(&ObjectOf(|| pairs.iter().copied())).unwrap(),
            r#"{"b":2,"a":1}"#
        );
    }

    #[test]
    fn strict_base64() {
        assert_eq!(decode_base64("SGk=").unwrap(), b"Hi");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert_eq!(decode_base64("SGl=").unwrap(), b"Hi", "unused low bits are ignored");
        for s in [
            "abc",
            "SGVsbG8",
            "SGVs bG8=",
            "SGVsbG8=\n",
            "ab-_",
            "ab$=",
            "====",
            "SGk=SGk=",
        ] {
            assert!(decode_base64(s).is_none(), "{s}");
        }
    }

    #[test]
    fn usernames() {
        for ok in ["abc", "Zoë-_x", "ÀÖØöøÿ", "ªµº", "n²³¹¼", "-_-"] {
            assert!(is_valid_username(ok), "{ok}");
        }
        for bad in [
            "ab",
            "",
            "a b",
            "ab.cd",
            "a@bc",
            "abc+",
            "ab×c",
            "abc€",
            "abcł",
            "ab\tc",
            "abc\u{a0}",
        ] {
            assert!(!is_valid_username(bad), "{bad}");
        }
    }
}
