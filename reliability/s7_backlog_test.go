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
	// Windows short enough that the CI-size drain (a few seconds) gives
	// the steady-drain check enough of them to judge.
	window := long(250*time.Millisecond, 5*time.Second)
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
	// What one claim costs now, with every processed row's dead index entry
	// still there (the old snapshot keeps vacuum from removing them): the
	// relay's claim query, on the same table, with a few rows made pending.
	explain := e.explainClaim()
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

	// Rates per window.
	var rates []float64
	var line []string
	for i := 1; i < len(samples); i++ {
		d := samples[i].at - samples[i-1].at
		rate := float64(samples[i].processed-samples[i-1].processed) / d.Seconds()
		line = append(line, fmt.Sprintf("%.0f", rate))
		// Full windows only, from the first that saw progress (the
		// relay's start-up is not the drain's rate).
		if samples[i].processed > 0 && (i < len(samples)-1 || !drained) {
			rates = append(rates, rate)
		}
	}
	details := []string{
		fmt.Sprintf("backlog: %d events written through outbox.Writer in %s (2000 per transaction); a REPEATABLE READ transaction held its snapshot during the whole drain (still holding xmin at the end: %v)", n, wrote.Round(100*time.Millisecond), xminHeld),
		fmt.Sprintf("relay: 2 workers, batch 500; drained in %s, %.0f events/s on average", drain.Round(100*time.Millisecond), float64(n)/drain.Seconds()),
		fmt.Sprintf("events/s per %s window: %s", window, strings.Join(line, " ")),
	}
	const minWindows = 8
	if len(rates) < minWindows {
		t.Errorf("the drain gave %d full %s windows, the steady-drain check needs %d: the backlog is too small for this machine's speed", len(rates), window, minWindows)
		report.check(Assertion{Area: "scenario", Name: fmt.Sprintf("steady drain of %d rows behind a long-running transaction", n),
			Expectation: "a steady rate: the last quarter of the drain at least half as fast as the first",
			Observed:    fmt.Sprintf("not measured: %d full windows of %s, %d needed", len(rates), window, minWindows), Passed: false})
	}
	if q := len(rates) / 4; len(rates) >= minWindows {
		first, last := mean(rates[:q]), mean(rates[len(rates)-q:])
		sorted := append([]float64(nil), rates...)
		sort.Float64s(sorted)
		details = append(details, fmt.Sprintf("first quarter %.0f/s, last quarter %.0f/s (%.0f%%); slowest window %.0f/s, fastest %.0f/s",
			first, last, 100*last/first, sorted[0], sorted[len(sorted)-1]))
		// Steady means the last quarter of the drain runs at least at half
		// the rate of the first (quarters average many windows: the machine
		// is shared and single windows are noisy).
		collapsed := last < first/2
		observed := fmt.Sprintf("%d rows behind a REPEATABLE READ transaction: %.0f events/s in the first quarter of the drain, %.0f/s in the last (%.0f%%); at the end one claim of 500 rows took %s",
			n, first, last, 100*last/first, explain)
		if collapsed {
			t.Errorf("the drain rate collapsed behind a long-running transaction: %s", observed)
		}
		report.check(Assertion{Area: "scenario", Name: fmt.Sprintf("steady drain of %d rows behind a long-running transaction", n),
			Expectation: "a steady rate: the last quarter of the drain at least half as fast as the first", Observed: observed, Passed: !collapsed})
	}
	details = append(details, "the claim at the end of the drain: "+explain)
	e.finish(Row{Key: "7", Scenario: "Huge backlog plus a long-running transaction",
		Fault: fmt.Sprintf("%d pending rows, a REPEATABLE READ transaction holding an old snapshot", n),
		Runs:  1, Resent: e.wire.resent(), Drain: drain, Details: details})
}

// explainClaim makes 600 rows pending again and returns what the relay's
// claim costs: EXPLAIN ANALYZE's execution time and buffers.
func (e *env) explainClaim() string {
	e.t.Helper()
	ctx := ctxT(e.t, 5*time.Minute)
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE `+e.table+` SET processed_at = NULL WHERE seq IN (SELECT seq FROM `+e.table+` ORDER BY seq DESC LIMIT 600)`); err != nil {
		e.t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) SELECT id, seq, aggregate_type, aggregate_id, event_type, payload, headers, created_at, attempts
FROM `+e.table+`
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now())
ORDER BY seq LIMIT 500 FOR UPDATE SKIP LOCKED`)
	if err != nil {
		e.t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			e.t.Fatal(err)
		}
		plan = append(plan, strings.TrimSpace(line))
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	var exec, buffers, scan string
	for _, l := range plan {
		switch {
		case strings.HasPrefix(l, "Execution Time:"):
			exec = strings.TrimSpace(strings.TrimPrefix(l, "Execution Time:"))
		case strings.HasPrefix(l, "Buffers:") && buffers == "":
			buffers = strings.TrimPrefix(l, "Buffers: ")
		case strings.Contains(l, "Scan") && scan == "":
			scan, _, _ = strings.Cut(strings.TrimPrefix(l, "->  "), "  (")
		}
	}
	return fmt.Sprintf("%s (%s; buffers %s)", exec, scan, buffers)
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
