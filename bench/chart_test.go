package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChartsFromResultsFile: a results file written by --json round-trips and
// becomes one well-formed SVG per figure, each bar as long as its value.
func TestChartsFromResultsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &results{}
	r.drain("pgoutbox → in-memory", 1000).add(200_000, 0.5, relayResult{}, true, "")
	r.drain("raw SQL floor", 1000).add(400_000, 1, relayResult{}, true, "")
	w := r.write("pgoutbox: relay <with> & LISTEN")
	w.Rate, w.Ratio, w.Check, w.OK = []float64{5000}, []float64{0.7}, true, []bool{true}
	r.write("pgoutbox: no relay").Ratio = []float64{1}
	l := r.lat("pgoutbox → NATS")
	l.P50, l.P99 = []float64{2}, []float64{4}
	path := filepath.Join(dir, "r.json")
	opt := options{Runs: 1, Writers: 8, Rate: 1000}
	if err := writeResultsFile(path, r.file(machine{CPUs: 2, Go: "go"}, opt, "go run ./bench", time.Unix(0, 0), time.Second)); err != nil {
		t.Fatal(err)
	}
	f, err := readResultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Drains) != 2 || f.Drains[1].Rate[0] != 400_000 || f.Writes[0].Label != "pgoutbox: relay <with> & LISTEN" {
		t.Fatalf("round trip lost figures: %+v", f)
	}
	paths, err := writeCharts(f, filepath.Join(dir, "charts"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("charts %v, want drain, write-cost and latency", paths)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(bytes.NewReader(b))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s is not well-formed XML: %v", p, err)
			}
		}
	}
	drain, _ := os.ReadFile(filepath.Join(dir, "charts", "drain.svg"))
	// Axis 0..400k over 730 px: the floor's bar spans the whole axis, the relay's half.
	for _, want := range []string{`width="730.0"`, `width="365.0"`, "raw SQL floor (1k events)", "200.0k/s"} {
		if !bytes.Contains(drain, []byte(want)) {
			t.Errorf("drain.svg lacks %s:\n%s", want, drain)
		}
	}
	wc, _ := os.ReadFile(filepath.Join(dir, "charts", "write-cost.svg"))
	if !strings.Contains(string(wc), "relay &lt;with&gt; &amp; LISTEN") || strings.Contains(string(wc), "no relay") {
		t.Errorf("write-cost.svg must chart the relay phases only, escaped:\n%s", wc)
	}
	if code := chartMain([]string{path}, io.Discard); code != 2 {
		t.Errorf("chart with one argument: exit %d, want 2", code)
	}
	if _, err := writeCharts(resultsFile{}, dir); err == nil {
		t.Error("an empty results file must be an error")
	}
}
