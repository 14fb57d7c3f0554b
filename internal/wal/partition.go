package wal

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
)

// A partitioned outbox table (outbox migrate --partitioned) is partitioned
// by ranges of seq, each ident.PartitionWidth wide. The relay streaming its
// slot rotates them: it attaches the next partition and moves the sequence
// to its start, so new events go there. Once every transaction that wrote
// to the old partition has ended and the slot is past all of them, each
// event in it was delivered (deleted) or handed to the table path. With
// none of the latter left, the partition is detached and dropped: its
// space comes back at once, with no vacuum. A partition whose events wait
// on the table path is compacted to them instead, and dropped once they
// are gone. See docs/WAL.md.

// PartitionComment marks the partitions pgoutbox creates, so that a
// relay finishing a retirement cut short (a partition detached, not yet
// dropped) never mistakes a table of the user's for one of its own.
const PartitionComment = "pgoutbox partition"

// QueryDB is DB plus queries returning rows.
type QueryDB interface {
	DB
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Partition is one range partition of the outbox table.
type Partition struct {
	OID    uint32
	K      int64  // its number: it holds seq in [K*width, (K+1)*width)
	QName  string // qualified and quoted
	Lo, Hi int64
	// DetachPending: a DETACH ... CONCURRENTLY did not finish.
	DetachPending bool
}

// Partitions is what ReadPartitions found.
type Partitions struct {
	// Partitioned is false for an unpartitioned table (the rest is empty).
	Partitioned bool
	// Range are pgoutbox's range partitions, by Lo. Partitions it did not
	// create are left out: it never detaches them.
	Range []Partition
	// Detached are pgoutbox's partitions no longer attached: a retirement
	// stopped between the detach and the drop.
	Detached []Partition
	// Next is the seq the next event will get.
	Next int64
}

// Current is the partition that new events go to, or nil when none
// covers Next (an insert would fail: the relay rotates at once).
func (p Partitions) Current() *Partition {
	for i := range p.Range {
		if r := &p.Range[i]; p.Next >= r.Lo && p.Next < r.Hi {
			return r
		}
	}
	return nil
}

var boundRE = regexp.MustCompile(`FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)`)

// ReadPartitions reads the table's partitions and its sequence.
func ReadPartitions(ctx context.Context, db QueryDB, n Names) (Partitions, error) {
	var p Partitions
	var kind string
	err := db.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, n.Table.QTable).Scan(&kind)
	if err != nil || kind != "p" {
		if err == pgx.ErrNoRows {
			err = nil
		}
		return p, partErr("read the table's kind", err)
	}
	p.Partitioned = true
	seq, err := n.Table.SeqSequence()
	if err != nil {
		return p, err
	}
	var last int64
	var called bool
	if err := db.QueryRow(ctx, `SELECT last_value, is_called FROM `+seq).Scan(&last, &called); err != nil {
		return p, partErr("read the seq sequence", err)
	}
	p.Next = last
	if called {
		p.Next++
	}
	prefix := n.Table.PartitionPrefix()
	rows, err := db.Query(ctx, `
SELECT c.oid, c.relname::text, c.relispartition, coalesce(i.inhdetachpending, false), coalesce(pg_get_expr(c.relpartbound, c.oid), '')
FROM pg_class c LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = to_regclass($1)
WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = to_regclass($1))
  AND c.relkind = 'r' AND left(c.relname, length($2)) = $2
  AND (i.inhparent IS NOT NULL OR (NOT c.relispartition AND obj_description(c.oid, 'pg_class') = $3))
ORDER BY c.oid`, n.Table.QTable, prefix, PartitionComment)
	if err != nil {
		return p, partErr("list partitions", err)
	}
	defer rows.Close()
	for rows.Next() {
		var x Partition
		var name, bound string
		var attached bool
		if err := rows.Scan(&x.OID, &name, &attached, &x.DetachPending, &bound); err != nil {
			return p, partErr("list partitions", err)
		}
		k, err := strconv.ParseInt(strings.TrimPrefix(name, prefix), 10, 64)
		if err != nil || k < 0 {
			continue // the default partition, or a name not of ours
		}
		x.K = k
		if x.QName, err = n.Table.Partition(k); err != nil {
			return p, err
		}
		x.Lo, x.Hi = k*ident.PartitionWidth, (k+1)*ident.PartitionWidth
		if !attached {
			p.Detached = append(p.Detached, x)
			continue
		}
		m := boundRE.FindStringSubmatch(bound)
		if m == nil {
			continue
		}
		x.Lo, _ = strconv.ParseInt(m[1], 10, 64)
		x.Hi, _ = strconv.ParseInt(m[2], 10, 64)
		p.Range = append(p.Range, x)
	}
	if err := rows.Err(); err != nil {
		return p, partErr("list partitions", err)
	}
	slices.SortFunc(p.Range, func(a, b Partition) int { return cmp.Compare(a.Lo, b.Lo) })
	return p, nil
}

