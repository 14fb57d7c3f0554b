package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// waitReady polls r.Ready until ok(err), or fails after d.
func waitReady(t *testing.T, r *outbox.Relay, d time.Duration, what string, ok func(error) bool) error {
	t.Helper()
	var err error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Ready = %v", err) }), d, what, func() bool {
		err = r.Ready(context.Background())
		return ok(err)
	})
	return err
}

// TestStuckDetector: events due and none delivered for StuckAfter make
// the relay stuck: Ready fails with ErrStuck naming the cause, and
// outbox_stuck is 1, until events move again. Causes: a destination that
// refuses every event, and claims that fail (the table locked by a long
// transaction).
func TestStuckDetector(t *testing.T) {
	t.Run("destination refuses everything", func(t *testing.T) {
		e := setup(t)
		mem, down := downPublisher()
		reg := prometheus.NewRegistry()
		r := e.relay(mem, outbox.RelayConfig{StuckAfter: time.Second, StatsInterval: 100 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, Registerer: reg,
			OutageBackoff: outbox.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
		e.run(r)
		e.write(3)
		err := waitReady(t, r, 15*time.Second, "stuck verdict", func(err error) bool { return errors.Is(err, outbox.ErrStuck) })
		if !strings.Contains(err.Error(), "destination refuses every event") || !strings.Contains(err.Error(), "broker down (test)") || !strings.Contains(err.Error(), "3 are due") {
			t.Errorf("Ready = %v, want the cause and the count", err)
		}
		if g := gauge(t, reg, "outbox_stuck"); g != 1 {
			t.Errorf("outbox_stuck = %v while stuck", g)
		}
		down.Store(false)
		if err := mem.WaitDistinct(ctx(t), 3); err != nil {
			t.Fatal(err)
		}
		waitReady(t, r, 15*time.Second, "recovery", func(err error) bool { return err == nil })
		if g := gauge(t, reg, "outbox_stuck"); g != 0 {
			t.Errorf("outbox_stuck = %v once events moved", g)
		}
	})
	t.Run("claims fail", func(t *testing.T) {
		e := setup(t)
		mem, _ := downPublisher()
		mem.FailWith(nil)
		e.write(2)
		// A transaction locks the table against claims (FOR UPDATE), not
		// against reads: every claim times out.
		tx, err := e.pool.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		if _, err := tx.Exec(ctx(t), `LOCK TABLE outbox_events IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		r := e.relay(mem, outbox.RelayConfig{StuckAfter: time.Second, StatsInterval: 100 * time.Millisecond,
			PollInterval: 20 * time.Millisecond, StatementTimeout: 300 * time.Millisecond,
			OutageBackoff: outbox.Backoff{Base: 50 * time.Millisecond, Max: 200 * time.Millisecond}})
		e.run(r)
		err = waitReady(t, r, 15*time.Second, "stuck verdict", func(err error) bool { return errors.Is(err, outbox.ErrStuck) })
		if !strings.Contains(err.Error(), "batches fail") {
			t.Errorf("Ready = %v, want it to name the failing batches", err)
		}
		if err := tx.Rollback(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := mem.WaitDistinct(ctx(t), 2); err != nil {
			t.Fatal(err)
		}
		waitReady(t, r, 15*time.Second, "recovery", func(err error) bool { return err == nil })
	})
}

// TestStatusWaiting: Status reports events due for longer than
// admin.Config.StuckAfter, with what the database shows can hold the
// relays: here a transaction holding the xmin horizon.
func TestStatusWaiting(t *testing.T) {
	e := setup(t)
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema, StuckAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(ctx(t))
	if err != nil || st.Waiting != nil {
		t.Fatalf("Status of an empty outbox: waiting %+v, %v", st.Waiting, err)
	}
	e.write(2)
	tx, err := e.pool.BeginTx(ctx(t), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx(t), `SELECT count(*) FROM outbox_events`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	st, err = a.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	w := st.Waiting
	if w == nil || w.Due != 2 || w.OldestDueAge < 300*time.Millisecond {
		t.Fatalf("Waiting = %+v, want 2 due for at least 300ms", w)
	}
	if len(w.Causes) == 0 || !strings.Contains(w.Causes[0], "holds the xmin horizon") {
		t.Errorf("causes %q, want the transaction holding the xmin horizon", w.Causes)
	}
}
