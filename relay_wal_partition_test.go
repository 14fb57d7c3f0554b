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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// setupPartitioned is setupWAL on a table created partitioned.
func setupPartitioned(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	srv := testdb.Logical(t)
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	mc := outbox.MigrateConfig{Schema: schema, Partitioned: true}
	if _, err := outbox.Migrate(ctx(t), pool, mc); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, srv: srv, pool: pool, schema: schema, writer: w}
	walNames(t, e)
	if _, err := outbox.SetupReplication(ctx(t), pool, mc); err != nil {
		t.Fatalf("SetupReplication: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := outbox.DropReplication(c, pool, mc); err != nil {
			t.Errorf("DropReplication: %v", err)
		}
	})
	return e
}

// partitions lists the table's attached partitions, by name.
func (e *env) partitions() []string {
	e.t.Helper()
	rows, err := e.pool.Query(ctx(e.t), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`, pgx.Identifier{e.schema, "outbox_events"}.Sanitize())
	if err != nil {
		e.t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return names
}

// TestMigratePartitioned: MigrateConfig.Partitioned creates the table
// partitioned by seq, which the article's plain INSERT and the Writer both
// write to; migrating again is a no-op; an existing unpartitioned table is
// refused with ErrNotPartitioned, not converted.
func TestMigratePartitioned(t *testing.T) {
	e := setupPartitioned(t)
	var kind string
	if err := e.pool.QueryRow(ctx(t), `SELECT relkind::text FROM pg_class WHERE oid = 'outbox_events'::regclass`).Scan(&kind); err != nil || kind != "p" {
		t.Fatalf("relkind %q, %v; want p (partitioned)", kind, err)
	}
	if got := e.partitions(); len(got) != 1 || got[0] != "outbox_events_p0" {
		t.Fatalf("partitions %v, want [outbox_events_p0]", got)
	}
	if _, err := e.pool.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'o-1', 'order.created', '{"n":1}')`); err != nil {
		t.Fatalf("the article's plain INSERT: %v", err)
	}
	e.write(1)
	if n := e.rows("seq > 0"); n != 2 {
		t.Errorf("%d rows with a seq, want 2", n)
	}
	mc := outbox.MigrateConfig{Schema: e.schema, Partitioned: true}
	if applied, err := outbox.Migrate(ctx(t), e.pool, mc); err != nil || len(applied) != 0 {
		t.Errorf("migrating again: %d applied, %v; want none", len(applied), err)
	}
	// A table source's migrations on the partitioned table are a no-op too.
	if applied, err := outbox.Migrate(ctx(t), e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil || len(applied) != 0 {
		t.Errorf("migrating without Partitioned: %d applied, %v; want none", len(applied), err)
	}
	script, err := outbox.MigrationSQL(mc)
	if err != nil || !strings.Contains(script, "PARTITION BY RANGE (seq)") {
		t.Errorf("MigrationSQL(Partitioned) lacks the partitioned table: %v", err)
	}

	plain := testdb.Schema(t)
	pp := testdb.Pool(t, plain)
	if _, err := outbox.Migrate(ctx(t), pp, outbox.MigrateConfig{Schema: plain}); err != nil {
		t.Fatal(err)
	}
	_, err = outbox.Migrate(ctx(t), pp, outbox.MigrateConfig{Schema: plain, Partitioned: true})
	if !errors.Is(err, outbox.ErrNotPartitioned) || !strings.Contains(err.Error(), "not partitioned") {
		t.Errorf("Partitioned on an existing table: %v, want ErrNotPartitioned", err)
	}
}

// TestWALPartitionsRotateAndDrop: the streaming relay moves new events to a
// new partition every RotateEvents, and drops the old ones once the stream
// is past them: after every event is delivered, the table is down to one
// empty partition, with no vacuum.
func TestWALPartitionsRotateAndDrop(t *testing.T) {
	e := setupPartitioned(t)
	mem := memory.New()
	reg := prometheus.NewRegistry()
	r := e.relay(mem, walConfig(outbox.RelayConfig{RotateEvents: 40, RotateInterval: time.Second, Registerer: reg}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	var ids []uuid.UUID
	for range 6 {
		ids = append(ids, e.writeBatch(25)...)
		ids = append(ids, e.write(10)...)
		time.Sleep(1200 * time.Millisecond) // a rotation per round
	}
	waitDelivered(t, mem, ids)
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("partitions %v with %d rows", e.partitions(), e.rows("true")) }),
		60*time.Second, "one empty partition left after every event was delivered",
		func() bool { return len(e.partitions()) == 1 && e.rows("true") == 0 })
	parts := e.partitions()
	if parts[0] == "outbox_events_p0" {
		t.Errorf("the first partition is still there: no rotation")
	}
	if d := gauge(t, reg, "outbox_partitions_dropped_total"); d < 3 {
		t.Errorf("outbox_partitions_dropped_total %v, want at least 3", d)
	}
	var heap, total int64
	if err := e.pool.QueryRow(ctx(t), `SELECT pg_relation_size($1::regclass), pg_total_relation_size($1::regclass)`,
		pgx.Identifier{e.schema, parts[0]}.Sanitize()).Scan(&heap, &total); err != nil {
		t.Fatal(err)
	}
	// Its indexes' first pages, and no row ever.
	if heap != 0 || total > 128<<10 {
		t.Errorf("the remaining partition holds %d bytes of rows, %d in all; want an empty table", heap, total)
	}
	if n := len(mem.Messages()); n < len(ids) {
		t.Errorf("%d messages, want at least %d", n, len(ids))
	}
}

