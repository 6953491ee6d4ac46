//! Inbox items and the JSON shapes of the inbox service (inbox.md §1.4, §3).

use crate::domain::wire::{self, Timestamp};
use crate::domain::DomainError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemType {
    Text,
    Jpeg,
    Png,
}

impl ItemType {
    pub fn parse(s: &str) -> Option<ItemType> {
        match s {
            "text" => Some(ItemType::Text),
            "image/jpeg" => Some(ItemType::Jpeg),
            "image/png" => Some(ItemType::Png),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ItemType::Text => "text",
            ItemType::Jpeg => "image/jpeg",
            ItemType::Png => "image/png",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InboxItem {
    pub id: Uuid,
    pub kind: ItemType,
    pub data: Vec<u8>,
    pub created: Timestamp,
}

impl InboxItem {
    /// The contents as the wire shows them: `{"data", "type"}`.
    pub fn contents_out(&self) -> ContentsOut<'_> {
        ContentsOut {
            data: wire::Base64(&self.data),
            kind: self.kind.as_str(),
        }
    }
}

/// An item serialises as the wire shows it (inbox.md §1.4): `{"contents", "created", "id"}`,
/// straight into the answer (the store has its own record format).
impl Serialize for InboxItem {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ItemOut {
            contents: self.contents_out(),
            created: self.created,
            id: self.id,
        }
        .serialize(s)
    }
}

/// Item contents, serialised straight into an answer.
#[derive(Serialize)]
pub struct ContentsOut<'a> {
    data: wire::Base64<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ItemOut<'a> {
    contents: ContentsOut<'a>,
    created: Timestamp,
    id: Uuid,
}

/// Item contents as sent: `{"type", "data"}` (other keys ignored).
#[derive(Deserialize)]
pub struct ContentsIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub data: String,
}

impl ContentsIn {
    pub fn validate(&self) -> Result<(ItemType, Vec<u8>), DomainError> {
        let kind = ItemType::parse(&self.kind)
            .ok_or_else(|| DomainError::invalid(format!("invalid item type {:?}", self.kind)))?;
        let data = wire::decode_base64(&self.data)
            .ok_or_else(|| DomainError::invalid("item data is not padded standard base64"))?;
        Ok((kind, data))
    }
}

#[derive(Deserialize)]
pub struct AddAccessKeyIn {
    #[serde(rename = "addAccessKeyName")]
    pub name: String,
    #[serde(rename = "addAccessKeyPermissions")]
    pub permissions: Vec<String>,
}

#[derive(Deserialize)]
pub struct SyncAddedIn {
    pub contents: ContentsIn,
    pub created: String,
}

#[derive(Deserialize)]
pub struct SyncIn {
    #[serde(default)]
    pub added: Option<serde_json::Map<String, Value>>,
    #[serde(default)]
    pub synced: Option<Vec<String>>,
    #[serde(default)]
    pub deleted: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_item_serialises_as_the_wire_shows_it() {
        let item = InboxItem {
            id: Uuid::nil(),
            kind: ItemType::Png,
            data: b"Hello world".to_vec(),
            created: Timestamp::parse("2024-05-01T08:00:00.5Z").unwrap(),
        };
        assert_eq!(
            serde_json::to_value(&item).unwrap(),
            json!({"id": "00000000-0000-0000-0000-000000000000",
                   "contents": {"type": "image/png", "data": "SGVsbG8gd29ybGQ="},
                   "created": "2024-05-01T08:00:00.5Z"})
        );
    }
}
