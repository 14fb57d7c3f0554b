package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgoutbox/outbox/outboxtype"
)

// errHeldBack is the outcome of a row the relay did not try to publish
// because an earlier event of its aggregate in the same batch was not
// confirmed: the row is left untouched (no attempt counted) and, in ordered
// mode, parked behind that event if it failed.
var errHeldBack = errors.New("not published: an earlier event of its aggregate in this batch was not confirmed")

// publishGrace is how long a publish cut by its deadline may take to say
// what the broker confirmed before every event counts as timed out.
const publishGrace = 100 * time.Millisecond

// publishBatch publishes a claimed batch under one PublishTimeout and
// returns one Attempt per row. In ordered mode an aggregate's run goes out one
// event per round (every aggregate's first event, all confirmations, then
// every second event...), and a run stops at its first unconfirmed event,
// so a later event is never acknowledged before an earlier one.
func (e *Engine) publishBatch(ctx context.Context, batch []*Row) []Attempt {
	deadline := time.Now().Add(e.cfg.PublishTimeout)
	runs := false
	for _, r := range batch {
		runs = runs || r.Follower
	}
	if !e.cfg.Ordered || !runs {
		return e.publishRows(ctx, batch, deadline) // one event per aggregate: one round
	}
	type aggKey struct{ typ, id string }
	var groups [][]int // each aggregate's rows, in seq order
	at := map[aggKey]int{}
	for i, r := range batch {
		k := aggKey{r.AggregateType, r.AggregateID}
		j, ok := at[k]
		if !ok {
			j = len(groups)
			at[k] = j
			groups = append(groups, nil)
		}
		groups[j] = append(groups[j], i)
	}
	out := make([]Attempt, len(batch))
	tried := make([]bool, len(batch))
	for round := 0; time.Now().Before(deadline); round++ {
		var idx []int
		for _, run := range groups {
			if round < len(run) && (round == 0 || (tried[run[round-1]] && out[run[round-1]].Err == nil)) {
				idx = append(idx, run[round])
			}
		}
		if len(idx) == 0 {
			break
		}
		rows := make([]*Row, len(idx))
		for j, i := range idx {
			rows[j] = batch[i]
			tried[i] = true
		}
		for j, a := range e.publishRows(ctx, rows, deadline) {
			out[idx[j]] = a
		}
	}
	// After an unconfirmed event, and wherever the deadline stopped the
	// rounds, the rest of a run was not tried: it stays untouched.
	for _, run := range groups {
		stop := false
		for _, i := range run {
			if stop || !tried[i] {
				out[i] = Attempt{Err: errHeldBack}
				stop = true
				continue
			}
			stop = out[i].Err != nil
		}
	}
	return out
}

// publishRows publishes the rows that can be (a Bad row is not sent: its
// attempt is a permanent failure), and returns one Attempt per row.
func (e *Engine) publishRows(ctx context.Context, batch []*Row, deadline time.Time) []Attempt {
	bad := 0
	for _, r := range batch {
		if r.Bad != nil {
			bad++
		}
	}
	if bad == 0 {
		return e.publish(ctx, batch, deadline)
	}
	good := make([]*Row, 0, len(batch)-bad)
	for _, r := range batch {
		if r.Bad == nil {
			good = append(good, r)
		}
	}
	var sent []Attempt
	if len(good) > 0 {
		sent = e.publish(ctx, good, deadline)
	}
	out := make([]Attempt, len(batch))
	for i, j := 0, 0; i < len(batch); i++ {
		if batch[i].Bad != nil {
			out[i] = Attempt{Err: batch[i].Bad, Class: outboxtype.ClassPermanent}
			continue
		}
		out[i] = sent[j]
		j++
	}
	return out
}

// publish calls the publisher with a deadline it cannot overrun: if it ignores
// ctx, the batch still ends at the deadline (its rows rolled back and retried
// later), so a hung broker never pins row locks. The failures it makes up
// itself (a panic, no answer, a wrong count of results) are transient.
func (e *Engine) publish(ctx context.Context, batch []*Row, deadline time.Time) []Attempt {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	done := make(chan []Attempt, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- failAll(len(batch), Attempt{Err: fmt.Errorf("publisher panicked: %v", p)})
			}
		}()
		done <- e.cfg.Publish(ctx, batch)
	}()
	var out []Attempt
	select {
	case out = <-done:
	case <-ctx.Done():
		// Give a ctx-honouring publisher a moment to report what it confirmed.
		select {
		case out = <-done:
		case <-time.After(publishGrace):
			out = failAll(len(batch), Attempt{Timeout: true,
				Err: fmt.Errorf("publish: no answer within %s: %w", e.cfg.PublishTimeout, context.DeadlineExceeded)})
		}
	}
	if out == nil {
		return make([]Attempt, len(batch))
	}
	if len(out) != len(batch) {
		return failAll(len(batch), Attempt{Err: fmt.Errorf("publisher returned %d results for %d messages", len(out), len(batch))})
	}
	return out
}

// failAll returns n copies of a.
func failAll(n int, a Attempt) []Attempt {
	out := make([]Attempt, n)
	for i := range out {
		out[i] = a
	}
	return out
}