// TestWALPartitionLateCommitAndFailures: a partition is not dropped while a
// transaction that wrote to it is open, nor while an event of it waits on
// the table path (failing, in ordered mode): it is compacted to those
// events, which are delivered in order once the destination accepts them,
// and then dropped.
func TestWALPartitionLateCommitAndFailures(t *testing.T) {
	e := setupPartitioned(t)
	mem, st := timed()
	var failing atomic.Bool
	failing.Store(true)
	inner := memory.New()
	inner.FailWith(func(m *outbox.Message) error {
		if m.AggregateID == "slow" && failing.Load() {
			return errors.New("not yet")
		}
		return mem.Publish(context.Background(), m)
	})
	logs := &syncBuffer{}
	r := e.relay(inner, walConfig(outbox.RelayConfig{Ordered: true, RotateEvents: 20, RotateInterval: time.Second, MaxAttempts: 100000,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		RetryBackoff: outbox.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}}))
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	// A transaction writes to the first partition and stays open.
	late, err := e.pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(context.Background()) //nolint:errcheck // committed below
	lateIDs, err := e.writer.Write(ctx(t), late, event("late", 0))
	if err != nil {
		t.Fatal(err)
	}
	var slow []uuid.UUID
	for i := range 5 {
		slow = append(slow, e.writeEvents(event("slow", i))...)
	}
	fast := e.write(30) // past RotateEvents: the relay rotates
	waitDelivered(t, mem, fast)
	testkit.Eventually(t, 30*time.Second, "a second partition", func() bool { return len(e.partitions()) >= 2 })
	if got := e.partitions(); len(got) < 2 || got[0] != "outbox_events_p0" {
		t.Fatalf("partitions %v: want the first one kept beside a new one", got)
	}
	sig.Rotation.Drain()
	sig.Rotation.WaitN(t, 3, 30*time.Second) // several retirement rounds
	if got := e.partitions(); got[0] != "outbox_events_p0" {
		t.Fatalf("the first partition was dropped while a transaction that wrote to it was open: %v", got)
	}
	if err := late.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, mem, lateIDs)
	// The slow aggregate still fails: its partition is compacted, not dropped.
	testkit.Eventually(testkit.WithDetail(t, func() string { return "logs:\n" + logs.String() }), 30*time.Second,
		"the first partition's compaction logged", func() bool { return strings.Contains(logs.String(), "partition compacted") })
	if got := e.partitions(); got[0] != "outbox_events_p0" {
		t.Fatalf("the first partition was dropped with 5 undelivered events in it: %v", got)
	}
	if n := e.rows("aggregate_id = 'slow' AND processed_at IS NULL"); n != 5 {
		t.Fatalf("%d of the failing aggregate's events in the table, want 5", n)
	}
	if !strings.Contains(logs.String(), "events=5") {
		t.Errorf("no compaction of the first partition to its 5 failing events logged:\n%s", logs.String())
	}
	failing.Store(false)
	waitDelivered(t, mem, slow)
	order := st.order()
	pos := map[uuid.UUID]int{}
	for i, id := range order {
		if _, ok := pos[id]; !ok {
			pos[id] = i
		}
	}
	for i := 1; i < len(slow); i++ {
		if pos[slow[i]] < pos[slow[i-1]] {
			t.Fatalf("inversion: slow event %d published before event %d", i, i-1)
		}
	}
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("partitions %v", e.partitions()) }), 60*time.Second,
		"the first partition dropped once its events were delivered", func() bool { return e.partitions()[0] != "outbox_events_p0" })
}

