-- +goose Up
-- pgoutbox migration 8: the pending index goes.
-- Since migration 6 the ready index holds the same rows minus the scheduled
-- ones, and every statement that read the pending index (the claims, the
-- gauges) also leaves scheduled rows out, so the ready index serves it. Each
-- INSERT still added an entry to both: a second index entry, and a second
-- WAL record for a WAL relay to read, per event, for nothing.
DROP INDEX IF EXISTS "outbox_events_pending_idx";
