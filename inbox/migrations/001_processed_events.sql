-- The processed_events table of an idempotent consumer, with the consumer's
-- name in the key so several consumers of one database keep separate records.
CREATE TABLE IF NOT EXISTS {{.QTable}} (
    consumer     TEXT        NOT NULL,
    event_id     UUID        NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    PRIMARY KEY (consumer, event_id)
);

-- Retention (Inbox.Cleanup) deletes one consumer's oldest rows.
CREATE INDEX IF NOT EXISTS {{.ProcessedIndex}} ON {{.QTable}} (consumer, processed_at);
