//! The scheduler's handlers of its own routes (`routes.rs`), called once the caller is
//! admitted from the headers and the body read: path → parse → call the store → await the
//! write's receipt (durable) → wake the workers that have new work → answer.

use super::{resend_limit, Scheduler};
use crate::domain::email::{EmailKind, QueuedEmail};
use crate::domain::scheduler::models::{
    is_valid_email, normalise_inbox_url, subscribe, ScheduledItem, Tickle, TimeZoneSetting, Trigger, TriggerKind,
    TriggeredItem,
};
use crate::domain::scheduler::push::{
    normalise_webhook_url, EndpointScheme, PushSubscription, WebhookFormat, PUSH_TRIGGERS_MAX,
};
use crate::domain::scheduler::schedule::{self, Zone};
use crate::domain::scheduler::sync::{self, SyncRequest};
use crate::domain::secrets;
use crate::domain::transfer;
use crate::domain::wire::{self, Timestamp};
use crate::domain::worker::Worker;
use crate::http::routes::Call;
use crate::http::{parse_json, path_uuid, wants_html, ApiError, Page, Reply, Request};
use crate::shell::Shell;
use crate::store::scheduler::{AddOutcome, ImportOutcome};
use crate::store::PageSize;
use serde_json::{json, Value};
use uuid::Uuid;
use warp::http::StatusCode;

/// Where a listing of scheduled, then triggered items goes on: after which item of which.
#[derive(Clone, Copy)]
enum Listed {
    Scheduled(Option<Uuid>),
    Triggered(Option<Uuid>),
}

