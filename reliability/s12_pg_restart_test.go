package reliability

import (
	"fmt"
	"testing"
	"time"
)

// TestScenario12PostgresRestart restarts a PostgreSQL cluster of the test's
// own mid-drain, with writers running, both ways pg_ctl does it: `-m fast`
// (sessions ended, checkpoint) and `-m immediate` (every process killed,
// crash recovery). The relay's marks commit with synchronous_commit=off, so
// an immediate restart can lose marks whose WAL was not yet written: those
// events must be published again, never lost. No dead letter; attempts and
// re-sends bounded by the batches in flight.
func TestScenario12PostgresRestart(t *testing.T) {
	t.Parallel()
	slot(t)
	c := startCluster(t)
	e := newEnv(t, envOpts{cluster: c})
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)

	cycles := long(1, 5)
	var details []string
	restarts := 0
	for i := 0; i < cycles; i++ {
		for _, mode := range []string{"fast", "immediate"} {
			time.Sleep(2 * time.Second)
			// A backlog, so the restart lands mid-drain: batches claimed,
			// published, their marks committing.
			// Latency on the relay's broker path slows the drain so the
			// restart finds it under way.
			r.nats.SetLatency(20 * time.Millisecond)
			e.writeBacklog(long(3000, 30000), 500, 50, 2)
			time.Sleep(300 * time.Millisecond)
			before := e.pending()
			down := c.restart(mode)
			r.nats.SetLatency(0)
			restarts++
			e.pool.Reset() // the test's own idle connections died with the server
			if before == 0 {
				t.Errorf("restart -m %s: nothing pending, not mid-drain", mode)
			}
			details = append(details, fmt.Sprintf("pg_ctl restart -m %s mid-drain: %d pending before, restarted in %s", mode, before, down.Round(10*time.Millisecond)))
		}
	}
	time.Sleep(2 * time.Second) // writers run on the restarted cluster
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the last restart: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() {
		t.Errorf("the relay exited on a database restart: %s", tail(p.stderr.String(), 20))
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	details = append(details, fmt.Sprintf("writers: %d transactions, %d errors (first: %s)", w.txs.Load(), w.errs.Load(), firstErr(w)))
	inFlight := restarts * 2 * 50
	e.finish(Row{Key: "12", Scenario: "PostgreSQL restarted mid-drain (fast and immediate)",
		Fault: "pg_ctl restart -m fast, then -m immediate (crash recovery; marks written with synchronous_commit=off), on a private cluster",
		Runs:  restarts, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}})
}
