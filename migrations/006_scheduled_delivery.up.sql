-- +goose Up
-- pgoutbox migration 6: scheduled delivery.
--   deliver_at  set on an event written with a delivery time in the future
--               (Event.DeliverAt or Delay); NULL on every other event, so a
--               plain INSERT keeps meaning "deliver now". The relay claims
--               only rows where it is NULL, and clears it once it is due.
ALTER TABLE "outbox_events"
    ADD COLUMN IF NOT EXISTS deliver_at TIMESTAMPTZ;

-- The rows the relay may claim now, in claim order: the pending index minus
-- scheduled rows, so however many events wait for a later time, a claim
-- never reads them.
CREATE INDEX IF NOT EXISTS "outbox_events_ready_idx"
    ON "outbox_events" (seq)
    WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL;

-- Scheduled rows by due time: the relay's release of due rows and the
-- scheduled count and next due time read only this index.
CREATE INDEX IF NOT EXISTS "outbox_events_sched_idx"
    ON "outbox_events" (deliver_at)
    WHERE deliver_at IS NOT NULL AND processed_at IS NULL;
