package engine

import (
	"context"
	"time"
)

// worker runs batches back to back while they come back full, waits for the
// relay's poll or a wake-up when they do not, and backs off while the
// database or the broker is down.
func (e *Engine) worker(ctx context.Context, id int) {
	log := e.cfg.Logger.With("worker", id)
	outages := 0
	for ctx.Err() == nil {
		start := time.Now()
		res, err := e.Batch(ctx)
		var wait time.Duration
		poll := false
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
			e.pollDue.Store(0) // a backlog: every worker whose poll comes due joins in
			continue           // a full batch: more is likely waiting
		default:
			outages = 0
			e.polled(start)
			wait, poll = e.cfg.PollInterval, true
		}
		if !e.waitForWork(ctx, wait, err == nil && res.Unavailable == 0, poll) {
			return
		}
	}
}

// waitForWork waits d, or until a wake-up when wakeable; false when ctx is
// done. A wake-up is paced under a heavy stream (wakeClaim): the relay then
// claims once per BatchDelay however many wake-ups arrive. A poll (d is
// PollInterval) is the relay's, not the worker's: when it comes due while
// another worker claimed less than PollInterval ago, the worker waits for
// the relay's next poll (takePoll).
func (e *Engine) waitForWork(ctx context.Context, d time.Duration, wakeable, poll bool) bool {
	deadline := time.Now().Add(d)
	for {
		woken, ok := e.wait(ctx, time.Until(deadline), wakeable)
		if !ok {
			return false
		}
		if !woken {
			if !poll {
				return true
			}
			due, claim := e.takePoll(time.Now())
			if claim {
				return true
			}
			deadline = due
			continue
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

// The relay polls, not each worker: an idle relay claims about once per
// PollInterval whatever its Workers, and under a stream whose wake-ups keep
// it claiming, the workers' polls add no claim, each of which would cost
// the writers as much as a woken one. Every claim that came back short
// moves the next poll to PollInterval after its start: it saw what a poll
// would have seen. A full claim makes the poll due at once, so that the
// idle workers join a backlog.

// takePoll is called when a worker's poll timer fires at now: it either
// takes the relay's poll (claim now) or says when the poll is due.
func (e *Engine) takePoll(now time.Time) (due time.Time, claim bool) {
	for {
		d := e.pollDue.Load()
		if now.UnixNano() < d {
			return time.Unix(0, d), false
		}
		if e.pollDue.CompareAndSwap(d, now.Add(e.cfg.PollInterval).UnixNano()) {
			return time.Time{}, true
		}
	}
}

// polled records a claim that started at start and came back short.
func (e *Engine) polled(start time.Time) {
	next := start.Add(e.cfg.PollInterval).UnixNano()
	for {
		d := e.pollDue.Load()
		if d >= next || e.pollDue.CompareAndSwap(d, next) {
			return
		}
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
