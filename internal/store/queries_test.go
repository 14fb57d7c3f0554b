package store

import (
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/ident"
)

// TestHandoffOnly: every claim of the handoff variant requires retry_after
// to be set, including the ordered claim's followers and their lock, and
// its order probes read only the table path's rows.
func TestHandoffOnly(t *testing.T) {
	n, err := ident.New("s", "t")
	if err != nil {
		t.Fatal(err)
	}
	q := New(n, false).HandoffOnly()
	for name, sql := range map[string]string{"Claim": q.Claim, "ClaimOrdered": q.ClaimOrdered,
		"ClaimOrderedSparse": q.ClaimOrderedSparse, "LowWater": q.LowWater} {
		if strings.Contains(sql, "retry_after IS NULL") {
			t.Errorf("%s still takes rows with retry_after NULL:\n%s", name, sql)
		}
		if !strings.Contains(sql, "retry_after IS NOT NULL AND") {
			t.Errorf("%s does not require retry_after:\n%s", name, sql)
		}
	}
	if !strings.Contains(q.ClaimOrdered, "l.retry_after IS NOT NULL") {
		t.Error("the ordered claim still locks followers the stream owns")
	}
	for name, sql := range map[string]string{"ParkLate": q.ParkLate, "MarkOrdered": q.MarkOrdered} {
		if !strings.Contains(sql, successors+" AND s.retry_after IS NOT NULL") {
			t.Errorf("%s still parks events the stream owns:\n%s", name, sql)
		}
	}
	for name, sql := range map[string]string{"ClaimOrdered": q.ClaimOrdered, "ClaimOrderedSparse": q.ClaimOrderedSparse,
		"BlockedAggregates": q.BlockedAggregates} {
		if !strings.Contains(sql, onPath(true, "p")) && !strings.Contains(sql, onPath(true, "s")) {
			t.Errorf("%s reads rows the stream owns:\n%s", name, sql)
		}
	}
	if base := New(n, false); strings.Contains(base.ParkLate, "s.retry_after") || strings.Contains(base.MarkOrdered, "s.retry_after") {
		t.Error("the table source's parking is restricted to handed-over rows")
	}
}
