package reliability

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// Kill points: where in the claim → publish → confirm → mark cycle relay A
// is SIGKILLed. The proxies between A and its peers see every byte, so the
// kill lands exactly there.
const (
	killNone         int32 = iota
	killAfterClaim         // rows claimed and locked, the first publish held at the proxy: never reaches the broker
	killAfterPublish       // the publish forwarded to the broker; killed 0-2ms later, before or after the PubAck
	killAfterPubAck        // the broker stored the batch; its PubAck held at the proxy: the relay never sees it
	killDuringCommit       // every PubAck delivered; the mark+COMMIT is on its way to PostgreSQL (forwarded or not)
	killPoints
)

var killPointNames = map[int32]string{
	killAfterClaim: "after claim", killAfterPublish: "after publish", killAfterPubAck: "after PubAck",
	killDuringCommit: "during commit",
}

// TestScenario1RelaySIGKILL: relays SIGKILLed 50+ times, at exact points of
// the batch cycle and at random times, while writers run. Lost must be 0;
// in ordered mode inversions must be 0 too.
func TestScenario1RelaySIGKILL(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			slot(t)
			scenarioKills(t, ordered)
		})
	}
}

func scenarioKills(t *testing.T, ordered bool) {
	// The ordered run uses a tiny duplicate window, so the stream keeps the
	// raw re-sends and the inversion check sees them.
	dupWindow := time.Duration(0)
	if ordered {
		dupWindow = 100 * time.Millisecond
	}
	e := newEnv(t, envOpts{dupWindow: dupWindow})
	targeted := long(32, 400) // relay A, at exact points
	randomKills := long(20, 200)

	w := e.startWriters(&workload{writers: 4, aggregates: 20, pause: 20 * time.Millisecond, rollbackPct: 10})

	// Relay A: one worker, small batches, no stats loop in the way of the
	// "during commit" detection: the first bytes to PostgreSQL after a PubAck
	// are the mark and COMMIT.
	a := e.newRelay("a", relayOpts{workers: 1, batch: 20, ordered: ordered, extra: []string{"--stats-interval", "1h"}})
	b := e.newRelay("b", relayOpts{workers: 2, batch: 50, ordered: ordered})

	var (
		mode     atomic.Int32
		ackSeen  atomic.Bool
		fired    = make(chan int32, 1)
		killMu   sync.Mutex
		killProc *proc
	)
	pubMarker := []byte("HPUB " + e.prefix + ".")
	ackMarker := []byte(`"stream":"` + e.prefix + `"`)
	// target is the process to kill, fixed when a kill point is reached: a
	// delayed kill must never hit the next process.
	target := func() *proc {
		killMu.Lock()
		defer killMu.Unlock()
		return killProc
	}
	sigkillOf := func(p *proc) func() {
		return func() {
			if p != nil {
				_ = syscall.Kill(p.pid(), syscall.SIGKILL)
			}
		}
	}
	trigger := func(m int32) bool {
		if mode.CompareAndSwap(m, killNone) {
			fired <- m
			return true
		}
		return false
	}
	a.nats.SetHook(func(conn int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
		a.wire(conn, dir, chunk)
		switch m := mode.Load(); {
		case dir == tcpproxy.ToServer && bytes.Contains(chunk, pubMarker) && m == killAfterClaim:
			if trigger(m) {
				sigkillOf(target())()
				return tcpproxy.ResetConn
			}
		case dir == tcpproxy.ToServer && bytes.Contains(chunk, pubMarker) && m == killAfterPublish:
			if trigger(m) {
				d := time.Duration(rand.IntN(2000)) * time.Microsecond
				time.AfterFunc(d, sigkillOf(target()))
			}
		case dir == tcpproxy.ToClient && bytes.Contains(chunk, ackMarker) && m == killAfterPubAck:
			if trigger(m) {
				sigkillOf(target())()
				return tcpproxy.ResetConn
			}
		case dir == tcpproxy.ToClient && bytes.Contains(chunk, ackMarker) && m == killDuringCommit:
			ackSeen.Store(true)
		}
		return tcpproxy.Forward
	})
	a.pg.SetHook(func(_ int64, dir tcpproxy.Direction, _ []byte) tcpproxy.Action {
		if dir != tcpproxy.ToServer || mode.Load() != killDuringCommit || !ackSeen.Load() {
			return tcpproxy.Forward
		}
		if !trigger(killDuringCommit) {
			return tcpproxy.Forward
		}
		if rand.IntN(2) == 0 {
			sigkillOf(target())() // the mark never reaches PostgreSQL
			return tcpproxy.ResetConn
		}
		time.AfterFunc(time.Duration(rand.IntN(1000))*time.Microsecond, sigkillOf(target())) // it may commit, or not
		return tcpproxy.Forward
	})

	startA := func() {
		p := a.start()
		killMu.Lock()
		killProc = p
		killMu.Unlock()
	}
	startA()
	b.start()

	// Relay B is killed at random times meanwhile.
	var bKills atomic.Int64
	stopB := make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		for int(bKills.Load()) < randomKills {
			select {
			case <-stopB:
				return
			case <-time.After(time.Duration(100+rand.IntN(700)) * time.Millisecond):
			}
			b.restart()
			bKills.Add(1)
		}
	}()

	perPoint := map[int32]int{}
	missed := 0
	for i := 0; i < targeted; i++ {
		m := killAfterClaim + int32(i)%(killPoints-1)
		ackSeen.Store(false)
		mode.Store(m)
		select {
		case got := <-fired:
			perPoint[got]++
		case <-time.After(10 * time.Second):
			// The point was not reached (no work?): kill at a random time.
			if mode.CompareAndSwap(m, killNone) {
				missed++
			} else {
				perPoint[<-fired]++
			}
		}
		a.kill()
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		startA()
	}
	<-bDone
	close(stopB)
	lastFault := time.Now()
	w.stop()
	_, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute))
	drain := time.Since(lastFault) // from the last kill, the writers' last transactions included
	if !ok {
		t.Errorf("not drained %s after the last kill: %d pending", drain, e.pending())
	}
	if code := a.stopGracefully(); code != 0 {
		t.Errorf("relay a: exit %d after SIGTERM", code)
	}
	if code := b.stopGracefully(); code != 0 {
		t.Errorf("relay b: exit %d after SIGTERM", code)
	}

	kills := targeted + int(bKills.Load())
	if kills < 50 {
		t.Errorf("only %d kills", kills)
	}
	var points []string
	for m := killAfterClaim; m < killPoints; m++ {
		points = append(points, fmt.Sprintf("%s ×%d", killPointNames[m], perPoint[m]))
	}
	modeName := "unordered"
	key := "1a"
	fault := "SIGKILL of relay processes at exact points of the batch and at random times, writers running"
	if ordered {
		modeName, key = "ordered", "1b"
		fault += "; dedup window 100ms"
	}
	details := []string{
		fmt.Sprintf("relay A (1 worker, batch 20) killed %d times: %s; %d at a random time (point not reached in 10s)", targeted, joinComma(points), missed),
		fmt.Sprintf("relay B (2 workers, batch 50) killed %d times at random times (100-800ms apart)", bKills.Load()),
		fmt.Sprintf("writers: %d transactions, 10%% rolled back on purpose; %d writer errors", w.txs.Load(), w.errs.Load()),
	}
	// A kill costs at most the batches in flight: A's one batch of 20, B's
	// two of 50. Each of their rows may be published again, and (with the
	// poison-row rule: a claim never followed by an outcome counts as an
	// attempt) count one attempt; none may become a dead letter.
	inFlight := targeted*20 + int(bKills.Load())*2*50
	e.finish(Row{Key: key, Scenario: "Relay SIGKILLed (" + modeName + ")", Fault: fault, Ordered: ordered,
		Runs: kills, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}})
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}
