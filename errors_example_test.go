package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// A publisher returns Permanent for a message that no retry can deliver:
// the relay makes it a dead letter at once, with the error as its
// last_error, instead of retrying it MaxAttempts times, and publishes the
// rest of the batch. An error that is not wrapped is transient (retried
// with backoff) unless it means the broker is unreachable (Unavailable).
func ExamplePermanent() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	cfg := outbox.MigrateConfig{Table: "shipping_events"}
	if _, err := outbox.Migrate(ctx, pool, cfg); err != nil {
		fmt.Println(err)
		return
	}

	broker := memory.New()
	pub := outbox.PublisherFunc(func(ctx context.Context, msg *outbox.Message) error {
		var body struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(msg.Payload, &body); err != nil || body.OrderID == "" {
			return outbox.Permanent(errors.New("the shipping service needs an order_id"))
		}
		return broker.Publish(ctx, msg)
	})

	w, err := outbox.NewWriter(outbox.WriterConfig{Table: cfg.Table})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := w.Write(ctx, tx,
			outbox.Event{AggregateType: "order", AggregateID: "S-1", EventType: "order.packed", Payload: []byte(`{"order_id": "S-1"}`)},
			outbox.Event{AggregateType: "order", AggregateID: "S-2", EventType: "order.packed", Payload: []byte(`{"weight_kg": 2}`)},
		)
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Table: cfg.Table})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := relay.ProcessBatch(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("published %d, dead letters %d, retried %d\n", res.Published, res.DeadLettered, res.Retried)
	fmt.Println(outbox.Classify(outbox.Permanent(errors.New("any"))) == outbox.ClassPermanent) // how the relay reads it
	// Output:
	// published 1, dead letters 1, retried 0
	// true
}
