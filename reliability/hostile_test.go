package reliability

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

var flagHostileSeed = flag.Uint64("reliability.seed", 1, "seed of the generated hostile rows (TestHostileRowsGenerated)")

// hostileCol is one column a hostile row sets, as text PostgreSQL casts.
type hostileCol struct {
	name, cast string
	value      *string // nil: SQL NULL
}

// hostileRow is a row a plain INSERT makes, with values chosen from the
// edges of each column's type.
type hostileRow struct {
	cols []hostileCol
	desc []string
}

func (h *hostileRow) set(name, cast string, v *string, desc string) {
	h.cols = append(h.cols, hostileCol{name, cast, v})
	h.desc = append(h.desc, desc)
}

func sp(s string) *string { return &s }

// hostileGen draws hostile rows from a seeded source: the same seed, the
// same rows.
type hostileGen struct {
	r       *rand.Rand
	big     bool // rows of tens of MB (one of each per run)
	bigDone map[string]bool
}

func pick[T any](g *hostileGen, xs ...T) T { return xs[g.r.IntN(len(xs))] }

// text values for the varchar(100) columns: empty, control characters,
// 100 characters of 2, 3 and 4 bytes, SQL and subject syntax.
func (g *hostileGen) text(prefix string) (string, string) {
	v := pick(g,
		"", " ", "a b", "tab\there", "new\nline", "cr\rlf", "ctl\x01\x7f", "zero\u200bwidth",
		strings.Repeat("é", 100), strings.Repeat("€", 100), strings.Repeat("😀", 100), strings.Repeat("x", 101),
		"'; DROP TABLE outbox_events; --", `"quoted"`, "日本語", "*", ">", "a.*", "a.>", "..", ".", "a..b",
		"ünïcödé", "%s%n{}", "{{aggregate_id}}", "\\", "ÿ", "Ω")
	if g.r.IntN(4) == 0 {
		v = prefix + v
	}
	return v, fmt.Sprintf("%q", trunc(v, 24))
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) > n/2 {
		r = r[:n/2]
	}
	return string(r) + fmt.Sprintf("…(%d bytes)", len(s))
}

func (g *hostileGen) next() hostileRow {
	var h hostileRow
	if g.r.IntN(3) > 0 {
		h.set("id", "uuid", sp(uuid.Must(uuid.NewV7()).String()), "")
	} // else the column's default
	for _, c := range []string{"aggregate_type", "aggregate_id", "event_type"} {
		v, d := g.text("")
		if c == "event_type" && g.r.IntN(3) == 0 {
			v, d = "ev", `"ev"`
		}
		h.set(c, "text", &v, c+"="+d)
	}
	payloads := []string{`{}`, `{"n": 1}`, `[]`, `"s"`, `null`, `1e400`, `-0`, `{"a": "\u00e9\ud83d\ude00"}`,
		`{"a": "\u0000"}`, strings.Repeat("[", 2000) + strings.Repeat("]", 2000), `{"k": "` + strings.Repeat("é", 600000) + `"}`}
	if g.big && !g.bigDone["payload"] && g.r.IntN(8) == 0 {
		g.bigDone["payload"] = true
		payloads = []string{`{"k": "` + strings.Repeat("x", 30<<20) + `"}`}
	}
	p := pick(g, payloads...)
	h.set("payload", "jsonb", &p, "payload="+trunc(p, 24))
	headers := []*string{nil, sp(`{}`), sp(`{"k": "v"}`), sp(`{"retries": 3}`), sp(`{"b": true, "n": null, "o": {"x": [1]}}`),
		sp(`[1, 2]`), sp(`"str"`), sp(`3`), sp(`{"bad key:": "v"}`), sp(`{"": "empty"}`), sp(`{"k": "a\r\nNats-Msg-Id: forged"}`),
		sp(`{"ü": "é"}`), sp(`{"k": "` + strings.Repeat("v", 70000) + `"}`)}
	if g.big && !g.bigDone["headers"] && g.r.IntN(8) == 0 {
		g.bigDone["headers"] = true
		headers = []*string{sp(`{"k": "` + strings.Repeat("h", 10<<20) + `"}`)}
	}
	if hd := pick(g, headers...); hd != nil || g.r.IntN(2) == 0 {
		d := "NULL"
		if hd != nil {
			d = trunc(*hd, 24)
		}
		h.set("headers", "jsonb", hd, "headers="+d)
	}
	if g.r.IntN(2) == 0 {
		v := pick(g, "infinity", "-infinity", "294276-12-31 23:59:59+00", "4713-01-01 00:00:00+00 BC", "epoch", "2000-02-29 12:00:00+14")
		h.set("created_at", "timestamptz", &v, "created_at="+v)
	}
	if g.r.IntN(3) == 0 {
		v := pick(g, "infinity", "-infinity", "2000-01-01", time.Now().Add(3*time.Second).UTC().Format(time.RFC3339Nano), "294276-12-31 23:59:59+00")
		h.set("deliver_at", "timestamptz", &v, "deliver_at="+v)
	}
	if g.r.IntN(3) == 0 {
		v := pick(g, "-1", "0", "2", "3", "2147483647", "-2147483648")
		h.set("attempts", "int", &v, "attempts="+v)
	}
	if g.r.IntN(8) == 0 {
		c := pick(g, "processed_at", "dead_at", "retry_after")
		v := pick(g, "now", "infinity", "-infinity", "2000-01-01")
		h.set(c, "timestamptz", &v, c+"="+v)
	}
	return h
}

