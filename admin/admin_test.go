package admin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// deadLetter makes the given rows dead letters through the relay itself.
func (e *env) deadLetter(ids ...uuid.UUID) {
	e.T.Helper()
	bad := map[uuid.UUID]bool{}
	for _, id := range ids {
		bad[id] = true
	}
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if bad[m.ID] {
			return outbox.Permanent(errors.New("rejected by broker"))
		}
		return nil
	})
	if _, err := e.Relay(pub, outbox.RelayConfig{BatchSize: 1000}).ProcessBatch(ctx(e.T)); err != nil {
		e.T.Fatal(err)
	}
}

func TestAdminStatusDeadLettersRetry(t *testing.T) {
	e := setup(t)
	ids := e.WriteBatch(6)
	e.deadLetter(ids[0], ids[1])
	// Two new pending events of another type.
	e.WriteTyped("order.paid", 2)

	a := e.Admin()
	st, err := a.Status(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 || st.DeadLetters != 2 || st.PublishedLastMinute != 4 || st.PublishedLastHour != 4 {
		t.Errorf("status = %+v", st)
	}
	if st.OldestPendingAge <= 0 || st.OldestPendingAge > time.Minute {
		t.Errorf("oldest pending age = %s", st.OldestPendingAge)
	}
	if len(st.ByType) != 2 || st.ByType[0].EventType != "order.created" || st.ByType[0].DeadLetters != 2 ||
		st.ByType[1].EventType != "order.paid" || st.ByType[1].Pending != 2 {
		t.Errorf("by type = %+v", st.ByType)
	}

	dls, err := a.DeadLetters(ctx(t), admin.DeadLetterFilter{EventType: "order.created"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 || dls[0].ID != ids[0] || dls[1].ID != ids[1] || dls[0].LastError != "rejected by broker" || dls[0].DeadAt == nil {
		t.Errorf("dead letters = %+v", dls)
	}
	if dls, _ := a.DeadLetters(ctx(t), admin.DeadLetterFilter{EventType: "order.paid"}); len(dls) != 0 {
		t.Errorf("type filter leaked %d rows", len(dls))
	}
	if dls, _ := a.DeadLetters(ctx(t), admin.DeadLetterFilter{OlderThan: time.Hour}); len(dls) != 0 {
		t.Errorf("age filter: %d dead letters older than an hour", len(dls))
	}

	if n, err := a.Retry(ctx(t), admin.RetrySelector{All: true, DryRun: true}); err != nil || n != 2 {
		t.Errorf("dry run = %d, %v; want 2", n, err)
	}
	if n := e.Count("dead_at IS NOT NULL"); n != 2 {
		t.Fatalf("dry run changed rows: %d dead letters left", n)
	}
	if n, err := a.Retry(ctx(t), admin.RetrySelector{IDs: []uuid.UUID{ids[0]}}); err != nil || n != 1 {
		t.Errorf("retry by id = %d, %v", n, err)
	}
	if n, err := a.Retry(ctx(t), admin.RetrySelector{EventType: "order.created"}); err != nil || n != 1 {
		t.Errorf("retry by type = %d, %v; want the one remaining dead letter", n, err)
	}
	if _, err := a.Retry(ctx(t), admin.RetrySelector{}); err == nil {
		t.Error("empty selector accepted")
	}
	// The re-queued rows are published by the next batch.
	pub := memory.New()
	res, err := e.Relay(pub, outbox.RelayConfig{}).ProcessBatch(ctx(t))
	if err != nil || res.Published != 4 {
		t.Errorf("after retry, batch = %+v, %v; want 2 retried + 2 pending published", res, err)
	}
}

func TestAdminCleanupInBatches(t *testing.T) {
	e := setup(t)
	e.WriteBatch(25)
	if _, err := e.Relay(memory.New(), outbox.RelayConfig{BatchSize: 100}).ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	e.WriteBatch(3) // pending rows are never deleted
	a := e.Admin()
	if n, err := a.Cleanup(ctx(t), time.Hour, 10, nil); err != nil || n != 0 {
		t.Fatalf("cleanup with 1h retention deleted %d, %v; want 0", n, err)
	}
	var progress []int64
	n, err := a.Cleanup(ctx(t), 0, 10, func(d int64) { progress = append(progress, d) })
	if err != nil || n != 25 {
		t.Fatalf("cleanup = %d, %v; want 25", n, err)
	}
	if len(progress) != 3 || progress[0] != 10 || progress[2] != 25 {
		t.Errorf("progress = %v, want batches of at most 10", progress)
	}
	if got := e.Count("true"); got != 3 {
		t.Errorf("%d rows left, want the 3 pending", got)
	}
}

func TestAdminOnMissingTable(t *testing.T) {
	e := setup(t)
	a, err := admin.New(e.Pool, admin.Config{Schema: e.Schema, Table: "nope"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Status(ctx(t)); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Errorf("status on a missing table = %v, want ErrNotMigrated", err)
	}
}

func TestMetrics(t *testing.T) {
	e := setup(t)
	e.deadLetter(e.WriteBatch(1)...)
	ids := e.WriteBatch(4)
	reg := prometheus.NewRegistry()
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == ids[0] {
			return errors.New("transient")
		}
		return nil
	})
	r := e.Relay(pub, outbox.RelayConfig{Registerer: reg, StatsInterval: 10 * time.Millisecond})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, reg, "outbox_events_published_total"); v != 3 {
		t.Errorf("outbox_events_published_total = %v, want 3", v)
	}
	mfs, _ := reg.Gather()
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		if mf.GetName() == "outbox_events_failed_total" {
			m := mf.GetMetric()[0]
			if m.GetLabel()[0].GetValue() != "order.created" || m.GetCounter().GetValue() != 1 {
				t.Errorf("outbox_events_failed_total = %v", m)
			}
		}
		if mf.GetName() == "outbox_publish_lag_seconds" && mf.GetMetric()[0].GetHistogram().GetSampleCount() != 3 {
			t.Errorf("lag histogram has %d samples, want 3", mf.GetMetric()[0].GetHistogram().GetSampleCount())
		}
	}
	for _, name := range []string{"outbox_events_published_total", "outbox_events_failed_total",
		"outbox_events_pending", "outbox_batch_duration_seconds", "outbox_dead_letters", "outbox_publish_lag_seconds"} {
		if !found[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	// The gauges come from the table, refreshed by Run.
	stop := e.Run(r)
	testkit.Eventually(t, 10*time.Second, "the dead-letter and pending gauges at 1", func() bool {
		return gauge(t, reg, "outbox_dead_letters") == 1 && gauge(t, reg, "outbox_events_pending") == 1
	})
	stop()
	if v := gauge(t, reg, "outbox_dead_letters"); v != 1 {
		t.Errorf("outbox_dead_letters = %v, want 1", v)
	}
	if v := gauge(t, reg, "outbox_events_pending"); v != 1 {
		t.Errorf("outbox_events_pending = %v, want 1 (the event waiting for its retry)", v)
	}
}
