package engine

import (
	"sync"
	"time"

	"github.com/pgoutbox/outbox/internal/rate"
)

// rateMeter estimates how fast events arrive, from what the claims find, and
// turns it into the pace of claims: under a light stream a woken worker
// claims at once (latency first: each claim carries a handful of events and
// the machine has room), under a heavy one the relay claims every
// BatchDelay or so, whatever wakes it, so each claim carries many. A claim costs the database and the relay about the
// same whether it returns 3 events or 300, and on a busy machine that cost
// is taken from the writers (BENCHMARKS.md, write cost).
type rateMeter struct {
	delayMax time.Duration // BatchDelay
	above    float64       // BatchDelayAbove, events/s: no delay at or below

	mu sync.Mutex
	w  rate.Window
}

func newRateMeter(delayMax time.Duration, above int) *rateMeter {
	return &rateMeter{delayMax: delayMax, above: float64(above), w: rate.Window{Span: 100 * time.Millisecond}}
}

// observe records a claim that found n events at now.
func (m *rateMeter) observe(now time.Time, n int) {
	if m.delayMax <= 0 {
		return
	}
	m.mu.Lock()
	m.w.Add(now, n)
	m.mu.Unlock()
}

// delay is the pace of claims under the current stream: none (follow
// wake-ups) up to above events/s, rising linearly to delayMax at twice
// that rate.
func (m *rateMeter) delay(now time.Time) time.Duration {
	if m.delayMax <= 0 {
		return 0
	}
	m.mu.Lock()
	r := m.w.Rate(now)
	m.mu.Unlock()
	return time.Duration(rate.Ramp(r, m.above) * float64(m.delayMax))
}
