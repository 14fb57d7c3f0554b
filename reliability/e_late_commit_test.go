package reliability

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// TestE_LateCommit: a large transaction held open while later single-row
// commits go past it (so the relay's claim floor passes its rows), then
// committed. Its rows are below the floor, found by the rescan; they must
// drain back to back, within seconds of the commit plus one
// RescanInterval, not one batch per RescanInterval (which took ~100 s for
// 100k rows at batch 1000).
func TestE_LateCommit(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	n := long(100_000, 100_000)
	const rescan = time.Second
	bound := rescan + 30*time.Second

	// The late transaction: n events through outbox.Writer, not committed.
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Minute)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	rec := make([]Written, 0, n)
	for start := 0; start < n; start += 5000 {
		evs := make([]outbox.Event, 0, 5000)
		for i := start; i < min(start+5000, n); i++ {
			id := uuid.Must(uuid.NewV7())
			agg := fmt.Sprintf("late-%d", i%1000)
			evs = append(evs, outbox.Event{ID: id, AggregateType: "acct", AggregateID: agg, EventType: "ev",
				Payload: fmt.Appendf(nil, `{"n":%d,"agg":%q}`, i/1000, agg)})
			rec = append(rec, Written{ID: id.String(), Aggregate: agg, N: i / 1000})
		}
		if _, err := w.Write(ctx, tx, evs...); err != nil {
			t.Fatal(err)
		}
	}

	r := e.newRelay("r", relayOpts{workers: 2, batch: 1000,
		extra: []string{"--rescan-interval", rescan.String()}})
	p := r.start()
	// Later commits, one event each, go past the open transaction: the
	// relay publishes them and its floor moves past the late rows.
	wl := e.startWriters(&workload{writers: 1, maxPerTx: 1, pause: 20 * time.Millisecond})
	r.waitPublishing(p, 30*time.Second)
	time.Sleep(3 * rescan)
	wl.stop()
	if _, ok := e.waitDrained(30 * time.Second); !ok {
		t.Fatalf("the later commits were not drained: %d pending", e.pending())
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.hist.Record(Committed, rec...)
	drain, ok := e.waitDrained(long(3*time.Minute, 3*time.Minute))
	if !ok {
		t.Errorf("late transaction of %d rows not drained in %s: %d pending", n, drain, e.pending())
	} else if drain > bound {
		t.Errorf("late transaction of %d rows drained in %s, want under %s (one rescan interval plus the drain)", n, drain, bound)
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d", code)
	}
	attempts := e.count("attempts > 0")
	if attempts != 0 {
		t.Errorf("%d events burned attempts; want 0", attempts)
	}
	res := e.finish(Row{Key: "e-late", Scenario: "Late commit below the claim floor",
		Fault: fmt.Sprintf("a %d-row transaction held open while later commits went past it, then committed", n),
		Runs:  1, Resent: e.wire.resent(), AttemptsBurned: attempts, AttemptsMeasured: true, Drain: drain,
		Details: []string{fmt.Sprintf("relay batch 1000, rescan interval %s: the %d late rows drained %s after their commit (bound %s)",
			rescan, n, drain.Round(10*time.Millisecond), bound)}})
	if res.Duplicated > 0 || e.dead() > 0 {
		t.Errorf("duplicated %d, dead letters %d; want 0 and 0", res.Duplicated, e.dead())
	}
}
