package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool (Debian package prometheus). Without
// it the test is skipped, saying why, except under CI=true, which must run
// it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found and CI=true: CI must check the alert rules; install it with apt-get install --no-install-recommends prometheus")
		}
		t.Skip("promtool not found (apt-get install --no-install-recommends prometheus): alert rules not checked")
	}
	return p
}

// runPromtool runs promtool with args in dir and returns its output; it fails
// the test unless promtool succeeds and says SUCCESS.
func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtool(t *testing.T) {
	t.Parallel()
	t.Run("check rules", func(t *testing.T) {
		t.Parallel()
		out := runPromtool(t, "prometheus", "check", "rules", "alerts.yml")
		want := fmt.Sprintf("SUCCESS: %d rules found", len(alertRules(t)))
		if !strings.Contains(out, want) {
			t.Errorf("promtool check rules: want %q in\n%s", want, out)
		}
	})
	t.Run("test rules", func(t *testing.T) {
		t.Parallel()
		runPromtool(t, "prometheus", "test", "rules", "alerts_test.yml")
	})
	t.Run("check config", func(t *testing.T) {
		t.Parallel()
		runPromtool(t, "prometheus", "check", "config", "prometheus.yml")
	})
	for _, m := range []struct{ alert, old, new string }{
		// The pending threshold of 1000 events moved to 1500 (the firing case
		// has 1500).
		{"OutboxPendingHigh", "(outbox_events_pending) > 1000", "(outbox_events_pending) > 1500"},
		// 10 minutes moved to 20 (the firing case reaches 16).
		{"OutboxOldestPendingAge", "(outbox_oldest_pending_age_seconds) > 600", "(outbox_oldest_pending_age_seconds) > 1200"},
		// 1 GiB of replication lag moved to 3 GiB (the firing case has 2 GiB).
		{"OutboxReplicationLagHigh", "(outbox_replication_lag_bytes) > 1073741824", "(outbox_replication_lag_bytes) > 3221225472"},
		// Standby relays beside a streaming one must not fire it.
		{"OutboxReplicationNotStreaming", "unless\n          sum without (instance, pod) (outbox_replication_streaming)", "or\n          sum without (instance, pod) (outbox_replication_streaming)"},
	} {
		t.Run("unit tests catch a wrong threshold of "+m.alert, func(t *testing.T) {
			t.Parallel()
			// The unit tests must be able to fail: with a threshold the
			// firing case does not reach, they must.
			dir := t.TempDir()
			rules := string(readFile(t, "prometheus/alerts.yml"))
			mutated := strings.Replace(rules, m.old, m.new, 1)
			if mutated == rules {
				t.Fatalf("%s's threshold not found in alerts.yml", m.alert)
			}
			for name, b := range map[string][]byte{"alerts.yml": []byte(mutated), "alerts_test.yml": readFile(t, "prometheus/alerts_test.yml")} {
				if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(promtool(t), "test", "rules", "alerts_test.yml")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), m.alert) {
				t.Errorf("promtool test rules passed with a wrong threshold (err %v):\n%s", err, out)
			}
		})
	}
	t.Run("dashboard queries parse", func(t *testing.T) {
		t.Parallel()
		// promtool parses every panel's query as a recording rule, with the
		// dashboard's variables replaced by values Prometheus accepts.
		type rule struct {
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		}
		var rules []rule
		for _, q := range dashboardQueries(t) {
			rules = append(rules, rule{Record: fmt.Sprintf("grafana:panel_%d_%s", q.PanelID, q.RefID), Expr: grafanaToPromQL(q.Expr)})
		}
		b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "grafana", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "queries.yml"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		out := runPromtool(t, dir, "check", "rules", "queries.yml")
		if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	})
}

var (
	grafanaBuiltin  = regexp.MustCompile(`\$__\w+|\$\{__\w+\}`)
	grafanaVariable = regexp.MustCompile(`\$\w+|\$\{\w+(?::\w+)?\}`)
)

// grafanaToPromQL replaces Grafana's variables: interval builtins by a
// duration, dashboard variables (used in label matchers) by a regexp.
func grafanaToPromQL(expr string) string {
	expr = grafanaBuiltin.ReplaceAllString(expr, "5m")
	return grafanaVariable.ReplaceAllString(expr, ".*")
}

