package main

import (
	"context"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestNewFlags: --wal-tx takes a list (default 1,100; the size figure
// streams the largest), --cpu-rate and --watermill, and --only cpu, which
// runs only when named.
func TestNewFlags(t *testing.T) {
	t.Parallel()
	opt, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(opt.WALTxs, []int{1, 100}) || opt.WALTx != 100 || opt.CPURate != 2000 || !opt.Watermill || opt.WALProfile != "" {
		t.Errorf("defaults: --wal-tx %v (size %d), --cpu-rate %d, --watermill %v, --wal-profile %q", opt.WALTxs, opt.WALTx, opt.CPURate, opt.Watermill, opt.WALProfile)
	}
	if opt.want("cpu") {
		t.Error("the cpu figure must run only when named")
	}
	opt, err = parseFlags([]string{"--only", "cpu,wal", "--wal-tx", "10, 1,10", "--cpu-rate", "500", "--watermill=false", "--wal-profile", "/tmp/x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !opt.want("cpu") || !opt.want("wal") || opt.want("write") {
		t.Errorf("--only cpu,wal: %v", opt.Only)
	}
	if !reflect.DeepEqual(opt.WALTxs, []int{10, 1}) || opt.WALTx != 10 || opt.CPURate != 500 || opt.Watermill || opt.WALProfile != "/tmp/x" {
		t.Errorf("--wal-tx 10,1,10 → %v (size %d), --cpu-rate %d, --watermill %v", opt.WALTxs, opt.WALTx, opt.CPURate, opt.Watermill)
	}
	for _, args := range [][]string{{"--wal-tx", "1,x"}, {"--wal-tx", "0"}, {"--wal-tx", ","}, {"--cpu-rate", "0"}, {"--only", "cpus"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

// TestParseResult: the peer's last line (peers/watermill's result, the
// relay child's relayResult) is read field by field; a line that is not
// one, or whose counts do not add up, is an error naming it.
func TestParseResult(t *testing.T) {
	t.Parallel()
	line := `{"elapsed":1500000000,"done_at":1700000000000000000,"delivery":{"expected":3,"distinct":3,"total":4,"bad":0},"max_rss_kb":17000,"user_cpu_s":0.5,"sys_cpu_s":0.25,"times":[1,2,3],"handed":[1,2,3]}` + "\n"
	res, err := parseResult([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if res.Elapsed != 1500*time.Millisecond || !res.Delivery.OK() || res.Delivery.Dups() != 1 || res.MaxRSSKB != 17000 || res.UserCPU+res.SysCPU != 0.75 || len(res.Times) != 3 {
		t.Errorf("parsed %+v", res)
	}
	for _, bad := range []string{"running\n", `{"delivery":{"expected":3,"distinct":4,"total":2}}`} {
		if _, err := parseResult([]byte(bad)); err == nil || !strings.Contains(err.Error(), "relay child: result") {
			t.Errorf("%q: got %v, want an error naming the line", bad, err)
		}
	}
}

// TestParseTraces: each sample of `go tool pprof -traces` goes to the phase
// of the innermost function on its stack that has one.
func TestParseTraces(t *testing.T) {
	t.Parallel()
	const traces = `File: bench
Type: cpu
-----------+-------------------------------------------------------
      20ms   internal/runtime/syscall/linux.Syscall6
             github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage
             github.com/pgoutbox/outbox/internal/engine.(*deleter).exec
             github.com/pgoutbox/outbox/internal/engine.(*walSource).batch
-----------+-------------------------------------------------------
      10ms   github.com/pgoutbox/outbox/internal/wal.(*decoder).message
             github.com/pgoutbox/outbox/internal/wal.(*Stream).decode
             github.com/pgoutbox/outbox/internal/wal.(*Stream).loop
-----------+-------------------------------------------------------
      30ms   runtime.scanobject
             runtime.gcDrain
             runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
     1.5s   github.com/jackc/pgx/v5/pgconn.(*PgConn).ReceiveMessage
             github.com/pgoutbox/outbox/internal/engine.(*walSource).dropCancelled
             github.com/pgoutbox/outbox/internal/engine.(*walSource).batch
-----------+-------------------------------------------------------
      40ms   internal/runtime/syscall/linux.EpollWait
             runtime.netpoll
             runtime.findRunnable
             runtime.schedule
             runtime.park_m
             runtime.mcall
-----------+-------------------------------------------------------
`
	got, err := parseTraces(strings.NewReader(traces))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Duration{phaseRecord: 20 * time.Millisecond, phaseDecode: 10 * time.Millisecond,
		phaseGC: 30 * time.Millisecond, phaseCancel: 1500 * time.Millisecond, phaseSched: 40 * time.Millisecond}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("phases %v, want %v", got, want)
	}
}

// TestSQLTracer: statements fold to their kind, a batch is one round trip,
// and the harness's own statements on the relay's pool are not counted.
func TestSQLTracer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.Pool(t, "")
	tr := newSQLTracer("bench_x")
	if got := tr.key(`SELECT  1 FROM "bench_x"."t"
	  WHERE a = $12`); got != `SELECT N FROM S."t" WHERE a = N` {
		t.Errorf("kind %q", got)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	c, err := pgx.ConnectConfig(ctx, func() *pgx.ConnConfig { cc := conn.Conn().Config().Copy(); cc.Tracer = tr; return cc }())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	for i := range 3 {
		if _, err := c.Exec(ctx, "SELECT $1::int", i); err != nil {
			t.Fatal(err)
		}
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SELECT 2")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(untraced(ctx), "SELECT 3"); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int64{}
	for _, s := range tr.stats() {
		got[s.Key] = [2]int64{s.Calls, s.RoundTrips}
	}
	want := map[string][2]int64{"SELECT N::int": {3, 3}, "batch: SELECT N": {2, 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stats %v, want %v", got, want)
	}
}

// TestWatermillFill: the backlog filled in SQL holds the envelope the
// writers build in Go (forwarder's messageEnvelope: the destination, the
// base64 payload, the index as metadata), each row in its transaction.
func TestWatermillFill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &harness{opt: options{Log: testLog{t}, DatabaseURL: testdb.URL(), Timeout: time.Minute}, prefix: testdb.NewSchemaName("bench"), pool: testdb.Pool(t, "")}
	t.Cleanup(func() {
		if h.peerTmp != "" {
			h.close()
		}
	})
	s, err := h.setupWatermill(ctx, "wmfill")
	if s != "" {
		t.Cleanup(func() { testdb.Drop(t, s) })
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := h.fillWatermill(ctx, s, 5, 3, 1); err != nil {
		t.Fatal(err)
	}
	type envelope struct {
		DestinationTopic string            `json:"destination_topic"`
		UUID             string            `json:"uuid"`
		Payload          []byte            `json:"payload"`
		Metadata         map[string]string `json:"metadata"`
	}
	rows, err := h.pool.Query(ctx, `SELECT payload::text, metadata::text, transaction_id::text FROM `+pgx.Identifier{s, watermillTable}.Sanitize()+` ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ Payload, Metadata, Tx string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Tx == got[1].Tx {
		t.Fatalf("want 3 rows in 3 transactions: %+v", got)
	}
	for i, r := range got {
		var fromSQL, fromGo envelope
		if err := json.Unmarshal([]byte(r.Payload), &fromSQL); err != nil {
			t.Fatalf("row %d: %v: %s", i, err, r.Payload)
		}
		b, err := watermillEnvelope(order(int64(5 + i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &fromGo); err != nil {
			t.Fatal(err)
		}
		var p1, p2 map[string]any
		if json.Unmarshal(fromSQL.Payload, &p1) != nil || json.Unmarshal(fromGo.Payload, &p2) != nil || !reflect.DeepEqual(p1, p2) {
			t.Errorf("row %d: payload %s, the writers' %s", i, fromSQL.Payload, fromGo.Payload)
		}
		if fromSQL.DestinationTopic != watermillDest || !reflect.DeepEqual(fromSQL.Metadata, fromGo.Metadata) || fromSQL.UUID == "" || r.Metadata != "{}" {
			t.Errorf("row %d: %+v (metadata %s), want like %+v", i, fromSQL, r.Metadata, fromGo)
		}
	}
}
