//! The server side of `POST /inbox/sync` (inbox.md §5.3), as a pure function over the
//! account's items: the store runs it with the account's writes held off and applies the
//! changes it returns in one batch.

use super::models::{ContentsOut, InboxItem, ItemType, SyncAddedIn, SyncIn};
use crate::domain::wire::{self, ObjectOf, Timestamp};
use crate::domain::DomainError;
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::collections::HashSet;
use uuid::Uuid;

/// A validated sync request.
#[derive(Clone, Debug, Default)]
pub struct SyncRequest {
    /// `(client key, item)`, in request order.
    pub added: Vec<(String, NewItem)>,
    pub synced: Vec<Uuid>,
    pub deleted: Vec<Uuid>,
}

/// An item a client created offline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewItem {
    pub kind: ItemType,
    pub data: Vec<u8>,
    pub created: Timestamp,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncResponse {
    pub client_added: Vec<(String, Uuid)>,
    pub client_deleted: Vec<Uuid>,
    pub server_added: Vec<InboxItem>,
    pub server_deleted: Vec<Uuid>,
}

impl SyncRequest {
    /// Validates the whole request; any invalid part is a 400 and nothing is applied.
    pub fn parse(input: SyncIn) -> Result<SyncRequest, DomainError> {
        let uuids = |list: Option<Vec<String>>| -> Result<Vec<Uuid>, DomainError> {
            list.unwrap_or_default()
                .iter()
                .map(|s| wire::parse_uuid(s).ok_or_else(|| DomainError::invalid(format!("invalid UUID {s:?}"))))
                .collect()
        };
        let mut added = Vec::new();
        for (key, value) in input.added.unwrap_or_default() {
            let entry: SyncAddedIn = serde_json::from_value(value)
                .map_err(|e| DomainError::invalid(format!("invalid added item {key:?}: {e}")))?;
            let (kind, data) = entry.contents.validate()?;
            let created = Timestamp::parse(&entry.created)
                .ok_or_else(|| DomainError::invalid(format!("invalid timestamp {:?}", entry.created)))?;
            added.push((key, NewItem { kind, data, created }));
        }
        Ok(SyncRequest {
            added,
            synced: uuids(input.synced)?,
            deleted: uuids(input.deleted)?,
        })
    }
}

/// `{"client-added", "client-deleted", "server-added", "server-deleted"}`, serialised
/// straight into the answer.
impl Serialize for SyncResponse {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry(
            "client-added",
            &ObjectOf(|| self.client_added.iter().map(|(k, u)| (k, u))),
        )?;
        m.serialize_entry("client-deleted", &self.client_deleted)?;
        let server_added = || {
            self.server_added.iter().map(|i| {
                let value = ServerAdded {
                    contents: i.contents_out(),
                    created: i.created,
                };
                (i.id, value)
            })
        };
        m.serialize_entry("server-added", &ObjectOf(server_added))?;
        m.serialize_entry("server-deleted", &self.server_deleted)?;
        m.end()
    }
}

#[derive(Serialize)]
struct ServerAdded<'a> {
    contents: ContentsOut<'a>,
    created: Timestamp,
}

/// Decides a sync over the account's items `items` (oldest first). `cap` is the account's
/// free-item cap when it is not paid. New items get ids from `new_id`.
pub fn plan(
    items: &[InboxItem],
    request: SyncRequest,
    cap: Option<u64>,
    mut new_id: impl FnMut() -> Uuid,
) -> (SyncResponse, ItemChanges) {
    let existing: HashSet<Uuid> = items.iter().map(|i| i.id).collect();
    let synced: HashSet<Uuid> = request.synced.iter().copied().collect();
    let deleted: HashSet<Uuid> = request.deleted.iter().copied().collect();

    let mut added = request.added;
    crate::domain::client_keys::order(&mut added);
    if let Some(cap) = cap {
        let left = (cap as i64 - items.len() as i64).max(0) as usize;
        added.truncate(left);
    }

    let server_added = items
        .iter()
        .filter(|i| !synced.contains(&i.id) && !deleted.contains(&i.id))
        .cloned()
        .collect();
    let server_deleted = wire::sorted_unique(synced.iter().filter(|u| !existing.contains(u)).copied().collect());
    let client_deleted = wire::sorted_unique(deleted.iter().copied().collect());
    let delete: Vec<Uuid> = client_deleted
        .iter()
        .filter(|u| existing.contains(u))
        .copied()
        .collect();

    let mut changes = ItemChanges {
        delete,
        add: Vec::new(),
    };
    let mut client_added = Vec::new();
    for (key, NewItem { kind, data, created }) in added {
        let id = new_id();
        changes.add.push(InboxItem {
            id,
            kind,
            data,
            created,
        });
        client_added.push((key, id));
    }
    let response = SyncResponse {
        client_added,
        client_deleted,
        server_added,
        server_deleted,
    };
    (response, changes)
}

