package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
)

// TestMain lets the test binary serve as the harness's relay child, as the
// bench binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(childMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == burnCommand {
		os.Exit(burnMain())
	}
	code := m.Run()
	testdb.StopLogical() // the WAL tests' private server, if they started one
	os.Exit(code)
}

// TestRecorder: the delivery check counts duplicates and notices a missing
// or foreign event.
func TestRecorder(t *testing.T) {
	t.Parallel()
	rec := newRecorder(3, true)
	for _, id := range []string{"0", "2", "2", "2"} {
		rec.record(id)
	}
	d := rec.delivery(3)
	if d.OK() || d.Distinct != 2 || d.Dups() != 2 {
		t.Fatalf("event 1 missing, event 2 thrice: got %+v (dups %d, ok %v)", d, d.Dups(), d.OK())
	}
	rec.record("1")
	if d = rec.delivery(3); !d.OK() || d.Dups() != 2 {
		t.Fatalf("all three delivered: got %+v (dups %d, ok %v)", d, d.Dups(), d.OK())
	}
	if rec.doneAt.IsZero() || rec.times[1] == 0 {
		t.Fatal("reaching the target must stamp doneAt and the event's time")
	}
	before := time.Now().UnixNano()
	rec.hand(&outbox.Message{AggregateID: "1"}, &outbox.Message{AggregateID: "5"}, &outbox.Message{AggregateID: "x"})
	first := rec.handed[1]
	rec.hand(&outbox.Message{AggregateID: "1"})
	if first < before || rec.handed[1] != first || rec.handed[5] == 0 {
		t.Fatalf("hand must stamp each event's first hand-over and grow: %v", rec.handed)
	}
	rec.record("not-an-index")
	if d = rec.delivery(3); d.OK() || d.Bad != 1 {
		t.Fatalf("a foreign event must fail the check: %+v", d)
	}
	rec.record("200") // beyond the expected size: the bitset grows
	if d = rec.delivery(3); d.Distinct != 4 {
		t.Fatalf("distinct = %d, want 4", d.Distinct)
	}
}

