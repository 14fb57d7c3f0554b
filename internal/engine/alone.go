package engine

import (
	"sync"
	"time"
)

// aloneTracker tells a message that fails alone from a destination outage.
// An unavailable-class error (the connection reset, no answer) on one
// message means the destination is down only as long as nothing says
// otherwise; a message whose publish always fails that way would keep the
// relay in outage backoff forever. So a row's unavailable failure, from its
// second on, counts an attempt when a row published after it in the same
// batch was confirmed. During a real outage nothing is confirmed, and no
// attempt counts; the first failure never counts, since the first rows of a
// batch that meets a connection the broker closed fail while the next ones,
// on a fresh connection, go through. A confirmation by another batch between
// two failures is not enough: while a destination flaps (connections reset,
// then refused) that happens to rows that fail for no fault of their own.
type aloneTracker struct {
	mu       sync.Mutex
	failedAt map[[16]byte]time.Time // each row's last unavailable failure
}

// aloneMax bounds failedAt: forgetting a row only delays counting its
// attempts.
const aloneMax = 10000

// failedAlone records an unavailable failure of row id at t and reports
// whether the row failed so before.
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
