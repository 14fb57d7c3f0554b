package outbox_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
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
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil { // or `outbox migrate`
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, customer_id TEXT,
		total NUMERIC NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		fmt.Println(err)
		return
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}

	if err := createOrder(ctx, pool, w, "Q-42", 99); err != nil {
		fmt.Println(err)
		return
	}
	var eventType, payload string
	if err := pool.QueryRow(ctx, `SELECT event_type, payload::text FROM outbox_events WHERE aggregate_id = $1`, "Q-42").Scan(&eventType, &payload); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(eventType, payload)
	// Output:
	// order.created {"total": 99, "order_id": "Q-42"}
}
