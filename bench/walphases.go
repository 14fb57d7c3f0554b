package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Where a relay's time goes (--wal-profile): the engine reports no timing
// of its phases, so they are read from the relay's CPU profile, each
// sample charged to the phase of the innermost function on its stack that
// belongs to one (so a malloc in the decoder counts as decoding, a pgx
// read under the deleter as recording), and from its statements (the
// sqlTracer in the relay child).

// phaseRule: a function whose name matches re belongs to phase.
type phaseRule struct {
	phase string
	re    *regexp.Regexp
}

// The phases, in the order they are printed.
const (
	phaseDecode    = "stream: read, parse and decode the WAL messages (internal/wal Stream.handle/decode/insert, decoder)"
	phaseRead      = "stream: receive loop, hand transactions over (Stream.loop/deliver/await/Next, pgconn reads)"
	phaseStatus    = "stream: standby status updates (Stream.sendStatus, sendStandbyStatus)"
	phaseGather    = "batch: gather transactions into a batch (walSource.gather/add/batch/dueTime/checkOrder)"
	phaseCancel    = "batch: look up cancellations (walSource.dropCancelled: a SELECT on outbox_cancels)"
	phaseVisible   = "visibility wait (walSource.waitVisible)"
	phasePublish   = "publish (Engine.publish*, the bench's recording publisher)"
	phaseSettle    = "settle and acknowledge (Engine.settle/report, walSource.settled/afterPublish, Stream.Ack)"
	phaseRecord    = "record: delete the delivered rows (walSource.record/delete/send, deleter)"
	phaseClaim     = "table source: claim (Engine claim, scan)"
	phaseTableRec  = "table source: record (mark or delete)"
	phaseWMQuery   = "watermill: SELECT the batch, store the offset (sql.Subscriber.query)"
	phaseWMRoute   = "watermill: router and handler (message.Router, forwarder.forwardMessage)"
	phaseEngine    = "engine, other"
	phasePgx       = "pgx, other (pool, connection)"
	phaseSched     = "Go scheduler: finding work, netpoll/epoll_wait, goroutine wake-ups (runtime.findRunnable, park)"
	phaseGC        = "Go runtime: background GC (gcBgMarkWorker, sweep, scavenge)"
	phaseRuntime   = "Go runtime, other (no phase on the stack)"
	phaseOther     = "other"
	phaseTotalName = "total (profile)"
)

var phaseOrder = []string{phaseDecode, phaseRead, phaseStatus, phaseGather, phaseCancel, phaseVisible, phasePublish, phaseSettle, phaseRecord,
	phaseClaim, phaseTableRec, phaseWMQuery, phaseWMRoute, phaseEngine, phasePgx, phaseSched, phaseGC, phaseRuntime, phaseOther}

var phaseRules = func() []phaseRule {
	rule := func(phase, re string) phaseRule { return phaseRule{phase, regexp.MustCompile(re)} }
	return []phaseRule{
		rule(phaseStatus, `internal/wal\.(\(\*Stream\)\.(sendStatus|statusDue)|sendStandbyStatus)`),
		rule(phaseDecode, `internal/wal\.(\(\*Stream\)\.(handle|decode|insert)|\(\*decoder\)|\(\*relation\)|parseInsert|parse$|newRelation|cell\.)`),
		rule(phaseRead, `internal/wal\.(\(\*Stream\)|\(\*pacedConn\)|\(\*pacer\))`),
		rule(phaseSettle, `internal/wal\.\(\*progress\)|internal/engine\.(\(\*Engine\)\.(settle|report)|\(\*walSource\)\.(settled|afterPublish))`),
		rule(phaseVisible, `internal/engine\.(\(\*walSource\)\.waitVisible|\(\*horizon\)|visibleIn)`),
		rule(phaseRecord, `internal/engine\.(\(\*deleter\)|\(\*walSource\)\.(record|delete|send)|\(\*walLease\))`),
		rule(phaseCancel, `internal/engine\.\(\*walSource\)\.dropCancelled`),
		rule(phaseGather, `internal/engine\.\(\*walSource\)\.(gather|add|batch|dueTime|checkOrder|markFollowers)`),
		rule(phasePublish, `internal/engine\.\(\*Engine\)\.publish|pgoutbox/outbox\.\(\*Relay\)\.publish|main\.\(\*recordingPublisher\)|main\.\(\*recorder\)|main\.\(\*counter\)`),
		rule(phaseClaim, `internal/engine\..*([Cc]laim|scan|Scan)`),
		rule(phaseTableRec, `internal/engine\..*([Rr]ecord|[Mm]ark|[Dd]elete)`),
		rule(phaseWMQuery, `watermill-sql/v4/pkg/sql\.`),
		rule(phaseWMRoute, `ThreeDotsLabs/watermill/(message|components)`),
		rule(phaseEngine, `pgoutbox/outbox`),
		rule(phasePgx, `jackc/pgx|jackc/puddle`),
	}
}()

