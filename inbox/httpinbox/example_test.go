package httpinbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/httpinbox"
	"github.com/pgoutbox/outbox/webhook"
)

// A billing service receives order.created webhooks from the outbox's
// webhook publisher. The relay's retries deliver the event three times; one
// invoice is written.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS invoices (order_id TEXT NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	// The receiver.
	in, err := inbox.New(pool, inbox.Config{Consumer: "billing.webhooks"})
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := httpinbox.New(in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		// Only the id and the body are signed: read the order from the body.
		var order struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(msg.Payload, &order); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, order.OrderID)
		return err
	}), httpinbox.Config{Secrets: []string{"whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="}})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	// The sender: the webhook publisher, as the relay would call it.
	pub, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{"whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM="}, AllowPrivateNetworks: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ev := &outbox.Message{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: "42",
		EventType: "order.created", Payload: []byte(`{"order_id":"42"}`), CreatedAt: time.Now()}
	for range 3 {
		fmt.Println("publish:", pub.Publish(ctx, ev))
	}

	var n int
	var order string
	_ = pool.QueryRow(ctx, `SELECT count(*), min(order_id) FROM invoices`).Scan(&n, &order)
	fmt.Println("invoices:", n, "for order", order)
	// Output:
	// publish: <nil>
	// publish: <nil>
	// publish: <nil>
	// invoices: 1 for order 42
}
