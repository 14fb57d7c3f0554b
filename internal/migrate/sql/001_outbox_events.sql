-- pgoutbox migration 1: the minimal outbox table, the eight columns a
-- hand-written outbox usually has, so a plain INSERT of those columns keeps
-- working. IF NOT EXISTS lets a team that already created such a table adopt
-- pgoutbox: migration 2 then adds what the relay needs.
{{- if .Partitioned}}
-- Partitioned (outbox migrate --partitioned): partitions of seq ranges, so
-- a WAL relay drops delivered events a partition at a time instead of
-- leaving them to vacuum. PostgreSQL 15 has no identity column on a
-- partitioned table and wants the partition key in the primary key: seq
-- takes its values from a sequence, and the key is (id, seq).
CREATE SEQUENCE IF NOT EXISTS {{.SeqSequence}};
CREATE TABLE IF NOT EXISTS {{.QTable}} (
    id             UUID         NOT NULL DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ,
    seq            BIGINT       NOT NULL DEFAULT {{.SeqDefault}},
    PRIMARY KEY (id, seq)
) PARTITION BY RANGE (seq);
ALTER SEQUENCE {{.SeqSequence}} OWNED BY {{.QTable}}.seq;
-- No default partition: a relay detaches old partitions CONCURRENTLY,
-- which PostgreSQL refuses when one exists.
CREATE TABLE IF NOT EXISTS {{.Partition 0}} PARTITION OF {{.QTable}} FOR VALUES FROM (0) TO ({{.FirstPartitionUpper}});
COMMENT ON TABLE {{.Partition 0}} IS 'pgoutbox partition';
{{- else}}
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
{{- end}}
