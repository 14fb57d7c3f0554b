package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/internal/wal"
	"github.com/pgoutbox/outbox/memory"
)

// setupWAL is setup with the table's publication and slot created, and
// dropped (then checked gone) when the test ends.
func setupWAL(t *testing.T) (*env, wal.Names) {
	t.Helper()
	return setupWALOn(t, testdb.Logical(t))
}

// setupWALOn is setupWAL on srv, a server with wal_level=logical.
func setupWALOn(t *testing.T, srv *testdb.Server) (*env, wal.Names) {
	t.Helper()
	e := setupOn(t, srv)
	n := walNames(t, e)
	if _, err := outbox.SetupReplication(ctx(t), e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
		t.Fatalf("SetupReplication: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := outbox.DropReplication(c, e.pool, outbox.MigrateConfig{Schema: e.schema}); err != nil {
			t.Errorf("DropReplication: %v", err)
		}
	})
	return e, n
}

// walNames are the WAL source's names for e's table, whose slot and
// publication the test must leave behind dropped.
func walNames(t *testing.T, e *env) wal.Names {
	t.Helper()
	in, err := ident.New(e.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	n := wal.NamesFor(in, e.srv.DatabaseName())
	e.srv.ReplicationObjects(t, n.Slot, n.Publication)
	return n
}

func walConfig(cfg outbox.RelayConfig) outbox.RelayConfig {
	cfg.Source = outbox.SourceWAL
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.StatsInterval == 0 {
		cfg.StatsInterval = 200 * time.Millisecond
	}
	return cfg
}

// waitStreaming waits until r streams its slot.
func waitStreaming(t *testing.T, r *outbox.Relay, d time.Duration) {
	t.Helper()
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("status %+v", r.SourceStatus()) }), d, "the relay streaming",
		func() bool { return r.SourceStatus().Streaming })
}

// waitRowsGone waits until every row left the table: the WAL source
// deletes delivered rows in bulk, after their publish.
func (e *env) waitRowsGone(t *testing.T, d time.Duration) {
	t.Helper()
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d rows left", e.rows("true")) }), d,
		"the delivered rows deleted", func() bool { return e.rows("true") == 0 })
}

// rows counts the table's rows matching where (all rows: "true").
func (e *env) rows(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), fmt.Sprintf("SELECT count(*) FROM %s.outbox_events WHERE %s", pgx.Identifier{e.schema}.Sanitize(), where)).Scan(&n); err != nil {
		e.t.Fatalf("count: %v", err)
	}
	return n
}

// TestWALSourceCommitOrderAndRollback: two transactions of one aggregate
// that commit in the opposite order of their inserts arrive in commit
// order; a rolled-back event is never sent; delivered rows leave the table
// and nothing is marked per event.
func TestWALSourceCommitOrderAndRollback(t *testing.T) {
	e, _ := setupWAL(t)
	mem, st := timed()
	r := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	c := ctx(t)
	tx1, err := e.pool.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	first, err := e.writer.Write(c, tx1, event("agg", 1)) // inserted first (lower seq)
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := e.pool.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	second, err := e.writer.Write(c, tx2, event("agg", 2))
	if err != nil {
		t.Fatal(err)
	}
	rolled, err := e.writer.Write(c, tx2, event("other", 3))
	if err != nil {
		t.Fatal(err)
	}
	_ = rolled
	// tx2 commits first, without its "other" event: a savepoint rolled back
	// would be subtler; a whole rolled-back transaction follows.
	if err := tx2.Commit(c); err != nil {
		t.Fatal(err)
	}
	if err := tx1.Commit(c); err != nil {
		t.Fatal(err)
	}
	txR, err := e.pool.Begin(c)
	if err != nil {
		t.Fatal(err)
	}
	never, err := e.writer.Write(c, txR, event("never", 4))
	if err != nil {
		t.Fatal(err)
	}
	if err := txR.Rollback(c); err != nil {
		t.Fatal(err)
	}
	last := e.write(1) // a later commit, to know the rollback was passed
	st.waitFor(t, 60*time.Second, append(append(append([]uuid.UUID{}, first...), second...), last...)...)

	order := st.order()
	pos := map[uuid.UUID]int{}
	for i, id := range order {
		pos[id] = i
	}
	if pos[second[0]] > pos[first[0]] {
		t.Errorf("commit order: the event committed second was published first (seq order, not commit order)")
	}
	if _, ok := st.get(never[0]); ok {
		t.Error("a rolled-back event was published")
	}
	// Delivered rows are deleted in bulk; none was marked processed.
	e.waitRowsGone(t, 30*time.Second)
	if n := mem.Len(); n != 4 {
		t.Errorf("published %d messages, want 4 (no duplicates on the happy path)", n)
	}
}

