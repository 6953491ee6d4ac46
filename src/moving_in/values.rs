//! The old servers' column values as domain values (how `persistent` stored each Haskell
//! type: see [`super::sqlite`]). Each answers a short reason when the value is not what the
//! schema says, which the caller names the table and row of.

use crate::domain::scheduler::models::{Day, TimeOfDay};
use crate::domain::wire::{self, Timestamp};
use rusqlite::types::Value;
use uuid::Uuid;

/// A uuid: 16 bytes (how `typed-uuid` kept it), or its text.
pub fn uuid(v: &Value) -> Result<Uuid, String> {
    match v {
        Value::Blob(b) if b.len() == 16 => Uuid::from_slice(b).map_err(|e| e.to_string()),
        Value::Blob(b) => std::str::from_utf8(b)
            .ok()
            .and_then(wire::parse_uuid)
            .ok_or_else(|| "not a uuid".into()),
        Value::Text(t) => wire::parse_uuid(t).ok_or_else(|| format!("not a uuid: {t:?}")),
        other => Err(format!("not a uuid: {other:?}")),
    }
}

pub fn opt_uuid(v: &Value) -> Result<Option<Uuid>, String> {
    match v {
        Value::Null => Ok(None),
        v => uuid(v).map(Some),
    }
}

/// Text, stored as TEXT or as a UTF-8 BLOB (`PersistByteString` of the enums).
pub fn text(v: &Value) -> Result<String, String> {
    match v {
        Value::Text(t) => Ok(t.clone()),
        Value::Blob(b) => String::from_utf8(b.clone()).map_err(|_| "not UTF-8 text".into()),
        other => Err(format!("not text: {other:?}")),
    }
}

pub fn opt_text(v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Null => Ok(None),
        v => text(v).map(Some),
    }
}

/// Bytes (`ByteString` contents): a BLOB, or TEXT as its UTF-8.
pub fn bytes(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::Blob(b) => Ok(b.clone()),
        Value::Text(t) => Ok(t.as_bytes().to_vec()),
        other => Err(format!("not bytes: {other:?}")),
    }
}

/// A boolean: 0 or 1.
pub fn boolean(v: &Value) -> Result<bool, String> {
    match v {
        Value::Integer(0) => Ok(false),
        Value::Integer(1) => Ok(true),
        other => Err(format!("not a boolean: {other:?}")),
    }
}

/// An instant in UTC as `persistent-sqlite` wrote `UTCTime`: `2021-03-04T05:06:07.123456`
/// (older versions: a space for the `T` and ` UTC` after it; a `Z` is accepted too).
pub fn time(v: &Value) -> Result<Timestamp, String> {
    let t = text(v)?;
    let trimmed = t.trim();
    let core = trimmed
        .strip_suffix(" UTC")
        .or_else(|| trimmed.strip_suffix('Z'))
        .unwrap_or(trimmed);
    let rfc3339 = match core.as_bytes().get(10) {
        Some(b' ') | Some(b'T') => format!("{}T{}Z", &core[..10], &core[11..]),
        _ => return Err(format!("not a time: {t:?}")),
    };
    Timestamp::parse(&rfc3339).ok_or_else(|| format!("not a time: {t:?}"))
}

pub fn opt_time(v: &Value) -> Result<Option<Timestamp>, String> {
    match v {
        Value::Null => Ok(None),
        v => time(v).map(Some),
    }
}

/// A `Day`: `2021-03-04`.
pub fn day(v: &Value) -> Result<Day, String> {
    let t = text(v)?;
    Day::parse(t.trim()).ok_or_else(|| format!("not a day: {t:?}"))
}

/// A `TimeOfDay` or NULL: `05:06:07`, maybe with a fraction.
pub fn opt_time_of_day(v: &Value) -> Result<Option<TimeOfDay>, String> {
    match v {
        Value::Null => Ok(None),
        v => {
            let t = text(v)?;
            TimeOfDay::parse(t.trim())
                .map(Some)
                .ok_or_else(|| format!("not a time of day: {t:?}"))
        }
    }
}

/// A JSON column (or NULL).
pub fn opt_json(v: &Value) -> Result<Option<serde_json::Value>, String> {
    match v {
        Value::Null => Ok(None),
        v => {
            let t = text(v)?;
            serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| format!("not JSON ({e}): {t:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txt(s: &str) -> Value {
        Value::Text(s.into())
    }

    #[test]
    fn uuids_as_blobs_or_text() {
        let id = Uuid::from_bytes([7; 16]);
        assert_eq!(uuid(&Value::Blob(vec![7; 16])).unwrap(), id);
        assert_eq!(uuid(&txt(&id.to_string())).unwrap(), id);
        assert!(uuid(&Value::Blob(vec![7; 15])).is_err());
        assert!(uuid(&Value::Integer(3)).is_err());
        assert_eq!(opt_uuid(&Value::Null).unwrap(), None);
    }

    #[test]
    fn times_as_persistent_wrote_them() {
        let want = Timestamp::parse("2021-03-04T05:06:07.123456Z").unwrap();
        for form in [
            "2021-03-04T05:06:07.123456",
            "2021-03-04 05:06:07.123456",
            "2021-03-04 05:06:07.123456 UTC",
            "2021-03-04T05:06:07.123456Z",
        ] {
            assert_eq!(time(&txt(form)).unwrap(), want, "{form}");
        }
        assert_eq!(
            time(&txt("2021-03-04T05:06:07")).unwrap(),
            Timestamp::parse("2021-03-04T05:06:07Z").unwrap()
        );
        for bad in ["2021-03-04", "yesterday", "2021-13-04T05:06:07"] {
            assert!(time(&txt(bad)).is_err(), "{bad}");
        }
        assert!(time(&Value::Integer(1)).is_err());
        assert_eq!(opt_time(&Value::Null).unwrap(), None);
    }

    #[test]
    fn days_times_of_day_and_the_rest() {
        assert_eq!(day(&txt("2021-02-28")).unwrap().to_string(), "2021-02-28");
        assert!(day(&txt("2021-02-30")).is_err());
        assert_eq!(
            opt_time_of_day(&txt("08:30:00")).unwrap().unwrap().to_string(),
            "08:30:00"
        );
        assert_eq!(
            opt_time_of_day(&txt("08:30:00.5")).unwrap().unwrap().to_string(),
            "08:30:00.5"
        );
        assert_eq!(opt_time_of_day(&Value::Null).unwrap(), None);
        assert_eq!(text(&Value::Blob(b"email".to_vec())).unwrap(), "email");
        assert!(text(&Value::Blob(vec![0xff])).is_err());
        assert_eq!(bytes(&txt("hi")).unwrap(), b"hi");
        assert!(boolean(&Value::Integer(1)).unwrap());
        assert!(boolean(&Value::Integer(2)).is_err());
        assert_eq!(opt_json(&txt("[1]")).unwrap(), Some(serde_json::json!([1])));
        assert!(opt_json(&txt("[1")).is_err());
    }
}
