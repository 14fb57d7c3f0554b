package inbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

// A shipping service's HandleOrderCreated: the shipment and the inbox record
// commit together, so however often the broker delivers order.created, one
// shipment exists.
func Example_handleOrderCreated() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	// Once, at deploy time.
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS shipments (order_id TEXT NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	in, err := inbox.New(pool, inbox.Config{Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}
	handleOrderCreated := func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
		return err
	}

	// What a broker adapter does with each delivery; here the same message
	// arrives three times.
	headers := map[string]string{
		outboxtype.HeaderEventID: "0190d7c4-5e3a-7000-8000-000000000042", outboxtype.HeaderEventType: "order.created",
		outboxtype.HeaderAggregateType: "order", outboxtype.HeaderAggregateID: "42",
	}
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
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM shipments WHERE order_id = '42'`).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// duplicate=false err=<nil>
	// duplicate=true err=<nil>
	// duplicate=true err=<nil>
	// shipments: 1
}
