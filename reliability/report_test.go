package reliability

import (
	"strings"
	"testing"
	"time"
)

// One file holds both sizes: writing one section keeps the other.
func TestReportMergeKeepsTheOtherSize(t *testing.T) {
	ci := &Report{Key: "ci", Size: "CI size", Command: "ci-cmd", Started: time.Unix(0, 0), Rows: []Row{
		{Key: "2", Scenario: "second", Runs: 1, Passed: true, Resent: -1, Drain: -1},
		{Key: "1a", Scenario: "first", Runs: 3, Ordered: true, Passed: false, Resent: 4, Drain: time.Second,
			Result: Result{Committed: 10, Lost: []string{"x"}, Inversions: 2}},
	}, Checks: []Assertion{{Area: "security", Name: "s", Passed: true}, {Area: "known bug", Name: "k", Passed: false}}}
	doc := ci.Merge("")
	lg := &Report{Key: "long", Size: "long version", Command: "long-cmd", Started: time.Unix(0, 0)}
	doc = lg.Merge(doc)
	ci.Rows = ci.Rows[:1]
	doc = ci.Merge(doc)
	for _, want := range []string{"## Results: CI size", "## Results: long version", "ci-cmd", "long-cmd", "## Not covered"} {
		if strings.Count(doc, want) != 1 {
			t.Errorf("document has %d × %q:\n%s", strings.Count(doc, want), want, doc)
		}
	}
	if strings.Contains(doc, "| 1a |") || !strings.Contains(doc, "| 2 | second |") {
		t.Errorf("the CI section was not replaced:\n%s", doc)
	}
	if strings.Index(doc, "## Results: CI size") > strings.Index(doc, "## Results: long version") {
		t.Error("sections out of order")
	}
	one := (&Report{Key: "ci", Size: "CI", Rows: []Row{{Key: "1", Ordered: true, Resent: -1, Drain: -1, Result: Result{Committed: 1, Lost: []string{"a"}, Inversions: 2}}},
		Checks: []Assertion{{Area: "known bug", Name: "k"}}}).Section()
	for _, want := range []string{"| 1 |  |  | 0 | 1 | 1 | 0 | 0 | — | 2 | 0 | — | **FAIL** |", "**FAIL**", "**open**", "lost (1): a"} {
		if !strings.Contains(one, want) {
			t.Errorf("section lacks %q:\n%s", want, one)
		}
	}
}
