package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// writeAggN writes events n = from..to of aggregate agg, one transaction
// each, and returns their ids.
func (e *env) writeAggN(agg string, from, to int) []uuid.UUID {
	e.T.Helper()
	var ids []uuid.UUID
	for n := from; n <= to; n++ {
		err := pgx.BeginFunc(ctx(e.T), e.Pool, func(tx pgx.Tx) error {
			got, err := e.Writer.Write(ctx(e.T), tx, event(agg, n))
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			e.T.Fatal(err)
		}
	}
	return ids
}

// drain runs batches of r until one publishes nothing.
func (e *env) drain(r *outbox.Relay) {
	e.T.Helper()
	for range 1000 {
		res, err := r.ProcessBatch(ctx(e.T))
		if err != nil {
			e.T.Fatal(err)
		}
		if res.Claimed == 0 {
			return
		}
	}
	e.T.Fatal("drain: the outbox never emptied")
}

// payloadN is the "n" of an event written by event().
func payloadN(t *testing.T, payload []byte) int {
	t.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	return p.N
}

// TestReplayNewIDQueuesCopiesInOriginalOrder: a new-id replay inserts one
// copy per delivered event at the tail, in the original seq order, with a
// fresh id and the replay headers; the relay publishes them; a second
// replay selects the originals only, never the first replay's copies.
func TestReplayNewIDQueuesCopiesInOriginalOrder(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	var orig []uuid.UUID
	for i := range 3 { // interleave two aggregates
		orig = append(orig, e.writeAggN("A", i, i)...)
		orig = append(orig, e.writeAggN("B", i, i)...)
	}
	pub := memory.New()
	r := e.Relay(pub, outbox.RelayConfig{})
	e.drain(r)

	res, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateType: "order", Mode: admin.ReplayNewID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 6 || res.Queued != 6 || res.Skipped != 0 || res.ID == uuid.Nil {
		t.Fatalf("replay = %+v, want 6 selected and queued", res)
	}
	type copyRow struct {
		id       uuid.UUID
		of, rid  string
		atTheEnd bool
	}
	rows, err := e.Pool.Query(ctx(t), `SELECT id, headers->>'outbox-replay-of', headers->>'outbox-replay-id', seq > (SELECT max(seq) FROM outbox_events WHERE replay_id IS NULL)
FROM outbox_events WHERE replay_id = $1 ORDER BY seq`, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	copies, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (copyRow, error) {
		var c copyRow
		return c, r.Scan(&c.id, &c.of, &c.rid, &c.atTheEnd)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != 6 {
		t.Fatalf("%d copies in the table, want 6", len(copies))
	}
	for i := range copies {
		c := copies[i]
		if c.of != orig[i].String() || c.rid != res.ID.String() || c.id == orig[i] || !c.atTheEnd {
			t.Errorf("copy %d = %+v; want replay-of %s (original order), replay-id %s, a fresh id, seq after every original", i, c, orig[i], res.ID)
		}
	}

	before := pub.Len()
	e.drain(r)
	got := pub.Messages()[before:]
	if len(got) != 6 {
		t.Fatalf("relay published %d copies, want 6", len(got))
	}
	for i, m := range got {
		if m.Headers[outbox.HeaderReplayOf] != orig[i].String() || m.Headers[outbox.HeaderReplayID] != res.ID.String() {
			t.Errorf("published copy %d headers %v, want replay-of %s", i, m.Headers, orig[i])
		}
		if _, err := time.Parse(time.RFC3339Nano, m.Headers[outbox.HeaderOriginalCreatedAt]); err != nil {
			t.Errorf("copy %d: %s: %v", i, outbox.HeaderOriginalCreatedAt, err)
		}
	}

	again, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "A", Mode: admin.ReplayNewID})
	if err != nil {
		t.Fatal(err)
	}
	if again.Selected != 3 {
		t.Errorf("second replay of A selected %d, want its 3 originals (copies are never replayed)", again.Selected)
	}
}

// TestReplaySameIDKeepsTheID: a same-id replay re-sends each event under its
// original id (the message id consumers deduplicate by), moves the original
// row to the archive, and skips an event whose copy is still pending.
func TestReplaySameIDKeepsTheID(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	ids := e.writeAggN("S", 1, 3)
	pub := memory.New()
	r := e.Relay(pub, outbox.RelayConfig{})
	e.drain(r)

	res, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids[:2], Mode: admin.ReplaySameID})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 2 || res.Queued != 2 {
		t.Fatalf("replay = %+v, want 2 queued", res)
	}
	if n := e.Count(fmt.Sprintf("replay_id = '%s' AND processed_at IS NULL", res.ID)); n != 2 {
		t.Errorf("%d pending copies, want 2", n)
	}
	archived, err := a.ArchivedCount(ctx(t))
	if err != nil || archived != 2 {
		t.Errorf("archive holds %d rows (%v), want the 2 originals", archived, err)
	}
	// Replaying again while the copies are pending: nothing to add.
	dup, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids[:2], Mode: admin.ReplaySameID})
	if err != nil {
		t.Fatal(err)
	}
	if dup.Selected != 2 || dup.Queued != 0 || dup.Skipped != 2 {
		t.Errorf("second same-id replay = %+v, want 2 selected, 2 skipped", dup)
	}

	before := pub.Len()
	e.drain(r)
	got := pub.Messages()[before:]
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Fatalf("published %v, want the original ids %v in order", got, ids[:2])
	}
	if got[0].Headers[outbox.HeaderReplayID] != res.ID.String() || got[0].Headers[outbox.HeaderReplayOf] != "" {
		t.Errorf("same-id copy headers %v: want replay-id and no replay-of", got[0].Headers)
	}
	// The originals are still selected once (from the archive), not twice.
	dry, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "S", Mode: admin.ReplaySameID, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.Selected != 3 {
		t.Errorf("after a same-id replay, aggregate S selects %d events, want its 3", dry.Selected)
	}
}

