//! Pricing and payment status (inbox.md §3.4, §4; scheduler.md §11). Monetisation is off
//! unless a plan is configured; admins and freeloaders never pay.

use crate::config::Settings;
use crate::domain::wire::Timestamp;
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentStatus {
    NoPaymentNecessary,
    Paid {
        until: Timestamp,
    },
    /// `items_left` = free items − current items; not clamped.
    NotPaid {
        items_left: i64,
    },
}

impl PaymentStatus {
    pub fn to_json(&self) -> Value {
        match self {
            PaymentStatus::NoPaymentNecessary => json!({"status": "no-payment-necessary"}),
            PaymentStatus::Paid { until } => json!({"status": "paid", "until": until.to_string()}),
            PaymentStatus::NotPaid { items_left } => json!({"status": "not-paid", "items-left": items_left}),
        }
    }
}

/// The free-item cap that applies to `username` (`None`: unlimited).
pub fn item_cap(settings: &Settings, username: &str) -> Option<u64> {
    if settings.payment_plan.is_none() || settings.is_admin(username) || settings.is_freeloader(username) {
        None
    } else {
        Some(settings.max_items_free)
    }
}

/// The status of `username` with `items` items.
pub fn status(settings: &Settings, username: &str, items: u64) -> PaymentStatus {
    match item_cap(settings, username) {
        None => PaymentStatus::NoPaymentNecessary,
        Some(cap) => PaymentStatus::NotPaid {
            items_left: cap as i64 - items as i64,
        },
    }
}

/// `GET /pricing`: `null` in free mode, else the plan.
pub fn pricing(settings: &Settings) -> Value {
    match &settings.payment_plan {
        None => Value::Null,
        Some(p) => json!({
            "plan": p.plan,
            "price": p.price,
            "currency": p.currency,
            "trial-period": p.trial_days,
            "publishable-key": p.publishable_key,
            "max-items-free": settings.max_items_free,
        }),
    }
}

/// Payment status and limits as the services ask for them: with `--payment-secret-key`,
/// accounts with a recorded customer are looked up at the payment provider (a
/// Stripe-compatible REST API, inbox.md §4.4).
pub struct Payments {
    settings: std::sync::Arc<Settings>,
    provider: Option<Provider>,
}

/// The payment provider's REST API.
pub struct Provider {
    client: reqwest::Client,
    api: String,
    secret: String,
    plan: String,
}

/// Why a payment status could not be told.
#[derive(Debug)]
pub enum PaymentsError {
    /// The provider could not be reached or answered an error (503 for the request that
    /// needed it, inbox.md §4.4).
    Unreachable(String),
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for PaymentsError {
    fn from(e: crate::store::StoreError) -> Self {
        PaymentsError::Store(e)
    }
}

impl From<PaymentsError> for crate::http::ApiError {
    fn from(e: PaymentsError) -> Self {
        match e {
            PaymentsError::Unreachable(why) => {
                tracing::warn!("payment provider: {why}");
                crate::http::ApiError::unavailable(None, "the payment provider could not be reached")
            }
            PaymentsError::Store(e) => e.into(),
        }
    }
}

impl Provider {
    async fn get(&self, path_and_query: &str) -> Result<Value, String> {
        let response = self
            .client
            .get(format!("{}{path_and_query}", self.api))
            .bearer_auth(&self.secret)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        response.json::<Value>().await.map_err(|e| e.to_string())
    }

