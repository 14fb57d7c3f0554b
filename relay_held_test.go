package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestOrderedFailureParksSuccessors: in ordered mode a failing event parks
// the later events of its aggregate (held, not dead letters, out of the
// claim's way); events that arrive later are parked by the housekeeping;
// once the failing event is published, they all go out, in order.
func TestOrderedFailureParksSuccessors(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 5)
	e.writeAgg("Y", 1, 1)
	var failing atomic.Bool
	failing.Store(true)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == xs[0] && failing.Load() {
			return errors.New("nack")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, StatsInterval: 10 * time.Millisecond,
		RetryBackoff: outbox.Backoff{Base: time.Hour, Max: time.Hour}})
	res, err := r.ProcessBatch(ctx(t))
	if err != nil || res.Published != 1 || res.Retried != 1 {
		t.Fatalf("batch = %+v, %v; want Y1 published, X1 retried", res, err)
	}
	if n := e.count(fmt.Sprintf("held_by = '%s' AND dead_at IS NOT NULL", xs[0])); n != 4 {
		t.Fatalf("%d events held behind X1, want X2..X5", n)
	}
	st, err := e.admin().Status(ctx(t))
	if err != nil || st.Held != 4 || st.DeadLetters != 0 || st.Pending != 1 {
		t.Fatalf("status = %+v, %v; want 4 held, 0 dead letters, 1 pending (X1)", st, err)
	}
	if dl, err := e.admin().DeadLetters(ctx(t), admin.DeadLetterFilter{}); err != nil || len(dl) != 0 {
		t.Fatalf("dead letters = %v, %v; held events are not dead letters", dl, err)
	}

	late := e.writeAgg("X", 6, 1) // arrives behind the failing X1
	e.run(r)
	testkit.Eventually(t, 10*time.Second, "the late X6 parked behind X1", func() bool {
		return e.count(fmt.Sprintf("id = '%s' AND held_by = '%s'", late[0], xs[0])) == 1
	})

	failing.Store(false)
	if _, err := e.admin().Retry(ctx(t), admin.RetrySelector{IDs: xs[:1]}); err != nil {
		t.Fatal(err)
	}
	if err := pub.WaitDistinct(ctx(t), 7); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range pub.Messages() {
		if m.AggregateID == "X" {
			order = append(order, aggIDs([]outbox.Message{m})...)
		}
	}
	if fmt.Sprint(order) != "[X1 X2 X3 X4 X5 X6]" {
		t.Errorf("X published as %v, want X1..X6 in order", order)
	}
	if n := e.count("held_by IS NOT NULL OR dead_at IS NOT NULL"); n != 0 {
		t.Errorf("%d rows still held or dead", n)
	}
}

// TestOrderedRunsFewAggregates: with few aggregates holding the backlog, a
// batch carries a run of each (not one event per aggregate), and each
// aggregate's events still go out in order.
func TestOrderedRunsFewAggregates(t *testing.T) {
	e := setup(t)
	for i := range 40 {
		for _, agg := range []string{"A", "B", "C"} {
			e.writeAgg(agg, i, 1)
		}
	}
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, BatchSize: 60})
	res, err := r.ProcessBatch(ctx(t))
	if err != nil || res.Published != 60 {
		t.Fatalf("first batch = %+v, %v; want 60 events (runs of 20 for each of 3 aggregates)", res, err)
	}
	for res.Claimed > 0 {
		if res, err = r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	next := map[string]int{}
	for _, s := range aggIDs(pub.Messages()) {
		agg, n := s[:1], 0
		fmt.Sscan(s[1:], &n)
		if n != next[agg] {
			t.Fatalf("%s published when %s%d was next", s, agg, next[agg])
		}
		next[agg]++
	}
	if pub.Len() != 120 {
		t.Errorf("published %d, want 120", pub.Len())
	}
}

