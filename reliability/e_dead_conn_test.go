package reliability

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestE_DeadConnection: the relay's PostgreSQL connections freeze (the
// proxy holds every byte of the connections open at that moment, and
// forwards new connections), as behind a half-dead server or a middlebox
// that lost its flows. Each statement on a frozen connection misses the
// relay's statement deadline; the relay logs it, discards the connection and
// carries on with fresh ones: the 200 events written after the freeze are
// delivered within seconds, and SIGTERM is honoured within seconds although
// connections are still frozen.
func TestE_DeadConnection(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	const stmt = 2 * time.Second
	r := e.newRelay("r", relayOpts{workers: 2, publishTimeout: time.Second, listen: true,
		extra: []string{"--statement-timeout", stmt.String()}})
	r.start()
	e.writeBacklog(20, 1, 20, 1)
	if _, ok := e.waitDrained(30 * time.Second); !ok {
		t.Fatalf("the first 20 events were not drained: %d pending", e.pending())
	}
	if n := r.pg.Stats().OpenConnections; n < 2 {
		t.Fatalf("%d relay connections open before the freeze; want at least 2", n)
	}

	thaw := r.pg.Freeze()
	defer thaw()
	frozenAt := time.Now()
	e.writeBacklog(200, 1, 50, 2)
	const bound = 15 * time.Second
	drain, ok := e.waitDrained(bound)
	sinceFreeze := time.Since(frozenAt)
	if !ok {
		t.Errorf("%d of the 200 events written after the freeze still pending %s after it", e.pending(), sinceFreeze.Round(time.Millisecond))
	}
	timeouts := len(logLines(r.logs(), "timed out"))
	if timeouts == 0 {
		t.Errorf("the relay never logged a statement that timed out on a frozen connection")
	}

	// Freeze the connections again and stop the relay.
	thaw2 := r.pg.Freeze()
	defer thaw2()
	stopAt := time.Now()
	code := r.stopGracefully()
	stopped := time.Since(stopAt)
	if code != 0 {
		t.Errorf("relay exit code %d after SIGTERM, want 0", code)
	}
	// Relay.Run returns within a statement deadline of the signal (the
	// library test checks it); the process then closes its pool, waiting at
	// most a second for the frozen connections (pgx would wait 15 s each):
	// well within the 10 s a container runtime gives before SIGKILL.
	if stopped > 8*time.Second {
		t.Errorf("relay took %s to exit after SIGTERM with frozen connections, want under 8s", stopped.Round(time.Millisecond))
	}
	attempts := e.count("attempts > 0")
	dead := e.dead()
	res := e.finish(Row{Key: "e-deadconn", Scenario: "Dead database connections (frozen, new ones accepted)",
		Fault: "every open relay connection to PostgreSQL frozen twice (no byte crosses, nothing reset); new connections forwarded",
		Runs:  2, Resent: e.wire.resent(), AttemptsBurned: attempts, AttemptsMeasured: true, Drain: drain,
		Details: []string{
			fmt.Sprintf("statement timeout %s: the 200 events written after the freeze were delivered %s after it (bound %s); %d timed-out statements logged",
				stmt, sinceFreeze.Round(10*time.Millisecond), bound, timeouts),
			fmt.Sprintf("SIGTERM with frozen connections: exit %d after %s (the pool's close is bounded at 1 s)", code, stopped.Round(10*time.Millisecond)),
		}})
	if res.Duplicated > 0 || attempts > 0 || dead > 0 {
		t.Errorf("duplicated %d, attempts burned %d, dead letters %d; want 0, 0, 0", res.Duplicated, attempts, dead)
	}
	if t.Failed() {
		t.Logf("relay log:\n%s", tail(strings.Join(logLines(r.logs(), ""), "\n"), 30))
	}
}
