package reliability

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestE_LargePayloads: four 30 MB events ahead of 200 small ones, relayed
// with batch size 100 by a relay process killed whenever its resident
// memory passes 256 MiB, as a container's OOM killer would. With the
// per-batch byte budget (default 16 MiB) a batch holds at most one of the
// large events, so the relay stays under the limit: every event is
// delivered, none burns an attempt, and the relay is never killed. The same
// run without the budget (--max-batch-bytes set past the four payloads)
// measures what the relay would need; it is reported, not asserted.
func TestE_LargePayloads(t *testing.T) {
	t.Parallel()
	slot(t)
	const (
		big      = 4
		bigSize  = 30 << 20
		small    = 200
		rssLimit = 256 << 10 // kB
	)
	// Without the budget: how much memory the relay needs, no limit.
	e0 := largePayloadEnv(t, big, bigSize, small)
	unbounded := e0.newRelay("nobudget", relayOpts{batch: 100, workers: 1,
		extra: []string{"--max-batch-bytes", strconv.Itoa(1 << 30)}})
	peakUnbounded, _, _ := runWatched(t, e0, unbounded, 0, 3*time.Minute)

	// With the default budget, under the memory limit.
	e := largePayloadEnv(t, big, bigSize, small)
	budgeted := e.newRelay("budget", relayOpts{batch: 100, workers: 1})
	peak, kills, drain := runWatched(t, e, budgeted, rssLimit, 3*time.Minute)

	// Checked before finish, so that the row reports a failure as one.
	if kills > 0 {
		t.Errorf("the relay passed the memory limit %d times with the byte budget (peak %d MiB)", kills, peak>>10)
	}
	resent := e.wire.resent()
	e.finish(Row{Key: "e-payload", Scenario: "Large payloads under a memory limit",
		Fault: fmt.Sprintf("%d events of 30 MB ahead of %d small ones, batch size 100; the relay killed when its RSS passes 256 MiB", big, small),
		Runs:  1, Resent: resent, Drain: drain,
		// No attempt burned, no duplicate, no dead letter; re-sends are
		// reported, not bounded.
		Bound: &Bounds{Attempts: 0, Resent: resent, Duplicated: 0, DeadLetters: 0},
		Details: []string{
			fmt.Sprintf("peak RSS with the default byte budget (16 MiB): %d MiB, relay killed %d times", peak>>10, kills),
			fmt.Sprintf("peak RSS without a byte budget (no limit applied): %d MiB", peakUnbounded>>10),
		}})
}

// largePayloadEnv is an env whose stream takes 40 MB messages, holding
// big events of bigSize bytes (inserted directly: the payload size is the
// point) ahead of small ones.
func largePayloadEnv(t *testing.T, big, bigSize, small int) *env {
	e, _ := largePayloadEnvIDs(t, big, bigSize, small, true)
	return e
}

// largePayloadEnvIDs is largePayloadEnv returning the big events' ids;
// record false leaves them out of the history (the test judges them).
func largePayloadEnvIDs(t *testing.T, big, bigSize, small int, record bool) (*env, []string) {
	e := newEnv(t, envOpts{nats: natsOpts{maxPayload: 40 << 20}})
	rec := e.writeBig(big, bigSize)
	if record {
		e.hist.Record(Committed, rec...)
	}
	e.writeBacklog(small, 10, 20, 1)
	ids := make([]string, len(rec))
	for i, w := range rec {
		ids[i] = w.ID
	}
	return e, ids
}

// writeBig commits n events of about size bytes of incompressible payload,
// each in its own transaction (inserted directly: the payload size is the
// point), on aggregates big-0, big-1, ..., and returns them unrecorded.
func (e *env) writeBig(n, size int) []Written {
	e.t.Helper()
	ctx := ctxT(e.t, 5*time.Minute)
	var rec []Written
	for i := range n {
		id := uuid.Must(uuid.NewV7())
		agg := fmt.Sprintf("big-%d", i)
		pad := make([]byte, (size-100)/2)
		rand.Read(pad)
		body := fmt.Sprintf(`{"n":0,"agg":%q,"pad":%q}`, agg, hex.EncodeToString(pad))
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.table+` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'acct', $2, 'ev', $3::jsonb)`,
			id, agg, body); err != nil {
			e.t.Fatal(err)
		}
		rec = append(rec, Written{ID: id.String(), Aggregate: agg, N: 0})
	}
	return rec
}

