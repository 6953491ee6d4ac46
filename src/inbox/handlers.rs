//! Inbox handlers: credentials and permission from the headers (before the body is read),
//! then per route: path → parse → call the store → await the write's receipt (durable) →
//! answer.

use super::routes::{self, Access, Route};
use super::Inbox;
use crate::auth::flows::Grant;
use crate::domain::account::{AccessKey, Account, Principal, ServiceKind};
use crate::domain::inbox::models::{AddAccessKeyIn, ContentsIn, InboxItem, ItemType};
use crate::domain::inbox::sync::{self, SyncRequest};
use crate::domain::permissions::{Permission, Permissions};
use crate::domain::secrets;
use crate::domain::wire::{self, Timestamp};
use crate::http::{path_uuid, ApiError, Head, Reply, Request};
use crate::payments;
use crate::store::inbox::AddOutcome;
use serde_json::{json, Value};
use uuid::Uuid;

impl Inbox {
    /// Checks 3 and 4 of inbox.md §1.2: `None` for a public route, else the caller, who has
    /// the route's permission (and is an admin for `/admin/...`).
    pub(super) fn admit(&self, route: &Route, head: &Head) -> Result<Option<Principal>, ApiError> {
        match routes::access(route) {
            Access::Public if *route == Route::Register && !self.ctx.settings.registration_open => {
                Err(ApiError::registration_closed())
            }
            Access::Public => Ok(None),
            Access::Needs(permission) => {
                let who = self.credentials(head)?;
                self.require(&who, permission)?;
                Ok(Some(who))
            }
            Access::Admin(permission) => {
                let who = self.credentials(head)?;
                self.require_admin(&who, permission)?;
                Ok(Some(who))
            }
        }
    }

    pub(super) async fn dispatch(
        &self,
        route: Route,
        caller: Option<Principal>,
        request: Request,
    ) -> Result<Reply, ApiError> {
        let accounts = &self.ctx.store.inbox.accounts;
        match route {
            Route::Root => return Ok(Reply::html(super::API_PAGE)),
            Route::Register => return self.flows.register(accounts, &request).await,
            Route::Login => {
                return self
                    .flows
                    .login(accounts, &request, |a, secret| self.key_login(a, secret))
                    .await
            }
            Route::Pricing => return Ok(Reply::json(&payments::pricing(&self.ctx.settings))),
            _ => {}
        }
        let Some(who) = caller else {
            return Err(ApiError::internal("a protected route without a caller"));
        };
        let store = &self.ctx.store.inbox;
        let id = who.account.id;
        match route {
            Route::Permissions => Ok(Reply::json(&who.permissions.names())),
            Route::GetAccount => Ok(Reply::json(&self.account_info(&who.account).await?)),
            Route::ChangePassphrase => self.flows.change_passphrase(accounts, &who.account, &request).await,
            Route::DeleteAccount => {
                store.delete_account(id)?.durable().await?;
                Ok(Reply::empty())
            }
            Route::AddAccessKey => self.add_access_key(&who, &request).await,
            Route::ListAccessKeys => {
                let keys: Vec<Value> = store.access_keys(id)?.iter().map(key_info).collect();
                Ok(Reply::json(&keys))
            }
            Route::GetAccessKey(key) => {
                let key = path_uuid(&key)?;
                let found = store
                    .access_key(id, key)?
                    .ok_or_else(|| ApiError::not_found("access key not found"))?;
                Ok(Reply::json(&key_info(&found)))
            }
            Route::DeleteAccessKey(key) => {
                let key = path_uuid(&key)?;
                store.delete_access_key(id, key)?.durable().await?;
                Ok(Reply::empty())
            }
            Route::AddText => self.add_text(&who, &request).await,
            Route::AddItem => self.add_item(&who, &request).await,
            Route::GetItem(item) => {
                let item = path_uuid(&item)?;
                let found = store
                    .item(id, item)?
                    .ok_or_else(|| ApiError::not_found("item not found"))?;
                Ok(Reply::json(&found))
            }
            Route::DeleteItem(item) => {
                let item = path_uuid(&item)?;
                store.delete_item(id, item)?.durable().await?;
                Ok(Reply::empty())
            }
            Route::Items => {
                // sent while it is read from the store: one item in memory at a time
                let items = store.item_scan(id).map(|item| Ok(item?));
                Ok(Reply::json_array(items))
            }
            Route::Uuids => Ok(Reply::json(&store.item_ids(id)?)),
            Route::ShowItem => Ok(Reply::json(&store.first_item(id)?)),
            Route::Size => Ok(Reply::json(&store.count(id)?)),
            Route::Sync => {
                let request = SyncRequest::parse(request.json()?)?;
                let cap = self
                    .ctx
                    .payments
                    .cap_of(&self.ctx.store.inbox.accounts, &who.account)
                    .await?;
                let synced = store.sync(id, |items| sync::plan(items, request, cap, wire::new_uuid))?;
                Ok(Reply::json(&synced.durable().await?))
            }
            Route::AdminStats => self.admin_stats().await,
            Route::AdminAccounts => {
                self.ctx
                    .admin_accounts(ServiceKind::Inbox, |a| async move { self.account_info(&a).await })
                    .await
            }
            Route::AdminDeleteAccount(victim) => {
                let victim = path_uuid(&victim)?;
                if !store.delete_account(victim)?.durable().await? {
                    return Err(ApiError::not_found("account not found"));
                }
                Ok(Reply::empty())
            }
            Route::Root | Route::Register | Route::Login | Route::Pricing => {
                Err(ApiError::internal("unreachable route"))
            }
        }
    }

