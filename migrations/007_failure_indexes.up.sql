-- +goose Up
-- pgoutbox migration 7: indexes of the failing and held events.
-- Each holds only events that failed or wait behind a failure: a writer's
-- row and a published row are in none of them, so the happy path pays
-- nothing, and a large backlog of failing or held events costs the relay's
-- periodic statements (ordered mode's housekeeping, the gauges) a few pages
-- instead of a read of every such row.

-- The held events, by holder: a published holder releases its events, and
-- the housekeeping finds holders that are gone, through this index.
CREATE INDEX IF NOT EXISTS "outbox_events_held_idx"
    ON "outbox_events" (held_by)
    WHERE held_by IS NOT NULL AND processed_at IS NULL;

-- The events waiting for a retry, by retry time: the housekeeping reads the
-- ones still waiting (retry_after in the future) to park what arrived behind
-- them.
CREATE INDEX IF NOT EXISTS "outbox_events_retry_idx"
    ON "outbox_events" (retry_after)
    WHERE processed_at IS NULL AND dead_at IS NULL AND retry_after IS NOT NULL;

-- The dead letters proper (held events left out), as the dead-letter view
-- defines them: the counts, the blocked aggregates and the parking read them
-- here however many events are held.
CREATE INDEX IF NOT EXISTS "outbox_events_dlq_idx"
    ON "outbox_events" (dead_at)
    WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL;
