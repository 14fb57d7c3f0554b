package outbox_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// createOrder saves an order and its order.created event in one round trip
// within the transaction: the event's INSERT is queued on the batch that
// carries the order's.
func createOrder(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, id string, total int) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total)
		payload, err := outbox.JSONPayload(map[string]any{"order_id": id, "total": total})
		if err != nil {
			return err
		}
		if _, err := w.Queue(ctx, b, outbox.Event{
			AggregateType: "order", AggregateID: id, EventType: "order.created", Payload: payload,
		}); err != nil {
			return err
		}
		return tx.SendBatch(ctx, b).Close()
	})
}

func ExampleWriter_Queue() {
	ctx := context.Background()
	schema := testdb.NewSchemaName("example")
	pool, err := pgxpool.New(ctx, testdb.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "orders"}.Sanitize()+` (id text PRIMARY KEY, total int NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	app, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer app.Close()

	if err := createOrder(ctx, app, w, "42", 99); err != nil {
		fmt.Println(err)
		return
	}
	var eventType, payload string
	if err := app.QueryRow(ctx, `SELECT event_type, payload::text FROM outbox_events`).Scan(&eventType, &payload); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(eventType, payload)
	// Output:
	// order.created {"total": 99, "order_id": "42"}
}
