package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pgoutbox/outbox"
)

// results accumulates every figure over the runs, in first-seen order.
type results struct {
	drains   []*drainFigure
	writes   []*writeFigure
	lats     []*latFigure
	growths  []*growthFigure
	brokers  []*drainFigure // figure 5; Ratio is to the in-memory drain of the same run
	explains []string

	walDrains   []*drainFigure // Ratio is to the table source's drain, same publisher, same run
	walLats     []*latFigure
	walSize     *walSizeFigure
	walPartSize *walSizeFigure // the same on a partitioned table
	walSkipped  string         // why the WAL source was not measured
	cpus        []*writeFigure // the cpu figure: every mode at --cpu-rate

	loads     []float64           // load averages seen during the run
	waits     map[string][]string // drain label → wait shares (--sample-waits)
	waitOrder []string
}

func (r *results) drain(label string, backlog int) *drainFigure {
	for _, f := range r.drains {
		if f.Label == label {
			return f
		}
	}
	f := &drainFigure{Label: label, Backlog: backlog}
	r.drains = append(r.drains, f)
	return f
}

func (r *results) walDrain(label string, backlog int) *drainFigure {
	for _, f := range r.walDrains {
		if f.Label == label {
			return f
		}
	}
	f := &drainFigure{Label: label, Backlog: backlog}
	r.walDrains = append(r.walDrains, f)
	return f
}

func (r *results) walLat(label string) *latFigure {
	for _, f := range r.walLats {
		if f.Label == label {
			return f
		}
	}
	f := &latFigure{Label: label}
	r.walLats = append(r.walLats, f)
	return f
}

func (r *results) broker(label string, backlog int) *drainFigure {
	for _, f := range r.brokers {
		if f.Label == label {
			return f
		}
	}
	f := &drainFigure{Label: label, Backlog: backlog}
	r.brokers = append(r.brokers, f)
	return f
}

func (f *drainFigure) add(rate, ratio float64, res relayResult, ok bool, note string) {
	f.Rate = append(f.Rate, rate)
	f.Ratio = append(f.Ratio, ratio)
	if res.MaxRSSKB > 0 {
		f.RSSMB = append(f.RSSMB, float64(res.MaxRSSKB)/1024)
	}
	if cpu := res.UserCPU + res.SysCPU; cpu > 0 && f.Backlog > 0 {
		f.CPUus = append(f.CPUus, cpu/float64(f.Backlog)*1e6)
	}
	f.Dups = append(f.Dups, res.Delivery.Dups())
	f.OK = append(f.OK, ok)
	if note != "" {
		f.Notes = append(f.Notes, note)
	}
}

// writeFigure is one line of the write-cost table.
type writeFigure struct {
	Label string
	Rate  []float64 // orders/s
	Ratio []float64 // / the same design without relay, same run
	// / the same writers writing the order row alone, no outbox (1 for
	// those phases themselves); see chainRatios.
	VsBusiness []float64 `json:",omitempty"`
	Dups       []int64
	OK         []bool // nil entries: no relay, nothing to verify
	Notes      []string
	Check      bool

	// What the phase cost the database, per committed order (writeProbe).
	WALBytes []float64 `json:",omitempty"`
	WALRecs  []float64 `json:",omitempty"`
	FPI      []float64 `json:",omitempty"`
	ClaimsPS []float64 `json:",omitempty"`
	PerClaim []float64 `json:",omitempty"`
	Waits    []string  `json:",omitempty"` // first run's (--write-waits)
	// CPU of the writers' and the relay's PostgreSQL sessions, µs per order.
	WriterPGCPU []float64 `json:",omitempty"`
	RelayPGCPU  []float64 `json:",omitempty"`
	// A relay process's own CPU, µs per order (none when it runs in the
	// writers' process).
	RelayProcCPU []float64 `json:",omitempty"`
	// The relay's own sessions and its walsender apart (the cpu figure).
	RelaySessCPU []float64 `json:",omitempty"`
	WALLSNBytes  []float64 `json:",omitempty"` // per order: pg_current_wal_lsn's advance over the window
	// The cpu figure: a relay process's statements (first run) over
	// SQLEvents delivered events.
	SQL          []sqlStat `json:",omitempty"`
	SQLEvents    int64     `json:",omitempty"`
	WalsenderCPU []float64 `json:",omitempty"`
}