impl Shell<Scheduler> {
    pub(super) async fn loopers(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(&self.ctx.workers.to_json()))
    }

    pub(super) async fn push_key(&self, _call: Call) -> Result<Reply, ApiError> {
        Ok(Reply::json(
            &json!({"publicKey": self.ctx.tokens.push_key().public_key()}),
        ))
    }

    pub(super) async fn get_settings(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        Ok(Reply::json(&self.ctx.store.scheduler.settings(me).await?.to_json()))
    }

    pub(super) async fn put_settings(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let setting = TimeZoneSetting::parse(&call.request.json::<Value>()?)?;
        let zone = Zone::of(&setting);
        self.ctx
            .store
            .scheduler
            .put_settings(me, &setting, &|item: &ScheduledItem| schedule::due(&item.tickle, &zone))
            .await?
            .durable()
            .await?;
        self.ctx.workers.wake(Worker::Triggerer);
        Ok(Reply::empty())
    }

    pub(super) async fn item(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let id = call.uuid("id")?;
        let store = &self.ctx.store.scheduler;
        if let Some(item) = store.scheduled(me, id).await? {
            return Ok(Reply::json(&item.to_json()));
        }
        let item = store
            .triggered(me, id)
            .await?
            .ok_or_else(|| ApiError::not_found("item not found"))?;
        Ok(Reply::json(&item.to_json()))
    }

    pub(super) async fn edit_item(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let id = call.uuid("id")?;
        let tickle = Tickle::parse(&call.request.json::<Value>()?)?;
        let edited = self
            .ctx
            .store
            .scheduler
            .edit_scheduled(me, id, &mut |mut item: ScheduledItem, setting: &TimeZoneSetting| {
                item.tickle = tickle.clone();
                item.server_time += 1;
                let due = schedule::due(&item.tickle, &Zone::of(setting));
                (item, due)
            })
            .await?;
        if !edited.durable().await? {
            return Err(ApiError::not_found("no such scheduled item"));
        }
        self.ctx.workers.wake(Worker::Triggerer);
        Ok(Reply::empty())
    }

    pub(super) async fn delete_item(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let id = call.uuid("id")?;
        self.ctx.store.scheduler.delete_item(me, id).await?.durable().await?;
        Ok(Reply::empty())
    }

    pub(super) async fn delete_triggereds(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        self.ctx
            .store
            .scheduler
            .delete_triggered_items(me)
            .await?
            .durable()
            .await?;
        Ok(Reply::empty())
    }

    pub(super) async fn retry(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        call.request.require_json()?;
        let ids: Vec<String> = parse_json(&call.request.body)?;
        let ids = ids.iter().map(|s| path_uuid(s)).collect::<Result<Vec<_>, _>>()?;
        let retried = self.ctx.store.scheduler.deliveries.retry_failed(me, &ids).await?;
        let changed = retried.changed();
        retried.durable().await?;
        if changed {
            self.ctx.workers.wake(Worker::TriggeredInboxItemSender);
            self.ctx.workers.wake(Worker::Emailer);
        }
        Ok(Reply::empty())
    }

    pub(super) async fn items(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let (scheduled, triggered) = match item_filter(&call.request.query)? {
            Filter::All => (true, true),
            Filter::OnlyUntriggered => (true, false),
            Filter::OnlyTriggered => (false, true),
        };
        // checked, then sent while it is read from the store (one item in memory at a
        // time): an undecodable item is a JSON 500
        let items = self.ctx.store.scheduler.items.clone();
        let first = match scheduled {
            true => Listed::Scheduled(None),
            false => Listed::Triggered(None),
        };
        Reply::json_pages(move |at: Option<Listed>| -> Page<Value, Listed> {
            let items = items.clone();
            Box::pin(async move {
                match at.unwrap_or(first) {
                    Listed::Scheduled(after) => {
                        let page = items.scheduled_page(me, after, PageSize::LISTING).await?;
                        let next = match (PageSize::LISTING.is_full(&page), page.last()) {
                            (true, Some(last)) => Some(Listed::Scheduled(Some(last.id))),
                            _ if triggered => Some(Listed::Triggered(None)),
                            _ => None,
                        };
                        Ok((page.iter().map(ScheduledItem::to_json).collect(), next))
                    }
                    Listed::Triggered(after) => {
                        let page = items.triggered_page(me, after, PageSize::LISTING).await?;
                        let next = match (PageSize::LISTING.is_full(&page), page.last()) {
                            (true, Some(last)) => Some(Listed::Triggered(Some(last.id))),
                            _ => None,
                        };
                        Ok((page.iter().map(TriggeredItem::to_json).collect(), next))
                    }
                }
            })
        })
        .await
    }

    pub(super) async fn uuids(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let items = self.ctx.store.scheduler.scheduled_items(me).await?;
        let ids: Vec<Uuid> = items.iter().map(|i| i.id).collect();
        Ok(Reply::json(&ids))
    }

    pub(super) async fn sync(&self, call: Call) -> Result<Reply, ApiError> {
        let account = &call.who()?.account;
        let me = account.id;
        let request = SyncRequest::parse(&call.request.json::<Value>()?)?;
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.scheduler.accounts, account)
            .await?;
        // the answer of the last call of the planner (the store may retry it)
        let mut answer = None;
        let synced = self
            .ctx
            .store
            .scheduler
            .sync(me, &mut |items: &[ScheduledItem], setting: &TimeZoneSetting| {
                let zone = Zone::of(setting);
                let request = request.clone();
                let (response, changes) =
                    sync::plan(me, items, request, cap, wire::new_uuid, |t| schedule::due(t, &zone));
                answer = Some(response);
                changes
            })
            .await?;
        let changed = synced.changed();
        synced.durable().await?;
        let response = answer.ok_or_else(|| ApiError::internal("the sync was not planned"))?;
        if changed {
            self.ctx.workers.wake(Worker::Triggerer);
        }
        Ok(Reply::json(&response))
    }

    pub(super) async fn triggers(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let triggers: Vec<Value> = self
            .ctx
            .store
            .scheduler
            .triggers
            .triggers(me)
            .await?
            .iter()
            .map(Trigger::to_json)
            .collect();
        Ok(Reply::json(&triggers))
    }

    pub(super) async fn trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let id = call.uuid("id")?;
        let trigger = self
            .ctx
            .store
            .scheduler
            .triggers
            .trigger(me, id)
            .await?
            .ok_or_else(|| ApiError::not_found("trigger not found"))?;
        Ok(Reply::json(&trigger.to_json()))
    }

    pub(super) async fn delete_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let me = call.who()?.account.id;
        let id = call.uuid("id")?;
        let triggers = &self.ctx.store.scheduler.triggers;
        triggers.delete_trigger(me, id).await?.durable().await?;
        Ok(Reply::empty())
    }

    /// `POST /trigger/email/verify/:id/:key`.
    pub(super) async fn verify_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let (id, key) = id_and_key(&call);
        self.verify(call.who()?.account.id, id, key).await
    }

    /// The page of the link in the verification e-mail.
    pub(super) async fn verify_page(&self, call: Call) -> Result<Reply, ApiError> {
        let (id, key) = id_and_key(&call);
        self.verification_page(&call.request, id, key, false).await
    }

    /// The button of that page.
    pub(super) async fn verify_by_link(&self, call: Call) -> Result<Reply, ApiError> {
        let (id, key) = id_and_key(&call);
        self.verification_page(&call.request, id, key, true).await
    }

    /// `GET /account/export`: settings, scheduled and triggered items, triggers (an inbox
    /// trigger with its access key: docs/backup.md), access keys without their secrets.
    pub(super) async fn export(&self, call: Call) -> Result<Reply, ApiError> {
        let who = call.who()?;
        let store = &self.ctx.store.scheduler;
        let me = who.account.id;
        let keys = self.flows.exported_keys(&*store.accounts, who).await?;
        Ok(Reply::json(&transfer::scheduler_export(
            &who.account.username,
            &store.settings(me).await?,
            &store.scheduled_items(me).await?,
            &store.triggered_items(me).await?,
            &store.triggers.triggers(me).await?,
            keys,
        )))
    }

    /// `POST /account/import`: what the account does not have yet, all or nothing. As for
    /// the inbox (src/inbox/handlers.rs): the body is read twice, an entry at a time (first
    /// checked, ids kept; then written in bounded batches once the ids are checked against
    /// the store), one import at a time in the process; `"dry-run": true` stops after the
    /// checks.
    pub(super) async fn import(&self, call: Call) -> Result<Reply, ApiError> {
        use crate::domain::transfer::{ReadError, SchedulerEntry};
        use crate::store::scheduler::ImportIds;
        use crate::store::{StoreError, Written};
        let who = call.who()?;
        let body = crate::http::body::json_object(&call.request)?;
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.scheduler.accounts, &who.account)
            .await?;
        let ctx = self.ctx.clone();
        let account = who.account.id;
        let runtime = tokio::runtime::Handle::current();
        let work = move || -> Result<(transfer::SchedulerHead, ImportOutcome), ApiError> {
            let store = &ctx.store.scheduler;
            let mut ids = ImportIds::default();
            let head = transfer::read_scheduler_import(&body, account, |entry| {
                ids.note(&entry);
                Ok::<(), std::convert::Infallible>(())
            })
            .map_err(|e| match e {
                ReadError::Invalid(e) => ApiError::from(e),
                ReadError::Stopped(never) => match never {},
            })?;
            if head.dry_run {
                let outcome = store.check_import(account, &ids, cap, head.new_before)?;
                return Ok((head, outcome));
            }
            let due_of =
                |item: &ScheduledItem, setting: &TimeZoneSetting| schedule::due(&item.tickle, &Zone::of(setting));
            let wait = |w: Written<()>| runtime.block_on(w.durable());
            let mut write = |each: &mut dyn FnMut(SchedulerEntry) -> Result<(), StoreError>| {
                transfer::read_scheduler_import(&body, account, each)
                    .map(|_| ())
                    .map_err(|e| match e {
                        ReadError::Stopped(e) => e,
                        ReadError::Invalid(e) => StoreError::Codec(format!("the import read differently: {e}")),
                    })
            };
            let outcome = store.import(account, &ids, head.settings.as_ref(), &due_of, cap, &mut write, &wait)?;
            Ok((head, outcome))
        };
        let (head, outcome) = tokio::task::spawn_blocking(work)
            .await
            .map_err(|e| ApiError::internal(format!("the import stopped: {e}")).with_source(e))??;
        match outcome {
            ImportOutcome::Imported(done) if head.dry_run => Ok(Reply::json(&json!({
                "checked": true,
                "scheduled-new": done.scheduled_added,
                "triggered-new": done.triggered_added,
                "triggers-new": done.triggers_added,
            }))),
            ImportOutcome::Imported(done) => {
                if done.scheduled_added > 0 {
                    // imported items may be due already
                    self.ctx.workers.wake(Worker::Triggerer);
                }
                Ok(Reply::json(&json!({
                    "settings-changed": done.settings_changed,
                    "scheduled-added": done.scheduled_added,
                    "scheduled-kept": done.scheduled_kept,
                    "triggered-added": done.triggered_added,
                    "triggered-kept": done.triggered_kept,
                    "triggers-added": done.triggers_added,
                    "triggers-kept": done.triggers_kept,
                    "email-triggers-to-verify": done.email_triggers,
                    "access-keys-to-recreate": head.keys_to_recreate,
                })))
            }
            ImportOutcome::LimitReached => Err(ApiError::payment_required(
                "the import would go over the free item limit: nothing was imported",
            )),
            ImportOutcome::Interrupted => Err(ApiError::internal(
                "the database failed during the import: nothing of it is kept (the part already written is \
                 undone when the server restarts); import the same file again then",
            )),
        }
    }

    pub(super) async fn add_item(&self, call: Call) -> Result<Reply, ApiError> {
        let account = &call.who()?.account;
        let tickle = Tickle::parse(&call.request.json::<Value>()?)?;
        let item = ScheduledItem {
            id: wire::new_uuid(),
            owner: account.id,
            tickle,
            created: Timestamp::now(),
            server_time: 0,
        };
        let cap = self
            .ctx
            .payments
            .cap_of(&*self.ctx.store.scheduler.accounts, account)
            .await?;
        // the due instant under the zone of the moment of the write (read under the lock)
        let due_of = |setting: &TimeZoneSetting| schedule::due(&item.tickle, &Zone::of(setting));
        match self
            .ctx
            .store
            .scheduler
            .add_scheduled(&item, &due_of, cap)
            .await?
            .durable()
            .await?
        {
            AddOutcome::Added => {
                self.ctx.workers.wake(Worker::Triggerer);
                Ok(Reply::json(&item.id))
            }
            AddOutcome::LimitReached => Err(ApiError::payment_required("the free item limit is reached")),
        }
    }

    pub(super) async fn add_email_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let owner = call.who()?.account.id;
        let body: Value = call.request.json()?;
        let address = match body.get("addEmailTrigger") {
            Some(Value::String(a)) if is_valid_email(a) => a.clone(),
            _ => {
                return Err(ApiError::bad_request(
                    "addEmailTrigger must be an e-mail address local@domain",
                ))
            }
        };
        let unverified = self
            .ctx
            .store
            .scheduler
            .triggers
            .triggers(owner)
            .await?
            .iter()
            .filter(|t| matches!(t.kind, TriggerKind::Email { verified: false, .. }))
            .count();
        if unverified >= MOST_UNVERIFIED_EMAIL_TRIGGERS {
            return Err(ApiError::too_many(
                resend_limit::WINDOW.as_secs(),
                format!(
                    "at most {MOST_UNVERIFIED_EMAIL_TRIGGERS} unverified e-mail triggers per account: \
                     verify or delete one first"
                ),
            ));
        }
        let counted = refusal(self.own.verifications.first(owner, &address).await?)?;
        let (key, key_digest) = secrets::new_secret();
        let trigger = Trigger {
            id: wire::new_uuid(),
            owner,
            created: Timestamp::now(),
            kind: TriggerKind::Email {
                address: address.clone(),
                verified: false,
                key_digest,
            },
        };
        let email = verification_email(owner, trigger.id, address.clone(), key);
        let added = match self
            .ctx
            .store
            .scheduler
            .triggers
            .add_trigger(&trigger, Some(email))
            .await
        {
            Ok(added) => added.durable().await,
            Err(e) => Err(e),
        };
        if !matches!(added, Ok(true)) {
            self.own.verifications.give_back(&counted).await;
            added?;
            return Err(ApiError::unauthorized("the account no longer exists"));
        }
        self.ctx.workers.wake(Worker::VerificationEmailConverter);
        Ok(Reply::json(&trigger.id))
    }

    async fn verify(&self, owner: Uuid, id: &str, key: &str) -> Result<Reply, ApiError> {
        let id = path_uuid(id)?;
        if !secrets::looks_like_secret(key) {
            return Err(ApiError::bad_request("the verification key must be 32 hex digits"));
        }
        let given = secrets::digest(key);
        let trigger = self.ctx.store.scheduler.triggers.trigger(owner, id).await?;
        let Some(TriggerKind::Email { key_digest, .. }) = trigger.map(|t| t.kind) else {
            return Err(ApiError::not_found("no such e-mail trigger"));
        };
        if !secrets::digests_equal(&key_digest, &given) {
            return Err(ApiError::bad_request("wrong verification key"));
        }
        let updated = self
            .ctx
            .store
            .scheduler
            .triggers
            .update_trigger(owner, id, &mut |mut t: Trigger| match &mut t.kind {
                TriggerKind::Email {
                    verified, key_digest, ..
                } if secrets::digests_equal(key_digest, &given) => {
                    *verified = true;
                    Some((t, None))
                }
                _ => None,
            })
            .await?;
        if !updated.durable().await? {
            return Err(ApiError::bad_request("wrong verification key"));
        }
        Ok(Reply::empty())
    }

    /// The link of the verification e-mail: `GET` shows the address and a button, whose
    /// `POST` confirms it. The key in the link is the credential (no token: the person who
    /// reads the mailbox confirms it), and the confirmation takes a `POST` so that a mail
    /// scanner that fetches links cannot confirm on its own. Browsers get pages; other
    /// clients the usual JSON errors and an empty 200.
    async fn verification_page(
        &self,
        request: &Request,
        id: &str,
        key: &str,
        confirm: bool,
    ) -> Result<Reply, ApiError> {
        let (host, _) = crate::mail::web_host_and_base(&self.ctx.settings);
        let outcome = self.by_link(id, key, confirm).await;
        if !wants_html(request) {
            return outcome.map(|_| Reply::empty());
        }
        Ok(match outcome {
            Ok((address, true)) if confirm => Reply::simple_page(
                StatusCode::OK,
                "Address confirmed",
                &[format!("{address} now receives the reminders of its scheduler account at {host}.")],
                None,
            ),
            Ok((address, true)) => Reply::simple_page(
                StatusCode::OK,
                "Already confirmed",
                &[format!("{address} already receives the reminders of its scheduler account at {host}.")],
                None,
            ),
            Ok((address, false)) => Reply::simple_page(
                StatusCode::OK,
                "Confirm this address",
                &[
                    format!("{address} was added as an e-mail trigger of a scheduler account at {host}: reminders of that account will be sent to it once it is confirmed."),
                    "If you did not expect this, close this page: nothing is sent to the address until it is confirmed.".into(),
                ],
                Some("<form method=\"post\"><button type=\"submit\">Confirm this address</button></form>\n"),
            ),
            Err(e) => Reply::simple_page(e.status(), "This link does not work", &[e.message], None),
        })
    }

    /// The e-mail trigger of a verification link and whether it is verified (after
    /// confirming it when `confirm`).
    async fn by_link(&self, id: &str, key: &str, confirm: bool) -> Result<(String, bool), ApiError> {
        let trigger = path_uuid(id)?;
        if !secrets::looks_like_secret(key) {
            return Err(ApiError::bad_request("the verification key must be 32 hex digits"));
        }
        let store = &self.ctx.store.scheduler;
        let not_found = || ApiError::not_found("no such e-mail trigger: it may have been deleted");
        let owner = store.triggers.trigger_owner(trigger).await?.ok_or_else(not_found)?;
        let Some(TriggerKind::Email {
            address,
            verified,
            key_digest,
        }) = store.triggers.trigger(owner, trigger).await?.map(|t| t.kind)
        else {
            return Err(not_found());
        };
        if !secrets::digests_equal(&key_digest, &secrets::digest(key)) {
            return Err(ApiError::bad_request(
                "this is not the trigger's current key (a newer verification e-mail replaced it)",
            ));
        }
        if confirm && !verified {
            self.verify(owner, id, key).await?;
            return Ok((address, true));
        }
        Ok((address, verified))
    }

    pub(super) async fn resend(&self, call: Call) -> Result<Reply, ApiError> {
        let owner = call.who()?.account.id;
        let id = call.uuid("id")?;
        let address = match self
            .ctx
            .store
            .scheduler
            .triggers
            .trigger(owner, id)
            .await?
            .map(|t| t.kind)
        {
            Some(TriggerKind::Email {
                verified: false,
                address,
                ..
            }) => address,
            Some(TriggerKind::Email { verified: true, .. }) => {
                return Err(ApiError::bad_request("this e-mail trigger is already verified"))
            }
            _ => return Err(ApiError::not_found("no such e-mail trigger")),
        };
        let counted = refusal(self.own.verifications.resend(id, owner, &address).await?)?;
        let (key, digest) = secrets::new_secret();
        let updated = self
            .ctx
            .store
            .scheduler
            .triggers
            .update_trigger(owner, id, &mut |mut t: Trigger| match &mut t.kind {
                TriggerKind::Email {
                    verified: false,
                    key_digest,
                    address,
                } => {
                    *key_digest = digest;
                    let email = verification_email(owner, id, address.clone(), key.clone());
                    Some((t, Some(email)))
                }
                _ => None,
            })
            .await?;
        if !updated.durable().await? {
            self.own.verifications.give_back(&counted).await;
            return Err(ApiError::bad_request("this e-mail trigger is already verified"));
        }
        self.ctx.workers.wake(Worker::VerificationEmailConverter);
        Ok(Reply::empty())
    }

    pub(super) async fn add_inbox_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let owner = call.who()?.account.id;
        let body: Value = call.request.json()?;
        let field = |new: &str, old: &str| -> Option<String> {
            match body.get(new).or_else(|| body.get(old)) {
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            }
        };
        let url = field("addInboxTriggerUrl", "addIntrayTriggerUrl")
            .and_then(|u| normalise_inbox_url(&u))
            .ok_or_else(|| ApiError::bad_request("addInboxTriggerUrl must be an http(s) base URL"))?;
        let username = field("addInboxTriggerUsername", "addIntrayTriggerUsername")
            .filter(|u| wire::is_valid_username(u))
            .ok_or_else(|| ApiError::bad_request("addInboxTriggerUsername must be a valid username"))?;
        let access_key = field("addInboxTriggerAccessKey", "addIntrayTriggerAccessKey")
            .filter(|k| !k.is_empty() && k.len() % 2 == 0 && k.bytes().all(|c| c.is_ascii_hexdigit()))
            .ok_or_else(|| ApiError::bad_request("addInboxTriggerAccessKey must be an even-length hex string"))?
            .to_ascii_lowercase();
        if let Err(failure) = self.ctx.inbox_client.login(&url, &username, &access_key).await {
            // The same answer whatever the cause (refused, closed, silent, a 403 or 404 that
            // is not an inbox's, an address the policy refuses): the server is nobody's
            // network scanner. The operator's log has the cause.
            tracing::info!(account = %owner, "a new inbox trigger for {url} failed its login: {}", failure.reason);
            return Ok(Reply::json(
                &json!({"Left": format!("no working inbox service at {url}")}),
            ));
        }
        let trigger = Trigger {
            id: wire::new_uuid(),
            owner,
            created: Timestamp::now(),
            kind: TriggerKind::Inbox {
                url,
                username,
                access_key,
            },
        };
        self.store_trigger(&trigger).await?;
        Ok(Reply::json(&json!({"Right": trigger.id})))
    }

    /// Stores a new trigger (without an e-mail), durably; 401 when its account is gone.
    async fn store_trigger(&self, trigger: &Trigger) -> Result<(), ApiError> {
        let triggers = &self.ctx.store.scheduler.triggers;
        if !triggers.add_trigger(trigger, None).await?.durable().await? {
            return Err(ApiError::unauthorized("the account no longer exists"));
        }
        Ok(())
    }

    /// `POST /trigger/push` (§6.4): a browser's subscription, checked (an `http` endpoint
    /// only to loopback or private addresses the outbound policy allows), stored without
    /// contacting it; the same endpoint again renews its trigger; at most 20 per account.
    pub(super) async fn add_push_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let owner = call.who()?.account.id;
        let body: Value = call.request.json()?;
        let (subscription, scheme) = PushSubscription::parse(&body, crate::webpush::is_p256_point)?;
        if scheme == EndpointScheme::Http && !self.ctx.inbox_client.is_local(&subscription.endpoint).await {
            return Err(ApiError::bad_request(
                "the endpoint must be https (http only to a loopback or private address this server may reach)",
            ));
        }
        let new = Trigger {
            id: wire::new_uuid(),
            owner,
            created: Timestamp::now(),
            kind: TriggerKind::Push {
                subscription,
                expired: false,
            },
        };
        let mut decided = None;
        let stored = self
            .ctx
            .store
            .scheduler
            .triggers
            .add_or_renew_trigger(owner, &mut |triggers| {
                decided = subscribe(triggers, new.clone());
                decided.clone()
            })
            .await?
            .durable()
            .await?;
        match decided {
            Some(trigger) if stored => Ok(Reply::json(&trigger.id)),
            Some(_) => Err(ApiError::unauthorized("the account no longer exists")),
            None => Err(ApiError::too_many(
                60,
                format!("at most {PUSH_TRIGGERS_MAX} push triggers per account: delete one first"),
            )),
        }
    }

    /// `POST /trigger/webhook` (§6.5): the URL checked and stored, not contacted.
    pub(super) async fn add_webhook_trigger(&self, call: Call) -> Result<Reply, ApiError> {
        let owner = call.who()?.account.id;
        let body: Value = call.request.json()?;
        let url = match body.get("addWebhookTriggerUrl") {
            Some(Value::String(u)) => normalise_webhook_url(u),
            _ => None,
        }
        .ok_or_else(|| {
            ApiError::bad_request(
                "addWebhookTriggerUrl must be an http(s) URL of at most 2048 characters, without user info or fragment",
            )
        })?;
        let format = match body.get("addWebhookTriggerFormat") {
            None | Some(Value::Null) => Some(WebhookFormat::Text),
            Some(Value::String(f)) => WebhookFormat::parse(f),
            Some(_) => None,
        }
        .ok_or_else(|| ApiError::bad_request("addWebhookTriggerFormat must be \"text\" or \"json\""))?;
        let trigger = Trigger {
            id: wire::new_uuid(),
            owner,
            created: Timestamp::now(),
            kind: TriggerKind::Webhook { url, format },
        };
        self.store_trigger(&trigger).await?;
        Ok(Reply::json(&trigger.id))
    }
}