// TestHeldEventsReleasedWhenHolderGone: an operator deletes a dead letter
// by hand; the events it held are released by the housekeeping and
// published. A relay that is not ordered releases every held event.
func TestHeldEventsReleasedWhenHolderGone(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			xs := e.writeAgg("X", 1, 3)
			pub := memory.New()
			pub.FailWith(func(m *outbox.Message) error {
				if m.ID == xs[0] {
					return outbox.Permanent(errors.New("poison"))
				}
				return nil
			})
			parker := e.relay(pub, outbox.RelayConfig{Ordered: true})
			if res, err := parker.ProcessBatch(ctx(t)); err != nil || res.DeadLettered != 1 {
				t.Fatalf("batch = %+v, %v", res, err)
			}
			if n := e.count("held_by IS NOT NULL"); n != 2 {
				t.Fatalf("%d held, want 2", n)
			}
			if ordered {
				if _, err := e.pool.Exec(ctx(t), "DELETE FROM outbox_events WHERE id = $1", xs[0]); err != nil {
					t.Fatal(err)
				}
			}
			e.run(e.relay(pub, outbox.RelayConfig{Ordered: ordered, StatsInterval: 10 * time.Millisecond}))
			if err := pub.WaitDistinct(ctx(t), 2); err != nil {
				t.Fatalf("held events never published: %v", err)
			}
		})
	}
}

// TestHeldEventsReleasedOnlyForGoneHolder: three aggregates each parked
// behind a dead letter; the operator deletes one of the three. The
// housekeeping walks the holders and releases only that one's events: the
// other two aggregates stay held behind their dead letters.
func TestHeldEventsReleasedOnlyForGoneHolder(t *testing.T) {
	e := setup(t)
	heads := map[uuid.UUID]bool{}
	var ys []uuid.UUID
	for _, agg := range []string{"X", "Y", "Z"} {
		ids := e.writeAgg(agg, 1, 3)
		heads[ids[0]] = true
		if agg == "Y" {
			ys = ids
		}
	}
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if heads[m.ID] {
			return outbox.Permanent(errors.New("poison"))
		}
		return nil
	})
	parker := e.relay(pub, outbox.RelayConfig{Ordered: true})
	if res, err := parker.ProcessBatch(ctx(t)); err != nil || res.DeadLettered != 3 {
		t.Fatalf("batch = %+v, %v", res, err)
	}
	if n := e.count("held_by IS NOT NULL"); n != 6 {
		t.Fatalf("%d held, want 6", n)
	}
	if _, err := e.pool.Exec(ctx(t), "DELETE FROM outbox_events WHERE id = $1", ys[0]); err != nil {
		t.Fatal(err)
	}
	e.run(e.relay(pub, outbox.RelayConfig{Ordered: true, StatsInterval: 10 * time.Millisecond}))
	if err := pub.WaitDistinct(ctx(t), 2); err != nil {
		t.Fatalf("Y's held events never published: %v", err)
	}
	for _, m := range pub.Messages() {
		if m.ID != ys[1] && m.ID != ys[2] {
			t.Errorf("published %s (%s/%s): only Y's held events may be", m.ID, m.AggregateType, m.AggregateID)
		}
	}
	if n := e.count("held_by IS NOT NULL AND processed_at IS NULL"); n != 4 {
		t.Errorf("%d events still held, want 4 (X's and Z's, behind their dead letters)", n)
	}
}

// lockRows holds FOR UPDATE locks on ids in a transaction of its own, as
// another relay's claim in flight would, until the test ends or release is
// called.
func (e *env) lockRows(ids ...uuid.UUID) (release func()) {
	e.t.Helper()
	tx, err := e.pool.Begin(ctx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx(e.t), `SELECT 1 FROM outbox_events WHERE id = ANY($1) FOR UPDATE`, ids); err != nil {
		e.t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(context.Background()) }
	e.t.Cleanup(release)
	return release
}

// TestOrderedRunStopsAtRowHeldElsewhere: another relay holds X2 locked (a
// dense claim keeps the rows it locked that were not heads). A claim that
// takes X1 as a head cuts X's run before X2 instead of waiting for that
// lock (claims never wait for each other, so they cannot deadlock), and X2
// and X3 follow, in order, once the lock is gone.
func TestOrderedRunStopsAtRowHeldElsewhere(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 3)
	e.writeAgg("Y", 1, 1)
	release := e.lockRows(xs[1])
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, BatchSize: 10})
	c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
	defer cancel()
	res, err := r.ProcessBatch(c)
	if err != nil || res.Published != 2 {
		t.Fatalf("batch with X2 locked elsewhere = %+v, %v; want X1 and Y1 at once", res, err)
	}
	release()
	for res.Claimed > 0 {
		if res, err = r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(aggIDs(pub.Messages())); got != "[X1 Y1 X2 X3]" {
		t.Errorf("published %s, want [X1 Y1 X2 X3]", got)
	}
}

