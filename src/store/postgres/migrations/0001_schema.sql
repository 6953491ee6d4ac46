-- Pigeonhole's PostgreSQL schema, version 1 (issue 21). Run once, inside the migration
-- transaction that holds the schema advisory lock (src/store/postgres/migrations.rs).
--
-- Conventions:
-- * An instant is two columns, <name>_secs bigint (Unix seconds) and <name>_nanos integer
--   (0 to 1 999 999 999: a leap second keeps nanoseconds >= 10^9, as the domain's
--   Timestamp does). Nothing is rounded to timestamptz's microseconds; (secs, nanos) sorts
--   in time order, so indexes on the pair are indexes on the instant.
-- * Ids are uuid, bodies bytea, unsigned 32- and 64-bit counters bigint (checked >= 0).
-- * Each service keeps its own accounts (as in sled, where each has its own tree): the
--   tables of accounts and access keys exist once per service, inbox_* and scheduler_*.
-- * A row that belongs to an account references it ON DELETE CASCADE: deleting the account
--   row deletes everything of it in the same transaction.
-- * seq columns (identities) keep the order of insertion where the domain orders by it.
-- * Queue tables carry a lease (claimed_by, lease_until) for FOR UPDATE SKIP LOCKED claims
--   by several processes (issue 21 point 3).

-- Accounts of the inbox service.
CREATE TABLE inbox_accounts (
    id uuid PRIMARY KEY,
    username text NOT NULL,
    -- the password hash and its kind: a PBKDF2 PHC string, or a bcrypt hash moved in from
    -- Intray or Tickler (replaced at the first login)
    password_kind text NOT NULL CHECK (password_kind IN ('pbkdf2', 'bcrypt')),
    password_hash text NOT NULL,
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    last_login_secs bigint,
    last_login_nanos integer CHECK (last_login_nanos BETWEEN 0 AND 1999999999),
    -- credential epoch: a password change starts a new one, revoking earlier tokens
    epoch bigint NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    -- the payment provider's customer id
    payment_customer text,
    CONSTRAINT inbox_accounts_username_key UNIQUE (username),
    CHECK ((last_login_secs IS NULL) = (last_login_nanos IS NULL))
);

