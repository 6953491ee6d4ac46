//! Inbox items and the JSON shapes of the inbox service (inbox.md §1.4, §3).

use crate::http::ApiError;
use crate::wire::{self, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use uuid::Uuid;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    pub fn contents_json(&self) -> Value {
        json!({"type": self.kind.as_str(), "data": wire::encode_base64(&self.data)})
    }

    /// `{"id", "contents", "created"}`.
    pub fn to_json(&self) -> Value {
        json!({"id": self.id, "contents": self.contents_json(), "created": self.created.to_string()})
    }
}

/// Item contents as sent: `{"type", "data"}` (other keys ignored).
#[derive(Deserialize)]
pub struct ContentsIn {
    #[serde(rename = "type")]
    pub kind: String,
    pub data: String,
}

impl ContentsIn {
    pub fn validate(&self) -> Result<(ItemType, Vec<u8>), ApiError> {
        let kind = ItemType::parse(&self.kind)
            .ok_or_else(|| ApiError::bad_request(format!("invalid item type {:?}", self.kind)))?;
        let data = wire::decode_base64(&self.data)
            .ok_or_else(|| ApiError::bad_request("item data is not padded standard base64"))?;
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