// alertRule is one rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules parses prometheus/alerts.yml.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(readFile(t, "prometheus/alerts.yml"))))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yml: no rules")
	}
	return rules
}

// alertTestCases counts, per alert name, the cases of alerts_test.yml where
// it is expected to fire and to stay silent.
func alertTestCases(t *testing.T) (firing, silent map[string]int) {
	t.Helper()
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name          string `yaml:"name"`
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels      map[string]string `yaml:"exp_labels"`
					ExpAnnotations map[string]string `yaml:"exp_annotations"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/alerts_test.yml"), &f); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	if len(f.RuleFiles) != 1 || f.RuleFiles[0] != "alerts.yml" {
		t.Errorf("alerts_test.yml: rule_files = %q, want [alerts.yml]", f.RuleFiles)
	}
	firing, silent = map[string]int{}, map[string]int{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) == 0 {
				silent[a.Alertname]++
			} else {
				firing[a.Alertname]++
			}
		}
	}
	return firing, silent
}

var upJob = regexp.MustCompile(`\bup\{job="([^"]+)"\}`)

// relayJob returns the job label alerts.yml expects the relays to be scraped
// under.
func relayJob(t *testing.T) string {
	t.Helper()
	jobs := map[string]bool{}
	for _, r := range alertRules(t) {
		for _, m := range upJob.FindAllStringSubmatch(r.Expr, -1) {
			jobs[m[1]] = true
		}
	}
	if len(jobs) != 1 {
		t.Fatalf("alerts.yml: want one job in up{job=...} selectors, got %v", jobs)
	}
	for j := range jobs {
		return j
	}
	return ""
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	known := knownSeries(t)
	anchors := headingAnchors(string(readFile(t, "../docs/OPERATING.md")))
	firing, silent := alertTestCases(t)
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		if r.Alert == "" {
			t.Errorf("alerts.yml: rule %q is not an alert (recording rules belong elsewhere)", r.Expr)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("%s: duplicate alert name", r.Alert)
		}
		seen[r.Alert] = true
		checkMetricNames(t, r.Alert, r.Expr, known)
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", r.Alert, k)
			}
		}
		if !strings.Contains(r.Annotations["summary"]+r.Annotations["description"], "$value") && !strings.HasPrefix(r.Expr, "absent(") {
			t.Errorf("%s: neither summary nor description shows the value ($value)", r.Alert)
		}
		anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, r.Annotations["runbook_url"], runbookBase)
		case anchor != strings.ToLower(r.Alert):
			t.Errorf("%s: runbook anchor %q, want %q (the alert's own section)", r.Alert, anchor, strings.ToLower(r.Alert))
		case !anchors[anchor]:
			t.Errorf("%s: docs/OPERATING.md has no heading with anchor #%s", r.Alert, anchor)
		}
		if firing[r.Alert] == 0 || silent[r.Alert] == 0 {
			t.Errorf("%s: alerts_test.yml has %d firing and %d silent cases; want at least one of each", r.Alert, firing[r.Alert], silent[r.Alert])
		}
	}
	for name := range firing {
		if !seen[name] {
			t.Errorf("alerts_test.yml tests %s, which alerts.yml does not define", name)
		}
	}
	if j := relayJob(t); j != "pgoutbox" {
		t.Errorf("relay job %q; docs/OPERATING.md documents pgoutbox", j)
	}
}

func TestPrometheusExampleScrapesRelayJob(t *testing.T) {
	t.Parallel()
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName string `yaml:"job_name"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(readFile(t, "prometheus/prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	job := relayJob(t)
	found := false
	for _, sc := range cfg.ScrapeConfigs {
		found = found || sc.JobName == job
	}
	if !found {
		t.Errorf("prometheus.yml: no scrape config with job_name %q, the job alerts.yml expects", job)
	}
	if len(cfg.RuleFiles) != 1 || cfg.RuleFiles[0] != "alerts.yml" {
		t.Errorf("prometheus.yml: rule_files = %q, want [alerts.yml]", cfg.RuleFiles)
	}
}
