package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
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
		c, cancel := context.WithTimeout(ctx(t), 20*time.Second)
		err := pub.WaitFor(c, func(ms []outbox.Message) bool {
			for _, m := range ms {
				if m.ID == ids[0] {
					return true
				}
			}
			return false
		})
		cancel()
		if err != nil {
			t.Fatalf("event %d not relayed after Notify (poll interval 1h): %v", i, err)
		}
	}
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
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var pid int
		err := e.pool.QueryRow(ctx(t), `SELECT pid FROM pg_stat_activity
			WHERE query LIKE 'LISTEN %' AND query LIKE '%' || $1 || '%' AND NOT pid = ANY($2)
			ORDER BY backend_start DESC LIMIT 1`, e.schema, append([]int{0}, exclude...)).Scan(&pid)
		if err == nil {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("relay never LISTENed")
	return 0
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