// TestReplayDryRunChangesNothing: a dry run counts and samples in seq order.
func TestReplayDryRunChangesNothing(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	ids := e.writeAggN("D", 1, 5)
	e.drain(e.Relay(memory.New(), outbox.RelayConfig{}))
	res, err := a.Replay(ctx(t), admin.ReplaySelector{EventType: "order.created", Mode: admin.ReplayNewID, DryRun: true, Sample: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 5 || res.Queued != 0 || len(res.Sample) != 2 || res.Sample[0].ID != ids[0] || res.Sample[1].ID != ids[1] {
		t.Fatalf("dry run = %+v, want 5 selected and the first 2 as sample", res)
	}
	if n := e.Count("replay_id IS NOT NULL"); n != 0 {
		t.Errorf("dry run queued %d copies", n)
	}
	list, err := a.ReplayList(ctx(t), 0)
	if err != nil || len(list) != 0 {
		t.Errorf("dry run recorded replays %v (%v)", list, err)
	}
	// Nothing delivered in the window: nothing selected.
	none, err := a.Replay(ctx(t), admin.ReplaySelector{Since: time.Now().Add(time.Hour), Mode: admin.ReplayNewID, DryRun: true})
	if err != nil || none.Selected != 0 {
		t.Errorf("future --since selected %d (%v)", none.Selected, err)
	}
}

func TestReplaySelectorErrors(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	now := time.Now()
	for _, tc := range []struct {
		sel   admin.ReplaySelector
		field string
	}{
		{admin.ReplaySelector{All: true}, "Mode"},
		{admin.ReplaySelector{All: true, Mode: "copy"}, "Mode"},
		{admin.ReplaySelector{Mode: admin.ReplayNewID}, "All"},
		{admin.ReplaySelector{Since: now, Until: now.Add(-time.Hour), Mode: admin.ReplayNewID}, "Until"},
		{admin.ReplaySelector{All: true, Rate: -1, Mode: admin.ReplayNewID}, "Rate"},
	} {
		_, err := a.Replay(ctx(t), tc.sel)
		configcheck.Refused(t, fmt.Sprintf("Replay(%+v)", tc.sel), err, "admin.ReplaySelector", tc.field)
	}
}

// TestReplayCancelRemovesPendingCopies: cancelling removes the copies not
// yet delivered, keeps the originals and the delivered copies, and the list
// shows the replay cancelled; list shows a finished replay as done.
func TestReplayCancelRemovesPendingCopies(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	e.writeAggN("C", 1, 4)
	pub := memory.New()
	r := e.Relay(pub, outbox.RelayConfig{BatchSize: 1})
	e.drain(r)
	res, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "C", Mode: admin.ReplayNewID})
	if err != nil || res.Queued != 4 {
		t.Fatalf("replay = %+v, %v", res, err)
	}
	if _, err := r.ProcessBatch(ctx(t)); err != nil { // one copy delivered
		t.Fatal(err)
	}
	list, err := a.ReplayList(ctx(t), 10)
	if err != nil || len(list) != 1 || list[0].State != "queued" || list[0].Pending != 3 || list[0].Delivered != 1 {
		t.Fatalf("list = %+v (%v), want one queued replay, 3 pending, 1 delivered", list, err)
	}
	cres, err := a.ReplayCancel(ctx(t), res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cres.Removed != 3 || cres.Delivered != 1 {
		t.Errorf("cancel = %+v, want 3 removed, 1 delivered", cres)
	}
	if n := e.Count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d rows pending after the cancel", n)
	}
	if n := e.Count("replay_id IS NULL"); n != 4 {
		t.Errorf("%d originals left, want 4", n)
	}
	list, _ = a.ReplayList(ctx(t), 10)
	if list[0].State != "cancelled" || list[0].Cancelled != 3 {
		t.Errorf("after cancel: %+v", list[0])
	}
	if _, err := a.ReplayCancel(ctx(t), uuid.New()); !errors.Is(err, admin.ErrReplayNotFound) {
		t.Errorf("cancel of an unknown replay: %v", err)
	}

	done, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "C", Mode: admin.ReplayNewID})
	if err != nil {
		t.Fatal(err)
	}
	e.drain(r)
	list, _ = a.ReplayList(ctx(t), 1)
	if list[0].ID != done.ID || list[0].State != "done" || list[0].Delivered != 4 {
		t.Errorf("finished replay listed as %+v, want done with 4 delivered", list[0])
	}
	tot, err := a.ReplayTotals(ctx(t))
	if err != nil || tot.Pending != 0 || tot.Delivered != 5 {
		t.Errorf("totals = %+v (%v), want 0 pending, 5 delivered", tot, err)
	}
	// Cancelling the finished replay changes nothing and says so.
	cres, err = a.ReplayCancel(ctx(t), done.ID)
	if err != nil || !cres.AlreadyFinished || cres.Removed != 0 || cres.Delivered != 4 {
		t.Errorf("cancel of a finished replay = %+v, %v; want already finished, 4 delivered", cres, err)
	}
	list, _ = a.ReplayList(ctx(t), 1)
	if list[0].State != "done" || list[0].FinishedAt == nil {
		t.Errorf("a finished replay after cancel: %+v, want it still done", list[0])
	}
}

