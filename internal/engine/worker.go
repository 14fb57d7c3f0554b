package engine

import (
	"context"
	"time"
)

// worker runs batches back to back while they come back full, waits for the
// poll or a wake-up when they do not, and backs off while the database or
// the broker is down.
func (e *Engine) worker(ctx context.Context, id int) {
	log := e.cfg.Logger.With("worker", id)
	outages := 0
	for ctx.Err() == nil {
		res, err := e.Batch(ctx)
		var wait time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			outages++
			if e.cfg.Metrics != nil {
				e.cfg.Metrics.DBErrors.Inc()
			}
			wait = e.cfg.OutageBackoff.Delay(outages)
			if timedOut(err) {
				log.Error("outbox relay statement timed out; connection discarded, retrying on a fresh one",
					"phase", phaseOf(err), "statement_timeout", e.cfg.StatementTimeout, "err", err, "retry_in", wait)
				break
			}
			log.Error("outbox relay batch failed", "phase", phaseOf(err), "err", err, "retry_in", wait)
		case res.Unavailable > 0:
			outages++
			// The destination may have said how long to leave it alone.
			wait = max(e.cfg.OutageBackoff.Delay(outages), res.UnavailableWait)
			log.Warn("broker unavailable, relay backing off; no attempt counted",
				"events", res.Unavailable, "err", res.UnavailableErr, "retry_in", wait)
		case res.Full:
			outages = 0
			continue // a full batch: more is likely waiting
		default:
			outages = 0
			wait = e.cfg.PollInterval
		}
		if !e.waitForWork(ctx, wait, err == nil && res.Unavailable == 0) {
			return
		}
	}
}

// waitForWork waits d, or until a wake-up when wakeable; false when ctx is
// done. A wake-up is paced under a heavy stream (wakeClaim): the relay then
// claims once per BatchDelay however many wake-ups arrive, while the poll
// keeps its own pace.
func (e *Engine) waitForWork(ctx context.Context, d time.Duration, wakeable bool) bool {
	deadline := time.Now().Add(d)
	for {
		woken, ok := e.wait(ctx, time.Until(deadline), wakeable)
		if !ok || !woken {
			return ok
		}
		wait, claim, paced := e.wakeClaim(time.Now())
		switch {
		case !claim:
			continue // another woken worker claims for both
		case !paced:
			return true
		}
		ok = e.sleep(ctx, wait, false)
		e.wakeDone()
		return ok
	}
}

// sleep waits d, or until a wake-up when wakeable; false when ctx is done.
func (e *Engine) sleep(ctx context.Context, d time.Duration, wakeable bool) bool {
	_, ok := e.wait(ctx, d, wakeable)
	return ok
}

// wait is sleep that also says whether a wake-up ended it.
func (e *Engine) wait(ctx context.Context, d time.Duration, wakeable bool) (woken, ok bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake <-chan struct{}
	if wakeable {
		wake = e.wake
	}
	select {
	case <-ctx.Done():
		return false, false
	case <-t.C:
		return false, true
	case <-wake:
		return true, true
	}
}
