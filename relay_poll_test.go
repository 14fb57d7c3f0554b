package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// claimCounter counts the relay's claims: each opens its lease's
// transaction with a batch that starts with BEGIN.
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *claimCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if q := d.Batch.QueuedQueries; len(q) > 0 && q[0].SQL == "BEGIN" {
		c.n.Add(1)
	}
	return ctx
}
func (c *claimCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *claimCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// countedPool is a pool on e's schema whose claims are counted.
func (e *env) countedPool() (*pgxpool.Pool, *claimCounter) {
	c := &claimCounter{}
	return e.extraPool(c, nil), c
}

// An idle relay polls once per PollInterval, not once per worker: with four
// workers the database sees a quarter of the claims.
func TestIdleRelayPollsOncePerInterval(t *testing.T) {
	e := setup(t)
	pool, claims := e.countedPool()
	r, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{
		Schema: e.schema, Workers: 4, PollInterval: 50 * time.Millisecond, StatsInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	waitIdle(t, sig, 4) // past the workers' first claims
	before := claims.n.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	got := claims.n.Load() - before
	t.Logf("%d claims in %s", got, window)
	// 40 polls in 2 s; four workers polling each on their own make 160.
	if got < 20 || got > 60 {
		t.Errorf("an idle relay of 4 workers claimed %d times in %s at PollInterval 50ms, want about 40", got, window)
	}

	// The shared poll still finds a plain INSERT that nothing announced.
	e.write(1)
	testkit.Eventually(t, 45*time.Second, "the unannounced event processed", func() bool { return e.count("processed_at IS NOT NULL") == 1 })
}

// A backlog that arrives while the relay is idle is worked by every worker:
// a full batch makes the relay's poll due at once, so the workers waiting on
// it join in instead of waiting for it.
func TestBacklogJoinsIdleWorkers(t *testing.T) {
	e := setup(t)
	var inFlight, most atomic.Int64
	pub := outbox.PublisherFunc(func(ctx context.Context, _ *outbox.Message) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{
		Workers: 4, BatchSize: 10, PollInterval: 200 * time.Millisecond, StatsInterval: time.Hour,
	})
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	waitIdle(t, sig, 4) // idle: every worker waits on the poll
	e.writeBatch(400)
	testkit.Eventually(t, 45*time.Second, "the 400 events processed", func() bool { return e.count("processed_at IS NOT NULL") == 400 })
	t.Logf("at most %d publishes at a time", most.Load())
	if m := most.Load(); m < 2 {
		t.Errorf("a backlog of 40 batches was published by at most %d worker at a time, want the idle workers to join", m)
	}
}

// waitIdle waits until each of the relay's workers has come back from a
// short claim to wait for the relay's poll.
func waitIdle(t *testing.T, sig *engine.TestSignals, workers int) {
	t.Helper()
	seen := map[int]bool{}
	for len(seen) < workers {
		seen[sig.Idle.Wait(t, 10*time.Second)] = true
	}
}
