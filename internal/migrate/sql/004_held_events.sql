-- pgoutbox migration 4: ordered mode parks an aggregate's later events
-- behind a failing one, and queue-table vacuum settings.
--   held_by  set on an event parked behind an earlier event of its aggregate
--            (the id of that event) that failed; dead_at is set too, so the
--            event leaves the pending index and the claims never step over
--            it. The relay releases it when the failing event is published.
--            Held events are not dead letters (the view and the counts
--            exclude them).
ALTER TABLE {{.QTable}}
    ADD COLUMN IF NOT EXISTS held_by UUID;

CREATE OR REPLACE VIEW {{.QDeadLetterView}} AS
SELECT *
FROM {{.QTable}}
WHERE dead_at IS NOT NULL
  AND processed_at IS NULL
  AND held_by IS NULL
ORDER BY created_at;
{{if not .Partitioned}}
-- The outbox is a queue: every event is inserted, then updated or deleted
-- within milliseconds. PostgreSQL's default (vacuum once 20% of the table is
-- dead) lets millions of dead index entries pile up at the head of the
-- pending index on a busy outbox; vacuum it every 10,000 dead rows instead.
-- Change these with ALTER TABLE ... SET if your operators tune autovacuum.
ALTER TABLE {{.QTable}} SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 10000
);
{{- else}}
-- A partitioned table has no storage of its own: its partitions get these
-- settings (a relay sets them on each partition it creates).
ALTER TABLE {{.Partition 0}} SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000);
{{- end}}