// waitDelivered waits until mem has received every id.
func waitDelivered(t *testing.T, mem interface {
	WaitFor(context.Context, func([]outbox.Message) bool) error
}, ids []uuid.UUID) {
	t.Helper()
	if err := mem.WaitFor(ctx(t), func(ms []outbox.Message) bool {
		seen := make(map[uuid.UUID]bool, len(ms))
		for _, m := range ms {
			seen[m.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("not every event was delivered: %v", err)
	}
}

// TestWALPartitionRotationWaitsForStatements: a statement routes its rows
// with the partitions it started with, so new events move to a new
// partition only once the statements running when it was attached have
// ended: a slow INSERT ... SELECT spanning a rotation is not refused.
func TestWALPartitionRotationWaitsForStatements(t *testing.T) {
	e := setupPartitioned(t)
	mem := memory.New()
	r := e.relay(mem, walConfig(outbox.RelayConfig{RotateEvents: 10, RotateInterval: time.Second}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	slow := make(chan error, 1)
	go func() {
		// 150 rows, one every 20 ms: each takes its seq as it is inserted.
		_, err := e.pool.Exec(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', 'slow-' || i, 'order.created', jsonb_build_object('i', i, 'slept', pg_sleep(0.02)::text) FROM generate_series(1, 150) AS i`)
		slow <- err
	}()
	testkit.Eventually(t, 10*time.Second, "the slow INSERT running", func() bool {
		var n int
		if err := e.pool.QueryRow(ctx(t), `SELECT count(*) FROM pg_stat_activity
WHERE state = 'active' AND query LIKE '%generate_series(1, 150)%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	ids := e.write(20) // past RotateEvents: the relay attaches the next partition
	if err := <-slow; err != nil {
		t.Fatalf("the statement running across the rotation failed: %v", err)
	}
	waitDelivered(t, mem, ids)
	if err := mem.WaitFor(ctx(t), func(ms []outbox.Message) bool { return len(ms) >= 170 }); err != nil {
		t.Fatalf("%d of 170 events delivered: %v", len(mem.Messages()), err)
	}
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("partitions %v", e.partitions()) }), 30*time.Second,
		"a rotation: the first partition dropped", func() bool { return e.partitions()[0] != "outbox_events_p0" })
}

// TestReplayOnPartitionedTable: replays queue copies on a partitioned
// table, whose primary key is (id, seq): a same-id copy already pending is
// still skipped.
func TestReplayOnPartitionedTable(t *testing.T) {
	e := setupPartitioned(t)
	ids := e.write(3)
	if _, err := e.pool.Exec(ctx(t), `UPDATE outbox_events SET processed_at = now()`); err != nil {
		t.Fatal(err)
	}
	a := e.admin()
	res, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids[:2], Mode: admin.ReplaySameID})
	if err != nil || res.Queued != 2 {
		t.Fatalf("same-id replay = %+v, %v; want 2 queued", res, err)
	}
	dup, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids[:2], Mode: admin.ReplaySameID})
	if err != nil || dup.Queued != 0 || dup.Skipped != 2 {
		t.Errorf("second same-id replay = %+v, %v; want 2 skipped", dup, err)
	}
	fresh, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids[2:], Mode: admin.ReplayNewID})
	if err != nil || fresh.Queued != 1 {
		t.Errorf("new-id replay = %+v, %v; want 1 queued", fresh, err)
	}
	if n := e.rows("replay_id IS NOT NULL AND processed_at IS NULL"); n != 3 {
		t.Errorf("%d pending copies, want 3", n)
	}
	for _, id := range ids[:2] {
		if n := e.rows("id = '" + id.String() + "'"); n != 1 {
			t.Errorf("event %s has %d rows, want 1 (the copy; its original archived)", id, n)
		}
	}
}
