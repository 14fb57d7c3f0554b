-- Queries on pgoutbox's outbox table for sqlc users (sqlc.yaml generates
-- them against the migrations in ../migrations). They follow the contract
-- the relay relies on:
--   - write events in the same transaction as the business change
--     (outboxdb.New(tx)), never in a transaction of their own;
--   - an event is pending while processed_at, dead_at and deliver_at are
--     NULL (deliver_at holds a scheduled event until it is due); the relay
--     claims pending events in seq order;
--   - a dead letter has dead_at set and held_by NULL; an event with held_by
--     set is parked behind an earlier failing event of its aggregate
--     (ordered mode) and is not a dead letter.
-- The relay's own statements (claim, mark, retry bookkeeping) are not here:
-- they belong to the relay.

-- name: InsertEvent :one
-- One event. id defaults to a random UUID; pass one (e.g. a UUIDv7, as
-- outbox.Writer does) to know it before the commit.
INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers)
VALUES (COALESCE(sqlc.narg('id')::uuid, gen_random_uuid()),
        @aggregate_type, @aggregate_id, @event_type, @payload, sqlc.narg('headers'))
RETURNING id, seq, created_at;

-- name: InsertEvents :copyfrom
-- Many events with COPY, the fastest way to write a batch; seq follows the
-- order of the rows given. The ids are the column's default (random UUIDs).
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES (@aggregate_type, @aggregate_id, @event_type, @payload, @headers);

-- name: GetEvent :one
SELECT * FROM outbox_events WHERE id = @id;

-- name: CountPending :one
-- What outbox_events_pending reports.
SELECT count(*) FROM outbox_events
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL;

-- name: OldestPendingCreatedAt :one
-- created_at of the first pending event in claim order (what
-- outbox_oldest_pending_age_seconds measures); no row when none is pending.
SELECT created_at FROM outbox_events
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
ORDER BY seq
LIMIT 1;

-- name: PendingByEventType :many
-- Pending events per type, with the oldest's created_at: which type is late.
SELECT event_type, count(*) AS pending, min(created_at)::timestamptz AS oldest
FROM outbox_events
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
GROUP BY event_type
ORDER BY oldest;

-- name: CountDeadLetters :one
-- What outbox_dead_letters reports.
SELECT count(*) FROM outbox_events
WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL;

-- name: ListDeadLetters :many
-- Dead letters, oldest first, with why they failed.
SELECT id, aggregate_type, aggregate_id, event_type, attempts,
       COALESCE(last_error, '')::text AS last_error, created_at, dead_at
FROM outbox_events
WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL
ORDER BY created_at, seq
LIMIT @max_rows;

-- name: RetryEvent :execrows
-- Re-queues one unprocessed event (a dead letter, one in retry backoff, a
-- held one) for an immediate publish with a fresh attempt count, as
-- `outbox retry ID` does. 0 rows: no such event, or already published.
UPDATE outbox_events
SET attempts = 0, retry_after = now(), dead_at = NULL, held_by = NULL
WHERE processed_at IS NULL AND id = @id;

-- name: RetryDeadLetters :execrows
-- Re-queues every dead letter, or those of one event type ('' for all), as
-- `outbox retry --all` / `--type` does.
UPDATE outbox_events
SET attempts = 0, retry_after = now(), dead_at = NULL
WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL
  AND (@event_type::text = '' OR event_type = @event_type::text);

-- name: DeletePublishedBefore :execrows
-- Deletes events published before a time, at most max_rows per call (call
-- it until it returns 0): the relay's --retention does the same.
DELETE FROM outbox_events
WHERE id IN (
    SELECT e.id FROM outbox_events AS e
    WHERE e.processed_at IS NOT NULL AND e.processed_at < @before::timestamptz
    ORDER BY e.processed_at
    LIMIT @max_rows);
