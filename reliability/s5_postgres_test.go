package reliability

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
)

// pgFaults is the database side of scenario 5: the writers' pool goes through
// a proxy of its own, which can make COMMITs ambiguous.
type pgFaults struct {
	e       *env
	proxy   *tcpproxy.Proxy
	pool    *pgxpool.Pool
	app     string
	armed   atomic.Int64 // COMMITs still to disturb
	mu      sync.Mutex
	dropAns map[int64]bool // connections whose next answer is dropped
	lost    atomic.Int64   // COMMITs cut before reaching PostgreSQL
	unknown atomic.Int64   // COMMITs applied whose answer was cut
}

func (e *env) writerPoolViaProxy() *pgFaults {
	e.t.Helper()
	f := &pgFaults{e: e, app: e.schema + "-writers", dropAns: map[int64]bool{}}
	var err error
	if f.proxy, err = tcpproxy.New(pgAddr(e.t)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.proxy.Close() })
	cfg, err := pgxpool.ParseConfig(relayDSN(e.t, f.proxy.Addr(), f.app, ""))
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.MaxConns = 6
	if f.pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(f.pool.Close)
	commit := []byte("commit\x00") // pgx sends COMMIT as a simple query
	f.proxy.SetHook(func(conn int64, dir tcpproxy.Direction, chunk []byte) tcpproxy.Action {
		f.mu.Lock()
		defer f.mu.Unlock()
		if dir == tcpproxy.ToClient {
			if f.dropAns[conn] {
				delete(f.dropAns, conn)
				f.unknown.Add(1)
				return tcpproxy.ResetConn // PostgreSQL committed; the writer never hears it
			}
			return tcpproxy.Forward
		}
		if !bytes.Contains(chunk, commit) || f.armed.Load() <= 0 || rand.IntN(4) != 0 {
			return tcpproxy.Forward
		}
		f.armed.Add(-1)
		if rand.IntN(2) == 0 {
			f.lost.Add(1)
			return tcpproxy.ResetConn // the COMMIT never reaches PostgreSQL
		}
		f.dropAns[conn] = true
		return tcpproxy.Forward
	})
	return f
}

// TestScenario5PostgresFaults: the relay's database connections are killed
// (pg_terminate_backend) and the database goes away and comes back (all
// sessions terminated and the network to PostgreSQL refused for a few
// seconds: what a restart looks like from the relay), while writers run and
// some of their COMMITs become ambiguous. The relay must reconnect by itself,
// with backoff, and lose nothing. The real `pg_ctlcluster restart -m fast`
// is TestScenario5PostgresRestartLong, in the long version.
func TestScenario5PostgresFaults(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{})
	f := e.writerPoolViaProxy()
	w := e.startWriters(&workload{pool: f.pool, writers: 4, aggregates: 20, pause: 25 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50})
	p := r.start()
	// Faults start once the relay is past its start-up checks: a failure
	// during them ends the process (see TestKnownBugRunGivesUpOnTransientErrorAtStart).
	r.waitPublishing(p, 30*time.Second)

	cycles := long(3, 15)
	var terminated, writerKills, outages, partitions int
	for c := 0; c < cycles; c++ {
		f.armed.Add(8) // disturb some COMMITs in this cycle
		for range 3 {
			time.Sleep(time.Duration(400+rand.IntN(800)) * time.Millisecond)
			terminated += e.terminate(r.name, "")
		}
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		writerKills += e.terminate(f.app, "")
		// "Restart": every session ends, the server refuses connections for
		// a while, then accepts them again.
		time.Sleep(time.Second)
		r.pg.Cut()
		f.proxy.Cut()
		e.terminate(e.schema+"-", "")
		outages++
		time.Sleep(3 * time.Second)
		r.pg.Restore()
		f.proxy.Restore()
		// A partition: open connections freeze (bytes held, delivered on
		// heal), new ones hang; then latency on every database round trip.
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		r.pg.Partition()
		f.proxy.Partition()
		partitions++
		time.Sleep(long(8*time.Second, 20*time.Second))
		r.pg.Restore()
		f.proxy.Restore()
		r.pg.SetLatency(30 * time.Millisecond)
		f.proxy.SetLatency(30 * time.Millisecond)
		time.Sleep(3 * time.Second)
		r.pg.SetLatency(0)
		f.proxy.SetLatency(0)
	}
	time.Sleep(2 * time.Second) // writers run on the healed database
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(2*time.Minute, 10*time.Minute)); !ok {
		t.Errorf("not drained after the last fault: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() || r.starts != 1 {
		t.Fatalf("the relay process did not survive the database faults (exited=%v, starts=%d): %s", p.exited(), r.starts, tail(p.stderr.String(), 20))
	}
	logs := p.stderr.String()
	failed := logLines(logs, "outbox relay batch failed")
	if len(failed) == 0 {
		t.Error("the relay logged no failed batch: the faults did not reach it")
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	maxRetry := ""
	for _, l := range failed {
		if v := logField(l, "retry_in"); v != l {
			maxRetry = v
		}
	}
	details := []string{
		fmt.Sprintf("%d relay sessions terminated by pg_terminate_backend, %d writer sessions, %d database outages of 3s (sessions terminated + connections refused), %d partitions of %s (connections frozen, then healed), each followed by 3s of 30ms latency per round trip",
			terminated, writerKills, outages, partitions, long(8*time.Second, 20*time.Second)),
		fmt.Sprintf("COMMITs disturbed by the writers' proxy: %d cut before reaching PostgreSQL, %d cut after it (the answer lost)", f.lost.Load(), f.unknown.Load()),
		fmt.Sprintf("the relay process never exited; it logged %d failed batches and backed off (e.g. retry_in %s) then reconnected", len(failed), maxRetry),
		fmt.Sprintf("writers: %d transactions, %d errors (first: %s)", w.txs.Load(), w.errs.Load(), firstErr(w)),
	}
	// A lost session costs at most the batches in flight (2 workers of 50):
	// published again when the mark was lost, and one attempt each under
	// the poison-row rule (a claim never followed by an outcome); never a
	// dead letter.
	runs := terminated + writerKills + outages + partitions
	inFlight := runs * 2 * 50
	res := e.finish(Row{Key: "5", Scenario: "PostgreSQL connections killed and PostgreSQL \"restarted\"",
		Fault: "pg_terminate_backend of relay and writer sessions; all sessions terminated + connections refused for 3s; partitions; latency; COMMITs cut",
		Runs:  runs, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}})
	if res.Ambiguous == 0 {
		t.Error("no ambiguous COMMIT happened: the ambiguity path was not exercised")
	}
}

