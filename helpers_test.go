package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// env is one test's isolated outbox: its own schema, migrated.
type env struct {
	t      *testing.T
	srv    *testdb.Server // where schema is
	pool   *pgxpool.Pool
	schema string
	writer *outbox.Writer
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupOn(t, testdb.Shared())
}

// setupLogical is setup on a server with wal_level=logical (testdb.Logical).
func setupLogical(t *testing.T) *env {
	t.Helper()
	return setupOn(t, testdb.Logical(t))
}

func setupOn(t *testing.T, srv *testdb.Server) *env {
	t.Helper()
	t.Parallel()
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, pool: pool, schema: schema, writer: w}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func (e *env) relay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	cfg.Schema = e.schema
	r, err := outbox.NewRelay(e.pool, pub, cfg)
	if err != nil {
		e.t.Fatalf("NewRelay: %v", err)
	}
	return r
}

// run starts r in the background; the returned func stops it and waits.
func (e *env) run(r *outbox.Relay) (stop func()) {
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
				e.t.Errorf("Relay.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("relay did not stop within 30s")
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func event(aggID string, i int) outbox.Event {
	return outbox.Event{
		AggregateType: "order", AggregateID: aggID, EventType: "order.created",
		Payload: []byte(fmt.Sprintf(`{"order_id":%q,"n":%d}`, aggID, i)),
	}
}

// write commits n events, each in its own transaction, and returns their ids.
func (e *env) write(n int) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	for i := range n {
		err := pgx.BeginFunc(ctx(e.t), e.pool, func(tx pgx.Tx) error {
			got, err := e.writer.Write(ctx(e.t), tx, event(fmt.Sprintf("o-%d", i), i))
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			e.t.Fatalf("write: %v", err)
		}
	}
	return ids
}

// writeBatch commits n events in one transaction with one Write call.
func (e *env) writeBatch(n int) []uuid.UUID {
	e.t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("o-%d", i), i)
	}
	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx(e.t), e.pool, func(tx pgx.Tx) error {
		var err error
		ids, err = e.writer.Write(ctx(e.t), tx, evs...)
		return err
	})
	if err != nil {
		e.t.Fatalf("write batch: %v", err)
	}
	return ids
}

func (e *env) count(where string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), "SELECT count(*) FROM outbox_events WHERE "+where).Scan(&n); err != nil {
		e.t.Fatalf("count %s: %v", where, err)
	}
	return n
}

// extraPool is a second pool on e's schema, with tracer (if not nil) and
// params set on every session; closed when the test ends.
func (e *env) extraPool(tracer pgx.QueryTracer, params map[string]string) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(e.srv.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = tracer
	cfg.ConnConfig.RuntimeParams["search_path"] = e.schema
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(ctx(e.t), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(pool.Close)
	return pool
}

type countingTracer struct{ n *int }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	*c.n++
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// gauge reads a gauge's current value from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
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

func (e *env) writeTyped(eventType string, n int) {
	e.t.Helper()
	evs := make([]outbox.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprint(i), i)
		evs[i].EventType = eventType
	}
	err := pgx.BeginFunc(ctx(e.t), e.pool, func(tx pgx.Tx) error {
		_, err := e.writer.Write(ctx(e.t), tx, evs...)
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}
