package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestWALSourceOrderedReplayKeepsPlace: a relay killed before its
// acknowledgements reached the server leaves the slot behind what it
// settled, and the next stream offers those events again. Events the
// last stream handed to the table path are the table path's: the replay
// leaves their place (seq) and holder as they were, and the aggregate's
// events are first published in commit order. (Parking them again gave
// them new seqs behind later events of their aggregate: the table path
// then published those first, or waited forever on events parked behind
// an event with a higher seq.)
func TestWALSourceOrderedReplayKeepsPlace(t *testing.T) {
	e, n := setupWAL(t)
	// The slot as it is before the events: copied now, put back after the
	// first relay settled them, as if its acknowledgements were lost.
	saved := n.Slot + "_saved"
	e.srv.ReplicationObjects(t, saved, "")
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_copy_logical_replication_slot($1, $2)`, n.Slot, saved); err != nil {
		t.Fatalf("copy slot: %v", err)
	}
	var failing atomic.Bool
	failing.Store(true)
	mem, st := timed()
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if failing.Load() {
			return errors.New("injected failure")
		}
		return mem.Publish(context.Background(), m)
	})
	cfg := walConfig(outbox.RelayConfig{Ordered: true, BatchSize: 1, MaxAttempts: 1000,
		RetryBackoff: outbox.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})

	var ids []uuid.UUID
	for i := range 4 {
		ids = append(ids, e.writeEvents(event("x", i))...)
	}
	r1 := e.relay(pub, cfg)
	stop1 := e.run(r1)
	waitStreaming(t, r1, 30*time.Second)
	// x0 fails and is handed to the table; x1..x3 are parked behind it.
	testkit.Eventually(testkit.WithDetail(t, func() string {
		e.dump()
		return fmt.Sprintf("%d handed to the table", e.rows("retry_after IS NOT NULL"))
	}), 30*time.Second, "every event handed to the table path", func() bool { return e.rows("retry_after IS NOT NULL") >= len(ids) })
	stop1()
	before := e.places(t)
	if len(before) != len(ids) {
		e.dump()
		t.Fatalf("%d events handed to the table path, want %d", len(before), len(ids))
	}

	// Rewind: the saved copy replaces the slot.
	// The stopped relay's walsender may take a moment to release it.
	var dropErr error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("drop: %v", dropErr) }), 10*time.Second, "slot "+n.Slot+" dropped", func() bool {
		_, dropErr = e.pool.Exec(ctx(t), `SELECT pg_drop_replication_slot($1)`, n.Slot)
		return dropErr == nil
	})
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_copy_logical_replication_slot($1, $2)`, saved, n.Slot); err != nil {
		t.Fatalf("restore slot: %v", err)
	}
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_drop_replication_slot($1)`, saved); err != nil {
		t.Fatalf("drop saved slot: %v", err)
	}
	var end string
	if err := e.pool.QueryRow(ctx(t), `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	r2 := e.relay(pub, cfg)
	e.run(r2)
	waitStreaming(t, r2, 30*time.Second)
	// The replay is over once the slot is confirmed past the events.
	e.waitQuery(30*time.Second, "the slot confirmed past "+end,
		`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, n.Slot, end)
	after := e.places(t)
	for id, p := range before {
		if after[id] != p {
			t.Errorf("event %s: seq and holder %+v before the replay, %+v after: the replay moved an event the table path owns", id, p, after[id])
		}
	}

	failing.Store(false)
	testkit.Eventually(testkit.WithDetail(t, func() string {
		e.dump()
		return fmt.Sprintf("%d of %d published (status %+v)", len(st.order()), len(ids), r2.SourceStatus())
	}), 60*time.Second, "every event published after the failures ended", func() bool { return len(st.order()) >= len(ids) })
	order := st.order()
	for i, id := range order {
		if id != ids[i] {
			t.Fatalf("first publishes %v, want commit order %v", order, ids)
		}
	}
}

// place is where an event waits on the table path.
type place struct {
	Seq    int64
	Holder string
}

// places returns the place of every event handed to the table path.
func (e *env) places(t *testing.T) map[uuid.UUID]place {
	t.Helper()
	rs, err := e.pool.Query(ctx(t), fmt.Sprintf(`SELECT id, seq, COALESCE(held_by::text, '') FROM %s.outbox_events
WHERE processed_at IS NULL AND retry_after IS NOT NULL`, pgx.Identifier{e.schema}.Sanitize()))
	if err != nil {
		t.Fatal(err)
	}
	m := map[uuid.UUID]place{}
	var id uuid.UUID
	var p place
	if _, err := pgx.ForEachRow(rs, []any{&id, &p.Seq, &p.Holder}, func() error { m[id] = p; return nil }); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestWALSourceRecordRetriedAfterDeadlock: a stream batch's record (here:
// a failed event handed to the table and its successor parked) that
// PostgreSQL ends as a deadlock with another transaction is sent again, not
// paid for with a reopened stream.
func TestWALSourceRecordRetriedAfterDeadlock(t *testing.T) {
	e, _ := setupWAL(t)
	var failing atomic.Bool
	failing.Store(true)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if failing.Load() {
			return errors.New("injected failure")
		}
		return nil
	})
	ids := e.writeEvents(event("d", 0), event("d", 1))
	table := pgx.Identifier{e.schema, "outbox_events"}.Sanitize()

	// Another transaction holds the successor the record will park.
	other, err := e.pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(context.Background())
	// PostgreSQL looks for a deadlock once, deadlock_timeout after a
	// session starts waiting, and ends the session that looks. The record
	// must look after the other transaction waits, and before it: the
	// relay's sessions look after 5s, the other transaction's after a
	// minute.
	if _, err := other.Exec(ctx(t), `SET LOCAL deadlock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx(t), `SELECT 1 FROM `+table+` WHERE id = $1 FOR UPDATE`, ids[1]); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cfg := walConfig(outbox.RelayConfig{Ordered: true, MaxAttempts: 1000, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		RetryBackoff: outbox.Backoff{Base: time.Hour, Max: time.Hour}})
	cfg.Schema = e.schema
	cfg.StatementTimeout = 30 * time.Second // the record waits for the lock until the deadlock check
	r, err := outbox.NewRelay(e.extraPool(nil, map[string]string{"deadlock_timeout": "5s"}), pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	// The record marked the failure, then waits for the successor's lock.
	e.waitQuery(30*time.Second, "the record waiting for the parked event's lock",
		`SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE '%held_by = $2%' AND pid <> pg_backend_pid())`)
	// Now the other transaction waits for the failed event the record
	// holds: PostgreSQL ends the record, which waited first.
	if _, err := other.Exec(ctx(t), `UPDATE `+table+` SET attempts = attempts WHERE id = $1`, ids[0]); err != nil {
		t.Fatalf("the other transaction was the deadlock's victim (%v): the test did not exercise the record's", err)
	}
	if err := other.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d parked; logs:\n%s", e.rows("held_by IS NOT NULL"), logs) }),
		30*time.Second, "one event parked after the deadlock", func() bool { return e.rows("held_by IS NOT NULL") == 1 })
	// The retry itself is silent (the server logs the deadlock); what must
	// not show is a reopened stream.
	if strings.Contains(logs.String(), "stream ended; reopening") {
		t.Errorf("the stream was reopened after the deadlock, want the record sent again; logs:\n%s", logs)
	}
}

// waitQuery polls query, which returns one boolean, until it is true, and
// fails the test after d.
func (e *env) waitQuery(d time.Duration, what, query string, args ...any) {
	e.t.Helper()
	testkit.Eventually(e.t, d, what, func() bool {
		var ok bool
		if err := e.pool.QueryRow(ctx(e.t), query, args...).Scan(&ok); err != nil {
			e.t.Fatalf("wait for %s: %v", what, err)
		}
		return ok
	})
}
