package reliability

import (
	"bytes"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// TestScenario6ListenKilled: a relay with --listen is woken within
// milliseconds by the writers' Notifier. Its LISTEN connection is killed
// (pg_terminate_backend) and kept from coming back (the proxy resets any
// connection that sends LISTEN): events must still flow, through the
// fallback poll; when LISTEN is allowed again the listener reconnects by
// itself.
func TestScenario6ListenKilled(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	const poll = 3 * time.Second
	phase := long(6*time.Second, 60*time.Second)

	// Delivery times, from a live subscription on the broker.
	var mu sync.Mutex
	committed := map[string]time.Time{}
	delivered := map[string]time.Time{}
	nc := e.natsConn()
	sub, err := nc.Subscribe(e.prefix+".>", func(m *natsgo.Msg) {
		id := m.Header.Get(outbox.HeaderEventID)
		mu.Lock()
		if _, ok := delivered[id]; !ok {
			delivered[id] = time.Now()
		}
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	r := e.newRelay("r", relayOpts{workers: 1, batch: 100, listen: true, poll: poll})
	var blockListen atomic.Bool
	var listenResets atomic.Int64
	listenCmd := []byte("LISTEN ")
	r.pg.SetHook(func(_ int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
		if dir == tcpproxy.ToServer && blockListen.Load() && bytes.Contains(chunk, listenCmd) {
			listenResets.Add(1)
			return tcpproxy.ResetConn
		}
		return tcpproxy.Forward
	})
	p := r.start()
	if !e.waitListening(r.name, 30*time.Second) {
		t.Fatalf("the relay never LISTENed: %s", tail(p.stderr.String(), 20))
	}

	notifier, err := outbox.NewNotifier(e.pool, outbox.NotifierConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	defer notifier.Close()
	var phaseOf sync.Map // event id -> phase
	var current atomic.Int32
	w := e.startWriters(&workload{writers: 2, aggregates: 10, pause: 150 * time.Millisecond, maxPerTx: 2, notifier: notifier,
		onCommit: func(ids []string, at time.Time) {
			mu.Lock()
			for _, id := range ids {
				committed[id] = at
				phaseOf.Store(id, current.Load())
			}
			mu.Unlock()
		}})

	time.Sleep(phase) // phase 0: listener up
	current.Store(1)  // phase 1: listener killed and kept away
	blockListen.Store(true)
	killed := e.terminate(r.name, "query LIKE 'LISTEN %'")
	time.Sleep(phase + poll)
	current.Store(2) // phase 2: listener allowed back
	blockListen.Store(false)
	lastFault := time.Now()
	relistened := e.waitListening(r.name, 30*time.Second)
	relistenAfter := time.Since(lastFault)
	time.Sleep(phase)
	w.stop()
	drain, ok := e.waitDrained(time.Minute)
	if !ok {
		t.Errorf("not drained: %d pending", e.pending())
	}
	time.Sleep(500 * time.Millisecond) // the subscription catches up
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d", code)
	}
	if killed != 1 {
		t.Errorf("terminated %d LISTEN sessions, want 1", killed)
	}
	if !relistened {
		t.Error("the listener did not reconnect within 30s once LISTEN was allowed again")
	}

	mu.Lock()
	lat := map[int32][]time.Duration{}
	missing := 0
	for id, c := range committed {
		ph, _ := phaseOf.Load(id)
		d, ok := delivered[id]
		if !ok {
			missing++
			continue
		}
		lat[ph.(int32)] = append(lat[ph.(int32)], d.Sub(c))
	}
	mu.Unlock()
	names := []string{"listener up", "listener killed and kept away (poll only)", "listener allowed back"}
	var details []string
	for ph := int32(0); ph < 3; ph++ {
		ds := lat[ph]
		if len(ds) == 0 {
			t.Errorf("phase %q: no event delivered", names[ph])
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p50, max := ds[len(ds)/2], ds[len(ds)-1]
		details = append(details, fmt.Sprintf("%s: %d events, commit-to-broker latency p50 %s, max %s", names[ph], len(ds), p50.Round(time.Millisecond), max.Round(time.Millisecond)))
		if ph == 1 && max > poll+10*time.Second {
			t.Errorf("poll-only phase: an event took %s, more than the poll interval %s (+10s)", max, poll)
		}
		if ph == 0 && p50 >= poll/2 {
			t.Errorf("listener phase: p50 latency %s; LISTEN does not seem to wake the relay (poll %s)", p50, poll)
		}
	}
	if missing > 0 {
		t.Logf("%d committed events not seen by the live subscription (checked in the stream below)", missing)
	}
	details = append(details,
		fmt.Sprintf("poll interval %s; LISTEN session terminated once, then %d LISTEN attempts reset by the proxy; listener back %s after LISTEN was allowed again", poll, listenResets.Load(), relistenAfter.Round(100*time.Millisecond)))
	e.finish(Row{Key: "6", Scenario: "LISTEN connection killed", Fault: "pg_terminate_backend of the LISTEN session, reconnections refused for a while",
		Runs: int(listenResets.Load()) + killed, Resent: e.wire.resent(), Drain: drain, Details: details})
}

// waitListening waits until a session of app is LISTENing.
func (e *env) waitListening(app string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var n int
		if err := e.pool.QueryRow(ctxT(e.t, 10*time.Second), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		if n > 0 {
			return true
		}
	}
	return false
}
