package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

func TestRelayPublishesEveryEvent(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(250)
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 50, Workers: 3})
	stop := e.run(r)
	if err := pub.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatalf("published %d of %d: %v", pub.Len(), len(ids), err)
	}
	stop()
	counts := pub.Count()
	for _, id := range ids {
		if counts[id] != 1 {
			t.Errorf("event %s published %d times, want 1", id, counts[id])
		}
	}
	if n := e.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d rows still unprocessed", n)
	}
}

// TestPlainInsertIsRelayed: an application that writes events with a plain
// INSERT (no id, no seq, no headers) works unchanged against our schema.
func TestPlainInsertIsRelayed(t *testing.T) {
	e := setup(t)
	_, err := e.pool.Exec(ctx(t), `
        INSERT INTO outbox_events
            (aggregate_type, aggregate_id, event_type, payload)
        VALUES ($1, $2, $3, $4)
    `, "order", "ord-1", "order.created", []byte(`{"order_id":"ord-1","total":42}`))
	if err != nil {
		t.Fatalf("the plain INSERT fails against the migrated table: %v", err)
	}
	pub := memory.New()
	res, err := e.relay(pub, outbox.RelayConfig{}).ProcessBatch(ctx(t))
	if err != nil || res.Published != 1 {
		t.Fatalf("ProcessBatch = %+v, %v", res, err)
	}
	m := pub.Messages()[0]
	if m.AggregateID != "ord-1" || string(m.Payload) != `{"total": 42, "order_id": "ord-1"}` || m.ID == uuid.Nil {
		t.Errorf("message = %+v (payload %s)", m, m.Payload)
	}
}

func TestFailingPublishBacksOffThenDeadLetters(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(3)
	poison := ids[1]
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == poison {
			return errors.New("consumer schema mismatch")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{MaxAttempts: 3, RetryBackoff: outbox.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond}})

	// First batch: the healthy rows go through, the poison one is retried later.
	res, err := r.ProcessBatch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.Published != 2 || res.Retried != 1 {
		t.Fatalf("first batch = %+v, want 2 published, 1 retried", res)
	}
	var attempts int
	var lastErr string
	var retryAfter, createdAt time.Time
	err = e.pool.QueryRow(ctx(t), `SELECT attempts, last_error, retry_after, created_at FROM outbox_events WHERE id = $1`, poison).
		Scan(&attempts, &lastErr, &retryAfter, &createdAt)
	if err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || lastErr != "consumer schema mismatch" || !retryAfter.After(createdAt) {
		t.Errorf("after one failure: attempts=%d last_error=%q retry_after=%s", attempts, lastErr, retryAfter)
	}

	// Keep going until it is a dead letter; it must take exactly MaxAttempts.
	testkit.Eventually(t, 20*time.Second, "the poison row dead-lettered", func() bool {
		if _, err := r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
		return e.count("dead_at IS NOT NULL") > 0
	})
	if err := e.pool.QueryRow(ctx(t), `SELECT attempts FROM outbox_dead_letters WHERE id = $1`, poison).Scan(&attempts); err != nil {
		t.Fatalf("poison row not in the dead-letter view: %v", err)
	}
	if attempts != 3 {
		t.Errorf("dead letter after %d attempts, want MaxAttempts=3", attempts)
	}
	// A dead letter is never claimed again.
	res, err = r.ProcessBatch(ctx(t))
	if err != nil || res.Claimed != 0 {
		t.Errorf("after dead-lettering, batch = %+v, %v; want nothing claimed", res, err)
	}
	if c := pub.Count(); c[poison] != 0 || c[ids[0]] != 1 || c[ids[2]] != 1 {
		t.Errorf("publish counts = %v", c)
	}
}

func TestPermanentErrorDeadLettersAtOnce(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(2)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == ids[0] {
			return outbox.Permanent(errors.New("message exceeds broker limit"))
		}
		return nil
	})
	res, err := e.relay(pub, outbox.RelayConfig{}).ProcessBatch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if res.DeadLettered != 1 || res.Published != 1 {
		t.Fatalf("batch = %+v", res)
	}
	var attempts int
	var lastErr string
	if err := e.pool.QueryRow(ctx(t), `SELECT attempts, last_error FROM outbox_dead_letters`).Scan(&attempts, &lastErr); err != nil {
		t.Fatal(err)
	}
	if attempts != 1 || !strings.Contains(lastErr, "exceeds broker limit") {
		t.Errorf("dead letter attempts=%d last_error=%q", attempts, lastErr)
	}
}