    /// The end of the paid period of `customer`'s active or trialing subscriptions to the
    /// plan (`None`: no such subscription).
    pub async fn paid_until(&self, customer: &str) -> Result<Option<Timestamp>, String> {
        let customer = crate::domain::wire::percent_encode(customer);
        let body = self.get(&format!("/v1/subscriptions?customer={customer}")).await?;
        let mut until: Option<i64> = None;
        for sub in body["data"].as_array().into_iter().flatten() {
            let status = sub["status"].as_str().unwrap_or("");
            let plans = std::iter::once(&sub["plan"]["id"]).chain(
                sub["items"]["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|i| [&i["plan"]["id"], &i["price"]["id"]]),
            );
            let for_plan = plans.filter_map(Value::as_str).any(|p| p == self.plan);
            if for_plan && (status == "active" || status == "trialing") {
                if let Some(end) = sub["current_period_end"].as_i64() {
                    until = Some(until.map_or(end, |u| u.max(end)));
                }
            }
        }
        Ok(until.map(|secs| Timestamp::from_unix(secs, 0)))
    }

    /// One page of `checkout.session.completed` events (newest first) and whether more
    /// follow.
    pub async fn events(&self, starting_after: Option<&str>) -> Result<(Vec<Value>, bool), String> {
        let mut path = "/v1/events?type=checkout.session.completed".to_string();
        if let Some(after) = starting_after {
            path.push_str("&starting_after=");
            path.push_str(&crate::domain::wire::percent_encode(after));
        }
        let body = self.get(&path).await?;
        let data = body["data"].as_array().cloned().unwrap_or_default();
        Ok((data, body["has_more"].as_bool().unwrap_or(false)))
    }
}

impl Payments {
    pub fn new(settings: std::sync::Arc<Settings>, client: reqwest::Client) -> Payments {
        let provider = match (&settings.payment_plan, &settings.payment_secret_key) {
            (Some(plan), Some(secret)) => Some(Provider {
                client,
                api: settings.payment_api_url.trim_end_matches('/').to_owned(),
                secret: secret.clone(),
                plan: plan.plan.clone(),
            }),
            _ => None,
        };
        Payments { settings, provider }
    }

    pub fn provider(&self) -> Option<&Provider> {
        self.provider.as_ref()
    }

    /// Whether `customer` pays now (never without a provider).
    async fn paid_until(&self, customer: Option<&str>) -> Result<Option<Timestamp>, PaymentsError> {
        match (&self.provider, customer) {
            (Some(p), Some(c)) => p.paid_until(c).await.map_err(PaymentsError::Unreachable),
            _ => Ok(None),
        }
    }

    /// The status of an account with `items` items and an optional recorded customer.
    pub async fn status(
        &self,
        username: &str,
        customer: Option<&str>,
        items: u64,
    ) -> Result<PaymentStatus, PaymentsError> {
        if item_cap(&self.settings, username).is_none() {
            return Ok(PaymentStatus::NoPaymentNecessary);
        }
        if let Some(until) = self.paid_until(customer).await? {
            return Ok(PaymentStatus::Paid { until });
        }
        Ok(status(&self.settings, username, items))
    }

    /// The free-item cap to enforce for the account (`None`: unlimited).
    pub async fn cap(&self, username: &str, customer: Option<&str>) -> Result<Option<u64>, PaymentsError> {
        let cap = item_cap(&self.settings, username);
        if cap.is_some() && self.paid_until(customer).await?.is_some() {
            return Ok(None);
        }
        Ok(cap)
    }

    /// The status of `account` (of the service whose accounts `accounts` holds).
    pub async fn status_of(
        &self,
        accounts: &dyn crate::store::Accounts,
        account: &crate::domain::account::Account,
        items: u64,
    ) -> Result<PaymentStatus, PaymentsError> {
        let customer = accounts.customer(account.id).await?;
        self.status(&account.username, customer.as_deref(), items).await
    }

    /// The free-item cap of `account` (`None`: unlimited).
    pub async fn cap_of(
        &self,
        accounts: &dyn crate::store::Accounts,
        account: &crate::domain::account::Account,
    ) -> Result<Option<u64>, PaymentsError> {
        if item_cap(&self.settings, &account.username).is_none() {
            // no cap to lift: the account's customer is not asked for
            return Ok(None);
        }
        let customer = accounts.customer(account.id).await?;
        self.cap(&account.username, customer.as_deref()).await
    }

    /// How many of `all` are `paid` now.
    pub async fn subscribers(
        &self,
        accounts: &dyn crate::store::Accounts,
        all: &[crate::domain::account::Account],
    ) -> Result<usize, PaymentsError> {
        let mut n = 0;
        for a in all {
            if matches!(self.status_of(accounts, a, 0).await?, PaymentStatus::Paid { .. }) {
                n += 1;
            }
        }
        Ok(n)
    }
}
