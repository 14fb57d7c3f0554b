package deploy

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

var metricRow = regexp.MustCompile("^\\|\\s*`([a-z_:]+)`\\s*\\|\\s*(\\w+)\\s*\\|\\s*([^|]*)\\|\\s*([^|]*)\\|\\s*$")

// TestOperatingMetricsTable checks that the metrics table of
// docs/OPERATING.md lists every metric the relay exports, with its type and
// labels, and nothing else.
func TestOperatingMetricsTable(t *testing.T) {
	t.Parallel()
	fams := relayMetrics(t)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(readFile(t, "../docs/OPERATING.md")), "\n") {
		m := metricRow.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(m[1], "outbox_") {
			continue
		}
		name, typ, labelCell, meaning := m[1], m[2], m[3], strings.TrimSpace(m[4])
		seen[name] = true
		f, ok := fams[name]
		if !ok {
			t.Errorf("docs/OPERATING.md lists %s, which the relay does not export", name)
			continue
		}
		if typ != f.Type {
			t.Errorf("docs/OPERATING.md: %s is a %s, not a %s", name, f.Type, typ)
		}
		var labels []string
		for _, l := range regexp.MustCompile("`(\\w+)`").FindAllStringSubmatch(labelCell, -1) {
			labels = append(labels, l[1])
		}
		slices.Sort(labels)
		if !slices.Equal(labels, f.Labels) {
			t.Errorf("docs/OPERATING.md: %s has labels %q, not %q", name, f.Labels, labels)
		}
		if meaning == "" {
			t.Errorf("docs/OPERATING.md: %s: no meaning", name)
		}
	}
	for name := range fams {
		if !seen[name] {
			t.Errorf("docs/OPERATING.md: the metrics table lacks %s", name)
		}
	}
}

// TestOperatingAlertList checks the alert table: one row per alert of
// alerts.yml, with its severity, linking to the alert's runbook section.
func TestOperatingAlertList(t *testing.T) {
	t.Parallel()
	doc := string(readFile(t, "../docs/OPERATING.md"))
	for _, r := range alertRules(t) {
		row := "| [" + r.Alert + "](#" + strings.ToLower(r.Alert) + ") | " + r.Labels["severity"] + " |"
		if !strings.Contains(doc, row) {
			t.Errorf("docs/OPERATING.md: the alert table has no row starting %q", row)
		}
		if !strings.Contains(doc, "\n### "+r.Alert+"\n") {
			t.Errorf("docs/OPERATING.md: no runbook section \"### %s\"", r.Alert)
		}
	}
}

func TestGithubAnchor(t *testing.T) {
	t.Parallel()
	for title, want := range map[string]string{
		"OutboxPendingHigh":                 "outboxpendinghigh",
		"What is checked, and what is not":  "what-is-checked-and-what-is-not",
		"The relay inside your application": "the-relay-inside-your-application",
		"Operating pgoutbox":                "operating-pgoutbox",
		"`outbox_events_pending` (gauge)":   "outbox_events_pending-gauge",
	} {
		if got := githubAnchor(title); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", title, got, want)
		}
	}
}
