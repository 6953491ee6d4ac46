//! Pricing and payment status (inbox.md §3.4, §4; scheduler.md §11). Monetisation is off
//! unless a plan is configured; admins and freeloaders never pay.

use crate::config::Settings;
use crate::wire::Timestamp;
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
