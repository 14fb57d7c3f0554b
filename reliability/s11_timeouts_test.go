package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestScenario11StatementAndLockTimeouts: the relays' sessions run with a
// tight statement_timeout or lock_timeout (set in the database URL, as an
// operator might), while another session keeps taking a lock on the outbox
// table that blocks the claim. The database cancels relay statements over
// and over; nothing may be lost, no attempt may be burnt by a statement the
// database cancelled, and the relays must carry on.
func TestScenario11StatementAndLockTimeouts(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	// Relay s has only a statement_timeout, relay l only a lock_timeout, so
	// that each kind of cancellation happens.
	var relays []*relay
	for _, c := range []struct{ name, param, ms string }{{"s", "statement_timeout", "40"}, {"l", "lock_timeout", "15"}} {
		r := e.newRelay(c.name, relayOpts{workers: 2, batch: 50})
		u, err := url.Parse(r.dsn())
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set(c.param, c.ms)
		u.RawQuery = q.Encode()
		r.opts.dsn = u.String()
		r.waitPublishing(r.start(), 30*time.Second)
		relays = append(relays, r)
	}

	// The lock holder: EXCLUSIVE mode conflicts with the claim's FOR UPDATE
	// and with the mark's UPDATE, not with the writers' INSERTs... which it
	// does block too (they wait, they have no timeout).
	locks := 0
	dur := long(15*time.Second, 3*time.Minute)
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); locks++ {
		hold := time.Duration(20+rand.IntN(200)) * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE `+e.table+` IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold)
		_ = tx.Rollback(ctx)
		cancel()
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
	}
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(2 * time.Minute); !ok {
		t.Errorf("not drained: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	burnt := e.count("attempts > 0")
	var failed []string
	for _, r := range relays {
		p := r.current()
		if p.exited() {
			t.Fatalf("relay %s exited: %s", r.name, tail(p.stderr.String(), 20))
		}
		failed = append(failed, logLines(p.stderr.String(), "outbox relay batch failed")...)
	}
	kinds := map[string]int{}
	for _, l := range failed {
		msg := logField(l, "err")
		switch {
		case strings.Contains(msg, "lock timeout"):
			msg = "lock timeout"
		case strings.Contains(msg, "statement timeout"):
			msg = "statement timeout"
		}
		stage, _, _ := strings.Cut(logField(l, "err"), ":")
		stage = regexp.MustCompile(`\d+ event\(s\)`).ReplaceAllString(stage, "N event(s)")
		kinds[stage+": "+msg]++
	}
	for _, r := range relays {
		if code := r.stopGracefully(); code != 0 {
			t.Errorf("relay %s exit %d", r.name, code)
		}
	}
	if burnt != 0 {
		t.Errorf("%d events had an attempt counted although only the database cancelled statements", burnt)
	}
	if len(failed) == 0 {
		t.Error("no relay statement was cancelled: the fault did not reach the relay")
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(parts)
	e.finish(Row{Key: "11", Scenario: "statement_timeout and lock_timeout on the relay's sessions",
		Fault: "two relays, one with statement_timeout=40ms, one with lock_timeout=15ms; another session holding LOCK TABLE ... IN EXCLUSIVE MODE for 20-220ms at a time",
		Runs:  locks, Resent: e.wire.resent(), Drain: drain, Details: []string{
			fmt.Sprintf("%d relay batches failed on a cancelled statement: %s", len(failed), strings.Join(parts, "; ")),
			fmt.Sprintf("events with an attempt counted: %d", burnt),
		}})
}
