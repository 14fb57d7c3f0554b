package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// takeoverBound is the promise: a standby streams within 5 s of the
// streaming relay's SIGKILL.
const takeoverBound = 5 * time.Second

// TestWALTakeover: two WAL relays on one table, writers running. Only one
// streams the slot; the test SIGKILLs it, measures until the standby
// streams (a new walsender holds the slot) and publishes again, and asserts
// both within 5 s; the killed relay comes back as the new standby, and the
// next round kills whichever streams then. Lost 0.
func TestWALTakeover(t *testing.T) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{wal: true, cluster: walCluster(t)})
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	const batch = 50
	relays := []*relay{
		e.newRelay("a", relayOpts{batch: batch, httpAddr: true}),
		e.newRelay("b", relayOpts{batch: batch, httpAddr: true}),
	}
	addrs := make([]string, len(relays))
	p := relays[0].start()
	addrs[0] = relays[0].httpAddr(p)
	relays[0].waitPublishing(p, 30*time.Second)
	p = relays[1].start()
	addrs[1] = relays[1].httpAddr(p)

	// streaming finds which relay streams, from its outbox_replication_streaming.
	streaming := func() int {
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			on := -1
			for i, a := range addrs {
				if metric(a, "outbox_replication_streaming") == 1 {
					if on >= 0 {
						t.Fatalf("relays %s and %s both report outbox_replication_streaming 1", relays[on].name, relays[i].name)
					}
					on = i
				}
			}
			if on >= 0 {
				return on
			}
		}
		t.Fatalf("no relay reports outbox_replication_streaming 1 within 15s; a: %s\nb: %s",
			tail(relays[0].logs(), 10), tail(relays[1].logs(), 10))
		return -1
	}

	rounds := long(3, 20)
	var details []string
	var worstSlot, worstPublish time.Duration
	for i := 0; i < rounds; i++ {
		time.Sleep(2 * time.Second)
		k := streaming()
		s := 1 - k
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		old := e.slotInfo(ctx)
		cancel()
		sent := relays[s].nats.Stats().BytesToServer
		killed := time.Now()
		relays[k].kill()
		pid, slotAfter, ok := e.waitSlotActive(old.pid, 2*takeoverBound)
		if !ok {
			t.Fatalf("round %d: no walsender took slot %s over within %s of relay %s's SIGKILL", i+1, e.walSlot, 2*takeoverBound, relays[k].name)
		}
		publishAfter := time.Duration(-1)
		for time.Since(killed) < 2*takeoverBound {
			if relays[s].nats.Stats().BytesToServer > sent+2048 {
				publishAfter = time.Since(killed)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if publishAfter < 0 {
			t.Fatalf("round %d: relay %s published nothing within %s of %s's SIGKILL", i+1, relays[s].name, 2*takeoverBound, relays[k].name)
		}
		if m := metric(addrs[s], "outbox_replication_streaming"); m != 1 {
			t.Errorf("round %d: relay %s streams (walsender %d) but reports outbox_replication_streaming %v", i+1, relays[s].name, pid, m)
		}
		worstSlot, worstPublish = max(worstSlot, slotAfter), max(worstPublish, publishAfter)
		details = append(details, fmt.Sprintf("round %d: relay %s SIGKILLed while streaming; relay %s held the slot %s later and published %s later",
			i+1, relays[k].name[len(e.schema)+1:], relays[s].name[len(e.schema)+1:], slotAfter.Round(time.Millisecond), publishAfter.Round(time.Millisecond)))
		p := relays[k].start() // the new standby
		addrs[k] = relays[k].httpAddr(p)
	}
	// The takeover is the standby holding the slot (its walsender
	// streaming); its first publish also waits for its first batch to be
	// read and published, which a loaded machine delays: checked against
	// twice the bound.
	if worstSlot > takeoverBound {
		t.Errorf("takeover took up to %s (slot held by the standby), want within %s", worstSlot, takeoverBound)
	}
	if worstPublish > 2*takeoverBound {
		t.Errorf("the standby's first publish came up to %s after the SIGKILL, want within %s", worstPublish, 2*takeoverBound)
	}
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the last takeover: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	for _, r := range relays {
		if code := r.stopGracefully(); code != 0 {
			t.Errorf("relay %s: exit %d after SIGTERM", r.name, code)
		}
	}
	details = append(details,
		fmt.Sprintf("asserted: the standby holds the slot within %s of the SIGKILL (worst: %s) and publishes within %s (worst: %s)",
			takeoverBound, worstSlot.Round(time.Millisecond), 2*takeoverBound, worstPublish.Round(time.Millisecond)),
		fmt.Sprintf("writers: %d transactions, %d errors", w.txs.Load(), w.errs.Load()))
	details = append(details, walDetails(e)...)
	perKill := batch + e.walRate(2*time.Second)
	e.finish(Row{Key: "15d", Scenario: "WAL source: the streaming relay SIGKILLed, the standby takes over within 5 s",
		Fault: "SIGKILL of the relay holding the slot, a standby relay running, writers running",
		Runs:  rounds, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: 0, Resent: rounds * perKill, Duplicated: rounds * perKill, DeadLetters: 0}})
}

