package publishertest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// observer wraps the publisher under test to count what the relay saw,
// keeping its BatchPublisher-ness (see observe).
type observer struct {
	pub outbox.Publisher

	mu        sync.Mutex
	calls     int // Publish or PublishBatch calls
	downCalls int // calls in which every message failed as unavailable
	classes   map[outbox.ErrorClass]int
	lastErr   error
}

type batchObserver struct {
	*observer
	bp outbox.BatchPublisher
}

// observe returns o as an outbox.Publisher that is a BatchPublisher exactly
// when the wrapped one is, so the relay takes the same path as without it.
func observe(pub outbox.Publisher) (*observer, outbox.Publisher) {
	o := &observer{pub: pub, classes: map[outbox.ErrorClass]int{}}
	if bp, ok := pub.(outbox.BatchPublisher); ok {
		return o, &batchObserver{observer: o, bp: bp}
	}
	return o, o
}

func (o *observer) Publish(ctx context.Context, m *outbox.Message) error {
	err := o.pub.Publish(ctx, m)
	o.record([]error{err}, 1)
	return err
}

func (o *batchObserver) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := o.bp.PublishBatch(ctx, msgs)
	o.record(errs, len(msgs))
	return errs
}

func (o *observer) record(errs []error, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	down := len(errs) == n && n > 0
	for _, err := range errs {
		if err == nil {
			down = false
			continue
		}
		o.lastErr = err
		if isDown(err) {
			o.classes[outbox.ClassUnavailable]++
		} else {
			down = false
			o.classes[outbox.Classify(err)]++
		}
	}
	if down {
		o.downCalls++
	}
}

// snapshot returns the counts so far and a description of the errors seen.
func (o *observer) snapshot() (calls, down int, errs string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls, o.downCalls, fmt.Sprintf("by class %v, last %v", o.classes, o.lastErr)
}

// logWriter sends the relay's log lines to t.Log while the test runs.
type logWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *logWriter) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// outageEnv is the Outage test's outbox: its own schema, migrated.
type outageEnv struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	writer *outbox.Writer
	want   map[string][]byte // every event written: id -> payload as stored
}

func (e *outageEnv) write(n int, phase string) {
	e.t.Helper()
	for i := range n {
		payload := fmt.Appendf(nil, `{"phase":%q,"n":%d}`, phase, i)
		err := pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			ids, err := e.writer.Write(e.ctx, tx, outbox.Event{
				AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", phase, i), EventType: "order.created",
				Payload: payload, Headers: map[string]string{"phase": phase},
			})
			for _, id := range ids {
				e.want[id.String()] = nil // filled by storedPayloads
			}
			return err
		})
		if err != nil {
			e.t.Fatalf("write event: %v", err)
		}
	}
}

// storedPayloads fills e.want with each event's payload as the table stores
// it: jsonb keeps the JSON's meaning, not its bytes, and the relay sends what
// it reads.
func (e *outageEnv) storedPayloads() {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, "SELECT id::text, payload::text FROM outbox_events")
	if err != nil {
		e.t.Fatalf("read payloads: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, payload string
		if err := rows.Scan(&id, &payload); err != nil {
			e.t.Fatal(err)
		}
		e.want[id] = []byte(payload)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *outageEnv) count(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, "SELECT count(*) FROM outbox_events WHERE "+where).Scan(&n); err != nil {
		e.t.Fatalf("count rows where %s: %v", where, err)
	}
	return n
}

