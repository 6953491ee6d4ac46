//! Registration, login, passphrase change and bearer-token checks, shared by both services
//! (each with its own accounts, rate limiter and token audience).

use super::{passwords, Claims, LoginLimiter, RegistrationLimiter, TokenKeys};
use crate::config::Settings;
use crate::domain::account::{
    AccessKey, Account, KeySecret, NewPassword, NewUsername, PasswordHash, Principal, ServiceKind,
};
use crate::domain::permissions::{Access, Permission, Permissions, Table};
use crate::domain::secrets;
use crate::domain::wire::{self, Timestamp};
use crate::http::{ApiError, Head, Reply, Request};
use crate::metrics::Metrics;
use crate::store::throttles::Throttles;
use crate::store::{Accounts, Registration};
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::Arc;
use uuid::Uuid;
use warp::http::header::{HeaderValue, AUTHORIZATION, SET_COOKIE};

#[derive(Deserialize)]
struct RegisterIn {
    name: String,
    password: String,
}

#[derive(Deserialize)]
struct LoginIn {
    username: String,
    password: String,
}

#[derive(Deserialize)]
struct ChangePassphraseIn {
    #[serde(rename = "old-passphrase")]
    old: String,
    #[serde(rename = "new-passphrase")]
    new: String,
}

/// What a successful login grants.
pub struct Grant {
    pub permissions: Permissions,
    pub key: Option<Uuid>,
}

/// The account flows of one service.
pub struct AccountFlows {
    /// The service whose accounts these are (the tokens' audience).
    pub service: ServiceKind,
    pub settings: Arc<Settings>,
    pub tokens: Arc<TokenKeys>,
    limiter: LoginLimiter,
    registrations: RegistrationLimiter,
    decoy: passwords::Decoy,
    /// Counts the attempts the throttles refuse.
    metrics: Arc<Metrics>,
    /// The other service's accounts: a person's account of the same name there follows a
    /// passphrase change here when the old passphrase opens it too (spec README decision 18).
    twin: Option<Arc<dyn Accounts>>,
}

impl AccountFlows {
    pub fn new(
        service: ServiceKind,
        settings: Arc<Settings>,
        tokens: Arc<TokenKeys>,
        decoy: passwords::Decoy,
        throttles: Arc<dyn Throttles>,
    ) -> AccountFlows {
        AccountFlows {
            service,
            settings,
            tokens,
            limiter: LoginLimiter::new(service.name(), throttles.clone()),
            registrations: RegistrationLimiter::new(service.name(), throttles),
            decoy,
            metrics: Arc::new(Metrics::off()),
            twin: None,
        }
    }

    /// These flows, with the other service's accounts (`twin`) following passphrase changes.
    pub fn with_twin(mut self, twin: Arc<dyn Accounts>) -> AccountFlows {
        self.twin = Some(twin);
        self
    }

