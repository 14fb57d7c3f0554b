package outbox_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testbroker"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// stamps records when each event was first published.
type stamps struct {
	mu sync.Mutex
	at map[uuid.UUID]time.Time
	by []uuid.UUID // publish order
}

// timed returns a memory publisher that stamps each publish.
func timed() (*memory.Publisher, *stamps) {
	s := &stamps{at: map[uuid.UUID]time.Time{}}
	mem := memory.New()
	mem.FailWith(func(m *outbox.Message) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if _, ok := s.at[m.ID]; !ok {
			s.at[m.ID] = time.Now()
			s.by = append(s.by, m.ID)
		}
		return nil
	})
	return mem, s
}

func (s *stamps) get(id uuid.UUID) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[id]
	return at, ok
}

func (s *stamps) order() []uuid.UUID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]uuid.UUID(nil), s.by...)
}

// waitFor waits until every id is published, or fails after d.
func (s *stamps) waitFor(t *testing.T, d time.Duration, ids ...uuid.UUID) {
	t.Helper()
	missing := 0
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d not published", missing, len(ids)) }), d, "the events published", func() bool {
		missing = 0
		for _, id := range ids {
			if _, ok := s.get(id); !ok {
				missing++
			}
		}
		return missing == 0
	})
}

// writeEvents commits evs in one transaction.
func (e *env) writeEvents(evs ...outbox.Event) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx(e.t), e.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = e.writer.Write(ctx(e.t), tx, evs...)
		return err
	})
	if err != nil {
		e.t.Fatalf("write: %v", err)
	}
	return ids
}

func scheduledAt(agg string, i int, at time.Time) outbox.Event {
	ev := event(agg, i)
	ev.DeliverAt = at
	return ev
}

