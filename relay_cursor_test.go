package outbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestFloorPassesLateCommitWithoutLosingIt: the relay's claims start past
// the rows it processed (the floor); an event whose transaction was open
// while the floor moved past its seq is still published, by the periodic
// rescan, in both modes.
func TestFloorPassesLateCommitWithoutLosingIt(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			early, err := e.pool.Begin(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			defer early.Rollback(ctx(t))
			lowIDs, err := e.writer.Write(ctx(t), early, event("late", 0))
			if err != nil {
				t.Fatal(err)
			}
			var lowSeq int64
			if err := early.QueryRow(ctx(t), "SELECT seq FROM outbox_events WHERE id = $1", lowIDs[0]).Scan(&lowSeq); err != nil {
				t.Fatal(err)
			}
			e.write(20)
			pub := memory.New()
			r := e.relay(pub, outbox.RelayConfig{Ordered: ordered, PollInterval: 5 * time.Millisecond, RescanInterval: 200 * time.Millisecond})
			e.run(r)
			if err := pub.WaitDistinct(ctx(t), 20); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(testkit.WithDetail(t, func() string {
				return fmt.Sprintf("floor %d: the test would not exercise the rescan", outbox.ClaimFloor(r))
			}), 10*time.Second, fmt.Sprintf("the floor past the open transaction's seq %d", lowSeq), func() bool { return outbox.ClaimFloor(r) > lowSeq })
			if err := early.Commit(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if err := pub.WaitDistinct(ctx(t), 21); err != nil {
				t.Fatalf("the event committed below the floor was never published: %v", err)
			}
			found := false
			for _, m := range pub.Messages() {
				found = found || m.ID == lowIDs[0]
			}
			if !found {
				t.Fatal("the late event is not among the published messages")
			}
		})
	}
}

// TestFloorSkipsProcessedRows: once the relay has drained a backlog, its
// claims start past it, so a claim does not read the index entries the
// processed rows leave behind until VACUUM (autovacuum is off on the test
// server). EXPLAIN of the relay's claim at the floor reads a handful of
// buffers; the same claim from the start reads the dead head.
func TestFloorSkipsProcessedRows(t *testing.T) {
	e := setup(t)
	if _, err := e.pool.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	pub := memory.New()
	r := e.relay(pub, outbox.RelayConfig{PollInterval: 5 * time.Millisecond, RescanInterval: 40 * time.Millisecond})
	stop := e.run(r)
	if err := pub.WaitDistinct(ctx(t), 20000); err != nil {
		t.Fatal(err)
	}
	var top int64
	if err := e.pool.QueryRow(ctx(t), "SELECT max(seq) FROM outbox_events").Scan(&top); err != nil {
		t.Fatal(err)
	}
	var floor int64
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("floor %d", floor) }), 10*time.Second,
		fmt.Sprintf("the floor at the drained seq %d", top), func() bool { floor = outbox.ClaimFloor(r); return floor >= top })
	stop()
	buffers := func(floor int64) int {
		tx, err := e.pool.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx(t))
		var plan []map[string]any
		err = tx.QueryRow(ctx(t), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id FROM outbox_events
WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL
  AND (retry_after IS NULL OR retry_after <= now()) AND seq > $1
ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED`, floor).Scan(&plan)
		if err != nil {
			t.Fatal(err)
		}
		p := plan[0]["Plan"].(map[string]any)
		return int(p["Shared Hit Blocks"].(float64) + p["Shared Read Blocks"].(float64))
	}
	atFloor, fromStart := buffers(floor), buffers(0)
	t.Logf("claim buffers after a 20k drain: %d from the floor, %d from the start", atFloor, fromStart)
	if atFloor > 5 || fromStart < 10*atFloor {
		t.Errorf("claim from the floor reads %d buffers, from the start %d: the floor does not skip the dead head", atFloor, fromStart)
	}
}
