//! The inbox's handlers of its own routes (`routes.rs`), called once the caller is admitted
//! from the headers and the body read: path → parse → call the store → await the write's
//! receipt (durable) → answer.

use super::Inbox;
use crate::domain::inbox::models::{ContentsIn, InboxItem, ItemType};
use crate::domain::inbox::sync::{self, SyncRequest};
use crate::domain::transfer;
use crate::domain::wire::{self, Timestamp};
use crate::http::routes::Call;
use crate::http::{ApiError, Page, Reply};
use crate::shell::Shell;
use crate::store::inbox::{AddOutcome, ImportOutcome};
use crate::store::{PageSize, StoreError, Written};
use serde_json::json;
use uuid::Uuid;

impl Shell<Inbox> {
    pub(super) async fn item(&self, call: Call) -> Result<Reply, ApiError> {
        let found = self
            .ctx
            .store
            .inbox
            .item(call.who()?.account.id, call.uuid("id")?)
            .await?
            .ok_or_else(|| ApiError::not_found("item not found"))?;
        Ok(Reply::json(&found))
    }

    pub(super) async fn delete_item(&self, call: Call) -> Result<Reply, ApiError> {
        let store = &self.ctx.store.inbox;
        store
            .delete_item(call.who()?.account.id, call.uuid("id")?)
            .await?
            .durable()
            .await?;
        Ok(Reply::empty())
    }

    pub(super) async fn items(&self, call: Call) -> Result<Reply, ApiError> {
        let id = call.who()?.account.id;
        // checked, then sent while it is read from the store (one item in memory at a
        // time): an undecodable item is a JSON 500
        let items = self.ctx.store.inbox.items.clone();
        Reply::json_pages(move |after: Option<Uuid>| -> Page<InboxItem, Uuid> {
            let items = items.clone();
            Box::pin(async move {
                let page = items.items_page(id, after, PageSize::LISTING).await?;
                let next = match PageSize::LISTING.is_full(&page) {
                    true => page.last().map(|i| i.id),
                    false => None,
                };
                Ok((page, next))
            })
        })
        .await
    }

