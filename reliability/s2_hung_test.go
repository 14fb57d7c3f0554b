package reliability

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// TestScenario2HungRelay: relay A is SIGSTOPped right after sending a batch
// to the broker, holding the batch's row locks in an open transaction. Past
// the session's idle_in_transaction_session_timeout PostgreSQL ends that
// session; relay B takes the rows over and publishes them. Then A resumes:
// its stale batch must not be marked a second time (processed_at of every
// row stays what B wrote), A must carry on working, and nothing is lost.
func TestScenario2HungRelay(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	const publishTimeout = time.Second
	idleTimeout := publishTimeout + 5*time.Second // what the relay sets on its session
	runs := long(2, 6)

	w := e.startWriters(&workload{writers: 2, aggregates: 20, pause: 30 * time.Millisecond})
	a := e.newRelay("a", relayOpts{workers: 1, batch: 50, publishTimeout: publishTimeout, extra: []string{"--stats-interval", "1h"}})
	b := e.newRelay("b", relayOpts{workers: 2, batch: 50, publishTimeout: publishTimeout})

	var (
		armed    atomic.Bool
		stopped  = make(chan []string, 1)
		aProc    atomic.Pointer[proc]
		stopInfo atomic.Value
	)
	pubMarker := []byte("HPUB " + e.prefix + ".")
	idRe := regexp.MustCompile(`Nats-Msg-Id: ([0-9a-f-]{36})`)
	a.nats.SetHook(func(conn int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
		a.wire(conn, dir, chunk)
		if dir == tcpproxy.ToServer && bytes.Contains(chunk, pubMarker) && armed.CompareAndSwap(true, false) {
			// Freeze A with its batch on the way to the broker: the broker
			// stores and acknowledges it, A never reads the PubAck.
			waited, err := stopProcess(aProc.Load().pid(), 10*time.Second)
			if err != nil {
				stopInfo.Store(err.Error())
			} else {
				stopInfo.Store(fmt.Sprintf("took %s to stop every thread", waited.Round(time.Microsecond)))
			}
			var ids []string
			for _, m := range idRe.FindAllSubmatch(chunk, -1) {
				ids = append(ids, string(m[1]))
			}
			stopped <- ids
		}
		return tcpproxy.Forward
	})
	aProc.Store(a.start())

	var details []string
	var staleRows, remarked, checkedRows int
	for run := 1; run <= runs; run++ {
		time.Sleep(time.Second) // A alone, working
		armed.Store(true)
		var ids []string
		select {
		case ids = <-stopped:
		case <-time.After(30 * time.Second):
			t.Fatalf("run %d: relay A never published", run)
		}
		stoppedAt := time.Now()
		staleRows += len(ids)
		// A's session is idle in transaction, holding the batch's locks.
		if n := e.count("id = ANY('{" + strings.Join(ids, ",") + "}'::uuid[]) AND processed_at IS NOT NULL"); n != 0 {
			counts := map[string]int{}
			e.wire.mu.Lock()
			for _, id := range ids {
				counts[id] = e.wire.counts[id]
			}
			e.wire.mu.Unlock()
			t.Fatalf("run %d: %d rows of A's batch already processed while A is frozen; %v; A's state %s; wire counts %v", run, n, stopInfo.Load(), procState(aProc.Load().pid()), counts)
		}
		b.start()

		// PostgreSQL ends A's session after the idle timeout; B then takes
		// the rows over, while A is still frozen.
		var killedAfter time.Duration
		for deadline := time.Now().Add(idleTimeout + 30*time.Second); ; {
			var n int
			if err := e.pool.QueryRow(ctxT(t, 10*time.Second), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'`, a.name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				killedAfter = time.Since(stoppedAt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: A's session still idle in transaction %s after SIGSTOP", run, time.Since(stoppedAt))
			}
			time.Sleep(100 * time.Millisecond)
		}
		var takenOver time.Duration
		for deadline := time.Now().Add(60 * time.Second); ; {
			if e.count("id = ANY('{"+strings.Join(ids, ",")+"}'::uuid[]) AND processed_at IS NULL") == 0 {
				takenOver = time.Since(stoppedAt)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d: A's stale batch not taken over by B", run)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Keep A frozen a little longer, then snapshot what B marked.
		time.Sleep(max(0, idleTimeout+time.Second-time.Since(stoppedAt)))
		// Every processed row, A's stale batch among them: none may change.
		before := e.processedAt(nil)
		logBefore := len(a.current().stderr.String())
		a.current().signal(syscall.SIGCONT)
		resumedAt := time.Now()

		// A finds its connection gone when it tries to mark the batch (it
		// published and could not record: all its workers back off), or,
		// if its publish timeout fired first, gives the batch up as
		// unconfirmed; either way it logs it.
		var failure string
		for deadline := time.Now().Add(30 * time.Second); failure == "" && time.Now().Before(deadline); {
			logs := a.current().stderr.String()[logBefore:]
			found := append(logLines(logs, "outbox relay batch failed"), logLines(logs, "broker unavailable")...)
			found = append(found, logLines(logs, "could not record them")...)
			for _, l := range found {
				failure = l
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if failure == "" {
			t.Errorf("run %d: A logged nothing about its stale batch after resuming (%v, its session ended %s after the freeze); log:\n%s", run, stopInfo.Load(), killedAfter, tail(a.current().stderr.String()[logBefore:], 20))
		}
		time.Sleep(2 * time.Second) // A's next batches, if it were to mark the stale one
		after := e.processedAt(nil)
		checkedRows += len(before)
		for id, at := range before {
			if !after[id].Equal(at) {
				remarked++
				t.Errorf("run %d: row %s marked again after A resumed: processed_at %s -> %s", run, id, at, after[id])
			}
		}
		if a.current().exited() {
			t.Fatalf("run %d: relay A exited after resuming: %s", run, tail(a.current().stderr.String(), 20))
		}
		if code := b.stopGracefully(); code != 0 {
			t.Errorf("run %d: relay B exit %d", run, code)
		}
		batch := "?"
		if m := regexp.MustCompile(`mark (\d+) event|"events":(\d+)`).FindStringSubmatch(failure); m != nil {
			batch = m[1] + m[2]
		}
		details = append(details, fmt.Sprintf("run %d: A frozen as its batch of %s rows went out (%d publishes seen in the first chunk; SIGSTOP %s); its session ended by PostgreSQL after %s; B had them all processed %s after the freeze; A resumed after %s and logged %q: %s",
			run, batch, len(ids), stopInfo.Load(), killedAfter.Round(100*time.Millisecond), takenOver.Round(100*time.Millisecond),
			resumedAt.Sub(stoppedAt).Round(100*time.Millisecond), logField(failure, "msg"), logField(failure, "err")))
	}
	// A alone drains what the writers add.
	time.Sleep(time.Second)
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(2 * time.Minute); !ok {
		t.Errorf("A did not drain after the last freeze: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if code := a.stopGracefully(); code != 0 {
		t.Errorf("relay A exit %d after SIGTERM", code)
	}
	details = append(details, fmt.Sprintf("rows whose processed_at changed after the hung relay resumed: %d (of %d processed rows compared over the runs)", remarked, checkedRows))
	_ = staleRows
	e.finish(Row{Key: "2", Scenario: "Relay hung past idle_in_transaction_session_timeout, another takes over, the hung one resumes",
		Fault: fmt.Sprintf("SIGSTOP of relay A right after it sent a batch (publish timeout %s, so the session's idle timeout is %s), relay B started, SIGCONT after the timeout", publishTimeout, idleTimeout),
		Runs:  runs, Resent: e.wire.resent(), Drain: drain, Details: details})
}

// processedAt returns processed_at of the given rows, or of every processed
// row when ids is nil.
func (e *env) processedAt(ids []string) map[string]time.Time {
	e.t.Helper()
	q, args := `SELECT id::text, processed_at FROM `+e.table+` WHERE processed_at IS NOT NULL`, []any{}
	if ids != nil {
		q, args = `SELECT id::text, processed_at FROM `+e.table+` WHERE id = ANY($1::uuid[])`, []any{ids}
	}
	rows, err := e.pool.Query(ctxT(e.t, 30*time.Second), q, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]time.Time{}
	var id string
	var at *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		if at != nil {
			out[id] = *at
		} else {
			out[id] = time.Time{}
		}
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// logField extracts a field from a JSON log line, for reports; a number is
// read as a duration in nanoseconds (slog's JSON form of time.Duration).
func logField(line, field string) string {
	m := regexp.MustCompile(`"` + field + `":(?:"((?:[^"\\]|\\.)*)"|(-?[0-9]+))`).FindStringSubmatch(line)
	switch {
	case m == nil:
		return line
	case m[2] != "":
		n, _ := strconv.ParseInt(m[2], 10, 64)
		return time.Duration(n).String()
	}
	return strings.ReplaceAll(m[1], `\"`, `"`)
}
