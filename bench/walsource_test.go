package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestChainRatios: each relay phase is divided by the mean of its two
// neighbours, and by business only through the no-relay/business pairs at
// the set's two ends.
func TestChainRatios(t *testing.T) {
	t.Parallel()
	// O B R1 B R2 B O
	rates := []float64{1000, 600, 450, 600, 300, 400, 800}
	ratios, vs, base := chainRatios(rates)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// base: (600/1000 + 400/800) / 2 = 0.55
	if !near(base, 0.55) {
		t.Errorf("no relay / business only = %v, want 0.55", base)
	}
	want := []float64{450.0 / 600, 300.0 / 500}
	if len(ratios) != 2 || !near(ratios[0], want[0]) || !near(ratios[1], want[1]) {
		t.Errorf("ratios %v, want %v", ratios, want)
	}
	if len(vs) != 2 || !near(vs[0], want[0]*0.55) || !near(vs[1], want[1]*0.55) {
		t.Errorf("vs business %v, want %v", vs, []float64{want[0] * 0.55, want[1] * 0.55})
	}
	for _, bad := range [][]float64{nil, {1, 2}, {1, 2, 3, 4}, {1, 2, 3, 4, 5, 6}} {
		if r, v, b := chainRatios(bad); r != nil || v != nil || b != 0 {
			t.Errorf("chainRatios(%v) = %v %v %v, want nothing (not a set's sequence)", bad, r, v, b)
		}
	}
}

// TestWriteSetSequence: O B R1 B R2 B O, the order writeRun measures in and
// chainRatios reads.
func TestWriteSetSequence(t *testing.T) {
	t.Parallel()
	o, b := businessPhase(true), writePhase{label: "B"}
	set := writeSet{business: o, base: b, phases: []writePhase{{label: "R1"}, {label: "R2"}}}
	var got []string
	for _, p := range set.sequence() {
		got = append(got, p.label)
	}
	want := []string{o.label, "B", "R1", "B", "R2", "B", o.label}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sequence %v, want %v", got, want)
	}
	if !o.business || !o.app || businessPhase(false).app {
		t.Error("businessPhase must write the order row alone, with the set's client")
	}
}

func TestTxSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ rate, txRate, want int }{
		{1000, 1000, 1}, {500, 1000, 1}, {10000, 1000, 10}, {10001, 1000, 11}, {2500, 1000, 3}, {100, 0, 1},
	} {
		if got := txSize(c.rate, c.txRate); got != c.want {
			t.Errorf("txSize(%d, %d) = %d, want %d", c.rate, c.txRate, got, c.want)
		}
	}
}

