package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox/internal/metrics"
)

// moduleRoot is the repository root, seen from this package's directory
// (go test runs a package's tests in its own directory).
const moduleRoot = ".."

// runbookBase is the prefix of every alert's runbook_url.
const runbookBase = "https://github.com/pgoutbox/outbox/blob/main/docs/OPERATING.md#"

// readFile returns the contents of path, relative to this package.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// metricFamily is one metric the relay exports, as Prometheus sees it.
type metricFamily struct {
	Name   string
	Type   string   // counter, gauge, histogram
	Labels []string // variable labels, sorted
}

// Series returns the names of the series the family exposes.
func (f metricFamily) Series() []string {
	if f.Type == "histogram" {
		return []string{f.Name + "_bucket", f.Name + "_sum", f.Name + "_count"}
	}
	return []string{f.Name}
}

// relayMetrics returns every metric of internal/metrics, by name, from a
// fresh registry: what a relay's /metrics serves besides the Go and process
// collectors.
func relayMetrics(t *testing.T) map[string]metricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	// A vector exports nothing until it has a child.
	m.Failed.WithLabelValues("order.created")
	m.DeadLettered.WithLabelValues("order.created")
	m.PublishLag.WithLabelValues("order.created")
	m.Source.WithLabelValues("wal")
	m.ReplicationSlotState.WithLabelValues("reserved")

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Every collector of Metrics must show up; a new vector needs a child
	// above, or the checks below would call its name unknown.
	collectors := 0
	v := reflect.ValueOf(m).Elem()
	collectorType := reflect.TypeFor[prometheus.Collector]()
	for i := range v.NumField() {
		if v.Field(i).Type().Implements(collectorType) {
			collectors++
		}
	}
	if len(fams) != collectors {
		t.Fatalf("metrics.Metrics has %d collectors but the registry gathered %d families: give every new *Vec a child in relayMetrics", collectors, len(fams))
	}

	out := map[string]metricFamily{}
	for _, f := range fams {
		mf := metricFamily{Name: f.GetName(), Type: strings.ToLower(f.GetType().String())}
		if mf.Type != "counter" && mf.Type != "gauge" && mf.Type != "histogram" {
			t.Fatalf("%s: metric type %s: the checks here know counters, gauges and histograms", mf.Name, mf.Type)
		}
		for _, lp := range f.GetMetric()[0].GetLabel() {
			mf.Labels = append(mf.Labels, lp.GetName())
		}
		sort.Strings(mf.Labels)
		out[mf.Name] = mf
	}
	return out
}

// knownSeries returns every series name a dashboard or an alert may use: the
// relay's series and Prometheus's own up.
func knownSeries(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{"up": true}
	for _, f := range relayMetrics(t) {
		for _, s := range f.Series() {
			known[s] = true
		}
	}
	return known
}

// headingAnchors returns the GitHub anchors of a Markdown document's
// headings.
func headingAnchors(md string) map[string]bool {
	anchors := map[string]bool{}
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors[githubAnchor(title)] = true
	}
	return anchors
}

var anchorDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

// githubAnchor is GitHub's heading slug: lower case, punctuation dropped,
// spaces to dashes.
func githubAnchor(title string) string {
	s := strings.ToLower(title)
	s = anchorDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// osDirFS is this package's directory as an fs.FS.
var osDirFS = os.DirFS(".")
