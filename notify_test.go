package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestListenWakesRelay: with polling effectively off (1h), a Notifier's
// wake-up is the only way the event can be relayed within the test.
func TestListenWakesRelay(t *testing.T) {
	e := setup(t)
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{Listen: true, PollInterval: time.Hour, Workers: 1})
	e.run(r)
	n, err := outbox.NewNotifier(e.pool, outbox.NotifierConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)

	// The relay drains once at start (listener connected); wait for that idle point.
	waitListening(t, e)
	for i := range 3 {
		ids := e.write(1)
		n.Notify()
		if err := waitRelayed(t, pub, ids[0], 20*time.Second); err != nil {
			t.Fatalf("event %d not relayed after Notify (poll interval 1h): %v", i, err)
		}
	}
}

// waitRelayed waits up to d for pub to receive the event id.
func waitRelayed(t *testing.T, pub *memory.Publisher, id uuid.UUID, d time.Duration) error {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), d)
	defer cancel()
	return pub.WaitFor(c, func(ms []outbox.Message) bool {
		for _, m := range ms {
			if m.ID == id {
				return true
			}
		}
		return false
	})
}

// TestListenerReconnects kills the relay's LISTEN session: the relay must
// reconnect by itself and keep reacting to notifications.
func TestListenerReconnects(t *testing.T) {
	e := setup(t)
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{Listen: true, PollInterval: time.Hour, Workers: 1,
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	e.run(r)
	n, err := outbox.NewNotifier(e.pool, outbox.NotifierConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	pid := waitListening(t, e)
	if _, err := e.pool.Exec(ctx(t), `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	newPID := waitListening(t, e, pid)
	if newPID == pid {
		t.Fatal("listener backend unchanged after termination")
	}
	ids := e.write(1)
	n.Notify()
	if err := pub.WaitDistinct(ctx(t), 1); err != nil || pub.Messages()[0].ID != ids[0] {
		t.Fatalf("event not relayed after the listener reconnected: %v", err)
	}
}

// waitListening waits until a backend LISTENs on this test's channel and
// returns its pid.
func waitListening(t *testing.T, e *env, exclude ...int) int {
	t.Helper()
	var pid int
	testkit.Eventually(t, 20*time.Second, "the relay LISTENing", func() bool {
		return e.pool.QueryRow(ctx(t), `SELECT pid FROM pg_stat_activity
			WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND NOT pid = ANY($2)
			ORDER BY backend_start DESC LIMIT 1`, e.schema, append([]int{0}, exclude...)).Scan(&pid) == nil
	})
	return pid
}

// TestNotifierDebounces: a burst of Notify calls sends one notification at
// once and one trailing notification, not one per call.
func TestNotifierDebounces(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("notify")
	pool := testdb.Pool(t, "")
	const interval = 50 * time.Millisecond
	n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: schema, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	if _, err := conn.Exec(ctx(t), `LISTEN "pgoutbox_`+schema+`.outbox_events"`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 1000 {
		n.Notify()
	}
	burst := time.Since(start)
	n.Close()
	got := 0
	for {
		c, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
		_, err := conn.WaitForNotification(c)
		cancel()
		if err != nil {
			break
		}
		got++
	}
	maxWant := 2 + int(burst/interval)
	if got < 2 || got > maxWant {
		t.Errorf("1000 Notify calls in %s sent %d notifications, want a leading and a trailing one, at most %d", burst, got, maxWant)
	}
	if _, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Interval: -1}); err == nil {
		t.Error("negative interval accepted")
	}
}

// TestNotifierSpacesOutUnderHeavyStream: while Notify is called faster than
// SlowAbove a second, notifications are spaced out towards MaxInterval; a
// light stream keeps the short Interval.
func TestNotifierSpacesOutUnderHeavyStream(t *testing.T) {
	t.Parallel()
	schema := testdb.NewSchemaName("notify")
	pool := testdb.Pool(t, "")
	conn, err := pgx.Connect(ctx(t), testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx(t))
	if _, err := conn.Exec(ctx(t), `LISTEN "pgoutbox_`+schema+`.outbox_events"`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		got := 0
		for {
			c, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
			_, err := conn.WaitForNotification(c)
			cancel()
			if err != nil {
				return got
			}
			got++
		}
	}
	cfg := outbox.NotifierConfig{Schema: schema, Interval: 5 * time.Millisecond, MaxInterval: 50 * time.Millisecond, SlowAbove: 100}

	// Heavy: Notify in a tight loop (far above 200 calls a second) for
	// 600ms. At a fixed 5ms spacing that is 120 notifications; spaced out
	// to 50ms, about 12 plus the first 100ms at 5ms.
	n, err := outbox.NewNotifier(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 600*time.Millisecond; {
		n.Notify()
		time.Sleep(50 * time.Microsecond)
	}
	n.Close()
	if got := count(); got > 60 {
		t.Errorf("heavy stream: %d notifications in 600ms, want them spaced out (at most 60)", got)
	}

	// Light: 40 calls 15ms apart (about 66 a second, below SlowAbove): each
	// gets its own notification.
	n, err = outbox.NewNotifier(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		n.Notify()
		time.Sleep(15 * time.Millisecond)
	}
	n.Close()
	if got := count(); got < 36 {
		t.Errorf("light stream: %d notifications for 40 calls 15ms apart, want about one each", got)
	}
	if _, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Interval: 10 * time.Millisecond, MaxInterval: time.Millisecond}); err == nil {
		t.Error("MaxInterval shorter than Interval accepted")
	}
}

// batchCounter confirms every event at once and counts the batches it was
// handed: one per claim that found events.
type batchCounter struct {
	mu      sync.Mutex
	batches int
	seen    map[uuid.UUID]bool
}

func (b *batchCounter) Publish(context.Context, *outbox.Message) error {
	panic("batchCounter: the relay publishes in batches")
}

func (b *batchCounter) PublishBatch(_ context.Context, msgs []*outbox.Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches++
	for _, m := range msgs {
		b.seen[m.ID] = true
	}
	return nil
}

func (b *batchCounter) state() (batches, distinct int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.batches, len(b.seen)
}

// waitAll waits until every id was published; it fails the test with what
// is missing after d.
func (b *batchCounter) waitAll(t *testing.T, ids []uuid.UUID, d time.Duration, what string) {
	t.Helper()
	missing := 0
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d events not published", missing, len(ids)) }), d, what+": every event published", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		missing = 0
		for _, id := range ids {
			if !b.seen[id] {
				missing++
			}
		}
		return missing == 0
	})
}

// streamEvents writes n events, each in its own transaction followed by
// after(), gap apart, and returns their ids.
func streamEvents(t *testing.T, e *env, n int, gap time.Duration, after func()) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for i := range n {
		err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
			got, err := e.writer.Write(ctx(t), tx, event(fmt.Sprintf("s-%d", i), i))
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		if after != nil {
			after()
		}
		time.Sleep(gap)
	}
	return ids
}

// TestPollingRelayClaimsAtItsPollUnderHeavyStream: claim pacing applies to
// wake-ups only. A relay that is never woken claims when its poll comes due,
// however heavy the stream: pacing once made it claim every BatchDelay
// instead, a claim (a transaction with row locks and marks) per few events,
// which cost the writers as much as a claim per wake-up.
func TestPollingRelayClaimsAtItsPollUnderHeavyStream(t *testing.T) {
	e := setup(t)
	pub := &batchCounter{seen: map[uuid.UUID]bool{}}
	// BatchDelayAbove 1: any stream counts as heavy.
	r := e.relay(pub, outbox.RelayConfig{PollInterval: 200 * time.Millisecond, Workers: 2,
		BatchDelay: 10 * time.Millisecond, BatchDelayAbove: 1})
	e.run(r)
	start := time.Now()
	ids := streamEvents(t, e, 600, 2*time.Millisecond, nil)
	took := time.Since(start)
	pub.waitAll(t, ids, 10*time.Second, "polling relay")
	batches, _ := pub.state()
	// One claim per poll, whatever the workers, plus the claims at start
	// and the last ones.
	if limit := int(took/(200*time.Millisecond)) + 6; batches > limit {
		t.Errorf("%d events over %s took %d batches, want at most %d (one per 200ms poll)", len(ids), took.Round(time.Millisecond), batches, limit)
	}
}

// TestNotifierLeavesSessionsSynchronous: a notification's transaction
// commits without waiting for a WAL flush, and that setting stays in it:
// the application's next transaction on the same pooled session commits
// synchronously, as the outbox's guarantee needs.
func TestNotifierLeavesSessionsSynchronous(t *testing.T) {
	e := setup(t)
	pool := e.extraPool(nil, nil)
	n, err := outbox.NewNotifier(pool, outbox.NotifierConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		n.Notify()
		time.Sleep(5 * time.Millisecond)
	}
	n.Close()
	for range 4 { // every session the pool opened
		var sc string
		if err := pool.QueryRow(ctx(t), "SHOW synchronous_commit").Scan(&sc); err != nil {
			t.Fatal(err)
		}
		if sc != "on" {
			t.Fatalf("a session the Notifier used has synchronous_commit %q, want on", sc)
		}
	}
}

// TestPacedWakeUpsLoseNone: under a heavy stream the relay coalesces
// wake-ups into one claim per BatchDelay; an event committed at any moment
// (while a claim is in flight, right after one came back short, while a
// worker waits out the pace) is still published by a wake-up, never left
// for the poll (1h here). Both wake-up paths: LISTEN with a Notifier, and
// Relay.Wake in process.
func TestPacedWakeUpsLoseNone(t *testing.T) {
	for _, path := range []string{"notifier", "wake"} {
		t.Run(path, func(t *testing.T) {
			e := setup(t)
			pub := &batchCounter{seen: map[uuid.UUID]bool{}}
			cfg := outbox.RelayConfig{PollInterval: time.Hour, Workers: 2,
				BatchDelay: 20 * time.Millisecond, BatchDelayAbove: 1, Listen: path == "notifier"}
			r := e.relay(pub, cfg)
			e.run(r)
			after := r.Wake
			if path == "notifier" {
				waitListening(t, e)
				n, err := outbox.NewNotifier(e.pool, outbox.NotifierConfig{Schema: e.schema})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(n.Close)
				after = n.Notify
			}
			// A stream (paced claims), then single events after pauses of
			// varied length: each lands at a different point of the
			// relay's claim cycle.
			ids := streamEvents(t, e, 300, time.Millisecond, after)
			pub.waitAll(t, ids, 10*time.Second, "stream")
			for i, pause := range []time.Duration{0, 1, 3, 7, 15, 25, 40, 0, 2, 19} {
				time.Sleep(pause * time.Millisecond)
				one := streamEvents(t, e, 1, 0, after)
				pub.waitAll(t, one, 5*time.Second, fmt.Sprintf("single event %d after %dms", i, pause))
			}
			if batches, distinct := pub.state(); batches >= distinct {
				t.Errorf("%d batches for %d events: wake-ups were not coalesced", batches, distinct)
			}
		})
	}
}