// runWatched runs a relay in slot r until nothing is pending, polling its
// resident memory every 10 ms; with limitKB > 0 it kills and restarts the
// process whenever it passes the limit (at most 6 times: then it is a crash
// loop, and the test fails). It returns the peak RSS in kB, the kills and
// how long the drain took.
func runWatched(t *testing.T, e *env, r *relay, limitKB int64, d time.Duration) (peak int64, kills int, took time.Duration) {
	t.Helper()
	p := r.start()
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		rss := p.rssKB()
		peak = max(peak, rss)
		if limitKB > 0 && rss > limitKB && !p.exited() {
			p.kill()
			r.retire(p)
			kills++
			if kills > 6 {
				t.Errorf("relay %s killed %d times at the memory limit: a crash loop", r.name, kills)
				return peak, kills, time.Since(start)
			}
			p = r.start()
		}
		if i%10 == 0 && e.pending() == 0 {
			took = time.Since(start)
			if code := r.stopGracefully(); code != 0 {
				t.Errorf("relay %s exit %d", r.name, code)
			}
			return peak, kills, took
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Errorf("relay %s: %d events still pending after %s", r.name, e.pending(), d)
	r.kill()
	return peak, kills, time.Since(start)
}

// TestE_PoisonPayload: one event too large for the relay's memory limit
// (30 MB; the relay is killed when its RSS passes 120 MiB, below what one
// such event needs), ahead of 200 small ones. Each relay process that
// reads it dies, as under a container's OOM killer; the attempt counted
// when the row was fetched survives the kill, so after MaxAttempts (3)
// deaths the next relay dead-letters it without reading it, and every
// small event is delivered: no endless crash loop.
func TestE_PoisonPayload(t *testing.T) {
	t.Parallel()
	slot(t)
	const (
		maxAttempts = 3
		rssLimit    = 120 << 10 // kB
	)
	e, ids := largePayloadEnvIDs(t, 1, 30<<20, 200, false)
	for _, id := range ids {
		e.ignore[id] = true
	}
	r := e.newRelay("r", relayOpts{batch: 100, workers: 1, maxAttempts: maxAttempts})
	peak, kills, drain := runWatched(t, e, r, rssLimit, 3*time.Minute)
	var attempts int
	var dead, processed bool
	if err := e.pool.QueryRow(ctxT(t, 30*time.Second), `SELECT attempts, dead_at IS NOT NULL, processed_at IS NOT NULL FROM `+e.table+` WHERE id = $1`,
		ids[0]).Scan(&attempts, &dead, &processed); err != nil {
		t.Fatal(err)
	}
	burned := e.count("attempts > 0 AND processed_at IS NOT NULL")
	res := e.finish(Row{Key: "e-poison", Scenario: "Poison payload: the relay dies each time it reads it",
		Fault: "a 30 MB event ahead of 200 small ones; the relay killed when its RSS passes 120 MiB (below what the event needs), max attempts 3",
		Runs:  kills, Resent: e.wire.resent(), AttemptsBurned: burned, AttemptsMeasured: true, Drain: drain,
		Details: []string{fmt.Sprintf("relay killed %d times at the limit (peak RSS %d MiB); the large event ended with attempts=%d, dead letter %v, published %v",
			kills, peak>>10, attempts, dead, processed)}})
	switch {
	case processed:
		t.Logf("the large event was published before the relay reached the limit")
	case !dead:
		t.Errorf("the large event is neither published nor a dead letter (attempts %d)", attempts)
	case attempts != maxAttempts:
		t.Errorf("the large event was dead-lettered with attempts=%d, want %d", attempts, maxAttempts)
	}
	if kills > maxAttempts {
		t.Errorf("the relay was killed %d times; want at most MaxAttempts (%d)", kills, maxAttempts)
	}
	if res.Duplicated > 0 || burned > 0 {
		t.Errorf("duplicated %d, attempts burned by delivered events %d; want 0 and 0", res.Duplicated, burned)
	}
}
