//! The server side of `POST /sync` (scheduler.md §10.3): a version-based merge over the
//! account's scheduled items, as a pure function; the store applies what it decides.

use super::models::{ScheduledItem, Tickle};
use crate::domain::wire::{self, ObjectOf, Timestamp};
use crate::domain::DomainError;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use uuid::Uuid;

/// A value as sync carries it: contents and `created`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncValue {
    pub tickle: Tickle,
    pub created: Timestamp,
}

#[derive(Clone, Debug, Default)]
pub struct SyncRequest {
    pub added: Vec<(String, SyncValue)>,
    pub synced: Vec<(Uuid, u64)>,
    pub changed: Vec<(Uuid, SyncValue, u64)>,
    pub deleted: Vec<(Uuid, u64)>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncResponse {
    pub client_added: Vec<(String, Uuid)>,
    pub client_changed: BTreeMap<Uuid, u64>,
    pub client_deleted: Vec<Uuid>,
    pub server_added: Vec<ScheduledItem>,
    pub server_changed: Vec<ScheduledItem>,
    pub server_deleted: Vec<Uuid>,
    pub conflict: Vec<ScheduledItem>,
    pub conflict_client_deleted: Vec<ScheduledItem>,
    pub conflict_server_deleted: Vec<Uuid>,
}

fn bad(msg: impl Into<String>) -> DomainError {
    DomainError::invalid(msg)
}

fn parse_value(v: &Value) -> Result<SyncValue, DomainError> {
    let obj = v.as_object().ok_or_else(|| bad("a sync value must be an object"))?;
    let tickle = Tickle::parse(obj.get("contents").ok_or_else(|| bad("a sync value needs contents"))?)?;
    let created = match obj.get("created") {
        Some(Value::String(s)) => Timestamp::parse(s).ok_or_else(|| bad(format!("invalid timestamp {s:?}")))?,
        _ => return Err(bad("a sync value needs created")),
    };
    Ok(SyncValue { tickle, created })
}

fn parse_id(s: &str) -> Result<Uuid, DomainError> {
    wire::parse_uuid(s).ok_or_else(|| bad(format!("invalid UUID {s:?}")))
}

fn parse_time(v: &Value) -> Result<u64, DomainError> {
    v.as_u64()
        .ok_or_else(|| bad("a server time must be a non-negative integer"))
}

/// The map under `key` (missing or `null`: empty).
fn section<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Map<String, Value>>, DomainError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(bad(format!("{key} must be an object"))),
    }
}

impl SyncRequest {
    /// Validates `{"syncRequestTickles": {...}}`; any invalid part is a 400.
    pub fn parse(body: &Value) -> Result<SyncRequest, DomainError> {
        let inner = match body.get("syncRequestTickles") {
            Some(Value::Object(m)) => m,
            _ => return Err(bad("the request needs a syncRequestTickles object")),
        };
        let mut request = SyncRequest::default();
        let added = match section(inner, "added")? {
            Some(m) => Some(m),
            None if !inner.contains_key("added") => section(inner, "new")?,
            None => None,
        };
        for (k, v) in added.into_iter().flatten() {
            request.added.push((k.clone(), parse_value(v)?));
        }
        for (k, v) in section(inner, "synced")?.into_iter().flatten() {
            request.synced.push((parse_id(k)?, parse_time(v)?));
        }
        for (k, v) in section(inner, "changed")?.into_iter().flatten() {
            let obj = v.as_object().ok_or_else(|| bad("a changed entry must be an object"))?;
            let value = parse_value(obj.get("value").ok_or_else(|| bad("a changed entry needs a value"))?)?;
            let time = parse_time(obj.get("time").ok_or_else(|| bad("a changed entry needs a time"))?)?;
            request.changed.push((parse_id(k)?, value, time));
        }
        for (k, v) in section(inner, "deleted")?.into_iter().flatten() {
            request.deleted.push((parse_id(k)?, parse_time(v)?));
        }
        let mut seen = HashSet::new();
        let ids = request.synced.iter().map(|(u, _)| *u);
        let ids = ids.chain(request.changed.iter().map(|(u, _, _)| *u));
        for id in ids.chain(request.deleted.iter().map(|(u, _)| *u)) {
            if !seen.insert(id) {
                return Err(bad(format!(
                    "{id} appears in more than one of synced, changed, deleted"
                )));
            }
        }
        Ok(request)
    }
}

