//! Inbox handlers: credentials and permission from the headers (before the body is read),
//! then per route: path → parse → call the store → await the write's receipt (durable) →
//! answer.

use super::routes::{self, Route};
use super::Inbox;
use crate::auth::flows::require_all;
use crate::domain::account::{Account, Principal, ServiceKind};
use crate::domain::inbox::models::{ContentsIn, InboxItem, ItemType};
use crate::domain::inbox::sync::{self, SyncRequest};
use crate::domain::transfer;
use crate::domain::wire::{self, Timestamp};
use crate::http::{app, path_uuid, ApiError, Head, Page, Reply, Request};
use crate::payments;
use crate::store::inbox::{AddOutcome, ImportOutcome};
use crate::store::{StoreError, Written};
use serde_json::{json, Value};
use uuid::Uuid;

/// Items per page of a listing read from the store while it is answered.
const LIST_PAGE: usize = 32;

impl Inbox {
    /// Checks 3 and 4 of inbox.md §1.2: `None` for a public route, else the caller, who has
    /// the route's permission (and is an admin for `/admin/...`).
    pub(super) async fn admit(&self, route: &Route, head: &Head) -> Result<Option<Principal>, ApiError> {
        let accounts = &*self.ctx.store.inbox.accounts;
        self.flows
            .admit(accounts, routes::access(route), *route == Route::Register, head)
            .await
    }

    pub(super) async fn dispatch(
        &self,
        route: Route,
        caller: Option<Principal>,
        request: Request,
    ) -> Result<Reply, ApiError> {
        let accounts = &*self.ctx.store.inbox.accounts;
        match route {
            Route::Root => return Ok(Reply::html(super::API_PAGE)),
            Route::OpenApi => return Ok(Reply::json_text(super::OPENAPI)),
            Route::Health => return Ok(self.ctx.health().await),
            Route::Register => return self.flows.register(accounts, &request).await,
            Route::Login => return self.flows.login(accounts, &request).await,
            Route::Pricing => return Ok(Reply::json(&payments::pricing(&self.ctx.settings))),
            Route::App(name) => {
                // the inbox page ("Later…"), the login and the settings page may call the
                // scheduler of this server (docs/web.md)
                let public = self.ctx.settings.web_origins.scheduler.as_deref();
                let scheduler = self
                    .local_scheduler
                    .map(|port| app::sibling_connect(&request, port, public));
                let connect = match name.as_str() {
                    "" | "login" | "settings" => scheduler.unwrap_or_default(),
                    _ => Vec::new(),
                };
                return app::serve(&request, &[super::APP, app::COMMON], &name, &connect);
            }
            Route::AppConfig => {
                let registration = self.ctx.settings.registration_open;
                // where browsers reach it: its public origin, or this host at its port
                let origin = &self.ctx.settings.web_origins.scheduler;
                let scheduler = self
                    .local_scheduler
                    .map(|port| json!({ "port": port, "origin": origin }));
                return Ok(app::config(
                    &json!({"service": "inbox", "registration": registration, "scheduler": scheduler}),
                ));
            }
            Route::AppToken => return self.flows.login_for_page(accounts, &request).await,
            _ => {}
        }
        let Some(who) = caller else {
            return Err(ApiError::internal("a protected route without a caller"));
        };
        let store = &self.ctx.store.inbox;
        let id = who.account.id;
        match route {
            Route::Permissions => Ok(self.flows.permissions(&who)),
            Route::GetAccount => Ok(Reply::json(&self.account_info(&who.account).await?)),
            Route::Export => self.export(&who).await,
            Route::Import => self.import(&who, &request).await,
            Route::ChangePassphrase => self.flows.change_passphrase(accounts, &who.account, &request).await,
            Route::DeleteAccount => {
                store.delete_account(id).await?.durable().await?;
                // Intray declares `Verb 'DELETE 204` for the account's deletion
                Ok(Reply::no_content())
            }
            Route::AddAccessKey => self.flows.add_access_key(accounts, &who, &request).await,
            Route::ListAccessKeys => self.flows.access_keys(accounts, &who).await,
            Route::GetAccessKey(key) => self.flows.access_key(accounts, &who, path_uuid(&key)?).await,
            Route::DeleteAccessKey(key) => self.flows.delete_access_key(accounts, &who, path_uuid(&key)?).await,
            Route::AddText => self.add_text(&who, &request).await,
            Route::AddItem => self.add_item(&who, &request).await,
            Route::GetItem(item) => {
                let item = path_uuid(&item)?;
                let found = store
                    .item(id, item)
                    .await?
                    .ok_or_else(|| ApiError::not_found("item not found"))?;
                Ok(Reply::json(&found))
            }
            Route::DeleteItem(item) => {
                let item = path_uuid(&item)?;
                store.delete_item(id, item).await?.durable().await?;
                Ok(Reply::empty())
            }
            Route::Items => {
                // checked, then sent while it is read from the store (one item in memory
                // at a time): an undecodable item is a JSON 500
                let items = self.ctx.store.inbox.items.clone();
                Reply::json_pages(move |after: Option<Uuid>| -> Page<InboxItem, Uuid> {
                    let items = items.clone();
                    Box::pin(async move {
                        let page = items.items_page(id, after, LIST_PAGE).await?;
                        let next = match page.len() == LIST_PAGE {
                            true => page.last().map(|i| i.id),
                            false => None,
                        };
                        Ok((page, next))
                    })
                })
                .await
            }
            Route::Uuids => Ok(Reply::json(&store.item_ids(id).await?)),
            Route::ShowItem => Ok(Reply::json(&store.first_item(id).await?)),
            Route::Size => Ok(Reply::json(&store.count(id).await?)),
            Route::Sync => {
                let request = SyncRequest::parse(request.json()?)?;
                let cap = self
                    .ctx
                    .payments
                    .cap_of(&*self.ctx.store.inbox.accounts, &who.account)
                    .await?;
                // the answer of the last call of the planner (the store may retry it)
                let mut answer = None;
                let synced = store
                    .sync(id, &mut |items| {
                        let (response, changes) = sync::plan(items, request.clone(), cap, wire::new_uuid);
                        answer = Some(response);
                        changes
                    })
                    .await?;
                synced.durable().await?;
                let answer = answer.ok_or_else(|| ApiError::internal("the sync was not planned"))?;
                Ok(Reply::json(&answer))
            }
            Route::AdminStats => self.admin_stats().await,
            Route::AdminAccounts => {
                self.ctx
                    .admin_accounts(ServiceKind::Inbox, |a| async move { self.account_info(&a).await })
                    .await
            }
            Route::AdminDeleteAccount(victim) => {
                let victim = path_uuid(&victim)?;
                if !store.delete_account(victim).await?.durable().await? {
                    return Err(ApiError::not_found("account not found"));
                }
                Ok(Reply::no_content())
            }
            Route::Root
            | Route::Health
            | Route::OpenApi
            | Route::Register
            | Route::Login
            | Route::Pricing
            | Route::App(_)
            | Route::AppConfig
            | Route::AppToken => Err(ApiError::internal("unreachable route")),
        }
    }

