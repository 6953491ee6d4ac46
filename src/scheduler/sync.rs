//! The server side of `POST /sync` (scheduler.md §10.3): a version-based merge over the
//! account's scheduled items, as a pure function; the store applies what it decides.

use super::models::{ScheduledItem, Tickle};
use crate::http::ApiError;
use crate::inbox::sync::order_keys;
use crate::store::scheduler::ScheduledChanges;
use crate::wire::{self, Timestamp};
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

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

fn parse_value(v: &Value) -> Result<SyncValue, ApiError> {
    let obj = v.as_object().ok_or_else(|| bad("a sync value must be an object"))?;
    let tickle = Tickle::parse(obj.get("contents").ok_or_else(|| bad("a sync value needs contents"))?)?;
    let created = match obj.get("created") {
        Some(Value::String(s)) => Timestamp::parse(s).ok_or_else(|| bad(format!("invalid timestamp {s:?}")))?,
        _ => return Err(bad("a sync value needs created")),
    };
    Ok(SyncValue { tickle, created })
}

fn parse_id(s: &str) -> Result<Uuid, ApiError> {
    wire::parse_uuid(s).ok_or_else(|| bad(format!("invalid UUID {s:?}")))
}

fn parse_time(v: &Value) -> Result<u64, ApiError> {
    v.as_u64()
        .ok_or_else(|| bad("a server time must be a non-negative integer"))
}

/// The map under `key` (missing or `null`: empty).
fn section<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a Map<String, Value>>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(Some(m)),
        Some(_) => Err(bad(format!("{key} must be an object"))),
    }
}

impl SyncRequest {
    /// Validates `{"syncRequestTickles": {...}}`; any invalid part is a 400.
    pub fn parse(body: &Value) -> Result<SyncRequest, ApiError> {
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

fn entry(item: &ScheduledItem) -> Value {
    json!({"value": item.value_json(), "time": item.server_time})
}

fn entries(items: &[ScheduledItem]) -> Value {
    Value::Object(items.iter().map(|i| (i.id.to_string(), entry(i))).collect())
}

impl SyncResponse {
    /// `{"syncResponseTickles": {...}}` with the empty parts left out.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        if !self.client_added.is_empty() {
            let m: Map<String, Value> = self
                .client_added
                .iter()
                .map(|(k, id)| (k.clone(), json!({"id": id, "time": 0})))
                .collect();
            out.insert("client-added".into(), Value::Object(m));
        }
        if !self.client_changed.is_empty() {
            let m: Map<String, Value> = self
                .client_changed
                .iter()
                .map(|(id, t)| (id.to_string(), json!(t)))
                .collect();
            out.insert("client-changed".into(), Value::Object(m));
        }
        let lists = [
            ("client-deleted", &self.client_deleted),
            ("server-deleted", &self.server_deleted),
            ("conflict-server-deleted", &self.conflict_server_deleted),
        ];
        for (name, list) in lists {
            if !list.is_empty() {
                out.insert(name.into(), json!(wire::sorted_unique(list.clone())));
            }
        }
        let maps = [
            ("server-added", &self.server_added),
            ("server-changed", &self.server_changed),
            ("conflict", &self.conflict),
            ("conflict-client-deleted", &self.conflict_client_deleted),
        ];
        for (name, items) in maps {
            if !items.is_empty() {
                out.insert(name.into(), entries(items));
            }
        }
        json!({"syncResponseTickles": out})
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
    order_keys(&mut added);
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
