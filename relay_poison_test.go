package outbox_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// writeLarge commits one event with a payload of about size bytes that
// PostgreSQL cannot compress.
func (e *env) writeLarge(size int) {
	e.t.Helper()
	buf := make([]byte, size/2)
	rand.Read(buf)
	// Past the Writer's default limit on purpose: the relay must cope with
	// such rows however they got in (a plain INSERT, a raised limit).
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema, MaxPayloadBytes: -1})
	if err != nil {
		e.t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx(e.t), e.pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx(e.t), tx, outbox.Event{AggregateType: "order", AggregateID: "big",
			EventType: "order.created", Payload: fmt.Appendf(nil, `{"pad":%q}`, hex.EncodeToString(buf))})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestLargeRowAttemptsCountedOnce: the attempt of a large row is counted
// when it is fetched (so a relay that dies holding it has counted it);
// a failed publish then counts one attempt, not two, and an outage or a
// successful publish none.
func TestLargeRowAttemptsCountedOnce(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			e.writeLarge(2 << 20)
			e.write(3)
			mem := memory.New()
			fail := outbox.Unavailable(errors.New("broker down"))
			mem.FailWith(func(*outbox.Message) error { return fail })
			r := e.relay(mem, outbox.RelayConfig{Ordered: ordered, MaxAttempts: 5,
				RescanInterval: time.Millisecond,
				RetryBackoff:   outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond}})
			for range 3 {
				if _, err := r.ProcessBatch(ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
			if n := e.count("attempts > 0"); n != 0 {
				t.Fatalf("%d rows burned attempts during an outage", n)
			}
			fail = errors.New("transient failure")
			for i := 1; i <= 2; i++ {
				if _, err := r.ProcessBatch(ctx(t)); err != nil {
					t.Fatal(err)
				}
				var attempts int
				if err := e.pool.QueryRow(ctx(t), `SELECT attempts FROM outbox_events WHERE aggregate_id = 'big'`).Scan(&attempts); err != nil {
					t.Fatal(err)
				}
				if attempts != i {
					t.Fatalf("after %d failed publishes the large row has attempts=%d", i, attempts)
				}
				time.Sleep(5 * time.Millisecond) // the retry comes due
			}
			fail = nil
			if _, err := r.ProcessBatch(ctx(t)); err != nil {
				t.Fatal(err)
			}
			var attempts int
			var processed bool
			if err := e.pool.QueryRow(ctx(t), `SELECT attempts, processed_at IS NOT NULL FROM outbox_events WHERE aggregate_id = 'big'`).Scan(&attempts, &processed); err != nil {
				t.Fatal(err)
			}
			if !processed || attempts != 2 {
				t.Fatalf("after two failures and a success: processed %v, attempts %d; want true, 2 (attempts counts failures)", processed, attempts)
			}
		})
	}
}
