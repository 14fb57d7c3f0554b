package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox"
)

// orders creates e's business table.
func (e *env) orders() {
	e.t.Helper()
	if _, err := e.pool.Exec(ctx(e.t), `CREATE TABLE orders (id text PRIMARY KEY, total int NOT NULL)`); err != nil {
		e.t.Fatal(err)
	}
}

// countQueries counts the statements pgx sends outside batches, and the
// batches.
type countQueries struct{ queries, batches int }

func (c *countQueries) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries++
	return ctx
}
func (c *countQueries) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countQueries) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches++
	return ctx
}
func (c *countQueries) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *countQueries) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func TestQueueInTransaction(t *testing.T) {
	e := setup(t)
	e.orders()
	tr := &countQueries{}
	pool := e.extraPool(tr, nil)

	var ids []uuid.UUID
	err := pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
		before := *tr
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, "42", 100)
		var err error
		ids, err = e.writer.Queue(ctx(t), b, event("42", 1), event("42", 2))
		if err != nil {
			return err
		}
		if err := tx.SendBatch(ctx(t), b).Close(); err != nil {
			return err
		}
		// The events went with the order: no statement of their own.
		if tr.queries != before.queries || tr.batches != before.batches+1 {
			t.Errorf("queries %d -> %d, batches %d -> %d: want no query and one batch",
				before.queries, tr.queries, before.batches, tr.batches)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(ctx(t), `SELECT id FROM outbox_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != ids[0] || got[1] != ids[1] {
		t.Errorf("rows %v, want the queued ids %v in order", got, ids)
	}

	// Rolled back with the transaction.
	rolledBack := errors.New("business rule failed")
	err = pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, "43", 100)
		if _, err := e.writer.Queue(ctx(t), b, event("43", 1)); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx(t), b).Close(); err != nil {
			return err
		}
		return rolledBack
	})
	if !errors.Is(err, rolledBack) {
		t.Fatalf("err = %v", err)
	}
	if n := e.count("true"); n != 2 {
		t.Errorf("table holds %d events after a rollback, want 2", n)
	}
}

// A batch sent outside a transaction runs in one implicit transaction: the
// order and its event commit together, or neither does.
func TestQueueOutsideTransaction(t *testing.T) {
	e := setup(t)
	e.orders()

	b := &pgx.Batch{}
	b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, "1", 100)
	if _, err := e.writer.Queue(ctx(t), b, event("1", 1)); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.SendBatch(ctx(t), b).Close(); err != nil {
		t.Fatal(err)
	}

	b = &pgx.Batch{}
	b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, "2", 100)
	if _, err := e.writer.Queue(ctx(t), b, event("2", 1)); err != nil {
		t.Fatal(err)
	}
	b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, "1", 100) // duplicate key
	err := e.pool.SendBatch(ctx(t), b).Close()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("err = %v, want the duplicate order's unique violation", err)
	}
	var orders int
	if err := e.pool.QueryRow(ctx(t), `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if n := e.count("true"); orders != 1 || n != 1 {
		t.Errorf("%d orders and %d events, want the first batch's 1 and 1", orders, n)
	}
}

func TestQueueErrors(t *testing.T) {
	e := setup(t)

	// Invalid events queue nothing.
	b := &pgx.Batch{}
	_, err := e.writer.Queue(ctx(t), b, event("1", 1), outbox.Event{AggregateType: "order", AggregateID: "2", EventType: "order.created"})
	var ve *outbox.ValidationError
	if !errors.As(err, &ve) || ve.Index != 1 || ve.Field != "payload" {
		t.Errorf("err = %v, want a ValidationError on event 1's payload", err)
	}
	if b.Len() != 0 {
		t.Errorf("batch holds %d queries after a refused call, want 0", b.Len())
	}
	if _, err := e.writer.Queue(ctx(t), nil, event("1", 1)); err == nil || !strings.Contains(err.Error(), "nil *pgx.Batch") {
		t.Errorf("nil batch: err = %v", err)
	}
	if ids, err := e.writer.Queue(ctx(t), b); ids != nil || err != nil || b.Len() != 0 {
		t.Errorf("no events: %v, %v, %d queries", ids, err, b.Len())
	}

	// The INSERT's own error, here an id written twice (an idempotency
	// key): Close names the table; Exec, reading the results one by one,
	// returns PostgreSQL's error as is.
	dup := event("1", 1)
	dup.ID = uuid.New()
	first := &pgx.Batch{}
	if _, err := e.writer.Queue(ctx(t), first, dup); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.SendBatch(ctx(t), first).Close(); err != nil {
		t.Fatal(err)
	}
	for _, read := range []string{"Close", "Exec"} {
		b := &pgx.Batch{}
		if _, err := e.writer.Queue(ctx(t), b, dup); err != nil {
			t.Fatal(err)
		}
		br := e.pool.SendBatch(ctx(t), b)
		if read == "Exec" {
			_, err = br.Exec()
			br.Close()
		} else {
			err = br.Close()
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("%s: err = %v, want the unique violation", read, err)
		}
		named := strings.Contains(err.Error(), `insert 1 event(s) into "`+e.schema+`"."outbox_events"`)
		if named != (read == "Close") {
			t.Errorf("%s: err = %v: names the table %v, want %v", read, err, named, read == "Close")
		}
	}
}

// More events than one statement binds are queued as several INSERTs.
func TestQueueManyEvents(t *testing.T) {
	e := setup(t)
	evs := make([]outbox.Event, 12000)
	for i := range evs {
		evs[i] = event(fmt.Sprint(i), i)
	}
	b := &pgx.Batch{}
	ids, err := e.writer.Queue(ctx(t), b, evs...)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(evs) || b.Len() != 2 {
		t.Fatalf("%d ids, %d queued queries: want %d and 2", len(ids), b.Len(), len(evs))
	}
	if err := e.pool.SendBatch(ctx(t), b).Close(); err != nil {
		t.Fatal(err)
	}
	if n := e.count("true"); n != len(evs) {
		t.Errorf("table holds %d rows, want %d", n, len(evs))
	}
}