// TestOrderedDenseClaimSaysMoreIsWaiting: the dense ordered claim locks a
// batch of rows and keeps the heads among them. When most of them are not
// heads (their aggregate's earlier event is in flight elsewhere) the batch
// is small, yet more rows are waiting: the relay must claim again at once,
// not sleep for its poll interval.
func TestOrderedDenseClaimSaysMoreIsWaiting(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 3)
	e.writeAgg("Y", 1, 1)
	e.lockRows(xs[0]) // X1 in flight in another relay
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, BatchSize: 3})
	res, full, err := outbox.ProcessBatchFull(r, ctx(t))
	if err != nil || res.Published != 1 {
		t.Fatalf("batch = %+v, %v; want Y1 alone (X2 and X3 wait behind X1)", res, err)
	}
	if !full {
		t.Error("the claim locked a whole batch (X2, X3, Y1) but the batch was not reported full")
	}
	if got := fmt.Sprint(aggIDs(pub.Messages())); got != "[Y1]" {
		t.Errorf("published %s, want [Y1]", got)
	}
}

// TestOrderedParkingDoesNotWait: X1 fails while another relay holds X2
// locked. The mark parks X3 at once and leaves X2 to the housekeeping,
// instead of waiting for the other relay's batch (two relays parking each
// other's rows would deadlock); once the lock is gone X2 is parked too.
func TestOrderedParkingDoesNotWait(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 3)
	release := e.lockRows(xs[1])
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == xs[0] {
			return errors.New("nack")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, StatsInterval: 10 * time.Millisecond,
		RetryBackoff: outbox.Backoff{Base: time.Hour, Max: time.Hour}})
	// A mark that waited for the lock would wait for the other relay's
	// batch to end: here, for this timer.
	const waited = 3 * time.Second
	timer := time.AfterFunc(waited, release)
	defer timer.Stop()
	start := time.Now()
	if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Retried != 1 {
		t.Fatalf("batch = %+v, %v; want X1 retried", res, err)
	}
	if took := time.Since(start); took >= waited {
		t.Fatalf("the batch took %s: its mark waited for the lock another relay held on X2", took)
	}
	held := func(id uuid.UUID) bool {
		return e.count(fmt.Sprintf("id = '%s' AND held_by = '%s' AND dead_at IS NOT NULL", id, xs[0])) == 1
	}
	if held(xs[1]) || !held(xs[2]) {
		t.Fatalf("after the mark: X2 held %v (locked elsewhere: want false), X3 held %v (want true)", held(xs[1]), held(xs[2]))
	}
	release()
	e.run(r)
	testkit.Eventually(t, 10*time.Second, "X2 parked behind X1 once its lock was released", func() bool { return held(xs[1]) })
}

// TestOrderedHotFailingAggregateDoesNotStallOthers: X1 waits for its retry
// and more than a batch of X's later events arrived after it failed (not
// parked yet: the housekeeping has not run), ahead of Y's events. The
// claims must look past X's run and publish Y, not come back empty until
// the housekeeping parks X's events.
func TestOrderedHotFailingAggregateDoesNotStallOthers(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 1)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == xs[0] {
			return errors.New("nack")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, BatchSize: 10, StatsInterval: time.Hour,
		RetryBackoff: outbox.Backoff{Base: time.Hour, Max: time.Hour}})
	if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Retried != 1 {
		t.Fatalf("batch = %+v, %v; want X1 retried", res, err)
	}
	e.writeAgg("X", 2, 30)
	e.writeAgg("Y", 1, 3)
	for range 5 {
		if _, err := r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(aggIDs(pub.Messages())); got != "[Y1 Y2 Y3]" {
		t.Errorf("published %s after 5 batches, want [Y1 Y2 Y3] (X waits behind X1)", got)
	}
}