var (
	schedRe = regexp.MustCompile(`^runtime\.(findRunnable|schedule|park_m|mcall|netpoll|stopm|startm|wakep|notesleep)$`)
	gcRe    = regexp.MustCompile(`^runtime\.(gcBgMarkWorker|gcDrain.*|bgsweep|bgscavenge|gcMarkDone|gcStart)$`)
)

// phaseOf is the phase of a stack, innermost frame first: the innermost
// frame of a named phase, else of the engine or pgx at large (a pgx read
// under the deleter is the deleter's).
func phaseOf(stack []string) string {
	for _, generic := range []bool{false, true} {
		for _, fn := range stack {
			for _, r := range phaseRules {
				if (r.phase == phaseEngine || r.phase == phasePgx) == generic && r.re.MatchString(fn) {
					return r.phase
				}
			}
		}
	}
	for _, fn := range stack {
		switch {
		case schedRe.MatchString(fn):
			return phaseSched
		case gcRe.MatchString(fn):
			return phaseGC
		}
	}
	if len(stack) > 0 && strings.HasPrefix(stack[len(stack)-1], "runtime.") {
		return phaseRuntime
	}
	return phaseOther
}

// parseTraces reads `go tool pprof -traces` output: blocks separated by
// lines of dashes, each a sample value then its stack, innermost first.
// It returns the CPU per phase.
func parseTraces(r io.Reader) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var (
		val   time.Duration
		stack []string
		in    bool
	)
	flush := func() {
		if in && len(stack) > 0 {
			out[phaseOf(stack)] += val
		}
		val, stack, in = 0, nil, false
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			flush()
			in = true
			continue
		}
		if !in {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(stack) == 0 && val == 0 {
			d, err := time.ParseDuration(f[0])
			if err != nil || len(f) < 2 {
				continue // a label line (bytes, and so on)
			}
			val = d
			stack = append(stack, f[1])
			continue
		}
		stack = append(stack, f[0])
	}
	flush()
	return out, sc.Err()
}

// profilePhases runs go tool pprof on a profile: the phases, and -top
// written beside it (the profile with .top.txt) for a reader.
func profilePhases(ctx context.Context, path string) (map[string]time.Duration, error) {
	var traces bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", path)
	cmd.Stdout, cmd.Stderr = &traces, io.Discard
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go tool pprof -traces %s: %w", path, err)
	}
	if top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=60", path).Output(); err == nil {
		_ = os.WriteFile(strings.TrimSuffix(path, ".pprof")+".top.txt", top, 0o644)
	}
	return parseTraces(&traces)
}

// addBreakdown records a traced drain's breakdown into f: phases from its
// profile, its statements, its sessions' CPU.
func (h *harness) addBreakdown(ctx context.Context, f *drainFigure, spec relaySpec, res relayResult, n int) {
	per := func(sec float64) float64 { return sec / float64(n) * 1e6 }
	if spec.Design != designWatermill { // the peer reads no session CPU: the cpu figure has its sessions'
		f.RelayPGus = append(f.RelayPGus, per(res.BackendCPU))
	}
	if spec.Walsender != "" {
		f.WalsenderUS = append(f.WalsenderUS, per(res.WalsenderCPU))
	}
	if f.SQL == nil {
		f.SQL = res.SQL
	}
	if spec.Profile == "" {
		return
	}
	f.Profile = spec.Profile
	phases, err := profilePhases(ctx, spec.Profile)
	if err != nil {
		f.Notes = append(f.Notes, err.Error())
		return
	}
	if f.Phases == nil {
		f.Phases = map[string][]float64{}
	}
	var total time.Duration
	for p, d := range phases {
		f.Phases[p] = append(f.Phases[p], per(d.Seconds()))
		total += d
	}
	f.Phases[phaseTotalName] = append(f.Phases[phaseTotalName], per(total.Seconds()))
}

