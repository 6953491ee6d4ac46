-- Each account's item count, kept as items are added and deleted (issue 30 point 7), so that
-- `GET /inbox/size`, `GET /account` and the free-item limit read a few rows instead of
-- counting the account's items (an index scan as long as the inbox). The count of an account
-- is the sum of its rows: each connection adds to the row of its own shard
-- (pg_backend_pid() % 32), so that concurrent additions to one account do not wait for each
-- other's commit on one counter row. Kept by statement triggers on inbox_items, so that every
-- way items are written (the API, sync, imports, moving in, migrate-store) counts alike; an
-- account deleted takes its rows with it.

CREATE TABLE inbox_item_counts (
    account uuid NOT NULL,
    shard smallint NOT NULL,
    items bigint NOT NULL,
    CONSTRAINT inbox_item_counts_pkey PRIMARY KEY (account, shard)
);

INSERT INTO inbox_item_counts (account, shard, items)
SELECT account, 0, count(*) FROM inbox_items GROUP BY account;

CREATE FUNCTION inbox_items_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO inbox_item_counts (account, shard, items)
    SELECT account, pg_backend_pid() % 32, count(*) FROM added GROUP BY account
    ON CONFLICT (account, shard) DO UPDATE SET items = inbox_item_counts.items + EXCLUDED.items;
    RETURN NULL;
END
$$;

CREATE FUNCTION inbox_items_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO inbox_item_counts (account, shard, items)
    SELECT account, pg_backend_pid() % 32, -count(*) FROM deleted GROUP BY account
    ON CONFLICT (account, shard) DO UPDATE SET items = inbox_item_counts.items + EXCLUDED.items;
    -- the rows of an account that is gone (its items deleted by the cascade)
    DELETE FROM inbox_item_counts c
    WHERE c.account IN (SELECT DISTINCT account FROM deleted)
      AND NOT EXISTS (SELECT 1 FROM inbox_accounts a WHERE a.id = c.account);
    RETURN NULL;
END
$$;

CREATE TRIGGER inbox_items_added AFTER INSERT ON inbox_items
REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION inbox_items_added();

CREATE TRIGGER inbox_items_deleted AFTER DELETE ON inbox_items
REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION inbox_items_deleted();
