package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/pgoutbox/outbox"
)

// The cpu figure (--only cpu): what each mode costs in CPU per delivered
// event at a rate every mode holds (--cpu-rate, 2,000 orders/s), where the
// write figure's full-speed ratio says only how much a relay slows the
// writers of a saturated machine. Each relay runs as a process of its own,
// so its CPU is its own; the CPU is read from /proc (utime + stime): the
// relay process by pid, its PostgreSQL sessions and its walsender by the
// pids pg_stat_activity gives their application_name (a walsender shows
// there too), the writers' sessions likewise. WAL bytes per event are
// pg_current_wal_lsn's advance over the window (server-wide).

func (h *harness) cpuPhases() []writePhase {
	const app = "pgoutbox, "
	ps := []writePhase{
		{label: app + "table source: no relay", design: designOurs, app: true},
		{label: app + "table source, defaults: relay process polling", design: designOurs, relay: "child", app: true},
		{label: app + "table source: relay process with Listen, writers call a shared Notifier", design: designOurs, relay: "child", wakeup: "notify", app: true},
		{label: app + "table source: relay process polling, DeleteOnPublish", design: designOurs, relay: "child", app: true, del: true},
	}
	if h.walErr == nil {
		ps = append(ps,
			writePhase{label: app + "table set up for the WAL source: no relay", design: designOurs, app: true, lean: true},
			writePhase{label: app + "WAL source: relay process (--source wal)", design: designOurs, relay: "child", app: true, source: string(outbox.SourceWAL)})
	}
	if h.opt.Watermill {
		ps = append(ps,
			writePhase{label: "watermill: no forwarder", design: designWatermill, app: true},
			writePhase{label: watermillName + " → counting publisher", design: designWatermill, relay: "child", app: true})
	}
	var kept []writePhase
	for _, p := range ps {
		// Paced, as the latency figure's writers: enough of them that
		// slow commits do not throttle the rate.
		p.writers = h.opt.LatWriters
		p.trace = true
		if p.relay == "" || matchesFilter(p.label, h.opt.Filter) {
			kept = append(kept, p)
		}
	}
	return kept
}

func (r *results) cpu(label string) *writeFigure {
	for _, f := range r.cpus {
		if f.Label == label {
			return f
		}
	}
	f := &writeFigure{Label: label}
	r.cpus = append(r.cpus, f)
	return f
}

// cpuRun measures every mode once at --cpu-rate.
func (h *harness) cpuRun(ctx context.Context, r *results) error {
	for _, p := range h.cpuPhases() {
		f := r.cpu(p.label)
		achieved, err := h.writePhaseInto(ctx, f, p, h.opt.CPURate)
		if err != nil {
			return fmt.Errorf("%s: %w", p.label, err)
		}
		if achieved < 0.97*float64(h.opt.CPURate) {
			f.Notes = append(f.Notes, fmt.Sprintf("the writers held %.0f orders/s of %d: per-event costs at a lower rate", achieved, h.opt.CPURate))
		}
	}
	return nil
}

// cpuRelaySide is a mode's relay-side CPU per event: the relay process,
// its sessions, its walsender.
func cpuRelaySide(f *writeFigure) float64 {
	return median(f.RelayProcCPU) + median(f.RelaySessCPU) + median(f.WalsenderCPU)
}

func (r *results) printCPU(w io.Writer, opt options) {
	if len(r.cpus) == 0 {
		return
	}
	fmt.Fprintf(w, "### 10. CPU per event: %d writers paced at %s orders/s in all for %s, every mode (relays as processes of their own)\n\n", opt.LatWriters, count(opt.CPURate), opt.WriteWindow)
	fmt.Fprintf(w, "CPU time (user + system, /proc) over the window per committed order, each delivered once (delivery verified): the writers' PostgreSQL sessions; the relay process; its PostgreSQL sessions; its walsender. WAL bytes per order: pg_current_wal_lsn's advance over the window (server-wide: other work on the server counts too). The writers' own process is not counted (the same in every mode).\n\n")
	fmt.Fprintf(w, "pgoutbox's relay processes count their statements (a pgx tracer on their pool, first run): statements and round trips per 1,000 events, the replication stream aside. The peer's are not counted.\n\n")
	fmt.Fprintf(w, "| mode | orders/s held | writers' PostgreSQL µs/order | relay process µs/event | relay's PostgreSQL sessions µs/event | walsender µs/event | relay side µs/event | all µs/event | WAL bytes/event | relay statements / round trips per 1k events | delivery verified |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, f := range r.cpus {
		ok := "– (no relay)"
		relay := "–"
		proc, sess, ws := "–", "–", "–"
		all := median(f.WriterPGCPU)
		if f.Check {
			ok = fmtOK(f.OK, f.Dups)
			side := cpuRelaySide(f)
			relay = fmt.Sprintf("%.1f", side)
			all += side
			proc, sess = fmt.Sprintf("%.1f", median(f.RelayProcCPU)), fmt.Sprintf("%.1f", median(f.RelaySessCPU))
			if median(f.WalsenderCPU) > 0 {
				ws = fmt.Sprintf("%.1f", median(f.WalsenderCPU))
			}
		}
		stmts := "–"
		if len(f.SQL) > 0 && f.SQLEvents > 0 {
			var calls, trips int64
			for _, s := range f.SQL {
				calls, trips = calls+s.Calls, trips+s.RoundTrips
			}
			k := float64(f.SQLEvents) / 1000
			stmts = fmt.Sprintf("%.0f / %.0f", float64(calls)/k, float64(trips)/k)
		}
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s | %s | %s | %.1f | %.0f | %s | %s |\n", f.Label, fmtRate(f.Rate), median(f.WriterPGCPU),
			proc, sess, ws, relay, all, median(f.WALLSNBytes), stmts, ok)
	}
	for _, f := range r.cpus {
		if len(f.SQL) == 0 || f.SQLEvents == 0 {
			continue
		}
		k := float64(f.SQLEvents) / 1000
		var top []string
		for _, s := range f.SQL {
			if float64(s.RoundTrips)/k >= 10 {
				top = append(top, fmt.Sprintf("`%s` %.0f", strings.ReplaceAll(s.Key, "|", "\\|"), float64(s.RoundTrips)/k))
			}
		}
		if len(top) > 0 {
			fmt.Fprintf(w, "\n- %s, round trips per 1k events: %s", f.Label, strings.Join(top, "; "))
		}
	}
	fmt.Fprintln(w)
	notes(w, r.cpus, func(f *writeFigure) (string, []string) { return f.Label, f.Notes })
	fmt.Fprintln(w)
}
