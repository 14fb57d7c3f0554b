package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// batchPub is a BatchPublisher over memory.Publisher: each message on its
// own, every result reported.
type batchPub struct{ *memory.Publisher }

func (b batchPub) PublishBatch(ctx context.Context, msgs []*outbox.Message) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = b.Publish(ctx, m)
	}
	return errs
}

// TestUnavailableAloneCountsAttempts: a message whose publish always fails
// with an unavailable-class error (say it always resets the connection)
// while the destination takes the other messages is failing alone, not a
// destination outage: it burns attempts and ends as a dead letter after
// MaxAttempts, and every other event is delivered. A real outage (every
// message failing) still burns none (TestOutage* tests).
func TestUnavailableAloneCountsAttempts(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			e := setup(t)
			poison := e.write(1)[0] // the first in the table: first of every batch
			e.write(20)
			mem := memory.New()
			var mu sync.Mutex
			tries := 0
			mem.FailWith(func(m *outbox.Message) error {
				if uuid.UUID(m.ID) != poison {
					return nil
				}
				mu.Lock()
				tries++
				mu.Unlock()
				return outbox.Unavailable(errors.New("connection reset by peer"))
			})
			var pub outbox.Publisher = mem
			if batch {
				pub = batchPub{mem}
			}
			const maxAttempts = 3
			r := e.relay(pub, outbox.RelayConfig{MaxAttempts: maxAttempts, PollInterval: 5 * time.Millisecond,
				RetryBackoff:   outbox.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
				OutageBackoff:  outbox.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
				RescanInterval: 20 * time.Millisecond})
			e.run(r)
			if err := mem.WaitDistinct(ctx(t), 20); err != nil {
				t.Fatal(err)
			}
			// Other events keep coming: the destination is seen taking them.
			deadline := time.Now().Add(10 * time.Second)
			more := 0
			for e.count("dead_at IS NOT NULL") == 0 && time.Now().Before(deadline) {
				e.write(1)
				more++
				time.Sleep(20 * time.Millisecond)
			}
			var attempts int
			var dead bool
			if err := e.pool.QueryRow(ctx(t), "SELECT attempts, dead_at IS NOT NULL FROM outbox_events WHERE id = $1", poison).Scan(&attempts, &dead); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			n := tries
			mu.Unlock()
			if !dead || attempts != maxAttempts {
				t.Fatalf("the message failing alone: attempts %d, dead letter %v after %d publishes; want %d attempts and a dead letter",
					attempts, dead, n, maxAttempts)
			}
			if err := mem.WaitDistinct(ctx(t), 20+more); err != nil {
				t.Errorf("%d of the %d other events published: %v", mem.Distinct(), 20+more, err)
			}
		})
	}
}

// TestOutageBackoffSharedByWorkers: with several workers and a broker that
// refuses everything, the relay's backoff grows as with one worker. Before,
// a worker whose claim came back empty (another worker held the rows)
// reset its own count, and the waits stayed at the first step: 55 WARN
// lines in 30 s, retry_in 125-250 ms with the default two workers.
func TestOutageBackoffSharedByWorkers(t *testing.T) {
	e := setup(t)
	e.write(5)
	mem, _ := downPublisher()
	logs := &logRecorder{}
	base := 20 * time.Millisecond
	r := e.relay(mem, outbox.RelayConfig{Workers: 4, PollInterval: 10 * time.Millisecond,
		OutageBackoff: outbox.Backoff{Base: base, Max: time.Second},
		Logger:        slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	stop := e.run(r)
	time.Sleep(2 * time.Second)
	stop()
	var waits []time.Duration
	for _, line := range strings.Split(logs.String(), "\n") {
		_, after, ok := strings.Cut(line, "retry_in=")
		if !ok || !strings.Contains(line, "broker unavailable") {
			continue
		}
		d, err := time.ParseDuration(strings.Fields(after)[0])
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, d)
	}
	// 20, 40, 80, ... ms: about 7 waits in 2 s, the last several of them
	// 320 ms or more. Workers that kept resetting waited 20 ms each, about
	// 400 times.
	if len(waits) == 0 || len(waits) > 15 || slices.Max(waits) < 16*base {
		t.Fatalf("%d outage waits in 2 s, the longest %v; want a backoff growing towards 1 s: %v", len(waits), slices.Max(append(waits, 0)), waits)
	}
	if n := mem.Len(); n != 0 {
		t.Errorf("%d messages recorded by a broker that is down", n)
	}
}

// TestThrottledAloneCountsNoAttempt: a message the destination keeps
// refusing alone as unavailable with a wait (a throttled Kinesis shard,
// while the other shards take their records) is back-pressure: it waits
// its turn with retry_after set and no attempt counted, never a dead
// letter, and is delivered once the destination takes it.
func TestThrottledAloneCountsNoAttempt(t *testing.T) {
	e := setup(t)
	hot := e.write(1)[0]
	e.write(20)
	var throttled atomic.Bool
	throttled.Store(true)
	mem := memory.New()
	mem.FailWith(func(m *outbox.Message) error {
		if m.ID == hot && throttled.Load() {
			return outbox.Unavailable(outbox.RetryAfter(errors.New("throughput exceeded (test)"), 30*time.Millisecond))
		}
		return nil
	})
	r := e.relay(batchPub{mem}, outbox.RelayConfig{MaxAttempts: 2, PollInterval: 10 * time.Millisecond,
		RetryBackoff:  outbox.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	if err := mem.WaitDistinct(ctx(t), 20); err != nil {
		t.Fatal(err)
	}
	// Events written meanwhile keep the destination busy beside the hot
	// one, so that it is seen failing alone.
	written := 21
	deadline := time.Now().Add(10 * time.Second)
	for e.count(fmt.Sprintf("id = '%s' AND last_error IS NOT NULL", hot)) == 0 && time.Now().Before(deadline) {
		e.write(1)
		written++
		time.Sleep(20 * time.Millisecond)
	}
	sig.Batch.Drain()
	sig.Batch.WaitN(t, 10, 10*time.Second) // many more rounds than MaxAttempts
	if n := e.count(fmt.Sprintf("id = '%s' AND dead_at IS NULL AND attempts = 0 AND retry_after IS NOT NULL", hot)); n != 1 {
		var attempts int
		var dead bool
		_ = e.pool.QueryRow(ctx(t), `SELECT attempts, dead_at IS NOT NULL FROM outbox_events WHERE id = $1`, hot).Scan(&attempts, &dead)
		t.Fatalf("the throttled event: attempts %d, dead %v; want waiting with no attempt counted", attempts, dead)
	}
	throttled.Store(false)
	if err := mem.WaitDistinct(ctx(t), written); err != nil {
		t.Fatalf("the throttled event was not delivered once accepted: %v", err)
	}
}