func (f *writeFigure) addProbe(p probeResult) {
	f.WALBytes = append(f.WALBytes, p.WALBytes)
	f.WALRecs = append(f.WALRecs, p.WALRecs)
	f.FPI = append(f.FPI, p.FPI)
	f.ClaimsPS = append(f.ClaimsPS, p.ClaimsPS)
	f.PerClaim = append(f.PerClaim, p.PerClaim)
	if f.Waits == nil {
		f.Waits = p.Waits
	}
	f.WriterPGCPU = append(f.WriterPGCPU, p.BackendCPU["writers"])
	// The WAL source's walsender is the relay's too.
	f.RelayPGCPU = append(f.RelayPGCPU, p.BackendCPU["relay"]+p.BackendCPU["walsender"])
	if p.RelayProcCPU > 0 {
		f.RelayProcCPU = append(f.RelayProcCPU, p.RelayProcCPU)
	}
	f.RelaySessCPU = append(f.RelaySessCPU, p.BackendCPU["relay"])
	f.WALLSNBytes = append(f.WALLSNBytes, p.WALLSNBytes)
	f.WalsenderCPU = append(f.WalsenderCPU, p.BackendCPU["walsender"])
}

func (r *results) write(label string) *writeFigure {
	for _, f := range r.writes {
		if f.Label == label {
			return f
		}
	}
	f := &writeFigure{Label: label}
	r.writes = append(r.writes, f)
	return f
}

// latFigure is one line of the latency table.
type latFigure struct {
	Label                string
	Achieved             []float64 // events/s the writers sustained
	P50, P99, Max        []float64 // ms, commit return → broker confirmation
	HandedP50, HandedP99 []float64 // ms, commit return → the relay handed the event to the publisher
	CommitP50, CommitP99 []float64 // ms, the writers' CreateOrder
	RSSMB                []float64 `json:",omitempty"` // the relay's peak RSS
	Dups                 []int64
	OK                   []bool
	Notes                []string
}

func (r *results) lat(label string) *latFigure {
	for _, f := range r.lats {
		if f.Label == label {
			return f
		}
	}
	f := &latFigure{Label: label}
	r.lats = append(r.lats, f)
	return f
}

// growthFigure is one line of the table-growth table.
type growthFigure struct {
	Label      string
	ClaimP50   []float64
	ClaimP99   []float64
	Rate       []float64
	RateRatio  []float64 // / the empty table's drain rate, same run
	ClaimRatio []float64 // / the empty table's claim p50, same run
	OK         []bool
	Notes      []string
}

func (r *results) growth(label string) *growthFigure {
	for _, f := range r.growths {
		if f.Label == label {
			return f
		}
	}
	f := &growthFigure{Label: label}
	r.growths = append(r.growths, f)
	return f
}

func (f *growthFigure) addClaim(st claimStats) {
	f.ClaimP50 = append(f.ClaimP50, st.P50)
	f.ClaimP99 = append(f.ClaimP99, st.P99)
}

// ---- formatting ----

func fmtRate(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return strings.TrimSpace(humanRate(median(xs)) + " " + spread(xs, humanRate))
}

func humanRate(x float64) string {
	switch {
	case x >= 10_000:
		return fmt.Sprintf("%.1fk", x/1000)
	case x >= 1000:
		return fmt.Sprintf("%.2fk", x/1000)
	}
	return fmt.Sprintf("%.0f", x)
}

// spread shows every run's value when there are several: "(a / b / c)".
func spread(xs []float64, f func(float64) string) string {
	if len(xs) < 2 {
		return ""
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = f(x)
	}
	return "(" + strings.Join(parts, " / ") + ")"
}

func fmtRatio(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	f := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	return strings.TrimSpace(f(median(xs)) + " " + spread(xs, f))
}

func fmtMS(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	f := func(x float64) string {
		if x < 10 {
			return fmt.Sprintf("%.2f", x)
		}
		return fmt.Sprintf("%.0f", x)
	}
	return strings.TrimSpace(f(median(xs)) + " " + spread(xs, f))
}

func fmtMB(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f MB", median(xs))
}