// TestScheduledDeliverAtNeverEarlyThenWithinPoll: with a relay polling every
// 5ms, events scheduled by DeliverAt and by Delay are never published before
// their time, and are published within one poll interval (plus slack for a
// loaded machine) after it; an unscheduled event in the same write and a
// plain INSERT that names no deliver_at go out at once.
func TestScheduledDeliverAtNeverEarlyThenWithinPoll(t *testing.T) {
	e := setup(t)
	mem, st := timed()
	const poll = 5 * time.Millisecond
	r := e.relay(mem, outbox.RelayConfig{Workers: 2, PollInterval: poll})
	stop := e.run(r)
	defer stop()

	due := time.Now().Add(1500 * time.Millisecond)
	ids := e.writeEvents(scheduledAt("a", 1, due), event("b", 1))
	delayed := event("c", 1)
	delayed.Delay = 1500 * time.Millisecond
	wrote := time.Now()
	dids := e.writeEvents(delayed)
	var plain uuid.UUID
	if err := e.pool.QueryRow(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'd', 'order.created', '{}') RETURNING id`).Scan(&plain); err != nil {
		t.Fatal(err)
	}
	if n := e.count("deliver_at IS NOT NULL"); n != 2 {
		t.Fatalf("%d rows scheduled, want 2 (DeliverAt and Delay)", n)
	}

	st.waitFor(t, 2*time.Second, ids[1], plain)
	st.waitFor(t, 10*time.Second, ids[0], dids[0])
	at, _ := st.get(ids[0])
	if at.Before(due) {
		t.Errorf("DeliverAt event published %v before its time", due.Sub(at))
	}
	// The release runs every PollInterval and wakes a worker.
	const slack = 750 * time.Millisecond
	if late := at.Sub(due); late > poll+slack {
		t.Errorf("DeliverAt event published %v after its time, want within %v", late, poll+slack)
	}
	dat, _ := st.get(dids[0])
	if d := dat.Sub(wrote); d < 1500*time.Millisecond {
		t.Errorf("Delay 1.5s event published %v after its write", d)
	}
	// The mark commits just after the publish the stamps saw.
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d left unpublished", e.count("processed_at IS NULL")) }), 5*time.Second,
		"every event marked", func() bool { return e.count("processed_at IS NULL") == 0 })
}

// TestScheduledDueBelowFloorWithinPoll: a scheduled event that comes due
// after live events have moved the claim floor past it is claimed within a
// poll interval, not left for the rescan (RescanInterval 20s here).
func TestScheduledDueBelowFloorWithinPoll(t *testing.T) {
	e := setup(t)
	mem, st := timed()
	const poll = 50 * time.Millisecond
	r := e.relay(mem, outbox.RelayConfig{Workers: 1, PollInterval: poll, RescanInterval: 20 * time.Second})
	// The first claim is a rescan: let it pass before the scheduled write.
	stop := e.run(r)
	defer stop()
	first := e.writeEvents(event("warm", 0))
	st.waitFor(t, 5*time.Second, first...)

	due := time.Now().Add(6500 * time.Millisecond)
	sched := e.writeEvents(scheduledAt("s", 1, due))
	// Live events for longer than the floor's lag (RescanInterval/4): the
	// floor climbs past the scheduled row's seq.
	var live []uuid.UUID
	for i := 0; time.Now().Before(due.Add(-500 * time.Millisecond)); i++ {
		live = append(live, e.writeEvents(event(fmt.Sprintf("l-%d", i), i))...)
		time.Sleep(50 * time.Millisecond)
	}
	st.waitFor(t, 5*time.Second, live...)
	var seq int64
	if err := e.pool.QueryRow(ctx(t), `SELECT seq FROM outbox_events WHERE id = $1`, sched[0]).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if f := outbox.ClaimFloor(r); f <= seq {
		t.Fatalf("claim floor %d is not past the scheduled row (seq %d): the test proves nothing", f, seq)
	}
	st.waitFor(t, 15*time.Second, sched...)
	at, _ := st.get(sched[0])
	if at.Before(due) {
		t.Errorf("published %v early", due.Sub(at))
	}
	if late := at.Sub(due); late > poll+750*time.Millisecond {
		t.Errorf("published %v after its time, want within a poll interval (%v) plus slack", late, poll)
	}
}

// TestScheduledOrderedHoldsBackAggregate: in ordered mode a scheduled event
// holds back its aggregate's later events until it is published; other
// aggregates flow; then the aggregate goes out in order.
func TestScheduledOrderedHoldsBackAggregate(t *testing.T) {
	e := setup(t)
	mem, st := timed()
	r := e.relay(mem, outbox.RelayConfig{Workers: 2, PollInterval: 5 * time.Millisecond, Ordered: true})
	stop := e.run(r)
	defer stop()
	due := time.Now().Add(1500 * time.Millisecond)
	a1 := e.writeEvents(scheduledAt("a", 1, due))
	a23 := e.writeEvents(event("a", 2), event("a", 3))
	b := e.writeEvents(event("b", 1), event("b", 2))
	st.waitFor(t, 2*time.Second, b...)
	for _, id := range a23 {
		if at, ok := st.get(id); ok && at.Before(due) {
			t.Fatalf("a later event of the aggregate went out %v before the scheduled one was due", due.Sub(at))
		}
	}
	st.waitFor(t, 10*time.Second, append(a1, a23...)...)
	var got []uuid.UUID
	for _, id := range st.order() {
		if id == a1[0] || id == a23[0] || id == a23[1] {
			got = append(got, id)
		}
	}
	if want := append(a1, a23...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("aggregate published in order %v, want %v", got, want)
	}
	if at, _ := st.get(a1[0]); at.Before(due) {
		t.Errorf("scheduled event published %v early", due.Sub(at))
	}
}

// TestCancelScheduledEvent: Admin.Cancel removes a scheduled event before
// it is due (nothing is published), and in ordered mode its aggregate's
// later events go out at once instead of waiting for its time.
func TestCancelScheduledEvent(t *testing.T) {
	e := setup(t)
	mem, st := timed()
	r := e.relay(mem, outbox.RelayConfig{Workers: 1, PollInterval: 5 * time.Millisecond, Ordered: true})
	sig := outbox.Signals(r)
	sig.Init()
	stop := e.run(r)
	defer stop()
	sched := e.writeEvents(scheduledAt("a", 1, time.Now().Add(time.Hour)))
	later := e.writeEvents(event("a", 2))
	sig.Idle.Drain()
	sig.Idle.WaitN(t, 5, 10*time.Second) // claims that saw both events
	if _, ok := st.get(later[0]); ok {
		t.Fatal("the later event went out while the scheduled one was waiting")
	}
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Cancel(ctx(t), sched[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 1 || res.Cancelled[0] != sched[0] || len(res.Published) != 0 {
		t.Fatalf("Cancel = %+v, want the scheduled event cancelled", res)
	}
	st.waitFor(t, 3*time.Second, later...)
	if _, ok := st.get(sched[0]); ok {
		t.Error("the cancelled scheduled event was published")
	}
	if n := e.count("deliver_at IS NOT NULL"); n != 0 {
		t.Errorf("%d scheduled rows left after cancel", n)
	}
}

// TestScheduledGauges: the relay's gauges count scheduled events and give
// the next due time; pending and the oldest pending age leave them out.
func TestScheduledGauges(t *testing.T) {
	e := setup(t)
	due := time.Now().Add(time.Hour).Truncate(time.Second)
	e.writeEvents(scheduledAt("a", 1, due), scheduledAt("b", 1, due.Add(time.Hour)))
	reg := prometheus.NewRegistry()
	r := e.relay(memory.New(), outbox.RelayConfig{Workers: 1, StatsInterval: 20 * time.Millisecond, Registerer: reg})
	stop := e.run(r)
	defer stop()
	testkit.Eventually(testkit.WithDetail(t, func() string {
		return fmt.Sprintf("outbox_events_scheduled = %v", gauge(t, reg, "outbox_events_scheduled"))
	}), 5*time.Second, "outbox_events_scheduled 2", func() bool { return gauge(t, reg, "outbox_events_scheduled") == 2 })
	if g := gauge(t, reg, "outbox_scheduled_next_due_timestamp_seconds"); g != float64(due.Unix()) {
		t.Errorf("next due = %v, want %v", g, due.Unix())
	}
	if g := gauge(t, reg, "outbox_events_pending"); g != 0 {
		t.Errorf("outbox_events_pending = %v, want 0 (scheduled events are not pending)", g)
	}
}

// TestScheduledValidation: a negative Delay, both DeliverAt and Delay, or a
// DeliverAt past year 9999 is rejected before the database is touched.
func TestScheduledValidation(t *testing.T) {
	for name, ev := range map[string]outbox.Event{
		"negative delay": {Delay: -time.Second},
		"both":           {Delay: time.Second, DeliverAt: time.Now().Add(time.Hour)},
		"far":            {DeliverAt: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		base := event("a", 1)
		base.Delay, base.DeliverAt = ev.Delay, ev.DeliverAt
		var ve *outbox.ValidationError
		if err := base.Validate(); !errors.As(err, &ve) {
			t.Errorf("%s: Validate = %v, want a ValidationError", name, err)
		}
	}
}

// TestScheduledWriteOnOldTable: on a table without migration 6 unscheduled
// events are written as before, a scheduled one fails naming the column
// instead of being published at once, and the relay asks for the migration
// (it would otherwise publish scheduled rows at once).
func TestScheduledWriteOnOldTable(t *testing.T) {
	e := setup(t)
	if _, err := e.pool.Exec(ctx(t), `ALTER TABLE outbox_events DROP COLUMN deliver_at`); err != nil {
		t.Fatal(err)
	}
	e.writeEvents(event("a", 1))
	err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		_, err := e.writer.Write(ctx(t), tx, scheduledAt("a", 2, time.Now().Add(time.Hour)))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "deliver_at") {
		t.Errorf("scheduled write on a table without deliver_at: %v, want an error naming deliver_at", err)
	}
	if n := e.count("true"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
	r := e.relay(memory.New(), outbox.RelayConfig{})
	if err := r.CheckSchema(ctx(t)); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Errorf("relay on a table without deliver_at: CheckSchema = %v, want ErrNotMigrated", err)
	}
}

// TestScheduledEndToEnd: through a real NATS JetStream stream and a real
// Redis stream, an event scheduled 1.5s ahead reaches the broker after the
// unscheduled event written after it, and never before its time.
func TestScheduledEndToEnd(t *testing.T) {
	for name, broker := range map[string]func(*testing.T) testbroker.Broker{"nats": testbroker.NATS, "redis": testbroker.Redis} {
		t.Run(name, func(t *testing.T) {
			e := setup(t)
			b := broker(t)
			r := e.relay(b.Pub, outbox.RelayConfig{Workers: 1, PollInterval: 20 * time.Millisecond})
			stop := e.run(r)
			defer stop()
			due := time.Now().Add(1500 * time.Millisecond)
			sched := e.writeEvents(scheduledAt("a", 1, due))
			now := e.writeEvents(event("b", 1))
			testkit.Eventually(t, 10*time.Second, "both events marked", func() bool {
				if time.Now().Before(due.Add(-100*time.Millisecond)) && e.count("processed_at IS NOT NULL AND aggregate_id = 'a'") > 0 {
					t.Fatal("the scheduled event was published before its time")
				}
				return e.count("processed_at IS NULL") == 0
			})
			var processed time.Time
			if err := e.pool.QueryRow(ctx(t), `SELECT processed_at FROM outbox_events WHERE id = $1`, sched[0]).Scan(&processed); err != nil {
				t.Fatalf("scheduled event not published: %v", err)
			}
			if processed.Before(due) {
				t.Errorf("scheduled event marked published %v before its time", due.Sub(processed))
			}
			msgs := b.Read(t, 2)
			if len(msgs) != 2 || msgs[0].ID != now[0] || msgs[1].ID != sched[0] {
				t.Errorf("stream holds %+v, want the unscheduled event then the scheduled one", msgs)
			}
		})
	}
}

// TestStatusCountsScheduled: Admin.Status reports scheduled events and the
// earliest due time apart from the pending ones.
func TestStatusCountsScheduled(t *testing.T) {
	e := setup(t)
	first := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	e.writeEvents(scheduledAt("a", 1, first.Add(time.Hour)), scheduledAt("b", 1, first), event("c", 1))
	a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	st, err := a.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Scheduled != 2 || st.Pending != 1 {
		t.Errorf("scheduled %d, pending %d; want 2 and 1", st.Scheduled, st.Pending)
	}
	if st.NextDue == nil || !st.NextDue.Equal(first) {
		t.Errorf("next due %v, want %v", st.NextDue, first)
	}
}
