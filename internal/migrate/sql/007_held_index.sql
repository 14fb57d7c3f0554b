-- pgoutbox migration 7: the held events, by holder.
-- Ordered mode releases the events a failing event held once it is
-- published, and the housekeeping releases those whose holder is gone. Both
-- find them here, instead of reading every pending row of the aggregate or
-- every held row. A writer's row (held_by NULL) is not in this index.
CREATE INDEX IF NOT EXISTS {{.HeldIndex}}
    ON {{.QTable}} (held_by)
    WHERE held_by IS NOT NULL AND processed_at IS NULL;
