package engine

import (
	"context"
	"time"
)

// Result summarizes one batch.
type Result struct {
	Claimed        int
	Full           bool // Claimed reached the batch size in force
	Published      int
	Retried        int // transient failures, attempt counted
	DeadLettered   int
	Unavailable    int // left untouched: broker down
	UnavailableErr error
	// UnavailableWait is the longest wait the destination asked for with
	// its refusals (Retry-After), capped at maxRequestedDelay.
	UnavailableWait time.Duration
}

// Batch claims, publishes, settles and records one batch. Once rows are
// claimed the batch runs to its end even if ctx is cancelled (bounded by the
// publish timeout), so shutdown never wastes a confirmed publish; it never
// records a row the broker did not confirm as published.
func (e *Engine) Batch(ctx context.Context) (Result, error) { return e.batch(ctx, false) }

// batch is Batch; a worker's batch (worker) also leaves its rows alone
// while the workers back off from a record that failed (unrecorded.go).
func (e *Engine) batch(ctx context.Context, worker bool) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	e.lastClaim.Store(start.UnixNano())
	c, err := e.claim(ctx, start)
	if err != nil {
		return Result{}, err
	}
	// From here on the batch is finished with a context that shutdown does
	// not cancel; the lease gives back whatever is not recorded.
	bg := context.WithoutCancel(ctx)
	defer c.lease.release(bg)
	res := Result{Claimed: len(c.rows), Full: c.full}
	if worker && len(c.rows) > 0 && e.marks.holding() {
		// Another worker's batch just failed to record these very rows,
		// perhaps: they wait for the backoff, untouched.
		return Result{}, c.lease.commit(bg)
	}
	if len(c.rows) == 0 {
		return res, c.lease.commit(bg)
	}
	return e.deliver(ctx, bg, c, res)
}

// deliver publishes a claim's rows, settles and reports their outcomes,
// records them through the claim's lease and observes the batch: the path
// the batches of both sources share. bg is the batch's context that
// shutdown does not cancel.
func (e *Engine) deliver(ctx, bg context.Context, c *claim, res Result) (Result, error) {
	attempts := e.publishBatch(bg, c.rows)
	ackedAt := time.Now()
	e.adaptLimit(c.limit, len(c.rows), ackedAt.Sub(c.at))

	s := e.settle(c.rows, attempts)
	e.report(c.rows, s)
	res.Retried, res.DeadLettered = s.retried, s.dead
	res.Unavailable, res.UnavailableErr, res.UnavailableWait = s.unavailable, s.unavailableErr, s.unavailableWait
	if c.lease.idle(c.rows, s) {
		e.Signals.Batch.Send(res)
		return res, nil
	}

	if err := c.lease.record(bg, c.rows, s); err != nil {
		return res, err
	}
	if s.published+s.retried+s.dead > 0 {
		e.stuck.moved(time.Now())
	}
	res.Published = s.published
	e.observe(ctx, c, s, ackedAt)
	e.Signals.Batch.Send(res)
	return res, nil
}
