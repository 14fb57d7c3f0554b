package store

import "github.com/pgoutbox/outbox/internal/ident"

// ConsoleQueries are the operator console's reads. Each is bounded (a LIMIT,
// a time window or a partial index) so a page stays fast on a large table.
type ConsoleQueries struct {
	// PublishedPerMinute counts the rows processed in each of the last $1
	// minutes (the current one included): minute, count. It reads the
	// processed index only.
	PublishedPerMinute string
	// DeadInGroup lists the dead letters deadFilter selects ($1 event type,
	// $2 error group, $3 minimum age), in insertion order, at most $4, with
	// the columns of EventsByID.
	DeadInGroup string
	// Timeline reads an aggregate's events ($1 type, '' = any; $2 id), the
	// latest $3 first. Unprocessed events come from the aggregate index;
	// published ones only from the latest $4 published rows, because no
	// index covers processed rows by aggregate.
	Timeline string
	// Blocked lists aggregates with a dead letter and later unprocessed
	// events behind it: type, id, the dead letter's id, event type and
	// error group, how many events wait behind it; at most $1.
	Blocked string
}

// NewConsole builds the console's statements for n.
func NewConsole(n ident.Names) *ConsoleQueries {
	t := n.QTable
	return &ConsoleQueries{
		PublishedPerMinute: `SELECT date_trunc('minute', processed_at) AS minute, count(*)
FROM ` + t + `
WHERE processed_at IS NOT NULL
  AND processed_at >= date_trunc('minute', now()) - ($1::int - 1) * interval '1 minute'
  AND processed_at <= now() -- a plain INSERT may say 'infinity'
GROUP BY 1
ORDER BY 1`,
		DeadInGroup: eventCols + t + `
WHERE ` + deadFilter + `
ORDER BY seq
LIMIT $4`,
		Timeline: `SELECT * FROM (
  (SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
          attempts, ` + shownEventTimes + `, COALESCE(last_error, ''), held_by
   FROM ` + t + `
   WHERE processed_at IS NULL AND ($1 = '' OR aggregate_type = $1) AND aggregate_id = $2
   ORDER BY seq DESC
   LIMIT $3)
  UNION ALL
  (SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
          attempts, ` + shownEventTimes + `, COALESCE(last_error, ''), held_by
   FROM (SELECT * FROM ` + t + `
         WHERE processed_at IS NOT NULL
         ORDER BY processed_at DESC
         LIMIT $4) AS recent
   WHERE ($1 = '' OR aggregate_type = $1) AND aggregate_id = $2)
) AS e
ORDER BY seq DESC
LIMIT $3`,
		Blocked: `SELECT d.aggregate_type, d.aggregate_id, d.id, d.event_type, ` + ErrorGroupExpr + `, b.behind
FROM ` + t + ` AS d
CROSS JOIN LATERAL (
    SELECT count(*) AS behind FROM ` + t + ` AS s
    WHERE s.aggregate_type = d.aggregate_type AND s.aggregate_id = d.aggregate_id
      AND s.processed_at IS NULL AND s.seq > d.seq) AS b
WHERE d.dead_at IS NOT NULL AND d.processed_at IS NULL AND d.held_by IS NULL AND b.behind > 0
ORDER BY d.seq
LIMIT $1`,
	}
}
