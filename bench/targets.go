package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/pgoutbox/outbox"
)

// printTargets checks the targets against this run's medians.
func (r *results) printTargets(w io.Writer, opt options) {
	type target struct {
		figure, want, got string
		met               *bool
	}
	var ts []target
	yes := func(b bool) *bool { return &b }
	allOK := func(oks []bool) bool {
		for _, ok := range oks {
			if !ok {
				return false
			}
		}
		return len(oks) > 0
	}
	drain := func(prefix string) *drainFigure {
		for _, f := range r.drains {
			if strings.HasPrefix(f.Label, prefix) {
				return f
			}
		}
		return nil
	}
	write := func(prefix string) *writeFigure {
		for _, f := range r.writes {
			if strings.HasPrefix(f.Label, prefix) {
				return f
			}
		}
		return nil
	}
	growth := func(label string) *growthFigure {
		for _, f := range r.growths {
			if f.Label == label {
				return f
			}
		}
		return nil
	}

	if f := drain("pgoutbox → in-memory (defaults: "); f != nil {
		m := median(f.Ratio)
		ts = append(ts, target{"drain to in-memory / raw SQL floor (same run)", "≥ 0.80",
			fmtRatio(f.Ratio), yes(m >= 0.8 && allOK(f.OK))})
	}
	if f := drain("pgoutbox → NATS"); f != nil {
		m := median(f.Rate)
		ts = append(ts, target{"drain to NATS JetStream", "≥ 40k ev/s", fmtRate(f.Rate), yes(m >= 40_000 && allOK(f.OK))})
	}
	if f := write("pgoutbox: relay with Listen, writers call a shared Notifier"); f != nil {
		m := median(f.Ratio)
		got := fmtRatio(f.Ratio)
		if a := write("baseline: NOTIFY trigger"); a != nil {
			got += fmt.Sprintf("; baseline with its trigger: %s", fmtRatio(a.Ratio))
		}
		ts = append(ts, target{"writers' throughput, relay + wake-up / no relay", "≥ 0.90 (baseline: 0.80)", got, yes(m >= 0.9 && allOK(f.OK))})
	}
	for _, f := range r.lats {
		if !strings.HasPrefix(f.Label, "pgoutbox → NATS") {
			continue
		}
		p50, p99, ach := median(f.P50), median(f.P99), median(f.Achieved)
		ts = append(ts, target{fmt.Sprintf("commit → broker latency at %d ev/s", opt.Rate), "p50 ≤ 3 ms, p99 ≤ 5 ms, writers ≥ 0.90 of the rate",
			fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, writers %.0f ev/s", p50, p99, ach),
			yes(p50 <= 3 && p99 <= 5 && ach >= 0.9*float64(opt.Rate) && allOK(f.OK))})
	}
	emptyLabel := fmt.Sprintf("%s: %s pending, no processed rows", designOurs, count(opt.GrowthBatch))
	if e, g := growth(emptyLabel), growth(fmt.Sprintf("%s: %s pending, %s processed rows retained", designOurs, count(opt.GrowthBatch), count(opt.GrowthRows))); e != nil && g != nil {
		c, d := median(g.ClaimRatio), median(g.RateRatio)
		ts = append(ts, target{fmt.Sprintf("claim and drain with %s processed rows retained, / empty table", count(opt.GrowthRows)),
			"claim ≤ 1.20, drain ≥ 0.80", fmt.Sprintf("claim %s, drain %s", fmtRatio(g.ClaimRatio), fmtRatio(g.RateRatio)),
			yes(c <= 1.2 && d >= 0.8 && allOK(g.OK))})
	}
	if b := growth(fmt.Sprintf("%s: %s pending, no processed rows", designOurs, count(opt.Events))); b != nil && opt.Events != opt.GrowthBatch {
		c := median(b.ClaimRatio)
		got := fmt.Sprintf("claim %s", fmtRatio(b.ClaimRatio))
		met := c <= 1.2
		if e, f := growth(emptyLabel), drain("pgoutbox → in-memory (defaults: "); e != nil && f != nil && len(e.Rate) > 0 {
			d := median(f.Rate) / median(e.Rate)
			got += fmt.Sprintf(", drain of %s / drain of %s: %.2f", count(f.Backlog), count(opt.GrowthBatch), d)
			met = met && d >= 0.8
		}
		ts = append(ts, target{fmt.Sprintf("claim and drain with %s pending, / %s pending", count(opt.Events), count(opt.GrowthBatch)),
			"claim ≤ 1.20, drain ≥ 0.80", got, yes(met)})
	}
	if f := drain("pgoutbox → in-memory (defaults: "); f != nil {
		rss := median(f.RSSMB)
		got := fmt.Sprintf("%.0f MB at %s", rss, count(f.Backlog))
		met := rss <= 100
		if s := drain("pgoutbox → in-memory (defaults), RSS at"); s != nil {
			small := median(s.RSSMB)
			got += fmt.Sprintf(", %.0f MB at %s", small, count(s.Backlog))
			met = met && rss <= small*1.2+5
		}
		ts = append(ts, target{"relay peak RSS while draining", "≤ 100 MB, flat in backlog size", got, yes(met)})
	}
	for _, wf := range []struct{ label, how string }{{walWriteLabel, ""}, {walQueuedLabel, ", writers using Writer.Queue"}} {
		if f := write(wf.label); f != nil {
			ts = append(ts, target{"WAL source" + wf.how + ": writers' throughput with the relay / the same writers, business row only (no outbox)", "≥ 0.90",
				fmtRatio(f.VsBusiness), yes(median(f.VsBusiness) >= 0.9 && allOK(f.OK))})
			ts = append(ts, target{"WAL source" + wf.how + ": writers' throughput with the relay / the same writers and table, no relay", "≥ 0.97",
				fmtRatio(f.Ratio), yes(median(f.Ratio) >= 0.97 && allOK(f.OK))})
		}
	}
	for _, pub := range []string{pubMemory, pubNATS} {
		want := map[string]float64{pubMemory: 150_000, pubNATS: 80_000}[pub]
		for _, f := range r.walDrains {
			if f.Label == walDrainLabel(string(outbox.SourceWAL), pub, f.PerTx) {
				ts = append(ts, target{fmt.Sprintf("WAL source: drain of a %s backlog already in the WAL (%s) → %s", count(f.Backlog), perTxName(f.PerTx), brokerLabelShort(pub)),
					"≥ " + humanRate(want) + " ev/s", strings.TrimSpace(fmtRate(f.Rate)), yes(median(f.Rate) >= want && allOK(f.OK))})
			}
		}
	}
	for _, f := range r.walLats {
		if strings.HasPrefix(f.Label, "WAL source") {
			ts = append(ts, target{"WAL source: commit → broker latency, " + strings.TrimPrefix(f.Label, "WAL source → NATS JetStream, "), "p99 ≤ 5 ms",
				fmt.Sprintf("p50 %s ms, p99 %s ms, writers %s ev/s", fmtMS(f.P50), fmtMS(f.P99), strings.TrimSpace(fmtRate(f.Achieved))), yes(median(f.P99) <= 5 && allOK(f.OK))})
		}
	}
	if f := r.walSize; f != nil && len(f.Points) > 0 {
		got, met := walSizeVerdict(f)
		ts = append(ts, target{fmt.Sprintf("WAL source: table + indexes after %s events delivered, no cleanup run (VACUUM as autovacuum would)", count(f.Events)),
			"flat: within 10% of the empty table", got, yes(met)})
		rss, rssMet := walRSSVerdict(f)
		ts = append(ts, target{"WAL source: relay RSS while streaming", "≤ 100 MB, flat", rss, yes(rssMet)})
	}
	if f := r.walPartSize; f != nil && len(f.Points) > 0 {
		got, met := walSizeVerdict(f)
		ts = append(ts, target{fmt.Sprintf("WAL source, partitioned table: table + indexes after %s events delivered, no cleanup run, no VACUUM", count(f.Events)),
			"flat: within 10% of the empty table", got, yes(met)})
		rss, rssMet := walRSSVerdict(f)
		ts = append(ts, target{"WAL source, partitioned table: relay RSS while streaming", "≤ 100 MB, flat", rss, yes(rssMet)})
	}
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "### Targets\n\n| figure | target | measured (median) | met |\n|---|---|---|---|\n")
	for _, t := range ts {
		mark := "❌ no"
		if *t.met {
			mark = "✅ yes"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.figure, t.want, t.got, mark)
	}
	fmt.Fprintln(w)
}
