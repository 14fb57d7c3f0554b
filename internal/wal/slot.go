package wal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Create creates the table's handoff index and publication and then its
// slot, each unless it exists, and reports whether it created the slot.
// Having created it, it hands the rows pending from before the slot to the
// table path (MarkBacklogSQL). Run it with a role that
// owns the table (CREATE PUBLICATION ... FOR TABLE needs that) and has
// REPLICATION. Two relays creating at once is safe: the loser sees the
// duplicate and carries on.
func Create(ctx context.Context, db DB, n Names) (created bool, err error) {
	idx, err := n.HandoffIndexSQL()
	if err != nil {
		return false, fmt.Errorf("WAL source: %w", err)
	}
	names, err := n.handoffIndexNames()
	if err != nil {
		return false, fmt.Errorf("WAL source: %w", err)
	}
	// A table without the relay's columns (the article's minimal table,
	// streamed by hand) has no handoff: nothing to index or mark. An index
	// that exists is not created again: CREATE INDEX IF NOT EXISTS needs
	// the table's owner even then, and a relay replacing a lost slot may be
	// no owner.
	relayColumns := true
	for i, s := range idx {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, names[i]).Scan(&exists); err != nil {
			return false, fmt.Errorf("WAL source: look up index %s: %w", names[i], err)
		}
		if exists {
			continue
		}
		if _, err := db.Exec(ctx, s); isCode(err, "42703") { // undefined_column
			relayColumns = false
			break
		} else if err != nil && !createdMeanwhile(err) {
			return false, fmt.Errorf("WAL source: create the handoff indexes of %s: %w", n.Table.QTable, err)
		}
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, n.Publication).Scan(&exists); err != nil {
		return false, fmt.Errorf("WAL source: look up publication %s: %w", n.Publication, err)
	}
	if !exists {
		if _, err := db.Exec(ctx, n.CreatePublicationSQL()); err != nil && !isCode(err, "42710") && !createdMeanwhile(err) { // duplicate_object
			return false, fmt.Errorf("WAL source: create publication %s: %w", n.Publication, err)
		}
	}
	// The slot is created and the backlog marked under a transaction-level
	// advisory lock that Ready takes too: no relay streams a new slot
	// before the rows pending from before it are handed to the table path
	// (it would publish an aggregate's later event before the table path
	// publishes its earlier one). The transaction writes nothing before
	// the slot is created, as PostgreSQL requires.
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("WAL source: create slot %s: %w", n.Slot, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if err := lockSlot(ctx, tx, n); err != nil {
		return false, err
	}
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, n.Slot).Scan(&exists); err != nil {
		return false, fmt.Errorf("WAL source: look up slot %s: %w", n.Slot, err)
	}
	if exists {
		return false, nil
	}
	var version int
	if err := tx.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return false, fmt.Errorf("WAL source: read the server's version: %w", err)
	}
	if _, err := tx.Exec(ctx, createSlotQuery(version), n.Slot, Plugin); err != nil {
		if isCode(err, "42710") {
			return false, nil
		}
		return false, fmt.Errorf("WAL source: create slot %s: %w", n.Slot, err)
	}
	if relayColumns {
		if _, err := tx.Exec(ctx, n.MarkBacklogSQL()); err != nil {
			return true, fmt.Errorf("WAL source: hand the rows pending before slot %s to the table path: %w", n.Slot, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return true, fmt.Errorf("WAL source: hand the rows pending before slot %s to the table path: %w", n.Slot, err)
	}
	return true, nil
}

// lockSlot takes the transaction-level advisory lock that serializes a
// slot's creation with the relays about to stream it.
func lockSlot(ctx context.Context, tx pgx.Tx, n Names) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('pgoutbox slot ' || $1))`, n.Slot); err != nil {
		return fmt.Errorf("WAL source: lock slot %s: %w", n.Slot, err)
	}
	return nil
}

// Ready reports whether the table's handoff indexes (qualified as
// to_regclass takes them), publication and slot all exist, waiting for a
// creation in progress (Create) to finish first.
func Ready(ctx context.Context, db DB, n Names, indexes ...string) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	if err := lockSlot(ctx, tx, n); err != nil {
		return false, err
	}
	var ready bool
	err = tx.QueryRow(ctx, `SELECT (SELECT bool_and(to_regclass(i) IS NOT NULL) FROM unnest($1::text[]) AS i) IS NOT FALSE
  AND EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $2)
  AND EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $3)`, indexes, n.Publication, n.Slot).Scan(&ready)
	return ready, err
}

// DropWait bounds how long Drop waits for a terminated relay to release the
// slot.
const DropWait = 10 * time.Second

// Drop removes the table's slot and publication, if they exist. It refuses,
// with an error wrapping ErrSlotBusy naming the process, while a relay
// streams the slot (after dropGrace): that relay would create them again.
// Dropping the slot discards the WAL position it kept: events not yet
// confirmed are then found only in the table.
func Drop(ctx context.Context, db DB, n Names) error {
	ctx, cancel := context.WithTimeout(ctx, DropWait)
	defer cancel()
	// A relay streaming the slot would create it again at once: the drop
	// would not stick. A relay that was just stopped frees it in a moment.
	if err := freed(ctx, db, n, dropGrace); err != nil {
		return err
	}
	if err := DropSlot(ctx, db, n); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, n.DropPublicationSQL()); err != nil {
		return fmt.Errorf("WAL source: drop publication %s: %w", n.Publication, err)
	}
	return nil
}

// dropGrace is how long Drop waits for a slot still streamed (by a relay
// just stopped, say) to be freed before it refuses.
const dropGrace = 3 * time.Second

// freed returns nil once no process streams n's slot, or an error
// wrapping ErrSlotBusy naming the one that still does after d.
func freed(ctx context.Context, db DB, n Names, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		var pid int
		var app, addr string
		err := db.QueryRow(ctx, `SELECT s.active_pid, COALESCE(r.application_name, ''), COALESCE(host(r.client_addr), 'local')
