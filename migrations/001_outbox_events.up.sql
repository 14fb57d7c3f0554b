-- +goose Up
-- pgoutbox migration 1: the article's outbox table, columns, types and
-- defaults unchanged, so the article's plain INSERT keeps working.
-- IF NOT EXISTS lets a team that already created the article's table adopt
-- pgoutbox: migration 2 then adds what the relay needs.
CREATE TABLE IF NOT EXISTS "outbox_events" (
    id             UUID         PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
);
