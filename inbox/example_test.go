package inbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// A shipping service's HandleOrderCreated: the shipment and the inbox record
// commit together, so however often the broker delivers order.created, one
// shipment exists.
func Example_handleOrderCreated() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testdb.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	schema := testdb.NewSchemaName("example")
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck

	// Once, at deploy time.
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	shipments := pgx.Identifier{schema, "shipments"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+shipments+` (order_id TEXT NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	in, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}
	handleOrderCreated := func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+shipments+` (order_id) VALUES ($1)`, msg.AggregateID)
		return err
	}

	// What a broker adapter does with each delivery; here the same message
	// arrives three times.
	headers := (&outbox.Message{ID: [16]byte{1}, EventType: "order.created", AggregateType: "order", AggregateID: "42"}).StandardHeaders()
	msg, err := inbox.MessageFromHeaders(headers, []byte(`{"order_id":"42"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		res, err := in.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx) error {
			return handleOrderCreated(ctx, tx, msg)
		})
		fmt.Printf("duplicate=%v err=%v\n", res.Duplicate, err)
	}

	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM `+shipments).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// duplicate=false err=<nil>
	// duplicate=true err=<nil>
	// duplicate=true err=<nil>
	// shipments: 1
}
