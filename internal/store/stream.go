package store

import "github.com/pgoutbox/outbox/internal/ident"

// Statements that do not depend on the table.
const (
	// Now reads the database's clock: scheduled rows are due by it, as
	// the claims decide.
	Now = `SELECT now()`
	// Snapshot is the current snapshot, as text: the WAL source waits until
	// the transactions it streamed are out of it before touching their rows.
	Snapshot = `SELECT pg_current_snapshot()::text`
	// MissingRelations returns which of the qualified names in $1 (text[])
	// do not exist; RelationExists whether $1 does.
	MissingRelations = `SELECT i FROM unnest($1::text[]) AS i WHERE to_regclass(i) IS NULL`
	RelationExists   = `SELECT to_regclass($1) IS NOT NULL`
	// LeaseSettings sets a lease's transaction up: its idle timeout ($1,
	// milliseconds as text), and commits that do not wait for the WAL
	// flush (a lost mark means a resend, which at-least-once allows).
	LeaseSettings = `SELECT set_config('idle_in_transaction_session_timeout', $1, true), set_config('synchronous_commit', 'off', true)`
	// CustomPlans plans the rest of a transaction's statements with their
	// parameters (see the engine's plans.go for why).
	CustomPlans = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`
)

// StreamQueries are the WAL source's statements on one outbox table,
// besides the marks it shares with the table source (Queries).
type StreamQueries struct {
	// Heads returns, for the aggregates of a stream batch ($1 text[]
	// types, $2 text[] ids), the first event of each on the table path
	// (head = true), one probe of the handoff order index each; and, by id
	// ($3 uuid[]), the batch's events already handed to the table path
	// (head = false). A batch event the stream still owns is never a head.
	// Columns: aggregate_type, aggregate_id, id, head.
	Heads string
	// Park parks a streamed event ($1) behind the table-path event of its
	// aggregate that holds it ($2), unless the table path owns it already.
	Park string
	// HandOff gives streamed events ($1 uuid[]) to the table path,
	// unpublished: scheduled for later, they are claimed when due.
	HandOff string
	// DeadUndecodable dead-letters a row ($1) the stream cannot decode,
	// with the reason ($2).
	DeadUndecodable string
}

// NewStream builds the WAL source's statements for n.
func NewStream(n ident.Names) *StreamQueries {
	t := n.QTable
	return &StreamQueries{
		Heads: `SELECT a.typ, a.agg, h.id, true
FROM unnest($1::text[], $2::text[]) AS a(typ, agg)
CROSS JOIN LATERAL (
  SELECT o.id FROM ` + t + ` AS o
  WHERE o.aggregate_type = a.typ AND o.aggregate_id = a.agg
    AND o.processed_at IS NULL AND (o.retry_after IS NOT NULL OR o.dead_at IS NOT NULL)
    AND NOT (o.id = ANY($3::uuid[]) AND o.retry_after IS NULL)
  ORDER BY o.seq
  LIMIT 1) AS h
UNION ALL
SELECT o.aggregate_type, o.aggregate_id, o.id, false FROM ` + t + ` AS o
WHERE o.id = ANY($3::uuid[]) AND o.processed_at IS NULL AND o.retry_after IS NOT NULL`,
		Park: `UPDATE ` + t + ` SET held_by = $2, dead_at = now(), retry_after = now(), seq = DEFAULT
WHERE id = $1 AND processed_at IS NULL AND retry_after IS NULL`,
		HandOff: `UPDATE ` + t + ` SET retry_after = COALESCE(retry_after, now()) WHERE id = ANY($1::uuid[]) AND processed_at IS NULL`,
		DeadUndecodable: `UPDATE ` + t + ` SET dead_at = now(), retry_after = COALESCE(retry_after, now()), last_error = $2
WHERE id = $1 AND processed_at IS NULL`,
	}
}

// ListenSQL is the LISTEN statement for n's wake-up channel.
func ListenSQL(n ident.Names) string { return "LISTEN " + ident.Quote(n.Channel) }
