-- pgoutbox migration 1: the minimal outbox table, the eight columns a
-- hand-written outbox usually has, so a plain INSERT of those columns keeps
-- working. IF NOT EXISTS lets a team that already created such a table adopt
-- pgoutbox: migration 2 then adds what the relay needs.
CREATE TABLE IF NOT EXISTS {{.QTable}} (
    id             UUID         PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
);
