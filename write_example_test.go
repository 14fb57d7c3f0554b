package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

type Order struct {
	ID         string
	CustomerID string
	Total      float64
}

// OrderService is an order service on database/sql whose CreateOrder writes
// the order and its order.created event in one transaction.
type OrderService struct {
	db     *sql.DB
	outbox *outbox.Writer
}

// CreateOrder saves the order and its order.created event in one transaction.
// There is no publish call here: the relay does that.
func (s *OrderService) CreateOrder(ctx context.Context, order Order) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin tx: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	if _, err := tx.ExecContext(ctx, `
        INSERT INTO orders (id, customer_id, total)
        VALUES ($1, $2, $3)
    `, order.ID, order.CustomerID, order.Total); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}

	payload, err := outbox.JSONPayload(map[string]any{
		"order_id":    order.ID,
		"customer_id": order.CustomerID,
		"total":       order.Total,
	})
	if err != nil {
		return err
	}
	if _, err := s.outbox.WriteSQL(ctx, tx, outbox.Event{
		AggregateType: "order",
		AggregateID:   order.ID,
		EventType:     "order.created",
		Payload:       payload,
	}); err != nil {
		return fmt.Errorf("insert outbox event: %w", err)
	}
	return tx.Commit()
}

// Example_createOrder runs CreateOrder against the database of
// DATABASE_URL, then one relay batch that delivers the event.
func Example_createOrder() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL") // e.g. postgres://app@127.0.0.1:5432/shop
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	// Once, at deploy time (or `outbox migrate`).
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY, customer_id TEXT,
		total NUMERIC NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		fmt.Println(err)
		return
	}

	// The application: database/sql on the same database.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	w, err := outbox.NewWriter(outbox.WriterConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := &OrderService{db: db, outbox: w}
	if err := svc.CreateOrder(ctx, Order{ID: "A-1001", CustomerID: "c-7", Total: 99.5}); err != nil {
		fmt.Println(err)
		return
	}

	// The relay (usually relay.Run(ctx) in a goroutine, or `outbox relay`).
	pub := memory.New()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := relay.ProcessBatch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range pub.Messages() {
		if m.AggregateID == "A-1001" {
			fmt.Printf("published: %s %s/%s %s\n", m.EventType, m.AggregateType, m.AggregateID, m.Payload)
		}
	}
	// Output:
	// published: order.created order/A-1001 {"total": 99.5, "order_id": "A-1001", "customer_id": "c-7"}
}
