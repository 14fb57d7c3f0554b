// Package store holds every SQL statement the relay and the admin functions
// run on the outbox table, built once per table from quoted identifiers:
// queries.go (claims, marks, gauges), stream.go (the WAL source's), admin.go,
// replay.go, console.go, privileges.go. The other home of SQL is
// internal/wal: replication slots, publications and partitions. The
// migrations are in migrations/.
package store

import (
	"strings"

	"github.com/pgoutbox/outbox/internal/ident"
)

// InlinePayloadMax is the largest stored body (pg_column_size of the
// payload plus the headers: after compression, before any detoasting) a
// claim returns with its row. A larger body comes back NULL, with its
// stored size, and the relay reads it with Payloads only if it fits the
// batch's byte budget, so a payload or headers left out of a batch are
// never detoasted nor sent.
const InlinePayloadMax = 8192

// claimBody is a claim's body columns: the payload, the stored size of
// payload and headers together, the headers; the payload and the headers
// are NULL when that size passes InlinePayloadMax (the headers count: a
// plain INSERT may store megabytes there).
const claimBody = `CASE WHEN ` + bodySize + ` <= 8192 THEN payload END, ` + bodySize + `, CASE WHEN ` + bodySize + ` <= 8192 THEN headers END`

const bodySize = `(pg_column_size(payload) + COALESCE(pg_column_size(headers), 0))`

