package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// downPublisher is a memory publisher whose broker is down while down is
// set: every publish is unavailable, no attempt counted.
func downPublisher() (*memory.Publisher, *atomic.Bool) {
	var down atomic.Bool
	down.Store(true)
	mem := memory.New()
	mem.FailWith(func(*outbox.Message) error {
		if down.Load() {
			return outbox.Unavailable(errors.New("broker down (test)"))
		}
		return nil
	})
	return mem, &down
}

// TestWALSourceCancel: events the stream holds while the broker is down
// are cancelled (outbox cancel); once the broker is back, only the others
// are delivered, and the slot moves past them all. Before the stream
// checked the table, 10 of 10 were delivered.
func TestWALSourceCancel(t *testing.T) {
	e, n := setupWAL(t)
	mem, down := downPublisher()
	r := e.relay(mem, walConfig(outbox.RelayConfig{OutageBackoff: outbox.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	ids := e.write(10)
	// The stream has them and is offering them to the broker, which is down.
	testkit.Eventually(t, 15*time.Second, "the relay finding the broker down", func() bool { return r.Ready(ctx(t)) != nil })
	if err := r.Ready(ctx(t)); err == nil || !strings.Contains(err.Error(), "broker down (test)") {
		t.Errorf("Ready = %v, want the publisher's reason", err)
	}
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Cancel(ctx(t), ids[:5]...)
	if err != nil || len(res.Cancelled) != 5 {
		t.Fatalf("Cancel = %+v, %v; want 5 cancelled", res, err)
	}
	down.Store(false)
	if err := mem.WaitDistinct(ctx(t), 5); err != nil {
		t.Fatal(err)
	}
	var written string
	if err := e.pool.QueryRow(ctx(t), `SELECT pg_current_wal_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	e.waitQuery(15*time.Second, "slot confirmed past the events",
		`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, n.Slot, written)
	cancelled := map[uuid.UUID]bool{}
	for _, id := range ids[:5] {
		cancelled[id] = true
	}
	for id := range mem.Count() {
		if cancelled[id] {
			t.Errorf("cancelled event %s was delivered", id)
		}
	}
	if mem.Distinct() != 5 {
		t.Errorf("%d events delivered, want the 5 not cancelled", mem.Distinct())
	}
}

// TestWALSourceDiscardedDeadLetterStaysDiscarded: a dead letter discarded
// by the operator is not published again when the stream reads its
// transaction a second time (acknowledgements lost: the slot rewound).
func TestWALSourceDiscardedDeadLetterStaysDiscarded(t *testing.T) {
	e, n := setupWAL(t)
	saved := n.Slot + "_saved"
	e.srv.ReplicationObjects(t, saved, "")
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_copy_logical_replication_slot($1, $2)`, n.Slot, saved); err != nil {
		t.Fatalf("copy slot: %v", err)
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(ctx(t), `SELECT pg_drop_replication_slot($1) FROM pg_replication_slots WHERE slot_name = $1`, saved)
	})
	bad := event("poison", 0)
	bad.EventType = "poison"
	var failed atomic.Int64
	mem := memory.New()
	mem.FailWith(func(m *outbox.Message) error {
		if m.EventType == "poison" {
			failed.Add(1)
			return outbox.Permanent(errors.New("rejected (test)"))
		}
		return nil
	})
	ids := e.writeEvents(bad, event("good", 1))
	r := e.relay(mem, walConfig(outbox.RelayConfig{}))
	stop := e.run(r)
	waitStreaming(t, r, 30*time.Second)
	if err := mem.WaitDistinct(ctx(t), 1); err != nil {
		t.Fatal(err)
	}
	e.waitQuery(15*time.Second, "the dead letter", `SELECT count(*) = 1 FROM outbox_events WHERE dead_at IS NOT NULL`)
	stop()
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := a.Discard(ctx(t), admin.DiscardSelector{IDs: ids[:1]}); err != nil || d.Discarded != 1 {
		t.Fatalf("Discard = %+v, %v", d, err)
	}
	// Rewind: the saved copy replaces the slot, as if the relay's
	// acknowledgements had been lost.
	var dropErr error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("drop: %v", dropErr) }), 10*time.Second, "slot "+n.Slot+" dropped", func() bool {
		_, dropErr = e.pool.Exec(ctx(t), `SELECT pg_drop_replication_slot($1)`, n.Slot)
		return dropErr == nil
	})
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_copy_logical_replication_slot($1, $2)`, saved, n.Slot); err != nil {
		t.Fatal(err)
	}
	before := failed.Load()
	r2 := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(r2)
	waitStreaming(t, r2, 30*time.Second)
	var written string
	if err := e.pool.QueryRow(ctx(t), `SELECT pg_current_wal_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	e.waitQuery(15*time.Second, "slot confirmed past the events",
		`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, n.Slot, written)
	if got := failed.Load() - before; got != 0 {
		t.Errorf("the discarded dead letter was published %d more times", got)
	}
}

// TestCancelBeforeMigration9: on a table not yet migrated to 9 (the
// binary upgraded first), Cancel and Discard work as before; once
// migrated, they raise the cancellations table's position.
func TestCancelBeforeMigration9(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	ms, err := outbox.Migrations(outbox.MigrateConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version >= 9 {
			break
		}
		if _, err := pool.Exec(ctx(t), m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	e := &env{t: t, pool: pool, schema: schema}
	if e.writer, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(pool, admin.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	ids := e.write(2)
	if res, err := a.Cancel(ctx(t), ids[0]); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("Cancel before migration 9 = %+v, %v", res, err)
	}
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	a, err = admin.New(pool, admin.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := a.Cancel(ctx(t), ids[1]); err != nil || len(res.Cancelled) != 1 {
		t.Fatalf("Cancel after migration 9 = %+v, %v", res, err)
	}
	var raised bool
	if err := pool.QueryRow(ctx(t), `SELECT lsn > '0/0' FROM outbox_cancels`).Scan(&raised); err != nil || !raised {
		t.Fatalf("the cancellations table was not raised (%v)", err)
	}
}