    pub(super) async fn uuids(&self, call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(
            &self.ctx.store.inbox.item_ids(call.who()?.account.id).await?,
        ))
    }

    pub(super) async fn show_item(&self, call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(
            &self.ctx.store.inbox.first_item(call.who()?.account.id).await?,
        ))
    }

    pub(super) async fn size(&self, call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(&self.ctx.store.inbox.count(call.who()?.account.id).await?))
    }

    pub(super) async fn sync(&self, call: Call) -> Result<Reply, ApiError> {
        let who = call.who()?;
        let request = SyncRequest::parse(call.request.json()?)?;
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.inbox.accounts, &who.account)
            .await?;
        // the answer of the last call of the planner (the store may retry it)
        let mut answer = None;
        let synced = self
            .ctx
            .store
            .inbox
            .sync(who.account.id, &mut |items| {
                let (response, changes) = sync::plan(items, request.clone(), cap, wire::new_uuid);
                answer = Some(response);
                changes
            })
            .await?;
        synced.durable().await?;
        let answer = answer.ok_or_else(|| ApiError::internal("the sync was not planned"))?;
        Ok(Reply::json(&answer))
    }

    /// `GET /account/export`: items, and access keys without their secrets.
    pub(super) async fn export(&self, call: Call) -> Result<Reply, ApiError> {
        let who = call.who()?;
        let items = self.ctx.store.inbox.items(who.account.id).await?;
        let keys = self.flows.exported_keys(&*self.ctx.store.inbox.accounts, who).await?;
        Ok(Reply::json(&transfer::inbox_export(
            &who.account.username,
            &items,
            keys,
        )))
    }

    /// `POST /account/import`: the items of an export that the account does not have yet,
    /// all or nothing; access keys are listed to be recreated (their secrets are not in an
    /// export). The body is read twice, an item at a time: first every item is checked and
    /// its id kept, then the ids are checked against the store (ownership, the item limit),
    /// and only then are the items read again and written, in bounded batches (one import at
    /// a time in the process). `"dry-run": true` stops after the checks.
    pub(super) async fn import(&self, call: Call) -> Result<Reply, ApiError> {
        let who = call.who()?;
        let body = crate::http::body::json_object(&call.request)?;
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.inbox.accounts, &who.account)
            .await?;
        let ctx = self.ctx.clone();
        let account = who.account.id;
        let runtime = tokio::runtime::Handle::current();
        let work = move || -> Result<(transfer::InboxHead, usize, ImportOutcome), ApiError> {
            let store = &ctx.store.inbox;
            let mut ids = Vec::new();
            let head = transfer::read_inbox_import(&body, |item| {
                ids.push(item.id);
                Ok::<(), std::convert::Infallible>(())
            })
            .map_err(|e| match e {
                transfer::ReadError::Invalid(e) => ApiError::from(e),
                transfer::ReadError::Stopped(never) => match never {},
            })?;
            if head.dry_run {
                let outcome = store.check_import(account, &ids, cap, head.new_before)?;
                return Ok((head, ids.len(), outcome));
            }
            let wait = |w: Written<()>| runtime.block_on(w.durable());
            let mut write = |each: &mut dyn FnMut(InboxItem) -> Result<(), StoreError>| {
                transfer::read_inbox_import(&body, each)
                    .map(|_| ())
                    .map_err(|e| match e {
                        transfer::ReadError::Stopped(e) => e,
                        transfer::ReadError::Invalid(e) => {
                            StoreError::Codec(format!("the import read differently: {e}"))
                        }
                    })
            };
            let outcome = store.import_items(account, &ids, cap, &mut write, &wait)?;
            Ok((head, ids.len(), outcome))
        };
        let (head, count, outcome) = tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::internal(format!("the import stopped: {e}")).with_source(e))??;
        match outcome {
            ImportOutcome::Imported { added, skipped } if head.dry_run => Ok(Reply::json(&json!({
                "checked": true,
                "items": count,
                "items-new": added,
                "items-there": skipped,
            }))),
            ImportOutcome::Imported { added, skipped } => Ok(Reply::json(&json!({
                "items-added": added,
                "items-kept": skipped,
                "access-keys-to-recreate": head.keys_to_recreate,
            }))),
            ImportOutcome::LimitReached => Err(ApiError::payment_required(
                "the import would go over the free item limit: nothing was imported",
            )),
            ImportOutcome::Interrupted => Err(ApiError::internal(
                "the database failed during the import: nothing of it is kept (the part already written is \
                 undone when the server restarts); import the same file again then",
            )),
        }
    }

    /// `POST /inbox/item`: the item's contents as JSON (inbox.md §3.5).
    pub(super) async fn add_item(&self, call: Call) -> Result<Reply, ApiError> {
        let contents: ContentsIn = call.request.json()?;
        let (kind, data) = contents.validate()?;
        self.store_item(&call, kind, data).await
    }

    /// `POST /inbox/text`: the body is the text of a new item, whatever its content type
    /// (a phone shortcut, `curl --data-binary 'buy milk'`), without its trailing line break.
    /// `POST /inbox/item` keeps requiring JSON, as Intray's clients expect.
    pub(super) async fn add_text(&self, call: Call) -> Result<Reply, ApiError> {
        let mut text: &[u8] = &call.request.body;
        for end in [&b"\r\n"[..], b"\n"] {
            if let Some(rest) = text.strip_suffix(end) {
                text = rest;
                break;
            }
        }
        if text.is_empty() {
            return Err(ApiError::bad_request(
                "the note is empty: send its text as the request body",
            ));
        }
        self.store_item(&call, ItemType::Text, text.to_vec()).await
    }

    async fn store_item(&self, call: &Call, kind: ItemType, data: Vec<u8>) -> Result<Reply, ApiError> {
        let who = call.who()?;
        let idempotency = match call.request.header("idempotency-key") {
            Some(v) => Some(idempotency_key(v.as_bytes())?),
            None => None,
        };
        let item = InboxItem {
            id: wire::new_uuid(),
            kind,
            data,
            created: Timestamp::now(),
        };
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.inbox.accounts, &who.account)
            .await?;
        // a repeated key may name an item whose first request is still being flushed: its
        // receipt waits for that flush as well
        let added = self
            .ctx
            .store
            .inbox
            .add_item(who.account.id, &item, idempotency, cap)
            .await?;
        match added.durable().await? {
            AddOutcome::Added(id) | AddOutcome::Repeated(id) => Ok(Reply::json(&id)),
            AddOutcome::LimitReached => Err(ApiError::payment_required("the free item limit is reached")),
        }
    }
}

/// An `Idempotency-Key`: 1–200 printable ASCII characters (inbox.md §3.13).
fn idempotency_key(bytes: &[u8]) -> Result<&str, ApiError> {
    if bytes.is_empty() || bytes.len() > 200 || !bytes.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(ApiError::bad_request(
            "invalid Idempotency-Key: 1 to 200 printable ASCII characters",
        ));
    }
    std::str::from_utf8(bytes).map_err(|_| ApiError::bad_request("invalid Idempotency-Key"))
}