// TestReplayOrderedAfterPendingBeforeLive is the ordering guarantee on one
// aggregate: with an ordered relay, what was pending when the replay ran is
// published first, then the replayed events in their original order, then
// the events written after the replay.
func TestReplayOrderedAfterPendingBeforeLive(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	e.writeAggN("X", 1, 3)
	pub := memory.New()
	r := e.Relay(pub, outbox.RelayConfig{Ordered: true, BatchSize: 100})
	e.drain(r)
	e.writeAggN("X", 4, 4) // pending when the replay runs
	if _, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "X", Mode: admin.ReplayNewID}); err != nil {
		t.Fatal(err)
	}
	e.writeAggN("X", 5, 5) // live, after the replay
	before := pub.Len()
	e.drain(r)
	var got []string
	for _, m := range pub.Messages()[before:] {
		s := fmt.Sprint(payloadN(t, m.Payload))
		if m.Headers[outbox.HeaderReplayOf] != "" {
			s += "'"
		}
		got = append(got, s)
	}
	if want := "4 1' 2' 3' 5"; strings.Join(got, " ") != want {
		t.Errorf("published %q, want %q", strings.Join(got, " "), want)
	}
}

// TestCancelEvents: Cancel deletes unpublished events (pending, dead),
// names the published and unknown ids, and releases what a cancelled
// failing event held in ordered mode.
func TestCancelEvents(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	published := e.writeAggN("P", 1, 1)
	e.drain(e.Relay(memory.New(), outbox.RelayConfig{}))
	held := e.writeAggN("H", 1, 3)
	pending := e.writeAggN("Q", 1, 1)
	// An ordered relay whose broker refuses H1 for good: H1 becomes a dead
	// letter and holds H2, H3.
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID == held[0] {
			return outbox.Permanent(errors.New("refused"))
		}
		return nil
	})
	r := e.Relay(pub, outbox.RelayConfig{Ordered: true})
	if _, err := r.ProcessBatch(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := e.Count("held_by IS NOT NULL"); n != 2 {
		t.Fatalf("%d held events, want H2 and H3 held behind dead H1", n)
	}
	// Q1 is in the queue too, unless that batch published it; write another.
	pending = append(pending, e.writeAggN("Q", 2, 2)...)
	unknown := uuid.New()
	res, err := a.Cancel(ctx(t), held[0], pending[1], published[0], unknown)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Cancelled) != 2 || res.Cancelled[0] != held[0] || res.Cancelled[1] != pending[1] ||
		len(res.Published) != 1 || res.Published[0] != published[0] ||
		len(res.Unknown) != 1 || res.Unknown[0] != unknown || res.Released != 2 {
		t.Fatalf("cancel = %+v; want H1 and Q2 cancelled, P1 published, one unknown, 2 released", res)
	}
	e.drain(r)
	for _, id := range held[1:] {
		if pub.Count()[id] != 1 {
			t.Errorf("released event %s published %d times, want once", id, pub.Count()[id])
		}
	}
	if pub.Count()[pending[1]] != 0 {
		t.Error("a cancelled event was published")
	}
}

