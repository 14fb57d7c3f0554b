-- +goose Up
-- pgoutbox migration 5: replay and archiving.
--   replay_id  set on a row a replay queued (the id of its row in the
--              replays table); NULL on every event written by the
--              application. A replay selects only rows where it is NULL,
--              so it never replays a replay's copies.
ALTER TABLE "outbox_events"
    ADD COLUMN IF NOT EXISTS replay_id UUID;

-- Replays are few next to live events: a partial index keeps counting and
-- cancelling a replay's rows cheap at no cost to other rows.
CREATE INDEX IF NOT EXISTS "outbox_events_replay_idx"
    ON "outbox_events" (replay_id)
    WHERE replay_id IS NOT NULL;

-- Processed rows moved out of the outbox table (outbox archive), in bounded
-- batches, so history outlives the hot table and replays can read it. seq is
-- unique across both tables (it comes from the outbox table's identity), so
-- it is the key; an event id appears twice when a same-id replay re-sent it.
CREATE TABLE IF NOT EXISTS "outbox_events_archive" (
    seq            BIGINT       PRIMARY KEY,
    id             UUID         NOT NULL,
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    headers        JSONB,
    attempts       INT          NOT NULL,
    created_at     TIMESTAMPTZ  NOT NULL,
    processed_at   TIMESTAMPTZ  NOT NULL,
    last_error     TEXT,
    replay_id      UUID,
    archived_at    TIMESTAMPTZ  NOT NULL DEFAULT NOW()
);

CREATE INDEX IF NOT EXISTS "outbox_events_arch_id_idx"
    ON "outbox_events_archive" (id);

CREATE INDEX IF NOT EXISTS "outbox_events_arch_rep_idx"
    ON "outbox_events_archive" (replay_id)
    WHERE replay_id IS NOT NULL;

-- One row per replay: what it selected, how many copies it queued, its state
-- (queuing, queued, cancelled, failed). Pending and delivered counts are read
-- from the rows themselves (replay_id).
CREATE TABLE IF NOT EXISTS "outbox_replays" (
    id          UUID        PRIMARY KEY,
    mode        TEXT        NOT NULL,
    selector    JSONB       NOT NULL,
    selected    BIGINT      NOT NULL DEFAULT 0,
    queued      BIGINT      NOT NULL DEFAULT 0,
    skipped     BIGINT      NOT NULL DEFAULT 0,
    cancelled   BIGINT      NOT NULL DEFAULT 0,
    state       TEXT        NOT NULL,
    error       TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    finished_at TIMESTAMPTZ
);
