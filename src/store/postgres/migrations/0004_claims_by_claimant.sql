-- Claims by their claimant (issue 30 point 3): a live process renews its claims every few
-- seconds (`WHERE claimed_by = me`), and a worker that found work held by another process
-- asks when the earliest of those claims runs out. Only claimed rows are indexed, so the
-- indexes stay as small as the work in progress.

CREATE INDEX scheduled_items_claims ON scheduled_items (claimed_by, lease_until) WHERE claimed_by IS NOT NULL;
CREATE INDEX deliveries_claims ON deliveries (claimed_by, lease_until) WHERE claimed_by IS NOT NULL;
CREATE INDEX email_queue_claims ON email_queue (claimed_by, lease_until) WHERE claimed_by IS NOT NULL;