FROM pg_replication_slots AS s LEFT JOIN pg_stat_replication AS r ON r.pid = s.active_pid
WHERE s.slot_name = $1 AND s.active_pid IS NOT NULL`, n.Slot).Scan(&pid, &app, &addr)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("WAL source: look up slot %s: %w", n.Slot, err)
		case time.Now().After(deadline):
			return fmt.Errorf("WAL source: slot %s is streamed by a relay (walsender pid %d, %q from %s): %w; stop every WAL relay of the table first, or it creates the slot again", n.Slot, pid, app, addr, ErrSlotBusy)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Terminate ends the stream of the process streaming n's slot, if any: for
// tests and benchmarks that drop the slot of a relay still running.
func Terminate(ctx context.Context, db DB, n Names) error {
	_, err := db.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, n.Slot)
	return err
}

// DropSlot removes the table's slot, if it exists, as Drop does, and
// leaves the publication: what replacing an invalidated slot needs.
func DropSlot(ctx context.Context, db DB, n Names) error {
	ctx, cancel := context.WithTimeout(ctx, DropWait)
	defer cancel()
	for {
		if _, err := db.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, n.Slot); err != nil {
			return fmt.Errorf("WAL source: stop the relay streaming slot %s: %w", n.Slot, err)
		}
		_, err := db.Exec(ctx, n.DropSlotSQL())
		if err == nil {
			return nil
		}
		if !isCode(err, "55006") { // object_in_use: the walsender has not exited yet
			return fmt.Errorf("WAL source: drop slot %s: %w", n.Slot, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("WAL source: drop slot %s: still in use after %s: %w", n.Slot, DropWait, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SlotState is the table's slot as pg_replication_slots shows it: what the
// relay's gauges and `outbox status` report.
type SlotState struct {
	Exists bool
	// Active is true while a process streams from the slot; ActivePID is
	// that walsender's process id.
	Active    bool
	ActivePID int32
	// ConfirmedFlush is the position the slot's consumer confirmed: a
	// restart streams the transactions that commit after it.
	ConfirmedFlush pglogrepl.LSN
	// LagBytes is how much WAL the slot keeps: from its restart position to
	// the server's current position. It grows while no relay streams.
	LagBytes int64
	// BehindBytes is how far the consumer is behind: from its confirmed
	// position to the server's current position.
	BehindBytes int64
	// WALStatus is "reserved", "extended", "unreserved" or "lost" (lost: the
	// server removed WAL the slot needed, past max_slot_wal_keep_size).
	WALStatus string
}

// Inspect reads the table's slot.
func Inspect(ctx context.Context, db DB, n Names) (SlotState, error) {
	var (
		s         SlotState
		pid       *int32
		confirmed *string
		lag       *int64
		behind    *int64
		status    *string
	)
	err := db.QueryRow(ctx, `
SELECT active, active_pid, confirmed_flush_lsn::text,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, wal_status,
       pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, n.Slot).Scan(&s.Active, &pid, &confirmed, &lag, &status, &behind)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotState{}, nil
	}
	if err != nil {
		return SlotState{}, fmt.Errorf("WAL source: read slot %s: %w", n.Slot, err)
	}
	s.Exists = true
	if pid != nil {
		s.ActivePID = *pid
	}
	if confirmed != nil {
		if s.ConfirmedFlush, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return SlotState{}, fmt.Errorf("WAL source: slot %s: confirmed_flush_lsn %q: %w", n.Slot, *confirmed, err)
		}
	}
	if lag != nil {
		s.LagBytes = *lag
	}
	if status != nil {
		s.WALStatus = *status
	}
	if behind != nil {
		s.BehindBytes = max(*behind, 0)
	}
	return s, nil
}

// createdMeanwhile reports whether a CREATE ... IF NOT EXISTS lost a race
// with another session creating the same object: IF NOT EXISTS checks
// before the catalog insert that collides.
func createdMeanwhile(err error) bool {
	return isCode(err, "23505") || isCode(err, "42P07") // unique_violation, duplicate_table
}

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// OldestTransactionSQL reads the session holding the oldest transaction
// with an id (pid, application_name, state, age): what creating a logical
// slot waits for.
const OldestTransactionSQL = `SELECT pid, application_name, COALESCE(state, ''), now() - xact_start
FROM pg_stat_activity
WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY xact_start
LIMIT 1`

// ErrRemoved reports a WAL source removed on purpose (`outbox migrate
// drop-wal`: the publication is gone): a relay does not create it again.
var ErrRemoved = errors.New("the WAL source was removed (its publication is gone)")

// CheckNotRemoved returns ErrRemoved when n's publication does not exist.
func CheckNotRemoved(ctx context.Context, db DB, n Names) error {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, n.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("WAL source: look up publication %s: %w", n.Publication, err)
	}
	if !exists {
		return fmt.Errorf("WAL source: publication %s: %w", n.Publication, ErrRemoved)
	}
	return nil
}
