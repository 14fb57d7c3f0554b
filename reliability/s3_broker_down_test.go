package reliability

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestScenario3BrokerDown: the NATS server is stopped for a long while as
// writers keep writing. The outbox must grow, no event may become a dead
// letter (an outage burns no attempt), the relay's memory must stay flat,
// /readyz must say "not ready", and after the restart everything drains.
func TestScenario3BrokerDown(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	outage := long(20*time.Second, 4*time.Minute)

	w := e.startWriters(&workload{writers: 4, aggregates: 25, pause: 25 * time.Millisecond, rollbackPct: 5})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 100, httpAddr: true})
	p := r.start()
	addr := r.httpAddr(p)

	time.Sleep(3 * time.Second)
	rssBase := p.rssKB()
	pendingBefore := e.pending()
	committedBefore, _, _ := e.hist.Counts()

	e.nats.stop(false)
	down := time.Now()
	var (
		peak, maxDead int
		rssMax        = rssBase
		notReadySeen  bool
		readyBody     string
		samples       int
	)
	for time.Since(down) < outage {
		time.Sleep(500 * time.Millisecond)
		samples++
		if n := e.pending(); n > peak {
			peak = n
		}
		maxDead = max(maxDead, e.dead())
		rssMax = max(rssMax, p.rssKB())
		if code, body := httpGet(addr, "/readyz"); code == http.StatusServiceUnavailable {
			notReadySeen = true
			readyBody = strings.TrimSpace(body)
		}
	}
	committedDuring, _, _ := e.hist.Counts()
	committedDuring -= committedBefore
	rssOutageEnd := p.rssKB()

	if err := e.nats.start(); err != nil {
		t.Fatalf("restart nats-server: %v", err)
	}
	restarted := time.Now()
	w.stop()
	drain, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute))
	if !ok {
		t.Errorf("not drained %s after the broker came back: %d pending", drain, e.pending())
	}
	readyAfter := -1
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, _ := httpGet(addr, "/readyz"); code == http.StatusOK {
			readyAfter = code
			break
		}
	}
	rssEnd := p.rssKB()
	if r.stopGracefully() != 0 {
		t.Error("relay did not exit 0 on SIGTERM")
	}

	if peak < pendingBefore+committedDuring*9/10 {
		t.Errorf("pending peaked at %d during the outage; %d were pending before and %d committed during it", peak, pendingBefore, committedDuring)
	}
	if maxDead != 0 {
		t.Errorf("%d dead letters during the outage, want 0", maxDead)
	}
	const rssSlackKB = 64 << 10
	if rssMax > rssBase+rssSlackKB {
		t.Errorf("relay memory grew from %d kB to %d kB during the outage", rssBase, rssMax)
	}
	if !notReadySeen {
		t.Error("/readyz never answered 503 during the outage")
	}
	if readyAfter != http.StatusOK {
		t.Error("/readyz not 200 within 20s after the broker came back")
	}
	rate := 0.0
	if drain > 0 {
		rate = float64(peak) / drain.Seconds()
	}
	details := []string{
		fmt.Sprintf("outage %s (nats-server stopped with SIGTERM, restarted on the same port and store); %d events committed meanwhile", outage, committedDuring),
		fmt.Sprintf("pending: %d before, %d at the peak; dead letters during the outage: %d", pendingBefore, peak, maxDead),
		fmt.Sprintf("relay RSS: %d kB before, %d kB max during, %d kB at the end of the outage, %d kB after the drain (%d samples)", rssBase, rssMax, rssOutageEnd, rssEnd, samples),
		fmt.Sprintf("/readyz during the outage: 503 %q; 200 again after the restart", readyBody),
		fmt.Sprintf("drain after the restart: %s for a backlog of %d (%.0f events/s, reconnect included)", drain.Round(100*time.Millisecond), peak, rate),
	}
	_ = restarted
	e.finish(Row{Key: "3", Scenario: "Broker down while writers run", Fault: fmt.Sprintf("nats-server stopped for %s", outage),
		Runs: 1, Resent: e.wire.resent(), Drain: drain, Details: details})
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
