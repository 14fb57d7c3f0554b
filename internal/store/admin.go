package store

import "github.com/pgoutbox/outbox/internal/ident"

// errorNorm is last_error with event ids and numbers replaced, so "offset
// 17 of 5a1e..." and "offset 18 of 9b2c..." read alike.
const errorNorm = `regexp_replace(regexp_replace(COALESCE(last_error, ''),
    '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'),
    '[0-9]+', '<n>', 'g')`

// ErrorGroupExpr is the key dead letters are grouped by: errorNorm, at most
// 200 characters. A longer error keeps its first 80 and its last 115
// characters around " ... " (ASCII: a LATIN1 database refuses
// a query holding "…"): wrapped errors put the cause last, so the tail
// is what tells two groups apart. An empty or NULL error makes the empty group.
// Retry and Discard select by the same expression, so a group can be acted
// on as it is shown.
const ErrorGroupExpr = `(CASE WHEN length(` + errorNorm + `) <= 200 THEN ` + errorNorm + `
    ELSE left(` + errorNorm + `, 80) || ' ... ' || right(` + errorNorm + `, 115) END)`

// deadFilter selects dead letters (held events excluded) by $1 event type
// (empty: any), $2 error group (NULL: any; empty: the group of the dead
// letters that recorded no error) and $3 minimum age (interval).
const deadFilter = `dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL
  AND ($1 = '' OR event_type = $1)
  AND ($2::text IS NULL OR ` + ErrorGroupExpr + ` = $2::text)
  AND created_at <= now() - $3::interval`

var eventCols = `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
       attempts, ` + shownEventTimes + `, COALESCE(last_error, ''), held_by
FROM `

// AdminQueries are the operator's statements on dead letters and single
// events, beside the relay's in Queries.
type AdminQueries struct {
	// RetryDead re-queues the dead letters deadFilter selects; CountDead is
	// its dry run.
	RetryDead string
	CountDead string
	// DiscardDead deletes the dead letters deadFilter selects and releases
	// the events each one held (ordered mode), in one statement; it returns
	// (deleted, released). DiscardIDs does the same for the dead letters
	// among $1 uuid[]; CountDiscardIDs is its dry run.
	DiscardDead     string
	DiscardIDs      string
	CountDiscardIDs string
	// DeadGroups counts dead letters per event type and error group: type,
	// group, count, first and last dead_at, the first id of the group. $1
	// true groups by error alone (event type returned as '').
	DeadGroups string
	// EventsByID reads the events among $1 uuid[]: the columns of
	// DeadLetters plus held_by.
	EventsByID string
	// Unprocessed returns which of $1 uuid[] exist and are not processed.
	Unprocessed string
}

// NewAdmin builds the operator's statements for n; with cancels, its
// deletions raise the cancellations table's position (migration 9).
func NewAdmin(n ident.Names, cancels bool) *AdminQueries {
	t := n.QTable
	discard := func(where string) string {
		return `WITH gone AS (
    DELETE FROM ` + t + ` WHERE ` + where + `
    RETURNING id),
released AS (
    UPDATE ` + t + ` AS s SET dead_at = NULL, held_by = NULL
    FROM gone WHERE s.held_by = gone.id AND s.processed_at IS NULL
    RETURNING 1)` + cancelled(n, cancels) + `
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM released)`
	}
	const deadByID = `dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL AND id = ANY($1::uuid[])`
	return &AdminQueries{
		RetryDead:       `UPDATE ` + t + ` SET attempts = 0, retry_after = now(), dead_at = NULL WHERE ` + deadFilter,
		CountDead:       `SELECT count(*) FROM ` + t + ` WHERE ` + deadFilter,
		DiscardDead:     discard(deadFilter),
		DiscardIDs:      discard(deadByID),
		CountDiscardIDs: `SELECT count(*) FROM ` + t + ` WHERE ` + deadByID,
		DeadGroups: `SELECT CASE WHEN $1 THEN '' ELSE event_type END AS type, ` + ErrorGroupExpr + ` AS grp,
       count(*), ` + shown("min(dead_at)") + `, ` + shown("max(dead_at)") + `, (array_agg(id ORDER BY seq))[1]
FROM ` + t + `
WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL
GROUP BY 1, 2
ORDER BY 3 DESC, 1, 2`,
		EventsByID: eventCols + t + `
WHERE id = ANY($1::uuid[])
ORDER BY seq`,
		Unprocessed: `SELECT id FROM ` + t + ` WHERE processed_at IS NULL AND id = ANY($1::uuid[])`,
	}
}
