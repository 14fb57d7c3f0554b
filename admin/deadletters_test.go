package admin_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/memory"
)

// deadLetterWith makes the given rows dead letters whose last_error is
// errFor(id), through the relay itself.
func (e *env) deadLetterWith(errFor func(i int) string, ids ...uuid.UUID) {
	e.T.Helper()
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
	if _, err := e.Relay(pub, outbox.RelayConfig{BatchSize: 1000}).ProcessBatch(ctx(e.T)); err != nil {
		e.T.Fatal(err)
	}
}

func TestAdminDeadLetterGroupsRetryAndDiscard(t *testing.T) {
	e := setup(t)
	ids := e.WriteBatch(6)
	// Four errors that differ only by numbers and ids make one group; two
	// others make a second.
	e.deadLetterWith(func(i int) string {
		if i < 4 {
			return fmt.Sprintf("offset %d of %s out of range", 10+i, uuid.New())
		}
		return "schema registry: subject not found"
	}, ids...)
	a := e.Admin()

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
	sel := admin.RetrySelector{EventType: "order.created", ErrorGroup: groups[1].Error}
	if n, err := a.Retry(ctx(t), admin.RetrySelector{ErrorGroup: groups[1].Error, OlderThan: time.Hour}); err != nil || n != 0 {
		t.Errorf("retry of a group younger than the age filter = %d, %v; want 0", n, err)
	}
	if n, err := a.Retry(ctx(t), sel); err != nil || n != 2 {
		t.Errorf("retry group = %d, %v; want 2", n, err)
	}
	dsel := admin.DiscardSelector{ErrorGroup: groups[0].Error, DryRun: true}
	if res, err := a.Discard(ctx(t), dsel); err != nil || res.Discarded != 4 {
		t.Errorf("discard dry run = %+v, %v; want 4", res, err)
	}
	if n := e.Count("dead_at IS NOT NULL"); n != 4 {
		t.Fatalf("dry run changed rows: %d dead letters", n)
	}
	// By id: a pending (re-queued) event is not a dead letter and stays.
	res, err := a.Discard(ctx(t), admin.DiscardSelector{IDs: []uuid.UUID{ids[0], ids[4]}})
	if err != nil || res.Discarded != 1 {
		t.Errorf("discard by id = %+v, %v; want 1 (ids[4] was re-queued)", res, err)
	}
	dsel.DryRun = false
	if res, err := a.Discard(ctx(t), dsel); err != nil || res.Discarded != 3 {
		t.Errorf("discard group = %+v, %v; want the 3 left", res, err)
	}
	if n := e.Count("true"); n != 2 {
		t.Errorf("%d rows left, want the 2 re-queued", n)
	}
}

// TestAdminDiscardReleasesHeld: discarding a dead letter in ordered mode lets
// the events it held go out, in order, without waiting for the housekeeping.
func TestAdminDiscardReleasesHeld(t *testing.T) {
	e := setup(t)
	xs := e.WriteAgg("X", 1, 4)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == xs[0] {
			return outbox.Permanent(errors.New("poison"))
		}
		return nil
	})
	r := e.Relay(pub, outbox.RelayConfig{Ordered: true})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := e.Count(fmt.Sprintf("held_by = '%s'", xs[0])); n != 3 {
		t.Fatalf("%d events held behind the dead letter, want 3", n)
	}
	a := e.Admin()
	infos, err := a.AggregateTimeline(ctx(t), admin.TimelineQuery{AggregateType: "order", AggregateID: "X"})
	if err != nil || len(infos) != 4 || infos[0].State != admin.StateDead || infos[1].State != admin.StateHeld ||
		infos[1].HeldBy == nil || *infos[1].HeldBy != xs[0] || infos[3].ID != xs[3] {
		t.Fatalf("timeline = %+v, %v", infos, err)
	}
	res, err := a.Discard(ctx(t), admin.DiscardSelector{IDs: xs[:1]})
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
	if err != nil || len(infos) != 3 || infos[0].State != admin.StatePublished {
		t.Errorf("events by id after discard = %+v, %v; want 3 published", infos, err)
	}
	if left, err := a.Unprocessed(ctx(t), append(xs, uuid.New())); err != nil || len(left) != 0 {
		t.Errorf("unprocessed = %v, %v; want none", left, err)
	}
}

