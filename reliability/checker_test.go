package reliability

import (
	"fmt"
	"testing"
)

// The checker must be able to fail: each anomaly, planted in a synthetic
// history, is found and counted.
func TestCheckFindsEveryAnomaly(t *testing.T) {
	h := NewHistory()
	ev := func(id, agg string, n int) Written { return Written{ID: id, Aggregate: agg, N: n} }
	h.Record(Committed, ev("a1", "A", 1), ev("a2", "A", 2), ev("a3", "A", 3))
	h.Record(Committed, ev("b1", "B", 1), ev("b2", "B", 2))
	h.Record(RolledBack, ev("r1", "A", 4))
	h.Record(Ambiguous, ev("x1", "C", 1)) // row exists: must be delivered
	h.Record(Ambiguous, ev("x2", "C", 2)) // row missing: must not be
	h.Record(Ambiguous, ev("x3", "D", 1)) // row exists, delivered
	if got := h.Ambiguous(); len(got) != 3 {
		t.Fatalf("Ambiguous() = %v", got)
	}
	h.Resolve(map[string]bool{"x1": true, "x3": true})

	d := func(seq uint64, id, agg string, n int) Delivery {
		return Delivery{Seq: seq, ID: id, Aggregate: agg, N: n}
	}
	ds := []Delivery{
		d(1, "a1", "A", 1),
		d(2, "a3", "A", 3), // a2 first stored after a3: one inversion
		d(3, "a2", "A", 2),
		d(4, "a1", "A", 1), // a duplicate of a1 after a3: allowed, counted as a duplicate
		d(5, "b1", "B", 1), // b2 lost
		d(6, "r1", "A", 4), // rolled back, delivered
		d(7, "x2", "C", 2), // ambiguous, not committed, delivered
		d(8, "x3", "D", 7), // payload says 7, history says 1: corrupted
		d(9, "zz", "Z", 1), // never written
		d(10, "b1", "B", 1),
		d(11, "b1", "B", 1),
	}
	r := Check(h, ds)
	want := map[string]int{
		"committed": 5, "rolled back": 1, "ambiguous": 3, "ambiguous committed": 2,
		"stored": 11, "delivered": 8, "lost": 2 /* b2, x1 */, "unexpected": 2, "unknown": 1,
		"duplicated": 3, "dup events": 2, "inversions": 1, "corrupted": 1,
	}
	got := map[string]int{
		"committed": r.Committed, "rolled back": r.RolledBack, "ambiguous": r.Ambiguous,
		"ambiguous committed": r.AmbiguousCommitted, "stored": r.Stored, "delivered": r.Delivered,
		"lost": len(r.Lost), "unexpected": len(r.Unexpected), "unknown": len(r.Unknown),
		"duplicated": r.Duplicated, "dup events": r.DupEvents, "inversions": r.Inversions, "corrupted": r.Corrupted,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %d, want %d", k, got[k], w)
		}
	}
	if fmt.Sprint(r.Lost) != "[b2 x1]" {
		t.Errorf("lost = %v, want [b2 x1]", r.Lost)
	}
	if r.OK(false) || r.OK(true) {
		t.Error("OK() with anomalies")
	}
	if len(r.InversionExamples) != 1 {
		t.Errorf("inversion examples = %v", r.InversionExamples)
	}
}

func TestCheckCleanHistory(t *testing.T) {
	h := NewHistory()
	var ds []Delivery
	for i := range 100 {
		agg := fmt.Sprintf("agg-%d", i%7)
		id := fmt.Sprintf("id-%d", i)
		h.Record(Committed, Written{ID: id, Aggregate: agg, N: i / 7})
		// Delivered in reverse order across aggregates, in order within each.
		ds = append(ds, Delivery{Seq: uint64(1000 - i), ID: id, Aggregate: agg, N: i / 7})
	}
	r := Check(h, ds)
	// Reversed seq reverses each aggregate's order too.
	if r.Inversions == 0 {
		t.Fatal("reversed delivery not seen as inversions")
	}
	for i := range ds {
		ds[i].Seq = uint64(i)
	}
	r = Check(h, ds)
	if !r.OK(true) || r.Delivered != 100 || r.Duplicated != 0 {
		t.Fatalf("clean history: %+v", r)
	}
}

// tbRecorder records how a test ended, without ending the real one.
type tbRecorder struct {
	testing.TB
	fatal, skip bool
}

func (r *tbRecorder) Helper()               {}
func (r *tbRecorder) Fatalf(string, ...any) { r.fatal = true }
func (r *tbRecorder) Skipf(string, ...any)  { r.skip = true }
func (r *tbRecorder) Logf(string, ...any)   {}
func (r *tbRecorder) Errorf(string, ...any) { r.fatal = true }

// A missing service skips on a developer's machine and fails under CI.
func TestMissingFailsUnderCI(t *testing.T) {
	for _, tc := range []struct {
		ci        string
		wantFatal bool
	}{{"", false}, {"false", false}, {"0", false}, {"true", true}, {"1", true}} {
		t.Setenv("CI", tc.ci)
		r := &tbRecorder{TB: t}
		missing(r, "RabbitMQ: %v", "connection refused")
		if r.fatal != tc.wantFatal || r.skip == tc.wantFatal {
			t.Errorf("CI=%q: fatal %v, skip %v; want fatal %v", tc.ci, r.fatal, r.skip, tc.wantFatal)
		}
	}
}