// noBurntAttempts fails the test if any row had an attempt counted, an error
// recorded or was dead-lettered: an outage must cost none of these.
func (e *outageEnv) noBurntAttempts(when string) {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id, attempts, dead_at IS NOT NULL, coalesce(last_error, '')
		FROM outbox_events WHERE attempts > 0 OR dead_at IS NOT NULL OR last_error IS NOT NULL ORDER BY seq LIMIT 5`)
	if err != nil {
		e.t.Fatalf("query rows: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id       uuid.UUID
			attempts int
			dead     bool
			lastErr  string
		)
		if err := rows.Scan(&id, &attempts, &dead, &lastErr); err != nil {
			e.t.Fatal(err)
		}
		e.t.Errorf("%s: event %s has attempts=%d dead=%t last_error=%q; an outage must burn no attempt", when, id, attempts, dead, lastErr)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
}

// waitFor polls cond every 10ms until it is true, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; %s", d, what, state)
		}
		time.Sleep(10 * time.Millisecond) // poll interval
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

func testOutage(t *testing.T, b *Broker) {
	if b.Disconnect == nil {
		t.Skip("Broker.Disconnect not set")
	}
	ctx := ctxFor(t, 3*time.Minute)
	schema := testdb.Schema(t)
	e := &outageEnv{t: t, ctx: ctx, pool: testdb.Pool(t, schema), want: map[string][]byte{}}
	if _, err := outbox.Migrate(ctx, e.pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var err error
	if e.writer, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	obs, pub := observe(b.Publisher)
	logs := &logWriter{t: t}
	reg := prometheus.NewRegistry()
	cfg := outbox.RelayConfig{
		Schema: schema, BatchSize: 10, Workers: 2, PollInterval: 20 * time.Millisecond,
		MaxAttempts: 3, RetryBackoff: outbox.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		OutageBackoff:  outbox.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		PublishTimeout: 5 * time.Second, StatsInterval: 20 * time.Millisecond, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	relay, err := outbox.NewRelay(e.pool, pub, cfg)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}

	// 1. Broker up: one batch publishes everything.
	e.write(10, "up")
	res, err := relay.ProcessBatch(ctx)
	if err != nil || res.Published != 10 {
		t.Fatalf("ProcessBatch with the broker up: %+v, %v; want 10 published", res, err)
	}

	// 2. Broker cut off: a batch leaves every row untouched, as unavailable.
	restore := disconnect(t, b)
	e.write(10, "cut")
	res, err = relay.ProcessBatch(ctx)
	if err != nil {
		t.Fatalf("ProcessBatch with the broker cut off: %v", err)
	}
	if res.Claimed == 0 || res.Unavailable != res.Claimed || res.Published+res.Retried+res.DeadLettered != 0 {
		_, _, errs := obs.snapshot()
		t.Fatalf("ProcessBatch with the broker cut off: %+v; want every claimed event unavailable (publisher errors %s)", res, errs)
	}
	e.noBurntAttempts("after a batch with the broker cut off")

	// 3. The running relay, still cut off, with more events arriving.
	runCtx, stopRun := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stopRun()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Relay.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop within 30s of its context ending")
		}
		logs.stop()
	}
	t.Cleanup(stop)
	_, downBefore, _ := obs.snapshot()
	e.write(10, "cut-running")
	relay.Wake()
	waitFor(t, 60*time.Second, "the running relay to report the broker unavailable three times", func() (bool, string) {
		calls, down, classes := obs.snapshot()
		g := gauge(t, reg, "outbox_broker_unavailable")
		return g == 1 && down-downBefore >= 3, fmt.Sprintf("outbox_broker_unavailable=%v, publish calls=%d, all-unavailable calls=%d, errors %s", g, calls, down-downBefore, classes)
	})
	if err := relay.Ready(ctx); err == nil {
		t.Error("Relay.Ready is nil while the broker is cut off")
	}
	if n := e.count("processed_at IS NOT NULL"); n != 10 {
		t.Errorf("%d events processed while the broker was cut off, want the 10 from before", n)
	}
	e.noBurntAttempts("during the outage")

	// 4. Restored: the relay drains everything, including events written now.
	restore()
	e.write(10, "restored")
	relay.Wake()
	waitFor(t, 60*time.Second, "the relay to drain the outbox after the broker came back", func() (bool, string) {
		pending := e.count("processed_at IS NULL AND dead_at IS NULL")
		return pending == 0, fmt.Sprintf("%d of %d events pending", pending, len(e.want))
	})
	if n := e.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d events dead-lettered through the outage", n)
	}
	waitFor(t, 10*time.Second, "outbox_broker_unavailable to return to 0", func() (bool, string) {
		g := gauge(t, reg, "outbox_broker_unavailable")
		return g == 0, fmt.Sprintf("outbox_broker_unavailable=%v", g)
	})
	stop()
	e.noBurntAttempts("after the outage")

	e.storedPayloads()
	seen, err := readIDs(ctxFor(t, 60*time.Second), b, e.want)
	if err != nil {
		t.Fatalf("reading the events back: %v", err)
	}
	dups := 0
	for id, n := range seen {
		if _, ours := e.want[id]; ours && n > 1 {
			dups += n - 1
		}
	}
	calls, down, classes := obs.snapshot()
	t.Logf("%d events relayed through the outage; %d duplicate deliveries at the broker (allowed: at-least-once); %d publish calls, %d entirely unavailable; errors %s",
		len(e.want), dups, calls, down, classes)
}

func testRefusesAll(t *testing.T, b *Broker) {
	if b.RefuseAll == nil {
		t.Skip("Broker.RefuseAll not set")
	}
	ctx := ctxFor(t, 3*time.Minute)
	refusing, r := b.RefuseAll(t)
	var once sync.Once
	restore := func() { once.Do(r) }
	t.Cleanup(restore)

	if err := refusing.Publish(ctxFor(t, 30*time.Second), NewMessage("r1", `{"r":1}`)); outbox.Classify(err) != outbox.ClassUnavailable {
		t.Fatalf("Publish to a destination refusing everything: %v (%s), want unavailable", err, outbox.Classify(err))
	}
	batch := []*outbox.Message{NewMessage("r2", `{"r":2}`), NewMessage("r3", `{"r":3}`)}
	for i, err := range publishAll(ctxFor(t, 30*time.Second), refusing, batch) {
		if outbox.Classify(err) != outbox.ClassUnavailable {
			t.Fatalf("batch message %d to a destination refusing everything: %v (%s), want unavailable", i, err, outbox.Classify(err))
		}
	}

	schema := testdb.Schema(t)
	e := &outageEnv{t: t, ctx: ctx, pool: testdb.Pool(t, schema), want: map[string][]byte{}}
	if _, err := outbox.Migrate(ctx, e.pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	var err error
	if e.writer, err = outbox.NewWriter(outbox.WriterConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	relay, err := outbox.NewRelay(e.pool, refusing, outbox.RelayConfig{
		Schema: schema, BatchSize: 10, Workers: 1, MaxAttempts: 1, PublishTimeout: 10 * time.Second,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	e.write(5, "refused")
	// MaxAttempts 1: a single counted attempt would make a dead letter.
	for range 3 {
		res, err := relay.ProcessBatch(ctx)
		if err != nil {
			t.Fatalf("ProcessBatch while the destination refuses everything: %v", err)
		}
		if res.Claimed == 0 || res.Unavailable != res.Claimed {
			t.Fatalf("ProcessBatch while the destination refuses everything: %+v; want every claimed event unavailable", res)
		}
	}
	e.noBurntAttempts("while the destination refused everything")

	restore()
	waitFor(t, 60*time.Second, "the relay to drain the outbox once the destination accepts again", func() (bool, string) {
		res, err := relay.ProcessBatch(ctx)
		pending := e.count("processed_at IS NULL")
		return err == nil && pending == 0, fmt.Sprintf("%d of 5 events pending; last batch %+v, %v", pending, res, err)
	})
	e.noBurntAttempts("after the destination accepted again")
}
