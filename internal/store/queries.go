// Package store holds every SQL statement the relay and the admin functions
// run, built once per outbox table from quoted identifiers. This file is the
// one place to read pgoutbox's SQL (besides the migrations).
package store

import "github.com/pgoutbox/outbox/internal/ident"

// Queries are the statements for one outbox table.
type Queries struct {
	// Claim locks up to $1 claimable rows with seq > $2 in insertion order.
	// SKIP LOCKED lets several relays claim disjoint batches; the predicate
	// matches the partial pending index, so processed rows are never read,
	// and the floor $2 starts the index scan past the entries of rows
	// processed since the last VACUUM (see engine's cursor).
	Claim string
	// ClaimOrdered is Claim for ordered mode: a row is claimable only when no
	// earlier row of its aggregate is unprocessed, whether that row is
	// pending, waiting for its retry, locked by another relay or a dead
	// letter. So at most one event per aggregate is ever in flight, and a
	// failing event holds back only its own aggregate. $2 is the floor, as
	// for Claim.
	ClaimOrdered string
	// LowWater is the lowest seq of a row that is pending and not waiting
	// for a retry (NULL if none): ordered mode's floor.
	LowWater string
	// BlockedAggregates counts aggregates held back by a dead letter.
	BlockedAggregates string
	// MarkPublished marks a batch published in one statement ($1 uuid[]):
	// processed_at = now(), or DELETE when processed rows are not kept.
	MarkPublished string
	// MarkOutcomes records a batch with mixed outcomes in one statement:
	// $1 uuid[] published; failures as $2 uuid[], $3 text[] error, $4
	// bigint[] retry delay in ms, $5 bool[] dead-letter now.
	MarkOutcomes string
	// CountPending and CountDead feed the gauges; OldestPending is the
	// created_at of the first pending row in claim order (one index probe).
	CountPending  string
	OldestPending string
	CountDead     string
	// Cleanup deletes up to $2 rows processed more than $1 (interval) ago.
	Cleanup string
	// Status aggregates per event type: pending, dead, published in the last
	// minute and hour, oldest pending created_at. Each branch reads through
	// its own partial index.
	Status string
	// DeadLetters lists dead letters: $1 event type ('' = any), $2 minimum
	// age (interval), $3 limit.
	DeadLetters string
	// RetryIDs re-queues unprocessed rows by id ($1 uuid[]); RetryDead
	// re-queues dead letters of a type ($1, '' = every type). The Count
	// variants are their dry runs.
	RetryIDs       string
	RetryDead      string
	CountRetryIDs  string
	CountRetryDead string
	// CheckColumns fails when the table is missing or lacks a column this
	// version needs.
	CheckColumns string
}