// Queries are the statements for one outbox table.
type Queries struct {
	// Claim locks up to $1 claimable rows with seq > $2 in insertion order.
	// A claimable row is pending, not waiting for a retry and not scheduled
	// for later (deliver_at IS NULL: the ready index's predicate).
	// Every claim returns a row's payload and headers as claimBody's three
	// columns.
	// SKIP LOCKED lets several relays claim disjoint batches; the predicate
	// matches the partial ready index, so processed rows are never read,
	// and the floor $2 starts the index scan past the entries of rows
	// processed since the last VACUUM (see engine's cursor).
	Claim string
	// ClaimOrdered is Claim for ordered mode ($1 batch size, $2 floor). It
	// claims the heads of aggregates, rows with no earlier unprocessed row of
	// their aggregate (pending, waiting for a retry, held, locked by another
	// relay or a dead letter), and with each head a run of the events that
	// follow it, so that one batch carries many events of one aggregate when
	// few aggregates hold the backlog. The batch is shared equally among the
	// heads found; a run stops before the first event that is not claimable
	// (a dead letter, a held event, one waiting for its retry, one another
	// relay holds), so every aggregate's rows in a batch are consecutive from
	// its head. It locks the first $1 claimable rows and keeps their heads.
	// Rows come back in seq order, then two columns: whether the row follows
	// its head in the batch, and (on heads) whether the scan reached $1 rows
	// (more rows are likely waiting). The engine publishes an aggregate's run
	// in order, one event per round.
	ClaimOrdered string
	// ClaimOrderedSparse is ClaimOrdered for a queue held by few aggregates
	// (the engine picks it when its last batch was mostly runs), with $3 the
	// window: only the first row of each aggregate among the first $3
	// pending rows past the floor is probed, and only heads are locked.
	ClaimOrderedSparse string
	// Payloads reads the payloads and headers of claimed rows ($1
	// uuid[]): those a claim left out for their size.
	Payloads string
	// CountAttempt counts an attempt for claimed rows ($1 uuid[]) before
	// their payloads are read, so that a row whose reading or publishing
	// kills the relay has its attempts counted anyway. Relock locks again,
	// SKIP LOCKED, those of a claim's rows ($1 uuid[]) still claimable once
	// that count is committed. Refund gives back the attempt of counted rows
	// ($1 uuid[]) that did not fail (left untouched, destination down).
	CountAttempt string
	Relock       string
	Refund       string
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
	// bigint[] retry delay in ms, $5 bool[] dead-letter now, $6 bool[]
	// attempt already counted (CountAttempt).
	MarkOutcomes string
	// MarkOrdered is MarkOutcomes for ordered mode, with $7 uuid[]: the
	// published events that had failed before. Each failed event parks the
	// unprocessed later events of its aggregate (held_by = its id, dead_at
	// set: out of the ready index, so claims never step over them), and
	// each event of $6 releases the events it held.
	MarkOrdered string
	// ParkLate parks events that arrived behind a failing event after it
	// failed (ordered mode housekeeping). The failing events are locked
	// SKIP LOCKED, so a relay publishing one at that moment is not raced.
	ParkLate string
	// ReleaseOrphans releases held events whose holder is gone or
	// processed (deleted by hand, or a crash between two statements of an
	// older version); ReleaseAll releases every held event (a relay that is
	// not in ordered mode holds nothing back).
	ReleaseOrphans string
	ReleaseAll     string
	// CountPending, CountDead and CountHeld feed the gauges; OldestPending
	// is the created_at of the first pending row in claim order (one index
	// probe).
	CountPending  string
	OldestPending string
	// Scheduled is the count of events scheduled for later delivery and the
	// earliest due time (NULL if none), read through the scheduled index.
	Scheduled string
	// ReleaseDue makes up to $1 scheduled events that are due claimable
	// (deliver_at = NULL) and returns how many it released. Scheduled rows
	// stay out of the ready index the claims scan (deliver_at IS NULL in its
	// predicate), so a million rows due next month cost the claims nothing;
	// this statement reads only the due end of the scheduled index. A
	// released row keeps its seq, so in ordered mode it stays ahead of its
	// aggregate's later events; the engine rescans from the start to find
	// it below the claim floor.
	ReleaseDue string
	// AnyDue reports whether a scheduled event is due, reading the
	// scheduled index only and taking no lock that waits: ReleaseDue's
	// UPDATE would queue behind a pending table lock (a replay's) even
	// with nothing to release.
	AnyDue    string
	CountDead string
	CountHeld string
	// Cleanup deletes up to $2 rows processed more than $1 (interval) ago.
	Cleanup string
	// CountProcessedBefore counts the rows processed more than $1 ago: what
	// Cleanup (and archiving) would take, for a dry run.
	CountProcessedBefore string
	// Status aggregates per event type: pending, dead, published in the last
	// minute and hour, oldest pending created_at. Each branch reads through
	// its own partial index.
	Status string
	// DeadLetters lists dead letters: $1 event type ('' = any), $2 minimum
	// age (interval), $3 limit.
	DeadLetters string
	// RetryIDs re-queues unprocessed rows by id ($1 uuid[]); CountRetryIDs
	// is its dry run. Dead letters by filter: AdminQueries.
	RetryIDs      string
	CountRetryIDs string
	// CheckColumns fails when the table is missing or lacks a column this
	// version needs.
	CheckColumns string
	// Cancels is the cancellations table (migration 9), qualified.
	// CancelledLSN reads the WAL position of the last cancel, as a bigint:
	// a WAL relay publishes a row committed before it only once
	// StreamOwned ($1 uuid[]) finds it still in the table and still the
	// stream's (not handed to the table path, not processed).
	Cancels      string
	CancelledLSN string
	StreamOwned  string
	// Due counts the events due (pending, not scheduled, retry due) and
	// reads the oldest one's created_at (NULL if none) and now(): the stuck
	// detector's round. OldestXmin reads the session whose transaction
	// holds the xmin horizon longest (pid, application_name, state, age).
	Due        string
	OldestXmin string

	table string // the quoted table, for HandoffOnly
}

