-- +goose Up
-- pgoutbox migration 9: where cancellations stand, for the WAL source.
-- A WAL relay publishes what the WAL says was committed, even after the
-- row is gone: outbox cancel, replay cancel and dead-letter discards delete
-- rows and raise lsn to the WAL position of their transaction, and the
-- stream checks that rows committed before it still exist before it
-- publishes them. One row; a table source never reads it.
CREATE TABLE IF NOT EXISTS "outbox_cancels" (
    one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    lsn PG_LSN  NOT NULL
);

INSERT INTO "outbox_cancels" (lsn) VALUES ('0/0') ON CONFLICT DO NOTHING;