// TestQuick runs every figure of the harness at a tiny size against the real
// PostgreSQL and NATS (one subtest per figure, in parallel: this checks the
// harness, it measures nothing), and checks that each relay's delivery was
// verified (every event confirmed at least once) and that the harness
// dropped what it created.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, fig := range []struct{ name, want string }{
		{"drain", "### 1. Drain"},
		{"write", "### 2. Write cost"},
		{"latency", "### 3. Latency"},
		{"growth", "### 4. Table growth"},
		{"brokers", "### 5. Drain per broker"},
		{"wal", "### 6. WAL source: drain"},
		{"walsize", "### 8. WAL source: table size"},
		{"cpu", "### 10. CPU per event"},
	} {
		t.Run(fig.name, func(t *testing.T) {
			t.Parallel()
			opt := options{
				DatabaseURL: testdb.URL(), NatsURL: testnats.URL(), Runs: 1,
				Events: 2000, BaselineCap: 200, Writers: 4, LatWriters: 4,
				WriteWindow: 500 * time.Millisecond, Rate: 200, LatWindow: 500 * time.Millisecond,
				GrowthRows: 2000, GrowthBatch: 200, ClaimSamples: 5, Workers: 2,
				Timeout: time.Minute, Only: map[string]bool{fig.name: true}, Log: testLog{t},
				Prefix:  "bench_" + randHex(4),
				Brokers: allBrokers, BrokerEvents: 500, RabbitMQURL: rabbitURL(), RedisURL: redisURL(),
				WALTx: 10, WALTxs: []int{1, 10}, WALRates: []int{200, 400}, WALTxRate: 200, WALLatWindow: 500 * time.Millisecond,
				WALSizeEvents: 2000, WALSizePoints: 4, CPURate: 200, Watermill: true,
			}
			if fig.name == "wal" {
				opt.WALProfile = t.TempDir()
			}
			var bl *brokerLeftovers
			if fig.name == "brokers" {
				bl = startBrokers(t, &opt)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// Registered first, so it also runs when the run fails.
			t.Cleanup(func() { checkLeftovers(t, opt.Prefix) })
			var out bytes.Buffer
			if err := run(ctx, opt, &out, "go test ./bench"); err != nil {
				t.Fatal(err)
			}
			md := out.String()
			t.Log("\n" + md)
			wants := []string{fig.want, "✅ 1/1 runs"}
			if fig.name != "brokers" && fig.name != "cpu" { // figures 5 and 10 have no target
				wants = append(wants, "### Targets")
			}
			for _, want := range wants {
				if !strings.Contains(md, want) {
					t.Errorf("output lacks %q", want)
				}
			}
			if strings.Contains(md, "❌ 0/") {
				t.Error("a relay's delivery was not verified (see ❌ in the tables)")
			}
			if strings.Contains(md, "Not measured: ") {
				t.Error("the WAL source was not measured (this server cannot stream: see the output)")
			}
			switch fig.name {
			case "write":
				if !strings.Contains(md, "| "+walWriteLabel+" | ") {
					t.Error("no WAL source write phase")
				}
			case "wal":
				for _, want := range []string{"| WAL source → in-memory, 1 event per transaction | 2k | ", "| WAL source → NATS JetStream, 10 events per transaction | 2k | ",
					"| table source (polling, defaults) → in-memory, 1 event per transaction | 2k | ", "WAL source → NATS JetStream, 400 ev/s (2 per transaction) | ",
					"| " + walFloorLabel(1) + " | 2k | ", "| " + walStreamFloorLabel(10) + " | 2k | ", "| " + walDrainLabel(designWatermill, pubMemory, 10) + " | 2k | ",
					"### 6a. Where each drain's time goes", "| " + phaseTotalName + " | ", "| walsender (CPU) | ", "`DELETE FROM S.\"outbox_events\" WHERE id = ANY(N::uuid[])`"} {
					if !strings.Contains(md, want) {
						t.Errorf("output lacks %q", want)
					}
				}
				// The pg_recvlogical rows measured something.
				for _, line := range strings.Split(md, "\n") {
					if strings.HasPrefix(line, "| pg_recvlogical: ") {
						if cells := strings.Split(line, "|"); len(cells) < 5 || strings.TrimSpace(cells[3]) == "–" || strings.TrimSpace(cells[3]) == "0" {
							t.Errorf("pg_recvlogical row without a rate: %s", line)
						}
					}
				}
				// Both WAL rows of a shape against its floor.
				walRows := 0
				for _, line := range strings.Split(md, "\n") {
					if strings.HasPrefix(line, "| WAL source → ") && strings.Contains(line, "per transaction | 2k |") {
						walRows++
						if cells := strings.Split(line, "|"); len(cells) < 8 || strings.TrimSpace(cells[6]) == "–" {
							t.Errorf("no ratio to the floor: %s", line)
						}
					}
				}
				if walRows != 4 {
					t.Errorf("%d WAL drain rows, want 4", walRows)
				}
				// Per shape: 5 drains and the decode floor; 4 latencies.
				// The pg_recvlogical row counts nothing: it is not verified.
				if n := strings.Count(md, "✅ 1/1 runs"); n != 16 {
					t.Errorf("%d verified rows, want 16 (2 shapes of 5 drains and a floor, 4 latencies)", n)
				}
				profiles, _ := filepath.Glob(filepath.Join(opt.WALProfile, "*.pprof"))
				if len(profiles) != 10 {
					t.Errorf("--wal-profile wrote %d profiles, want 10: %v", len(profiles), profiles)
				}
			case "cpu":
				// The relays: the table source thrice, the WAL source, watermill.
				if n := strings.Count(md, "✅ 1/1 runs"); n != 5 {
					t.Errorf("%d verified rows, want 5", n)
				}
				if !strings.Contains(md, "round trips per 1k events: `SELECT (lsn") {
					t.Error("the WAL source's statements were not counted")
				}
				for _, want := range []string{"| watermill: no forwarder | ", "| " + watermillName + " → counting publisher | ", "| pgoutbox, WAL source: relay process (--source wal) | "} {
					if !strings.Contains(md, want) {
						t.Errorf("output lacks %q", want)
					}
				}
			case "latency":
				if !strings.Contains(md, "| "+watermillName+" → counting publisher | ") {
					t.Error("no watermill latency row")
				}
			case "walsize":
				for _, want := range []string{"\n| 0 (empty) | ", "\n| 500 | ", "\n| 1k | ", "\n| 1500 | ", "\n| 2k | ", "delivery: ✅ 1/1 runs"} {
					if !strings.Contains(md, want) {
						t.Errorf("output lacks %q (4 size samples and the stream's delivery verified)", want)
					}
				}
			}
			if fig.name == "drain" && !strings.Contains(md, "baseline → NATS JetStream") {
				t.Error("the baseline's relay did not run")
			}
			if fig.name == "drain" && !strings.Contains(md, "| "+watermillName+" → counting publisher | 2k | ") {
				t.Error("the watermill peer did not drain")
			}
			if fig.name == "growth" && !strings.Contains(md, "EXPLAIN (ANALYZE, BUFFERS)") {
				t.Error("no EXPLAIN of the claim")
			}
			if fig.name == "brokers" {
				for _, pub := range append([]string{pubMemory}, allBrokers...) {
					if !strings.Contains(md, "| "+brokerLabel(pub)+" | 500 | ") {
						t.Errorf("no row for %s", pub)
					}
				}
				if n := strings.Count(md, "✅ 1/1 runs"); n != 1+len(allBrokers) {
					t.Errorf("%d verified rows, want %d", n, 1+len(allBrokers))
				}
				bl.check(ctx, t)
			}
		})
	}
}

