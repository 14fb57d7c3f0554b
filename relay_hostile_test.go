package outbox_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/internal/wal"
	"github.com/pgoutbox/outbox/memory"
)

// hostileRow is a row a plain INSERT accepts that no Writer would write,
// and what the relay must make of it.
type hostileRow struct {
	name string
	cols string // extra columns, after the five every row has
	vals string // their values, as SQL
	// One of: delivered (check, if set, judges the message), dead (with
	// last_error containing deadWhy), waiting (still pending, scheduled).
	want    string
	deadWhy string
	check   func(m outbox.Message) error
}

// hostileRows are the edge values of each column a plain INSERT accepts.
func hostileRows() []hostileRow {
	header := func(k, v string) func(outbox.Message) error {
		return func(m outbox.Message) error {
			if got, ok := m.Headers[k]; !ok || got != v {
				return fmt.Errorf("header %q = %q (set: %v), want %q", k, got, ok, v)
			}
			return nil
		}
	}
	return []hostileRow{
		{name: "numeric header", cols: "headers", vals: `'{"retries": 3, "ok": "yes"}'`, want: "delivered", check: header("retries", "3")},
		{name: "nested header", cols: "headers", vals: `'{"a": {"b": [1, 2]}}'`, want: "delivered", check: header("a", `{"b":[1,2]}`)},
		{name: "boolean header", cols: "headers", vals: `'{"flag": true}'`, want: "delivered", check: header("flag", "true")},
		{name: "null header value", cols: "headers", vals: `'{"gone": null, "kept": "x"}'`, want: "delivered", check: func(m outbox.Message) error {
			if _, ok := m.Headers["gone"]; ok {
				return fmt.Errorf("a null header was sent: %v", m.Headers)
			}
			return header("kept", "x")(m)
		}},
		{name: "JSON null headers", cols: "headers", vals: `'null'`, want: "delivered"},
		{name: "array headers", cols: "headers", vals: `'[1, 2]'`, want: "dead", deadWhy: "headers"},
		{name: "string headers", cols: "headers", vals: `'"x"'`, want: "dead", deadWhy: "headers"},
		{name: "created_at infinity", cols: "created_at", vals: `'infinity'`, want: "dead", deadWhy: "created_at"},
		{name: "created_at -infinity", cols: "created_at", vals: `'-infinity'`, want: "dead", deadWhy: "created_at"},
		{name: "created_at year 294276", cols: "created_at", vals: `'294276-12-31 23:59:59+00'`, want: "delivered"},
		{name: "deliver_at infinity", cols: "deliver_at", vals: `'infinity'`, want: "waiting"},
		{name: "deliver_at -infinity", cols: "deliver_at", vals: `'-infinity'`, want: "delivered"},
		{name: "attempts max", cols: "attempts", vals: `2147483647`, want: "delivered"},
		{name: "attempts min", cols: "attempts", vals: `-2147483648`, want: "delivered"},
		{name: "payload JSON null", cols: "", vals: "", want: "delivered", check: payload("null")},
		{name: "payload scalar", cols: "", vals: "", want: "delivered", check: payload("42")},
		{name: "payload array", cols: "", vals: "", want: "delivered", check: payload("[1, 2]")},
		{name: "control characters", cols: "", vals: "", want: "delivered"},
	}
}

func payload(want string) func(outbox.Message) error {
	return func(m outbox.Message) error {
		if string(m.Payload) != want {
			return fmt.Errorf("payload %q, want %q", m.Payload, want)
		}
		return nil
	}
}