/// What a sync decided, applied atomically by the store.
#[derive(Default)]
pub struct ItemChanges {
    pub delete: Vec<Uuid>,
    pub add: Vec<InboxItem>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn item(n: u128, secs: i64) -> InboxItem {
        InboxItem {
            id: Uuid::from_u128(n),
            kind: ItemType::Text,
            data: n.to_be_bytes().to_vec(),
            created: Timestamp::from_unix(secs, 0),
        }
    }

    fn new_item(kind: ItemType, data: Vec<u8>, secs: i64) -> NewItem {
        NewItem {
            kind,
            data,
            created: Timestamp::from_unix(secs, 0),
        }
    }

    fn counter() -> impl FnMut() -> Uuid {
        let mut n = 1_000_000u128;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    #[test]
    fn spec_example() {
        // The account holds u1 and u2; the client holds u0 (gone), deleted u2, made two items.
        let items = [item(1, 10), item(2, 20)];
        let request = SyncRequest {
            added: vec![
                ("1".into(), new_item(ItemType::Text, b"buy milk".to_vec(), 8)),
                ("2".into(), new_item(ItemType::Png, vec![1], 9)),
            ],
            synced: vec![Uuid::from_u128(0)],
            deleted: vec![Uuid::from_u128(2)],
        };
        let (r, changes) = plan(&items, request, None, counter());
        assert_eq!(
            r.client_added.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["1", "2"]
        );
        assert_eq!(r.client_deleted, [Uuid::from_u128(2)]);
        assert_eq!(r.server_added, [item(1, 10)]);
        assert_eq!(r.server_deleted, [Uuid::from_u128(0)]);
        assert_eq!(changes.delete, [Uuid::from_u128(2)]);
        assert_eq!(changes.add.len(), 2);
    }

    #[test]
    fn synced_and_deleted_at_once() {
        let items = [item(1, 1)];
        let both = vec![Uuid::from_u128(1), Uuid::from_u128(9)];
        let request = SyncRequest {
            added: vec![],
            synced: both.clone(),
            deleted: both.clone(),
        };
        let (r, changes) = plan(&items, request, None, counter());
        assert_eq!(r.client_deleted, both);
        assert_eq!(
            r.server_deleted,
            [Uuid::from_u128(9)],
            "only what the account did not have"
        );
        assert_eq!(changes.delete, [Uuid::from_u128(1)]);
        assert!(r.server_added.is_empty());
    }

    #[test]
    fn cap_truncates_after_ordering_and_counts_before_deletions() {
        let items = [item(1, 1), item(2, 2), item(3, 3)];
        let added = ["3", "1", "4", "2"]
            .iter()
            .map(|k| (k.to_string(), new_item(ItemType::Text, vec![], 0)))
            .collect();
        let request = SyncRequest {
            added,
            synced: vec![],
            deleted: vec![Uuid::from_u128(1)],
        };
        let (r, changes) = plan(&items, request, Some(5), counter());
        let keys: Vec<&str> = r.client_added.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["1", "2"]);
        assert_eq!(changes.add.len(), 2);
        let (r, _) = plan(
            &(0..7).map(|i| item(i, 1)).collect::<Vec<_>>(),
            SyncRequest {
                added: vec![("0".into(), new_item(ItemType::Text, vec![], 0))],
                ..Default::default()
            },
            Some(5),
            counter(),
        );
        assert!(r.client_added.is_empty(), "a negative allowance accepts nothing");
    }

    /// A client keeping an offline copy, merging as inbox.md §5.4 says.
    #[derive(Clone, Default)]
    struct Client {
        added: BTreeMap<String, (Vec<u8>, i64)>,
        synced: BTreeMap<Uuid, (Vec<u8>, i64)>,
        deleted: BTreeSet<Uuid>,
        next: u32,
    }

    impl Client {
        fn request(&self) -> SyncRequest {
            SyncRequest {
                added: self
                    .added
                    .iter()
                    .map(|(k, (d, c))| (k.clone(), new_item(ItemType::Text, d.clone(), *c)))
                    .collect(),
                synced: self.synced.keys().copied().collect(),
                deleted: self.deleted.iter().copied().collect(),
            }
        }

        fn merge(&mut self, r: &SyncResponse) {
            for i in &r.server_added {
                if !self.synced.contains_key(&i.id) && !self.deleted.contains(&i.id) {
                    self.synced.insert(i.id, (i.data.clone(), i.created.secs));
                }
            }
            for u in &r.server_deleted {
                self.synced.remove(u);
            }
            for u in &r.client_deleted {
                self.deleted.remove(u);
            }
            for (k, u) in &r.client_added {
                if let Some(v) = self.added.remove(k) {
                    self.synced.insert(*u, v);
                }
            }
        }
    }