// printBreakdown prints figure 6's breakdown for the drains that have one.
func printBreakdown(w io.Writer, fs []*drainFigure, profileDir string) {
	var traced []*drainFigure
	for _, f := range fs {
		if len(f.Phases) > 0 || len(f.SQL) > 0 {
			traced = append(traced, f)
		}
	}
	if len(traced) == 0 {
		return
	}
	fmt.Fprintf(w, "### 6a. Where each drain's time goes (--wal-profile %s)\n\n", profileDir)
	fmt.Fprintf(w, "The relay process's CPU by phase, µs per event, from its CPU profile (`go tool pprof -traces`, each sample charged to the innermost function on its stack that belongs to a phase; `-top` of each profile is written beside it); then its PostgreSQL sessions' and walsender's CPU (/proc, by pid), µs per event; the drain's wall time per event, and how much of it the relay spent waiting on its statements (they overlap: several run at once).\n\n")
	fmt.Fprintf(w, "| phase |")
	for _, f := range traced {
		fmt.Fprintf(w, " %s |", f.Label)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---:|", len(traced)))
	row := func(name string, get func(f *drainFigure) []float64) {
		var cells []string
		any := false
		for _, f := range traced {
			xs := get(f)
			if len(xs) == 0 {
				cells = append(cells, "")
				continue
			}
			any = true
			cells = append(cells, fmt.Sprintf("%.2f", median(xs)))
		}
		if any {
			fmt.Fprintf(w, "| %s | %s |\n", name, strings.Join(cells, " | "))
		}
	}
	for _, p := range append(slicesClone(phaseOrder), phaseTotalName) {
		row(p, func(f *drainFigure) []float64 { return f.Phases[p] })
	}
	row("relay's PostgreSQL sessions (CPU)", func(f *drainFigure) []float64 { return f.RelayPGus })
	row("walsender (CPU)", func(f *drainFigure) []float64 { return f.WalsenderUS })
	row("wall time per event (1 / events/s)", func(f *drainFigure) []float64 {
		var xs []float64
		for _, r := range f.Rate {
			if r > 0 {
				xs = append(xs, 1e6/r)
			}
		}
		return xs
	})
	row("of which the relay waited on its statements (wall, first run)", func(f *drainFigure) []float64 {
		if len(f.SQL) == 0 {
			return nil
		}
		ms := 0.0
		for _, s := range f.SQL {
			ms += s.Ms
		}
		return []float64{ms * 1000 / float64(f.Backlog)}
	})
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The relay's statements (a pgx tracer on its pool; first run), per 1,000 events: statements, round trips (a pgx.Batch is one), and the relay's wall time waiting on them, ms. The replication stream is not on the pool and is not counted.\n\n")
	fmt.Fprintf(w, "| relay | statement | statements / 1k events | round trips / 1k events | wait ms / 1k events |\n|---|---|---:|---:|---:|\n")
	for _, f := range traced {
		k := float64(f.Backlog) / 1000
		stmts := append([]sqlStat(nil), f.SQL...)
		sort.SliceStable(stmts, func(i, j int) bool { return stmts[i].Ms > stmts[j].Ms })
		var rest sqlStat
		restKinds := 0
		for _, s := range stmts {
			// The relay's start-up and housekeeping: once, or once a
			// second; folded into one line.
			if float64(s.Calls)/k < 0.2 && s.Ms/k < 0.5 {
				rest.Calls, rest.RoundTrips, rest.Ms = rest.Calls+s.Calls, rest.RoundTrips+s.RoundTrips, rest.Ms+s.Ms
				restKinds++
				continue
			}
			fmt.Fprintf(w, "| %s | `%s` | %.2f | %.2f | %.1f |\n", f.Label, strings.ReplaceAll(s.Key, "|", "\\|"), float64(s.Calls)/k, float64(s.RoundTrips)/k, s.Ms/k)
		}
		if restKinds > 0 {
			fmt.Fprintf(w, "| %s | %d other kinds (start-up, housekeeping) | %.2f | %.2f | %.1f |\n", f.Label, restKinds, float64(rest.Calls)/k, float64(rest.RoundTrips)/k, rest.Ms/k)
		}
	}
	fmt.Fprintln(w)
}

func slicesClone(xs []string) []string { return append([]string(nil), xs...) }

// phasesCommand is `bench phases PROFILE...`: each profile's CPU by phase
// (the breakdown of figure 6a), for profiles written by --wal-profile or
// --drain-profile.
const phasesCommand = "phases"

func phasesMain(args []string, out io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: bench phases PROFILE...")
		return 2
	}
	for _, path := range args {
		phases, err := profilePhases(context.Background(), path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench phases:", err)
			return 1
		}
		var total time.Duration
		for _, d := range phases {
			total += d
		}
		fmt.Fprintf(out, "%s: %s of CPU samples\n\n| phase | CPU | share |\n|---|---:|---:|\n", path, total)
		for _, p := range phaseOrder {
			if d := phases[p]; d > 0 {
				fmt.Fprintf(out, "| %s | %s | %.1f%% |\n", p, d, 100*d.Seconds()/total.Seconds())
			}
		}
		fmt.Fprintln(out)
	}
	return 0
}
