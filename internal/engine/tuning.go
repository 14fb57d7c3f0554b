package engine

import (
	"sync"
	"time"

	"github.com/pgoutbox/outbox/internal/rate"
)

// The engine tunes three things as it goes, each from what the batches show:
// the batch size (adaptLimit: smaller while publishes are slow), the ordered
// claim (adaptSparse and adaptWindow: the sparse claim while few aggregates
// hold the queue), and the pace of claims (rateMeter: spaced out under a
// heavy stream: wakeClaim).

// tuneClaim reads what a claim found: whether more rows are likely waiting
// (full), and, in ordered mode, which claim the next batch should use.
func (e *Engine) tuneClaim(p claimPlan, rows []*Row, more bool) (full bool) {
	n := len(rows)
	switch {
	case p.sparse:
		e.adaptWindow(n == p.limit)
		e.adaptSparse(rows)
	case e.cfg.Ordered && n < p.limit/2 && (more || n == 0):
		// The dense claim's rows were mostly events waiting behind an
		// earlier one: in flight elsewhere, or failing and not parked yet
		// (a hot aggregate's events arrive faster than the housekeeping
		// parks them). The sparse claim looks past such runs.
		e.sparse.Store(true)
	case e.cfg.Ordered:
		e.adaptSparse(rows)
	}
	// An ordered claim can lock a whole batch of rows and keep only the
	// heads among them: more says so.
	return n == p.limit || more
}

// adaptLimit keeps batches well inside the publish timeout: a batch of
// limit rows whose publish took more than a quarter of PublishTimeout
// halves the batch size of the claims that follow (a slow webhook endpoint
// or broker then still confirms whole batches instead of timing out and
// counting attempts), and a full batch published in a sixteenth of it
// doubles the size again, up to BatchSize.
func (e *Engine) adaptLimit(limit, claimed int, took time.Duration) {
	switch {
	case took > e.cfg.PublishTimeout/4 && limit > 1:
		next := max(1, limit/2)
		if e.limit.CompareAndSwap(int64(limit), int64(next)) {
			e.cfg.Logger.Info("outbox publishes are slow; claiming smaller batches",
				"batch_size", next, "publish_took", took, "publish_timeout", e.cfg.PublishTimeout)
		}
	case claimed == limit && limit < e.cfg.BatchSize && took < e.cfg.PublishTimeout/16:
		e.limit.CompareAndSwap(int64(limit), int64(min(e.cfg.BatchSize, limit*2)))
	}
}

// The sparse ordered claim's window, in multiples of the batch size. Every
// sparse claim reads its whole window, and the workers that find every head
// taken by another one come back empty and grow it: a wide window makes
// those idle claims read many rows each, taking the database's and the
// relay's CPU from the worker doing the work. maxWindow batches still look
// past runs of that many batches of events that wait behind a failing event
// and are not parked yet.
const (
	minWindow = 2
	maxWindow = 8
)

// adaptWindow sizes the sparse ordered claim's window: twice the batch
// size while claims come back full, doubling (up to maxWindow) while they
// do not, so that rows that wait behind an earlier event at the front of
// the queue do not hide the heads behind them.
func (e *Engine) adaptWindow(full bool) {
	w := e.window.Load()
	switch {
	case full && w > minWindow:
		e.window.CompareAndSwap(w, w/2)
	case !full && w < maxWindow:
		e.window.CompareAndSwap(w, w*2)
	}
}

// adaptSparse picks the ordered claim for the next batch from the shape of
// this one: mostly runs (fewer heads than a quarter of the rows) means few
// aggregates hold the queue, and the claim that probes one row per
// aggregate is cheaper; mostly heads (at least half the rows) means many
// aggregates, and the dense claim is (lock the first rows, keep the heads).
func (e *Engine) adaptSparse(batch []*Row) {
	if len(batch) < 8 {
		return // too few rows to tell
	}
	heads := 0
	for _, r := range batch {
		if !r.Follower {
			heads++
		}
	}
	if heads*2 >= len(batch) {
		e.sparse.Store(false)
		return
	}
	if heads*4 < len(batch) {
		e.sparse.Store(true)
	}
}

// rateMeter estimates how fast events arrive, from what the claims find, and
// turns it into the pace of claims: under a light stream a woken worker
// claims at once (latency first: each claim carries a handful of events and
// the machine has room), under a heavy one the relay claims every
// BatchDelay, whatever wakes it, so each claim carries many. A claim costs
// the database and the relay about the same whether it returns 3 events or
// 300, and on a busy machine that cost is taken from the writers. The
// stream stays heavy until it falls well below BatchDelayAbove (rate.Gate):
// writers slowed by the claims must not get a claim per wake-up back.
type rateMeter struct {
	delayMax time.Duration // BatchDelay

	mu   sync.Mutex
	w    rate.Window
	gate rate.Gate // Above: BatchDelayAbove, events/s
}

// rateSpan is the window the claim pace is measured over: short enough to
// see a burst start, long enough to hold several claims.
const rateSpan = 100 * time.Millisecond

func newRateMeter(delayMax time.Duration, above int) *rateMeter {
	return &rateMeter{delayMax: delayMax, w: rate.Window{Span: rateSpan}, gate: rate.Gate{Above: float64(above)}}
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
// wake-ups) while it is light, delayMax while it is heavy.
func (m *rateMeter) delay(now time.Time) time.Duration {
	if m.delayMax <= 0 {
		return 0
	}
	m.mu.Lock()
	heavy := m.gate.Heavy(m.w.Rate(now))
	m.mu.Unlock()
	if heavy {
		return m.delayMax
	}
	return 0
}

// wakeClaim decides what a worker woken at now by a notification or Wake
// does: claim (after wait when paced), or (claim false) leave the claim to
// another woken worker and go back to waiting. Under a light stream it
// claims at once (latency first). Under a heavy one (rateMeter) the
// wake-ups of the whole relay are coalesced into one claim per pace: a
// single worker claims, pace after the last claim of any worker, whatever
// wake-ups arrive meanwhile, so that each claim carries many events; that
// worker calls wakeDone when its wait is over. Only wake-ups are paced: a
// worker whose poll came due claims as it would without wake-ups, so a
// relay that is never woken claims no more often than PollInterval.
func (e *Engine) wakeClaim(now time.Time) (wait time.Duration, claim, paced bool) {
	pace := e.rate.delay(now)
	if pace <= 0 {
		return 0, true, false
	}
	if !e.pacing.CompareAndSwap(false, true) {
		return 0, false, false
	}
	at := time.Unix(0, e.lastClaim.Load()).Add(pace)
	return max(at.Sub(now), 0), true, true
}

// wakeDone ends a paced wait that wakeClaim started.
func (e *Engine) wakeDone() { e.pacing.Store(false) }