/// The `:id` and `:key` of a verification path.
fn id_and_key(call: &Call) -> (&str, &str) {
    (call.capture("id").unwrap_or(""), call.capture("key").unwrap_or(""))
}

fn verification_email(owner: Uuid, trigger: Uuid, to: String, key: String) -> QueuedEmail {
    QueuedEmail::new(owner, Some(trigger), EmailKind::Verification { to, key })
}

enum Filter {
    All,
    OnlyUntriggered,
    OnlyTriggered,
}

/// The `filter` query parameter of `GET /scheduler/items` (compared case-insensitively).
fn item_filter(query: &str) -> Result<Filter, ApiError> {
    let value = query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(k, _)| *k == "filter")
        .map(|(_, v)| wire::percent_decode(v, true));
    match value.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None | Some("") => Ok(Filter::All),
        Some("onlyuntriggered") => Ok(Filter::OnlyUntriggered),
        Some("onlytriggered") => Ok(Filter::OnlyTriggered),
        Some(other) => Err(ApiError::bad_request(format!("unknown filter {other:?}"))),
    }
}

/// Unverified e-mail triggers an account may have at once (each sent a verification e-mail).
const MOST_UNVERIFIED_EMAIL_TRIGGERS: usize = 5;

/// A refused verification e-mail as the 429 that says which limit, with `Retry-After`.
fn refusal<T>(counted: Result<T, resend_limit::Refused>) -> Result<T, ApiError> {
    use resend_limit::Refused;
    counted.map_err(|refused| {
        let (wait, what) = match refused {
            Refused::Resends(wait) => (
                wait,
                format!(
                    "at most {} verification e-mails per trigger and hour",
                    resend_limit::RESENDS
                ),
            ),
            Refused::ToAddress(wait) => (
                wait,
                format!(
                    "at most {} verification e-mails to one address a day",
                    resend_limit::PER_ADDRESS
                ),
            ),
            Refused::OfAccount(wait) => (
                wait,
                format!(
                    "at most {} verification e-mails per account a day",
                    resend_limit::PER_ACCOUNT
                ),
            ),
        };
        ApiError::too_many(wait, format!("{what}; try again in {wait} s"))
    })
}