    /// `GET /account/export`: items, and access keys without their secrets.
    async fn export(&self, who: &Principal) -> Result<Reply, ApiError> {
        require_all(who, super::routes::also_needs(&Route::Export))?;
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
    async fn import(&self, who: &Principal, request: &Request) -> Result<Reply, ApiError> {
        let body = crate::http::body::json_object(request)?;
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
            .map_err(|e| ApiError::internal(format!("the import stopped: {e}")))??;
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
            ImportOutcome::LimitReached => Err(ApiError::new(
                warp::http::StatusCode::PAYMENT_REQUIRED,
                "the import would go over the free item limit: nothing was imported",
            )),
            ImportOutcome::Interrupted => Err(ApiError::internal(
                "the database failed during the import: nothing of it is kept (the part already written is \
                 undone when the server restarts); import the same file again then",
            )),
        }
    }

    async fn account_info(&self, account: &Account) -> Result<Value, ApiError> {
        let count = self.ctx.store.inbox.count(account.id).await?;
        self.ctx
            .account_info(ServiceKind::Inbox, account, &[("count", count)])
            .await
    }

    /// `POST /inbox/item`: the item's contents as JSON (inbox.md §3.5).
    async fn add_item(&self, who: &Principal, request: &Request) -> Result<Reply, ApiError> {
        let contents: ContentsIn = request.json()?;
        let (kind, data) = contents.validate()?;
        self.store_item(who, request, kind, data).await
    }

    /// `POST /inbox/text`: the body is the text of a new item, whatever its content type
    /// (a phone shortcut, `curl --data-binary 'buy milk'`), without its trailing line break.
    /// `POST /inbox/item` keeps requiring JSON, as Intray's clients expect.
    async fn add_text(&self, who: &Principal, request: &Request) -> Result<Reply, ApiError> {
        let mut text: &[u8] = &request.body;
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
        self.store_item(who, request, ItemType::Text, text.to_vec()).await
    }

    async fn store_item(
        &self,
        who: &Principal,
        request: &Request,
        kind: ItemType,
        data: Vec<u8>,
    ) -> Result<Reply, ApiError> {
        let idempotency = match request.header("idempotency-key") {
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
            AddOutcome::LimitReached => Err(ApiError::new(
                warp::http::StatusCode::PAYMENT_REQUIRED,
                "the free item limit is reached",
            )),
        }
    }

    async fn admin_stats(&self) -> Result<Reply, ApiError> {
        let all = self.ctx.store.inbox.accounts.all().await?;
        let now = Timestamp::now();
        let mut items = 0u64;
        for a in &all {
            items += self.ctx.store.inbox.count(a.id).await?;
        }
        Ok(Reply::json(&json!({
            "accounts": all.len(),
            "items": items,
            "active-users": crate::domain::account::active_users(&all, now),
            "subscribed-users": self.ctx.payments.subscribers(&*self.ctx.store.inbox.accounts, &all).await?,
        })))
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
