package store

import (
	"fmt"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Replay header names, set on the copies a replay queues (defined once, in
// outboxtype, which consumers read).
const (
	HeaderReplayOf          = outboxtype.HeaderReplayOf
	HeaderReplayID          = outboxtype.HeaderReplayID
	HeaderOriginalCreatedAt = outboxtype.HeaderOriginalCreatedAt
)

// ReplayQueries are the statements of replay, archiving and cancel, on the
// outbox table, its archive table and its replays table (migration 5).
type ReplayQueries struct {
	// Select lists the delivered events a replay selects, from the outbox
	// table and the archive: id, seq, aggregate type and id, ordered by
	// aggregate then seq (the replay cuts batches between aggregates).
	// Filter parameters: $1 uuid[] ids (NULL: any), $2 event type, $3
	// aggregate type, $4 aggregate id ('' = any), $5 and $6 created_at
	// bounds (NULL: open; $5 inclusive, $6 exclusive).
	Select string
	// Count counts the selected events; Sample reads the first $7 of them
	// in seq order (dry run).
	Count  string
	Sample string
	// Lock takes the outbox table in SHARE ROW EXCLUSIVE mode for the rest
	// of the transaction: writers (and other replays) wait, and every
	// transaction that inserted before it has committed. So the copies a
	// batch inserts get consecutive seqs, with every lower seq visible.
	Lock string
	// MoveOriginals moves the delivered originals among $1 uuid[] to the
	// archive (a same-id replay: the outbox table's primary key holds one
	// row per id, and the copy takes it).
	MoveOriginals string
	// InsertCopies inserts at the tail, in original seq order, a copy of
	// each event of $1 uuid[] (read from either table), with id $2[i] (the
	// same id for a same-id replay), replay_id $3 and the replay headers;
	// $4 true marks a new-id replay (outbox-replay-of is set).
	InsertCopies string
	// Create, State, Progress and Finish keep the replays table's row.
	Create   string
	State    string
	Progress string
	Finish   string
	// Cancel marks replay $1 cancelled; CancelCopies deletes its copies not
	// yet delivered and releases what they held (ordered mode), returning
	// (deleted, released).
	Cancel       string
	CancelCopies string
	// HasPending says whether replay $1 has copies not yet delivered.
	HasPending string
	// List reads the last $1 replays with their pending and delivered
	// counts; Totals counts replayed rows in the outbox table: pending,
	// delivered, and replays still queuing or pending.
	List   string
	Totals string
	// CancelEvents deletes the unpublished events among $1 uuid[] and
	// releases the events each one held, returning (deleted ids, released).
	// Published lists which of $1 are published (in either table).
	CancelEvents string
	Published    string
	// Archive moves up to $2 rows processed more than $1 (interval) ago to
	// the archive, in one statement; its row count is the rows moved.
	Archive string
	// ArchiveCount counts the archive's rows.
	ArchiveCount string
}

// NewReplay builds the statements for n (cancels: see NewAdmin); it fails
// when a derived name is too long (the migration fails the same way).
func NewReplay(n ident.Names, cancels bool) (*ReplayQueries, error) {
	t := n.QTable
	arch, err := n.QArchive()
	if err != nil {
		return nil, err
	}
	reps, err := n.QReplays()
	if err != nil {
		return nil, err
	}
	const filter = `($1::uuid[] IS NULL OR id = ANY($1::uuid[]))
    AND ($2 = '' OR event_type = $2) AND ($3 = '' OR aggregate_type = $3) AND ($4 = '' OR aggregate_id = $4)
    AND ($5::timestamptz IS NULL OR created_at >= $5) AND ($6::timestamptz IS NULL OR created_at < $6)`
	// source is every delivered original event: the outbox table's
	// processed rows and the archive's rows, copies of earlier replays left
	// out. An original is in exactly one of the two tables (archiving and
	// same-id replays move it in one statement).
	source := func(cols, where string) string {
		return `SELECT ` + cols + ` FROM ` + t + `
  WHERE processed_at IS NOT NULL AND replay_id IS NULL AND ` + where + `
UNION ALL
SELECT ` + cols + ` FROM ` + arch + `
  WHERE replay_id IS NULL AND ` + where
	}
	const archCols = `seq, id, aggregate_type, aggregate_id, event_type, payload, headers, attempts, created_at, processed_at, last_error, replay_id`
	released := func(gone, exclude string) string {
		return `released AS (
    UPDATE ` + t + ` AS s SET dead_at = NULL, held_by = NULL
    FROM ` + gone + ` WHERE s.held_by = ` + gone + `.id AND s.processed_at IS NULL` + exclude + `
    RETURNING 1)`
	}
	return &ReplayQueries{
		Select: `SELECT id, seq, aggregate_type, aggregate_id FROM (
` + source("id, seq, aggregate_type, aggregate_id", filter) + `) AS s
ORDER BY aggregate_type, aggregate_id, seq`,
		Count: `SELECT count(*) FROM (
` + source("1 AS one", filter) + `) AS s`,
		Sample: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers, ` + shown("created_at") + `, ` + shown("processed_at") + ` FROM (
` + source("id, seq, aggregate_type, aggregate_id, event_type, payload, headers, created_at, processed_at", filter) + `) AS s
ORDER BY seq
LIMIT $7`,
		Lock: `LOCK TABLE ` + t + ` IN SHARE ROW EXCLUSIVE MODE`,
		MoveOriginals: `WITH moved AS (
    DELETE FROM ` + t + `
    WHERE id = ANY($1::uuid[]) AND processed_at IS NOT NULL AND replay_id IS NULL
    RETURNING ` + archCols + `)
INSERT INTO ` + arch + ` (` + archCols + `)
SELECT ` + archCols + ` FROM moved
ON CONFLICT (seq) DO NOTHING`,
		InsertCopies: `INSERT INTO ` + t + ` (id, aggregate_type, aggregate_id, event_type, payload, headers, replay_id)
SELECT b.new_id, s.aggregate_type, s.aggregate_id, s.event_type, s.payload,
       CASE WHEN jsonb_typeof(s.headers) = 'object' THEN s.headers ELSE '{}'::jsonb END
         || jsonb_build_object('` + HeaderReplayID + `', $3::uuid::text,
              '` + HeaderOriginalCreatedAt + `', to_char(s.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
         || CASE WHEN $4 THEN jsonb_build_object('` + HeaderReplayOf + `', s.id::text) ELSE '{}'::jsonb END,
       $3::uuid
FROM unnest($1::uuid[], $2::uuid[]) AS b(id, new_id)
JOIN (` + source("id, seq, aggregate_type, aggregate_id, event_type, payload, headers, created_at", "id = ANY($1::uuid[])") + `) AS s
  ON s.id = b.id
WHERE NOT EXISTS (SELECT 1 FROM ` + t + ` AS o WHERE o.id = b.new_id)
ORDER BY s.seq
ON CONFLICT DO NOTHING`,
		Create:   `INSERT INTO ` + reps + ` (id, mode, selector, selected, state) VALUES ($1, $2, $3, $4, 'queuing')`,
		State:    `SELECT state FROM ` + reps + ` WHERE id = $1 FOR UPDATE`,
		Progress: `UPDATE ` + reps + ` SET queued = queued + $2, skipped = skipped + $3 WHERE id = $1`,
		Finish: `UPDATE ` + reps + ` SET state = $2, error = NULLIF($3, ''), finished_at = now()
WHERE id = $1 AND state = 'queuing'`,
		Cancel: `UPDATE ` + reps + ` SET state = 'cancelled', finished_at = COALESCE(finished_at, now())
WHERE id = $1 RETURNING id`,
		HasPending: `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE replay_id = $1 AND processed_at IS NULL)`,
		CancelCopies: `WITH gone AS (
    DELETE FROM ` + t + ` WHERE replay_id = $1 AND processed_at IS NULL
    RETURNING id),
` + released("gone", ` AND s.replay_id IS DISTINCT FROM $1`) + `,
counted AS (
    UPDATE ` + reps + ` SET cancelled = cancelled + (SELECT count(*) FROM gone) WHERE id = $1)` + cancelled(n, cancels) + `
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM released)`,
		List: `SELECT r.id, r.mode, r.selector, r.selected, r.queued, r.skipped, r.cancelled, r.state,
       COALESCE(r.error, ''), r.created_at, r.finished_at,
       (SELECT count(*) FROM ` + t + ` AS o WHERE o.replay_id = r.id AND o.processed_at IS NULL),
       (SELECT count(*) FROM ` + t + ` AS o WHERE o.replay_id = r.id AND o.processed_at IS NOT NULL)
         + (SELECT count(*) FROM ` + arch + ` AS a WHERE a.replay_id = r.id)
FROM ` + reps + ` AS r
WHERE ($2::uuid IS NULL OR r.id = $2)
ORDER BY r.created_at DESC, r.id
LIMIT $1`,
		Totals: `SELECT count(*) FILTER (WHERE processed_at IS NULL),
       count(*) FILTER (WHERE processed_at IS NOT NULL),
       count(DISTINCT replay_id) FILTER (WHERE processed_at IS NULL)
FROM ` + t + ` WHERE replay_id IS NOT NULL`,
		CancelEvents: `WITH gone AS (
    DELETE FROM ` + t + ` WHERE id = ANY($1::uuid[]) AND processed_at IS NULL
    RETURNING id),
` + released("gone", ` AND NOT (s.id = ANY($1::uuid[]))`) + cancelled(n, cancels) + `
SELECT ARRAY(SELECT id FROM gone), (SELECT count(*) FROM released)`,
		Published: `SELECT id FROM ` + t + ` WHERE id = ANY($1::uuid[]) AND processed_at IS NOT NULL
UNION
SELECT id FROM ` + arch + ` WHERE id = ANY($1::uuid[])`,
		Archive: fmt.Sprintf(`WITH moved AS (
    DELETE FROM %[1]s WHERE id IN (
        SELECT id FROM %[1]s
        WHERE processed_at IS NOT NULL AND processed_at < now() - $1::interval
        ORDER BY processed_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING %[3]s)
INSERT INTO %[2]s (%[3]s)
SELECT %[3]s FROM moved
ON CONFLICT (seq) DO NOTHING`, t, arch, archCols),
		ArchiveCount: `SELECT count(*) FROM ` + arch,
	}, nil
}