// TestWALPostgresRestart is scenario 12 with --source wal (row 15e), on a
// private cluster with wal_level=logical.
func TestWALPostgresRestart(t *testing.T) {
	t.Parallel()
	slot(t)
	scenarioPGRestart(t, true)
}

// dropSlotNow ends the slot's walsender and drops the slot, retrying while
// the relay reconnects in between; it returns the number of tries.
func (e *env) dropSlotNow(d time.Duration) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for tries := 1; ; tries++ {
		_, _ = e.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.walSlot)
		tag, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, e.walSlot)
		if err == nil && tag.RowsAffected() == 1 {
			return tries
		}
		if err != nil && !strings.Contains(err.Error(), "is active") {
			e.t.Fatalf("drop slot %s: %v", e.walSlot, err)
		}
		if ctx.Err() != nil {
			e.t.Fatalf("slot %s not dropped within %s (%d tries): %v", e.walSlot, d, tries, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWALSlotLost: the slot vanishes under a streaming relay while writers
// run, two ways. "dropped" (row 15f): its walsender terminated and the slot
// dropped (pg_terminate_backend, pg_drop_replication_slot), on the shared
// server. "invalidated" (row 15g): on a private cluster with
// max_slot_wal_keep_size = 1MB, the relay is stopped (SIGSTOP) while WAL
// segments are switched and a CHECKPOINT invalidates the slot (wal_status
// lost), then resumed. Either way the relay must say so loudly (an error
// naming the slot), fall back to the table, stream again on a fresh slot,
// and lose nothing.
func TestWALSlotLost(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"dropped", "invalidated"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			slot(t)
			scenarioSlotLost(t, how == "invalidated")
		})
	}
}

