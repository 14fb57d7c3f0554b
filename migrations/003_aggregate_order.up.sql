-- +goose Up
-- pgoutbox migration 3: per-aggregate ordering.
-- In ordered mode the relay claims an event only when no earlier event of the
-- same aggregate is still unprocessed; this index answers that question with
-- one probe, and holds pending rows only (a marked row leaves it).
CREATE INDEX IF NOT EXISTS "outbox_events_aggregate_idx"
    ON "outbox_events" (aggregate_type, aggregate_id, seq)
    WHERE processed_at IS NULL;
