package engine

import (
	"errors"
	"time"

	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/outboxtype"
)

// maxRequestedDelay caps a broker's Retry-After, so a hostile or buggy
// endpoint cannot park an event for years.
const maxRequestedDelay = 24 * time.Hour

// verdict is what becomes of one row of a batch.
type verdict uint8

const (
	published   verdict = iota // confirmed: recorded as processed
	untouched                  // not tried (behind an unconfirmed event of its aggregate): left as it was
	unavailable                // the destination is down: left as it was, no attempt counted
	retry                      // failed: attempt counted, claimable again after delay
	dead                       // failed for good: dead-lettered
)

// outcome is one row's verdict and what the record phase writes for it.
type outcome struct {
	verdict verdict
	err     error                 // the publish error; nil when published
	class   outboxtype.ErrorClass // err's class, after the batch-wide rules
	delay   time.Duration         // retry (and dead at MaxAttempts): the backoff
	// free: a retry that counts no attempt: the destination refused this
	// message alone for now and said when to come back (a throttled
	// partition or shard), which is back-pressure, not a failure.
	free bool
}

// settlement is the settle phase's result: one outcome per row, at the
// row's index, and how many of each.
type settlement struct {
	outcomes       []outcome
	published      int
	retried        int
	dead           int
	unavailable    int
	unavailableErr error // the last one, for the worker's log line
	// unavailableWait is the longest RetryAfter of the unavailable rows,
	// capped: the whole-destination backoff waits at least this long.
	unavailableWait time.Duration
}

// settle turns a batch's publish attempts into outcomes.
func (e *Engine) settle(rows []*Row, attempts []Attempt) *settlement {
	s := &settlement{outcomes: make([]outcome, len(rows))}
	anyOK := false
	for _, a := range attempts {
		if a.Err == nil {
			anyOK = true
			break
		}
	}
	// laterOK[i]: a row after row i was confirmed, so the destination was
	// reachable after row i failed.
	laterOK := make([]bool, len(rows))
	for i, ok := len(rows)-1, false; i >= 0; i-- {
		laterOK[i] = ok
		ok = ok || attempts[i].Err == nil
	}
	now := time.Now()
	for i, r := range rows {
		alone := false
		if a := attempts[i]; a.Err != nil && a.Class == outboxtype.ClassUnavailable && laterOK[i] {
			// Never on a row's first failure beside a confirmation: the
			// first messages of a batch often meet a connection the
			// broker closed (or one an outage left behind), and the next
			// ones a fresh one.
			alone = e.alone.failedAlone(r.ID, now)
		}
		o := e.settleRow(r, attempts[i], laterOK[i], alone)
		s.outcomes[i] = o
		switch o.verdict {
		case published:
			s.published++
		case unavailable:
			s.unavailable++
			s.unavailableErr = o.err
			s.unavailableWait = max(s.unavailableWait, min(attempts[i].RetryAfter, maxRequestedDelay))
		case retry:
			s.retried++
		case dead:
			s.dead++
		}
	}
	if anyOK {
		e.alone.published(rows, s)
	}
	return s
}

// settleRow decides one row's outcome. laterOK: a row after it in the
// batch was confirmed; alone: besides, the row failed unavailable so before
// (aloneTracker).
func (e *Engine) settleRow(r *Row, a Attempt, laterOK, alone bool) outcome {
	switch {
	case a.Err == nil:
		return outcome{verdict: published}
	case errors.Is(a.Err, errHeldBack):
		return outcome{verdict: untouched, err: a.Err}
	}
	class := a.Class
	if r.Bad != nil {
		class = outboxtype.ClassPermanent
	}
	// A timeout that no later confirmation follows means the broker
	// stopped answering (or slowed past the deadline) mid-batch, not that
	// the message is bad.
	if class == outboxtype.ClassTransient && !laterOK && a.Timeout {
		class = outboxtype.ClassUnavailable
	}
	// An unavailable error on a message the destination is seen to fail
	// alone is the message's own failure, not an outage: it counts an
	// attempt, so the message ends as a dead letter instead of holding the
	// relay in outage backoff forever.
	free := false
	if class == outboxtype.ClassUnavailable && alone {
		class = outboxtype.ClassTransient
		free = a.RetryAfter > 0
	}
	o := outcome{err: a.Err, class: class, free: free}
	switch class {
	case outboxtype.ClassUnavailable:
		o.verdict = unavailable
	case outboxtype.ClassPermanent:
		o.verdict = dead
	default:
		o.verdict = retry
		if r.Attempt >= e.cfg.MaxAttempts && !free {
			o.verdict = dead
		}
		o.delay = e.cfg.RetryBackoff.Delay(r.Attempt)
		if a.RetryAfter > o.delay {
			o.delay = min(a.RetryAfter, maxRequestedDelay)
		}
	}
	return o
}

// report logs and counts each failed row, and tells whether the broker was
// down (Ready, the outbox_broker_unavailable gauge).
func (e *Engine) report(rows []*Row, s *settlement) {
	m := e.cfg.Metrics
	for i, r := range rows {
		o := s.outcomes[i]
		if o.verdict != retry && o.verdict != dead {
			continue
		}
		log := e.cfg.Logger.With("event_id", r.ID, "event_type", r.EventType,
			"aggregate_type", r.AggregateType, "aggregate_id", r.AggregateID, "attempt", r.Attempt)
		switch {
		case o.verdict == dead && o.class == outboxtype.ClassPermanent:
			log.Error("publish failed permanently; event dead-lettered", "err", o.err)
		case o.verdict == dead:
			log.Error("publish failed; max attempts reached, event dead-lettered", "err", o.err, "max_attempts", e.cfg.MaxAttempts)
		case o.free:
			log.Warn("destination asked to wait for this event alone (throttled); will retry, no attempt counted", "err", o.err, "retry_in", o.delay)
		default:
			log.Warn("publish failed; will retry", "err", o.err, "retry_in", o.delay)
		}
		if m != nil {
			m.Failed.WithLabelValues(metrics.Label(r.EventType)).Inc()
			if o.verdict == dead {
				m.DeadLettered.WithLabelValues(metrics.Label(r.EventType)).Inc()
			}
		}
	}
	if s.unavailable > 0 && s.unavailableErr != nil {
		err := s.unavailableErr
		e.brokerErr.Store(&err)
	}
	e.brokerDown.Store(s.unavailable > 0)
	if m != nil {
		if s.unavailable > 0 {
			m.BrokerUnavailable.Set(1)
		} else {
			m.BrokerUnavailable.Set(0)
		}
	}
}
