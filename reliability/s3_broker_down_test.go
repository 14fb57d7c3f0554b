package reliability

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestScenario3BrokerDown: the NATS server goes away for a long while as
// writers keep writing, twice: stopped cleanly (SIGTERM), then crashed
// (SIGKILL). The outbox must grow, no event may have an attempt counted or
// become a dead letter (an outage burns no attempt), the relay's memory must
// stay flat, /readyz must say "not ready", and after each restart
// everything drains.
func TestScenario3BrokerDown(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioBrokerDown(t, false)
}

// scenarioBrokerDown is scenario 3 on the table source, or on the WAL source
// when wal is set (row 15b).
func scenarioBrokerDown(t *testing.T, wal bool) {
	o := envOpts{}
	if wal {
		o.wal, o.cluster = true, walCluster(t)
	}
	e := newEnv(t, o)
	outage := long(12*time.Second, 2*time.Minute)

	w := e.startWriters(&workload{writers: 4, aggregates: 25, pause: 25 * time.Millisecond, rollbackPct: 5})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 100, httpAddr: true})
	p := r.start()
	addr := r.httpAddr(p)
	time.Sleep(3 * time.Second)
	rssBase := p.rssKB()

	var (
		details                 []string
		maxDead, burntMax, runs int
		rssMax                  = rssBase
		notReadySeen            bool
		readyBody               string
		drain                   time.Duration
	)
	for _, hard := range []bool{false, true} {
		runs++
		how := "stopped with SIGTERM"
		if hard {
			how = "killed with SIGKILL"
		}
		pendingBefore := e.pending()
		committedBefore, _, _ := e.hist.Counts()
		e.nats.stop(hard)
		down := time.Now()
		peak := 0
		for time.Since(down) < outage {
			time.Sleep(500 * time.Millisecond)
			peak = max(peak, e.pending())
			maxDead = max(maxDead, e.dead())
			burntMax = max(burntMax, e.count("attempts > 0"))
			rssMax = max(rssMax, p.rssKB())
			if code, body := httpGet(addr, "/readyz"); code == http.StatusServiceUnavailable {
				notReadySeen = true
				readyBody = strings.TrimSpace(body)
			}
		}
		committedDuring, _, _ := e.hist.Counts()
		committedDuring -= committedBefore
		if err := e.nats.start(); err != nil {
			t.Fatalf("restart nats-server: %v", err)
		}
		if hard {
			w.stop() // the last outage: measure the drain of what piled up
		}
		d, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute))
		if !ok {
			t.Errorf("not drained %s after the broker came back: %d pending", d, e.pending())
		}
		// After the first outage the writers still run: "caught up" is the
		// moment the backlog was gone.
		drain = d
		burntMax = max(burntMax, e.count("attempts > 0"))
		base := pendingBefore
		if wal {
			// Pending rows of the WAL source include rows published but
			// not deleted yet (deleted in bulk, after the broker
			// confirmed them): only what was committed during the outage
			// must pile up.
			base = 0
		}
		if peak < base+committedDuring*9/10 {
			t.Errorf("nats-server %s: pending peaked at %d; %d were pending before and %d committed during the outage", how, peak, pendingBefore, committedDuring)
		}
		details = append(details, fmt.Sprintf("nats-server %s for %s (restarted on the same port and store): %d events committed meanwhile, pending %d → %d; caught up %s after the restart (%.0f events/s, reconnect included)",
			how, outage, committedDuring, pendingBefore, peak, d.Round(100*time.Millisecond), float64(peak)/max(d.Seconds(), 0.001)))
	}
	readyAfter := -1
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, _ := httpGet(addr, "/readyz"); code == http.StatusOK {
			readyAfter = code
			break
		}
	}
	rssEnd := p.rssKB()
	failures := logLines(p.stderr.String(), "publish failed")
	if r.stopGracefully() != 0 {
		t.Error("relay did not exit 0 on SIGTERM")
	}
	if maxDead != 0 {
		t.Errorf("%d dead letters during the outages, want 0", maxDead)
	}
	if burntMax != 0 {
		t.Errorf("%d events had an attempt counted during the outages, want 0; e.g. %s", burntMax, firstFailure(failures))
	}
	const rssSlackKB = 64 << 10
	if rssMax > rssBase+rssSlackKB {
		t.Errorf("relay memory grew from %d kB to %d kB during the outages", rssBase, rssMax)
	}
	if !notReadySeen {
		t.Error("/readyz never answered 503 during the outages")
	}
	if readyAfter != http.StatusOK {
		t.Error("/readyz not 200 within 20s after the broker came back")
	}
	details = append(details,
		fmt.Sprintf("dead letters: %d; events with an attempt counted: %d; publish failures logged: %d", maxDead, burntMax, len(failures)),
		fmt.Sprintf("relay RSS: %d kB before the outages, %d kB at most during them, %d kB at the end", rssBase, rssMax, rssEnd),
		fmt.Sprintf("/readyz during the outages: 503 %q; 200 again after the restarts", readyBody))
	key, name := "3", "Broker down while writers run"
	if wal {
		key, name = "15b", "WAL source: broker down while writers run"
		details = append(details, walDetails(e)...)
	}
	e.finish(Row{Key: key, Scenario: name, Fault: fmt.Sprintf("nats-server stopped (SIGTERM), then crashed (SIGKILL), %s each", outage),
		Runs: runs, Resent: e.wire.resent(), Drain: drain, Details: details})
}

func firstFailure(lines []string) string {
	if len(lines) == 0 {
		return "none logged"
	}
	return logField(lines[0], "err")
}

func httpGet(addr, path string) (int, string) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