    /// A bearer token, else the `Username` + `Access-Key` header pair (inbox.md §2.4–2.5).
    fn credentials(&self, request: &Head) -> Result<Principal, ApiError> {
        let accounts = &self.ctx.store.inbox.accounts;
        if let Some((account, claims)) = self.flows.bearer(accounts, request)? {
            if let Some(key) = claims.key {
                if self.ctx.store.inbox.access_key(account.id, key)?.is_none() {
                    return Err(ApiError::unauthorized("the access key of this token was deleted"));
                }
            }
            return Ok(Principal {
                account,
                permissions: claims.perms,
                key: claims.key,
            });
        }
        let missing =
            || ApiError::unauthorized("credentials required: a bearer token or the Username and Access-Key headers");
        let (Some(name), Some(secret)) = (request.header("username"), request.header("access-key")) else {
            return Err(missing());
        };
        let name = header_text(name.as_bytes());
        let secret = std::str::from_utf8(secret.as_bytes()).map_err(|_| missing())?;
        let account = accounts.by_username(&name)?.ok_or_else(missing)?;
        let (_, key) = self.find_key(&account, secret)?.ok_or_else(missing)?;
        Ok(Principal {
            account,
            permissions: key.permissions,
            key: Some(key.id),
        })
    }

    /// The account's own access key whose secret is `secret`.
    fn find_key(&self, account: &Account, secret: &str) -> Result<Option<(Uuid, AccessKey)>, ApiError> {
        if !secrets::looks_like_secret(secret) {
            return Ok(None);
        }
        let digest = secrets::digest(secret);
        Ok(self
            .ctx
            .store
            .inbox
            .access_key_by_digest(&digest)?
            .filter(|(owner, key)| *owner == account.id && secrets::digests_equal(&key.digest, &digest)))
    }

    fn key_login(&self, account: &Account, secret: &str) -> Result<Option<Grant>, ApiError> {
        Ok(self.find_key(account, secret)?.map(|(_, key)| Grant {
            permissions: key.permissions,
            key: Some(key.id),
        }))
    }

    fn require(&self, who: &Principal, permission: Permission) -> Result<(), ApiError> {
        if who.permissions.contains(permission) {
            Ok(())
        } else {
            Err(ApiError::unauthorized(format!(
                "these credentials lack {}",
                permission.name()
            )))
        }
    }

    fn require_admin(&self, who: &Principal, permission: Permission) -> Result<(), ApiError> {
        self.require(who, permission)?;
        if self.flows.is_admin(&who.account) {
            Ok(())
        } else {
            Err(ApiError::unauthorized("admins only"))
        }
    }

    async fn account_info(&self, account: &Account) -> Result<Value, ApiError> {
        let count = self.ctx.store.inbox.count(account.id)?;
        self.ctx
            .account_info(ServiceKind::Inbox, account, &[("count", count)])
            .await
    }

    async fn add_access_key(&self, who: &Principal, request: &Request) -> Result<Reply, ApiError> {
        let body: AddAccessKeyIn = request.json()?;
        let permissions = Permissions::parse(body.permissions.iter().map(String::as_str))
            .map_err(|bad| ApiError::bad_request(format!("unknown permission {bad:?}")))?;
        if !permissions.is_subset_of(who.permissions) {
            return Err(ApiError::unauthorized(
                "an access key cannot have permissions its creator lacks",
            ));
        }
        let (secret, digest) = secrets::new_secret();
        let key = AccessKey {
            id: wire::new_uuid(),
            name: body.name,
            created: Timestamp::now(),
            seq: self.ctx.store.inbox.next_key_seq()?,
            permissions,
            digest,
        };
        if !self
            .ctx
            .store
            .inbox
            .add_access_key(who.account.id, &key)?
            .durable()
            .await?
        {
            return Err(ApiError::unauthorized("the account no longer exists"));
        }
        Ok(Reply::json(&json!({
            "accessKeyCreatedKey": secret,
            "accessKeyCreatedCreatedTimestamp": key.created.to_string(),
            "accessKeyCreatedUUID": key.id,
        })))
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
            .cap_of(&self.ctx.store.inbox.accounts, &who.account)
            .await?;
        // a repeated key may name an item whose first request is still being flushed: its
        // receipt waits for that flush as well
        let added = self.ctx.store.inbox.add_item(who.account.id, &item, idempotency, cap)?;
        match added.durable().await? {
            AddOutcome::Added(id) | AddOutcome::Repeated(id) => Ok(Reply::json(&id)),
            AddOutcome::LimitReached => Err(ApiError::new(
                warp::http::StatusCode::PAYMENT_REQUIRED,
                "the free item limit is reached",
            )),
        }
    }

    async fn admin_stats(&self) -> Result<Reply, ApiError> {
        let all = self.ctx.store.inbox.accounts.all()?;
        let now = Timestamp::now();
        let mut items = 0u64;
        for a in &all {
            items += self.ctx.store.inbox.count(a.id)?;
        }
        Ok(Reply::json(&json!({
            "accounts": all.len(),
            "items": items,
            "active-users": crate::domain::account::active_users(&all, now),
            "subscribed-users": self.ctx.payments.subscribers(&self.ctx.store.inbox.accounts, &all).await?,
        })))
    }
}

fn key_info(key: &AccessKey) -> Value {
    json!({"uuid": key.id, "name": key.name, "created": key.created.to_string(), "permissions": key.permissions.names()})
}

/// A header value as text: UTF-8, else ISO-8859-1.
fn header_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|b| *b as char).collect(),
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