// New builds the statements for n. With deleteProcessed, published rows are
// deleted instead of marked.
func New(n ident.Names, deleteProcessed bool) *Queries {
	t := n.QTable
	cancels := cancelsTable(n)
	return &Queries{
		Cancels:      cancels,
		CancelledLSN: `SELECT (lsn - '0/0'::pg_lsn)::bigint FROM ` + cancels,
		StreamOwned: `SELECT id FROM ` + t + `
WHERE id = ANY($1::uuid[]) AND processed_at IS NULL AND retry_after IS NULL AND dead_at IS NULL`,
		Due: `SELECT count(*), min(` + finite("created_at") + `), now() FROM ` + t + `
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())`,
		OldestXmin: `SELECT pid, application_name, COALESCE(state, ''), now() - xact_start
FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY xact_start
LIMIT 1`,
		table: t,
		Claim: `SELECT id, seq, aggregate_type, aggregate_id, event_type, ` + claimBody + `, created_at, attempts, last_error IS NOT NULL, false, false
FROM ` + t + `
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())
  AND seq > $2
ORDER BY seq
LIMIT $1
FOR UPDATE SKIP LOCKED`,
		ClaimOrdered:       claimOrdered(t, false, false),
		ClaimOrderedSparse: claimOrdered(t, true, false),
		Payloads:           `SELECT id, payload, headers FROM ` + t + ` WHERE id = ANY($1::uuid[])`,
		CountAttempt:       `UPDATE ` + t + ` SET attempts = ` + attemptsPlus("attempts", "1") + ` WHERE id = ANY($1::uuid[])`,
		Relock: `SELECT id FROM ` + t + `
WHERE id = ANY($1::uuid[]) AND processed_at IS NULL AND dead_at IS NULL
FOR UPDATE SKIP LOCKED`,
		Refund: `UPDATE ` + t + ` SET attempts = attempts - 1 WHERE id = ANY($1::uuid[]) AND attempts > 0`,
		LowWater: `SELECT min(seq) FROM ` + t + `
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())`,
		BlockedAggregates: blockedAggregates(t, false),
		MarkPublished:     markPublished(t, deleteProcessed),
		MarkOutcomes:      markOutcomes(t, deleteProcessed),
		MarkOrdered:       markOrdered(t, deleteProcessed),
		ParkLate: `WITH failing AS (
    SELECT id, aggregate_type, aggregate_id, seq FROM ` + t + `
    WHERE processed_at IS NULL
      AND ((dead_at IS NOT NULL AND held_by IS NULL) OR (dead_at IS NULL AND retry_after > now()))
    FOR UPDATE SKIP LOCKED),
` + lockSuccessors(t, "failing") + `
UPDATE ` + t + ` AS s SET dead_at = now(), held_by = l.holder
FROM late AS l
WHERE s.id = l.id`,
		// One probe per holder, not per held event: the holders are walked
		// through the held index one distinct value at a time (a loose index
		// scan), so a pass costs a few pages per holder however many events
		// each holds, and only a gone holder's events are touched. A row
		// another statement has locked is left for the next pass: the
		// housekeeping never waits on the relays' marks.
		ReleaseOrphans: `WITH RECURSIVE holders AS (
    (SELECT held_by AS id FROM ` + t + `
     WHERE held_by IS NOT NULL AND processed_at IS NULL
     ORDER BY held_by LIMIT 1)
  UNION ALL
    SELECT (SELECT n.held_by FROM ` + t + ` AS n
            WHERE n.held_by > p.id AND n.processed_at IS NULL
            ORDER BY n.held_by LIMIT 1)
    FROM holders AS p WHERE p.id IS NOT NULL),
gone AS (
    SELECT g.id FROM holders AS g
    WHERE g.id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM ` + t + ` AS h WHERE h.id = g.id AND h.processed_at IS NULL)),
freed AS (
    SELECT s.id FROM ` + t + ` AS s JOIN gone ON s.held_by = gone.id
    WHERE s.dead_at IS NOT NULL AND s.processed_at IS NULL
    FOR UPDATE OF s SKIP LOCKED)
UPDATE ` + t + ` AS s SET dead_at = NULL, held_by = NULL
FROM freed
WHERE s.id = freed.id`,
		ReleaseAll: `UPDATE ` + t + ` SET dead_at = NULL, held_by = NULL
WHERE held_by IS NOT NULL AND dead_at IS NOT NULL AND processed_at IS NULL`,
		CountPending:  `SELECT count(*) FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL`,
		OldestPending: `SELECT ` + finite("created_at") + ` FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL ORDER BY seq LIMIT 1`,
		Scheduled:     `SELECT count(*), min(` + shown("deliver_at") + `) FROM ` + t + ` WHERE deliver_at IS NOT NULL AND processed_at IS NULL`,
		ReleaseDue: `WITH due AS (
    SELECT id FROM ` + t + `
    WHERE deliver_at <= now() AND processed_at IS NULL
    ORDER BY deliver_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED),
released AS (
    UPDATE ` + t + ` AS o SET deliver_at = NULL
    FROM due WHERE o.id = due.id
    RETURNING 1)
SELECT count(*) FROM released`,
		AnyDue:               `SELECT EXISTS (SELECT 1 FROM ` + t + ` WHERE deliver_at <= now() AND processed_at IS NULL)`,
		CountDead:            `SELECT count(*) FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL`,
		CountHeld:            `SELECT count(*) FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NOT NULL`,
		CountProcessedBefore: `SELECT count(*) FROM ` + t + ` WHERE processed_at IS NOT NULL AND processed_at < now() - $1::interval`,
		Cleanup: `DELETE FROM ` + t + ` WHERE id IN (
    SELECT id FROM ` + t + `
    WHERE processed_at IS NOT NULL AND processed_at < now() - $1::interval
    ORDER BY processed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`,
		Status: `SELECT event_type, sum(p)::bigint, sum(d)::bigint, sum(k)::bigint, sum(m)::bigint, sum(h)::bigint, min(oldest)
FROM (
    SELECT event_type, 1 AS p, 0 AS d, 0 AS k, 0 AS m, 0 AS h, ` + finite("created_at") + ` AS oldest
    FROM ` + t + ` WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  UNION ALL
    SELECT event_type, 0, (held_by IS NULL)::int, (held_by IS NOT NULL)::int, 0, 0, NULL
    FROM ` + t + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL
  UNION ALL
    SELECT event_type, 0, 0, 0, (processed_at >= now() - interval '1 minute')::int, 1, NULL
    FROM ` + t + ` WHERE processed_at IS NOT NULL AND processed_at >= now() - interval '1 hour'
) s
GROUP BY event_type
ORDER BY event_type`,
		DeadLetters: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
       attempts, ` + shownEventTimes + `, COALESCE(last_error, '')
FROM ` + t + `
WHERE dead_at IS NOT NULL AND processed_at IS NULL AND held_by IS NULL
  AND ($1 = '' OR event_type = $1)
  AND created_at <= now() - $2::interval
ORDER BY seq
LIMIT $3`,
		RetryIDs:      `UPDATE ` + t + ` SET attempts = 0, retry_after = now(), dead_at = NULL, held_by = NULL WHERE processed_at IS NULL AND id = ANY($1::uuid[])`,
		CountRetryIDs: `SELECT count(*) FROM ` + t + ` WHERE processed_at IS NULL AND id = ANY($1::uuid[])`,
		CheckColumns: `SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers,
       attempts, created_at, processed_at, retry_after, last_error, dead_at, held_by, deliver_at
FROM ` + t + ` LIMIT 0`,
	}
}

