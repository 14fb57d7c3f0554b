package admin_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testbroker"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// TestReplayEndToEndOrdered replays every delivered event while writers keep
// writing and an ordered relay keeps publishing, paced and in small batches,
// then reads the broker back: per aggregate, live events arrive in order
// with none lost, the replayed events arrive in their original order as one
// block that no live event interleaves, and consumers' inboxes see the mode's
// semantics (same-id: a consumer that processed the originals skips the
// copies, a new consumer processes them; new-id: ReplayOf names the
// original, and the copies are processed again).
func TestReplayEndToEndOrdered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   admin.ReplayMode
		broker func(*testing.T) testbroker.Broker
	}{
		{"nats/new-id", admin.ReplayNewID, testbroker.NATS},
		{"redis/same-id", admin.ReplaySameID, testbroker.Redis},
		{"redis/new-id", admin.ReplayNewID, testbroker.Redis},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			b := tc.broker(t)
			testReplayEndToEnd(t, e, b, tc.mode)
		})
	}
}

func testReplayEndToEnd(t *testing.T, e *env, b testbroker.Broker, mode admin.ReplayMode) {
	const aggs = 6
	r := e.Relay(b.Pub, outbox.RelayConfig{Ordered: true, PollInterval: 5 * time.Millisecond, Workers: 2})
	stop := e.Run(r)

	// Writers: each aggregate's events numbered 1, 2, ... in its payload.
	var (
		written  atomic.Int64
		next     [aggs]int
		stopW    = make(chan struct{})
		writerWG sync.WaitGroup
	)
	writerWG.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopW:
				return
			default:
			}
			a := i % aggs
			next[a]++
			err := pgx.BeginFunc(ctx(t), e.Pool, func(tx pgx.Tx) error {
				_, err := e.Writer.Write(ctx(t), tx, event(fmt.Sprintf("agg-%d", a), next[a]))
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			written.Add(1)
			time.Sleep(time.Millisecond)
		}
	})
	testkit.Eventually(t, 45*time.Second, "120 written and 100 relayed", func() bool {
		return written.Load() >= 120 && e.Count("processed_at IS NOT NULL") >= 100
	})

	// Small batches (whole aggregates), paced: the replay runs for a while
	// and live events keep arriving between its batches.
	res, err := e.Admin().Replay(ctx(t), admin.ReplaySelector{AggregateType: "order", Mode: mode, Rate: 300, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Queued == 0 || res.Queued != res.Selected {
		t.Fatalf("replay = %+v, want every selected event queued", res)
	}
	time.Sleep(50 * time.Millisecond) // live events after the replay too
	close(stopW)
	writerWG.Wait()
	testkit.Eventually(t, 45*time.Second, "every event relayed", func() bool { return e.Count("processed_at IS NULL") == 0 })
	stop()

	total := int(written.Load()) + int(res.Queued)
	msgs := b.Read(t, total)
	byAgg := map[string][]inbox.Message{}
	for _, m := range msgs {
		byAgg[m.AggregateID] = append(byAgg[m.AggregateID], m)
	}
	var copies int
	original := map[uuid.UUID]int{} // live event id -> n
	for agg, ms := range byAgg {
		var seq []string
		lastLive, lastCopy, firstCopy, lastCopyAt := 0, 0, -1, -1
		for i, m := range ms {
			n := payloadN(t, m.Payload)
			if !m.IsReplay() {
				seq = append(seq, fmt.Sprint(n))
				if n != lastLive+1 {
					t.Errorf("%s: live event %d after %d (lost or inverted)", agg, n, lastLive)
				}
				lastLive = n
				original[m.ID] = n
				continue
			}
			seq = append(seq, fmt.Sprintf("%d'", n))
			copies++
			if m.ReplayID != res.ID {
				t.Errorf("%s: copy with replay id %s, want %s", agg, m.ReplayID, res.ID)
			}
			if n != lastCopy+1 {
				t.Errorf("%s: replayed event %d after replayed %d: not in original order", agg, n, lastCopy)
			}
			lastCopy = n
			if firstCopy < 0 {
				firstCopy = i
			}
			lastCopyAt = i
		}
		if firstCopy >= 0 && lastCopyAt-firstCopy+1 != lastCopy {
			t.Errorf("%s: live events interleaved with the replayed ones: %s", agg, strings.Join(seq, " "))
		}
	}
	if copies != int(res.Queued) {
		t.Errorf("%d copies on the broker, want %d", copies, res.Queued)
	}

	// The consumers' view.
	if _, err := inbox.Migrate(ctx(t), e.Pool, inbox.MigrateConfig{Schema: e.Schema}); err != nil {
		t.Fatal(err)
	}
	old, err := inbox.New(e.Pool, inbox.Config{Consumer: "old", Schema: e.Schema})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := inbox.New(e.Pool, inbox.Config{Consumer: "fresh", Schema: e.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var oldRan, freshRan int
	for _, m := range msgs {
		if mode == admin.ReplayNewID && m.IsReplay() {
			if n, ok := original[m.ReplayOf]; !ok || n != payloadN(t, m.Payload) {
				t.Errorf("copy %s: ReplayOf %s is not the original of event %d", m.ID, m.ReplayOf, payloadN(t, m.Payload))
			}
		}
		if mode == admin.ReplaySameID && m.IsReplay() {
			if _, ok := original[m.ID]; !ok {
				t.Errorf("same-id copy %s does not carry an original id", m.ID)
			}
		}
		if _, err := old.Handle(ctx(t), m, func(context.Context, pgx.Tx) error { oldRan++; return nil }); err != nil {
			t.Fatal(err)
		}
		if m.IsReplay() {
			if _, err := fresh.Handle(ctx(t), m, func(context.Context, pgx.Tx) error { freshRan++; return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantOld := int(written.Load())
	if mode == admin.ReplayNewID {
		wantOld += copies // fresh ids: processed again, on purpose
	}
	if oldRan != wantOld || freshRan != copies {
		t.Errorf("handlers ran %d times for the existing consumer (want %d) and %d for the new one (want %d)", oldRan, wantOld, freshRan, copies)
	}
}
