package outbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// deadLetterWith makes the given rows dead letters whose last_error is
// errFor(id), through the relay itself.
func (e *env) deadLetterWith(errFor func(i int) string, ids ...uuid.UUID) {
	e.t.Helper()
	bad := map[uuid.UUID]int{}
	for i, id := range ids {
		bad[id] = i
	}
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if i, ok := bad[m.ID]; ok {
			return outbox.Permanent(errors.New(errFor(i)))
		}
		return nil
	})
	if _, err := e.relay(pub, outbox.RelayConfig{BatchSize: 1000}).ProcessBatch(ctx(e.t)); err != nil {
		e.t.Fatal(err)
	}
}

func TestAdminDeadLetterGroupsRetryAndDiscard(t *testing.T) {
	e := setup(t)
	ids := e.writeBatch(6)
	// Four errors that differ only by numbers and ids make one group; two
	// others make a second.
	e.deadLetterWith(func(i int) string {
		if i < 4 {
			return fmt.Sprintf("offset %d of %s out of range", 10+i, uuid.New())
		}
		return "schema registry: subject not found"
	}, ids...)
	a := e.admin()

	groups, err := a.DeadLetterGroups(ctx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 2 || groups[0].Count != 4 || groups[0].Error != "offset <n> of <id> out of range" ||
		groups[0].EventType != "order.created" || groups[0].SampleID != ids[0] ||
		groups[1].Count != 2 || groups[1].Error != "schema registry: subject not found" {
		t.Fatalf("groups = %+v", groups)
	}
	if groups[0].FirstSeen.IsZero() || groups[0].LastSeen.Before(groups[0].FirstSeen) {
		t.Errorf("first/last seen = %v / %v", groups[0].FirstSeen, groups[0].LastSeen)
	}
	if byErr, err := a.DeadLetterGroups(ctx(t), true); err != nil || len(byErr) != 2 || byErr[0].EventType != "" {
		t.Errorf("groups by error alone = %+v, %v", byErr, err)
	}

	// A group is acted on as shown.
	sel := outbox.RetrySelector{EventType: "order.created", ErrorGroup: groups[1].Error}
	if n, err := a.Retry(ctx(t), outbox.RetrySelector{ErrorGroup: groups[1].Error, OlderThan: time.Hour}); err != nil || n != 0 {
		t.Errorf("retry of a group younger than the age filter = %d, %v; want 0", n, err)
	}
	if n, err := a.Retry(ctx(t), sel); err != nil || n != 2 {
		t.Errorf("retry group = %d, %v; want 2", n, err)
	}
	dsel := outbox.DiscardSelector{ErrorGroup: groups[0].Error, DryRun: true}
	if res, err := a.Discard(ctx(t), dsel); err != nil || res.Discarded != 4 {
		t.Errorf("discard dry run = %+v, %v; want 4", res, err)
	}
	if n := e.count("dead_at IS NOT NULL"); n != 4 {
		t.Fatalf("dry run changed rows: %d dead letters", n)
	}
	// By id: a pending (re-queued) event is not a dead letter and stays.
	res, err := a.Discard(ctx(t), outbox.DiscardSelector{IDs: []uuid.UUID{ids[0], ids[4]}})
	if err != nil || res.Discarded != 1 {
		t.Errorf("discard by id = %+v, %v; want 1 (ids[4] was re-queued)", res, err)
	}
	dsel.DryRun = false
	if res, err := a.Discard(ctx(t), dsel); err != nil || res.Discarded != 3 {
		t.Errorf("discard group = %+v, %v; want the 3 left", res, err)
	}
	if n := e.count("true"); n != 2 {
		t.Errorf("%d rows left, want the 2 re-queued", n)
	}
}

// TestAdminDiscardReleasesHeld: discarding a dead letter in ordered mode lets
// the events it held go out, in order, without waiting for the housekeeping.
func TestAdminDiscardReleasesHeld(t *testing.T) {
	e := setup(t)
	xs := e.writeAgg("X", 1, 4)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == xs[0] {
			return outbox.Permanent(errors.New("poison"))
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Ordered: true})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := e.count(fmt.Sprintf("held_by = '%s'", xs[0])); n != 3 {
		t.Fatalf("%d events held behind the dead letter, want 3", n)
	}
	a := e.admin()
	infos, err := a.AggregateTimeline(ctx(t), outbox.TimelineQuery{AggregateType: "order", AggregateID: "X"})
	if err != nil || len(infos) != 4 || infos[0].State != outbox.StateDead || infos[1].State != outbox.StateHeld ||
		infos[1].HeldBy == nil || *infos[1].HeldBy != xs[0] || infos[3].ID != xs[3] {
		t.Fatalf("timeline = %+v, %v", infos, err)
	}
	res, err := a.Discard(ctx(t), outbox.DiscardSelector{IDs: xs[:1]})
	if err != nil || res.Discarded != 1 || res.Released != 3 {
		t.Fatalf("discard = %+v, %v; want 1 discarded, 3 released", res, err)
	}
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := pub.WaitDistinct(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(aggIDs(pub.Messages())); got != "[X2 X3 X4]" {
		t.Errorf("published %s, want X2 X3 X4 in order", got)
	}
	infos, err = a.Events(ctx(t), xs...)
	if err != nil || len(infos) != 3 || infos[0].State != outbox.StatePublished {
		t.Errorf("events by id after discard = %+v, %v; want 3 published", infos, err)
	}
	if left, err := a.Unprocessed(ctx(t), append(xs, uuid.New())); err != nil || len(left) != 0 {
		t.Errorf("unprocessed = %v, %v; want none", left, err)
	}
}

func TestAdminSelectorsRejected(t *testing.T) {
	e := setup(t)
	a := e.admin()
	for _, sel := range []outbox.RetrySelector{
		{},
		{IDs: []uuid.UUID{uuid.New()}, EventType: "x"},
		{All: true, ErrorGroup: "x"},
		{EventType: "x", OlderThan: -time.Second},
	} {
		if _, err := a.Retry(ctx(t), sel); err == nil {
			t.Errorf("Retry(%+v) accepted", sel)
		}
		if _, err := a.Discard(ctx(t), outbox.DiscardSelector(sel)); err == nil {
			t.Errorf("Discard(%+v) accepted", sel)
		}
	}
}
