package reliability

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestScenario7HugeBacklog: a large backlog of pending rows, and a
// transaction elsewhere holding an old snapshot open the whole time (so
// vacuum can remove nothing the relay leaves behind). The relay must keep
// draining at a steady rate: no collapse as the dead index entries pile up.
//
// It is not parallel: it measures a rate, so it runs alone, before the
// parallel scenarios start.
func TestScenario7HugeBacklog(t *testing.T) {
	e := newEnv(t, envOpts{})
	n := long(200_000, 2_000_000)

	start := time.Now()
	e.writeBacklog(n, 2000, 5000, 3)
	wrote := time.Since(start)

	// The long transaction: REPEATABLE READ, its snapshot taken before the
	// relay starts, held until the backlog is drained.
	conn, err := pgx.Connect(context.Background(), testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(context.Background(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var seen int
	if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM `+e.table).Scan(&seen); err != nil {
		t.Fatal(err)
	}

	r := e.newRelay("r", relayOpts{workers: 2, batch: 500})
	relayStart := time.Now()
	p := r.start()
	window := long(time.Second, 5*time.Second)
	type sample struct {
		at        time.Duration
		processed int
	}
	samples := []sample{{0, 0}}
	limit := long(6*time.Minute, 90*time.Minute)
	drained := false
	for time.Since(relayStart) < limit {
		time.Sleep(window)
		done := n - e.pending()
		samples = append(samples, sample{time.Since(relayStart), done})
		if done == n {
			drained = true
			break
		}
		if p.exited() {
			t.Fatalf("relay exited: %s", tail(p.stderr.String(), 20))
		}
	}
	drain := time.Since(relayStart)
	// Is the snapshot really still holding vacuum back?
	var xminHeld bool
	if err := e.pool.QueryRow(ctxT(t, 10*time.Second), `SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND state = 'idle in transaction' AND pid = $1`, conn.PgConn().PID()).Scan(&xminHeld); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(context.Background())
	if !drained {
		t.Errorf("backlog of %d not drained in %s: %d pending", n, limit, e.pending())
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d", code)
	}

	// Rates per window; full windows only (the last is partial).
	var rates []float64
	var line []string
	for i := 1; i < len(samples); i++ {
		d := samples[i].at - samples[i-1].at
		rate := float64(samples[i].processed-samples[i-1].processed) / d.Seconds()
		line = append(line, fmt.Sprintf("%.0f", rate))
		if i < len(samples)-1 || !drained {
			rates = append(rates, rate)
		}
	}
	details := []string{
		fmt.Sprintf("backlog: %d events written through outbox.Writer in %s (2000 per transaction); a REPEATABLE READ transaction held its snapshot during the whole drain (still holding xmin at the end: %v)", n, wrote.Round(100*time.Millisecond), xminHeld),
		fmt.Sprintf("relay: 2 workers, batch 500; drained in %s, %.0f events/s on average", drain.Round(100*time.Millisecond), float64(n)/drain.Seconds()),
		fmt.Sprintf("events/s per %s window: %s", window, strings.Join(line, " ")),
	}
	if q := len(rates) / 4; q >= 1 {
		first, last := mean(rates[:q]), mean(rates[len(rates)-q:])
		sorted := append([]float64(nil), rates...)
		sort.Float64s(sorted)
		details = append(details, fmt.Sprintf("first quarter %.0f/s, last quarter %.0f/s (%.0f%%); slowest window %.0f/s, fastest %.0f/s",
			first, last, 100*last/first, sorted[0], sorted[len(sorted)-1]))
		// A collapse, not noise: the machine is shared, so only a rate
		// falling below a fifth of the start fails the test.
		if last < first/5 {
			t.Errorf("drain rate collapsed: %.0f/s in the first quarter, %.0f/s in the last", first, last)
		}
	}
	e.finish(Row{Key: "7", Scenario: "Huge backlog plus a long-running transaction",
		Fault: fmt.Sprintf("%d pending rows, a REPEATABLE READ transaction holding an old snapshot", n),
		Runs:  1, Resent: e.wire.resent(), Drain: drain, Details: details})
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