func firstErr(w *workload) string {
	if p := w.firstErr.Load(); p != nil {
		return *p
	}
	return "none"
}

// TestScenario5PostgresRestartLong restarts the real PostgreSQL cluster with
// `pg_ctlcluster ... restart -m fast` while a relay and writers run. It runs
// only in the long version: every test on the machine loses its connections.
// It is not parallel: the suite's other scenarios wait for it.
func TestScenario5PostgresRestartLong(t *testing.T) {
	if !*flagLong {
		t.Skip("long version only (-reliability.long): restarts the machine's PostgreSQL")
	}
	version := pgVersion(t)
	e := newEnv(t, envOpts{})
	f := e.writerPoolViaProxy()
	w := e.startWriters(&workload{pool: f.pool, writers: 4, aggregates: 20, pause: 25 * time.Millisecond})
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)
	restarts := 3
	var took []string
	for i := 0; i < restarts; i++ {
		time.Sleep(5 * time.Second)
		start := time.Now()
		out, err := exec.Command("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart", "-m", "fast").CombinedOutput()
		if err != nil {
			t.Fatalf("pg_ctlcluster restart: %v: %s", err, out)
		}
		waitPostgres(t)
		took = append(took, time.Since(start).Round(100*time.Millisecond).String())
	}
	time.Sleep(3 * time.Second)
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(10 * time.Minute); !ok {
		t.Errorf("not drained after the last restart: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	if p.exited() || r.starts != 1 {
		t.Fatalf("the relay did not survive the restarts: %s", tail(p.stderr.String(), 20))
	}
	failed := logLines(p.stderr.String(), "outbox relay batch failed")
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	e.finish(Row{Key: "5b", Scenario: "PostgreSQL restarted (pg_ctlcluster restart -m fast)",
		Fault: "real restarts of the PostgreSQL cluster while the relay and writers run",
		Runs:  restarts, Resent: e.wire.resent(), Drain: drain, Details: []string{
			fmt.Sprintf("restart took %s (until PostgreSQL answered again)", strings.Join(took, ", ")),
			fmt.Sprintf("the relay process never exited; it logged %d failed batches while the database was down", len(failed)),
			fmt.Sprintf("writers: %d transactions, %d errors", w.txs.Load(), w.errs.Load()),
		}})
}

func pgVersion(t *testing.T) string {
	entries, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(entries) == 0 {
		missing(t, "no /etc/postgresql: cannot restart the cluster")
	}
	return entries[0].Name()
}

// waitPostgres waits until PostgreSQL accepts connections again.
func waitPostgres(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if exec.Command("pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q").Run() == nil {
			return
		}
	}
	t.Fatal("PostgreSQL did not come back within 2 minutes")
}
