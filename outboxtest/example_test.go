package outboxtest_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtest"
)

// createOrder is business code: the order and its event in the caller's
// transaction.
func createOrder(ctx context.Context, tx pgx.Tx, id string, total float64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
		return err
	}
	payload, err := outbox.JSONPayload(map[string]any{"order_id": id, "total": total})
	if err != nil {
		return err
	}
	_, err = outbox.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: id, EventType: "order.created", Payload: payload})
	return err
}

// A test of business code, in your _test.go file: the transaction that
// creates the order wrote its event, and the relay publishes it once
// committed.
func Example() {
	testCreateOrder := func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := outboxtest.NewDB(t, os.Getenv("DATABASE_URL")) // a schema of this test's own
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total numeric)`); err != nil {
			t.Fatal(err)
		}

		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if err := createOrder(ctx, tx, "42", 99.5); err != nil {
			t.Fatal(err)
		}
		// Seen through the open transaction.
		outboxtest.RequireWritten(t, tx, outboxtest.Match{
			EventType: "order.created", AggregateID: "42", PayloadContains: `{"total": 99.5}`,
		})
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}

		// A relay pass, synchronous, into memory: no broker, no sleep.
		relay := outboxtest.NewRelay(t, db.Pool, outbox.RelayConfig{})
		relay.Drain()
		relay.RequirePublished(outboxtest.Match{EventType: "order.created", AggregateID: "42"})
	}
	_ = testCreateOrder // func TestCreateOrder(t *testing.T) { ... }
}

// The same with database/sql: pass the *sql.Tx your code wrote in.
func ExampleRequireWritten_databaseSQL() {
	testRefund := func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := outboxtest.NewDB(t, os.Getenv("DATABASE_URL"))
		sqlDB, err := sql.Open("pgx", db.URL) // db.URL has the test's schema as search_path
		if err != nil {
			t.Fatal(err)
		}
		defer sqlDB.Close()
		tx, err := sqlDB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := outbox.WriteSQL(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42",
			EventType: "order.refunded", Payload: []byte(`{"amount": 10}`)}); err != nil {
			t.Fatal(err)
		}
		ev := outboxtest.RequireWritten(t, tx, outboxtest.Match{EventType: "order.refunded"})
		if ev.AggregateID != "42" {
			t.Errorf("refund written for %s", ev.AggregateID)
		}
		outboxtest.RequireNotWritten(t, tx, outboxtest.Match{EventType: "order.cancelled"})
	}
	_ = testRefund
}

// A test of a consumer: each event the relay publishes, delivered twice,
// ships the order once.
func ExampleRequireIdempotent() {
	testShipping := func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := outboxtest.NewDB(t, os.Getenv("DATABASE_URL")) // the inbox table is migrated too
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total numeric);
			CREATE TABLE shipments (order_id text NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return createOrder(ctx, tx, "42", 99.5) }); err != nil {
			t.Fatal(err)
		}
		published := outboxtest.NewRelay(t, db.Pool, outbox.RelayConfig{}).Drain()

		in, err := inbox.New(db.Pool, inbox.Config{Consumer: "shipping"})
		if err != nil {
			t.Fatal(err)
		}
		ship := in.Processor(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, m.AggregateID)
			return err
		})
		shipments := func() (n int) {
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM shipments`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		outboxtest.RequireIdempotent(t, ship, outboxtest.Delivered(t, published[0]), shipments)
	}
	_ = testShipping
}

// A relay running in the background, as in production: wait for the
// message instead of sleeping.
func ExampleWaitPublished() {
	testBackground := func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		db := outboxtest.NewDB(t, os.Getenv("DATABASE_URL"))
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, total numeric)`); err != nil {
			t.Fatal(err)
		}
		pub := outboxtest.NewRelay(t, db.Pool, outbox.RelayConfig{}).Publisher()
		relay, err := outbox.NewRelay(db.Pool, pub, outbox.RelayConfig{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- relay.Run(ctx) }()
		defer func() { cancel(); <-done }()

		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return createOrder(ctx, tx, "42", 99.5) }); err != nil {
			t.Fatal(err)
		}
		outboxtest.WaitPublished(t, pub, outboxtest.Match{AggregateID: "42"}, 10*time.Second)
	}
	_ = testBackground
}