// New builds the statements for n. With deleteProcessed, published rows are
// deleted instead of marked.
func New(n ident.Names, deleteProcessed bool) *Queries {
	t := n.QTable
	return &Queries{
		Claim: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers, created_at, attempts
FROM ` + t + `
WHERE processed_at IS NULL AND dead_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())
  AND seq > $2
ORDER BY seq
LIMIT $1
FOR UPDATE SKIP LOCKED`,
		ClaimOrdered: `SELECT o.id, o.seq, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers, o.created_at, o.attempts
FROM ` + t + ` AS o
WHERE o.processed_at IS NULL AND o.dead_at IS NULL
  AND (o.retry_after IS NULL OR o.retry_after <= now())
  AND o.seq > $2
  AND NOT EXISTS (
    SELECT 1 FROM ` + t + ` AS p
    WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
      AND p.processed_at IS NULL AND p.seq < o.seq)
ORDER BY o.seq
LIMIT $1
FOR UPDATE OF o SKIP LOCKED`,
		LowWater: `SELECT min(seq) FROM ` + t + `
WHERE processed_at IS NULL AND dead_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())`,
		BlockedAggregates: `SELECT count(*) FROM (
    SELECT DISTINCT d.aggregate_type, d.aggregate_id
    FROM ` + t + ` AS d
    WHERE d.dead_at IS NOT NULL AND d.processed_at IS NULL
      AND EXISTS (
        SELECT 1 FROM ` + t + ` AS s
        WHERE s.aggregate_type = d.aggregate_type AND s.aggregate_id = d.aggregate_id
          AND s.processed_at IS NULL AND s.seq > d.seq)) AS b`,
		MarkPublished: markPublished(t, deleteProcessed),
		MarkOutcomes:  markOutcomes(t, deleteProcessed),
		CountPending:  `SELECT count(*) FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL`,
		OldestPending: `SELECT created_at FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL ORDER BY seq LIMIT 1`,
		CountDead:     `SELECT count(*) FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL`,
		Cleanup: `DELETE FROM ` + t + ` WHERE id IN (
    SELECT id FROM ` + t + `
    WHERE processed_at IS NOT NULL AND processed_at < now() - $1::interval
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`,
		Status: `SELECT event_type, sum(p)::bigint, sum(d)::bigint, sum(m)::bigint, sum(h)::bigint, min(oldest)
FROM (
    SELECT event_type, 1 AS p, 0 AS d, 0 AS m, 0 AS h, created_at AS oldest
    FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL
  UNION ALL
    SELECT event_type, 0, 1, 0, 0, NULL
    FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL
  UNION ALL
    SELECT event_type, 0, 0, (processed_at >= now() - interval '1 minute')::int, 1, NULL
    FROM ` + t + ` WHERE processed_at IS NOT NULL AND processed_at >= now() - interval '1 hour'
) s
GROUP BY event_type
ORDER BY event_type`,
		DeadLetters: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
       attempts, created_at, processed_at, retry_after, dead_at, COALESCE(last_error, '')
FROM ` + t + `
WHERE dead_at IS NOT NULL AND processed_at IS NULL
  AND ($1 = '' OR event_type = $1)
  AND created_at <= now() - $2::interval
ORDER BY seq
LIMIT $3`,
		RetryIDs:       `UPDATE ` + t + ` SET attempts = 0, retry_after = NULL, dead_at = NULL WHERE processed_at IS NULL AND id = ANY($1::uuid[])`,
		RetryDead:      `UPDATE ` + t + ` SET attempts = 0, retry_after = NULL, dead_at = NULL WHERE dead_at IS NOT NULL AND processed_at IS NULL AND ($1 = '' OR event_type = $1)`,
		CountRetryIDs:  `SELECT count(*) FROM ` + t + ` WHERE processed_at IS NULL AND id = ANY($1::uuid[])`,
		CountRetryDead: `SELECT count(*) FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL AND ($1 = '' OR event_type = $1)`,
		CheckColumns: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
       attempts, created_at, processed_at, retry_after, last_error, dead_at
FROM ` + t + ` LIMIT 0`,
	}
}

func markPublished(t string, deleteProcessed bool) string {
	if deleteProcessed {
		return `DELETE FROM ` + t + ` WHERE id = ANY($1::uuid[])`
	}
	return `UPDATE ` + t + ` SET processed_at = now() WHERE id = ANY($1::uuid[])`
}

func markOutcomes(t string, deleteProcessed bool) string {
	published := `UPDATE ` + t + ` SET processed_at = now() WHERE id = ANY($1::uuid[])`
	if deleteProcessed {
		published = `DELETE FROM ` + t + ` WHERE id = ANY($1::uuid[])`
	}
	return `WITH published AS (` + published + `)
UPDATE ` + t + ` AS o SET
    attempts    = o.attempts + 1,
    last_error  = f.err,
    retry_after = now() + f.delay_ms * interval '1 millisecond',
    dead_at     = CASE WHEN f.dead THEN now() END
FROM unnest($2::uuid[], $3::text[], $4::bigint[], $5::bool[]) AS f(id, err, delay_ms, dead)
WHERE o.id = f.id`
}
