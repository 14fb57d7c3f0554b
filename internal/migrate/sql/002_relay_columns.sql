-- pgoutbox migration 2: what a production relay needs on top of the minimal table.
--   seq          insertion order, assigned by the table (stable ordering;
--                created_at ties and clock skew make it unfit for that)
--   retry_after  exponential backoff: the relay skips the row until then
--   last_error   why the last publish failed (dead-letter triage)
--   headers      trace context and user metadata, sent as message headers
--   dead_at      set when the row became a dead letter (max attempts reached
--                or a permanent error); the relay never claims it again
ALTER TABLE {{.QTable}}
    ADD COLUMN IF NOT EXISTS seq         BIGINT GENERATED ALWAYS AS IDENTITY,
    ADD COLUMN IF NOT EXISTS retry_after TIMESTAMPTZ,
    ADD COLUMN IF NOT EXISTS last_error  TEXT,
    ADD COLUMN IF NOT EXISTS headers     JSONB,
    ADD COLUMN IF NOT EXISTS dead_at     TIMESTAMPTZ;

-- The partial index over pending rows, in claim order. It holds only rows
-- the relay may still claim, so it stays small however many processed rows
-- are retained, and the claim query never reads a processed row.
CREATE INDEX IF NOT EXISTS {{.PendingIndex}}
    ON {{.QTable}} (seq)
    WHERE processed_at IS NULL AND dead_at IS NULL;

-- Cleanup and "published in the last hour" read processed rows by age.
CREATE INDEX IF NOT EXISTS {{.ProcessedIndex}}
    ON {{.QTable}} (processed_at)
    WHERE processed_at IS NOT NULL;

-- Dead letters are few; this keeps listing and counting them cheap.
CREATE INDEX IF NOT EXISTS {{.DeadIndex}}
    ON {{.QTable}} (dead_at)
    WHERE dead_at IS NOT NULL AND processed_at IS NULL;

-- The dead-letter view, defined by dead_at instead of a
-- hard-coded attempts threshold, so it agrees with the relay's max attempts
-- and with permanent errors.
CREATE OR REPLACE VIEW {{.QDeadLetterView}} AS
SELECT *
FROM {{.QTable}}
WHERE dead_at IS NOT NULL
  AND processed_at IS NULL
ORDER BY created_at;
