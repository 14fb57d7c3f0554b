package engine

import (
	"fmt"
	"time"

	"github.com/pgoutbox/outbox/outboxtype"
)

// A batch the destination confirmed whose outcome the table refuses to
// record (a trigger that rejects the update, a role without UPDATE, a
// statement the connection cannot send) leaves its events pending: the
// next claim takes them and publishes them again. attempts cannot count
// it, since counting is a write the table refuses too. So the relay counts
// it in outbox_unrecorded_total, says what happened in one line, and backs
// off, all workers together, longer at each failure in a row up to
// markBackoffMax: the consumers see the same event ids again (and drop
// them), no longer a copy per claim. A mark that works again ends it.

// markBackoffMax bounds the wait between batches while marks fail in a
// row. Longer than the outage backoff: the database answers, so this is
// not an outage that ends on its own, and every try is duplicates.
const markBackoffMax = 5 * time.Minute

// unrecordedError is a record phase that failed after the destination
// confirmed events.
type unrecordedError struct {
	published int           // events confirmed and left pending
	wait      time.Duration // the workers' backoff it started
	err       error
}

func (u *unrecordedError) Error() string {
	return fmt.Sprintf("%d event(s) published but not recorded: %v", u.published, u.err)
}

func (u *unrecordedError) Unwrap() error { return u.err }

// unrecorded handles a record error of a batch: for one that published
// events it counts them and backs every worker off, before the batch lets
// its rows go, so that no other worker claims them in between.
func (e *Engine) unrecorded(s *settlement, err error) error {
	if s.published == 0 {
		return err
	}
	if m := e.cfg.Metrics; m != nil {
		m.Unrecorded.Add(float64(s.published))
	}
	b := outboxtype.Backoff{Base: max(e.cfg.OutageBackoff.Base, time.Second), Max: max(markBackoffMax, e.cfg.OutageBackoff.Max)}
	var u error = &unrecordedError{published: s.published, wait: e.marks.failed(b, 0), err: err}
	e.markErr.Store(&u)
	return u
}

// Unrecorded is the last record error while outcomes cannot be recorded
// (the last batch that published failed to record), else nil.
func (e *Engine) Unrecorded() error {
	if !e.marks.failing() {
		return nil
	}
	if err := e.markErr.Load(); err != nil {
		return *err
	}
	return nil
}