func fmtUS(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", median(xs))
}

func fmtOK(oks []bool, dups []int64) string {
	if len(oks) == 0 {
		return "–"
	}
	good := 0
	for _, ok := range oks {
		if ok {
			good++
		}
	}
	var d int64
	for _, x := range dups {
		d += x
	}
	mark := "✅"
	if good != len(oks) {
		mark = "❌"
	}
	return fmt.Sprintf("%s %d/%d runs, %d dup", mark, good, len(oks), d)
}

func (r *results) print(w io.Writer, m machine, opt options, cmdline string, started time.Time, wall time.Duration) {
	fmt.Fprintf(w, "## pgoutbox benchmark\n\n")
	fmt.Fprintf(w, "- command: `%s`\n", cmdline)
	fmt.Fprintf(w, "- date: %s, wall time %s\n", started.UTC().Format("2006-01-02 15:04 MST"), wall.Round(time.Second))
	fmt.Fprintf(w, "- machine: %d CPUs (%s), %.1f GB RAM, %s\n", m.CPUs, m.CPUModel, m.MemGB, m.Go)
	fmt.Fprintf(w, "- PostgreSQL: %s (%s), same machine\n", m.Postgres, m.Settings)
	if len(r.loads) > 0 {
		fmt.Fprintf(w, "- 1-minute load average during the run (%d CPUs, shared with other work): median %.1f, max %.1f\n", m.CPUs, median(r.loads), maxOf(r.loads))
	}
	fmt.Fprintf(w, "- runs: %d; each cell is the median, per-run values in parentheses; ratios are computed within each run, then their median\n\n", opt.Runs)

	if len(r.drains) > 0 {
		fmt.Fprintf(w, "### 1. Drain a backlog\n\n")
		fmt.Fprintf(w, "| relay → publisher | backlog | events/s | / raw SQL floor | relay peak RSS | relay CPU µs/event | delivery verified |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.drains {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.Label, count(f.Backlog), fmtRate(f.Rate),
				fmtRatio(f.Ratio), fmtMB(f.RSSMB), fmtUS(f.CPUus), fmtOK(f.OK, f.Dups))
		}
		notes(w, r.drains, func(f *drainFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
		printWaits(w, r.waits, r.waitOrder)
	}
	if len(r.writes) > 0 {
		fmt.Fprintf(w, "### 2. Write cost: %d writers, CreateOrder (order row + outbox row, one transaction), %s per phase\n\n", opt.Writers, opt.WriteWindow)
		if opt.PinRelay {
			fmt.Fprintf(w, "Pinned (--pin-relay): the writers and their sessions on the first CPU, each relay process, its sessions and its walsender on the others.\n\n")
		}
		fmt.Fprintf(w, "Each relay phase runs between two no-relay phases of its design; its ratio is to their mean. The no-relay rows list every such phase. Each set of phases starts and ends with the same writers writing the order row alone (business only, no outbox); a phase's ratio to business only is its ratio to no relay times the no-relay writers' ratio to business only (the mean of the two adjacent pairs at the set's ends).\n\n")
		fmt.Fprintf(w, "| phase | orders/s | / same design without relay (adjacent phases) | / business only, no outbox | delivery verified |\n|---|---:|---:|---:|---|\n")
		for _, f := range r.writes {
			ok := "– (no relay)"
			if f.Check {
				ok = fmtOK(f.OK, f.Dups)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", f.Label, fmtRate(f.Rate), fmtRatio(f.Ratio), fmtRatio(f.VsBusiness), ok)
		}
		notes(w, r.writes, func(f *writeFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
		fmt.Fprintf(w, "What each phase cost the database, per committed order (medians): WAL from pg_stat_wal (server-wide), claims = scans of the ready index.\n\n")
		fmt.Fprintf(w, "| phase | WAL bytes | WAL records | full-page images per 1000 | claims/s | orders per claim | writers' PostgreSQL CPU µs | relay's PostgreSQL CPU µs | relay process CPU µs |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, f := range r.writes {
			proc := "–"
			if len(f.RelayProcCPU) > 0 {
				proc = fmt.Sprintf("%.0f", median(f.RelayProcCPU))
			}
			fmt.Fprintf(w, "| %s | %.0f | %.2f | %.1f | %.0f | %.0f | %.0f | %.0f | %s |\n", f.Label, median(f.WALBytes), median(f.WALRecs),
				1000*median(f.FPI), median(f.ClaimsPS), median(f.PerClaim), median(f.WriterPGCPU), median(f.RelayPGCPU), proc)
		}
		fmt.Fprintln(w)
		var waited bool
		for _, f := range r.writes {
			if len(f.Waits) > 0 {
				if !waited {
					fmt.Fprintf(w, "Active sessions sampled every 10 ms (first run): on CPU or waiting for what.\n\n| phase | share of active samples |\n|---|---|\n")
					waited = true
				}
				fmt.Fprintf(w, "| %s | %s |\n", f.Label, strings.Join(f.Waits, "; "))
			}
		}
		if waited {
			fmt.Fprintln(w)
		}
	}
	if len(r.lats) > 0 {
		fmt.Fprintf(w, "### 3. Latency: %d writers paced at %d events/s in all for %s, commit return → broker confirmation\n\n", opt.LatWriters, opt.Rate, opt.LatWindow)
		fmt.Fprintf(w, "| relay → publisher | writers sustained | p50 ms | p99 ms | max ms | of which commit → handed to the publisher, p50 / p99 ms | writers' CreateOrder p50 / p99 ms | delivery verified |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.lats {
			fmt.Fprintf(w, "| %s | %s ev/s | %s | %s | %s | %s / %s | %s / %s | %s |\n", f.Label, fmtRate(f.Achieved), fmtMS(f.P50), fmtMS(f.P99), fmtMS(f.Max),
				fmtMS(f.HandedP50), fmtMS(f.HandedP99), fmtMS(f.CommitP50), fmtMS(f.CommitP99), fmtOK(f.OK, f.Dups))
		}
		notes(w, r.lats, func(f *latFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
	}
	if len(r.growths) > 0 {
		fmt.Fprintf(w, "### 4. Table growth: claim (SELECT … LIMIT 100 FOR UPDATE SKIP LOCKED, alone, rolled back) and drain rate\n\n")
		fmt.Fprintf(w, "| design: table state | claim p50 ms | claim p99 ms | claim p50 / empty | drain events/s | drain / empty | delivery verified |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.growths {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.Label, fmtMS(f.ClaimP50), fmtMS(f.ClaimP99), fmtRatio(f.ClaimRatio),
				fmtRate(f.Rate), fmtRatio(f.RateRatio), fmtOK(f.OK, nil))
		}
		notes(w, r.growths, func(f *growthFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
		for _, e := range r.explains {
			fmt.Fprintf(w, "%s\n\n", e)
		}
	}
	if len(r.brokers) > 0 {
		fmt.Fprintf(w, "### 5. Drain per broker: pgoutbox's relay with its defaults (BatchSize %d, Workers %d), each publisher with its own\n\n",
			outbox.DefaultBatchSize, outbox.DefaultWorkers)
		fmt.Fprintf(w, "Each drain is checked twice: every event confirmed by the publisher, and the broker holding at least as many messages as events (stream, topic end offsets, queue depth, XLEN, distinct webhook ids).\n\n")
		fmt.Fprintf(w, "| broker (what confirms an event) | backlog | events/s | / in-memory (same run) | relay CPU µs/event | relay peak RSS | delivery verified |\n|---|---:|---:|---:|---:|---:|---|\n")
		for _, f := range r.brokers {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", f.Label, count(f.Backlog), fmtRate(f.Rate),
				fmtRatio(f.Ratio), fmtUS(f.CPUus), fmtMB(f.RSSMB), fmtOK(f.OK, f.Dups))
		}
		notes(w, r.brokers, func(f *drainFigure) (string, []string) { return f.Label, f.Notes })
		fmt.Fprintln(w)
	}
	r.printWAL(w, opt)
	r.printCPU(w, opt)
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func notes[T any](w io.Writer, fs []T, get func(T) (string, []string)) {
	for _, f := range fs {
		label, ns := get(f)
		for _, n := range ns {
			fmt.Fprintf(w, "\n- %s: %s", label, n)
		}
	}
	fmt.Fprintln(w)
}