// TestWALFlags: the WAL figures run only when named; their flags are
// parsed and checked.
func TestWALFlags(t *testing.T) {
	t.Parallel()
	opt, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if opt.want("wal") || opt.want("walsize") || !opt.want("write") || !opt.want("drain") {
		t.Errorf("the full run must include every figure but wal and walsize: %v", opt.Only)
	}
	if !reflect.DeepEqual(opt.WALRates, []int{1000, 10000}) || !reflect.DeepEqual(opt.WALTxs, []int{1, 100}) || opt.WALTx != 100 || opt.WALSizeEvents != 10_000_000 || opt.WALLatWindow != 20*time.Second {
		t.Errorf("defaults: rates %v, tx %d, size events %d, window %s", opt.WALRates, opt.WALTx, opt.WALSizeEvents, opt.WALLatWindow)
	}
	opt, err = parseFlags([]string{"--only", "wal,walsize", "--wal-rates", "500, 2000", "--quick"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !opt.want("wal") || !opt.want("walsize") || opt.want("write") {
		t.Errorf("--only wal,walsize: %v", opt.Only)
	}
	if !reflect.DeepEqual(opt.WALRates, []int{500, 2000}) || opt.WALSizeEvents != 200_000 || opt.WALLatWindow != 5*time.Second {
		t.Errorf("--quick --wal-rates 500,2000: rates %v, size events %d, window %s", opt.WALRates, opt.WALSizeEvents, opt.WALLatWindow)
	}
	for _, args := range [][]string{
		{"--wal-rates", "1000,fast"}, {"--wal-rates", "0"}, {"--wal-tx", "0"},
		{"--wal-size-events", "5", "--wal-size-points", "10"}, {"--only", "wall"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

// TestFillTx: the backlog arrives in transactions of perTx events, the
// last one shorter, with the indexes asked for.
func TestFillTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &harness{opt: options{Log: io.Discard}, prefix: testdb.NewSchemaName("bench"), pool: testdb.Pool(t, "")}
	s, err := h.setupOurs(ctx, "fill")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testdb.Drop(t, s) })
	if err := h.fillTx(ctx, s, 10, 250, 100, true); err != nil {
		t.Fatal(err)
	}
	var n, txs, lo, hi int
	if err := h.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text), min(aggregate_id::int), max(aggregate_id::int)
		FROM `+pgx.Identifier{s, "outbox_events"}.Sanitize()).Scan(&n, &txs, &lo, &hi); err != nil {
		t.Fatal(err)
	}
	if n != 250 || txs != 3 || lo != 10 || hi != 259 {
		t.Errorf("%d rows in %d transactions, indexes %d..%d; want 250 in 3, 10..259", n, txs, lo, hi)
	}
	var sc string
	if err := h.pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc); err != nil || sc != "on" {
		t.Errorf("the pool's sessions must get synchronous_commit back: %q (%v)", sc, err)
	}
}

// TestWALSizeVerdicts: the size target compares the table after the last
// VACUUM with the empty table; RSS must stay under 100 MB and flat.
func TestWALSizeVerdicts(t *testing.T) {
	t.Parallel()
	f := &walSizeFigure{Events: 4000, EmptyTable: 0, EmptyIndexes: 100 << 10, PeakRSSKB: 40 << 10, Points: []walSizePoint{
		{Delivered: 1000, Vacuum: true, Table: 5 << 20, Indexes: 1 << 20, VacTable: 0, VacIndex: 105 << 10, RSSKB: 30 << 10},
		{Delivered: 2000, Vacuum: true, Table: 5 << 20, Indexes: 1 << 20, VacTable: 16 << 10, VacIndex: 100 << 10, RSSKB: 31 << 10},
		{Delivered: 3000, Table: 10 << 20, Indexes: 2 << 20, RSSKB: 31 << 10},
		{Delivered: 4000, Table: 20 << 20, Indexes: 4 << 20, RSSKB: 32 << 10},
	}}
	got, met := walSizeVerdict(f)
	if met {
		t.Errorf("116 kB after VACUUM against an empty 100 kB is not within 10%%: %s", got)
	}
	for _, want := range []string{"116 kB after the VACUUM at 2k", "no VACUUM: 12.0 MB at 3k, 24.0 MB at 4k"} {
		if !strings.Contains(got, want) {
			t.Errorf("verdict %q lacks %q", got, want)
		}
	}
	f.Points[1].VacTable = 0
	if got, met := walSizeVerdict(f); !met {
		t.Errorf("100 kB after VACUUM is the empty table's size: %s", got)
	}
	if got, met := walRSSVerdict(f); !met || !strings.Contains(got, "peak 40 MB") {
		t.Errorf("30 → 32 MB, peak 40: %s (met %v)", got, met)
	}
	f.Points[3].RSSKB = 60 << 10
	if got, met := walRSSVerdict(f); met {
		t.Errorf("30 → 60 MB is not flat: %s", got)
	}
	f.Points[3].RSSKB, f.PeakRSSKB = 32<<10, 120<<10
	if got, met := walRSSVerdict(f); met {
		t.Errorf("a 120 MB peak is over 100 MB: %s", got)
	}
}

// TestWALResultsRoundTrip: the WAL figures reach the results file, the
// printed tables and the targets, and the write chart gets its business-only
// series.
func TestWALResultsRoundTrip(t *testing.T) {
	t.Parallel()
	r := &results{}
	w := r.write(walWriteLabel)
	w.Rate, w.Ratio, w.VsBusiness, w.Check, w.OK = []float64{3000}, []float64{0.98}, []float64{0.62}, true, []bool{true}
	wd := r.walDrain(walDrainLabel(string(outbox.SourceWAL), pubMemory, 100), 1000)
	wd.PerTx = 100
	wd.add(120_000, 0.7, relayResult{MaxRSSKB: 30 << 10}, true, "")
	l := r.walLat(walLatLabel(string(outbox.SourceWAL), 10000, 10))
	l.P50, l.P99, l.Achieved, l.OK = []float64{1.5}, []float64{4.5}, []float64{9900}, []bool{true}
	r.walSize = &walSizeFigure{Events: 10, EmptyIndexes: 1 << 10, PeakRSSKB: 1 << 10, OK: true,
		Points: []walSizePoint{{Delivered: 10, Vacuum: true, RSSKB: 1 << 10, VacIndex: 1 << 10}}}
	opt := options{Runs: 1, Writers: 8, Rate: 1000, WALTx: 100, LatWriters: 16, WALLatWindow: time.Second}
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := writeResultsFile(path, r.file(machine{CPUs: 2}, opt, "go run ./bench --only write,wal,walsize", time.Unix(0, 0), time.Second)); err != nil {
		t.Fatal(err)
	}
	f, err := readResultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.WALDrains) != 1 || len(f.WALLats) != 1 || f.WALSize == nil || f.Writes[0].VsBusiness[0] != 0.62 {
		t.Fatalf("round trip lost the WAL figures: %+v", f)
	}
	var out bytes.Buffer
	r.print(&out, machine{}, opt, "go run ./bench", time.Unix(0, 0), time.Second)
	r.printTargets(&out, opt)
	md := out.String()
	for _, want := range []string{
		"| " + walWriteLabel + " | 3.00k | 0.98 | 0.62 | ✅ 1/1 runs, 0 dup |",
		"### 6. WAL source: drain", "| WAL source → in-memory, 100 events per transaction | 1k | 120.0k | – | 0.70 | – | 30 MB |",
		"### 7. WAL source: latency", "WAL source → NATS JetStream, 10k ev/s (10 per transaction)",
		"### 8. WAL source: table size",
		"| WAL source: writers' throughput with the relay / the same writers, business row only (no outbox) | ≥ 0.90 | 0.62 | ❌ no |",
		"| WAL source: writers' throughput with the relay / the same writers and table, no relay | ≥ 0.97 | 0.98 | ✅ yes |",
		"| WAL source: commit → broker latency, 10k ev/s (10 per transaction) | p99 ≤ 5 ms |",
		"drain of a 1k backlog already in the WAL (100 events per transaction) → in-memory | ≥ 150.0k ev/s | 120.0k | ❌ no |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("output lacks %q:\n%s", want, md)
		}
	}
	paths, err := writeCharts(f, filepath.Join(dir, "charts"))
	if err != nil {
		t.Fatal(err)
	}
	wc, err := os.ReadFile(filepath.Join(dir, "charts", "write-cost.svg"))
	if err != nil {
		t.Fatalf("no write-cost chart among %v: %v", paths, err)
	}
	if !strings.Contains(string(wc), "business only (no outbox)") {
		t.Errorf("write-cost.svg lacks the business-only series:\n%s", wc)
	}
	for _, name := range []string{"wal-drain.svg", "wal-latency.svg"} {
		if b, err := os.ReadFile(filepath.Join(dir, "charts", name)); err != nil || !strings.Contains(string(b), "WAL source") {
			t.Errorf("%s: no WAL source chart among %v (%v)", name, paths, err)
		}
	}

	r = &results{walSkipped: "wal_level is replica"}
	out.Reset()
	r.print(&out, machine{}, opt, "go run ./bench", time.Unix(0, 0), time.Second)
	if !strings.Contains(out.String(), "Not measured: wal_level is replica") {
		t.Errorf("a skipped WAL source must say why:\n%s", out.String())
	}
}

// TestWALObjectsDropped: the harness drops the slot and publication it
// created, --keep or not, when it closes after an error as after success.
func TestWALObjectsDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, keep := range []bool{false, true} {
		h, err := newHarness(ctx, options{DatabaseURL: testdb.Logical(t).URL(), Only: map[string]bool{"walsize": true},
			Prefix: "bench_" + randHex(4), Keep: keep, Log: testLog{t}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := h.setupWAL(ctx, "leak")
		if err != nil {
			h.close()
			t.Fatal(err)
		}
		slot := h.slotName(s)
		testdb.Logical(t).ReplicationObjects(t, slot, "")
		if !slotExists(ctx, t, slot) {
			t.Fatalf("setupWAL created no slot %s", slot)
		}
		h.close() // as run's defer does when a figure fails
		if slotExists(ctx, t, slot) {
			t.Errorf("keep=%v: slot %s left behind", keep, slot)
		}
		if keep {
			testdb.Logical(t).Drop(t, s)
		}
	}
}

func slotExists(ctx context.Context, t *testing.T, slot string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, testdb.Logical(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1)
		+ (SELECT count(*) FROM pg_publication WHERE pubname = $1)`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestWALPartitionedSizeVerdict: the partitioned figure compares the table
// once the relay dropped its last partition of delivered events with the
// empty table.
func TestWALPartitionedSizeVerdict(t *testing.T) {
	t.Parallel()
	f := &walSizeFigure{Partitioned: true, Events: 2000, EmptyIndexes: 80 << 10, SettledIndexes: 80 << 10, SettledAfter: 12 * time.Second,
		Points: []walSizePoint{{Delivered: 1000, Table: 5 << 20, Indexes: 1 << 20, Partitions: 2}, {Delivered: 2000, Table: 4 << 20, Indexes: 1 << 20, Partitions: 2}}}
	got, met := walSizeVerdict(f)
	if !met || !strings.Contains(got, "80 kB once the relay dropped") || !strings.Contains(got, "at most 6.0 MB") {
		t.Errorf("settled at the empty table's size: %s (met %v)", got, met)
	}
	f.SettledTable = 64 << 10
	if got, met := walSizeVerdict(f); met {
		t.Errorf("144 kB against an empty 80 kB is not within 10%%: %s", got)
	}
}

// TestWritePhasesFilterAndPin: --filter keeps the phases matching one of
// its |-separated strings; --pin-relay leaves out the relays in the
// writers' process; the Writer.Queue phases are there.
func TestWritePhasesFilterAndPin(t *testing.T) {
	t.Parallel()
	labels := func(opt options) map[string]bool {
		h := &harness{opt: opt}
		got := map[string]bool{}
		for _, s := range h.writePhases() {
			for _, p := range s.phases {
				got[p.label] = true
				if opt.PinRelay && p.relay == "inproc" {
					t.Errorf("--pin-relay kept %q, a relay in the writers' process", p.label)
				}
			}
		}
		return got
	}
	all := labels(options{})
	for _, l := range []string{queuedLabel, walQueuedNoRelayLabel, walQueuedLabel, walWriteLabel} {
		if !all[l] {
			t.Errorf("phase %q missing", l)
		}
	}
	got := labels(options{Filter: "Writer.Queue|--source wal"})
	want := map[string]bool{queuedLabel: true, walQueuedNoRelayLabel: true, walQueuedLabel: true, walWriteLabel: true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("--filter kept %v, want %v", got, want)
	}
	pinned := labels(options{PinRelay: true})
	if len(pinned) == 0 || len(pinned) >= len(all) || !pinned[burnLabel] || all[burnLabel] {
		t.Errorf("--pin-relay kept %d of %d phases, the busy-loop control %v (without: %v)", len(pinned), len(all), pinned[burnLabel], all[burnLabel])
	}
	if got := labels(options{PinRelay: true, Filter: "--source wal"}); !got[burnLabel] || !got[walWriteLabel] || len(got) != 3 {
		t.Errorf("--pin-relay --filter '--source wal' kept %v, want the two WAL source relays and the control", got)
	}
	if !matchesFilter("anything", "") || matchesFilter("abc", "x|") || !matchesFilter("abc", "x|b") {
		t.Error("matchesFilter: empty matches all; an empty alternative matches nothing")
	}
}
