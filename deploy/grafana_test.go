package deploy

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dashboard is the part of a Grafana dashboard these tests read.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasourceRef  `json:"datasource"`
			Multi      bool            `json:"multi"`
			IncludeAll bool            `json:"includeAll"`
			AllValue   string          `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ X, Y, W, H int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b := readFile(t, "grafana/outbox.json")
	if !json.Valid(b) {
		t.Fatal("grafana/outbox.json is not valid JSON")
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("grafana/outbox.json: %v", err)
	}
	return d
}

// allPanels flattens rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type dashboardQuery struct {
	PanelID int
	Panel   string
	RefID   string
	Expr    string
}

func dashboardQueries(t *testing.T) []dashboardQuery {
	t.Helper()
	var qs []dashboardQuery
	for _, p := range loadDashboard(t).allPanels() {
		for _, tg := range p.Targets {
			qs = append(qs, dashboardQuery{PanelID: p.ID, Panel: p.Title, RefID: tg.RefID, Expr: tg.Expr})
		}
	}
	if len(qs) == 0 {
		t.Fatal("grafana/outbox.json: no query")
	}
	return qs
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard uid %q, title %q, schemaVersion %d: all are needed to import or provision it", d.UID, d.Title, d.SchemaVersion)
	}

	vars := map[string]int{}
	for i, v := range d.Templating.List {
		vars[v.Name] = i
	}
	if i, ok := vars["datasource"]; !ok || d.Templating.List[i].Type != "datasource" || string(d.Templating.List[i].Query) != `"prometheus"` {
		t.Error(`dashboard: want a variable "datasource" of type datasource, query "prometheus"`)
	}
	for _, name := range []string{"job", "instance"} {
		i, ok := vars[name]
		if !ok {
			t.Errorf("dashboard: no %q variable", name)
			continue
		}
		v := d.Templating.List[i]
		if v.Type != "query" || v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s: want a query on ${datasource}, got type %q datasource %+v", name, v.Type, v.Datasource)
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil || !strings.HasPrefix(q.Query, "label_values(") {
			t.Errorf("variable %s: query %s: want label_values(...)", name, v.Query)
			continue
		}
		// label_values(selector, label): the selector's metric must exist.
		sel := strings.TrimSuffix(strings.TrimPrefix(q.Query, "label_values("), ")")
		sel = sel[:strings.LastIndex(sel, ",")]
		checkMetricNames(t, "variable "+name, sel, knownSeries(t))
	}
	if i, ok := vars["instance"]; ok {
		if v := d.Templating.List[i]; !v.Multi || !v.IncludeAll || v.AllValue != ".*" {
			t.Error(`variable instance: want multi-value with "All" meaning .* (a regexp matcher)`)
		}
	}

	titles := map[string]bool{}
	ids := map[int]bool{}
	known := knownSeries(t)
	used := map[string]bool{}
	var boxes []panel
	for _, p := range d.allPanels() {
		titles[p.Title] = true
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		for _, b := range boxes {
			if overlap(b, p) {
				t.Errorf("panels %q and %q overlap", b.Title, p.Title)
			}
		}
		boxes = append(boxes, p)
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want uid ${datasource} (no hard-coded data source)", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no query", p.Title)
		}
		for _, tg := range p.Targets {
			where := "panel " + p.Title + " " + tg.RefID
			checkMetricNames(t, where, tg.Expr, known)
			for _, n := range metricNames(tg.Expr) {
				used[n] = true
			}
			checkSelectorsFiltered(t, where, tg.Expr)
		}
	}

	for _, want := range []string{
		"Throughput (events published/s)", "Pending events", "Publish lag (created_at to broker confirmation)",
		"Publish failures by event type", "Dead letters", "Batch duration", "Broker unavailable",
		"Blocked aggregates", "Last publish age", "Database errors", "Relays up",
		"Replication lag", "Retained WAL", "Replication slot state",
	} {
		if !titles[want] {
			t.Errorf("dashboard: no panel %q", want)
		}
	}
	// Every metric the relay exports is on the dashboard.
	for _, f := range relayMetrics(t) {
		onDashboard := false
		for _, s := range f.Series() {
			onDashboard = onDashboard || used[s]
		}
		if !onDashboard {
			t.Errorf("dashboard: no panel shows %s", f.Name)
		}
	}
}

func overlap(a, b panel) bool {
	ga, gb := a.GridPos, b.GridPos
	return ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H
}

var selectorWithMatchers = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^{}]*\})?`)

// checkSelectorsFiltered reports a metric selector of expr that does not
// filter on the dashboard's job and instance variables: such a panel would
// mix every outbox Prometheus knows.
func checkSelectorsFiltered(t *testing.T, where, expr string) {
	t.Helper()
	names := map[string]bool{}
	for _, n := range metricNames(expr) {
		names[n] = true
	}
	for _, m := range selectorWithMatchers.FindAllStringSubmatch(expr, -1) {
		if !names[m[1]] {
			continue
		}
		if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
			t.Errorf(`%s: selector %s%s lacks job=~"$job" and instance=~"$instance"`, where, m[1], m[2])
		}
	}
}

var alertThreshold = regexp.MustCompile(`^max without \(instance, pod\) \((\w+)\) > ([0-9.]+)$`)

// TestDashboardAlertThresholds checks that a panel drawing an alert's
// threshold (a red step on the one metric the alert compares) draws the
// alert's value, so the dashboard shows where the alert fires.
func TestDashboardAlertThresholds(t *testing.T) {
	t.Parallel()
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Thresholds *struct {
						Steps []struct {
							Color string   `json:"color"`
							Value *float64 `json:"value"`
						} `json:"steps"`
					} `json:"thresholds"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(readFile(t, "grafana/outbox.json"), &d); err != nil {
		t.Fatal(err)
	}
	// The alerts whose threshold the dashboard draws.
	drawn := []string{"OutboxOldestPendingAge", "OutboxReplicationLagHigh"}
	checked := map[string]bool{}
	for _, r := range alertRules(t) {
		m := alertThreshold.FindStringSubmatch(strings.TrimSpace(r.Expr))
		if m == nil || !slices.Contains(drawn, r.Alert) {
			continue
		}
		for _, p := range d.Panels {
			if len(p.Targets) != 1 || !strings.Contains(p.Targets[0].Expr, m[1]+"{") || p.FieldConfig.Defaults.Thresholds == nil || strings.HasPrefix(p.Targets[0].Expr, "time()") {
				continue
			}
			for _, s := range p.FieldConfig.Defaults.Thresholds.Steps {
				if s.Color == "red" && s.Value != nil {
					checked[r.Alert] = true
					if got := strconv.FormatFloat(*s.Value, 'f', -1, 64); got != m[2] {
						t.Errorf("panel %q: red threshold %s, but %s fires above %s", p.Title, got, r.Alert, m[2])
					}
				}
			}
		}
	}
	for _, a := range drawn {
		if !checked[a] {
			t.Errorf("no panel draws %s's threshold", a)
		}
	}
}