/// `{"value", "time"}` of one item (small: one item's tree at a time).
fn entry(item: &ScheduledItem) -> Value {
    json!({"value": item.value_json(), "time": item.server_time})
}

/// `{"syncResponseTickles": {...}}` with the empty parts left out, serialised straight into
/// the answer.
impl Serialize for SyncResponse {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut outer = s.serialize_map(Some(1))?;
        outer.serialize_entry("syncResponseTickles", &Parts(self))?;
        outer.end()
    }
}

struct Parts<'a>(&'a SyncResponse);

impl Serialize for Parts<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_map(None)?;
        if !r.client_added.is_empty() {
            let added = || r.client_added.iter().map(|(k, id)| (k, json!({"id": id, "time": 0})));
            m.serialize_entry("client-added", &ObjectOf(added))?;
        }
        if !r.client_changed.is_empty() {
            m.serialize_entry("client-changed", &r.client_changed)?;
        }
        let lists = [
            ("client-deleted", &r.client_deleted),
            ("server-deleted", &r.server_deleted),
            ("conflict-server-deleted", &r.conflict_server_deleted),
        ];
        for (name, list) in lists {
            if !list.is_empty() {
                m.serialize_entry(name, &wire::sorted_unique(list.clone()))?;
            }
        }
        let maps = [
            ("server-added", &r.server_added),
            ("server-changed", &r.server_changed),
            ("conflict", &r.conflict),
            ("conflict-client-deleted", &r.conflict_client_deleted),
        ];
        for (name, items) in maps {
            if !items.is_empty() {
                m.serialize_entry(name, &ObjectOf(|| items.iter().map(|i| (i.id, entry(i)))))?;
            }
        }
        m.end()
    }
}

#[cfg(test)]
impl SyncResponse {
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a sync response is JSON")
    }
}

/// Decides a sync for `owner` over its scheduled items. `cap`: the free-item cap when not
/// paid; `due_of` gives an item's due instant under the account's zone.
pub fn plan(
    owner: Uuid,
    items: &[ScheduledItem],
    request: SyncRequest,
    cap: Option<u64>,
    mut new_id: impl FnMut() -> Uuid,
    due_of: impl Fn(&Tickle) -> Timestamp,
) -> (SyncResponse, ScheduledChanges) {
    let by_id: HashMap<Uuid, &ScheduledItem> = items.iter().map(|i| (i.id, i)).collect();
    let mut response = SyncResponse::default();
    let mut changes = ScheduledChanges::default();
    let mut mentioned = HashSet::new();

    let mut added = request.added;
    crate::domain::client_keys::order(&mut added);
    if let Some(cap) = cap {
        added.truncate((cap as i64 - items.len() as i64).max(0) as usize);
    }
    for (key, value) in added {
        let item = ScheduledItem {
            id: new_id(),
            owner,
            tickle: value.tickle,
            created: value.created,
            server_time: 0,
        };
        response.client_added.push((key, item.id));
        let due = due_of(&item.tickle);
        changes.put.push((item, due));
    }
    for (id, t) in request.synced {
        mentioned.insert(id);
        match by_id.get(&id) {
            None => response.server_deleted.push(id),
            Some(s) if t < s.server_time => response.server_changed.push((*s).clone()),
            Some(_) => {}
        }
    }
    for (id, value, t) in request.changed {
        mentioned.insert(id);
        match by_id.get(&id) {
            None => response.conflict_server_deleted.push(id),
            Some(s) if t >= s.server_time => {
                let mut item = (*s).clone();
                item.tickle = value.tickle;
                item.server_time += 1;
                response.client_changed.insert(id, item.server_time);
                let due = due_of(&item.tickle);
                changes.put.push((item, due));
            }
            Some(s) => response.conflict.push((*s).clone()),
        }
    }
    for (id, t) in request.deleted {
        mentioned.insert(id);
        match by_id.get(&id) {
            None => response.client_deleted.push(id),
            Some(s) if t >= s.server_time => {
                changes.delete.push(id);
                response.client_deleted.push(id);
            }
            Some(s) => response.conflict_client_deleted.push((*s).clone()),
        }
    }
    response.server_added = items.iter().filter(|i| !mentioned.contains(&i.id)).cloned().collect();
    (response, changes)
}

