package engine

import (
	"sync"
	"time"
)

// aloneTracker tells a message that fails alone from a destination outage.
// An unavailable-class error (the connection reset, no answer) on one
// message means the destination is down only as long as nothing says
// otherwise; a message whose publish always fails that way would keep the
// relay in outage backoff forever. So a row's unavailable failure counts an
// attempt when a row published after it in the same batch was confirmed and
// the row already failed so once before. During a real outage nothing is
// confirmed, no attempt counts and nothing is recorded; the first such
// failure never counts, since the first rows of a batch that meets a
// connection the broker closed (or the first batch after an outage) fail
// while the next ones, on a fresh connection, go through. A confirmation by
// another batch is not enough: while a destination flaps (connections
// reset, then refused) that happens to rows that fail for no fault of their
// own.
type aloneTracker struct {
	mu       sync.Mutex
	failedAt map[[16]byte]time.Time // each row's last failure beside a confirmation
}

// aloneMax bounds failedAt: forgetting a row only delays counting its
// attempts.
const aloneMax = 10000

// failedAlone records an unavailable failure of row id at t, beside a later
// confirmation, and reports whether the row failed so before.
func (a *aloneTracker) failedAlone(id [16]byte, t time.Time) (seen bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, seen = a.failedAt[id]
	if a.failedAt == nil || len(a.failedAt) >= aloneMax {
		a.failedAt = map[[16]byte]time.Time{}
	}
	a.failedAt[id] = t
	return seen
}

// published forgets the rows of a batch that were confirmed.
func (a *aloneTracker) published(rows []*Row, s *settlement) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.failedAt) == 0 {
		return
	}
	for i, r := range rows {
		if s.outcomes[i].verdict == published {
			delete(a.failedAt, r.ID)
		}
	}
}
