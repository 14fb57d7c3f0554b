package reliability

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestWALTakeoverStoppedRelay (row 15k): the streaming relay is stopped
// (SIGSTOP: a frozen VM, a paused container) while writers run. Its
// walsender notices the silence after --wal-sender-timeout (4s by default,
// set on the relay's replication connection), frees the slot, and the
// standby streams within about 5 s; nothing is lost. Before, the server's
// wal_sender_timeout (60s by default) bounded it: 11 s and more.
func TestWALTakeoverStoppedRelay(t *testing.T) {
	t.Parallel()
	slot(t)
	o := envOpts{wal: true}
	if !testdb.SharedIsLogical(t) {
		o.cluster = walCluster(t) // the shared server cannot replicate
	}
	e := newEnv(t, o)
	w := e.startWriters(&workload{writers: 2, aggregates: 10, pause: 20 * time.Millisecond})
	a := e.newRelay("a", relayOpts{batch: 50})
	b := e.newRelay("b", relayOpts{batch: 50})
	pa := a.start()
	a.waitPublishing(pa, 30*time.Second)
	oldPID, _, ok := e.waitSlotActive(0, 15*time.Second)
	if !ok {
		t.Fatalf("relay a never streamed the slot: %s", tail(pa.stderr.String(), 20))
	}
	pb := b.start()
	time.Sleep(2 * time.Second) // b stands by
	if pb.exited() {
		t.Fatalf("relay b exited: %s", tail(pb.stderr.String(), 20))
	}
	if _, err := stopProcess(pa.pid(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	newPID, took, ok := e.waitSlotActive(oldPID, 30*time.Second)
	if !ok {
		t.Fatalf("no relay took the slot over within 30 s of SIGSTOP")
	}
	if took > 6*time.Second {
		t.Errorf("takeover took %s after SIGSTOP, want within about 5 s (--wal-sender-timeout 4s)", took.Round(100*time.Millisecond))
	}
	time.Sleep(2 * time.Second) // b delivers while a is stopped
	w.stop()
	pa.signal(syscall.SIGCONT)
	drain, drained := e.waitDrained(2 * time.Minute)
	if !drained {
		e.dumpStuck()
		t.Errorf("not drained %s after the writers stopped", drain)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s := e.slotInfo(ctx)
	cancel()
	a.stopGracefully()
	b.stopGracefully()
	e.finish(Row{Key: "15k", Scenario: "WAL source: the streaming relay stopped (SIGSTOP), a standby takes over",
		Fault: "SIGSTOP of the streaming relay while writers run", Runs: 1, Resent: -1, Drain: drain,
		Details: []string{fmt.Sprintf("slot taken over %s after SIGSTOP (walsender pid %d -> %d, slot active again: %v)",
			took.Round(100*time.Millisecond), oldPID, newPID, s.active || s.exists)}})
}