func TestAdminSelectorsRejected(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	for _, sel := range []admin.RetrySelector{
		{},
		{IDs: []uuid.UUID{uuid.New()}, EventType: "x"},
		{All: true, ErrorGroup: "x"},
		{EventType: "x", OlderThan: -time.Second},
	} {
		if _, err := a.Retry(ctx(t), sel); err == nil {
			t.Errorf("Retry(%+v) accepted", sel)
		}
		if _, err := a.Discard(ctx(t), admin.DiscardSelector(sel)); err == nil {
			t.Errorf("Discard(%+v) accepted", sel)
		}
	}
}

// TestAdminEmptyErrorGroup: the dead letters without an error are a group of
// their own. Its Selector (NoError) acts on them alone; an empty ErrorGroup
// still means any error.
func TestAdminEmptyErrorGroup(t *testing.T) {
	e := setup(t)
	ids := e.WriteBatch(5)
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 3, last_error = NULL WHERE id = $1`, ids[0])
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 3, last_error = '' WHERE id = $1`, ids[1])
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 3, last_error = 'boom' WHERE id = ANY($1)`, ids[2:4])
	a := e.Admin()
	groups, err := a.DeadLetterGroups(ctx(t), false)
	if err != nil || len(groups) != 2 || groups[0].Error != "" || groups[0].Count != 2 || groups[1].Error != "boom" {
		t.Fatalf("groups = %+v, %v; want the empty group (2) then boom (2)", groups, err)
	}
	sel := groups[0].Selector()
	if !sel.NoError || sel.EventType != "order.created" {
		t.Errorf("selector of the empty group = %+v", sel)
	}
	members, err := a.DeadLetterGroupMembers(ctx(t), sel, 0)
	if err != nil || len(members) != 2 || members[0].ID != ids[0] || members[1].ID != ids[1] {
		t.Errorf("members of the empty group = %+v, %v", members, err)
	}
	sel.DryRun = true
	if n, err := a.Retry(ctx(t), sel); err != nil || n != 2 {
		t.Errorf("retry dry run of the empty group = %d, %v; want 2", n, err)
	}
	if n, err := a.Retry(ctx(t), admin.RetrySelector{EventType: "order.created", DryRun: true}); err != nil || n != 4 {
		t.Errorf("retry dry run of the type (any error) = %d, %v; want 4", n, err)
	}
	res, err := a.Discard(ctx(t), admin.DiscardSelector(groups[0].Selector()))
	if err != nil || res.Discarded != 2 {
		t.Errorf("discard the empty group = %+v, %v; want 2", res, err)
	}
	if n := e.Count("dead_at IS NOT NULL"); n != 2 {
		t.Errorf("%d dead letters left, want the 2 with an error", n)
	}
	for _, bad := range []admin.RetrySelector{
		{NoError: true, ErrorGroup: "boom"},
		{All: true, NoError: true},
		{IDs: ids[:1], NoError: true},
	} {
		if _, err := a.Retry(ctx(t), bad); err == nil {
			t.Errorf("Retry(%+v) accepted", bad)
		}
	}
	if _, err := a.DeadLetterGroupMembers(ctx(t), admin.RetrySelector{IDs: ids[:1]}, 0); err == nil {
		t.Error("DeadLetterGroupMembers with IDs accepted")
	}
}

// TestAdminLongErrorGroup: an error longer than the group key keeps its
// start and its end, where a wrapped error says what went wrong, so two
// causes behind one long prefix are two groups.
func TestAdminLongErrorGroup(t *testing.T) {
	e := setup(t)
	ids := e.WriteBatch(3)
	prefix := "webhook: POST https://hooks.example.com/…: " + strings.Repeat("context ", 30)
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 1, last_error = $1 WHERE id = ANY($2)`, prefix+"400 Bad Request: amount 12 is negative", ids[:2])
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 1, last_error = $1 WHERE id = $2`, prefix+"400 Bad Request: currency missing", ids[2])
	a := e.Admin()
	groups, err := a.DeadLetterGroups(ctx(t), true)
	if err != nil || len(groups) != 2 {
		t.Fatalf("groups = %+v, %v; want 2", groups, err)
	}
	g := groups[0]
	if g.Count != 2 || len([]rune(g.Error)) != 200 || !strings.HasPrefix(g.Error, "webhook: POST https://hooks.example.com/…: context") ||
		!strings.HasSuffix(g.Error, "<n> Bad Request: amount <n> is negative") || !strings.Contains(g.Error, " ... ") {
		t.Errorf("long group = %q (%d runes)", g.Error, len([]rune(g.Error)))
	}
	if n, err := a.Retry(ctx(t), admin.RetrySelector{ErrorGroup: g.Error, DryRun: true}); err != nil || n != 2 {
		t.Errorf("retry by the long group = %d, %v; want 2", n, err)
	}
}
