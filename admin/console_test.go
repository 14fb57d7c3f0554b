package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/admin"
)

func TestAdminPublishedPerMinute(t *testing.T) {
	e := setup(t)
	ids := e.WriteBatch(6)
	e.Exec(`UPDATE outbox_events SET processed_at = now() WHERE id = ANY($1)`, ids[:2])
	e.Exec(`UPDATE outbox_events SET processed_at = now() - interval '10 minutes' WHERE id = ANY($1)`, ids[2:5])
	var old time.Time
	if err := e.Pool.QueryRow(ctx(t), `SELECT date_trunc('minute', processed_at) FROM outbox_events WHERE id = $1`, ids[2]).Scan(&old); err != nil {
		t.Fatal(err)
	}
	got, err := e.Admin().PublishedPerMinute(ctx(t), 60)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 60 {
		t.Fatalf("%d minutes, want 60", len(got))
	}
	var sum int64
	for i, m := range got {
		sum += m.Count
		if i > 0 && m.Minute.Sub(got[i-1].Minute) != time.Minute {
			t.Errorf("minute %d is %s after the previous one", i, m.Minute.Sub(got[i-1].Minute))
		}
		if m.Minute.Equal(old) && m.Count != 3 {
			t.Errorf("minute %s: %d published, want 3", m.Minute, m.Count)
		}
	}
	if sum != 5 {
		t.Errorf("%d published in the hour, want 5 (the pending one is not counted)", sum)
	}
	if _, err := e.Admin().PublishedPerMinute(ctx(t), 0); err == nil {
		t.Error("0 minutes accepted")
	}
}

func TestAdminAggregateTimelineWindow(t *testing.T) {
	e := setup(t)
	first := e.WriteAgg("a-1", 0, 1)[0]
	e.Exec(`UPDATE outbox_events SET processed_at = now() - interval '1 minute' WHERE id = $1`, first)
	dead := e.WriteAgg("a-1", 1, 1)[0]
	e.Exec(`UPDATE outbox_events SET dead_at = now(), attempts = 10, last_error = 'offset 42 refused' WHERE id = $1`, dead)
	later := e.WriteAgg("a-1", 2, 1)[0]
	others := e.WriteBatch(3) // published after the aggregate's first event
	e.Exec(`UPDATE outbox_events SET processed_at = now() WHERE id = ANY($1)`, others)
	a := e.Admin()

	got, err := a.AggregateTimeline(ctx(t), admin.TimelineQuery{AggregateType: "order", AggregateID: "a-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != first || got[0].State != admin.StatePublished || got[1].State != admin.StateDead ||
		got[2].ID != later || got[2].State != admin.StatePending {
		t.Fatalf("timeline = %+v", got)
	}
	// Its published event is older than the 3 latest published rows: outside
	// a window of 3, the unprocessed ones still shown.
	got, err = a.AggregateTimeline(ctx(t), admin.TimelineQuery{AggregateID: "a-1", PublishedWindow: 3})
	if err != nil || len(got) != 2 || got[0].ID != dead {
		t.Fatalf("timeline in a window of 3 = %+v, %v", got, err)
	}
	if got, err := a.AggregateTimeline(ctx(t), admin.TimelineQuery{AggregateID: "a-1", Limit: 1}); err != nil || len(got) != 1 || got[0].ID != later {
		t.Errorf("timeline limited to 1 = %+v, %v; want the latest", got, err)
	}
	if _, err := a.AggregateTimeline(ctx(t), admin.TimelineQuery{}); err == nil {
		t.Error("no aggregate id accepted")
	}

	blocked, err := a.BlockedAggregateList(ctx(t), 0)
	if err != nil || len(blocked) != 1 || blocked[0].AggregateID != "a-1" || blocked[0].DeadLetter != dead ||
		blocked[0].Behind != 1 || blocked[0].ErrorGroup != "offset <n> refused" {
		t.Errorf("blocked = %+v, %v", blocked, err)
	}
	members, err := a.DeadLetterGroupMembers(ctx(t), admin.RetrySelector{EventType: "order.created", ErrorGroup: "offset <n> refused"}, 0)
	if err != nil || len(members) != 1 || members[0].ID != dead || members[0].LastError != "offset 42 refused" {
		t.Errorf("group members = %+v, %v", members, err)
	}
	if members, err := a.DeadLetterGroupMembers(ctx(t), admin.RetrySelector{EventType: "order.paid"}, 0); err != nil || len(members) != 0 {
		t.Errorf("members of another type = %+v, %v", members, err)
	}
}

// TestAdminConsoleStatementDeadline: the console's reads (per-minute counts,
// a dead-letter group, a timeline, blocked aggregates) on a connection that
// stopped answering return within admin.Config.StatementTimeout with a
// *StatementTimeoutError naming the operation and the database, like the
// other Admin calls, instead of hanging until the kernel gives up.
func TestAdminConsoleStatementDeadline(t *testing.T) {
	e := setup(t)
	e.Write(1)
	calls := []deadlineCall{
		{"published per minute", func(c context.Context, a *admin.Admin) error {
			_, err := a.PublishedPerMinute(c, 60)
			return err
		}},
		{"dead-letter group", func(c context.Context, a *admin.Admin) error {
			_, err := a.DeadLetterGroupMembers(c, admin.RetrySelector{ErrorGroup: "boom"}, 10)
			return err
		}},
		{"timeline", func(c context.Context, a *admin.Admin) error {
			_, err := a.AggregateTimeline(c, admin.TimelineQuery{AggregateID: "a-1"})
			return err
		}},
		{"blocked aggregates", func(c context.Context, a *admin.Admin) error {
			_, err := a.BlockedAggregateList(c, 10)
			return err
		}},
	}
	testStatementDeadlines(t, e, calls)
}

// deadlineCall is one Admin call for testStatementDeadlines.
type deadlineCall struct {
	op   string // as the error names it
	call func(context.Context, *admin.Admin) error
}

// testStatementDeadlines runs each call on a live connection (it must
// work), then on a frozen one: it must return within the 1s deadline, give
// or take, with a *StatementTimeoutError naming the operation and the
// database.
func testStatementDeadlines(t *testing.T, e *env, calls []deadlineCall) {
	t.Helper()
	for _, c := range calls {
		t.Run(strings.ReplaceAll(c.op, " ", "_"), func(t *testing.T) {
			t.Parallel()
			a, px := frozenAdmin(t, e, admin.Config{StatementTimeout: time.Second}, nil)
			if err := c.call(ctx(t), a); err != nil { // the call works on a live connection
				t.Fatal(err)
			}
			px.Partition()
			start := time.Now()
			err := c.call(ctx(t), a)
			took := time.Since(start)
			if took > 5*time.Second {
				t.Fatalf("%s on a frozen connection took %s, want about the 1s deadline", c.op, took)
			}
			var te *admin.StatementTimeoutError
			if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v (%T), want a *StatementTimeoutError", err, err)
			}
			msg := err.Error()
			for _, want := range []string{"outbox: " + c.op + ": ", px.Addr(), "within 1s", "admin.Config.StatementTimeout"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
		})
	}
}