// insert runs the plain INSERT; a row PostgreSQL refuses (a value LATIN1
// cannot hold, a NUL in JSON, a string over 100 characters) is no input.
func (h *hostileRow) insert(ctx context.Context, e *env) (string, error) {
	names := make([]string, len(h.cols))
	params := make([]string, len(h.cols))
	args := make([]any, len(h.cols))
	for i, c := range h.cols {
		names[i] = pgx.Identifier{c.name}.Sanitize()
		params[i] = fmt.Sprintf("$%d::%s", i+1, c.cast)
		args[i] = c.value
	}
	var id string
	err := e.pool.QueryRow(ctx, `INSERT INTO `+e.table+` (`+strings.Join(names, ", ")+`) VALUES (`+strings.Join(params, ", ")+`) RETURNING id::text`, args...).Scan(&id)
	return id, err
}

// TestHostileRowsGenerated: rows a plain INSERT accepts, drawn at random
// from the edges of every column (empty and 100-character multibyte
// strings, control characters, subject syntax, JSON that is not an object,
// numbers and nulls in headers, payloads and headers past the broker's
// limit, infinite and extreme timestamps, attempts at the int bounds, rows
// inserted as processed, dead or scheduled), written among healthy events,
// for both sources, in a UTF8 and a LATIN1 database. The relay binary runs
// against a NATS server of its own; each row ends delivered, a dead letter
// with its reason, or waiting for a time it was given; every healthy event
// is delivered within seconds; the relay never exits; outbox status, the
// console and /metrics answer; /readyz is ready once the rows settle.
// -reliability.seed picks the rows; -reliability.long draws ten times as
// many, with 30 MB payloads and 10 MB headers.
func TestHostileRowsGenerated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		wal      bool
		encoding string
	}{{"table UTF8", false, ""}, {"table LATIN1", false, "LATIN1"}, {"wal UTF8", true, ""}, {"wal LATIN1", true, "LATIN1"}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			slot(t)
			o := envOpts{wal: c.wal}
			if c.encoding != "" {
				o.dbURL = testdb.DatabaseEncoded(t, c.encoding)
			}
			hostileRun(t, newEnv(t, o), c.name)
		})
	}
}