// TestWALSourceFailureGoesToTable: an event whose publish fails is marked
// in the table (attempts, last_error, retry_after) and retried by the
// table workers, then dead-lettered at MaxAttempts; re-queued with
// Admin.Retry it is delivered. Other events flow meanwhile.
func TestWALSourceFailureGoesToTable(t *testing.T) {
	e, _ := setupWAL(t)
	mem := memory.New()
	var failing atomic.Value // uuid.UUID of the event that fails
	failing.Store(uuid.Nil)
	var tries atomic.Int32
	mem.FailWith(func(m *outbox.Message) error {
		if m.ID == failing.Load().(uuid.UUID) {
			tries.Add(1)
			return errors.New("rejected by the test")
		}
		return nil
	})
	r := e.relay(mem, walConfig(outbox.RelayConfig{MaxAttempts: 3,
		RetryBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	id := uuid.New()
	failing.Store(id)
	ev := event("bad", 1)
	ev.ID = id
	e.writeEvents(ev)
	good := e.write(20)
	c := ctx(t)
	if err := mem.WaitFor(c, func(ms []outbox.Message) bool {
		seen := map[uuid.UUID]bool{}
		for _, m := range ms {
			seen[m.ID] = true
		}
		for _, g := range good {
			if !seen[g] {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("the good events were not delivered: %v", err)
	}
	testkit.Eventually(t, 60*time.Second, "the failing event dead-lettered", func() bool { return e.rows("dead_at IS NOT NULL") > 0 })
	var attempts int
	var lastErr string
	if err := e.pool.QueryRow(c, "SELECT attempts, last_error FROM outbox_events WHERE id = $1 AND dead_at IS NOT NULL", id).Scan(&attempts, &lastErr); err != nil {
		t.Fatalf("the failing event is not a dead letter: %v", err)
	}
	if attempts != 3 || tries.Load() != 3 {
		t.Errorf("attempts %d, publishes %d; want 3 and 3", attempts, tries.Load())
	}
	// The last batch's delete follows its publish.
	testkit.Eventually(testkit.WithDetail(t, func() string {
		rs, _ := e.pool.Query(c, "SELECT id, aggregate_id, attempts, processed_at IS NOT NULL, dead_at IS NOT NULL, retry_after IS NOT NULL, held_by IS NOT NULL FROM outbox_events")
		for rs.Next() {
			v, _ := rs.Values()
			t.Logf("row %v", v)
		}
		rs.Close()
		return fmt.Sprintf("%d rows in the table", e.rows("true"))
	}), 30*time.Second, "only the dead letter left in the table", func() bool { return e.rows("true") == 1 })
	failing.Store(uuid.Nil)
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.Retry(c, admin.RetrySelector{IDs: []uuid.UUID{id}}); err != nil || n != 1 {
		t.Fatalf("Retry: %d, %v", n, err)
	}
	if err := mem.WaitFor(c, func(ms []outbox.Message) bool {
		for _, m := range ms {
			if m.ID == id {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("the re-queued event was not delivered: %v", err)
	}
}

// TestWALSourceSlotLostFallsBack: the slot dropped under a streaming relay
// (its walsender terminated) makes the relay fall back to the table and
// stream again from a fresh slot; every event written before, during and
// after is delivered.
func TestWALSourceSlotLostFallsBack(t *testing.T) {
	e, n := setupWAL(t)
	mem := memory.New()
	r := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)
	before := e.write(50)

	// Lose the slot: what max_slot_wal_keep_size or a DBA would do.
	c := ctx(t)
	admin := e.srv.Pool(t, e.schema)
	stop := make(chan struct{})
	var during []uuid.UUID
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ids := e.write(1)
			mu.Lock()
			during = append(during, ids...)
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	})
	dropSlotUnder(t, admin, n.Slot)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	waitStreaming(t, r, 20*time.Second)
	after := e.write(50)

	all := append(append(append([]uuid.UUID{}, before...), during...), after...)
	if err := mem.WaitDistinct(c, len(all)); err != nil {
		t.Fatalf("after the slot was lost: %d of %d events delivered: %v", mem.Distinct(), len(all), err)
	}
	counts := mem.Count()
	for _, id := range all {
		if counts[id] == 0 {
			t.Errorf("event %s lost", id)
		}
	}
	if !r.SourceStatus().Streaming || r.SourceStatus().Active != outbox.SourceWAL {
		t.Errorf("status after the fallback: %+v, want streaming the WAL again", r.SourceStatus())
	}
}

// dropSlotUnder terminates the walsender streaming slot and drops it.
func dropSlotUnder(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	var err error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("drop: %v", err) }), 30*time.Second, "slot "+slot+" dropped", func() bool {
		_, _ = pool.Exec(ctx(t), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err = pool.Exec(ctx(t), `SELECT pg_drop_replication_slot($1)`, slot)
		return err == nil
	})
}

// TestWALSourceOrderedAcrossPaths: in ordered mode, an aggregate whose
// first event fails is handed to the table; its later events arriving on
// the stream are parked behind it and published after it, in commit order,
// while other aggregates flow.
func TestWALSourceOrderedAcrossPaths(t *testing.T) {
	e, _ := setupWAL(t)
	mem, st := timed()
	var failUntil atomic.Int64
	failUntil.Store(time.Now().Add(time.Hour).UnixNano())
	inner := memory.New()
	inner.FailWith(func(m *outbox.Message) error {
		if m.AggregateID == "slow" && time.Now().UnixNano() < failUntil.Load() {
			return errors.New("not yet")
		}
		return mem.Publish(context.Background(), m)
	})
	r := e.relay(inner, walConfig(outbox.RelayConfig{Ordered: true,
		RetryBackoff: outbox.Backoff{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	var slow, fast []uuid.UUID
	for i := range 10 {
		slow = append(slow, e.writeEvents(event("slow", i))...)
		fast = append(fast, e.writeEvents(event("fast", i))...)
	}
	testkit.Eventually(testkit.WithDetail(t, func() string { e.dump(); return fmt.Sprintf("status %+v", r.SourceStatus()) }), 60*time.Second,
		"the other aggregate's events published", func() bool { return st.all(fast) })
	if n := e.rows("aggregate_id = 'slow' AND processed_at IS NULL"); n != 10 {
		t.Errorf("%d of the failing aggregate's events in the table, want all 10", n)
	}
	failUntil.Store(0)
	testkit.Eventually(testkit.WithDetail(t, func() string { e.dump(); return "unprocessed rows above" }), 60*time.Second,
		"the failing aggregate's events all published after the failures ended", func() bool { return st.all(slow) })
	order := st.order()
	pos := map[uuid.UUID]int{}
	for i, id := range order {
		pos[id] = i
	}
	for i := 1; i < len(slow); i++ {
		if pos[slow[i]] < pos[slow[i-1]] {
			t.Fatalf("inversion: slow event %d published before event %d", i, i-1)
		}
	}
	for i := 1; i < len(fast); i++ {
		if pos[fast[i]] < pos[fast[i-1]] {
			t.Fatalf("inversion among the fast events at %d", i)
		}
	}
}

// TestWALSourceTakeover: a second relay on the same table stands by while
// the first streams, and streams once the first stops (the reliability
// suite asserts the 5 s bound with killed processes); nothing
// written meanwhile is lost.
func TestWALSourceTakeover(t *testing.T) {
	e, _ := setupWAL(t)
	mem := memory.New()
	a := e.relay(mem, walConfig(outbox.RelayConfig{}))
	stopA := e.run(a)
	waitStreaming(t, a, 30*time.Second)
	b := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(b)
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("status %+v", b.SourceStatus()) }), 5*time.Second,
		"the second relay standing by", func() bool { return b.SourceStatus().Standby })
	ids := e.write(30)
	stopA()
	start := time.Now()
	ids = append(ids, e.write(30)...)
	waitStreaming(t, b, 15*time.Second)
	t.Logf("takeover in %v", time.Since(start))
	if err := mem.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatalf("%d of %d delivered after the takeover: %v", mem.Distinct(), len(ids), err)
	}
}

// TestWALSourcePrerequisiteMissing: a role without REPLICATION gets an
// error naming the missing privilege and its fix, not a hang.
func TestWALSourcePrerequisiteMissing(t *testing.T) {
	e := setupLogical(t)
	pool := rolePool(t, e.srv, e.schema, "norepl_"+e.schema, "NOREPLICATION")
	c := ctx(t)
	r, err := outbox.NewRelay(pool, memory.New(), walConfig(outbox.RelayConfig{Schema: e.schema}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = r.Run(c)
	if !errors.Is(err, outbox.ErrReplicationPrerequisite) {
		t.Fatalf("Run: %v, want ErrReplicationPrerequisite", err)
	}
	t.Logf("%v (after %v)", err, time.Since(start))
}

// all reports whether every id was published.
func (s *stamps) all(ids []uuid.UUID) bool {
	for _, id := range ids {
		if _, ok := s.get(id); !ok {
			return false
		}
	}
	return true
}

// dump logs the table's unprocessed rows, for a failing test.
func (e *env) dump() {
	rs, err := e.pool.Query(context.Background(), `SELECT seq, aggregate_id, payload::text, attempts, retry_after IS NOT NULL, dead_at IS NOT NULL, held_by IS NOT NULL, left(held_by::text, 8), left(id::text, 8)
FROM outbox_events WHERE processed_at IS NULL ORDER BY seq`)
	if err != nil {
		e.t.Logf("dump: %v", err)
		return
	}
	defer rs.Close()
	for rs.Next() {
		v, _ := rs.Values()
		e.t.Logf("row %v", v)
	}
}

// TestWALSourceRowGoneBeforeDelete: a streamed event whose row is deleted
// by someone else while it is being published (an operator's cancel, say)
// leaves the relay's bulk DELETE one row short. The relay then checks that
// the transaction is visible, deletes again, and acknowledges: no error,
// no stream reopened, no event published twice, later events delivered.
func TestWALSourceRowGoneBeforeDelete(t *testing.T) {
	e, _ := setupWAL(t)
	mem := memory.New()
	started, release := make(chan uuid.UUID, 1), make(chan struct{})
	var gated atomic.Bool
	mem.FailWith(func(m *outbox.Message) error {
		if gated.CompareAndSwap(false, true) {
			started <- uuid.UUID(m.ID)
			<-release
		}
		return nil
	})
	r := e.relay(mem, walConfig(outbox.RelayConfig{}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	first := e.write(1)[0]
	var id uuid.UUID
	select {
	case id = <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the first event was never published")
	}
	if id != first {
		t.Fatalf("published %s first, want %s", id, first)
	}
	tag, err := e.pool.Exec(ctx(t), fmt.Sprintf("DELETE FROM %s.outbox_events WHERE id = $1", pgx.Identifier{e.schema}.Sanitize()), first)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the row under the relay: %v, %d rows", err, tag.RowsAffected())
	}
	close(release)
	later := e.write(5)
	if err := mem.WaitDistinct(ctx(t), 1+len(later)); err != nil {
		t.Fatalf("%d of %d events published: %v", mem.Distinct(), 1+len(later), err)
	}
	e.waitRowsGone(t, 30*time.Second)
	if n := mem.Len(); n != 1+len(later) {
		t.Errorf("published %d messages for %d events: the stream reopened and redelivered", n, 1+len(later))
	}
	if st := r.SourceStatus(); !st.Streaming || st.Err != nil {
		t.Errorf("source status %+v, want streaming with no error", st)
	}
}

// batchLog is a BatchPublisher that records when each batch came and its
// size.
type batchLog struct {
	mu    sync.Mutex
	at    []time.Time
	sizes []int
	ids   map[uuid.UUID]bool
}

func (b *batchLog) Publish(ctx context.Context, m *outbox.Message) error {
	return b.PublishBatch(ctx, []*outbox.Message{m})[0]
}

func (b *batchLog) PublishBatch(_ context.Context, msgs []*outbox.Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.at = append(b.at, time.Now())
	b.sizes = append(b.sizes, len(msgs))
	for _, m := range msgs {
		b.ids[uuid.UUID(m.ID)] = true
	}
	return make([]error, len(msgs))
}

func (b *batchLog) distinct() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ids)
}

// TestWALSourcePacesAHeavyStream: above BatchDelayAbove transactions a
// second, the WAL source reads the stream at most once per BatchDelay, so
// one-event transactions committed back to back reach the publisher many
// to a batch instead of one by one; every event is still delivered once.
func TestWALSourcePacesAHeavyStream(t *testing.T) {
	e, _ := setupWAL(t)
	pub := &batchLog{ids: map[uuid.UUID]bool{}}
	r := e.relay(pub, walConfig(outbox.RelayConfig{BatchDelay: 50 * time.Millisecond, BatchDelayAbove: 20}))
	e.run(r)
	waitStreaming(t, r, 30*time.Second)

	// The rate is taken over a second: write for 2.5s, judge the batches
	// of the last second.
	const writers = 4
	start := time.Now()
	var (
		wg      sync.WaitGroup
		written atomic.Int64
	)
	for range writers {
		wg.Go(func() {
			for time.Since(start) < 2500*time.Millisecond {
				e.write(1)
				written.Add(1)
			}
		})
	}
	wg.Wait()
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d published", pub.distinct(), written.Load()) }), 60*time.Second,
		"every event written published", func() bool { return int64(pub.distinct()) == written.Load() })
	pub.mu.Lock()
	defer pub.mu.Unlock()
	// Judged on events per batch over the window: batches are what cost
	// the relay, and a stall of the writers (a loaded machine) leaves a few
	// small ones that a median would weigh as much as the paced ones.
	var sizes []int
	events := 0
	for i, at := range pub.at {
		if at.Sub(start) >= 1500*time.Millisecond && at.Sub(start) < 2500*time.Millisecond {
			sizes = append(sizes, pub.sizes[i])
			events += pub.sizes[i]
		}
	}
	slices.Sort(sizes)
	if len(sizes) == 0 || events < 4*len(sizes) {
		t.Errorf("%d events written; %d events in %d batches from 1.5s to 2.5s, sizes %v: want at least 4 one-event transactions per batch", written.Load(), events, len(sizes), sizes)
	}
	t.Logf("%d events in %d batches from 1.5s to 2.5s", events, len(sizes))
}

// TestWALSourceReopenBackoffResets: a stream that worked and was cut
// reopens at the first step of OutageBackoff, however many times it was
// cut before. The backoff used to grow over the relay's life: after about
// six interruptions each one cost 8-15 s with nothing delivered.
func TestWALSourceReopenBackoffResets(t *testing.T) {
	e, n := setupWAL(t)
	mem := memory.New()
	logs := &logRecorder{}
	base := 50 * time.Millisecond
	r := e.relay(mem, walConfig(outbox.RelayConfig{OutageBackoff: outbox.Backoff{Base: base, Max: 10 * time.Second},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}))
	e.run(r)
	for i := range 8 {
		waitStreaming(t, r, 30*time.Second)
		e.write(1)
		if err := mem.WaitDistinct(ctx(t), i+1); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx(t), `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, n.Slot); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 10*time.Second, "the relay noticing its walsender's end", func() bool { return !r.SourceStatus().Streaming })
	}
	waitStreaming(t, r, 30*time.Second)
	var waits []time.Duration
	for _, line := range strings.Split(logs.String(), "\n") {
		_, after, ok := strings.Cut(line, "retry_in=")
		if !ok || !strings.Contains(line, "stream ended; reopening") {
			continue
		}
		d, err := time.ParseDuration(strings.Fields(after)[0])
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, d)
	}
	if len(waits) < 8 {
		t.Fatalf("%d reopenings logged, want 8:\n%s", len(waits), logs.String())
	}
	for i, d := range waits {
		if d > base {
			t.Errorf("reopening %d waited %v, want the first step (at most %v): %v", i+1, d, base, waits)
			break
		}
	}
}