// TestArchiveMovesAndReplayReadsIt: Archive moves old processed rows in
// batches, leaves pending rows alone, and replay selects archived events.
func TestArchiveMovesAndReplayReadsIt(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	ids := e.writeAggN("R", 1, 5)
	r := e.Relay(memory.New(), outbox.RelayConfig{})
	e.drain(r)
	e.writeAggN("R", 6, 6) // pending: never archived
	var calls int
	n, err := a.Archive(ctx(t), 0, 2, func(int64) { calls++ })
	if err != nil || n != 5 || calls != 3 {
		t.Fatalf("archive moved %d in %d batches (%v), want 5 in 3", n, calls, err)
	}
	if got := e.Count("true"); got != 1 {
		t.Errorf("%d rows left in the outbox table, want the pending one", got)
	}
	if got, _ := a.ArchivedCount(ctx(t)); got != 5 {
		t.Errorf("archive holds %d", got)
	}
	if n, err := a.Archive(ctx(t), time.Hour, 2, nil); err != nil || n != 0 {
		t.Errorf("archive older than 1h moved %d (%v)", n, err)
	}
	res, err := a.Replay(ctx(t), admin.ReplaySelector{IDs: ids, Mode: admin.ReplayNewID})
	if err != nil || res.Queued != 5 {
		t.Fatalf("replay from the archive = %+v, %v", res, err)
	}
	c, err := a.Cancel(ctx(t), ids[0])
	if err != nil || len(c.Published) != 1 {
		t.Errorf("cancel of an archived event = %+v (%v), want it reported published", c, err)
	}
}

// TestReplayCollector: the replay gauges follow the copies, pending then
// delivered.
func TestReplayCollector(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	e.writeAggN("M", 1, 3)
	r := e.Relay(memory.New(), outbox.RelayConfig{})
	e.drain(r)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.ReplayCollector(prometheus.Labels{"table": "t"}))
	if _, err := a.Replay(ctx(t), admin.ReplaySelector{All: true, Mode: admin.ReplayNewID}); err != nil {
		t.Fatal(err)
	}
	read := func() (pending, delivered, active float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				v, state := m.GetGauge().GetValue(), ""
				for _, l := range m.GetLabel() {
					if l.GetName() == "state" {
						state = l.GetValue()
					}
				}
				switch {
				case mf.GetName() == "outbox_replays_active":
					active = v
				case state == "delivered":
					delivered = v
				case state == "pending":
					pending = v
				}
			}
		}
		return
	}
	if p, d, act := read(); p != 3 || d != 0 || act != 1 {
		t.Errorf("before the relay: pending %v delivered %v active %v, want 3 0 1", p, d, act)
	}
	e.drain(r)
	if p, d, act := read(); p != 0 || d != 3 || act != 0 {
		t.Errorf("after the relay: pending %v delivered %v active %v, want 0 3 0", p, d, act)
	}
}

// TestReplayWaitsForWritersInFlight: an event written in a transaction that
// is still open when the replay starts has a lower seq than the copies but
// is invisible to the relay's claims until it commits. The replay's batch
// waits for that transaction (the table lock), so the event still goes out
// before the copies.
func TestReplayWaitsForWritersInFlight(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	e.writeAggN("W", 1, 3)
	pub := memory.New()
	r := e.Relay(pub, outbox.RelayConfig{Ordered: true})
	e.drain(r)

	tx, err := e.Pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx(t)) //nolint:errcheck
	if _, err := e.Writer.Write(ctx(t), tx, event("W", 4)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Replay(ctx(t), admin.ReplaySelector{AggregateID: "W", Mode: admin.ReplayNewID, LockTimeout: time.Minute})
		done <- err
	}()
	// The replay's lock request waits behind the writer.
	testkit.Eventually(t, 45*time.Second, "the replay's lock request waiting behind the writer", func() bool {
		var waiting int
		err := e.Pool.QueryRow(ctx(t), `SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass`,
			e.Schema+".outbox_events").Scan(&waiting)
		return err == nil && waiting > 0
	})
	e.drain(r) // nothing to claim meanwhile: no copy is queued yet
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	before := pub.Len()
	e.drain(r)
	var got []string
	for _, m := range pub.Messages()[before:] {
		s := fmt.Sprint(payloadN(t, m.Payload))
		if m.Headers[outbox.HeaderReplayOf] != "" {
			s += "'"
		}
		got = append(got, s)
	}
	if want := "4 1' 2' 3'"; strings.Join(got, " ") != want {
		t.Errorf("published %q, want %q", strings.Join(got, " "), want)
	}
}

