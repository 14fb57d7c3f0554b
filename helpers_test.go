package outbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// env is one test's isolated outbox: its own schema, migrated. Its
// helpers are testenv's (shared with package admin's tests), under the
// names this package's tests use.
type env struct {
	t      *testing.T
	srv    *testdb.Server // where schema is
	pool   *pgxpool.Pool
	schema string
	writer *outbox.Writer
}

// The shared helpers that take no env.
var (
	ctx    = testenv.Ctx
	event  = testenv.Event
	gauge  = testenv.Gauge
	aggIDs = testenv.AggIDs
)

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
	s := testenv.SetupOn(t, srv)
	return &env{t: t, srv: s.Srv, pool: s.Pool, schema: s.Schema, writer: s.Writer}
}

// shared is e as a testenv.Env, for its helpers; e may have been built by
// hand (a table migrated otherwise).
func (e *env) shared() *testenv.Env {
	return &testenv.Env{T: e.t, Srv: e.srv, Pool: e.pool, Schema: e.schema, Writer: e.writer}
}

func (e *env) relay(pub outbox.Publisher, cfg outbox.RelayConfig) *outbox.Relay {
	e.t.Helper()
	return e.shared().Relay(pub, cfg)
}

func (e *env) admin() *admin.Admin {
	e.t.Helper()
	return e.shared().Admin()
}

// run starts r in the background; the returned func stops it and waits.
func (e *env) run(r *outbox.Relay) (stop func()) { return e.shared().Run(r) }

// write commits n events, each in its own transaction, and returns their ids.
func (e *env) write(n int) []uuid.UUID {
	e.t.Helper()
	return e.shared().Write(n)
}

// writeBatch commits n events in one transaction with one Write call.
func (e *env) writeBatch(n int) []uuid.UUID {
	e.t.Helper()
	return e.shared().WriteBatch(n)
}

// writeAgg commits events n..n+count-1 of aggregate agg in one transaction.
func (e *env) writeAgg(agg string, from, count int) []uuid.UUID {
	e.t.Helper()
	return e.shared().WriteAgg(agg, from, count)
}

func (e *env) count(where string) int {
	e.t.Helper()
	return e.shared().Count(where)
}

func (e *env) execSQL(sql string, args ...any) {
	e.t.Helper()
	e.shared().Exec(sql, args...)
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
