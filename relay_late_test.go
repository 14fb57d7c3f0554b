package outbox_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestLateCommitBelowFloorDrainsAtFullSpeed: a large transaction held open
// while later commits move the claim floor past it is drained, once it
// commits, back to back: well within the time one batch per RescanInterval
// would take.
func TestLateCommitBelowFloorDrainsAtFullSpeed(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			const late, batch = 3000, 50 // one rescan per batch would take 60 s
			early, err := e.pool.Begin(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			defer early.Rollback(ctx(t))
			if _, err := early.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', g::text, 'order.created', '{}' FROM generate_series(1, $1) g`, late); err != nil {
				t.Fatal(err)
			}
			var lowSeq int64
			if err := early.QueryRow(ctx(t), "SELECT max(seq) FROM outbox_events").Scan(&lowSeq); err != nil {
				t.Fatal(err)
			}
			e.write(5)
			pub := memory.New()
			rescan := time.Second
			r := e.relay(pub, outbox.RelayConfig{Ordered: ordered, BatchSize: batch, Workers: 2,
				PollInterval: 5 * time.Millisecond, RescanInterval: rescan})
			e.run(r)
			if err := pub.WaitDistinct(ctx(t), 5); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(testkit.WithDetail(t, func() string {
				return fmt.Sprintf("floor %d: the test would not exercise the rescan", outbox.ClaimFloor(r))
			}), 10*time.Second, fmt.Sprintf("the floor past the open transaction's seq %d", lowSeq), func() bool { return outbox.ClaimFloor(r) > lowSeq })
			if err := early.Commit(ctx(t)); err != nil {
				t.Fatal(err)
			}
			committed := time.Now()
			if err := pub.WaitDistinct(ctx(t), late+5); err != nil {
				t.Fatalf("late commit not drained: %d of %d published: %v", pub.Distinct(), late+5, err)
			}
			took := time.Since(committed)
			t.Logf("%d rows committed below the floor drained in %s (batch %d, rescan %s)", late, took, batch, rescan)
			// Old behaviour: late/batch rescans, one per RescanInterval (60 s).
			// The bound is a third of that, not a speed target: a loaded
			// machine (CI under -race) takes several seconds for the drain.
			if bound := late / batch * rescan / 3; took > bound {
				t.Errorf("%d late rows took %s to drain, want under %s (a third of one rescan per batch: the late rows must not wait a rescan each)", late, took, bound)
			}
		})
	}
}