-- Accounts of the scheduler service: the same shape.
CREATE TABLE scheduler_accounts (LIKE inbox_accounts INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE scheduler_accounts ADD PRIMARY KEY (id);
ALTER TABLE scheduler_accounts ADD CONSTRAINT scheduler_accounts_username_key UNIQUE (username);

-- Access keys of inbox accounts. The secret is kept as the SHA-256 digest of the secret
-- (unique: a key is found by it) or, for keys moved in, as the other server's bcrypt hash.
CREATE TABLE inbox_access_keys (
    account uuid NOT NULL REFERENCES inbox_accounts (id) ON DELETE CASCADE,
    id uuid NOT NULL,
    name text NOT NULL,
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    -- the store-wide sequence number given at creation (orders keys created together)
    seq bigint NOT NULL CHECK (seq >= 0),
    -- the permission bits (u32)
    permissions bigint NOT NULL CHECK (permissions BETWEEN 0 AND 4294967295),
    secret_digest bytea CHECK (octet_length(secret_digest) = 32),
    secret_bcrypt text,
    PRIMARY KEY (account, id),
    CONSTRAINT inbox_access_keys_digest_key UNIQUE (secret_digest),
    CHECK ((secret_digest IS NULL) <> (secret_bcrypt IS NULL))
);

CREATE TABLE scheduler_access_keys (
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    id uuid NOT NULL,
    name text NOT NULL,
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    seq bigint NOT NULL CHECK (seq >= 0),
    permissions bigint NOT NULL CHECK (permissions BETWEEN 0 AND 4294967295),
    secret_digest bytea CHECK (octet_length(secret_digest) = 32),
    secret_bcrypt text,
    PRIMARY KEY (account, id),
    CONSTRAINT scheduler_access_keys_digest_key UNIQUE (secret_digest),
    CHECK ((secret_digest IS NULL) <> (secret_bcrypt IS NULL))
);

-- The sequence numbers of access keys (sled's per-tree next_id).
CREATE SEQUENCE access_key_seq AS bigint MINVALUE 0 START WITH 1;

-- Inbox items, listed by (created, seq): the order of inbox.md section 1.5.
CREATE TABLE inbox_items (
    id uuid PRIMARY KEY,
    account uuid NOT NULL REFERENCES inbox_accounts (id) ON DELETE CASCADE,
    kind text NOT NULL CHECK (kind IN ('text', 'image/jpeg', 'image/png')),
    data bytea NOT NULL,
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    seq bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX inbox_items_listing ON inbox_items (account, created_secs, created_nanos, seq);

-- Idempotency keys of item additions (inbox.md section 3.13): one per (account, key). They
-- outlive the item they name (a repeated request answers the first item's id).
CREATE TABLE inbox_idempotency_keys (
    account uuid NOT NULL REFERENCES inbox_accounts (id) ON DELETE CASCADE,
    idempotency_key text NOT NULL,
    item uuid NOT NULL,
    CONSTRAINT inbox_idempotency_keys_pkey PRIMARY KEY (account, idempotency_key)
);

-- The scheduler's time-zone setting of an account (none: UTC).
CREATE TABLE scheduler_settings (
    account uuid PRIMARY KEY REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    -- minutes east of UTC
    utc_offset integer NOT NULL CHECK (utc_offset BETWEEN -1439 AND 1439),
    name text NOT NULL,
    summer boolean NOT NULL
);

-- A scheduled item's contents (the domain's Tickle) are these columns, in both scheduled and
-- triggered items:
--   content bytea; day bigint (days since 1970-01-01, the domain's Day::number);
--   time_of_day text (HH:MM:SS[.fraction], the domain's own printing, which keeps a leap
--   second 60 and nanoseconds; NULL: none);
--   recurrence_kind 'days' | 'months' (NULL: none), recurrence_every (the days or months),
--   recurrence_day (1-31, months only), recurrence_time (as time_of_day).
CREATE TABLE scheduled_items (
    id uuid PRIMARY KEY,
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    content bytea NOT NULL,
    day bigint NOT NULL,
    time_of_day text CHECK (time_of_day ~ '^[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?$'),
    recurrence_kind text CHECK (recurrence_kind IN ('days', 'months')),
    recurrence_every bigint CHECK (recurrence_every BETWEEN 1 AND 4294967295),
    recurrence_day integer CHECK (recurrence_day BETWEEN 1 AND 31),
    recurrence_time text CHECK (recurrence_time ~ '^[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?$'),
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    -- the server's change counter when it was last written (sync)
    server_time bigint NOT NULL CHECK (server_time >= 0),
    -- when it is due next, under its owner's time zone: the due index
    due_secs bigint NOT NULL,
    due_nanos integer NOT NULL CHECK (due_nanos BETWEEN 0 AND 1999999999),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    -- the lease of the process triggering it (several processes, issue 21 point 3)
    claimed_by text,
    lease_until timestamptz,
    CHECK ((recurrence_kind IS NULL) = (recurrence_every IS NULL)),
    CHECK (recurrence_kind = 'months' OR recurrence_day IS NULL),
    CHECK (recurrence_kind IS NOT NULL OR recurrence_time IS NULL)
);
-- The due index: on the due instant with its nanoseconds.
CREATE INDEX scheduled_items_due ON scheduled_items (due_secs, due_nanos, id);
CREATE INDEX scheduled_items_listing ON scheduled_items (account, created_secs, created_nanos, seq);

-- Triggered items: one copy per occurrence. scheduled_id and the occurrence (the due
-- instant that triggered it) are the store's, not the domain's: they make a second copy of
-- the same occurrence impossible, whichever process triggers. NULL for copies that came from
-- elsewhere (a move-in, an import, another engine), which have no known occurrence.
CREATE TABLE triggered_items (
    id uuid PRIMARY KEY,
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    content bytea NOT NULL,
    day bigint NOT NULL,
    time_of_day text CHECK (time_of_day ~ '^[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?$'),
    recurrence_kind text CHECK (recurrence_kind IN ('days', 'months')),
    recurrence_every bigint CHECK (recurrence_every BETWEEN 1 AND 4294967295),
    recurrence_day integer CHECK (recurrence_day BETWEEN 1 AND 31),
    recurrence_time text CHECK (recurrence_time ~ '^[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?$'),
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    triggered_secs bigint NOT NULL,
    triggered_nanos integer NOT NULL CHECK (triggered_nanos BETWEEN 0 AND 1999999999),
    scheduled_id uuid,
    occurrence_secs bigint,
    occurrence_nanos integer CHECK (occurrence_nanos BETWEEN 0 AND 1999999999),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    CONSTRAINT triggered_items_one_per_occurrence UNIQUE (account, scheduled_id, occurrence_secs, occurrence_nanos),
    CHECK ((scheduled_id IS NULL) = (occurrence_secs IS NULL) AND (occurrence_secs IS NULL) = (occurrence_nanos IS NULL)),
    CHECK ((recurrence_kind IS NULL) = (recurrence_every IS NULL)),
    CHECK (recurrence_kind = 'months' OR recurrence_day IS NULL),
    CHECK (recurrence_kind IS NOT NULL OR recurrence_time IS NULL)
);
CREATE INDEX triggered_items_listing ON triggered_items (account, created_secs, created_nanos, triggered_secs, triggered_nanos, seq);

-- The delivery attempts recorded on a triggered item (the domain's Attempt), in order.
CREATE TABLE trigger_attempts (
    triggered_item uuid NOT NULL REFERENCES triggered_items (id) ON DELETE CASCADE,
    position integer NOT NULL CHECK (position >= 0),
    trigger uuid NOT NULL,
    trigger_created_secs bigint NOT NULL,
    trigger_created_nanos integer NOT NULL CHECK (trigger_created_nanos BETWEEN 0 AND 1999999999),
    delivery uuid NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('inbox_added', 'inbox_failed', 'email_sent', 'email_failed')),
    -- inbox_added: the item made in the target inbox
    inbox_item uuid,
    -- inbox_failed, email_failed: why
    reason text,
    PRIMARY KEY (triggered_item, position),
    CHECK ((outcome = 'inbox_added') = (inbox_item IS NOT NULL)),
    CHECK ((outcome IN ('inbox_failed', 'email_failed')) = (reason IS NOT NULL))
);

-- Triggers (the domain's Trigger): an e-mail address or another inbox.
CREATE TABLE triggers (
    id uuid PRIMARY KEY,
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    created_secs bigint NOT NULL,
    created_nanos integer NOT NULL CHECK (created_nanos BETWEEN 0 AND 1999999999),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    kind text NOT NULL CHECK (kind IN ('email', 'inbox')),
    email_address text,
    email_verified boolean,
    -- SHA-256 of the verification key
    email_key_digest bytea CHECK (octet_length(email_key_digest) = 32),
    inbox_url text,
    inbox_username text,
    inbox_access_key text,
    CHECK (kind <> 'email' OR (email_address IS NOT NULL AND email_verified IS NOT NULL AND email_key_digest IS NOT NULL
                               AND inbox_url IS NULL AND inbox_username IS NULL AND inbox_access_key IS NULL)),
    CHECK (kind <> 'inbox' OR (inbox_url IS NOT NULL AND inbox_username IS NOT NULL AND inbox_access_key IS NOT NULL
                               AND email_address IS NULL AND email_verified IS NULL AND email_key_digest IS NULL))
);
CREATE INDEX triggers_of_account ON triggers (account, seq);

-- The delivery targets fixed when an item triggered (the triggers of each kind at that
-- moment), waiting to be expanded into deliveries or e-mails.
CREATE TABLE delivery_targets (
    triggered_item uuid NOT NULL REFERENCES triggered_items (id) ON DELETE CASCADE,
    kind text NOT NULL CHECK (kind IN ('inbox', 'email')),
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    triggers uuid[] NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    claimed_by text,
    lease_until timestamptz,
    PRIMARY KEY (triggered_item, kind)
);
CREATE INDEX delivery_targets_queue ON delivery_targets (kind, seq);

-- Pending inbox deliveries (the domain's Delivery), in queue order.
CREATE TABLE deliveries (
    id uuid PRIMARY KEY,
    account uuid NOT NULL REFERENCES scheduler_accounts (id) ON DELETE CASCADE,
    -- the triggered item delivered (its deletion drops its pending deliveries)
    item uuid NOT NULL REFERENCES triggered_items (id) ON DELETE CASCADE,
    trigger uuid NOT NULL,
    trigger_created_secs bigint NOT NULL,
    trigger_created_nanos integer NOT NULL CHECK (trigger_created_nanos BETWEEN 0 AND 1999999999),
    email boolean NOT NULL,
    failures bigint NOT NULL CHECK (failures BETWEEN 0 AND 4294967295),
    not_before_secs bigint NOT NULL,
    not_before_nanos integer NOT NULL CHECK (not_before_nanos BETWEEN 0 AND 1999999999),
    seq bigint GENERATED ALWAYS AS IDENTITY,
    claimed_by text,
    lease_until timestamptz
);
CREATE INDEX deliveries_queue ON deliveries (seq);
CREATE INDEX deliveries_of_account ON deliveries (account);
CREATE INDEX deliveries_of_item ON deliveries (item);

-- The e-mail queue (the domain's QueuedEmail), every stage: a verification e-mail or a
-- triggered item's e-mail to render, an admin notice to render, a rendered message to send.
-- The columns of each stage are set for that stage only (checked below). delivery_* is the
-- delivery an e-mail carries (Triggered: always; Rendered: when it came from one).
CREATE TABLE email_queue (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- the account it is for (not a reference: an admin notice has no account of its own)
    owner uuid NOT NULL,
    trigger uuid,
    stage text NOT NULL CHECK (stage IN ('verification', 'triggered', 'admin_notice', 'rendered')),
    failures bigint NOT NULL CHECK (failures BETWEEN 0 AND 4294967295),
    not_before_secs bigint NOT NULL,
    not_before_nanos integer NOT NULL CHECK (not_before_nanos BETWEEN 0 AND 1999999999),
    -- verification and triggered: the address
    recipient text,
    -- verification: the verification key
    verification_key text,
    -- admin_notice
    notice_worker text,
    notice_error text,
    -- rendered: the message
    message_to text,
    message_subject text,
    message_text text,
    message_html text,
    delivery_id uuid,
    delivery_owner uuid,
    -- (the triggered item's deletion drops its e-mails)
    delivery_item uuid REFERENCES triggered_items (id) ON DELETE CASCADE,
    delivery_trigger uuid,
    delivery_trigger_created_secs bigint,
    delivery_trigger_created_nanos integer CHECK (delivery_trigger_created_nanos BETWEEN 0 AND 1999999999),
    delivery_email boolean,
    delivery_failures bigint CHECK (delivery_failures BETWEEN 0 AND 4294967295),
    delivery_not_before_secs bigint,
    delivery_not_before_nanos integer CHECK (delivery_not_before_nanos BETWEEN 0 AND 1999999999),
    claimed_by text,
    lease_until timestamptz,
    CHECK ((stage IN ('verification', 'triggered')) = (recipient IS NOT NULL)),
    CHECK ((stage = 'verification') = (verification_key IS NOT NULL)),
    CHECK ((stage = 'admin_notice') = (notice_worker IS NOT NULL AND notice_error IS NOT NULL)),
    CHECK ((stage = 'rendered') = (message_to IS NOT NULL AND message_subject IS NOT NULL
                                   AND message_text IS NOT NULL AND message_html IS NOT NULL)),
    CHECK (stage <> 'triggered' OR delivery_id IS NOT NULL),
    CHECK (stage IN ('triggered', 'rendered') OR delivery_id IS NULL),
    CHECK ((delivery_id IS NULL) = (delivery_owner IS NULL)
           AND (delivery_id IS NULL) = (delivery_item IS NULL)
           AND (delivery_id IS NULL) = (delivery_trigger IS NULL)
           AND (delivery_id IS NULL) = (delivery_trigger_created_secs IS NULL)
           AND (delivery_id IS NULL) = (delivery_trigger_created_nanos IS NULL)
           AND (delivery_id IS NULL) = (delivery_email IS NULL)
           AND (delivery_id IS NULL) = (delivery_failures IS NULL)
           AND (delivery_id IS NULL) = (delivery_not_before_secs IS NULL)
           AND (delivery_id IS NULL) = (delivery_not_before_nanos IS NULL))
);
CREATE INDEX email_queue_stage ON email_queue (stage, seq);
CREATE INDEX email_queue_owner ON email_queue (owner);
CREATE INDEX email_queue_of_item ON email_queue (delivery_item);

-- Payment events seen: handled, or failed (with the event, kept for a later look).
CREATE TABLE payment_events (
    id text PRIMARY KEY,
    failed_event bytea,
    seen_at timestamptz NOT NULL DEFAULT now()
);

-- Shared by every process on the database (issue 21 point 3).

-- The token signing key: one row, made by the first process that needs it.
CREATE TABLE token_signing_key (
    only_one boolean PRIMARY KEY DEFAULT true CHECK (only_one),
    secret bytea NOT NULL CHECK (octet_length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Sliding-window throttles (src/store/throttles.rs: login attempts per username and
-- address pair and per address, registrations per network, verification e-mails per
-- trigger, address and account): one row per counted attempt and key, all rows of one
-- attempt sharing its number; an attempt given back deletes its rows; rows that left their
-- window are pruned by the takes of their kind. Instants are the database's clock, the one
-- clock every process shares.
CREATE TABLE throttle_events (
    -- Throttle::code
    throttle smallint NOT NULL CHECK (throttle BETWEEN 1 AND 6),
    -- the 16-byte key (a digest or an id: never client-sized)
    subject bytea NOT NULL CHECK (octet_length(subject) = 16),
    attempt bigint NOT NULL,
    at timestamptz NOT NULL,
    PRIMARY KEY (throttle, subject, attempt)
);
CREATE INDEX throttle_events_window ON throttle_events (throttle, subject, at);
CREATE INDEX throttle_events_age ON throttle_events (throttle, at);
CREATE SEQUENCE throttle_attempt_seq AS bigint;
