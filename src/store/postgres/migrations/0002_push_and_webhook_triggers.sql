-- Push and webhook triggers (scheduler.md §6.4–§6.5, §7.6–§7.7): their columns, their kinds
-- and their attempts' outcomes. Their deliveries are pending deliveries like the inbox's
-- (the target list of kind 'inbox' holds every trigger delivered over HTTP).

ALTER TABLE triggers
    -- push: the subscription (endpoint and the subscriber's keys) and whether the push
    -- service said it is gone
    ADD COLUMN push_endpoint text,
    ADD COLUMN push_p256dh bytea CHECK (octet_length(push_p256dh) = 65),
    ADD COLUMN push_auth bytea CHECK (octet_length(push_auth) = 16),
    ADD COLUMN push_expired boolean,
    -- webhook: the URL (a token may be in its query) and the body's format
    ADD COLUMN webhook_url text,
    ADD COLUMN webhook_format text CHECK (webhook_format IN ('text', 'json'));

ALTER TABLE triggers
    DROP CONSTRAINT triggers_kind_check,
    DROP CONSTRAINT triggers_check,
    DROP CONSTRAINT triggers_check1;

-- every kind's columns are set for that kind and NULL for every other
ALTER TABLE triggers
    ADD CONSTRAINT triggers_kind CHECK (kind IN ('email', 'inbox', 'push', 'webhook')),
    ADD CONSTRAINT triggers_email_columns
        CHECK (num_nonnulls(email_address, email_verified, email_key_digest) = CASE WHEN kind = 'email' THEN 3 ELSE 0 END),
    ADD CONSTRAINT triggers_inbox_columns
        CHECK (num_nonnulls(inbox_url, inbox_username, inbox_access_key) = CASE WHEN kind = 'inbox' THEN 3 ELSE 0 END),
    ADD CONSTRAINT triggers_push_columns
        CHECK (num_nonnulls(push_endpoint, push_p256dh, push_auth, push_expired) = CASE WHEN kind = 'push' THEN 4 ELSE 0 END),
    ADD CONSTRAINT triggers_webhook_columns
        CHECK (num_nonnulls(webhook_url, webhook_format) = CASE WHEN kind = 'webhook' THEN 2 ELSE 0 END);

-- one push trigger per endpoint and account: a second subscription of the endpoint replaces
-- the first (§6.4), also when two requests come at once
CREATE UNIQUE INDEX triggers_one_per_endpoint ON triggers (account, push_endpoint) WHERE kind = 'push';

ALTER TABLE trigger_attempts
    DROP CONSTRAINT trigger_attempts_outcome_check,
    DROP CONSTRAINT trigger_attempts_check1;

ALTER TABLE trigger_attempts
    ADD CONSTRAINT trigger_attempts_outcome CHECK (outcome IN ('inbox_added', 'inbox_failed', 'email_sent',
        'email_failed', 'push_sent', 'push_failed', 'webhook_sent', 'webhook_failed')),
    ADD CONSTRAINT trigger_attempts_reason
        CHECK ((outcome IN ('inbox_failed', 'email_failed', 'push_failed', 'webhook_failed')) = (reason IS NOT NULL));