func scenarioSlotLost(t *testing.T, invalidate bool) {
	o := envOpts{wal: true}
	switch {
	case invalidate:
		o.cluster = startClusterConf(t, walClusterConf+"max_slot_wal_keep_size = 1MB\n")
	case !testdb.SharedIsLogical(t):
		o.cluster = walCluster(t) // the shared server cannot replicate
	}
	e := newEnv(t, o)
	w := e.startWriters(&workload{writers: 3, aggregates: 20, pause: 20 * time.Millisecond})
	r := e.newRelay("r", relayOpts{batch: 50, httpAddr: true})
	p := r.start()
	addr := r.httpAddr(p)
	r.waitPublishing(p, 30*time.Second)
	oldPID, _, ok := e.waitSlotActive(0, 15*time.Second)
	if !ok {
		t.Fatalf("the relay never streamed slot %s: %s", e.walSlot, tail(r.logs(), 20))
	}
	time.Sleep(time.Second)

	var fault, how string
	if invalidate {
		fault = "slot invalidated by max_slot_wal_keep_size = 1MB (relay SIGSTOPped, WAL segments switched, CHECKPOINT), relay resumed; private cluster"
		if _, err := stopProcess(p.pid(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		time.Sleep(500 * time.Millisecond) // writers keep committing
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		for i := 0; i < 3; i++ {
			// A switch needs WAL since the previous one: the writers provide it.
			time.Sleep(200 * time.Millisecond)
			if _, err := e.pool.Exec(ctx, `SELECT pg_switch_wal()`); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			t.Fatal(err)
		}
		s := e.slotInfo(ctx)
		cancel()
		if s.walStatus != "lost" {
			t.Fatalf("slot %s not invalidated: wal_status %q (exists %v)", e.walSlot, s.walStatus, s.exists)
		}
		how = fmt.Sprintf("relay stopped for %s; slot %s invalidated (wal_status lost) by a CHECKPOINT after 3 WAL switches, then the relay resumed (SIGCONT)",
			time.Since(stopped).Round(100*time.Millisecond), e.walSlot)
		p.signal(syscall.SIGCONT)
	} else {
		fault = "the slot's walsender terminated and the slot dropped (pg_terminate_backend, pg_drop_replication_slot) while the relay streams"
		tries := e.dropSlotNow(10 * time.Second)
		how = fmt.Sprintf("slot %s dropped under the relay (%d tries: the relay reconnects between them)", e.walSlot, tries)
	}
	lost := time.Now()

	// A fresh slot, streamed again.
	freshAfter := time.Duration(-1)
	var last slotState
	for time.Since(lost) < freshBound {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = e.slotInfo(ctx)
		cancel()
		if last.exists && last.active && last.walStatus != "lost" && last.pid != oldPID {
			freshAfter = time.Since(lost)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fresh := freshAfter >= 0
	if !fresh {
		// Not fatal: the check of what was delivered still runs.
		t.Errorf("no fresh slot streamed within %s of the loss (slot: %+v); relay log:\n%s", freshBound, last, tail(r.logs(), 6))
	}
	time.Sleep(2 * time.Second) // writers go on on the fresh slot
	lastFault := time.Now()
	w.stop()
	if _, ok := e.waitDrained(long(time.Minute, 5*time.Minute)); !ok {
		t.Errorf("not drained after the slot loss: %d pending", e.pending())
	}
	drain := time.Since(lastFault)
	fallbacks := metric(addr, "outbox_replication_fallbacks_total")
	if fallbacks < 1 {
		t.Errorf("outbox_replication_fallbacks_total = %v after the slot was lost, want >= 1", fallbacks)
	}
	if p.exited() {
		t.Errorf("the relay exited when its slot was lost: %s", tail(p.stderr.String(), 20))
	}
	if code := r.stopGracefully(); code != 0 {
		t.Errorf("relay exit %d after SIGTERM", code)
	}
	// Loudly: an error-level line naming the slot.
	var loud []string
	for _, l := range logLines(r.logs(), e.walSlot) {
		if strings.Contains(l, `"level":"ERROR"`) {
			loud = append(loud, l)
		}
	}
	if len(loud) == 0 {
		t.Errorf("the relay logged no error naming slot %s when it was lost; its log:\n%s", e.walSlot, tail(r.logs(), 30))
	}
	first := "none"
	if len(loud) > 0 {
		first = logField(loud[0], "msg")
		if e := logField(loud[0], "err"); e != "" {
			first += ": " + e
		}
	}
	details := []string{
		how,
		freshLine(freshAfter, last, fallbacks),
		fmt.Sprintf("%d error lines naming the slot; the first: %s", len(loud), first),
		fmt.Sprintf("writers: %d transactions, %d errors", w.txs.Load(), w.errs.Load()),
	}
	details = append(details, walDetails(e)...)
	key, name := "15f", "WAL source: slot dropped under the relay"
	if invalidate {
		key, name = "15g", "WAL source: slot invalidated (max_slot_wal_keep_size)"
	}
	// On the loss everything not confirmed is published again from the
	// table: what the slot had not confirmed, plus a batch.
	inFlight := 50 + e.walRate(2*time.Second)
	if invalidate {
		// The relay was stopped: everything committed since its last
		// confirmed position, i.e. while it was stopped, is in flight.
		inFlight += e.walRate(3 * time.Second)
	}
	row := Row{Key: key, Scenario: name, Fault: fault, Runs: 1, Resent: e.wire.resent(), Drain: drain, Details: details,
		Bound: &Bounds{Attempts: inFlight, Resent: inFlight, Duplicated: inFlight, DeadLetters: 0}}
	if invalidate {
		// Found by this scenario: the fallback "created" the fresh slot by
		// finding the invalidated one still listed, so the stream failed
		// with ErrSlotLost again at once, in a loop, and the relay never
		// streamed again (the table path still delivered everything).
		regression(t, "WAL source: an invalidated slot (wal_status lost) is replaced by a fresh one", "bb14236",
			fmt.Sprintf("the relay streams a fresh slot within %s of the invalidation", freshBound), fresh,
			freshLine(freshAfter, last, fallbacks))
	}
	e.finish(row)
}

// freshBound is how long a relay may take to stream a fresh slot after its
// slot was lost.
const freshBound = 20 * time.Second

func freshLine(after time.Duration, last slotState, fallbacks float64) string {
	if after < 0 {
		return fmt.Sprintf("NO fresh slot streamed within %s of the loss (the slot: exists %v, active %v, wal_status %s); outbox_replication_fallbacks_total %v",
			freshBound, last.exists, last.active, last.walStatus, fallbacks)
	}
	return fmt.Sprintf("the relay streamed a fresh slot %s after the loss; outbox_replication_fallbacks_total %v", after.Round(time.Millisecond), fallbacks)
}

// TestWALPrerequisiteMissing: on a private cluster with wal_level=replica
// (PostgreSQL's default), `outbox relay --source wal` must exit 2 at once
// with one line naming wal_level and the fix, and so must `outbox migrate
// --source wal`. Recorded as a bad-input check.
func TestWALPrerequisiteMissing(t *testing.T) {
	t.Parallel()
	slot(t)
	c := startClusterConf(t, "wal_level = replica\n")
	e := newEnv(t, envOpts{cluster: c, noNATS: true})

	code, stdout, stderr := e.outbox(30*time.Second, "migrate", "--source", "wal", "--schema", e.schema)
	migrateOK := code == 2 && strings.Contains(stderr, "wal_level")
	if !migrateOK {
		t.Errorf("outbox migrate --source wal on wal_level=replica: exit %d, want 2 naming wal_level; stdout %q stderr %q", code, stdout, stderr)
	}

	start := time.Now()
	p, err := startProc("relay", outboxBin, []string{"relay", "--source", "wal", "--schema", e.schema, "--broker", "stdout://",
		"--log-format", "json"}, childEnv(map[string]string{"DATABASE_URL": e.dbURL}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.exited() {
			p.kill()
		}
	})
	if !p.wait(20 * time.Second) {
		t.Fatalf("outbox relay --source wal still running 20s after start on wal_level=replica: %s", tail(p.stderr.String(), 10))
	}
	took := time.Since(start)
	exit := p.exitCode()
	// The error line: the command's own "outbox: ..." line, beside the
	// relay's JSON logs.
	var errLines []string
	for _, l := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		if strings.HasPrefix(l, "outbox: ") {
			errLines = append(errLines, l)
		}
	}
	line := strings.Join(errLines, " / ")
	ok := exit == 2 && len(errLines) == 1 && strings.Contains(line, "wal_level") && strings.Contains(line, "logical") &&
		strings.Contains(line, "restart") && took < 10*time.Second
	if !ok {
		t.Errorf("outbox relay --source wal on wal_level=replica: exit %d after %s, error lines %q, want exit 2 within 10s and one line naming wal_level = logical and the fix (restart); stderr:\n%s",
			exit, took.Round(time.Millisecond), errLines, tail(p.stderr.String(), 20))
	}
	report.check(Assertion{Area: "bad input", Name: "WAL source without wal_level=logical: outbox relay --source wal and outbox migrate --source wal",
		Expectation: "exit 2 within 10s, with one line naming wal_level, logical and the fix (set it, restart PostgreSQL; the managed services' flags); nothing created",
		Observed:    fmt.Sprintf("relay: exit %d after %s: %s; migrate: exit %d: %s", exit, took.Round(time.Millisecond), line, code, strings.TrimSpace(stderr)),
		Passed:      ok && migrateOK})
}

// TestWALOrderedTorture is the ordering torture test (the root package's
// TestOrderedRandomized) at the process level on the WAL source (row 15h):
// three relays in ordered mode stream one table through a publisher that
// fails 10% of publishes and hangs 1% past the publish timeout
// (reliability/internal/flakyrelay: the library's Relay and NATS
// publisher), so events keep moving between the stream and the table path;
// relays are SIGKILLed at random and restarted; then faults stop and
// everything drains. 0 lost, 0 inversions (first deliveries out of an
// aggregate's order) across the two paths.
func TestWALOrderedTorture(t *testing.T) { walOrderedTorture(t, false) }

// TestWALOrderedTorturePartitioned is TestWALOrderedTorture on a
// partitioned table (row 15j): the streaming relay rotates a partition
// every 500 events, or every second, and drops the delivered ones, while
// relays are killed, publishes fail and events park behind failures.
func TestWALOrderedTorturePartitioned(t *testing.T) { walOrderedTorture(t, true) }

func walOrderedTorture(t *testing.T, partitioned bool) {
	t.Parallel()
	slot(t)
	e := newEnv(t, envOpts{wal: true, partitioned: partitioned, dupWindow: 100 * time.Millisecond, cluster: walCluster(t)})
	w := e.startWriters(&workload{writers: 4, aggregates: 10, pause: 10 * time.Millisecond, rollbackPct: 5})
	var faults atomic.Bool
	faults.Store(true)
	var seeds atomic.Uint64
	cmd := func(r *relay) (string, []string) {
		fail, hang := "10", "1"
		if !faults.Load() {
			fail, hang = "0", "0"
		}
		args := []string{"-schema", e.schema, "-nats", "nats://" + r.nats.Addr(), "-subject", e.prefix + ".{event_type}",
			"-source", "wal", "-ordered", "-workers", "2", "-batch-size", "20", "-publish-timeout", "300ms",
			"-fail-pct", fail, "-hang-pct", hang, "-seed", strconv.FormatUint(seeds.Add(1), 10)}
		if partitioned {
			args = append(args, "-rotate-events", "500")
		}
		return flakyRelayBin, args
	}
	relays := make([]*relay, 3)
	for i := range relays {
		relays[i] = e.newRelay(fmt.Sprintf("f%d", i), relayOpts{command: cmd})
		relays[i].start()
	}
	// Sample the table path's share while faults run.
	var maxHanded, maxHeld int
	sample := func() {
		var handed, held int
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE retry_after IS NOT NULL AND processed_at IS NULL),
	count(*) FILTER (WHERE held_by IS NOT NULL AND processed_at IS NULL) FROM `+e.table).Scan(&handed, &held); err != nil {
			t.Errorf("sample: %v", err)
			return
		}
		maxHanded, maxHeld = max(maxHanded, handed), max(maxHeld, held)
	}
	sent := func() int64 {
		var n int64
		for _, r := range relays {
			n += r.nats.Stats().BytesToServer
		}
		return n
	}
	kills := 0
	for end := time.Now().Add(long(15*time.Second, 5*time.Minute)); time.Now().Before(end); {
		// Kill only once the relays published since the last kill (up to
		// 3 s): on a loaded machine a restarted relay takes a while to
		// stream, and kills faster than that would test start-ups only.
		base := sent()
		time.Sleep(time.Duration(150+rand.IntN(450)) * time.Millisecond)
		for deadline := time.Now().Add(3 * time.Second); sent() < base+8192 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		relays[rand.IntN(len(relays))].restart()
		kills++
		sample()
	}
	w.stop()
	time.Sleep(500 * time.Millisecond)
	// Faults stop: every relay restarts with an honest publisher and drains.
	faults.Store(false)
	for _, r := range relays {
		r.restart()
	}
	lastFault := time.Now()
	drainWait := long(2*time.Minute, 10*time.Minute)
	_, drained := e.waitDrained(drainWait)
	left, handedLeft, heldLeft := e.pending(), e.count("retry_after IS NOT NULL AND processed_at IS NULL"), e.count("held_by IS NOT NULL AND processed_at IS NULL")
	if !drained {
		e.dumpStuck()
	}
	drain := time.Since(lastFault)
	partitions := func() int {
		var n int
		if err := e.pool.QueryRow(ctxT(t, 10*time.Second), `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, e.table).Scan(&n); err != nil {
			t.Errorf("count partitions: %v", err)
		}
		return n
	}
	if partitioned {
		// The streaming relay drops what it delivered within a few seconds.
		for deadline := time.Now().Add(30 * time.Second); partitions() > 2 && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, r := range relays {
		if code := r.stopGracefully(); code != 0 {
			t.Errorf("relay %s: exit %d after SIGTERM", r.name, code)
		}
	}
	if maxHanded == 0 {
		t.Error("no event was ever handed to the table: the torture did not exercise the table path")
	}
	if d := e.dead(); d != 0 {
		t.Errorf("%d dead letters, want 0 (max attempts 1000)", d)
	}
	injected, streams := 0, 0
	for _, r := range relays {
		injected += len(logLines(r.logs(), "injected broker nack"))
		streams += len(logLines(r.logs(), `"msg":"outbox WAL source: streaming"`))
	}
	details := []string{
		fmt.Sprintf("3 relays (flakyrelay: ordered, 2 workers, batch 20, publish timeout 300ms) failing 10%% of publishes and hanging 1%% of batches; %d SIGKILLs at random times (150-600ms apart, each once 8 kB were published since the previous one, or after 3s); then faults off, all restarted, drained", kills),
		fmt.Sprintf("table path: up to %d events handed to the table and %d held behind them at once (sampled at each kill); %d injected failures logged; the slot was opened for streaming %d times", maxHanded, maxHeld, injected, streams),
		fmt.Sprintf("writers: %d transactions on 40 aggregates, 5%% rolled back on purpose; %d writer errors", w.txs.Load(), w.errs.Load()),
	}
	details = append(details, walDetails(e)...)
	row := Row{Key: "15h", Scenario: "WAL source: ordered torture (flaky publisher, SIGKILLed relays)",
		Fault:   "publisher failing 10% of publishes and hanging 1% of batches, relays SIGKILLed at random, ordered mode on the WAL source; dedup window 100ms",
		Ordered: true, Runs: kills, Resent: e.wire.resent(), Drain: drain, Details: details}
	if partitioned {
		rotated, dropped, compacted := 0, 0, 0
		for _, r := range relays {
			rotated += len(logLines(r.logs(), "new events go to a new partition"))
			dropped += len(logLines(r.logs(), "partition of delivered events dropped"))
			compacted += len(logLines(r.logs(), "partition compacted"))
		}
		left := partitions()
		row.Key, row.Scenario = "15j", "WAL source, partitioned table: ordered torture (flaky publisher, SIGKILLed relays, partitions rotated and dropped)"
		row.Fault += "; the table partitioned (outbox migrate --source wal --partitioned), a partition rotated every 500 events or every second"
		row.Details = append(row.Details, fmt.Sprintf("partitions: %d rotations and %d drops logged (%d compactions); %d partitions left once drained", rotated, dropped, compacted, left))
		if dropped == 0 || left > 2 {
			t.Errorf("partitions: %d dropped, %d left after the drain; want some dropped and at most 2 left", dropped, left)
		}
	}
	res := e.finish(row)
	if partitioned {
		if res.Inversions != 0 || !drained {
			t.Errorf("partitioned: %d inversions among %d events (want 0); drained=%v: %d pending, %d handed to the table, %d held",
				res.Inversions, res.Delivered, drained, left, handedLeft, heldLeft)
		}
		return
	}
	// Found by this scenario: thousands of inversions per run once
	// publishes failed (also with one relay and no SIGKILL; never on the
	// table source with the same relay and faults): the table workers'
	// ordered claim took rows the stream owned as followers.
	observed := fmt.Sprintf("%d inversions among %d events, with up to %d events parked behind a failure at once", res.Inversions, res.Delivered, maxHeld)
	if len(res.InversionExamples) > 0 {
		observed += "; e.g. " + res.InversionExamples[0]
	}
	regression(t, "WAL source, ordered mode: no event first delivered out of its aggregate's order when publishes fail", "e39b161",
		"0 inversions (first deliveries in each aggregate's commit order) across the stream and the table path", res.Inversions == 0, observed)
	// Found by this scenario: inversions, or events held forever, in
	// about half of the runs: a stream reopened after a SIGKILL parked
	// again the events the last one had handed to the table path, moving
	// them behind later events of their aggregate.
	regression(t, "WAL source, ordered mode: a stream reopened after a SIGKILL leaves the events handed to the table path in their place", "85297aa",
		"drained once the faults stop: nothing pending, nothing held", drained,
		fmt.Sprintf("drained=%v (waited up to %s after the faults stopped): %d pending, %d handed to the table, %d held", drained, drainWait, left, handedLeft, heldLeft))
}
