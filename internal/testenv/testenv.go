// Package testenv is the test setup that the root package's tests and
// package admin's share: a schema of the test's own on the real PostgreSQL
// (testdb), with the outbox table migrated and a Writer, and the helpers
// that write events, run a relay or an Admin, and read the table back. It
// is for tests only; no package an application builds imports it.
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// Env is one test's isolated outbox: its own schema, migrated.
type Env struct {
	T      *testing.T
	Srv    *testdb.Server // where Schema is
	Pool   *pgxpool.Pool  // its search_path is Schema
	Schema string
	Writer *outbox.Writer
}

// Setup is SetupOn the shared test database.
func Setup(t *testing.T) *Env {
	t.Helper()
	return SetupOn(t, testdb.Shared())
}

// SetupOn marks t parallel, creates a schema on srv, migrates the outbox
// table into it and returns it with a pool and a Writer on it.
func SetupOn(t *testing.T, srv *testdb.Server) *Env {
	t.Helper()
	t.Parallel()
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	if _, err := outbox.Migrate(Ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Srv: srv, Pool: pool, Schema: schema, Writer: w}
}

// Ctx is a context of a minute, cancelled when the test ends.
func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// Relay returns a relay of pub on e's table.
func (e *Env) Relay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.T.Helper()
	cfg.Schema = e.Schema
	r, err := outbox.NewRelay(e.Pool, pub, cfg)
	if err != nil {
		e.T.Fatalf("NewRelay: %v", err)
	}
	return r
}

// Admin returns an Admin on e's table.
func (e *Env) Admin() *admin.Admin {
	e.T.Helper()
	a, err := admin.New(e.Pool, admin.Config{Schema: e.Schema})
	if err != nil {
		e.T.Fatal(err)
	}
	return a
}

// Run starts r in the background; the returned func stops it and waits,
// and runs when the test ends if the test did not call it.
func (e *Env) Run(r *outbox.Relay) (stop func()) {
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(c) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.T.Errorf("Relay.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.T.Error("relay did not stop within 30s")
		}
	}
	e.T.Cleanup(stop)
	return stop
}

// Event is event i of order aggID: type order.created, a JSON payload
// naming both.
func Event(aggID string, i int) outbox.Event {
	return outbox.Event{
		AggregateType: "order", AggregateID: aggID, EventType: "order.created",
		Payload: []byte(fmt.Sprintf(`{"order_id":%q,"n":%d}`, aggID, i)),
	}
}

// AggIDs names each message by its aggregate and its number in Event's
// payload ("X1", "X2"), for asserting an order.
func AggIDs(ms []outbox.Message) []string {
	var out []string
	for _, m := range ms {
		var p struct{ N int }
		_ = json.Unmarshal(m.Payload, &p)
		out = append(out, fmt.Sprintf("%s%d", m.AggregateID, p.N))
	}
	return out
}

// Write commits n events, each in its own transaction, and returns their ids.
func (e *Env) Write(n int) []uuid.UUID {
	e.T.Helper()
	var ids []uuid.UUID
	for i := range n {
		ids = append(ids, e.commit(Event(fmt.Sprintf("o-%d", i), i))...)
	}
	return ids
}

// WriteBatch commits n events in one transaction with one Write call.
func (e *Env) WriteBatch(n int) []uuid.UUID {
	e.T.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = Event(fmt.Sprintf("o-%d", i), i)
	}
	return e.commit(evs...)
}

// WriteAgg commits events from..from+count-1 of aggregate agg in one
// transaction.
func (e *Env) WriteAgg(agg string, from, count int) []uuid.UUID {
	e.T.Helper()
	evs := make([]outbox.Event, count)
	for i := range evs {
		evs[i] = Event(agg, from+i)
	}
	return e.commit(evs...)
}

// WriteTyped commits n events of eventType in one transaction.
func (e *Env) WriteTyped(eventType string, n int) {
	e.T.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = Event(fmt.Sprint(i), i)
		evs[i].EventType = eventType
	}
	e.commit(evs...)
}

// commit writes evs in one transaction with one Write call.
func (e *Env) commit(evs ...outbox.Event) []uuid.UUID {
	e.T.Helper()
	var ids []uuid.UUID
	err := pgx.BeginFunc(Ctx(e.T), e.Pool, func(tx pgx.Tx) error {
		var err error
		ids, err = e.Writer.Write(Ctx(e.T), tx, evs...)
		return err
	})
	if err != nil {
		e.T.Fatalf("write: %v", err)
	}
	return ids
}

// Count counts the rows of outbox_events matching where.
func (e *Env) Count(where string) int {
	e.T.Helper()
	var n int
	if err := e.Pool.QueryRow(Ctx(e.T), "SELECT count(*) FROM outbox_events WHERE "+where).Scan(&n); err != nil {
		e.T.Fatalf("count %s: %v", where, err)
	}
	return n
}

// Exec runs sql on e's schema, failing the test on an error.
func (e *Env) Exec(sql string, args ...any) {
	e.T.Helper()
	if _, err := e.Pool.Exec(Ctx(e.T), sql, args...); err != nil {
		e.T.Fatalf("%s: %v", sql, err)
	}
}

// Gauge reads a gauge's (or a counter's) current value from reg.
func Gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

// WaitUnlocked waits until n rows of outbox_events (on pool's search_path)
// can be locked. A session that ended on the client side (cancelled,
// terminated) keeps its row locks until its backend has exited, and until
// then a claim, which skips locked rows, finds nothing.
func WaitUnlocked(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	free := 0
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d of %d rows unlocked", free, n) }),
		10*time.Second, "the rows an ended session held unlocked", func() bool {
			err := pool.QueryRow(Ctx(t), `SELECT count(*) FROM (SELECT 1 FROM outbox_events FOR UPDATE SKIP LOCKED) r`).Scan(&free)
			return err == nil && free == n
		})
}