func hostileRun(t *testing.T, e *env, name string) {
	n := 40
	if *flagLong {
		n = 400
	}
	g := &hostileGen{r: rand.New(rand.NewPCG(*flagHostileSeed, 0x6f7574626f78)), big: *flagLong, bigDone: map[string]bool{}}
	r := e.newRelay("r", relayOpts{workers: 2, batch: 50, maxAttempts: 3, httpAddr: true, extra: []string{"--console"}})
	p := r.start()
	addr := r.httpAddr(p)
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: e.schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Minute)
	written := map[string]time.Time{}
	good := 0
	writeGood := func() {
		id := uuid.Must(uuid.NewV7())
		payload := fmt.Sprintf(`{"n":%d,"agg":"good"}`, good)
		var err error
		if good%2 == 0 {
			err = pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
				_, err := w.Write(ctx, tx, outbox.Event{ID: id, AggregateType: "acct", AggregateID: "good", EventType: "ev", Payload: []byte(payload)})
				return err
			})
		} else { // the article's plain INSERT
			_, err = e.pool.Exec(ctx, `INSERT INTO `+e.table+` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'acct', 'good', 'ev', $2)`, id, payload)
		}
		if err != nil {
			t.Fatal(err)
		}
		written[id.String()] = time.Now()
		e.hist.Record(Committed, Written{ID: id.String(), Aggregate: "good", N: good})
		good++
	}
	hostile := map[string]hostileRow{}
	refused := 0
	for range n {
		h := g.next()
		id, err := h.insert(ctx, e)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			refused++ // PostgreSQL's to refuse: not input
		case err != nil:
			t.Fatal(err)
		default:
			hostile[id] = h
			e.ignore[id] = true
		}
		writeGood()
	}
	t.Logf("%s: %d hostile rows inserted, %d refused by PostgreSQL, %d healthy events", name, len(hostile), refused, good)

	// Settled: no row is due any more (due rows are delivered or dead).
	start := time.Now()
	due := `processed_at IS NULL AND dead_at IS NULL AND (deliver_at IS NULL OR deliver_at <= now()) AND (retry_after IS NULL OR retry_after <= now())`
	for deadline := start.Add(3 * time.Minute); time.Now().Before(deadline) && e.count(due) > 0; time.Sleep(100 * time.Millisecond) {
		if p.exited() {
			break
		}
	}
	drain := time.Since(start)
	if p.exited() {
		t.Fatalf("the relay exited (code %d): %s", p.exitCode(), tail(p.stderr.String(), 30))
	}
	if left := e.count(due); left > 0 {
		e.dumpStuck()
		t.Errorf("%d rows still due %s after the last write", left, drain.Round(time.Second))
	}

	// Every hostile row ends in a state it can be found in.
	stored := e.streamTimes()
	outcomes := map[string]int{}
	inTable := map[string]bool{}
	for id, h := range hostile {
		var dead, processed, scheduled, waiting bool
		var lastErr string
		err := e.pool.QueryRow(ctx, `SELECT dead_at IS NOT NULL, processed_at IS NOT NULL,
	coalesce(deliver_at > now(), false), coalesce(retry_after > now(), false), coalesce(last_error, '')
FROM `+e.table+` WHERE id = $1`, id).Scan(&dead, &processed, &scheduled, &waiting, &lastErr)
		gone := errors.Is(err, pgx.ErrNoRows) // the WAL source deletes what it delivered
		if err != nil && !gone {
			t.Fatalf("row %s: %v", id, err)
		}
		_, delivered := stored[id]
		inTable[id] = !gone
		if gone && !delivered {
			t.Errorf("row gone from the table, never delivered: %s", strings.Join(h.desc, " "))
			continue
		}
		insertedAs := map[string]bool{}
		for _, c := range h.cols {
			if c.value != nil && (c.name == "processed_at" || c.name == "dead_at") {
				insertedAs[c.name] = true
			}
		}
		var outcome string
		switch {
		case delivered && (insertedAs["processed_at"] || insertedAs["dead_at"]):
			t.Errorf("row inserted as processed or dead was delivered: %s", strings.Join(h.desc, " "))
		case delivered:
			outcome = "delivered"
		case dead && lastErr != "":
			outcome = "dead letter with its reason"
		case insertedAs["dead_at"] || insertedAs["processed_at"]:
			outcome = "left as inserted (processed or dead)"
		case scheduled || waiting:
			outcome = "waiting for its time"
		case dead:
			t.Errorf("dead letter without a reason: %s", strings.Join(h.desc, " "))
		default:
			t.Errorf("neither delivered, dead nor waiting: %s", strings.Join(h.desc, " "))
		}
		outcomes[outcome]++
	}

	// Healthy events: delivered, within seconds of their commit.
	var slowest time.Duration
	var slowID string
	for id, at := range written {
		st, ok := stored[id]
		if !ok {
			continue // finish reports it lost
		}
		if d := st.Sub(at); d > slowest {
			slowest, slowID = d, id
		}
	}
	if slowest > 15*time.Second {
		t.Errorf("healthy event %s delivered %s after its commit, want within seconds", slowID, slowest.Round(time.Millisecond))
	}

	// The operator's tools answer.
	if code, out, errOut := e.outbox(time.Minute, "status", "--schema", e.schema); code != 0 {
		t.Errorf("outbox status: exit %d: %s%s", code, out, tail(errOut, 10))
	}
	get := func(path string, want int, what ...string) string {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d: %s %s", path, resp.StatusCode, want, strings.Join(what, " "), trunc(string(b), 200))
		}
		return string(b)
	}
	get("/console/", 200)
	get("/console/dead-letters", 200)
	for id, h := range hostile {
		want := http.StatusOK
		if !inTable[id] {
			want = http.StatusNotFound // delivered and deleted (WAL source)
		}
		get("/console/events/"+id, want, h.desc...)
		for _, c := range h.cols {
			if c.name == "aggregate_id" && c.value != nil && *c.value != "" {
				get("/console/search?q="+url.QueryEscape(*c.value), 200)
			}
		}
	}
	if m := get("/metrics", 200); !strings.Contains(m, "outbox_events_pending") {
		t.Errorf("/metrics lacks outbox_events_pending")
	}
	var ready int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			ready = resp.StatusCode
			resp.Body.Close()
			if ready == 200 {
				break
			}
		}
	}
	if ready != 200 {
		t.Errorf("/readyz %d once the hostile rows settled, want 200", ready)
	}
	if p.exited() {
		t.Fatalf("the relay exited (code %d): %s", p.exitCode(), tail(p.stderr.String(), 30))
	}
	r.stopGracefully()

	var kinds []string
	for k, v := range outcomes {
		kinds = append(kinds, fmt.Sprintf("%d %s", v, k))
	}
	key := map[string]string{"table UTF8": "9c", "table LATIN1": "9d", "wal UTF8": "9e", "wal LATIN1": "9f"}[name]
	e.finish(Row{Key: key, Scenario: "Generated hostile rows, " + name + " (plain INSERT at every column's edges)",
		Fault: fmt.Sprintf("%d random rows (seed %d) among %d healthy events", len(hostile), *flagHostileSeed, good),
		Runs:  len(hostile), Resent: -1, Drain: drain,
		Details: []string{fmt.Sprintf("hostile rows: %s; %d more refused by PostgreSQL itself; healthy events delivered at most %s after their commit; the relay never exited, outbox status, the console and /metrics answered, /readyz ready once settled",
			strings.Join(kinds, ", "), refused, slowest.Round(time.Millisecond))}})
}

// streamTimes is when the stream stored each event id first.
func (e *env) streamTimes() map[string]time.Time {
	e.t.Helper()
	ctx := ctxT(e.t, 5*time.Minute)
	nc, err := natsgo.Connect(e.nats.url(), e.clientOpts...)
	if err != nil {
		e.t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := js.Stream(ctx, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]time.Time{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		id := m.Header.Get(outbox.HeaderEventID)
		if _, ok := out[id]; !ok {
			out[id] = m.Time
		}
	}
	return out
}