// checkLeftovers fails the test if a schema, replication slot or
// publication the harness created (named after prefix) is still there.
func checkLeftovers(t *testing.T, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testdb.URL())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	like := strings.ReplaceAll(prefix, "_", `\_`) + `\_%`
	rows, err := conn.Query(ctx, `SELECT 'schema ' || nspname FROM pg_namespace WHERE nspname LIKE $1
		UNION ALL SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE slot_name LIKE 'pgoutbox\_' || $1
		UNION ALL SELECT 'publication ' || pubname FROM pg_publication WHERE pubname LIKE 'pgoutbox\_' || $1`, like)
	if err != nil {
		t.Error(err)
		return
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Error(err)
		return
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// BenchmarkWrite measures Writer.Write in the caller's transaction: one event
// per transaction (the commit dominates), and 100 events per Write call.
func BenchmarkWrite(b *testing.B) {
	for _, perTx := range []int{1, 100} {
		b.Run(fmt.Sprintf("events_per_tx=%d", perTx), func(b *testing.B) {
			s := testdb.Schema(b)
			pool := testdb.Pool(b, s)
			ctx := context.Background()
			if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: s}); err != nil {
				b.Fatal(err)
			}
			w, err := outbox.NewWriter(outbox.WriterConfig{Schema: s})
			if err != nil {
				b.Fatal(err)
			}
			evs := make([]outbox.Event, perTx)
			for i := range evs {
				evs[i] = outbox.Event{AggregateType: "order", AggregateID: fmt.Sprint(i), EventType: "order.created",
					Payload: []byte(`{"order_id":"42","customer_id":"c7","total":4999}`)}
			}
			b.ResetTimer()
			for b.Loop() {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := w.Write(ctx, tx, evs...)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*perTx)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkDrain measures the relay, in this process (so -cpuprofile sees
// it), draining b.N pre-filled events with its default configuration to an
// in-memory publisher that confirms at once, and to NATS JetStream.
//
//	go test -run '^$' -bench Drain/memory -benchtime 200000x -cpuprofile cpu.out ./bench
func BenchmarkDrain(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchDrain(b, pubMemory) })
	b.Run("nats", func(b *testing.B) { benchDrain(b, pubNATS) })
}

func benchDrain(b *testing.B, pub string) {
	ctx := context.Background()
	opt := options{DatabaseURL: testdb.URL(), NatsURL: testnats.URL(), Only: map[string]bool{"drain": true}, Log: os.Stderr}
	h := &harness{opt: opt, prefix: testdb.NewSchemaName("bench")}
	h.pool = testdb.Pool(b, "")
	s, err := h.setupOurs(ctx, "drain")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { testdb.Drop(b, s) })
	if err := h.fillOurs(ctx, s, 0, b.N); err != nil {
		b.Fatal(err)
	}
	pool := testdb.Pool(b, s)
	rec := newRecorder(b.N, false)
	spec := h.spec(designOurs, s, pub)
	if pub == pubNATS {
		nc := testnats.Conn(b)
		_, prefix := testnats.Stream(b, nc)
		spec.Subject = prefix
	}
	rp, closePub, err := publisherFor(spec, rec)
	if err != nil {
		b.Fatal(err)
	}
	defer closePub()
	b.ResetTimer()
	rr, err := startRelay(ctx, spec, pool, rp)
	if err != nil {
		b.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	doneAt := rec.wait(tctx)
	b.StopTimer()
	if err := rr.stop(); err != nil {
		b.Fatal(err)
	}
	if d := rec.delivery(int64(b.N)); doneAt.IsZero() || !d.OK() {
		b.Fatalf("delivery: %+v", d)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
