package main

import (
	"bytes"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// chartMain implements `bench chart RESULTS.json DIR`: one SVG per figure of
// a --json results file, so the charts in the docs are drawn from a run's own
// measurements and can be regenerated with it.
func chartMain(args []string, errOut io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(errOut, "usage: bench chart RESULTS.json DIR (RESULTS.json from: go run ./bench --json RESULTS.json)")
		return 2
	}
	f, err := readResultsFile(args[0])
	if err != nil {
		fmt.Fprintln(errOut, "bench chart:", err)
		return 1
	}
	written, err := writeCharts(f, args[1])
	if err != nil {
		fmt.Fprintln(errOut, "bench chart:", err)
		return 1
	}
	for _, p := range written {
		fmt.Fprintln(errOut, "wrote", p)
	}
	return 0
}

// writeCharts writes the charts f has data for into dir and returns their paths.
func writeCharts(f resultsFile, dir string) ([]string, error) {
	charts := buildCharts(f)
	if len(charts) == 0 {
		return nil, errors.New("the results file holds no figure to chart")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, c := range charts {
		p := filepath.Join(dir, c.File)
		if err := os.WriteFile(p, c.svg(), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// barChart is a horizontal bar chart: one row per label, one bar per series.
type barChart struct {
	File   string
	Title  string
	Series []string // legend; one value per series in each row
	Rows   []barRow
	Format func(float64) string
	Max    float64 // axis maximum; 0: from the data
	Footer string
}

type barRow struct {
	Label  string
	Values []float64
}

func buildCharts(f resultsFile) []barChart {
	footer := fmt.Sprintf("%s · %s · %d CPUs (%s), %s · medians of %d run(s)",
		f.Command, f.Date.Format("2006-01-02 15:04 UTC"), f.Machine.CPUs, f.Machine.CPUModel, f.Machine.Go, f.Runs)
	if len(f.Loads) > 0 {
		footer += fmt.Sprintf(" · load average median %.1f", median(f.Loads))
	}
	rate := func(x float64) string { return humanRate(x) + "/s" }
	var cs []barChart
	if len(f.Drains) > 0 {
		c := barChart{File: "drain.svg", Title: "Drain a backlog: events per second", Series: []string{"events/s"}, Format: rate, Footer: footer}
		for _, d := range f.Drains {
			c.Rows = append(c.Rows, barRow{fmt.Sprintf("%s (%s events)", d.Label, count(d.Backlog)), []float64{median(d.Rate)}})
		}
		cs = append(cs, c)
	}
	if len(f.Writes) > 0 {
		c := barChart{File: "write-cost.svg", Title: fmt.Sprintf("Write cost: %d writers' throughput with the relay, / without relay", f.Writers),
			Series: []string{"ratio"}, Format: func(x float64) string { return fmt.Sprintf("%.2f", x) }, Max: 1, Footer: footer}
		business := false
		for _, w := range f.Writes {
			business = business || (w.Check && len(w.VsBusiness) > 0)
		}
		if business {
			c.Title = fmt.Sprintf("Write cost: %d writers' throughput with the relay, / without relay and / business row only", f.Writers)
			c.Series = []string{"/ no relay", "/ business only (no outbox)"}
		}
		for _, w := range f.Writes {
			if w.Check { // relay phases; the no-relay phases are the 1.00 they are divided by
				vs := []float64{median(w.Ratio)}
				if business {
					vs = append(vs, median(w.VsBusiness))
				}
				c.Rows = append(c.Rows, barRow{w.Label, vs})
			}
		}
		if len(c.Rows) > 0 {
			cs = append(cs, c)
		}
	}
	if len(f.Lats) > 0 {
		c := barChart{File: "latency.svg", Title: fmt.Sprintf("Latency at %d events/s: commit return to broker confirmation, ms", f.Rate),
			Series: []string{"p50", "p99"}, Format: func(x float64) string { return fmt.Sprintf("%.2f ms", x) }, Footer: footer}
		for _, l := range f.Lats {
			c.Rows = append(c.Rows, barRow{l.Label, []float64{median(l.P50), median(l.P99)}})
		}
		cs = append(cs, c)
	}
	if len(f.Growths) > 0 {
		c := barChart{File: "claim.svg", Title: "Claim of 100 rows by table state: p50 and p99, ms",
			Series: []string{"p50", "p99"}, Format: func(x float64) string { return fmt.Sprintf("%.2f ms", x) }, Footer: footer}
		for _, g := range f.Growths {
			c.Rows = append(c.Rows, barRow{g.Label, []float64{median(g.ClaimP50), median(g.ClaimP99)}})
		}
		cs = append(cs, c)
	}
	if len(f.WALDrains) > 0 {
		c := barChart{File: "wal-drain.svg", Title: "WAL source: drain of a backlog already in the WAL, beside the table source: events per second", Series: []string{"events/s"}, Format: rate, Footer: footer}
		for _, d := range f.WALDrains {
			c.Rows = append(c.Rows, barRow{fmt.Sprintf("%s (%s events)", d.Label, count(d.Backlog)), []float64{median(d.Rate)}})
		}
		cs = append(cs, c)
	}
	if len(f.WALLats) > 0 {
		c := barChart{File: "wal-latency.svg", Title: "WAL source and table source: commit return to NATS JetStream PubAck, ms",
			Series: []string{"p50", "p99"}, Format: func(x float64) string { return fmt.Sprintf("%.2f ms", x) }, Footer: footer}
		for _, l := range f.WALLats {
			c.Rows = append(c.Rows, barRow{l.Label, []float64{median(l.P50), median(l.P99)}})
		}
		cs = append(cs, c)
	}
	if len(f.Brokers) > 0 {
		c := barChart{File: "brokers.svg", Title: "Drain per broker, relay defaults: events per second", Series: []string{"events/s"}, Format: rate, Footer: footer}
		for _, b := range f.Brokers {
			c.Rows = append(c.Rows, barRow{fmt.Sprintf("%s (%s events)", b.Label, count(b.Backlog)), []float64{median(b.Rate)}})
		}
		cs = append(cs, c)
	}
	return cs
}

// Layout of a chart, in pixels.
const (
	chartWidth  = 860
	chartLeft   = 20
	chartRight  = 110 // room for the value printed after the longest bar
	chartTop    = 58
	labelHeight = 17
	barHeight   = 14
	rowGap      = 14
	labelChars  = 120 // longer labels are cut with an ellipsis
)

var seriesColors = []string{"#3b6fb6", "#e08a2c", "#4a9a5b"}

func (c barChart) svg() []byte {
	top := chartTop
	if len(c.Series) > 1 {
		top += 18 // legend
	}
	rowH := labelHeight + barHeight*len(c.Series) + rowGap
	height := top + rowH*len(c.Rows) + 56
	axisMax := c.Max
	for _, r := range c.Rows {
		for _, v := range r.Values {
			axisMax = math.Max(axisMax, v)
		}
	}
	axisMax = niceCeil(axisMax)
	span := float64(chartWidth - chartLeft - chartRight)
	x := func(v float64) float64 { return chartLeft + span*v/axisMax }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, "<title>%s</title>\n", esc(c.Title))
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", chartWidth, height)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="15" font-weight="bold">%s</text>`+"\n", chartLeft, esc(c.Title))
	if len(c.Series) > 1 {
		lx := chartLeft
		for i, s := range c.Series {
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				lx, chartTop-8, seriesColors[i%len(seriesColors)], lx+16, chartTop+2, esc(s))
			lx += 16 + 8*len(s) + 24
		}
	}
	bottom := top + rowH*len(c.Rows)
	for i := 0; i <= 4; i++ { // grid
		v := axisMax * float64(i) / 4
		gx := x(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e4e4"/>`+"\n", gx, top-4, gx, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#666" font-size="11">%s</text>`+"\n", gx, bottom+14, esc(c.Format(v)))
	}
	for i, r := range c.Rows {
		y := top + i*rowH
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", chartLeft, y+12, esc(cut(r.Label, labelChars)))
		for j, v := range r.Values {
			by := y + labelHeight + j*barHeight
			w := math.Max(x(v)-chartLeft, 1)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", chartLeft, by, w, barHeight-2, seriesColors[j%len(seriesColors)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="11">%s</text>`+"\n", chartLeft+w+6, by+barHeight-4, esc(c.Format(v)))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#777" font-size="10">%s</text>`+"\n", chartLeft, height-12, esc(cut(c.Footer, 170)))
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// niceCeil rounds x up to 1, 2, 4, 5 or 8 times a power of ten, so the grid's
// quarter marks are round numbers.
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 4, 5, 8, 10} {
		if x <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return strings.TrimSpace(string(r[:n-1])) + "…"
	}
	return s
}

func esc(s string) string { return html.EscapeString(s) }
