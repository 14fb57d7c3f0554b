package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// env is one test's isolated database: its own schema holding the inbox table
// and an effects table the handlers write to. effects has no unique
// constraint on purpose: a second run of a handler shows up as a second row.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	inbox  *inbox.Inbox
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := inbox.Migrate(ctx(t), pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pool.Exec(ctx(t), `CREATE TABLE effects (event_id UUID NOT NULL, consumer TEXT NOT NULL DEFAULT '', note TEXT NOT NULL DEFAULT '')`); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pool: pool, schema: schema}
	e.inbox = e.newInbox(pool, "shipping")
	return e
}

func (e *env) newInbox(pool *pgxpool.Pool, consumer string) *inbox.Inbox {
	e.t.Helper()
	in, err := inbox.New(pool, inbox.Config{Schema: e.schema, Consumer: consumer})
	if err != nil {
		e.t.Fatalf("inbox.New: %v", err)
	}
	return in
}

// sqlDB opens a database/sql handle whose search_path is the test's schema.
func (e *env) sqlDB() *sql.DB {
	e.t.Helper()
	cfg, err := pgx.ParseConfig(testdb.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = e.schema
	db := stdlib.OpenDB(*cfg)
	e.t.Cleanup(func() { db.Close() })
	return db
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

func msg() inbox.Message {
	return inbox.Message{
		ID: uuid.Must(uuid.NewV7()), EventType: "order.created",
		AggregateType: "order", AggregateID: "42", Payload: []byte(`{"order_id":"42"}`),
	}
}

// effect is a handler that records one effect row for the message.
func effect(m inbox.Message) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, m.ID)
		return err
	}
}

func (e *env) effects(id uuid.UUID) int {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM effects WHERE event_id = $1`, id)
}

// recorded counts inbox rows for id, across consumers.
func (e *env) recorded(id uuid.UUID) int {
	e.t.Helper()
	return e.count(`SELECT count(*) FROM processed_events WHERE event_id = $1`, id)
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), q, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	return n
}