// Attach creates and attaches partition k, unless it is attached already.
// It is created on its own and attached with a CHECK constraint matching
// its bounds: attaching then scans nothing, and no writer waits (CREATE
// TABLE ... PARTITION OF would wait for every transaction reading the
// table, and block the writers queued behind it). New events go there only
// once Advance moves the sequence.
func Attach(ctx context.Context, db DB, n Names, k int64) (Partition, error) {
	qp, err := n.Table.Partition(k)
	if err != nil {
		return Partition{}, err
	}
	lo, hi := k*ident.PartitionWidth, (k+1)*ident.PartitionWidth
	tx, err := db.Begin(ctx)
	if err != nil {
		return Partition{}, partErr("rotate", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var attached bool
	err = tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))`, qp, n.Table.QTable).Scan(&attached)
	if err != nil {
		return Partition{}, partErr("rotate", err)
	}
	bounds := fmt.Sprintf("seq IS NOT NULL AND seq >= %d AND seq < %d", lo, hi)
	steps := []string{
		`CREATE TABLE IF NOT EXISTS ` + qp + ` (LIKE ` + n.Table.QTable + ` INCLUDING DEFAULTS)`,
		`ALTER TABLE ` + qp + ` SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 10000)`,
		`COMMENT ON TABLE ` + qp + ` IS ` + literal(PartitionComment),
		`ALTER TABLE ` + qp + ` ADD CONSTRAINT pgoutbox_bounds CHECK (` + bounds + `)`,
		`ALTER TABLE ` + n.Table.QTable + ` ATTACH PARTITION ` + qp + fmt.Sprintf(` FOR VALUES FROM (%d) TO (%d)`, lo, hi),
		`ALTER TABLE ` + qp + ` DROP CONSTRAINT pgoutbox_bounds`,
	}
	if attached {
		steps = nil
	}
	for _, s := range steps {
		if _, err := tx.Exec(ctx, s); err != nil {
			return Partition{}, partErr("rotate to partition "+strconv.FormatInt(k, 10), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Partition{}, partErr("rotate", err)
	}
	return Partition{K: k, QName: qp, Lo: lo, Hi: hi}, nil
}

// Advance moves the sequence to p's start, so the next event goes to p.
// Call it once every statement that started before p was attached has
// ended (TableLockers, then Running): a statement routes its rows with the
// partitions it started with, and one given a seq of p would fail. Never
// backwards: a sequence already past p's start stays where it is.
func Advance(ctx context.Context, db DB, n Names, p Partition) error {
	seq, err := n.Table.SeqSequence()
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, fmt.Sprintf(`SELECT setval(%s, %d, false) FROM %s WHERE last_value < %d`, literal(seq), p.Lo, seq, p.Lo))
	return partErr("move new events to partition "+p.QName, err)
}

// TableLockers are the virtual transactions holding a lock on the outbox
// table itself now, other than this session's.
func TableLockers(ctx context.Context, db QueryDB, n Names) ([]string, error) {
	var oid uint32
	if err := db.QueryRow(ctx, `SELECT to_regclass($1)::oid`, n.Table.QTable).Scan(&oid); err != nil {
		return nil, partErr("read the table's lockers", err)
	}
	return Lockers(ctx, db, oid)
}

// Lockers are the virtual transactions holding a lock on the partition
// now, other than this session's: the writers whose inserts went there and
// have not ended. Those that lock it later can only be statements that
// took their seq before the rotation (a moment: the seq is taken as the row
// is routed).
func Lockers(ctx context.Context, db QueryDB, oid uint32) ([]string, error) {
	var vx []string
	err := db.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
WHERE locktype = 'relation' AND relation = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid IS DISTINCT FROM pg_backend_pid()`, oid).Scan(&vx)
	return vx, partErr("read the partition's lockers", err)
}

// Running reports whether any of the virtual transactions vx has not
// ended.
func Running(ctx context.Context, db DB, vx []string) (bool, error) {
	if len(vx) == 0 {
		return false, nil
	}
	var any bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE virtualtransaction = ANY($1))`, vx).Scan(&any)
	return any, partErr("read the partition's lockers", err)
}

// CurrentLSN is the server's current WAL write position.
func CurrentLSN(ctx context.Context, db DB) (pglogrepl.LSN, error) {
	var s string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, partErr("read the WAL position", err)
	}
	return pglogrepl.ParseLSN(s)
}

// Unsettled counts the partition's rows not yet delivered: the events
// handed to the table path (failed, held, dead letters), once the slot is
// past every transaction that wrote there. It reads the partition whole.
func Unsettled(ctx context.Context, db DB, p Partition) (int64, error) {
	var c int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM ONLY `+p.QName+` WHERE processed_at IS NULL`).Scan(&c)
	return c, partErr("count the partition's undelivered events", err)
}