/// What a sync decided, applied atomically by the store.
#[derive(Default)]
pub struct ScheduledChanges {
    pub delete: Vec<Uuid>,
    /// New or changed items with their due instants.
    pub put: Vec<(ScheduledItem, Timestamp)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::scheduler::models::Day;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const OWNER: Uuid = Uuid::from_u128(0x0123_4567_89ab_cdef);

    fn tickle(content: &str, day: i64) -> Tickle {
        Tickle {
            content: content.as_bytes().to_vec(),
            day: Day::from_number(day).expect("a test day"),
            time: None,
            recurrence: None,
        }
    }

    fn value(content: &str, created: i64) -> SyncValue {
        SyncValue {
            tickle: tickle(content, 40_000),
            created: Timestamp::from_unix(created, 0),
        }
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn item(n: u128, content: &str, time: u64) -> ScheduledItem {
        ScheduledItem {
            id: id(n),
            owner: OWNER,
            tickle: tickle(content, 40_000 + n as i64),
            created: Timestamp::from_unix(n as i64 * 100, 0),
            server_time: time,
        }
    }

    fn counter() -> impl FnMut() -> Uuid {
        let mut n = 1_000_000u128;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    /// A due instant that tells the contents apart: the item's day as Unix days.
    fn due_of(t: &Tickle) -> Timestamp {
        Timestamp::from_unix(t.day.number() * 86_400, 0)
    }

    fn run(items: &[ScheduledItem], request: SyncRequest) -> (SyncResponse, ScheduledChanges) {
        plan(OWNER, items, request, None, counter(), due_of)
    }

    // -----------------------------------------------------------------------------------
    // plan(): §10.5 and each rule of §10.3

    #[test]
    fn spec_example() {
        // A at time 3, B at time 0; the client: A synced at 2, B changed based on 0,
        // C (unknown) deleted at 5, one new item.
        let (a, b, c) = (id(0xA), id(0xB), id(0xC));
        let items = [item(0xA, "A", 3), item(0xB, "B", 0)];
        let b2 = value("B2", 1);
        let request = SyncRequest {
            added: vec![("0".into(), value("new", 1_717_236_000))],
            synced: vec![(a, 2)],
            changed: vec![(b, b2.clone(), 0)],
            deleted: vec![(c, 5)],
        };
        let (r, changes) = run(&items, request);
        let new_id = id(1_000_001);
        assert_eq!(
            r,
            SyncResponse {
                client_added: vec![("0".into(), new_id)],
                client_changed: BTreeMap::from([(b, 1)]),
                client_deleted: vec![c],
                server_changed: vec![items[0].clone()],
                ..SyncResponse::default()
            }
        );
        assert!(changes.delete.is_empty());
        let added = ScheduledItem {
            id: new_id,
            owner: OWNER,
            tickle: value("new", 0).tickle,
            created: Timestamp::from_unix(1_717_236_000, 0),
            server_time: 0,
        };
        let changed_b = ScheduledItem {
            tickle: b2.tickle.clone(),
            server_time: 1,
            ..items[1].clone()
        };
        assert_eq!(
            changes.put,
            vec![
                (added.clone(), due_of(&added.tickle)),
                (changed_b.clone(), due_of(&changed_b.tickle))
            ]
        );
        // the wire form of §10.5
        assert_eq!(
            r.to_json(),
            json!({"syncResponseTickles": {
                "client-added": {"0": {"id": new_id, "time": 0}},
                "client-changed": {b.to_string(): 1},
                "client-deleted": [c],
                "server-changed": {a.to_string(): {"value": items[0].value_json(), "time": 3}},
            }})
        );
    }

    #[test]
    fn synced_older_equal_newer_unknown() {
        let items = [item(1, "one", 4), item(2, "two", 4), item(3, "three", 4)];
        let request = SyncRequest {
            synced: vec![(id(1), 3), (id(2), 4), (id(3), 9), (id(7), 0)],
            ..Default::default()
        };
        let (r, changes) = run(&items, request);
        assert_eq!(
            r,
            SyncResponse {
                server_changed: vec![items[0].clone()],
                server_deleted: vec![id(7)],
                ..Default::default()
            }
        );
        assert!(changes.put.is_empty() && changes.delete.is_empty());
    }

    #[test]
    fn changed_current_newer_old_unknown() {
        let items = [item(1, "one", 2), item(2, "two", 2), item(3, "three", 2)];
        let request = SyncRequest {
            changed: vec![
                (id(1), value("one'", 999), 2),
                (id(2), value("two'", 999), 5),
                (id(3), value("three'", 999), 1),
                (id(8), value("eight'", 999), 0),
            ],
            ..Default::default()
        };
        let (r, changes) = run(&items, request);
        assert_eq!(
            r,
            SyncResponse {
                client_changed: BTreeMap::from([(id(1), 3), (id(2), 3)]),
                conflict: vec![items[2].clone()],
                conflict_server_deleted: vec![id(8)],
                ..Default::default()
            }
        );
        assert!(changes.delete.is_empty());
        assert_eq!(changes.put.len(), 2);
        for ((put, due), (n, content)) in changes.put.iter().zip([(1u128, "one'"), (2, "two'")]) {
            // the contents are applied, `created`, id and owner stay, time is the server's + 1
            assert_eq!(put.id, id(n));
            assert_eq!(put.owner, OWNER);
            assert_eq!(put.tickle, value(content, 0).tickle);
            assert_eq!(put.created, items[n as usize - 1].created);
            assert_eq!(put.server_time, 3);
            assert_eq!(*due, due_of(&put.tickle), "re-indexed under the new contents");
        }
    }

    #[test]
    fn deleted_current_newer_old_unknown() {
        let items = [item(1, "one", 2), item(2, "two", 2), item(3, "three", 2)];
        let request = SyncRequest {
            deleted: vec![(id(1), 2), (id(2), 3), (id(3), 1), (id(9), 0)],
            ..Default::default()
        };
        let (r, changes) = run(&items, request);
        assert_eq!(
            r,
            SyncResponse {
                client_deleted: vec![id(1), id(2), id(9)],
                conflict_client_deleted: vec![items[2].clone()],
                ..Default::default()
            }
        );
        assert_eq!(changes.delete, [id(1), id(2)]);
        assert!(changes.put.is_empty());
    }

    #[test]
    fn server_added_is_everything_not_mentioned_nor_just_added() {
        let items: Vec<ScheduledItem> = (1..=6).map(|n| item(n, "x", n as u64)).collect();
        let request = SyncRequest {
            added: vec![("k".into(), value("fresh", 5))],
            synced: vec![(id(1), 1)],
            changed: vec![(id(3), value("3'", 0), 0)],
            deleted: vec![(id(5), 0)],
        };
        let (r, _) = run(&items, request);
        assert_eq!(r.server_added, [items[1].clone(), items[3].clone(), items[5].clone()]);
        assert_eq!(r.client_added.len(), 1);
        assert!(!r.server_added.iter().any(|i| i.id == r.client_added[0].1));
        // an empty request on an empty account says nothing
        assert_eq!(run(&[], SyncRequest::default()).0, SyncResponse::default());
        assert_eq!(SyncResponse::default().to_json(), json!({"syncResponseTickles": {}}));
    }

    #[test]
    fn other_owners_items_are_never_passed_but_unknown_ids_are_harmless() {
        // the store hands plan() only the caller's scheduled items: anything else is unknown
        let items = [item(1, "mine", 0)];
        let request = SyncRequest {
            synced: vec![(id(50), 0)],
            changed: vec![(id(51), value("x", 0), 99)],
            deleted: vec![(id(52), 99)],
            ..Default::default()
        };
        let (r, changes) = run(&items, request);
        assert_eq!(r.server_deleted, [id(50)]);
        assert_eq!(r.conflict_server_deleted, [id(51)]);
        assert_eq!(r.client_deleted, [id(52)]);
        assert_eq!(r.server_added, [items[0].clone()]);
        assert!(changes.put.is_empty() && changes.delete.is_empty());
    }

    fn added(keys: &[&str]) -> Vec<(String, SyncValue)> {
        keys.iter().map(|k| (k.to_string(), value(k, 0))).collect()
    }

    fn accepted(r: &SyncResponse) -> Vec<&str> {
        r.client_added.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn cap_truncates_in_numeric_key_order() {
        let items = [item(1, "a", 0), item(2, "b", 0), item(3, "c", 0)];
        let request = |keys: &[&str]| SyncRequest {
            added: added(keys),
            // deletions and changes in the same request are neither limited nor counted
            deleted: vec![(id(1), 0)],
            changed: vec![(id(2), value("b'", 0), 0)],
            ..Default::default()
        };
        let (r, changes) = plan(
            OWNER,
            &items,
            request(&["10", "9", "2", "100"]),
            Some(5),
            counter(),
            due_of,
        );
        assert_eq!(accepted(&r), ["2", "9"]);
        assert_eq!(changes.delete, [id(1)]);
        assert_eq!(r.client_changed.len(), 1);
        // new items first, in accepted order, then the change
        let contents: Vec<&[u8]> = changes.put.iter().map(|(i, _)| i.tickle.content.as_slice()).collect();
        assert_eq!(contents, [&b"2"[..], b"9", b"b'"]);
        // keys that are not all integers: code point order
        let (r, _) = plan(
            OWNER,
            &items,
            request(&["b", "10", "a", "9"]),
            Some(6),
            counter(),
            due_of,
        );
        assert_eq!(accepted(&r), ["10", "9", "a"]);
        // negative integers and leading zeros
        let (r, _) = plan(
            OWNER,
            &items,
            request(&["3", "-1", "02", "1"]),
            Some(6),
            counter(),
            due_of,
        );
        assert_eq!(accepted(&r), ["-1", "1", "02"]);
        // no allowance left (also a negative one): nothing accepted, the rest still applies
        for cap in [0, 2, 3] {
            let (r, changes) = plan(OWNER, &items, request(&["1", "2"]), Some(cap), counter(), due_of);
            assert!(r.client_added.is_empty(), "cap {cap}");
            assert_eq!(changes.delete, [id(1)]);
            assert_eq!(r.client_changed.len(), 1);
        }
        // no cap: everything, ordered
        let (r, _) = plan(
            OWNER,
            &items,
            request(&["10", "9", "2", "100"]),
            None,
            counter(),
            due_of,
        );
        assert_eq!(accepted(&r), ["2", "9", "10", "100"]);
    }

    #[test]
    fn response_arrays_are_sorted_and_unique_on_the_wire() {
        let (r, _) = run(
            &[],
            SyncRequest {
                deleted: vec![(id(9), 0), (id(3), 0), (id(5), 0)],
                synced: vec![(id(8), 0), (id(2), 0)],
                ..Default::default()
            },
        );
        let v = r.to_json();
        let inner = &v["syncResponseTickles"];
        assert_eq!(inner["client-deleted"], json!([id(3), id(5), id(9)]));
        assert_eq!(inner["server-deleted"], json!([id(2), id(8)]));
        assert_eq!(inner.as_object().unwrap().len(), 2);
    }

    // -----------------------------------------------------------------------------------
    // SyncRequest::parse

    fn contents_json(content: &str) -> Value {
        json!({"content": content, "scheduled-day": "2099-01-01", "scheduled-time": null, "recurrence": null})
    }

    fn value_json(content: &str) -> Value {
        json!({"contents": contents_json(content), "created": "2024-01-01T00:00:00Z"})
    }

    fn parse(tickles: Value) -> Result<SyncRequest, u16> {
        SyncRequest::parse(&json!({"syncRequestTickles": tickles})).map_err(|_: DomainError| 400u16)
    }

    #[test]
    fn parse_reads_every_section() {
        let (a, b, c) = (id(0xA).to_string(), id(0xB).to_string(), id(0xC).to_string());
        let r = parse(json!({
            "added": {"0": value_json("new")},
            "synced": {&a: 2},
            "changed": {b.to_uppercase(): {"value": value_json("B2"), "time": 0}},
            "deleted": {&c: 5},
        }))
        .unwrap();
        assert_eq!(r.added.len(), 1);
        assert_eq!(r.added[0].0, "0");
        assert_eq!(r.added[0].1.tickle.content, b"new");
        assert_eq!(r.added[0].1.created, Timestamp::parse("2024-01-01T00:00:00Z").unwrap());
        assert_eq!(r.synced, [(id(0xA), 2)]);
        assert_eq!(r.changed.len(), 1);
        assert_eq!((r.changed[0].0, r.changed[0].2), (id(0xB), 0));
        assert_eq!(r.deleted, [(id(0xC), 5)]);
        // missing or null sections are empty
        for empty in [
            json!({}),
            json!({"added": null, "synced": null, "changed": null, "deleted": null}),
        ] {
            let r = parse(empty).unwrap();
            assert!(r.added.is_empty() && r.synced.is_empty() && r.changed.is_empty() && r.deleted.is_empty());
        }
        // created with an offset is converted to UTC
        let r =
            parse(json!({"added": {"x": {"contents": contents_json("x"), "created": "2024-01-01T02:00:00+02:00"}}}))
                .unwrap();
        assert_eq!(r.added[0].1.created, Timestamp::parse("2024-01-01T00:00:00Z").unwrap());
        // the largest time
        let r = parse(json!({"synced": {&a: u64::MAX}})).unwrap();
        assert_eq!(r.synced, [(id(0xA), u64::MAX)]);
    }

    #[test]
    fn parse_reads_the_legacy_new_key_only_without_added() {
        let r = parse(json!({"new": {"7": value_json("legacy")}})).unwrap();
        assert_eq!(r.added.len(), 1);
        assert_eq!(r.added[0].0, "7");
        assert_eq!(r.added[0].1.tickle.content, b"legacy");
        let r = parse(json!({"added": {"1": value_json("new")}, "new": {"2": value_json("old")}})).unwrap();
        assert_eq!(r.added.len(), 1);
        assert_eq!(r.added[0].0, "1");
        // an invalid legacy section is an error when it is read
        assert_eq!(parse(json!({"new": {"1": {"contents": 1}}})).err(), Some(400));
        assert_eq!(parse(json!({"new": []})).err(), Some(400));
    }

    #[test]
    fn parse_refuses_an_id_in_two_sections() {
        let x = id(0xF).to_string();
        let entry = json!({"value": value_json("x"), "time": 0});
        for body in [
            json!({"synced": {&x: 0}, "changed": {&x: entry}}),
            json!({"synced": {&x: 0}, "deleted": {&x: 0}}),
            json!({"changed": {&x: entry}, "deleted": {&x: 0}}),
            json!({"synced": {&x: 0}, "changed": {&x: entry}, "deleted": {&x: 0}}),
            // the same UUID spelt in two cases
            json!({"synced": {&x: 0}, "deleted": {x.to_uppercase(): 0}}),
        ] {
            assert_eq!(parse(body.clone()).err(), Some(400), "{body}");
        }
    }

    #[test]
    fn parse_refuses_bad_parts() {
        let x = id(0xF).to_string();
        assert_eq!(
            SyncRequest::parse(&json!({})).err().map(|_: DomainError| 400u16),
            Some(400)
        );
        assert_eq!(
            SyncRequest::parse(&json!({"syncRequestTickles": []}))
                .err()
                .map(|_: DomainError| 400u16),
            Some(400)
        );
        for body in [
            // times: negative, fractional, text, null, too large
            json!({"synced": {&x: -1}}),
            json!({"synced": {&x: 1.5}}),
            json!({"deleted": {&x: "1"}}),
            json!({"deleted": {&x: null}}),
            json!({"synced": {&x: 18446744073709551616.0}}),
            json!({"changed": {&x: {"value": value_json("x"), "time": -1}}}),
            json!({"changed": {&x: {"value": value_json("x")}}}),
            json!({"changed": {&x: {"time": 0}}}),
            json!({"changed": {&x: [value_json("x"), 0]}}),
            // UUIDs
            json!({"synced": {"not-a-uuid": 0}}),
            json!({"deleted": {"": 0}}),
            json!({"changed": {"1": {"value": value_json("x"), "time": 0}}}),
            // values
            json!({"added": {"0": {"contents": contents_json("x"), "created": "2024-01-01"}}}),
            json!({"added": {"0": {"contents": contents_json("x"), "created": "2024-01-01T00:00:00"}}}),
            json!({"added": {"0": {"contents": contents_json("x"), "created": 0}}}),
            json!({"added": {"0": {"contents": contents_json("x")}}}),
            json!({"added": {"0": {"created": "2024-01-01T00:00:00Z"}}}),
            json!({"added": {"0": {"contents": {"content": "x", "scheduled-day": "2023-02-29"}, "created": "2024-01-01T00:00:00Z"}}}),
            json!({"added": {"0": "x"}}),
            // sections of the wrong type
            json!({"added": []}),
            json!({"synced": [&x]}),
            json!({"changed": 1}),
            json!({"deleted": "x"}),
        ] {
            assert_eq!(parse(body.clone()).err(), Some(400), "{body}");
        }
    }

    // -----------------------------------------------------------------------------------
    // Simulation: a server and clients merging as §10.4 describes

    type View = BTreeMap<Uuid, (SyncValue, u64)>;

    fn sync_value(i: &ScheduledItem) -> SyncValue {
        SyncValue {
            tickle: i.tickle.clone(),
            created: i.created,
        }
    }

    struct Server {
        items: Vec<ScheduledItem>,
        next_id: u128,
        cap: Option<u64>,
    }

    impl Server {
        fn sync(&mut self, request: SyncRequest) -> SyncResponse {
            let mut next = self.next_id;
            let (response, changes) = plan(
                OWNER,
                &self.items,
                request,
                self.cap,
                || {
                    next += 1;
                    Uuid::from_u128(next)
                },
                due_of,
            );
            self.next_id = next;
            self.items.retain(|i| !changes.delete.contains(&i.id));
            for (item, _) in changes.put {
                match self.items.iter_mut().find(|i| i.id == item.id) {
                    Some(slot) => *slot = item,
                    None => self.items.push(item),
                }
            }
            response
        }

        fn view(&self) -> View {
            self.items
                .iter()
                .map(|i| (i.id, (sync_value(i), i.server_time)))
                .collect()
        }

        fn new_id(&mut self) -> Uuid {
            self.next_id += 1;
            Uuid::from_u128(self.next_id)
        }
    }

    /// A client keeping an offline copy (scheduler.md §10.4).
    #[derive(Clone, Default, Debug)]
    struct Client {
        added: BTreeMap<String, SyncValue>,
        synced: View,
        /// id → (new value, the server time it is based on)
        changed: View,
        deleted: BTreeMap<Uuid, u64>,
        next_key: u32,
    }

    impl Client {
        fn request(&self) -> SyncRequest {
            SyncRequest {
                added: self.added.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                synced: self.synced.iter().map(|(id, (_, t))| (*id, *t)).collect(),
                changed: self.changed.iter().map(|(id, (v, t))| (*id, v.clone(), *t)).collect(),
                deleted: self.deleted.iter().map(|(id, t)| (*id, *t)).collect(),
            }
        }

        fn merge(&mut self, r: &SyncResponse) {
            for i in r.server_added.iter().chain(&r.server_changed) {
                self.synced.insert(i.id, (sync_value(i), i.server_time));
            }
            for id in &r.server_deleted {
                self.synced.remove(id);
            }
            for i in &r.conflict {
                self.changed.remove(&i.id);
                self.synced.insert(i.id, (sync_value(i), i.server_time));
            }
            for i in &r.conflict_client_deleted {
                self.deleted.remove(&i.id);
                self.synced.insert(i.id, (sync_value(i), i.server_time));
            }
            for id in &r.conflict_server_deleted {
                self.changed.remove(id);
            }
            for id in &r.client_deleted {
                self.deleted.remove(id);
            }
            for (id, t) in &r.client_changed {
                if let Some((v, _)) = self.changed.remove(id) {
                    self.synced.insert(*id, (v, *t));
                }
            }
            for (key, id) in &r.client_added {
                if let Some(v) = self.added.remove(key) {
                    self.synced.insert(*id, (v, 0));
                }
            }
        }

        fn is_quiet(&self) -> bool {
            self.added.is_empty() && self.changed.is_empty() && self.deleted.is_empty()
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(usize, u8),
        Change(usize, usize, u8),
        Delete(usize, usize),
        Sync(usize),
        ServerAdd(u8),
        ServerEdit(usize, u8),
        ServerDelete(usize),
    }

    fn op(clients: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            2 => (0..clients, any::<u8>()).prop_map(|(c, b)| Op::Add(c, b)),
            3 => (0..clients, any::<usize>(), any::<u8>()).prop_map(|(c, i, b)| Op::Change(c, i, b)),
            2 => (0..clients, any::<usize>()).prop_map(|(c, i)| Op::Delete(c, i)),
            4 => (0..clients).prop_map(Op::Sync),
            1 => any::<u8>().prop_map(Op::ServerAdd),
            2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Op::ServerEdit(i, b)),
            1 => any::<usize>().prop_map(Op::ServerDelete),
        ]
    }

    fn content(b: u8) -> Tickle {
        tickle(&format!("c{b}"), 40_000 + b as i64)
    }

    /// One sync of client `c`, checking that conflicts go the server's way: an item in
    /// `conflict` or `conflict-client-deleted` is left as it was on the server, and the
    /// client ends up holding exactly that.
    fn sync_and_check(server: &mut Server, client: &mut Client) -> Result<SyncResponse, TestCaseError> {
        let before = server.view();
        let r = server.sync(client.request());
        client.merge(&r);
        let after = server.view();
        for i in r.conflict.iter().chain(&r.conflict_client_deleted) {
            let on_server = before.get(&i.id).cloned();
            prop_assert_eq!(
                after.get(&i.id).cloned(),
                on_server.clone(),
                "conflict changed the server"
            );
            prop_assert_eq!(Some((sync_value(i), i.server_time)), on_server);
            prop_assert_eq!(client.synced.get(&i.id).cloned(), after.get(&i.id).cloned());
            prop_assert!(!client.changed.contains_key(&i.id) && !client.deleted.contains_key(&i.id));
        }
        for id in &r.conflict_server_deleted {
            prop_assert!(!after.contains_key(id));
            prop_assert!(!client.changed.contains_key(id) && !client.synced.contains_key(id));
        }
        Ok(r)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Clients adding, changing, deleting and syncing at random while the server edits
        /// (bumping server times), adds and deletes items; then every client syncs until
        /// quiet: all hold exactly the server's items with their times, and an immediate
        /// second sync answers nothing.
        #[test]
        fn clients_converge_to_the_server(
            ops in proptest::collection::vec(op(3), 0..80),
            cap in prop_oneof![3 => Just(None), 1 => (0u64..10).prop_map(Some)],
        ) {
            let mut server = Server { items: Vec::new(), next_id: 0, cap };
            let mut clients = vec![Client::default(); 3];
            for op in ops {
                match op {
                    Op::Add(c, b) => {
                        let cl = &mut clients[c];
                        cl.next_key += 1;
                        let key = cl.next_key.to_string();
                        cl.added.insert(key, SyncValue { tickle: content(b), created: Timestamp::from_unix(b as i64, 0) });
                    }
                    Op::Change(c, i, b) => {
                        let cl = &mut clients[c];
                        let ids: Vec<Uuid> = cl.synced.keys().chain(cl.changed.keys()).copied().collect();
                        if !ids.is_empty() {
                            let id = ids[i % ids.len()];
                            let (mut v, t) = cl.synced.remove(&id).or_else(|| cl.changed.remove(&id)).unwrap();
                            v.tickle = content(b);
                            cl.changed.insert(id, (v, t));
                        }
                    }
                    Op::Delete(c, i) => {
                        let cl = &mut clients[c];
                        let ids: Vec<Uuid> = cl.synced.keys().chain(cl.changed.keys()).copied().collect();
                        if !ids.is_empty() {
                            let id = ids[i % ids.len()];
                            let (_, t) = cl.synced.remove(&id).or_else(|| cl.changed.remove(&id)).unwrap();
                            cl.deleted.insert(id, t);
                        }
                    }
                    Op::Sync(c) => {
                        sync_and_check(&mut server, &mut clients[c])?;
                    }
                    Op::ServerAdd(b) => {
                        if cap.is_none_or(|cap| (server.items.len() as u64) < cap) {
                            let id = server.new_id();
                            server.items.push(ScheduledItem {
                                id,
                                owner: OWNER,
                                tickle: content(b),
                                created: Timestamp::from_unix(1000 + b as i64, 0),
                                server_time: 0,
                            });
                        }
                    }
                    Op::ServerEdit(i, b) => {
                        if !server.items.is_empty() {
                            let n = server.items.len();
                            let it = &mut server.items[i % n];
                            it.tickle = content(b);
                            it.server_time += 1;
                        }
                    }
                    Op::ServerDelete(i) => {
                        if !server.items.is_empty() {
                            let n = server.items.len();
                            server.items.remove(i % n);
                        }
                    }
                }
            }
            // With a cap, some additions may never fit: give them up after a few rounds.
            for round in 0..6 {
                if round == 3 && cap.is_some() {
                    for c in clients.iter_mut() {
                        c.added.clear();
                    }
                }
                for c in clients.iter_mut() {
                    sync_and_check(&mut server, c)?;
                }
            }
            let view = server.view();
            for c in clients.iter_mut() {
                prop_assert!(c.is_quiet(), "client not quiet: {:?}", c);
                prop_assert_eq!(&c.synced, &view);
                let r = sync_and_check(&mut server, c)?;
                prop_assert_eq!(&r, &SyncResponse::default());
                prop_assert_eq!(&server.view(), &view);
                prop_assert_eq!(&c.synced, &view);
            }
        }
    }
}