// TestBrokerOutageBurnsNoAttempts: a relay that counted attempts during an
// outage would turn it into dead letters. Ours backs off and drains
// afterwards.
func TestBrokerOutageBurnsNoAttempts(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(40)
	var down atomic.Bool
	down.Store(true)
	pub := memory.New()
	var calls atomic.Int64
	pub.FailWith(func(*outbox.Message) error {
		calls.Add(1)
		if down.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	r := e.relay(pub, outbox.RelayConfig{
		BatchSize: 10, MaxAttempts: 2, Registerer: reg,
		OutageBackoff: outbox.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond},
	})
	stop := e.run(r)
	// Let the relay hit the outage many times: far more than MaxAttempts.
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d publishes tried", calls.Load()) }), 10*time.Second,
		"20 publishes tried during the outage", func() bool { return calls.Load() >= 20 })
	if got := gauge(t, reg, "outbox_broker_unavailable"); got != 1 {
		t.Errorf("outbox_broker_unavailable = %v during the outage, want 1", got)
	}
	if err := r.Ready(ctx(t)); err == nil {
		t.Error("Ready() = nil during a broker outage")
	}
	if n := e.count("attempts > 0 OR dead_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows burnt attempts during a broker outage", n)
	}
	down.Store(false)
	if err := pub.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatalf("after the outage, %d of %d delivered: %v", len(pub.Count()), len(ids), err)
	}
	stop()
	if n := e.count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d rows left unprocessed", n)
	}
	if n := e.count("attempts > 0 OR dead_at IS NOT NULL"); n != 0 {
		t.Errorf("%d rows with attempts or dead letters after the outage", n)
	}
	if got := gauge(t, reg, "outbox_broker_unavailable"); got != 0 {
		t.Errorf("outbox_broker_unavailable = %v after recovery, want 0", got)
	}
}

// TestCrashBetweenPublishAndMark: the broker confirmed, then the relay lost its
// database session before marking. The event must be published again.
func TestCrashBetweenPublishAndMark(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(5)
	pub := memory.New()
	var killed atomic.Bool
	pub.FailWith(func(m *outbox.Message) error {
		if killed.CompareAndSwap(false, true) {
			// Kill the relay's own session, which holds the claim transaction:
			// the marks that follow this confirmed publish will fail. Only this
			// test's session: its claim names this test's schema.
			_, err := e.pool.Exec(context.Background(), `
				SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()
				  AND state = 'idle in transaction' AND query LIKE '%FOR UPDATE SKIP LOCKED%'
				  AND query LIKE '%' || $1 || '%'`, e.schema)
			if err != nil {
				t.Errorf("terminate: %v", err)
			}
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Workers: 1})
	if _, err := r.ProcessBatch(ctx(t)); err == nil {
		t.Fatal("batch whose session was killed reported success")
	}
	if n := e.count("processed_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows marked although the mark's session was killed", n)
	}
	testenv.WaitUnlocked(t, e.pool, 5) // the killed session's locks
	res, err := r.ProcessBatch(ctx(t))
	if err != nil || res.Published != 5 {
		t.Fatalf("retry batch = %+v, %v", res, err)
	}
	for _, id := range ids {
		if c := pub.Count()[id]; c != 2 {
			t.Errorf("event %s published %d times, want 2 (at-least-once after the crash)", id, c)
		}
	}
}

func TestTwoRelaysPublishEachEventOnce(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(2000)
	pub := memory.New() // shared: counts across both relays
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for range 2 {
		e.run(e.relay(pub, outbox.RelayConfig{BatchSize: 25, Workers: 3, Logger: logger}))
	}
	if err := pub.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatal(err)
	}
	if pub.Len() != len(ids) {
		t.Errorf("%d publishes for %d events: some were published twice; relay logs:\n%s", pub.Len(), len(ids), logs.String())
	}
}