    /// The server: items plus the store's application of a plan.
    struct Server {
        items: Vec<InboxItem>,
        ids: Box<dyn FnMut() -> Uuid>,
    }

    impl Server {
        fn sync(&mut self, request: SyncRequest, cap: Option<u64>) -> SyncResponse {
            let (r, changes) = plan(&self.items, request, cap, &mut self.ids);
            self.items.retain(|i| !changes.delete.contains(&i.id));
            self.items.extend(changes.add);
            self.items.sort_by_key(|i| i.created);
            r
        }

        fn view(&self) -> BTreeMap<Uuid, (Vec<u8>, i64)> {
            self.items
                .iter()
                .map(|i| (i.id, (i.data.clone(), i.created.secs)))
                .collect()
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(usize, u8),
        DeleteSynced(usize, usize),
        DropAdded(usize, usize),
        Sync(usize),
        ServerAdd(u8),
        ServerDelete(usize),
    }

    fn op(clients: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..clients, any::<u8>()).prop_map(|(c, b)| Op::Add(c, b)),
            (0..clients, any::<usize>()).prop_map(|(c, i)| Op::DeleteSynced(c, i)),
            (0..clients, any::<usize>()).prop_map(|(c, i)| Op::DropAdded(c, i)),
            (0..clients).prop_map(Op::Sync),
            any::<u8>().prop_map(Op::ServerAdd),
            any::<usize>().prop_map(Op::ServerDelete),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Several clients doing random things, then syncing until quiet: every client holds
        /// exactly the server's items, every acknowledged item is on the server unless some
        /// client deleted it, and one more sync changes nothing (idempotence).
        #[test]
        fn clients_converge(ops in proptest::collection::vec(op(3), 0..60), cap in prop_oneof![Just(None), (0u64..8).prop_map(Some)]) {
            let mut ids = 0u128;
            let mut server = Server { items: vec![], ids: Box::new(move || { ids += 1; Uuid::from_u128(ids) }) };
            let mut clients = vec![Client::default(); 3];
            let mut server_adds = 0u128;
            for op in ops {
                match op {
                    Op::Add(c, b) => {
                        let cl = &mut clients[c];
                        cl.next += 1;
                        let key = cl.next.to_string();
                        cl.added.insert(key, (vec![b], b as i64));
                    }
                    Op::DeleteSynced(c, i) => {
                        let cl = &mut clients[c];
                        if !cl.synced.is_empty() {
                            let id = *cl.synced.keys().nth(i % cl.synced.len()).unwrap();
                            cl.synced.remove(&id);
                            cl.deleted.insert(id);
                        }
                    }
                    Op::DropAdded(c, i) => {
                        let cl = &mut clients[c];
                        if !cl.added.is_empty() {
                            let k = cl.added.keys().nth(i % cl.added.len()).unwrap().clone();
                            cl.added.remove(&k);
                        }
                    }
                    Op::Sync(c) => {
                        let r = server.sync(clients[c].request(), cap);
                        clients[c].merge(&r);
                    }
                    Op::ServerAdd(b) => {
                        server_adds += 1;
                        if cap.is_none_or(|cap| (server.items.len() as u64) < cap) {
                            server.items.push(item(u128::MAX - server_adds, b as i64));
                            server.items.sort_by_key(|i| i.created);
                        }
                    }
                    Op::ServerDelete(i) => {
                        if !server.items.is_empty() {
                            let at = i % server.items.len();
                            server.items.remove(at);
                        }
                    }
                }
            }
            // Without a cap, pending additions all land; with one they may stay pending, so
            // drop what cannot fit before checking convergence.
            for _ in 0..3 {
                for c in clients.iter_mut() {
                    let r = server.sync(c.request(), cap);
                    c.merge(&r);
                }
            }
            if cap.is_some() {
                for c in clients.iter_mut() {
                    c.added.clear();
                }
            }
            for _ in 0..2 {
                for c in clients.iter_mut() {
                    let r = server.sync(c.request(), cap);
                    c.merge(&r);
                }
            }
            for c in clients.iter_mut() {
                prop_assert!(c.added.is_empty());
                prop_assert!(c.deleted.is_empty());
                prop_assert_eq!(&c.synced, &server.view());
                let before = c.synced.clone();
                let r = server.sync(c.request(), cap);
                prop_assert_eq!(&r, &SyncResponse::default());
                c.merge(&r);
                prop_assert_eq!(&c.synced, &before);
            }
        }
    }
}