    /// These flows, counting throttled attempts in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> AccountFlows {
        self.metrics = metrics;
        self
    }

    /// `POST /register`.
    pub async fn register(&self, accounts: &dyn Accounts, request: &Request) -> Result<Reply, ApiError> {
        if !self.settings.registration_open {
            return Err(ApiError::forbidden("registration is closed on this server"));
        }
        let body: RegisterIn = request.json()?;
        // checked before any hashing or storage (and before the registration limit)
        let name = NewUsername::parse(body.name)?;
        let password = NewPassword::parse(body.password)?;
        self.registrations.attempt(client_of(request)).await?.map_err(|secs| {
            self.metrics.throttled(self.service.name(), "registration");
            ApiError::too_many(secs, "too many registrations from this address, try again later")
        })?;
        let hash = passwords::hash_off_runtime(password.into_string(), self.settings.password_iterations)
            .await
            .map_err(|e| ApiError::internal(format!("could not hash the password: {}", e.0)))?;
        match accounts
            .register(name.as_str(), hash, Timestamp::now())
            .await?
            .durable()
            .await?
        {
            // the originals' declared statuses: Intray's API `Verb 'POST 204`, Tickler's
            // `Post '[JSON] NoContent` (200); servant clients accept nothing else
            Registration::Created(_) => Ok(match self.service {
                ServiceKind::Inbox => Reply::no_content(),
                ServiceKind::Scheduler => Reply::empty(),
            }),
            Registration::Taken => Err(ApiError::conflict("username already taken")),
        }
    }

    /// `POST /login`. A password of 32 hex digits is first tried as an access-key secret of
    /// the account (one SHA-256): such a login is never throttled. Otherwise the attempt
    /// takes its slot in the limits before the password is hashed (inbox.md §1.7); when the
    /// password is wrong, it is tried against the account's access keys moved in from Intray
    /// (bcrypt, see [`Self::legacy_key`]). A right password against a moved-in bcrypt hash
    /// replaces that hash by PBKDF2 ([`Self::upgrade_password`]).
    /// Answers 204 with the token cookie.
    pub async fn login(&self, accounts: &dyn Accounts, request: &Request) -> Result<Reply, ApiError> {
        let token = self.log_in(accounts, request).await?;
        let cookie = HeaderValue::from_str(&format!("JWT-Cookie={token}; Path=/; HttpOnly; Secure; SameSite=Lax"))
            .map_err(|_| ApiError::internal("token is not a valid header value"))?;
        Ok(Reply::no_content().with_header(SET_COOKIE, cookie))
    }

    /// `POST /app/token`: the login of [`AccountFlows::login`] for the web interface, whose
    /// script cannot read an `HttpOnly` cookie: 200 with `{"token": "<token>"}`, kept by the
    /// page and sent as `Authorization: Bearer` (never a cookie; docs/web.md).
    pub async fn login_for_page(&self, accounts: &dyn Accounts, request: &Request) -> Result<Reply, ApiError> {
        let token = self.log_in(accounts, request).await?;
        Ok(Reply::json(&json!({ "token": token })))
    }

    /// The checks of a login, then a new token.
    async fn log_in(&self, accounts: &dyn Accounts, request: &Request) -> Result<String, ApiError> {
        let body: LoginIn = request.json()?;
        if !wire::is_valid_username(&body.username) {
            return Err(ApiError::bad_request("invalid username"));
        }
        let account = accounts.by_username(&body.username).await?;
        if let Some(a) = &account {
            if let Some(key) = find_key(accounts, a, &body.password).await? {
                let grant = Grant {
                    permissions: key.permissions,
                    key: Some(key.id),
                };
                return self.grant_token(accounts, a, grant).await;
            }
        }
        let attempt = self
            .limiter
            .reserve(&body.username, client_of(request))
            .await?
            .map_err(|secs| {
                self.metrics.throttled(self.service.name(), "login");
                ApiError::too_many_logins(secs)
            })?;
        let hash = account.as_ref().map(|a| a.password_hash.clone());
        let password_ok = passwords::verify_off_runtime(body.password.clone(), hash, &self.decoy).await;
        let Some(account) = account else {
            // the attempt stays counted as a failure
            return Err(ApiError::unauthorized("wrong username or password"));
        };
        if password_ok {
            attempt.succeeded().await;
            self.upgrade_password(accounts, &account, body.password).await?;
            let grant = Grant {
                permissions: self.password_permissions(&account),
                key: None,
            };
            return self.grant_token(accounts, &account, grant).await;
        }
        if let Some(key) = self.legacy_key(accounts, &account, &body.password).await? {
            attempt.succeeded().await;
            let grant = Grant {
                permissions: key.permissions,
                key: Some(key.id),
            };
            return self.grant_token(accounts, &account, grant).await;
        }
        // the attempt stays counted as a failure
        Err(ApiError::unauthorized("wrong username or password"))
    }

    /// After a successful password login of an account moved in from Intray or Tickler, its
    /// bcrypt hash is replaced by a PBKDF2 hash of the same password (durable before the
    /// login answers). The login does not fail when hashing does: the old hash still works.
    async fn upgrade_password(
        &self,
        accounts: &dyn Accounts,
        account: &Account,
        password: String,
    ) -> Result<(), ApiError> {
        if !matches!(account.password_hash, PasswordHash::LegacyBcrypt(_)) {
            return Ok(());
        }
        match passwords::hash_off_runtime(password, self.settings.password_iterations).await {
            Ok(new_hash) => {
                // a refused write (a full disk) leaves the old hash, which still works: the
                // login answers all the same (issue 29 point 2)
                let upgraded = async {
                    accounts
                        .upgrade_password(account.id, &account.password_hash, new_hash)
                        .await?
                        .durable()
                        .await
                }
                .await;
                match upgraded {
                    Ok(true) => {
                        tracing::info!(account = %account.id, "replaced a moved-in bcrypt password hash by PBKDF2");
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(account = %account.id, "a moved-in password hash stays bcrypt for now: {e}")
                    }
                }
            }
            Err(e) => tracing::warn!("could not hash a moved-in password again: {}", e.0),
        }
        Ok(())
    }

    /// An access key moved in from Intray whose bcrypt hash `secret` matches, if any; that
    /// key is then kept as the digest of its secret like every other key (durable before the
    /// login answers), so the secret works with the `Access-Key` header from then on. Only
    /// reached after the login took its slot in the limits: bcrypt is slow on purpose.
    async fn legacy_key(
        &self,
        accounts: &dyn Accounts,
        account: &Account,
        secret: &str,
    ) -> Result<Option<AccessKey>, ApiError> {
        if !secrets::looks_like_secret(secret) {
            return Ok(None);
        }
        let legacy = accounts.legacy_access_keys(account.id).await?;
        if legacy.is_empty() {
            return Ok(None);
        }
        // Intray hashed the secret's lower-case hex text
        let Some(mut key) = passwords::find_legacy_key(secret.to_ascii_lowercase(), legacy).await else {
            return Ok(None);
        };
        let digest = secrets::digest(secret);
        let upgraded = async {
            accounts
                .upgrade_access_key(account.id, key.id, &key.secret, digest)
                .await?
                .durable()
                .await
        }
        .await;
        match upgraded {
            Ok(true) => key.secret = KeySecret::Digest(digest),
            // deleted meanwhile
            Ok(false) => return Ok(None),
            // a refused write (a full disk): the bcrypt hash stays and still works; the
            // login answers all the same (issue 29 point 2)
            Err(e) => {
                tracing::warn!(account = %account.id, key = %key.id, "a moved-in access key stays bcrypt for now: {e}")
            }
        }
        Ok(Some(key))
    }

    /// Records the login and issues the token. The record is a courtesy: when the database
    /// refuses writes (a full disk), the login answers all the same, unrecorded (issue 29
    /// point 2); an account deleted meanwhile gets no token.
    async fn grant_token(&self, accounts: &dyn Accounts, account: &Account, grant: Grant) -> Result<String, ApiError> {
        let recorded = async {
            accounts
                .set_last_login(account.id, Timestamp::now())
                .await?
                .durable()
                .await
        }
        .await;
        match recorded {
            Ok(true) => {}
            Ok(false) => return Err(ApiError::unauthorized("wrong username or password")),
            Err(e) => tracing::warn!(account = %account.id, "a login was not recorded: {e}"),
        }
        self.tokens
            .issue(self.service, account.id, account.epoch, grant.permissions, grant.key)
            .map_err(|e| ApiError::internal(format!("could not sign a token: {e}")).with_source(e))
    }

    /// `POST /account` (inbox) or `POST /` (scheduler): replaces the password when the old
    /// one is right and revokes every earlier token. The other service's account of the same
    /// name changes with it when the old passphrase opens that one too (its tokens are
    /// revoked alike); the answer is the same either way (spec README decision 18).
    pub async fn change_passphrase(
        &self,
        accounts: &dyn Accounts,
        account: &Account,
        request: &Request,
    ) -> Result<Reply, ApiError> {
        let body: ChangePassphraseIn = request.json()?;
        let new_password = NewPassword::parse(body.new)?;
        let current = account.password_hash.clone();
        let twin = match &self.twin {
            Some(twin) => twin.by_username(&account.username).await?,
            None => None,
        };
        // both checks off the runtime, at once: the twin's costs no extra wait
        let (opens, opens_twin) = tokio::join!(
            passwords::verify_off_runtime(body.old.clone(), Some(current.clone()), &self.decoy),
            async {
                match &twin {
                    Some(t) => {
                        passwords::verify_off_runtime(body.old.clone(), Some(t.password_hash.clone()), &self.decoy)
                            .await
                    }
                    None => false,
                }
            }
        );
        if !opens {
            return Err(ApiError::forbidden("the old passphrase is wrong"));
        }
        let new_hash = passwords::hash_off_runtime(new_password.into_string(), self.settings.password_iterations)
            .await
            .map_err(|e| ApiError::internal(format!("could not hash the password: {}", e.0)))?;
        let changed = accounts.change_password(account.id, &current, new_hash.clone()).await?;
        if !changed.durable().await? {
            return Err(ApiError::forbidden("the passphrase changed meanwhile"));
        }
        if let (Some(twin), Some(twin_accounts), true) = (twin, &self.twin, opens_twin) {
            // this service's change stands whatever becomes of the twin's: the client sees
            // which changed by logging in there (docs/decisions.md)
            let followed = async {
                twin_accounts
                    .change_password(twin.id, &twin.password_hash, new_hash)
                    .await?
                    .durable()
                    .await
            }
            .await
            .map_err(|e| e.to_string());
            match followed {
                Ok(true) => {
                    tracing::debug!(username = %account.username, "the passphrase change followed on the other service")
                }
                Ok(false) => {
                    tracing::info!(username = %account.username, "the other service's passphrase changed meanwhile: left as it is")
                }
                Err(e) => {
                    tracing::warn!(username = %account.username, "the passphrase change did not follow on the other service: {e}")
                }
            }
        }
        Ok(Reply::no_content())
    }

    /// The account and claims of a valid `Authorization: Bearer` token (`None` without an
    /// `Authorization` header). A token is valid while its account exists with the same
    /// credential epoch.
    pub async fn bearer(&self, accounts: &dyn Accounts, request: &Head) -> Result<Option<(Account, Claims)>, ApiError> {
        let Some(value) = request.header(AUTHORIZATION.as_str()) else {
            return Ok(None);
        };
        let invalid = || ApiError::unauthorized("invalid or expired token");
        let text = value.to_str().map_err(|_| invalid())?;
        let token = match text.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => return Err(invalid()),
        };
        let claims = self.tokens.verify(self.service, token).ok_or_else(invalid)?;
        let account = accounts.get(claims.sub).await?.ok_or_else(invalid)?;
        if account.epoch != claims.ep {
            return Err(invalid());
        }
        Ok(Some((account, claims)))
    }

    pub fn is_admin(&self, account: &Account) -> bool {
        self.settings.is_admin(&account.username)
    }

    /// The permission table of this service.
    pub fn table(&self) -> Table {
        match self.service {
            ServiceKind::Inbox => Table::Inbox,
            ServiceKind::Scheduler => Table::Scheduler,
        }
    }

    /// What a password login grants: every permission of the service but the admin's, all
    /// of them for an admin.
    fn password_permissions(&self, account: &Account) -> Permissions {
        match self.is_admin(account) {
            true => self.table().admin(),
            false => self.table().user(),
        }
    }

    /// Checks 3 and 4 of the order of checks (inbox.md §1.2): `None` for a public route,
    /// else the caller, who has the route's permission (and is an admin for `/admin/...`),
    /// then every one of `also_needs` (those of what the route also reads or writes).
    /// `POST /register` while registration is closed is refused here.
    pub async fn admit(
        &self,
        accounts: &dyn Accounts,
        access: Access,
        also_needs: &[Permission],
        head: &Head,
    ) -> Result<Option<Principal>, ApiError> {
        let (permission, admin) = match access {
            Access::Registration if !self.settings.registration_open => return Err(ApiError::registration_closed()),
            Access::Public | Access::Registration => return Ok(None),
            Access::Needs(permission) => (permission, false),
            Access::Admin(permission) => (permission, true),
        };
        let who = self.credentials(accounts, head).await?;
        require_all(&who, &[permission])?;
        if admin && !self.is_admin(&who.account) {
            return Err(ApiError::unauthorized("admins only"));
        }
        require_all(&who, also_needs)?;
        Ok(Some(who))
    }

    /// A bearer token, else the `Username` + `Access-Key` header pair (inbox.md §2.4–2.5).
    /// A token obtained with an access key carries that key's permissions and stops working
    /// when the key is deleted. A scheduler token from a password login has every
    /// permission of the account (scheduler tokens made before access keys carry none).
    pub async fn credentials(&self, accounts: &dyn Accounts, head: &Head) -> Result<Principal, ApiError> {
        if let Some((account, claims)) = self.bearer(accounts, head).await? {
            let permissions = match claims.key {
                Some(key) => {
                    if accounts.access_key(account.id, key).await?.is_none() {
                        return Err(ApiError::unauthorized("the access key of this token was deleted"));
                    }
                    claims.perms
                }
                None if self.service == ServiceKind::Scheduler => self.password_permissions(&account),
                None => claims.perms,
            };
            return Ok(Principal {
                account,
                permissions,
                key: claims.key,
            });
        }
        let missing =
            || ApiError::unauthorized("credentials required: a bearer token or the Username and Access-Key headers");
        let (Some(name), Some(secret)) = (head.header("username"), head.header("access-key")) else {
            return Err(missing());
        };
        let name = header_text(name.as_bytes());
        let secret = std::str::from_utf8(secret.as_bytes()).map_err(|_| missing())?;
        let account = accounts.by_username(&name).await?.ok_or_else(missing)?;
        let key = find_key(accounts, &account, secret).await?.ok_or_else(missing)?;
        Ok(Principal {
            account,
            permissions: key.permissions,
            key: Some(key.id),
        })
    }

    /// `POST /access-key` (inbox.md §3.9): a key with the permissions asked for, which the
    /// caller must have; the secret is shown this once.
    pub async fn add_access_key(
        &self,
        accounts: &dyn Accounts,
        who: &Principal,
        request: &Request,
    ) -> Result<Reply, ApiError> {
        #[derive(Deserialize)]
        struct AddAccessKeyIn {
            #[serde(rename = "addAccessKeyName")]
            name: String,
            #[serde(rename = "addAccessKeyPermissions")]
            permissions: Vec<String>,
        }
        let body: AddAccessKeyIn = request.json()?;
        let permissions = self
            .table()
            .parse(body.permissions.iter().map(String::as_str))
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
            seq: accounts.next_key_seq().await?,
            permissions,
            secret: KeySecret::Digest(digest),
        };
        if !accounts.add_access_key(who.account.id, &key).await?.durable().await? {
            return Err(ApiError::unauthorized("the account no longer exists"));
        }
        Ok(Reply::json(&json!({
            "accessKeyCreatedKey": secret,
            "accessKeyCreatedCreatedTimestamp": key.created.to_string(),
            "accessKeyCreatedUUID": key.id,
        })))
    }

    /// `GET /access-key`.
    pub async fn access_keys(&self, accounts: &dyn Accounts, who: &Principal) -> Result<Reply, ApiError> {
        let keys: Vec<Value> = accounts
            .access_keys(who.account.id)
            .await?
            .iter()
            .map(|k| self.key_info(k))
            .collect();
        Ok(Reply::json(&keys))
    }

    /// `GET /access-key/:uuid`.
    pub async fn access_key(&self, accounts: &dyn Accounts, who: &Principal, id: Uuid) -> Result<Reply, ApiError> {
        let found = accounts
            .access_key(who.account.id, id)
            .await?
            .ok_or_else(|| ApiError::not_found("access key not found"))?;
        Ok(Reply::json(&self.key_info(&found)))
    }

    /// `DELETE /access-key/:uuid`: tokens obtained with the key stop working too.
    pub async fn delete_access_key(
        &self,
        accounts: &dyn Accounts,
        who: &Principal,
        id: Uuid,
    ) -> Result<Reply, ApiError> {
        accounts.delete_access_key(who.account.id, id).await?.durable().await?;
        Ok(Reply::empty())
    }

    /// `GET /permissions`: the caller's permissions in the service's table order.
    pub fn permissions(&self, who: &Principal) -> Reply {
        Reply::json(&self.table().names(who.permissions))
    }

    /// The account's access keys as an export lists them: name, permissions and creation
    /// time, never a secret (only its digest is stored).
    pub async fn exported_keys(&self, accounts: &dyn Accounts, who: &Principal) -> Result<Vec<Value>, ApiError> {
        Ok(accounts
            .access_keys(who.account.id)
            .await?
            .iter()
            .map(|k| self.key_info(k))
            .collect())
    }

    fn key_info(&self, key: &AccessKey) -> Value {
        json!({"uuid": key.id, "name": key.name, "created": key.created.to_string(),
               "permissions": self.table().names(key.permissions)})
    }
}

/// 401 unless the caller has every one of `permissions`.
fn require_all(who: &Principal, permissions: &[Permission]) -> Result<(), ApiError> {
    match permissions.iter().find(|p| !who.permissions.contains(**p)) {
        Some(p) => Err(ApiError::unauthorized(format!("these credentials lack {}", p.name()))),
        None => Ok(()),
    }
}

/// The account's own access key whose secret is `secret` (32 hex digits, either case).
async fn find_key(accounts: &dyn Accounts, account: &Account, secret: &str) -> Result<Option<AccessKey>, ApiError> {
    if !secrets::looks_like_secret(secret) {
        return Ok(None);
    }
    let digest = secrets::digest(secret);
    Ok(accounts
        .access_key_by_digest(&digest)
        .await?
        .filter(|(owner, key)| {
            *owner == account.id && key.secret.digest().is_some_and(|d| secrets::digests_equal(d, &digest))
        })
        .map(|(_, key)| key))
}

/// A header value as text: UTF-8, else ISO-8859-1.
fn header_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        Err(_) => bytes.iter().map(|b| *b as char).collect(),
    }
}

/// The client address of a request (the unspecified address when the transport had none).
fn client_of(request: &Request) -> std::net::IpAddr {
    request.client.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]))
}
