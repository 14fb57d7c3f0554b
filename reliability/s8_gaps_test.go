package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// TestScenario8GapsAndLateCommits: the seq column gets gaps (rolled-back
// inserts, values burnt by nextval) and transactions holding a low seq
// commit seconds after later ones, while an ordered relay runs. Nothing may
// be skipped (the relay keeps no high-water mark) and, in ordered mode, no
// aggregate reordered.
func TestScenario8GapsAndLateCommits(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	dur := long(15*time.Second, 3*time.Minute)

	// Regular writers: a quarter of their transactions roll back, and every
	// fifth one holds its locks and commits 1.5s late.
	w := e.startWriters(&workload{writers: 4, aggregates: 15, pause: 20 * time.Millisecond, rollbackPct: 25,
		lateEvery: 5, lateHold: 1500 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50, ordered: true})
	p := r.start()

	// Very late committers: each takes a seq early, then waits 2-6 s while
	// everything else flows past it.
	writer, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var lateMu sync.Mutex
	late, lateRolledBack := 0, 0
	stop := make(chan struct{})
	for g := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				agg := fmt.Sprintf("late%d-a%d", g, i)
				id := uuid.Must(uuid.NewV7())
				ev := outbox.Event{ID: id, AggregateType: "acct", AggregateID: agg, EventType: "ev", Payload: fmt.Appendf(nil, `{"n":0,"agg":%q}`, agg)}
				rec := Written{ID: id.String(), Aggregate: agg, N: 0}
				tx, err := e.pool.Begin(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := writer.Write(context.Background(), tx, ev); err != nil {
					t.Error(err)
					tx.Rollback(context.Background())
					return
				}
				time.Sleep(time.Duration(2000+rand.IntN(4000)) * time.Millisecond)
				lateMu.Lock()
				if rand.IntN(4) == 0 {
					tx.Rollback(context.Background())
					e.hist.Record(RolledBack, rec)
					lateRolledBack++
				} else if err := tx.Commit(context.Background()); err != nil {
					e.hist.Record(Ambiguous, rec)
				} else {
					e.hist.Record(Committed, rec)
					late++
				}
				lateMu.Unlock()
			}
		})
	}
	// Gaps: burn blocks of seq values.
	burnt := 0
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		time.Sleep(time.Second)
		k := 100 + rand.IntN(900)
		if _, err := e.pool.Exec(context.Background(), `SELECT nextval(pg_get_serial_sequence($1, 'seq')) FROM generate_series(1, $2)`, e.table, k); err != nil {
			t.Fatal(err)
		}
		burnt += k
	}
	close(stop)
	wg.Wait()
	w.stop()
	lastFault := time.Now()
	if _, ok := e.waitDrained(2 * time.Minute); !ok {
		t.Errorf("not drained: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() {
		t.Fatalf("relay exited: %s", tail(p.stderr.String(), 20))
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d", code)
	}
	var maxSeq, rows int64
	if err := e.pool.QueryRow(context.Background(), `SELECT max(seq), count(*) FROM `+e.table).Scan(&maxSeq, &rows); err != nil {
		t.Fatal(err)
	}
	details := []string{
		fmt.Sprintf("%d rows hold seq values up to %d: %d values are gaps (%d burnt by nextval, the rest by rolled-back inserts)", rows, maxSeq, maxSeq-rows, burnt),
		fmt.Sprintf("late transactions: every 5th writer transaction committed 1.5s late; %d more committed 2-6s after taking their seq (%d such rolled back)", late, lateRolledBack),
		fmt.Sprintf("writers: %d transactions, 25%% rolled back on purpose", w.txs.Load()),
	}
	e.finish(Row{Key: "8", Scenario: "Sequence gaps and late commits (ordered)",
		Fault:   "rolled-back inserts and burnt seq values; transactions holding a low seq that commit seconds later",
		Ordered: true, Runs: late + lateRolledBack + int(w.txs.Load())/5, Resent: e.wire.resent(), Drain: drain, Details: details})
}