// insertHostile inserts h with a plain INSERT and returns its id.
func (e *env) insertHostile(h hostileRow) uuid.UUID {
	e.t.Helper()
	id := uuid.Must(uuid.NewV7())
	typ, agg, pl := "hostile", "h-"+id.String()[:8], `'{"n": 1}'`
	switch h.name {
	case "payload JSON null":
		pl = `'null'`
	case "payload scalar":
		pl = `'42'`
	case "payload array":
		pl = `'[1, 2]'`
	case "control characters":
		typ, agg = "ctl\x01\x1f\x7f", "agg\t\r\n\x02"
	}
	cols, vals := "", ""
	if h.cols != "" {
		cols, vals = ", "+h.cols, ", "+h.vals
	}
	q := fmt.Sprintf(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload%s)
VALUES ($1, 'hostile', $2, $3, %s%s)`, cols, pl, vals)
	if _, err := e.pool.Exec(ctx(e.t), q, id, agg, typ); err != nil {
		e.t.Fatalf("insert %s: %v", h.name, err)
	}
	return id
}

// logRecorder keeps the relay's log lines at WARN and above.
type logRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecorder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logRecorder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestHostileRows: every row a plain INSERT accepts ends delivered, a dead
// letter naming why, or waiting (scheduled far ahead), with either source;
// the healthy events written around them are all delivered; the relay's
// status, gauges and housekeeping keep working; no later event is held up.
func TestHostileRows(t *testing.T) {
	for _, source := range []outbox.Source{outbox.SourceTable, outbox.SourceWAL} {
		t.Run(string(source), func(t *testing.T) {
			var (
				e     *env
				names wal.Names
			)
			if source == outbox.SourceWAL {
				e, names = setupWAL(t)
			} else {
				e = setup(t)
			}
			mem := memory.New()
			logs := &logRecorder{}
			reg := prometheus.NewRegistry()
			cfg := outbox.RelayConfig{PollInterval: 20 * time.Millisecond, StatsInterval: 100 * time.Millisecond,
				Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			if source == outbox.SourceWAL {
				cfg = walConfig(cfg)
			}
			r := e.relay(mem, cfg)
			sig := outbox.Signals(r)
			sig.Init()
			e.run(r)
			if source == outbox.SourceWAL {
				waitStreaming(t, r, 30*time.Second)
			}
			rows := hostileRows()
			ids := make([]uuid.UUID, len(rows))
			var healthy []uuid.UUID
			for i, h := range rows {
				healthy = append(healthy, e.write(1)...)
				ids[i] = e.insertHostile(h)
			}
			healthy = append(healthy, e.write(20)...)
			var written string
			if err := e.pool.QueryRow(ctx(t), `SELECT pg_current_wal_lsn()::text`).Scan(&written); err != nil {
				t.Fatal(err)
			}

			c := ctx(t)
			want := len(healthy)
			for _, h := range rows {
				if h.want == "delivered" {
					want++
				}
			}
			if err := mem.WaitDistinct(c, want); err != nil {
				e.dump()
				t.Fatalf("%d of %d events delivered: %v\nlogs:\n%s", mem.Distinct(), want, err, logs.String())
			}
			// A batch's dead letters are recorded after its publishes,
			// which the publisher saw: wait for the record.
			var deadIDs []uuid.UUID
			for i, h := range rows {
				if h.want == "dead" {
					deadIDs = append(deadIDs, ids[i])
				}
			}
			var n int
			testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d recorded", n, len(deadIDs)) }), 15*time.Second,
				"the dead letters recorded", func() bool {
					if err := e.pool.QueryRow(c, `SELECT count(*) FROM outbox_events WHERE id = ANY($1) AND dead_at IS NOT NULL`, deadIDs).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n == len(deadIDs)
				})
			got := map[uuid.UUID]outbox.Message{}
			for _, m := range mem.Messages() {
				got[m.ID] = m
			}
			for _, id := range healthy {
				if _, ok := got[id]; !ok {
					t.Errorf("healthy event %s not delivered", id)
				}
			}
			for i, h := range rows {
				m, delivered := got[ids[i]]
				var lastErr string
				var dead bool
				err := e.pool.QueryRow(c, `SELECT COALESCE(last_error, ''), dead_at IS NOT NULL FROM outbox_events WHERE id = $1`, ids[i]).Scan(&lastErr, &dead)
				switch {
				case h.want == "delivered" && !delivered:
					t.Errorf("%s: not delivered (row: dead=%v last_error=%q, %v)", h.name, dead, lastErr, err)
				case h.want == "delivered" && h.check != nil:
					if err := h.check(m); err != nil {
						t.Errorf("%s: %v", h.name, err)
					}
				case h.want != "delivered" && delivered:
					t.Errorf("%s: delivered, want %s", h.name, h.want)
				case h.want == "dead" && (err != nil || !dead || !strings.Contains(lastErr, h.deadWhy)):
					t.Errorf("%s: dead=%v last_error=%q (%v), want a dead letter naming %s", h.name, dead, lastErr, err, h.deadWhy)
				case h.want == "waiting" && (err != nil || dead):
					t.Errorf("%s: dead=%v last_error=%q (%v), want it waiting", h.name, dead, lastErr, err)
				}
			}
			// Nothing delivered twice: a failing mark re-sends its neighbours.
			for id, n := range mem.Count() {
				if n > 1 {
					t.Errorf("event %s delivered %d times", id, n)
				}
			}
			// The operator's views keep answering.
			a, err := admin.New(e.pool, admin.Config{Schema: e.schema})
			if err != nil {
				t.Fatal(err)
			}
			st, err := a.Status(c)
			if err != nil {
				t.Fatalf("Status: %v", err)
			}
			if st.Scheduled != 1 {
				t.Errorf("Status: %d scheduled, want 1 (deliver_at infinity)", st.Scheduled)
			}
			if _, err := a.DeadLetters(c, admin.DeadLetterFilter{}); err != nil {
				t.Errorf("DeadLetters: %v", err)
			}
			if _, err := a.DeadLetterGroups(c, false); err != nil {
				t.Errorf("DeadLetterGroups: %v", err)
			}
			// Two more stats rounds, then no housekeeping failure logged.
			sig.Housekeeping.Drain()
			sig.Housekeeping.WaitN(t, 3, 10*time.Second)
			if gauge(t, reg, "outbox_events_scheduled") != 1 {
				t.Errorf("outbox_events_scheduled = %v, want 1", gauge(t, reg, "outbox_events_scheduled"))
			}
			if l := logs.String(); strings.Contains(l, "housekeeping failed") || strings.Contains(l, "stream ended") {
				t.Errorf("the relay logged failures:\n%s", l)
			}
			// The stream moved past every row: nothing keeps WAL for them.
			if source == outbox.SourceWAL {
				e.waitQuery(15*time.Second, "slot confirmed past the rows",
					`SELECT confirmed_flush_lsn >= $2::pg_lsn FROM pg_replication_slots WHERE slot_name = $1`, names.Slot, written)
			}
		})
	}
}

// TestGaugesOldestPendingInfinite: a pending row waiting for its retry
// with created_at = 'infinity' is the first in claim order for as long as
// it waits; the gauges skip its age instead of failing every round (they
// logged "cannot scan NULL into *time.Time" and stopped refreshing).
func TestGaugesOldestPendingInfinite(t *testing.T) {
	e := setup(t)
	e.execSQL(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, created_at, attempts, retry_after, last_error)
		VALUES ('order', 'inf', 'order.created', '{}', 'infinity', 1, now() + interval '1 hour', 'refused')`)
	e.write(3)
	logs := &logRecorder{}
	reg := prometheus.NewRegistry()
	mem := memory.New()
	r := e.relay(mem, outbox.RelayConfig{PollInterval: 20 * time.Millisecond, StatsInterval: 20 * time.Millisecond,
		Registerer: reg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	sig := outbox.Signals(r)
	sig.Init()
	e.run(r)
	if err := mem.WaitDistinct(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	// Several gauge rounds with the infinite row first in line.
	sig.Housekeeping.Drain()
	sig.Housekeeping.WaitN(t, 5, 10*time.Second)
	if got := gauge(t, reg, "outbox_events_pending"); got != 1 {
		t.Errorf("outbox_events_pending = %v, want 1 (the row waiting for its retry)", got)
	}
	if strings.Contains(logs.String(), "housekeeping failed") {
		t.Errorf("the gauges failed on an infinite created_at:\n%s", logs.String())
	}
}
