package outbox_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
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
        INSERT INTO orders (id, customer_id, total, created_at)
        VALUES ($1, $2, $3, NOW())
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

// Example_createOrder runs CreateOrder against the local
// PostgreSQL, then one relay batch that delivers the event.
func Example_createOrder() {
	ctx := context.Background()
	dsn := testdb.URL()
	schema := testdb.NewSchemaName("example")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	defer pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck

	// Once, at deploy time (or `outbox migrate`).
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "orders"}.Sanitize()+
		` (id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, total NUMERIC NOT NULL, created_at TIMESTAMPTZ NOT NULL)`); err != nil {
		fmt.Println(err)
		return
	}

	// The application: database/sql, the outbox in its schema.
	db, err := sql.Open("pgx", dsn+"&search_path="+schema)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := &OrderService{db: db, outbox: w}
	if err := svc.CreateOrder(ctx, Order{ID: "42", CustomerID: "c-7", Total: 99.5}); err != nil {
		fmt.Println(err)
		return
	}

	// The relay (usually relay.Run(ctx) in a goroutine, or `outbox relay`).
	pub := memory.New()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := relay.ProcessBatch(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := pub.Messages()[0]
	fmt.Printf("published %d: %s %s/%s %s\n", res.Published, m.EventType, m.AggregateType, m.AggregateID, m.Payload)
	// Output:
	// published 1: order.created order/42 {"total": 99.5, "order_id": "42", "customer_id": "c-7"}
}
