package deploy

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// PromQL is parsed here just enough to find the metric names an expression
// selects, without importing Prometheus itself (a large module). promtool
// checks the full syntax where it is installed.
var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promqlName     = regexp.MustCompile(`__name__\s*=\s*"([^"]+)"`)
	promqlMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promqlRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promqlToken    = regexp.MustCompile(`[0-9]+(?:ms|[smhdwy])(?:[0-9]+(?:ms|[smhdwy]))*\b|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?|([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?`)
	promqlKeywords = map[string]bool{
		"and": true, "or": true, "unless": true, "bool": true, "offset": true, "by": true,
		"without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"inf": true, "nan": true, "atan2": true,
	}
)

// metricNames returns the metric names expr selects, sorted and deduplicated.
// An identifier that is not a function call, a keyword, a label (inside
// braces or a grouping clause) or a duration is a metric name.
func metricNames(expr string) []string {
	var names []string
	for _, m := range promqlName.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	s := promqlString.ReplaceAllString(expr, `""`)
	for {
		next := promqlMatchers.ReplaceAllString(s, " ")
		next = promqlRange.ReplaceAllString(next, " ")
		next = promqlGrouping.ReplaceAllString(next, " ")
		if next == s {
			break
		}
		s = next
	}
	for _, m := range promqlToken.FindAllStringSubmatch(s, -1) {
		ident, call := m[1], m[2]
		if ident == "" || call != "" || promqlKeywords[strings.ToLower(ident)] {
			continue
		}
		names = append(names, ident)
	}
	sort.Strings(names)
	return slices.Compact(names)
}

func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`sum by (le) (rate(outbox_batch_duration_seconds_bucket{job=~"$job", instance=~"$instance"}[$__rate_interval]))`,
			[]string{"outbox_batch_duration_seconds_bucket"}},
		{`(time() - max without (instance, pod) (outbox_last_publish_timestamp_seconds)) > 600 and max without (instance, pod) (outbox_events_pending offset 5m) > 0`,
			[]string{"outbox_events_pending", "outbox_last_publish_timestamp_seconds"}},
		{`absent(up{job="pgoutbox"} == 1)`, []string{"up"}},
		{`deriv((max without (instance, pod) (outbox_events_pending))[10m:1m]) > 0`, []string{"outbox_events_pending"}},
		{`sum(rate(outbox_events_failed_total{event_type!="x by (y)"}[5m])) by (event_type) > 1e3`, []string{"outbox_events_failed_total"}},
		{`a / on (job) group_left (instance) b * 2.5 unless c bool > 0.1`, []string{"a", "b", "c"}},
		{`{__name__="outbox_dead_letters", job="x"} > 0`, []string{"outbox_dead_letters"}},
		{`histogram_quantile(0.95, sum by (le) (rate(outbox_publish_lag_second_bucket[1h30m])))`, []string{"outbox_publish_lag_second_bucket"}},
		{`count without (instance, pod) (outbox_replication_streaming == 0) unless sum without (instance, pod) (outbox_replication_streaming) > 0`,
			[]string{"outbox_replication_streaming"}},
		{`max without (instance, pod) (outbox_replication_slot_state{state=~"unreserved|lost|missing"}) > 0`, []string{"outbox_replication_slot_state"}},
		{`sum without (instance, pod) (increase(outbox_replication_fallbacks_total[15m])) > 0`, []string{"outbox_replication_fallbacks_total"}},
		{`time()`, nil},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %q, want %q", c.expr, got, c.want)
		}
	}
}

// checkMetricNames reports every metric name in expr that the relay does not
// export.
func checkMetricNames(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	names := metricNames(expr)
	if len(names) == 0 {
		t.Errorf("%s: no metric in %q", where, expr)
	}
	for _, n := range names {
		if !known[n] {
			t.Errorf("%s: %s is not a metric the relay exports (expression %q)", where, n, expr)
		}
	}
}