// Detach detaches the partition CONCURRENTLY: it waits for the
// transactions using the table, and blocks no writer. It runs outside a
// transaction block. A detach cut short leaves the partition pending;
// FinishDetach completes it.
func Detach(ctx context.Context, db DB, n Names, p Partition) error {
	_, err := db.Exec(ctx, `ALTER TABLE `+n.Table.QTable+` DETACH PARTITION `+p.QName+` CONCURRENTLY`)
	return partErr("detach partition "+p.QName, err)
}

// FinishDetach completes a detach cut short.
func FinishDetach(ctx context.Context, db DB, n Names, p Partition) error {
	_, err := db.Exec(ctx, `ALTER TABLE `+n.Table.QTable+` DETACH PARTITION `+p.QName+` FINALIZE`)
	return partErr("finish detaching partition "+p.QName, err)
}

// DropDetached drops a detached partition if it holds no undelivered
// event, and otherwise attaches it again (dropped is false), its rows
// handed to the table path: a writer's statement that took its seq before
// the rotation and routed its row only after the relay looked (a process
// stalled for seconds within one INSERT), which the table workers deliver.
func DropDetached(ctx context.Context, db DB, n Names, p Partition) (dropped bool, _ error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, partErr("drop partition", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var c int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+p.QName+` WHERE processed_at IS NULL`).Scan(&c); err != nil {
		return false, partErr("drop partition "+p.QName, err)
	}
	stmts := []string{`DROP TABLE ` + p.QName}
	if c > 0 {
		stmts = []string{
			// The stream may have read such a row while the partition was
			// being detached, and its deletion or hand-over missed it: the
			// table workers deliver it (again, at worst).
			`UPDATE ` + p.QName + ` SET retry_after = now() WHERE processed_at IS NULL AND retry_after IS NULL AND dead_at IS NULL`,
			`ALTER TABLE ` + n.Table.QTable + ` ATTACH PARTITION ` + p.QName + fmt.Sprintf(` FOR VALUES FROM (%d) TO (%d)`, p.Lo, p.Hi),
		}
	}
	for _, st := range stmts {
		if _, err := tx.Exec(ctx, st); err != nil {
			return false, partErr("drop partition "+p.QName, err)
		}
	}
	return c == 0, partErr("drop partition "+p.QName, tx.Commit(ctx))
}

// Compact empties a partition of everything but its undelivered events
// (failed, held, dead letters): they are copied aside, the partition
// truncated, and they are copied back, with their seq and id, in one
// transaction. The partition's space then comes back with no vacuum, and
// the events never leave the table as other sessions see it. The lock it
// takes is the partition's alone, which writers, inserting into a newer
// partition, never wait for; the relay's statements on the table do, for
// as long as the copy takes. The lock is waited for at most lockWait: an
// error matching ErrLockBusy says to try again later. It returns how many
// events it kept.
func Compact(ctx context.Context, db DB, n Names, p Partition, lockWait time.Duration) (int64, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return 0, partErr("compact partition", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, max(lockWait.Milliseconds(), 1))); err != nil {
		return 0, partErr("compact partition", err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE ONLY `+p.QName+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		if isCode(err, "55P03") { // lock_not_available
			return 0, fmt.Errorf("partitions: compact partition %s: %w", p.QName, ErrLockBusy)
		}
		return 0, partErr("compact partition "+p.QName, err)
	}
	cols, err := columns(ctx, tx, n)
	if err != nil {
		return 0, err
	}
	list := make([]string, len(cols))
	sel := make([]string, len(cols))
	for i, c := range cols {
		list[i] = ident.Quote(c)
		sel[i] = list[i]
		if c == "retry_after" {
			// Copied back, a row is an insert the stream sees: one on the
			// table path is left to the table workers (see handedOver).
			sel[i] = "coalesce(retry_after, now()) AS retry_after"
		}
	}
	all := strings.Join(list, ", ")
	steps := []string{
		`CREATE TEMP TABLE pgoutbox_keep ON COMMIT DROP AS SELECT ` + strings.Join(sel, ", ") + ` FROM ONLY ` + p.QName + ` WHERE processed_at IS NULL`,
		`TRUNCATE ONLY ` + p.QName,
		`INSERT INTO ` + p.QName + ` (` + all + `) SELECT ` + all + ` FROM pgoutbox_keep`,
	}
	var kept int64
	for _, st := range steps {
		tag, err := tx.Exec(ctx, st)
		if err != nil {
			return 0, partErr("compact partition "+p.QName, err)
		}
		kept = tag.RowsAffected()
	}
	return kept, partErr("compact partition "+p.QName, tx.Commit(ctx))
}

// ErrLockBusy means Compact could not lock the partition within its wait.
var ErrLockBusy = errors.New("the partition is busy: its lock was not granted in time")

// columns are the table's columns, in order.
func columns(ctx context.Context, tx pgx.Tx, n Names) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, n.Table.QTable)
	if err != nil {
		return nil, partErr("read the table's columns", err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return cols, partErr("read the table's columns", err)
}

func partErr(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("partitions: %s: %w", what, err)
}