// TestReplayLongestTableName: the longest table name New accepts (its
// aggregate index name at PostgreSQL's limit) migrates, and replay and
// archive work on it.
func TestReplayLongestTableName(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	table := strings.Repeat("t", 63-len("_aggregate_idx"))
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema, Table: table}); err != nil {
		t.Fatal(err)
	}
	a, err := admin.New(pool, admin.Config{Schema: schema, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Replay(ctx(t), admin.ReplaySelector{All: true, Mode: admin.ReplayNewID}); err != nil {
		t.Error(err)
	}
	if _, err := a.Archive(ctx(t), 0, 0, nil); err != nil {
		t.Error(err)
	}
}

// TestReplayCancelWhileQueuing: cancelling a paced replay stops its queuing
// at the next batch, and no copy stays pending.
func TestReplayCancelWhileQueuing(t *testing.T) {
	e := setup(t)
	a := e.Admin()
	for i := range 6 {
		e.writeAggN(fmt.Sprint("Q", i), 1, 2)
	}
	e.drain(e.Relay(memory.New(), outbox.RelayConfig{}))
	first := make(chan struct{})
	var once bool
	done := make(chan admin.ReplayResult, 1)
	var replayErr error
	go func() {
		res, err := a.Replay(ctx(t), admin.ReplaySelector{All: true, Mode: admin.ReplayNewID, Rate: 4, BatchSize: 1,
			Progress: func(int64) {
				if !once {
					once = true
					close(first)
				}
			}})
		replayErr = err
		done <- res
	}()
	<-first
	list, err := a.ReplayList(ctx(t), 1)
	if err != nil || len(list) != 1 || list[0].State != "queuing" {
		t.Fatalf("while queuing: %+v (%v)", list, err)
	}
	if _, err := a.ReplayCancel(ctx(t), list[0].ID); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if replayErr != nil || !res.Cancelled || res.Queued >= res.Selected {
		t.Fatalf("replay = %+v, %v; want it cancelled before queuing all %d", res, replayErr, res.Selected)
	}
	if n := e.Count("processed_at IS NULL"); n != 0 {
		t.Errorf("%d copies pending after the cancel", n)
	}
	list, _ = a.ReplayList(ctx(t), 1)
	if list[0].State != "cancelled" {
		t.Errorf("state %q, want cancelled", list[0].State)
	}
}

// TestAdminReplayStatementDeadline: Replay (dry run and real), ReplayList,
// ReplayCancel, ReplayTotals, Cancel and Archive (per batch) on a connection
// that stopped answering return within admin.Config.StatementTimeout with a
// *StatementTimeoutError, like the other Admin calls.
func TestAdminReplayStatementDeadline(t *testing.T) {
	e := setup(t)
	e.Write(1)
	testStatementDeadlines(t, e, []deadlineCall{
		{"replay", func(c context.Context, a *admin.Admin) error {
			_, err := a.Replay(c, admin.ReplaySelector{Mode: admin.ReplayNewID, All: true, DryRun: true})
			return err
		}},
		{"replay", func(c context.Context, a *admin.Admin) error {
			_, err := a.Replay(c, admin.ReplaySelector{Mode: admin.ReplayNewID, EventType: "no.such.type"})
			return err
		}},
		{"replay list", func(c context.Context, a *admin.Admin) error {
			_, err := a.ReplayList(c, 10)
			return err
		}},
		{"replay cancel", func(c context.Context, a *admin.Admin) error {
			_, err := a.ReplayCancel(c, uuid.New())
			if errors.Is(err, admin.ErrReplayNotFound) {
				return nil
			}
			return err
		}},
		{"replay totals", func(c context.Context, a *admin.Admin) error {
			_, err := a.ReplayTotals(c)
			return err
		}},
		{"cancel", func(c context.Context, a *admin.Admin) error {
			_, err := a.Cancel(c, uuid.New())
			return err
		}},
		{"archive", func(c context.Context, a *admin.Admin) error {
			_, err := a.Archive(c, time.Hour, 10, nil)
			return err
		}},
	})
}
