package redisinbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/redisinbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/redis"
)

func serverURL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// env is one test's database schema (inbox + effects) and Redis stream with
// the consumer group "shipping".
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	in     *inbox.Inbox
	client *goredis.Client
	stream string
	pub    *redis.Publisher

	mu      sync.Mutex
	results map[uuid.UUID][]string
	calls   atomic.Int32
	fail    func(inbox.Message) error
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := inbox.Migrate(ctx(t), pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx(t), `CREATE TABLE effects (event_id UUID NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := goredis.ParseURL(serverURL())
	if err != nil {
		t.Fatal(err)
	}
	client := goredis.NewClient(opts)
	t.Cleanup(func() { client.Close() })
	stream := testdb.NewSchemaName("pgoutbox.test.inbox")
	t.Cleanup(func() { client.Del(context.Background(), stream) })
	if err := redisinbox.EnsureGroup(ctx(t), client, stream, "shipping"); err != nil {
		t.Fatalf("Redis at %s: %v", serverURL(), err)
	}
	if err := redisinbox.EnsureGroup(ctx(t), client, stream, "shipping"); err != nil {
		t.Fatalf("EnsureGroup is not idempotent: %v", err)
	}
	pub, err := redis.New(client, redis.Config{Stream: stream})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, in: in, client: client, stream: stream, pub: pub, results: map[uuid.UUID][]string{}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func (e *env) proc() inbox.Processor {
	handle := e.in.Processor(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		e.calls.Add(1)
		e.mu.Lock()
		fail := e.fail
		e.mu.Unlock()
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, m.ID)
		return err
	})
	return func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
		res, err := handle(ctx, m)
		outcome := "processed"
		switch {
		case err != nil:
			outcome = "error"
		case res.Duplicate:
			outcome = "duplicate"
		}
		e.mu.Lock()
		e.results[m.ID] = append(e.results[m.ID], outcome)
		e.mu.Unlock()
		return res, err
	}
}

func (e *env) outcomes(id uuid.UUID) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.results[id]...)
}

func (e *env) run(cfg redisinbox.Config) (stop func()) {
	e.t.Helper()
	cfg.Stream, cfg.Group = e.stream, "shipping"
	if cfg.Consumer == "" {
		cfg.Consumer = "c2"
	}
	if cfg.Block == 0 {
		cfg.Block = 100 * time.Millisecond
	}
	c, err := redisinbox.New(e.client, e.proc(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				e.t.Error("Run did not return within 10s of cancellation")
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *env) publish(n int) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	for i := range n {
		m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: fmt.Sprint(i),
			EventType: "order.created", Payload: []byte(`{}`), CreatedAt: time.Now()}
		if err := e.pub.Publish(ctx(e.t), m); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func (e *env) effects(id uuid.UUID) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), `SELECT count(*) FROM effects WHERE event_id = $1`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// pending is the group's count of delivered, unacknowledged entries.
func (e *env) pending() int64 {
	e.t.Helper()
	p, err := e.client.XPending(ctx(e.t), e.stream, "shipping").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Count
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) waitOutcomes(ids []uuid.UUID, n int) {
	e.t.Helper()
	waitFor(e.t, 15*time.Second, fmt.Sprintf("%d outcomes per event", n), func() bool {
		for _, id := range ids {
			if len(e.outcomes(id)) < n {
				return false
			}
		}
		return true
	})
}

func TestProcessesAndAcks(t *testing.T) {
	e := setup(t)
	stop := e.run(redisinbox.Config{})
	ids := e.publish(20)
	e.waitOutcomes(ids, 1)
	stop()
	if n := e.pending(); n != 0 {
		t.Errorf("pending entries = %d, want 0 (all XACKed)", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 1 || got[0] != "processed" {
			t.Errorf("event %s: outcomes %v", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d", id, n)
		}
	}
}

// A handler error leaves the entry pending; XAUTOCLAIM hands it back after
// ClaimIdle and the retry commits once.
func TestHandlerErrorLeavesPendingAndClaimRetries(t *testing.T) {
	e := setup(t)
	failed := map[uuid.UUID]bool{}
	e.fail = func(m inbox.Message) error {
		if !failed[m.ID] {
			failed[m.ID] = true
			return errors.New("payment service timed out")
		}
		return nil
	}
	stop := e.run(redisinbox.Config{ClaimIdle: 200 * time.Millisecond})
	ids := e.publish(3)
	e.waitOutcomes(ids, 2)
	stop()
	if n := e.pending(); n != 0 {
		t.Errorf("pending entries = %d, want 0", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); strings.Join(got, " ") != "error processed" {
			t.Errorf("event %s: outcomes %v, want [error processed]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
}

// Consumer c1 dies after its inbox transactions committed and before XACK.
// Consumer c2 claims the idle entries, the inbox reports duplicates, and c2
// acknowledges them; the effects happened once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	e := setup(t)
	ids := e.publish(3)
	streams, err := e.client.XReadGroup(ctx(t), &goredis.XReadGroupArgs{
		Group: "shipping", Consumer: "c1", Streams: []string{e.stream, ">"}, Count: 10, Block: -1,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	proc := e.proc()
	for _, x := range streams[0].Messages {
		m, err := redisinbox.ToMessage(x)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("c1: %+v %v", res, err)
		}
	}
	// The crash: c1 never acknowledges.
	if n := e.pending(); n != 3 {
		t.Fatalf("pending after c1 = %d, want 3", n)
	}

	stop := e.run(redisinbox.Config{Consumer: "c2", ClaimIdle: 300 * time.Millisecond})
	e.waitOutcomes(ids, 2)
	stop()
	if n := e.pending(); n != 0 {
		t.Errorf("pending entries = %d, want 0", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); strings.Join(got, " ") != "processed duplicate" {
			t.Errorf("event %s: outcomes %v, want [processed duplicate]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
	if n := e.calls.Load(); n != 3 {
		t.Errorf("handler calls = %d, want 3", n)
	}
}

// An entry without an event id is acknowledged without reaching the handler.
func TestInvalidEntryAcked(t *testing.T) {
	e := setup(t)
	if err := e.client.XAdd(ctx(t), &goredis.XAddArgs{Stream: e.stream, Values: []any{"payload", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	stop := e.run(redisinbox.Config{})
	good := e.publish(1)
	e.waitOutcomes(good, 1)
	stop()
	if n := e.pending(); n != 0 {
		t.Errorf("pending entries = %d, want 0", n)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler calls = %d, want 1", n)
	}
}

func TestRunWithoutGroup(t *testing.T) {
	e := setup(t)
	c, err := redisinbox.New(e.client, e.proc(), redisinbox.Config{Stream: e.stream, Group: "nobody", Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx(t)); err == nil || !strings.Contains(err.Error(), "NOGROUP") {
		t.Fatalf("Run = %v, want a NOGROUP error", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	ok := redisinbox.Config{Stream: "s", Group: "g", Consumer: "c"}
	for _, tc := range []struct {
		mod   func(*redisinbox.Config)
		field string
	}{
		{func(c *redisinbox.Config) { c.Stream = "" }, "Config.Stream"},
		{func(c *redisinbox.Config) { c.Group = "" }, "Config.Group"},
		{func(c *redisinbox.Config) { c.Consumer = "" }, "Config.Consumer"},
		{func(c *redisinbox.Config) { c.Count = -1 }, "Config.Count"},
		{func(c *redisinbox.Config) { c.Block = -1 }, "Config.Block"},
		{func(c *redisinbox.Config) { c.ClaimIdle = -1 }, "Config.ClaimIdle"},
		{func(c *redisinbox.Config) { c.ClaimInterval = -1 }, "Config.ClaimInterval"},
	} {
		cfg := ok
		tc.mod(&cfg)
		if _, err := redisinbox.New(client, proc, cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", cfg, err, tc.field)
		}
	}
	if _, err := redisinbox.New(client, nil, ok); err == nil {
		t.Error("New(nil processor) accepted")
	}
}
