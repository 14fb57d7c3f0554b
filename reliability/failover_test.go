package reliability

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Failover to a promoted standby (rows 16a, 16b): a private primary with a
// synchronous streaming standby (pg_basebackup -R); relays and writers
// connect with a multi-host URL listing both, target_session_attrs
// read-write. While the writers run, the primary is stopped with
// `pg_ctl stop -m immediate` (a crash) and the standby promoted
// (`pg_ctl promote`). Every event whose COMMIT returned is on the standby
// (synchronous replication) and must be delivered; the relay, never
// restarted, must find the new primary and deliver again within 30 s of
// the promotion, and never exit. The WAL source's slot is not on the new
// primary (PostgreSQL 15 keeps logical slots off standbys): the relay
// hands the pending rows to the table path, creates a fresh slot and
// streams again.

// failoverClusterConf is the primary's configuration: logical decoding for
// the WAL source, and what a synchronous standby needs
// (synchronous_standby_names is set by standby, once the standby runs:
// before, every COMMIT would wait for it).
const failoverClusterConf = "wal_level = logical\nmax_wal_senders = 10\nmax_replication_slots = 10\nhot_standby = on\n"

// failoverDSN is the multi-host URL of the "test" database on primary and
// standby: pgx tries the hosts in order and keeps the first that accepts
// writes.
func failoverDSN(primary, standby *pgCluster) string {
	return fmt.Sprintf("postgres://postgres@%s,%s/test?target_session_attrs=read-write&sslmode=disable", primary.addr(), standby.addr())
}

// failoverResume bounds the time from the promotion to the relay's first
// publish, and to the WAL source's fresh slot streaming.
const failoverResume = 30 * time.Second

func TestFailoverTableSource(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioFailover(t, false)
}

func TestFailoverWALSource(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioFailover(t, true)
}

