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
	if strings.Contains(doc, "| [1a](#scenario-1a) |") || !strings.Contains(doc, "| [2](#scenario-2) | second |") {
		t.Errorf("the CI section was not replaced:\n%s", doc)
	}
	if strings.Index(doc, "## Results: CI size") > strings.Index(doc, "## Results: long version") {
		t.Error("sections out of order")
	}
	one := (&Report{Key: "ci", Size: "CI", Rows: []Row{{Key: "1", Ordered: true, Resent: -1, Drain: -1, Result: Result{Committed: 1, Lost: []string{"a"}, Inversions: 2}}},
		Checks: []Assertion{{Area: "known bug", Name: "k"}}}).Section()
	for _, want := range []string{"| [1](#scenario-1) |  |  | none lost, in order | 0 | 1 | 1 | 0 | 0 | — | — | 0 | **FAIL** |", "**open**", "lost (1): a", "Ordered mode: 2 inversions."} {
		if !strings.Contains(one, want) {
			t.Errorf("section lacks %q:\n%s", want, one)
		}
	}
}

// The tables hold one short row per scenario and per check; the long texts
// go to the paragraph below, in full.
func TestReportKeepsTablesShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a fault described at length, with clauses; ", 20)
	observed := strings.Repeat("error text | with a pipe ", 60)
	r := &Report{Key: "ci", Size: "CI", Command: "cmd", Started: time.Unix(0, 0), Rows: []Row{
		{Key: "3", Scenario: "Broker down while writers run", Fault: long, Runs: 2, Resent: 0, Drain: 775 * time.Millisecond,
			AttemptsBurned: 0, AttemptsMeasured: true, Passed: true,
			Result:  Result{Committed: 11957, RolledBack: 639, Ambiguous: 3, AmbiguousCommitted: 2, Stored: 11959, Delivered: 11959},
			Details: []string{"nats-server stopped 12s"}},
	}, Checks: []Assertion{{Area: "bad input", Name: "missing destination", Expectation: "a clear error", Observed: observed, Passed: true}}}
	doc := r.Section()
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, c := range strings.Split(line, " | ") {
			if n := len([]rune(c)); n > 130 {
				t.Errorf("table cell of %d characters: %q", n, c)
			}
		}
	}
	for _, want := range []string{
		"| [3](#scenario-3) | Broker down while writers run |",
		"| none lost | 2 | 11957 + 3? | 0 | 0 | 0 | 0 | 0 | 0 | pass |",
		"Events: 11957 committed, 3 ambiguous (2 found committed), 639 rolled back; the broker stored 11959 messages for 11959 distinct events.",
		"Drained 775ms after the last fault.",
		"- nats-server stopped 12s",
		"Injected: " + strings.TrimSuffix(strings.TrimSpace(long), "."),
		"| bad input | [missing destination](#check-1) | pass |",
		"- observed: " + strings.TrimSpace(observed),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("section lacks %q:\n%s", want, doc)
		}
	}
	if !strings.Contains(doc, "(2 times).") {
		t.Errorf("the paragraph must give the number of runs:\n%s", doc)
	}
}

func TestShort(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"short enough", "short enough"},
		{"SIGKILL of relay processes at exact points of the batch and at random times, writers running", "SIGKILL of relay processes at exact points of the batch and…"},
		{"latency (50ms, 3s), connection resets, partition (blackhole), refused connections; dedup window 100ms", "latency (50ms, 3s), connection resets…"},
	} {
		if got := short(c.in, 60); got != c.want {
			t.Errorf("short(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The document leads with its tables; how the faults are injected and each
// scenario's paragraph come after every size's results.
func TestReportLeadsWithResults(t *testing.T) {
	t.Parallel()
	rows := []Row{{Key: "1a", Scenario: "Relay SIGKILLed", Fault: "SIGKILL", Runs: 2, Resent: -1, Drain: -1, Passed: true,
		Details: []string{"relay A killed twice"}}}
	checks := []Assertion{{Area: "bad input", Name: "missing destination", Expectation: "a clear error", Observed: "exit 2", Passed: true}}
	ci := &Report{Key: "ci", Size: "CI size", Command: "ci-cmd", Started: time.Unix(0, 0), Rows: rows, Checks: checks}
	lg := &Report{Key: "long", Size: "long version", Command: "long-cmd", Started: time.Unix(0, 0),
		Rows: []Row{{Key: "2", Scenario: "Relay hung", Runs: 1, Resent: -1, Drain: -1, Passed: true}}}
	doc := lg.Merge(ci.Merge(""))
	doc = ci.Merge(doc) // merging again moves nothing
	at := func(s string) int {
		t.Helper()
		if n := strings.Count(doc, s); n != 1 {
			t.Fatalf("document has %d × %q:\n%s", n, s, doc)
		}
		return strings.Index(doc, s)
	}
	order := []string{
		"## Results: CI size",
		"| [1a](#scenario-1a) | Relay SIGKILLed |",
		"| bad input | [missing destination](#check-1) | pass |",
		"## Results: long version",
		"| [2](#scenario-2) | Relay hung |",
		"## Running it",
		"## Definitions",
		"## Not covered",
		"## How the faults are injected",
		"## Details: CI size",
		"- relay A killed twice",
		"### Checks: CI size\n\n<a id=\"check-1\"></a>",
		"- observed: exit 2",
		"## Details: long version",
		"**2. Relay hung** (pass)",
	}
	for i := 1; i < len(order); i++ {
		if at(order[i-1]) > at(order[i]) {
			t.Errorf("%q comes after %q:\n%s", order[i-1], order[i], doc)
		}
	}
	if first := strings.Index(doc, "\n## "); first != at("\n## Results: CI size") {
		t.Errorf("the first section is not the results:\n%s", doc[:first+40])
	}
	if !strings.Contains(doc, "under [Details: CI size](#details-ci-size)") {
		t.Errorf("the CI table does not link its details:\n%s", doc)
	}
}
