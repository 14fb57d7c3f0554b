package outbox_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestOutageBackoffHonoursRetryAfter: a destination that refuses
// everything and asks to be left alone for a while (HTTP 503 with
// Retry-After, a throttled API) is not asked again before then, however
// short the outage backoff; no attempt is counted.
func TestOutageBackoffHonoursRetryAfter(t *testing.T) {
	e := setup(t)
	e.write(3)
	mem := memory.New()
	var calls atomic.Int64
	mem.FailWith(func(*outbox.Message) error {
		calls.Add(1)
		return outbox.Unavailable(outbox.RetryAfter(errors.New("503 Service Unavailable"), time.Second))
	})
	r := e.relay(mem, outbox.RelayConfig{Workers: 1, PollInterval: 5 * time.Millisecond,
		OutageBackoff: outbox.Backoff{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}})
	stop := e.run(r)
	testkit.Eventually(t, 10*time.Second, "the first publish", func() bool { return calls.Load() > 0 })
	time.Sleep(1500 * time.Millisecond)
	stop()
	// Each batch publishes until the first refusal and probes the next
	// message: two calls per batch, one batch per Retry-After.
	if n := calls.Load(); n == 0 || n > 4 {
		t.Errorf("%d publishes in 1.5s with Retry-After 1s; want 1 or 2 batches (2 publishes each), not one per outage backoff (20ms)", n)
	}
	if n := e.count("attempts > 0"); n != 0 {
		t.Errorf("%d events burned attempts during the outage", n)
	}
}
