package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pgoutbox/outbox/outboxtype"
)

// worker runs batches back to back while they come back full, waits for the
// relay's poll or a wake-up when they do not, and backs off while the
// database or the broker is down.
func (e *Engine) worker(ctx context.Context, id int) {
	log := e.cfg.Logger.With("worker", id)
	outages := 0 // database errors, this worker's
	for ctx.Err() == nil {
		if !e.outage.wait(ctx) || !e.marks.wait(ctx) {
			return
		}
		start := time.Now()
		res, err := e.batch(ctx, true)
		var wait time.Duration
		poll := false
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			e.stuck.batchFailed(err)
			if e.cfg.Metrics != nil {
				e.cfg.Metrics.DBErrors.Inc()
			}
			if u := (*unrecordedError)(nil); errors.As(err, &u) {
				wait = u.wait
				log.Error("outbox relay published events but could not record them; they stay pending and will be published again with the same event ids (consumers drop the copies); all workers back off",
					"events", u.published, "phase", phaseOf(err), "err", err, "retry_in", wait)
				break
			}
			outages++
			wait = e.cfg.OutageBackoff.Delay(outages)
			if timedOut(err) {
				log.Error("outbox relay statement timed out; connection discarded, retrying on a fresh one",
					"phase", phaseOf(err), "statement_timeout", e.cfg.StatementTimeout, "err", err, "retry_in", wait)
				break
			}
			log.Error("outbox relay batch failed", "phase", phaseOf(err), "err", e.explained(ctx, err), "retry_in", wait)
		case res.Unavailable > 0:
			outages = 0
			// The destination may have said how long to leave it alone.
			wait = e.outage.failed(e.cfg.OutageBackoff, res.UnavailableWait)
			log.Warn("broker unavailable, relay backing off; no attempt counted",
				"events", res.Unavailable, "err", res.UnavailableErr, "retry_in", wait)
		case res.Full:
			outages = 0
			e.outage.reached(res)
			e.marks.reached(res)
			e.pollDue.Store(0) // a backlog: every worker whose poll comes due joins in
			continue           // a full batch: more is likely waiting
		default:
			outages = 0
			e.outage.reached(res)
			e.marks.reached(res)
			e.polled(start)
			wait, poll = e.cfg.PollInterval, true
			e.Signals.Idle.Send(id)
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

// outageState is the relay's backoff while the destination is down,
// shared by its workers: one worker finding the broker down holds them all
// back, and only a batch that reached the destination (published or failed
// a row) ends the outage. A worker's empty claim, which says nothing of
// the broker (another worker held the rows), no longer resets it.
type outageState struct {
	mu    sync.Mutex
	n     int       // consecutive unavailable batches
	until time.Time // no claim before then
}

// failed counts an unavailable batch and returns the wait before the next
// claim: the backoff's, or longer if the destination asked.
func (o *outageState) failed(b outboxtype.Backoff, asked time.Duration) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	wait := max(b.Delay(o.n), asked)
	if u := time.Now().Add(wait); u.After(o.until) {
		o.until = u
	}
	return wait
}

// reached ends the outage when res reached the destination.
func (o *outageState) reached(res Result) {
	if res.Published+res.Retried+res.DeadLettered == 0 {
		return
	}
	o.mu.Lock()
	o.n, o.until = 0, time.Time{}
	o.mu.Unlock()
}

// holding reports whether the backoff has not passed yet.
func (o *outageState) holding() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return time.Now().Before(o.until)
}

// failing reports whether the last batches failed and none reached since.
func (o *outageState) failing() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n > 0
}

// wait blocks until the outage's backoff has passed; false when ctx ends.
func (o *outageState) wait(ctx context.Context) bool {
	o.mu.Lock()
	d := time.Until(o.until)
	o.mu.Unlock()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