// TestGracefulShutdownMidBatch cancels Run while a batch is being published:
// the batch completes (confirmed rows marked) and nothing unconfirmed is marked.
func TestGracefulShutdownMidBatch(t *testing.T) {
	e := setup(t)
	e.writeBatch(10)
	pub := memory.New()
	inPublish := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	pub.FailWith(func(m *outbox.Message) error {
		once.Do(func() { close(inPublish) })
		<-release
		if m.AggregateID == "o-3" {
			return errors.New("nack")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Workers: 1})
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	<-inPublish
	cancel()
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v, want nil on graceful shutdown", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	confirmed := map[uuid.UUID]bool{}
	for _, m := range pub.Messages() {
		confirmed[m.ID] = true
	}
	rows, err := e.pool.Query(ctx(t), `SELECT id FROM outbox_events WHERE processed_at IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range marked {
		if !confirmed[id] {
			t.Errorf("row %s marked processed without a broker confirmation", id)
		}
	}
	if len(marked) != 9 || len(confirmed) != 9 {
		t.Errorf("marked %d, confirmed %d; want the in-flight batch finished: 9 and 9", len(marked), len(confirmed))
	}
}

// TestHungPublisherReleasesLocks: a publisher that never returns must not pin
// the rows: at the publish timeout the batch is rolled back, and another relay
// can claim the rows.
func TestHungPublisherReleasesLocks(t *testing.T) {
	e := setup(t)
	e.writeBatch(3)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	hung := outbox.PublisherFunc(func(ctx context.Context, m *outbox.Message) error {
		<-hang // ignores ctx on purpose
		return nil
	})
	r := e.relay(hung, outbox.RelayConfig{PublishTimeout: 200 * time.Millisecond})
	start := time.Now()
	res, err := r.ProcessBatch(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("batch with a hung publisher took %s", took)
	}
	if res.Unavailable != 3 {
		t.Errorf("batch = %+v, want all 3 left untouched as broker unavailable", res)
	}
	pub := memory.New()
	res, err = e.relay(pub, outbox.RelayConfig{}).ProcessBatch(ctx(t))
	if err != nil || res.Published != 3 {
		t.Fatalf("second relay batch = %+v, %v; rows still locked?", res, err)
	}
	if n := e.count("attempts > 0"); n != 0 {
		t.Errorf("%d rows burnt an attempt on a timeout", n)
	}
}

func TestRelayRefusesUnmigratedTable(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(ctx(t))
	if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "outbox migrate") {
		t.Fatalf("Run on a missing table = %v, want ErrNotMigrated telling to migrate", err)
	}
	// The table of the plain INSERT alone (migration 1) lacks the relay's
	// columns.
	if _, err := pool.Exec(ctx(t), `CREATE TABLE outbox_events (id UUID PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregate_type VARCHAR(100) NOT NULL, aggregate_id VARCHAR(100) NOT NULL, event_type VARCHAR(100) NOT NULL,
		payload JSONB NOT NULL, attempts INT NOT NULL DEFAULT 0, created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
		processed_at TIMESTAMPTZ)`); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx(t)); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Fatalf("Run on the bare table of migration 1 = %v, want ErrNotMigrated", err)
	}
}

func TestRelayConfigValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	cases := map[string]outbox.RelayConfig{
		"BatchSize":        {BatchSize: -1},
		"Workers":          {Workers: -3},
		"MaxAttempts":      {MaxAttempts: -1},
		"RetryBackoff":     {RetryBackoff: outbox.Backoff{Base: time.Minute, Max: time.Second}},
		"PublishTimeout":   {PublishTimeout: time.Nanosecond},
		"Table":            {Table: strings.Repeat("t", 64)},
		"Schema":           {Schema: "a\x00b"},
		"Retention":        {Retention: -time.Hour},
		"RescanInterval":   {RescanInterval: time.Nanosecond},
		"StatementTimeout": {StatementTimeout: time.Millisecond},
		"MaxBatchBytes":    {MaxBatchBytes: -1},
		"BatchDelay":       {BatchDelay: time.Minute},
		"BatchDelayAbove":  {BatchDelayAbove: -5},
		"WALSenderTimeout": {WALSenderTimeout: time.Second},
	}
	for field, cfg := range cases {
		_, err := outbox.NewRelay(pool, memory.New(), cfg)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Config != "RelayConfig" || ce.Field != field {
			t.Errorf("%s: err = %#v, want a *ConfigError naming RelayConfig.%s", field, err, field)
			continue
		}
		if want := "outbox: RelayConfig." + field + ": "; !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: err = %q, want it to start %q", field, err, want)
		}
	}
	// The other constructors name their field the same way.
	_, err := outbox.NewWriter(outbox.WriterConfig{Table: strings.Repeat("t", 64)})
	if ce := (*outbox.ConfigError)(nil); !errors.As(err, &ce) || ce.Config != "WriterConfig" || ce.Field != "Table" {
		t.Errorf("NewWriter with a long table: err = %v, want a *ConfigError for WriterConfig.Table", err)
	}
	if _, err := outbox.NewRelay(nil, memory.New(), outbox.RelayConfig{}); err == nil {
		t.Error("nil pool accepted")
	}
	if _, err := outbox.NewRelay(pool, nil, outbox.RelayConfig{}); err == nil {
		t.Error("nil publisher accepted")
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	e := setup(t)
	e.writeBatch(1)
	pub := memory.New()
	pub.FailWith(func(*outbox.Message) error {
		return outbox.RetryAfter(errors.New("429 too many requests"), time.Hour)
	})
	r := e.relay(pub, outbox.RelayConfig{RetryBackoff: outbox.Backoff{Base: time.Millisecond, Max: time.Second}})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	var wait time.Duration
	if err := e.pool.QueryRow(ctx(t), `SELECT extract(epoch FROM retry_after - now())::float8 * interval '1 second' FROM outbox_events`).Scan(&wait); err != nil {
		t.Fatal(err)
	}
	if wait < 59*time.Minute {
		t.Errorf("retry_after is %s away, want the requested hour", wait)
	}
}

func TestDeleteOnPublish(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(5)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == ids[2] {
			return errors.New("nack")
		}
		return nil
	})
	res, err := e.relay(pub, outbox.RelayConfig{DeleteOnPublish: true}).ProcessBatch(ctx(t))
	if err != nil || res.Published != 4 || res.Retried != 1 {
		t.Fatalf("batch = %+v, %v", res, err)
	}
	var left []uuid.UUID
	rows, _ := e.pool.Query(ctx(t), `SELECT id FROM outbox_events WHERE attempts = 1 AND last_error = 'nack'`)
	left, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	if e.count("true") != 1 || len(left) != 1 || left[0] != ids[2] {
		t.Errorf("rows left = %d (%v); want only the failed one, with its attempt recorded", e.count("true"), left)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunRidesOutDatabaseOutageAtStart: a database that is unreachable when
// Run starts (a restart, a failover) delays the relay; it does not end it.
func TestRunRidesOutDatabaseOutageAtStart(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(3)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	px := tcpproxy.Start(t, u.Host)
	u.Host = px.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = e.schema
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pub := memory.New()
	r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: e.schema,
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	px.Cut()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned during a database outage at start: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	px.Restore()
	if err := pub.WaitDistinct(ctx(t), len(ids)); err != nil {
		t.Fatalf("relay did not resume after the outage: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// TestSlowPublishesShrinkBatches: a destination too slow for a full batch
// within the publish timeout gets smaller batches (halved while a publish
// takes more than a quarter of PublishTimeout), and full batches again once
// it is fast.
func TestSlowPublishesShrinkBatches(t *testing.T) {
	e := setup(t)
	e.writeBatch(200)
	var slow atomic.Bool
	slow.Store(true)
	pub := outbox.PublisherFunc(func(ctx context.Context, _ *outbox.Message) error {
		if !slow.Load() {
			return nil
		}
		select {
		case <-time.After(30 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	r := e.relay(pub, outbox.RelayConfig{BatchSize: 64, PublishTimeout: 400 * time.Millisecond,
		RetryBackoff: outbox.Backoff{Base: time.Hour, Max: time.Hour}})
	var claimed []int
	for range 4 {
		res, err := r.ProcessBatch(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, res.Claimed)
	}
	// 64×30ms, 32×30ms, 16×30ms and 8×30ms all take longer than 100ms.
	if want := []int{64, 32, 16, 8}; fmt.Sprint(claimed) != fmt.Sprint(want) {
		t.Fatalf("claimed %v while publishes were slow, want %v", claimed, want)
	}
	slow.Store(false)
	claimed = nil
	for range 4 {
		res, err := r.ProcessBatch(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		claimed = append(claimed, res.Claimed)
	}
	if want := []int{4, 8, 16, 32}; fmt.Sprint(claimed) != fmt.Sprint(want) {
		t.Fatalf("claimed %v once publishes were fast, want %v (doubling back)", claimed, want)
	}
}

// TestBadHeadersRowIsDeadLettered: a row inserted by hand whose headers are
// not a JSON object becomes a dead letter naming the problem; the rest of
// its batch is published. (A number among the values is sent as its text:
// TestHostileRows.)
func TestBadHeadersRowIsDeadLettered(t *testing.T) {
	e := setup(t)
	e.writeBatch(3)
	if _, err := e.pool.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES ('order', 'bad', 'order.created', '{}', '["retries", 3]')`); err != nil {
		t.Fatal(err)
	}
	e.writeBatch(2)
	pub := memory.New()
	res, err := e.relay(pub, outbox.RelayConfig{}).ProcessBatch(ctx(t))
	if err != nil || res.Published != 5 || res.DeadLettered != 1 {
		t.Fatalf("batch = %+v, %v; want 5 published, 1 dead letter", res, err)
	}
	var lastErr string
	if err := e.pool.QueryRow(ctx(t), `SELECT last_error FROM outbox_events WHERE aggregate_id = 'bad' AND dead_at IS NOT NULL`).Scan(&lastErr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "headers") || !strings.Contains(lastErr, "want a JSON object, got an array") {
		t.Errorf("last_error = %q, want it to name the headers", lastErr)
	}
}
