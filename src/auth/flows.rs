//! Registration, login, passphrase change and bearer-token checks, shared by both services
//! (each with its own accounts, rate limiter and token audience).

use super::{passwords, Claims, LoginLimiter, RegistrationLimiter, TokenKeys};
use crate::config::Settings;
use crate::domain::account::{Account, ServiceKind};
use crate::domain::permissions::Permissions;
use crate::domain::wire::{self, Timestamp};
use crate::http::{ApiError, Head, Reply, Request};
use crate::store::{AccountStore, Registration};
use serde::Deserialize;
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
}

impl AccountFlows {
    pub fn new(
        service: ServiceKind,
        settings: Arc<Settings>,
        tokens: Arc<TokenKeys>,
        decoy: passwords::Decoy,
    ) -> AccountFlows {
        AccountFlows {
            service,
            settings,
            tokens,
            limiter: LoginLimiter::default(),
            registrations: RegistrationLimiter::default(),
            decoy,
        }
    }

    /// `POST /register`.
    pub async fn register(&self, accounts: &AccountStore, request: &Request) -> Result<Reply, ApiError> {
        if !self.settings.registration_open {
            return Err(ApiError::forbidden("registration is closed on this server"));
        }
        let body: RegisterIn = request.json()?;
        if !wire::is_valid_username(&body.name) {
            return Err(ApiError::bad_request("invalid username"));
        }
        self.registrations
            .attempt(client_of(request))
            .map_err(|secs| ApiError::too_many(secs, "too many registrations from this address, try again later"))?;
        let hash = passwords::hash_off_runtime(body.password, self.settings.password_iterations)
            .await
            .map_err(|e| ApiError::internal(format!("could not hash the password: {}", e.0)))?;
        match accounts.register(&body.name, hash, Timestamp::now())?.durable().await? {
            Registration::Created(_) => Ok(Reply::empty()),
            Registration::Taken => Err(ApiError::new(
                warp::http::StatusCode::CONFLICT,
                "username already taken",
            )),
        }
    }

    /// `POST /login`. A password of 32 hex digits is first tried as an access-key secret of
    /// the account (`key_login`, one SHA-256): such a login is never throttled. Otherwise the
    /// attempt takes its slot in the limits before the password is hashed (inbox.md §1.7).
    pub async fn login(
        &self,
        accounts: &AccountStore,
        request: &Request,
        key_login: impl FnOnce(&Account, &str) -> Result<Option<Grant>, ApiError>,
    ) -> Result<Reply, ApiError> {
        let body: LoginIn = request.json()?;
        if !wire::is_valid_username(&body.username) {
            return Err(ApiError::bad_request("invalid username"));
        }
        let account = accounts.by_username(&body.username)?;
        if let Some(a) = &account {
            if let Some(grant) = key_login(a, &body.password)? {
                return self.grant_token(accounts, a, grant).await;
            }
        }
        let attempt = self
            .limiter
            .reserve(&body.username, client_of(request))
            .map_err(ApiError::too_many_logins)?;
        let hash = account.as_ref().map(|a| a.password_hash.clone());
        let password_ok = passwords::verify_off_runtime(body.password, hash, &self.decoy).await;
        let (Some(account), true) = (account, password_ok) else {
            // the attempt stays counted as a failure
            return Err(ApiError::unauthorized("wrong username or password"));
        };
        attempt.succeeded();
        let permissions = if self.service != ServiceKind::Inbox {
            // the scheduler has no permissions: its tokens carry none
            Permissions::default()
        } else if self.settings.is_admin(&account.username) {
            Permissions::ADMIN
        } else {
            Permissions::USER
        };
        let grant = Grant { permissions, key: None };
        self.grant_token(accounts, &account, grant).await
    }

    /// Records the login and answers 204 with the token cookie.
    async fn grant_token(&self, accounts: &AccountStore, account: &Account, grant: Grant) -> Result<Reply, ApiError> {
        let recorded = accounts.set_last_login(account.id, Timestamp::now())?;
        if !recorded.durable().await? {
            return Err(ApiError::unauthorized("wrong username or password"));
        }
        let token = self
            .tokens
            .issue(self.service, account.id, account.epoch, grant.permissions, grant.key)
            .map_err(|e| ApiError::internal(format!("could not sign a token: {e}")))?;
        let cookie = HeaderValue::from_str(&format!("JWT-Cookie={token}; Path=/; HttpOnly; Secure; SameSite=Lax"))
            .map_err(|_| ApiError::internal("token is not a valid header value"))?;
        Ok(Reply::no_content().with_header(SET_COOKIE, cookie))
    }

    /// `POST /account` (inbox) or `POST /` (scheduler): replaces the password when the old
    /// one is right and revokes every earlier token.
    pub async fn change_passphrase(
        &self,
        accounts: &AccountStore,
        account: &Account,
        request: &Request,
    ) -> Result<Reply, ApiError> {
        let body: ChangePassphraseIn = request.json()?;
        let current = account.password_hash.clone();
        if !passwords::verify_off_runtime(body.old, Some(current.clone()), &self.decoy).await {
            return Err(ApiError::forbidden("the old passphrase is wrong"));
        }
        let new_hash = passwords::hash_off_runtime(body.new, self.settings.password_iterations)
            .await
            .map_err(|e| ApiError::internal(format!("could not hash the password: {}", e.0)))?;
        let changed = accounts.change_password(account.id, &current, new_hash)?;
        if !changed.durable().await? {
            return Err(ApiError::forbidden("the passphrase changed meanwhile"));
        }
        Ok(Reply::no_content())
    }

    /// The account and claims of a valid `Authorization: Bearer` token (`None` without an
    /// `Authorization` header). A token is valid while its account exists with the same
    /// credential epoch.
    pub fn bearer(&self, accounts: &AccountStore, request: &Head) -> Result<Option<(Account, Claims)>, ApiError> {
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
        let account = accounts.get(claims.sub)?.ok_or_else(invalid)?;
        if account.epoch != claims.ep {
            return Err(invalid());
        }
        Ok(Some((account, claims)))
    }

    pub fn is_admin(&self, account: &Account) -> bool {
        self.settings.is_admin(&account.username)
    }
}

/// The client address of a request (the unspecified address when the transport had none).
fn client_of(request: &Request) -> std::net::IpAddr {
    request.client.unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]))
}
