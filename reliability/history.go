package reliability

import "sync"

// Outcome is what a writer knows about the transaction that wrote an event.
type Outcome int

const (
	// Committed: COMMIT returned OK. The event must be delivered.
	Committed Outcome = iota
	// RolledBack: the transaction was rolled back, or failed before COMMIT
	// was sent. The event must never be delivered.
	RolledBack
	// Ambiguous: COMMIT was sent but its result is unknown (the connection
	// died while it was in flight). Resolve decides, from the table.
	Ambiguous
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case RolledBack:
		return "rolled back"
	default:
		return "ambiguous"
	}
}

// Written is one event a writer tried to write.
type Written struct {
	ID        string // the event id (outbox-event-id)
	Aggregate string // aggregate_id
	N         int    // the aggregate's sequence number, in the writer's order
	Outcome   Outcome
	// Resolved is set for an ambiguous event once Resolve has looked it up:
	// InTable says whether the commit happened (its row exists, or it was
	// delivered: a relay only sees committed rows).
	Resolved bool
	InTable  bool
}

// mustDeliver reports whether the event committed, as far as anyone knows.
func (w *Written) mustDeliver() bool {
	return w.Outcome == Committed || (w.Outcome == Ambiguous && w.Resolved && w.InTable)
}

// mustNotDeliver reports whether the event is known not to have committed.
func (w *Written) mustNotDeliver() bool {
	return w.Outcome == RolledBack || (w.Outcome == Ambiguous && w.Resolved && !w.InTable)
}

// History is the record of every write attempt. It is safe for concurrent
// use by many writers.
type History struct {
	mu     sync.Mutex
	events map[string]*Written
	order  []string
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{events: map[string]*Written{}} }

// Record adds the events of one transaction with its outcome.
func (h *History) Record(outcome Outcome, events ...Written) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range events {
		e.Outcome = outcome
		e2 := e
		if _, dup := h.events[e.ID]; !dup {
			h.order = append(h.order, e.ID)
		}
		h.events[e.ID] = &e2
	}
}

// Ambiguous returns the ids of the ambiguous events not yet resolved.
func (h *History) Ambiguous() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, id := range h.order {
		if e := h.events[id]; e.Outcome == Ambiguous && !e.Resolved {
			out = append(out, id)
		}
	}
	return out
}

// Resolve records, for ambiguous events, whether they committed: their id
// is in committed (rows found in the table, events delivered).
func (h *History) Resolve(committed map[string]bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range h.order {
		if e := h.events[id]; e.Outcome == Ambiguous {
			e.Resolved = true
			e.InTable = committed[id]
		}
	}
}

// Counts returns how many events have each outcome.
func (h *History) Counts() (committed, rolledBack, ambiguous int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		switch e.Outcome {
		case Committed:
			committed++
		case RolledBack:
			rolledBack++
		default:
			ambiguous++
		}
	}
	return
}

// Committed returns the ids of the events that must be delivered.
func (h *History) Committed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, id := range h.order {
		if h.events[id].mustDeliver() {
			out = append(out, id)
		}
	}
	return out
}

// Get returns the record of event id.
func (h *History) Get(id string) (Written, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.events[id]
	if !ok {
		return Written{}, false
	}
	return *e, true
}

func (h *History) snapshot() []Written {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Written, 0, len(h.order))
	for _, id := range h.order {
		out = append(out, *h.events[id])
	}
	return out
}
