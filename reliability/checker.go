package reliability

import (
	"sort"
	"strconv"
)

// Delivery is one message the broker stored, as a consumer reads it.
type Delivery struct {
	Seq       uint64 // the broker's order (JetStream stream sequence)
	ID        string // outbox-event-id header
	Aggregate string // outbox-aggregate-id header
	N         int    // the sequence number in the payload; -1 if unreadable
}

// Result is what Check found.
type Result struct {
	Committed          int // COMMIT returned OK
	RolledBack         int
	Ambiguous          int // COMMIT's result unknown
	AmbiguousCommitted int // of which the row turned out to exist
	Stored             int // messages the broker holds, duplicates included
	Delivered          int // distinct events among them

	Lost       []string // must have been delivered, never was
	Unexpected []string // known not committed, yet delivered
	Unknown    []string // delivered, never written by this history
	Duplicated int      // stored messages beyond the first of each event
	DupEvents  int      // events stored more than once
	Inversions int      // first deliveries out of their aggregate's order
	Corrupted  int      // messages whose aggregate or sequence differ from what was written
	// InversionExamples describes a few inversions, for the report.
	InversionExamples []string
}

// OK reports whether nothing was lost, nothing unexpected or corrupted was
// delivered and, when ordered, no aggregate was reordered.
func (r *Result) OK(ordered bool) bool {
	return len(r.Lost) == 0 && len(r.Unexpected) == 0 && len(r.Unknown) == 0 && r.Corrupted == 0 &&
		(!ordered || r.Inversions == 0)
}

// Check compares the history with what the broker holds. ds must be in the
// broker's order (Seq ascending; Check sorts it). Inversions are counted over
// first deliveries: an aggregate's events must first appear in increasing N,
// whatever duplicates follow (at-least-once allows a re-send of an earlier
// event after a later one).
func Check(h *History, ds []Delivery) Result {
	var r Result
	written := h.snapshot()
	byID := make(map[string]*Written, len(written))
	for i := range written {
		w := &written[i]
		byID[w.ID] = w
		switch w.Outcome {
		case Committed:
			r.Committed++
		case RolledBack:
			r.RolledBack++
		default:
			r.Ambiguous++
			if w.Resolved && w.InTable {
				r.AmbiguousCommitted++
			}
		}
	}
	ds = append([]Delivery(nil), ds...)
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].Seq < ds[j].Seq })

	seen := map[string]int{}
	maxN := map[string]int{} // aggregate -> highest N first-delivered so far
	maxID := map[string]string{}
	r.Stored = len(ds)
	for _, d := range ds {
		seen[d.ID]++
		if seen[d.ID] > 1 {
			r.Duplicated++
			if seen[d.ID] == 2 {
				r.DupEvents++
			}
			continue
		}
		w, ok := byID[d.ID]
		if !ok {
			r.Unknown = append(r.Unknown, d.ID)
			continue
		}
		if d.Aggregate != w.Aggregate || d.N != w.N {
			r.Corrupted++
		}
		if w.mustNotDeliver() {
			r.Unexpected = append(r.Unexpected, d.ID)
			continue
		}
		if m, ok := maxN[w.Aggregate]; ok && w.N < m {
			r.Inversions++
			if len(r.InversionExamples) < 5 {
				r.InversionExamples = append(r.InversionExamples,
					"aggregate "+w.Aggregate+": event "+d.ID+" (n="+strconv.Itoa(w.N)+") first stored after "+maxID[w.Aggregate]+" (n="+strconv.Itoa(m)+")")
			}
			continue
		}
		maxN[w.Aggregate] = w.N
		maxID[w.Aggregate] = d.ID
	}
	r.Delivered = len(seen)
	for i := range written {
		w := &written[i]
		if w.mustDeliver() && seen[w.ID] == 0 {
			r.Lost = append(r.Lost, w.ID)
		}
	}
	return r
}
