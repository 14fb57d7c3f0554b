package reliability

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// TestWALScenario3BrokerDown is scenario 3 with --source wal (row 15b).
func TestWALScenario3BrokerDown(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioBrokerDown(t, true)
}

// TestWALScenario4BrokerNetworkFaults is scenario 4 with --source wal (row
// 15c).
func TestWALScenario4BrokerNetworkFaults(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioNetwork(t, true)
}

// TestWALScenario1RelaySIGKILL is scenario 1 with --source wal (row 15a):
// two WAL relays on one table, writers running; whichever streams is
// SIGKILLed at exact points of its cycle (stream read and first publish held
// at the proxy; publish forwarded; PubAck held; PubAck delivered and its
// next bytes to PostgreSQL, the bulk DELETE or a slot status report, on the
// way), and one relay or the other at random times. The standby takes the
// slot over each time. Lost must be 0; re-sends are bounded by what the slot
// had not confirmed.
func TestWALScenario1RelaySIGKILL(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{wal: true, cluster: walCluster(t)})
	targeted := long(24, 300)
	randomKills := long(8, 100)

	w := e.startWriters(&workload{writers: 4, aggregates: 20, pause: 20 * time.Millisecond, rollbackPct: 10})
	const batch = 20
	relays := []*relay{
		e.newRelay("a", relayOpts{workers: 1, batch: batch, extra: []string{"--stats-interval", "1h"}}),
		e.newRelay("b", relayOpts{workers: 1, batch: batch, extra: []string{"--stats-interval", "1h"}}),
	}
	type fire struct {
		relay int
		point int32
	}
	var (
		mode    atomic.Int32
		fired   = make(chan fire, 1)
		targets = make([]atomic.Pointer[proc], len(relays))
		ackSeen = make([]atomic.Bool, len(relays))
	)
	pubMarker := []byte("HPUB " + e.prefix + ".")
	ackMarker := []byte(`"stream":"` + e.prefix + `"`)
	kill := func(p *proc) func() {
		return func() {
			if p != nil {
				_ = syscall.Kill(p.pid(), syscall.SIGKILL)
			}
		}
	}
	for i, r := range relays {
		trigger := func(m int32) bool {
			if mode.CompareAndSwap(m, killNone) {
				fired <- fire{i, m}
				return true
			}
			return false
		}
		r.nats.SetHook(func(conn int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
			r.wire(conn, dir, chunk)
			switch m := mode.Load(); {
			case dir == tcpproxy.ToServer && bytes.Contains(chunk, pubMarker) && m == killAfterClaim:
				if trigger(m) {
					kill(targets[i].Load())()
					return tcpproxy.ResetConn
				}
			case dir == tcpproxy.ToServer && bytes.Contains(chunk, pubMarker) && m == killAfterPublish:
				if trigger(m) {
					time.AfterFunc(time.Duration(rand.IntN(2000))*time.Microsecond, kill(targets[i].Load()))
				}
			case dir == tcpproxy.ToClient && bytes.Contains(chunk, ackMarker) && m == killAfterPubAck:
				if trigger(m) {
					kill(targets[i].Load())()
					return tcpproxy.ResetConn
				}
			case dir == tcpproxy.ToClient && bytes.Contains(chunk, ackMarker) && m == killDuringCommit:
				ackSeen[i].Store(true)
			}
			return tcpproxy.Forward
		})
		r.pg.SetHook(func(_ int64, dir tcpproxy.Direction, _ []byte) tcpproxy.Action {
			if dir != tcpproxy.ToServer || mode.Load() != killDuringCommit || !ackSeen[i].Load() || !trigger(killDuringCommit) {
				return tcpproxy.Forward
			}
			if rand.IntN(2) == 0 {
				kill(targets[i].Load())()
				return tcpproxy.ResetConn
			}
			time.AfterFunc(time.Duration(rand.IntN(1000))*time.Microsecond, kill(targets[i].Load()))
			return tcpproxy.Forward
		})
	}
	start := func(i int) { targets[i].Store(relays[i].start()) }
	restart := func(i int) {
		relays[i].kill()
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		start(i)
	}
	start(0)
	relays[0].waitPublishing(targets[0].Load(), 30*time.Second)
	start(1)

	perPoint := map[int32]int{}
	perRelay := make([]int, len(relays))
	missed, random, point := 0, 0, 0
	for i := 0; i < targeted+randomKills; i++ {
		if i%4 == 3 && random < randomKills {
			time.Sleep(time.Duration(100+rand.IntN(700)) * time.Millisecond)
			k := rand.IntN(len(relays))
			restart(k)
			perRelay[k]++
			random++
			continue
		}
		m := killAfterClaim + int32(point)%(killPoints-1)
		point++
		for j := range ackSeen {
			ackSeen[j].Store(false)
		}
		mode.Store(m)
		var got fire
		select {
		case got = <-fired:
			perPoint[got.point]++
		case <-time.After(5 * time.Second):
			if mode.CompareAndSwap(m, killNone) {
				missed++
				got.relay = rand.IntN(len(relays))
			} else {
				got = <-fired
				perPoint[got.point]++
			}
		}
		restart(got.relay)
		perRelay[got.relay]++
	}
	lastFault := time.Now()
	w.stop()
	_, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute))
	drain := time.Since(lastFault)
	if !ok {
		t.Errorf("not drained %s after the last kill: %d pending", drain, e.pending())
	}
	for _, r := range relays {
		if code := r.stopGracefully(); code != 0 {
			t.Errorf("relay %s: exit %d after SIGTERM", r.name, code)
		}
	}
	kills := targeted + random
	var points []string
	for m := killAfterClaim; m < killPoints; m++ {
		points = append(points, fmt.Sprintf("%s ×%d", killPointNames[m], perPoint[m]))
	}
	// In flight at a kill: the streaming relay's batch, and what the slot
	// had not confirmed (the relay reports its position about once a
	// second): those are streamed again to the relay that takes over.
	perKill := batch + e.walRate(2*time.Second)
	details := append([]string{
		fmt.Sprintf("the streaming relay killed %d times at exact points (%s), %d of them at a random time (point not reached in 5s); %d kills at random times of either relay; kills per relay: a %d, b %d",
			targeted, joinComma(points), missed, random, perRelay[0], perRelay[1]),
		fmt.Sprintf("writers: %d transactions, 10%% rolled back on purpose; %d writer errors", w.txs.Load(), w.errs.Load()),
		fmt.Sprintf("in flight per kill (the bound's unit): a batch of %d plus the events of 2s of writing (%d)", batch, perKill-batch),
	}, walDetails(e)...)
	e.finish(Row{Key: "15a", Scenario: "WAL source: relay SIGKILLed, a standby takes over",
		Fault: "SIGKILL of the streaming relay at exact points of its cycle and of either relay at random times, writers running",
		Runs:  kills, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: kills * batch, Resent: kills * perKill, Duplicated: kills * perKill, DeadLetters: 0}})
}
