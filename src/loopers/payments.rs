//! The payments workers (inbox.md §4.4, scheduler.md §11): the fetcher pages through the
//! provider's `checkout.session.completed` events and records, for each subscription
//! checkout whose `client_reference_id` is an account of either service, that account's
//! customer; every event is handled once. Events whose handling failed are kept for the
//! retrier.

use super::PassError;
use crate::payments::Payments;
use crate::store::{Store, StoreError, Written};
use serde_json::Value;

/// At most this many pages per fetcher pass.
const MAX_PAGES: usize = 100;

/// Records the customer of a subscription checkout on the accounts it names.
async fn handle(store: &Store, event: &Value) -> Result<Written<()>, StoreError> {
    let nothing = Ok(Written::nothing());
    let session = &event["data"]["object"];
    if session["mode"].as_str() != Some("subscription") {
        return nothing;
    }
    let (Some(reference), Some(customer)) = (session["client_reference_id"].as_str(), session["customer"].as_str())
    else {
        return nothing;
    };
    let Some(account) = crate::domain::wire::parse_uuid(reference) else {
        return nothing;
    };
    let inbox = store.inbox.accounts.set_customer(account, customer).await?;
    let scheduler = store.scheduler.accounts.set_customer(account, customer).await?;
    Ok(inbox.and(scheduler).discard())
}

/// Marks the event handled, or failed (kept for the retrier) when `result` is an error.
async fn record(
    store: &Store,
    id: &str,
    event: &Value,
    result: Result<Written<()>, StoreError>,
) -> Result<Written<()>, StoreError> {
    let (handled, failed) = match result {
        Ok(handled) => (handled, None),
        Err(why) => {
            tracing::warn!("payment event {id} could not be handled: {why}");
            (Written::nothing(), Some(event.to_string().into_bytes()))
        }
    };
    let marked = store.scheduler.payments.mark_event(id, failed.as_deref()).await?;
    Ok(handled.and(marked).discard())
}

/// One fetcher pass.
pub async fn fetch(store: &Store, payments: &Payments) -> Result<(), PassError> {
    let Some(provider) = payments.provider() else {
        return Ok(());
    };
    let mut after: Option<String> = None;
    let mut written = Vec::new();
    for _ in 0..MAX_PAGES {
        let (events, more) = provider.events(after.as_deref()).await.map_err(PassError::Provider)?;
        let mut new = 0;
        for event in &events {
            let Some(id) = event["id"].as_str() else { continue };
            if store.scheduler.payments.event_seen(id).await? {
                continue;
            }
            new += 1;
            written.push(record(store, id, event, handle(store, event).await).await?);
        }
        // events come newest first: a page with nothing new means the rest is known
        if !more || new == 0 {
            break;
        }
        after = events.last().and_then(|e| e["id"].as_str()).map(str::to_owned);
    }
    Written::all(written).durable().await?;
    Ok(())
}

/// One retrier pass: handles the failed events again.
pub async fn retry(store: &Store) -> Result<(), PassError> {
    let mut written = Vec::new();
    for raw in store.scheduler.payments.failed_events().await? {
        let event: Value = serde_json::from_slice(&raw)?;
        let Some(id) = event["id"].as_str() else { continue };
        written.push(record(store, id, &event, handle(store, &event).await).await?);
    }
    Written::all(written).durable().await?;
    Ok(())
}
