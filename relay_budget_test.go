package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// batchRecorder is a BatchPublisher that records each batch's size.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][2]int // rows, payload and header bytes
	ids     map[[16]byte]bool
}

func (b *batchRecorder) Publish(ctx context.Context, m *outbox.Message) error {
	return b.PublishBatch(ctx, []*outbox.Message{m})[0]
}

func (b *batchRecorder) PublishBatch(_ context.Context, msgs []*outbox.Message) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range msgs {
		n += len(m.Payload)
		for k, v := range m.Headers {
			n += len(k) + len(v)
		}
		b.ids[m.ID] = true
	}
	b.batches = append(b.batches, [2]int{len(msgs), n})
	return make([]error, len(msgs))
}

// TestBatchByteBudget: a claim keeps rows until their payloads pass
// MaxBatchBytes, at least one row per batch, whatever BatchSize; the rest
// come in the next batches, in order, and every event is delivered.
func TestBatchByteBudget(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			// Payloads of ~100 KB (random hex: stored compressed at about
			// half, well over the size a claim returns inline), one of
			// 600 KB (over the budget alone), and small ones between them.
			const budget = 250_000
			want := 0
			err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
				var evs []outbox.Event
				for i := range 20 {
					size := 20
					switch {
					case i == 9:
						size = 300_000
					case i%2 == 0:
						size = 50_000
					}
					buf := make([]byte, size)
					rand.Read(buf)
					evs = append(evs, outbox.Event{AggregateType: "order", AggregateID: fmt.Sprintf("o-%d", i%3),
						EventType: "order.created", Payload: fmt.Appendf(nil, `{"n":%d,"pad":%q}`, i, hex.EncodeToString(buf))})
				}
				want = len(evs)
				_, err := e.writer.Write(ctx(t), tx, evs...)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			pub := &batchRecorder{ids: map[[16]byte]bool{}}
			r := e.relay(pub, outbox.RelayConfig{Ordered: ordered, BatchSize: 1000, MaxBatchBytes: budget})
			for range 100 {
				res, err := r.ProcessBatch(ctx(t))
				if err != nil {
					t.Fatal(err)
				}
				if res.Claimed == 0 {
					break
				}
			}
			pub.mu.Lock()
			defer pub.mu.Unlock()
			t.Logf("batches (rows, payload bytes): %v", pub.batches)
			if len(pub.ids) != want {
				t.Fatalf("%d of %d events published", len(pub.ids), want)
			}
			over := 0
			for _, b := range pub.batches {
				if b[1] > budget && b[0] > 1 {
					t.Errorf("a batch of %d rows carried %d payload bytes, over the budget of %d", b[0], b[1], budget)
				}
				if b[1] > budget {
					over++
				}
			}
			if over != 1 {
				t.Errorf("%d batches over the budget; want exactly one, the 600 KB payload alone", over)
			}
			if len(pub.batches) < 5 {
				t.Errorf("%d batches for ~1.1 MB of payload at a %d-byte budget; want at least 5", len(pub.batches), budget)
			}
		})
	}
}

// TestBatchByteBudgetCountsHeaders: headers count in MaxBatchBytes with
// either source. Rows whose headers a plain INSERT made large (1 MB each)
// come a few per batch, never all at once, and the small events between
// them are delivered.
func TestBatchByteBudgetCountsHeaders(t *testing.T) {
	for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
		t.Run(string(source), func(t *testing.T) {
			var e *env
			if source == outbox.SourceWAL {
				e, _ = setupWAL(t)
			} else {
				e = setup(t)
			}
			const budget = 1_500_000
			pub := &batchRecorder{ids: map[[16]byte]bool{}}
			cfg := outbox.RelayConfig{BatchSize: 1000, MaxBatchBytes: budget}
			var r *outbox.Relay
			if source == outbox.SourceWAL {
				r = e.relay(pub, walConfig(cfg))
				e.run(r)
				waitStreaming(t, r, 30*time.Second)
			}
			big := strings.Repeat("x", 1<<20)
			err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
				for i := range 10 {
					if _, err := tx.Exec(ctx(t), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
VALUES ('order', $1, 'order.created', '{}', jsonb_build_object('pad', $2::text))`, fmt.Sprint("big-", i), big); err != nil {
						return err
					}
					if _, err := e.writer.Write(ctx(t), tx, event(fmt.Sprint("small-", i), i)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if source == outbox.SourceTable {
				r = e.relay(pub, cfg)
				for range 100 {
					res, err := r.ProcessBatch(ctx(t))
					if err != nil {
						t.Fatal(err)
					}
					if res.Claimed == 0 {
						break
					}
				}
			}
			published := func() int {
				pub.mu.Lock()
				defer pub.mu.Unlock()
				return len(pub.ids)
			}
			testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of 20 published", published()) }), 30*time.Second,
				"the 20 events published", func() bool { return published() == 20 })
			pub.mu.Lock()
			defer pub.mu.Unlock()
			for _, b := range pub.batches {
				if b[1] > budget && b[0] > 1 {
					t.Errorf("a batch of %d rows carried %d bytes of payload and headers, over the budget of %d", b[0], b[1], budget)
				}
			}
		})
	}
}
