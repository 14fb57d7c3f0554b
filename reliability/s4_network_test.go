package reliability

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestScenario4BrokerNetworkFaults: the network between the relay and the
// broker misbehaves while writers run: latency below and above the publish
// timeout, connection resets, a partition (bytes held, then delivered late)
// and a refused broker. Duplicates are allowed (the stream's duplicate window
// is tiny here, so they are stored); lost must be 0.
func TestScenario4BrokerNetworkFaults(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioNetwork(t, false)
}

// scenarioNetwork is scenario 4 on the table source, or on the WAL source
// when wal is set (row 15c).
func scenarioNetwork(t *testing.T, wal bool) {
	o := envOpts{dupWindow: 100 * time.Millisecond}
	if wal {
		o.wal, o.cluster = true, walCluster(t)
	}
	e := newEnv(t, o)
	w := e.startWriters(&workload{writers: 4, aggregates: 25, pause: 25 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 100, publishTimeout: 2 * time.Second})
	p := r.start()
	px := r.nats
	phase := long(6*time.Second, 45*time.Second)
	cycles := long(1, 4)

	runs := 0
	var log []string
	step := func(what string, d time.Duration, apply, undo func()) {
		before := e.pending()
		apply()
		runs++
		time.Sleep(d)
		peak := e.pending()
		if undo != nil {
			undo()
		}
		log = append(log, fmt.Sprintf("%s for %s: pending %d -> %d", what, d, before, peak))
	}
	for c := 0; c < cycles; c++ {
		time.Sleep(2 * time.Second)
		step("latency 50ms per chunk", phase, func() { px.SetLatency(50 * time.Millisecond) }, func() { px.SetLatency(0) })
		time.Sleep(time.Second)
		step("latency 3s per chunk (above the 2s publish timeout)", phase, func() { px.SetLatency(3 * time.Second) }, func() { px.SetLatency(0) })
		time.Sleep(2 * time.Second)
		resets := 0
		start := time.Now()
		for time.Since(start) < phase {
			before := px.Stats().Resets
			px.ResetAll()
			if px.Stats().Resets > before { // a connection was open to reset
				resets++
				runs++
			}
			time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond)
		}
		log = append(log, fmt.Sprintf("%d connection resets over %s", resets, phase))
		time.Sleep(2 * time.Second)
		step("partition (blackhole: open connections frozen, bytes held and delivered on heal)", phase+2*time.Second, px.Partition, px.Restore)
		time.Sleep(2 * time.Second)
		step("broker unreachable (connections reset, new ones refused)", phase, px.Cut, px.Restore)
	}
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute)); !ok {
		t.Errorf("not drained after the last fault: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() {
		t.Errorf("relay exited during network faults: %s", tail(p.stderr.String(), 20))
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	st := px.Stats()
	log = append(log, fmt.Sprintf("proxy: %d connections accepted, %d reset by the proxy", st.Accepted, st.Resets))
	// A network fault is an outage, never the message's fault: no attempt
	// is burned, even by the partition that outlasts the 2s publish
	// timeout; each fault re-sends at most the batches in flight (2
	// workers of 100).
	inFlight := runs * 2 * 100
	key, name := "4", "Network faults between relay and broker"
	if wal {
		key, name = "15c", "WAL source: network faults between relay and broker"
		log = append(log, walDetails(e)...)
	}
	e.finish(Row{Key: key, Scenario: name,
		Fault: "latency (50ms, 3s), connection resets, partition (blackhole), refused connections; dedup window 100ms",
		Runs:  runs, Resent: e.wire.resent(), Drain: drain, Details: log,
		Bound: &Bounds{Attempts: 0, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}})
}
