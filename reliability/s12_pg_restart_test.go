package reliability

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestScenario12PostgresRestart restarts a PostgreSQL cluster of the test's
// own mid-drain, with writers running, both ways pg_ctl does it: `-m fast`
// (sessions ended, checkpoint) and `-m immediate` (every process killed,
// crash recovery). The relay's marks commit with synchronous_commit=off, so
// an immediate restart can lose marks whose WAL was not yet written: those
// events must be published again, never lost. No dead letter; attempts
// bounded by the batches in flight, re-sends by those and, at each
// immediate restart, the events published in the second before it
// (PostgreSQL writes an asynchronous commit's WAL within three
// wal_writer_delay, 600 ms by default).
func TestScenario12PostgresRestart(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioPGRestart(t, false)
}

// scenarioPGRestart is scenario 12 on the table source, or on the WAL source
// when wal is set (row 15e: the stream ends with the server and resumes from
// the slot's confirmed position).
func scenarioPGRestart(t *testing.T, wal bool) {
	conf := ""
	if wal {
		conf = walClusterConf
	}
	c := startClusterConf(t, conf)
	e := newEnv(t, envOpts{cluster: c, wal: wal})
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)

	cycles := long(1, 5)
	var details []string
	restarts := 0
	// Publishes over time, to bound what an immediate restart may lose.
	sentAt := newSampler(e.wire.sent)
	defer sentAt.stop()
	asyncWindow := 0
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
			if mode == "immediate" {
				asyncWindow += e.wire.sent() - sentAt.at(time.Now().Add(-time.Second))
			}
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
	key, name := "12", "PostgreSQL restarted mid-drain (fast and immediate)"
	fault := "pg_ctl restart -m fast, then -m immediate (crash recovery; marks written with synchronous_commit=off), on a private cluster"
	resendBound := inFlight
	if !wal {
		resendBound += asyncWindow
		details = append(details, fmt.Sprintf("asserted re-send bound: the batches in flight (%d restarts × 2 workers × 50) plus the %d events published in the second before each immediate restart (marks committed asynchronously that the crash may lose)", restarts, asyncWindow))
	}
	if wal {
		key, name = "15e", "WAL source: PostgreSQL restarted mid-stream (fast and immediate)"
		fault = "pg_ctl restart -m fast, then -m immediate (crash recovery), of a private cluster with wal_level=logical, while the relay streams a backlog"
		details = append(details, walDetails(e)...)
		// PostgreSQL before 17 writes a slot's confirmed position to disk
		// only at a checkpoint, and at a shutdown checkpoint only when the
		// slot's other positions moved: after a restart the stream may
		// start again from an older position and redeliver events the relay
		// had deleted and acknowledged (docs/WAL.md). At most every event
		// once per restart is re-sent; lost stays 0.
		committed, _, _ := e.hist.Counts()
		resendBound = restarts * committed
		details = append(details, fmt.Sprintf("asserted re-send bound: each restart may redeliver every event committed before it (a slot's position is on disk as of the last checkpoint): %d restarts × %d events", restarts, committed))
	}
	e.finish(Row{Key: key, Scenario: name, Fault: fault,
		Runs: restarts, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: resendBound, Duplicated: resendBound, DeadLetters: 0}})
}

// sampler records a counter every 20 ms.
type sampler struct {
	mu    sync.Mutex
	times []time.Time
	vals  []int
	done  chan struct{}
}

func newSampler(read func() int) *sampler {
	s := &sampler{done: make(chan struct{})}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			s.mu.Lock()
			s.times, s.vals = append(s.times, time.Now()), append(s.vals, read())
			s.mu.Unlock()
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// at returns the counter's last sample taken at or before t (the first
// sample if none).
func (s *sampler) at(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := 0
	for i, ti := range s.times {
		if ti.After(t) {
			if i == 0 {
				v = s.vals[0]
			}
			break
		}
		v = s.vals[i]
	}
	return v
}

func (s *sampler) stop() { close(s.done) }
