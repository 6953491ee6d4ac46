-- Free text: what the spec takes as "any string" (access key names, inbox.md §3.9; the time zone's
-- name, scheduler.md §5) is kept as its UTF-8 bytes (issue 29 point 1): a PostgreSQL text
-- value cannot hold U+0000, and both engines must accept exactly the same inputs.

ALTER TABLE inbox_access_keys ALTER COLUMN name TYPE bytea USING convert_to(name, 'UTF8');
ALTER TABLE scheduler_access_keys ALTER COLUMN name TYPE bytea USING convert_to(name, 'UTF8');
ALTER TABLE scheduler_settings ALTER COLUMN name TYPE bytea USING convert_to(name, 'UTF8');

-- A delivery's reason: the server's words, but an import file's or an original database's
-- reason is any string too.
ALTER TABLE trigger_attempts ALTER COLUMN reason TYPE bytea USING convert_to(reason, 'UTF8');