// cancelsTable is n's cancellations table; a name too long for PostgreSQL
// is kept whole, so the statements fail naming it (the migration fails the
// same way first).
func cancelsTable(n ident.Names) string {
	if q, err := n.QCancels(); err == nil {
		return q
	}
	return ident.Quote(strings.TrimSuffix(n.Table, "_events") + "_cancels")
}

// cancelled is, with cancels, a CTE (after a comma) raising the
// cancellations table's position to this transaction's when the CTE gone
// deleted any row: see Queries.CancelledLSN. Without cancels (a table not
// yet migrated to 9, which no WAL relay streams), nothing.
func cancelled(n ident.Names, cancels bool) string {
	if !cancels {
		return ""
	}
	return `,
bumped AS (
    UPDATE ` + cancelsTable(n) + ` SET lsn = greatest(lsn, pg_current_wal_insert_lsn())
    WHERE EXISTS (SELECT 1 FROM gone))`
}

// attemptsPlus is col + n without overflow: a plain INSERT may store the
// integer's maximum, and an overflowing mark would fail its whole batch,
// whose published rows would then be published again every round.
func attemptsPlus(col, n string) string {
	return `LEAST(` + col + `, 2147483646) + ` + n
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
    attempts    = ` + attemptsPlus("o.attempts", "CASE WHEN f.counted THEN 0 ELSE 1 END") + `,
    last_error  = f.err,
    retry_after = now() + f.delay_ms * interval '1 millisecond',
    dead_at     = CASE WHEN f.dead THEN now() END
FROM unnest($2::uuid[], $3::text[], $4::bigint[], $5::bool[], $6::bool[]) AS f(id, err, delay_ms, dead, counted)
WHERE o.id = f.id`
}

// blockedAggregates is BlockedAggregates; with handed, only later events on
// a WAL relay's table path count (see HandoffOnly).
func blockedAggregates(t string, handed bool) string {
	// A probe per dead letter (LATERAL, LIMIT 1): as a semi-join the
	// planner may hash every pending row first, even with no dead letter.
	return `SELECT count(*) FROM (
    SELECT DISTINCT d.aggregate_type, d.aggregate_id
    FROM ` + t + ` AS d
    CROSS JOIN LATERAL (
        SELECT 1 FROM ` + t + ` AS s
        WHERE s.aggregate_type = d.aggregate_type AND s.aggregate_id = d.aggregate_id
          AND s.processed_at IS NULL AND s.seq > d.seq` + onPath(handed, "s") + `
        LIMIT 1) AS later
    WHERE d.dead_at IS NOT NULL AND d.processed_at IS NULL AND d.held_by IS NULL) AS b`
}

// onPath is, with handed, the condition that alias's row is on a WAL
// relay's table path: handed over (retry_after set) or held (dead_at set),
// the predicate of the handoff aggregate index, which a table set up for
// the WAL source has instead of the aggregate index.
func onPath(handed bool, alias string) string {
	if !handed {
		return ""
	}
	return ` AND (` + alias + `.retry_after IS NOT NULL OR ` + alias + `.dead_at IS NOT NULL)`
}

func claimOrdered(t string, sparse, handed bool) string {
	const cols = `id, seq, aggregate_type, aggregate_id, event_type, ` + claimBody + `, created_at, attempts, failed`
	const headCols = `o.id, o.seq, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers,
         o.created_at, o.attempts, o.last_error IS NOT NULL AS failed`
	// A head: no earlier unprocessed event of its aggregate. The probe is
	// an index lookup (about 2 µs): the claims are built to probe rows they
	// can take, never rows other relays hold.
	//
	// With handed (a WAL relay's table workers), the probes, the sparse
	// window and the runs read only rows on the table path, through the
	// handoff indexes: a table set up for the WAL source has no index of
	// the rows as written, and the stream owns those. Leaving them out
	// changes no order. A row the stream owns committed after every
	// table-path row of its aggregate (the stream hands rows over in
	// commit order, and a handover UPDATE takes every row committed before
	// it), and when the stream reads it, it parks it behind its
	// aggregate's first table-path event (checkOrder) with a later seq.
	isHead := `NOT EXISTS (
      SELECT 1 FROM ` + t + ` AS p
      WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id
        AND p.processed_at IS NULL AND p.seq < o.seq` + onPath(handed, "p") + `)`
	// Dense: heads are most pending rows (many aggregates). Lock the first
	// $1 claimable rows exactly as the unordered claim does (rows held by
	// other relays are skipped at the cost of a lock attempt, not a probe),
	// then keep the heads. The rows that are not heads stay locked until
	// this batch ends; nobody could have claimed them meanwhile, since an
	// earlier event of theirs is pending. more: the scan stopped at its
	// limit, so more rows are likely waiting even if few of them were heads.
	heads := `WITH locked AS (
  SELECT ` + headCols + `
  FROM ` + t + ` AS o
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.deliver_at IS NULL
    AND (o.retry_after IS NULL OR o.retry_after <= now())
    AND o.seq > $2
  ORDER BY o.seq
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
),
heads AS (
  SELECT * FROM locked AS o WHERE ` + isHead + `
),
scan AS (SELECT count(*) >= $1 AS more FROM locked),
`
	if sparse {
		window := ""
		if handed {
			window = " AND w.retry_after IS NOT NULL" // the handoff index's predicate
		}
		// Sparse: few aggregates hold the queue. Read (without locking) the
		// first $3 pending rows past the floor, probe only the first row of
		// each aggregate among them, and lock the heads found.
		heads = `WITH win AS (
  SELECT w.id, w.seq, w.aggregate_type, w.aggregate_id,
         (w.retry_after IS NULL OR w.retry_after <= now()) AS due
  FROM ` + t + ` AS w
  WHERE w.processed_at IS NULL AND w.dead_at IS NULL AND w.deliver_at IS NULL AND w.seq > $2` + window + `
  ORDER BY w.seq
  LIMIT $3
),
firsts AS (
  SELECT DISTINCT ON (aggregate_type, aggregate_id) id, seq, due
  FROM win
  ORDER BY aggregate_type, aggregate_id, seq
),
heads AS (
  SELECT ` + headCols + `
  FROM (SELECT id, seq FROM firsts WHERE due ORDER BY seq) AS c
  JOIN ` + t + ` AS o ON o.id = c.id
  WHERE o.processed_at IS NULL AND o.dead_at IS NULL AND o.deliver_at IS NULL
    AND ` + isHead + `
  ORDER BY c.seq
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
),
scan AS (SELECT false AS more),
`
	}
	// Runs: with fewer heads than $1, each head brings the events that follow
	// it, the batch shared equally among the heads. The followers are read
	// in seq order, then each is locked SKIP LOCKED: one held elsewhere (a
	// dense claim keeps rows that were not heads locked) or not claimable
	// (a dead letter, a held event, one waiting for its retry) ends the run
	// before it, so an aggregate's rows in a batch are consecutive from its
	// head, and a claim never waits for a lock (no deadlock between claims).
	return heads + `share AS (SELECT $1 / greatest(count(*), 1) AS k FROM heads)
SELECT ` + cols + `, false, (SELECT more FROM scan) FROM heads
UNION ALL
SELECT ` + cols + `, true, false FROM (
  SELECT f.*, bool_and(f.ok AND l.got IS NOT NULL) OVER (PARTITION BY f.head ORDER BY f.seq) AS prefix
  FROM heads AS h CROSS JOIN share CROSS JOIN LATERAL (
    SELECT h.id AS head, f.id, f.seq, f.aggregate_type, f.aggregate_id, f.event_type, f.payload, f.headers,
           f.created_at, f.attempts, f.last_error IS NOT NULL AS failed,
           (f.dead_at IS NULL AND f.deliver_at IS NULL AND (f.retry_after IS NULL OR f.retry_after <= now())) AS ok
    FROM ` + t + ` AS f
    WHERE share.k > 1
      AND f.aggregate_type = h.aggregate_type AND f.aggregate_id = h.aggregate_id
      AND f.processed_at IS NULL AND f.seq > h.seq` + onPath(handed, "f") + `
    ORDER BY f.seq
    LIMIT share.k - 1) AS f
  LEFT JOIN LATERAL (
    SELECT true AS got FROM ` + t + ` AS l
    WHERE l.id = f.id AND l.processed_at IS NULL AND l.dead_at IS NULL AND l.deliver_at IS NULL
    FOR UPDATE OF l SKIP LOCKED) AS l ON true
) AS r
WHERE r.prefix
ORDER BY seq`
}

// lockSuccessors is a CTE, late(id, holder), of the unprocessed events not
// yet parked that follow a row of the CTE from (same aggregate, higher
// seq), holder being that row. They are locked SKIP LOCKED: an event
// another relay holds (a dense claim keeps locked the rows it took that were
// not heads) is left for a later pass instead of waited for, so parking
// never waits on another relay's batch, nor deadlocks with it.
func lockSuccessors(t, from string) string {
	return `late AS (
  SELECT s.id, f.id AS holder
  FROM ` + from + ` AS f JOIN ` + t + ` AS s
    ON s.aggregate_type = f.aggregate_type AND s.aggregate_id = f.aggregate_id
   AND ` + successors + `
  FOR UPDATE OF s SKIP LOCKED)`
}

// successors is lockSuccessors' condition on the later events; handedPredicate
// is a row on a WAL relay's table path (wal.HandoffPredicate).
const (
	successors      = "s.seq > f.seq AND s.processed_at IS NULL AND s.dead_at IS NULL"
	handedPredicate = "retry_after IS NOT NULL"
)

func markOrdered(t string, deleteProcessed bool) string {
	published := `UPDATE ` + t + ` SET processed_at = now() WHERE id = ANY($1::uuid[])`
	if deleteProcessed {
		published = `DELETE FROM ` + t + ` WHERE id = ANY($1::uuid[])`
	}
	// The four statements touch disjoint rows: a failed event's later
	// events were not published in its batch (the engine stops an
	// aggregate's run at its first failure) and are not held yet; the
	// events a published one releases are held, so not in the batch. A
	// later event another relay holds locked is left for the housekeeping
	// (ParkLate) to park: marks never wait for another relay's batch.
	return `WITH published AS (` + published + `),
failed AS (
  UPDATE ` + t + ` AS o SET
      attempts    = ` + attemptsPlus("o.attempts", "CASE WHEN f.counted THEN 0 ELSE 1 END") + `,
      last_error  = f.err,
      retry_after = now() + f.delay_ms * interval '1 millisecond',
      dead_at     = CASE WHEN f.dead THEN now() END
  FROM unnest($2::uuid[], $3::text[], $4::bigint[], $5::bool[], $6::bool[]) AS f(id, err, delay_ms, dead, counted)
  WHERE o.id = f.id),
failing AS (
  SELECT id, aggregate_type, aggregate_id, seq FROM ` + t + ` WHERE id = ANY($2::uuid[])),
` + lockSuccessors(t, "failing") + `,
park AS (
  UPDATE ` + t + ` AS s SET dead_at = now(), held_by = l.holder
  FROM late AS l
  WHERE s.id = l.id),
released AS (
  UPDATE ` + t + ` AS s SET dead_at = NULL, held_by = NULL
  FROM ` + t + ` AS h
  WHERE h.id = ANY($7::uuid[])
    AND s.aggregate_type = h.aggregate_type AND s.aggregate_id = h.aggregate_id
    AND s.held_by = h.id AND s.held_by IS NOT NULL AND s.processed_at IS NULL
  RETURNING 1)
SELECT count(*) FROM released`
}

// HandoffOnly returns q with claims that take only the rows handed over to
// the table path (retry_after set), as a WAL relay's table workers claim
// them while the stream carries the rest. Its ordered claims, parking and
// blocked-aggregate count read only table-path rows, through the handoff
// indexes, never the rows the stream owns.
func (q *Queries) HandoffOnly() *Queries {
	h := *q
	// IS NOT NULL spelled out: a NULL comparison would make the ordered
	// claim's follower test NULL, which bool_and skips.
	due := strings.NewReplacer(
		"(retry_after IS NULL OR retry_after <= now())", "(retry_after IS NOT NULL AND retry_after <= now())",
		"(o.retry_after IS NULL OR o.retry_after <= now())", "(o.retry_after IS NOT NULL AND o.retry_after <= now())",
		"(w.retry_after IS NULL OR w.retry_after <= now())", "(w.retry_after IS NOT NULL AND w.retry_after <= now())",
		"(f.retry_after IS NULL OR f.retry_after <= now())", "(f.retry_after IS NOT NULL AND f.retry_after <= now())",
		// A follower the stream still owns is not locked either.
		"l.deliver_at IS NULL\n    FOR UPDATE", "l.deliver_at IS NULL AND l.retry_after IS NOT NULL\n    FOR UPDATE",
	)
	h.Claim = due.Replace(q.Claim)
	h.ClaimOrdered = due.Replace(claimOrdered(q.table, false, true))
	h.ClaimOrderedSparse = due.Replace(claimOrdered(q.table, true, true))
	h.LowWater = due.Replace(q.LowWater)
	// A later event the stream still owns will be parked behind the dead
	// letter when the stream reads it; until then it is left out, with the
	// claims' reasons (see claimOrdered).
	h.BlockedAggregates = blockedAggregates(q.table, true)
	// Parking behind a failing event takes only its successors on the table
	// path: those the stream has not reached are parked by the stream itself
	// when it does (its order check), and parking them here would cost an
	// update each, read through every pending row of the aggregate.
	parkOnPath := strings.NewReplacer(successors, successors+" AND s."+handedPredicate)
	h.ParkLate = parkOnPath.Replace(q.ParkLate)
	h.MarkOrdered = parkOnPath.Replace(q.MarkOrdered)
	return &h
}