func scenarioFailover(t *testing.T, wal bool) {
	primary := startClusterConf(t, failoverClusterConf)
	standby := primary.standby()
	e := newEnv(t, envOpts{cluster: primary, dsn: failoverDSN(primary, standby), wal: wal})
	commits := &commitLog{}
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond, onCommit: commits.add})
	const workers, batch = 2, 50
	r := e.newRelay("r", relayOpts{workers: workers, batch: batch})
	p := r.start()
	r.waitPublishing(p, 30*time.Second)
	if wal {
		if _, _, ok := e.waitSlotActive(0, 30*time.Second); !ok {
			t.Fatalf("the relay never streamed the slot on the primary: %s", tail(p.stderr.String(), 20))
		}
		// PostgreSQL 15 does not copy logical slots to a standby: the
		// slot the relay streams exists on the primary only.
		if n := standbySlots(t, standby, e.walSlot); n != 0 {
			t.Fatalf("slot %s is on the standby (%d): PostgreSQL 15 should keep logical slots off standbys", e.walSlot, n)
		}
	}
	time.Sleep(3 * time.Second) // the writers and the relay in their stride

	// The failover: the primary crashes, the standby is promoted.
	before := e.pending()
	down := primary.stop("immediate")
	e.pool.Reset() // the test's idle connections died with the primary
	// What the new primary will start from: the standby's rows once it has
	// replayed every WAL record it received.
	pending := standbyPending(t, standby, e.table)
	time.Sleep(2 * time.Second) // what noticing the crash takes; the writers fail meanwhile
	if p.exited() {
		t.Fatalf("the relay exited when the primary crashed: %s", tail(p.stderr.String(), 20))
	}
	sentBefore := e.wire.sent()
	promoteTook := standby.promote()
	promotedAt := time.Now()
	e.pool.Reset()

	// Delivery resumes without a restart of the relay.
	var firstPublish time.Duration
	for {
		if e.wire.sent() > sentBefore {
			firstPublish = time.Since(promotedAt)
			break
		}
		if p.exited() || time.Since(promotedAt) > failoverResume {
			t.Fatalf("no publish within %s of the promotion (relay exited: %v): %s", failoverResume, p.exited(), tail(p.stderr.String(), 30))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And the events written on the new primary are delivered.
	firstNew, ok := e.waitFirstNewDelivered(commits, promotedAt)
	if !ok {
		t.Fatalf("no event committed on the new primary was delivered within %s of the promotion: %s", failoverResume, tail(p.stderr.String(), 30))
	}
	details := []string{
		fmt.Sprintf("pg_ctl stop -m immediate of the primary took %s; the standby promoted 2 s later (pg_ctl promote -w took %s)",
			down.Round(10*time.Millisecond), promoteTook.Round(10*time.Millisecond)),
		fmt.Sprintf("first publish %s after the promotion, first event written on the new primary delivered %s after it (bound %s), by the same relay process",
			firstPublish.Round(10*time.Millisecond), firstNew.Round(10*time.Millisecond), failoverResume),
		fmt.Sprintf("%d rows pending at the failover (on the standby, all it received replayed; %d on the primary just before the crash)", pending, before),
	}
	onNew := newPrimaryCheck(t, e, standby)
	var streamingAt time.Time
	if wal {
		took, ok := e.waitStreamingAgain(promotedAt)
		streamingAt = promotedAt.Add(took)
		if !ok {
			t.Errorf("the WAL relay did not stream a fresh slot on the new primary within %s of the promotion: %s", failoverResume, tail(p.stderr.String(), 30))
		}
		lost := logLines(p.stderr.String(), "the replication slot is lost")
		fresh := logLines(p.stderr.String(), "fresh slot created; streaming again")
		missingSlot := len(lost) > 0 && strings.Contains(lost[0], "does not exist")
		if !missingSlot {
			t.Errorf("the relay did not log that the slot does not exist on the new primary: %q", lost)
		}
		if len(fresh) == 0 {
			t.Errorf("the relay did not log a fresh slot: %s", tail(p.stderr.String(), 30))
		}
		details = append(details, fmt.Sprintf("WAL source: slot absent on the standby before the promotion; on the new primary the relay found it missing (%v), relayed from the table, created a fresh slot and streamed it %s after the promotion (active on the new primary: %v)",
			missingSlot, took.Round(10*time.Millisecond), ok))
	}
	details = append(details, onNew)

	time.Sleep(3 * time.Second) // the writers go on, on the new primary
	w.stop()
	drain, drained := e.waitDrained(2 * time.Minute)
	if !drained {
		e.dumpStuck()
		t.Errorf("not drained %s after the writers stopped: %d pending", drain, e.pending())
	}
	if p.exited() {
		t.Errorf("the relay exited: %s", tail(p.stderr.String(), 20))
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	details = append(details, fmt.Sprintf("writers: %d transactions, %d errors (first: %s)", w.txs.Load(), w.errs.Load(), firstErr(w)))
	if wal {
		// The rows the stream delivered are deleted; those the fallback
		// handed to the table path stay, marked processed.
		after := commits.since(streamingAt)
		streamed := len(after) - e.countIDs(after)
		if streamed == 0 {
			t.Errorf("of the %d events committed once the fresh slot streamed, the stream delivered none", len(after))
		}
		details = append(details, fmt.Sprintf("WAL source: of the %d events committed once the fresh slot streamed, %d were delivered by the stream (deleted)", len(after), streamed))
		details = append(details, walDetails(e)...)
	}
	// What a failover may publish twice: the rows pending on the standby
	// as it was promoted, among them the events published just before the
	// crash whose marks (table source) or deletes (WAL source), committed
	// with synchronous_commit=off, had not reached it; with the WAL source,
	// also the events committed on the new primary while the relay relayed
	// from the table (one committed as the fresh slot is created is both
	// handed over and streamed: docs/WAL.md).
	bound := pending
	what := fmt.Sprintf("the %d rows pending at the failover", pending)
	if wal {
		fallback := len(commits.since(promotedAt)) - len(commits.since(streamingAt))
		bound += fallback
		what += fmt.Sprintf(" + the %d events committed between the promotion and the fresh slot streaming", fallback)
	}
	// Re-sends may also count a batch per worker published again after a
	// publish timeout on a loaded machine, which has nothing to do with
	// the failover.
	slack := workers * batch
	details = append(details, fmt.Sprintf("asserted: the relay never exits; first publish, and first delivery of an event written on the new primary, within %s of the promotion; duplicates ≤ %s, re-sends ≤ that + one batch per worker (%d)",
		failoverResume, what, slack))
	key, name := "16a", "Failover to a promoted synchronous standby (table source)"
	fault := "pg_ctl stop -m immediate of the primary, pg_ctl promote of its synchronous standby, relay and writers on a multi-host URL (target_session_attrs=read-write)"
	if wal {
		key, name = "16b", "WAL source: failover to a promoted synchronous standby"
	}
	e.finish(Row{Key: key, Scenario: name, Fault: fault, Runs: 1, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: bound + slack, Resent: bound + slack, Duplicated: bound, DeadLetters: 0}})
}

// standbySlots counts the replication slots named name on the standby.
func standbySlots(t *testing.T, standby *pgCluster, name string) int {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, standby.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// standbyPending waits until the standby has replayed all the WAL it
// received and counts the table's pending rows there.
func standbyPending(t *testing.T, standby *pgCluster, table string) int {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	conn, err := pgx.Connect(ctx, standby.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var replayed bool
		if err := conn.QueryRow(ctx, `SELECT COALESCE(pg_last_wal_replay_lsn() >= pg_last_wal_receive_lsn(), true)`).Scan(&replayed); err != nil {
			t.Fatalf("standby replay position: %v", err)
		}
		if replayed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE processed_at IS NULL AND dead_at IS NULL`).Scan(&n); err != nil {
		t.Fatalf("count the standby's pending rows: %v", err)
	}
	return n
}

// newPrimaryCheck checks that the env's pool, on the multi-host URL, now
// reaches the promoted standby, out of recovery.
func newPrimaryCheck(t *testing.T, e *env, standby *pgCluster) string {
	t.Helper()
	var port int
	var recovery bool
	if err := e.pool.QueryRow(ctxT(t, 30*time.Second), `SELECT inet_server_port(), pg_is_in_recovery()`).Scan(&port, &recovery); err != nil {
		t.Fatalf("the multi-host URL reaches no server after the promotion: %v", err)
	}
	if port != standby.port || recovery {
		t.Fatalf("the multi-host URL reaches port %d (in recovery: %v), want the promoted standby on %d", port, recovery, standby.port)
	}
	return fmt.Sprintf("the multi-host URL reaches the promoted standby (port %d, out of recovery)", port)
}

// waitStreamingAgain waits until a walsender streams the scenario's slot on
// the new primary and returns how long after since that was.
func (e *env) waitStreamingAgain(since time.Time) (time.Duration, bool) {
	for time.Since(since) < failoverResume {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var active bool
		err := e.pool.QueryRow(ctx, `SELECT s.active AND r.state IN ('catchup', 'streaming')
FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, e.walSlot).Scan(&active)
		cancel()
		if err == nil && active {
			return time.Since(since), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(since), false
}

// commitLog records when each event's COMMIT returned.
type commitLog struct {
	mu  sync.Mutex
	ids []string
	at  []time.Time
}

func (c *commitLog) add(ids []string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		c.ids, c.at = append(c.ids, id), append(c.at, at)
	}
}

// since returns the events whose COMMIT returned after t.
func (c *commitLog) since(t time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for i, at := range c.at {
		if at.After(t) {
			out = append(out, c.ids[i])
		}
	}
	return out
}

// countIDs counts the rows of the table with one of ids.
func (e *env) countIDs(ids []string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctxT(e.t, 30*time.Second), `SELECT count(*) FROM `+e.table+` WHERE id = ANY($1::uuid[])`, ids).Scan(&n); err != nil {
		e.t.Fatalf("count rows: %v", err)
	}
	return n
}

// waitFirstNewDelivered waits until the first event committed after since
// (on the new primary) is delivered: processed (table source, or handed to
// the table path) or deleted (streamed by the WAL source). It returns how
// long after since that was.
func (e *env) waitFirstNewDelivered(commits *commitLog, since time.Time) (time.Duration, bool) {
	var id string
	for time.Since(since) < failoverResume {
		if id == "" {
			if ids := commits.since(since); len(ids) > 0 {
				id = ids[0]
			}
		}
		if id != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var pending int
			err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.table+` WHERE id = $1 AND processed_at IS NULL`, id).Scan(&pending)
			cancel()
			if err == nil && pending == 0 {
				return time.Since(since), true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(since), false
}
