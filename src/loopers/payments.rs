//! The payments workers (inbox.md §4.4, scheduler.md §11): the fetcher pages through the
//! provider's `checkout.session.completed` events and records, for each subscription
//! checkout whose `client_reference_id` is an account of either service, that account's
//! customer; every event is handled once. Events whose handling failed are kept for the
//! retrier.

use crate::payments::Payments;
use crate::store::Store;
use serde_json::Value;

/// At most this many pages per fetcher pass.
const MAX_PAGES: usize = 100;

/// Records the customer of a subscription checkout on the accounts it names.
fn handle(store: &Store, event: &Value) -> Result<(), String> {
    let session = &event["data"]["object"];
    if session["mode"].as_str() != Some("subscription") {
        return Ok(());
    }
    let (Some(reference), Some(customer)) = (session["client_reference_id"].as_str(), session["customer"].as_str())
    else {
        return Ok(());
    };
    let Some(account) = crate::domain::wire::parse_uuid(reference) else {
        return Ok(());
    };
    let e = |e: crate::store::StoreError| e.to_string();
    store.inbox.accounts.set_customer(account, customer).map_err(e)?;
    store.scheduler.accounts.set_customer(account, customer).map_err(e)?;
    Ok(())
}

fn record(store: &Store, id: &str, event: &Value, result: Result<(), String>) -> Result<(), String> {
    let failed = match result {
        Ok(()) => None,
        Err(why) => {
            tracing::warn!("payment event {id} could not be handled: {why}");
            Some(event.to_string().into_bytes())
        }
    };
    store
        .scheduler
        .mark_event(id, failed.as_deref())
        .map_err(|e| e.to_string())
}

/// One fetcher pass.
pub async fn fetch(store: &Store, payments: &Payments) -> Result<(), String> {
    let Some(provider) = payments.provider() else {
        return Ok(());
    };
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let (events, more) = provider.events(after.as_deref()).await?;
        let mut new = 0;
        for event in &events {
            let Some(id) = event["id"].as_str() else { continue };
            if store.scheduler.event_seen(id).map_err(|e| e.to_string())? {
                continue;
            }
            new += 1;
            record(store, id, event, handle(store, event))?;
        }
        // events come newest first: a page with nothing new means the rest is known
        if !more || new == 0 {
            break;
        }
        after = events.last().and_then(|e| e["id"].as_str()).map(str::to_owned);
    }
    store.durable().await.map_err(|e| e.to_string())
}

/// One retrier pass: handles the failed events again.
pub async fn retry(store: &Store) -> Result<(), String> {
    for raw in store.scheduler.failed_events().map_err(|e| e.to_string())? {
        let event: Value = serde_json::from_slice(&raw).map_err(|e| e.to_string())?;
        let Some(id) = event["id"].as_str() else { continue };
        record(store, id, &event, handle(store, &event))?;
    }
    store.durable().await.map_err(|e| e.to_string())
}
