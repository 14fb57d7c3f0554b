// Command quickstart writes an order and its event in one transaction, then
// relays the event to NATS JetStream until interrupted.
package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// createOrder is business code: the event joins the order's transaction.
func createOrder(ctx context.Context, db *sql.DB, id string, total float64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
		return fmt.Errorf("insert order: %w", err) // stop here: the transaction is aborted
	}
	payload, err := outbox.JSONPayload(map[string]any{"order_id": id, "total": total})
	if err != nil {
		return err
	}
	if _, err := outbox.WriteSQL(ctx, tx, outbox.Event{
		AggregateType: "order", AggregateID: id, EventType: "order.created", Payload: payload,
	}); err != nil {
		return err // names the invalid field; nothing was written
	}
	return tx.Commit()
}

// run migrates, creates one order, and relays until ctx is cancelled.
func run(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil { // or `outbox migrate`
		return err
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total numeric)`); err != nil {
		return err
	}
	if err := createOrder(ctx, db, fmt.Sprintf("order-%d", time.Now().UnixNano()), 99.5); err != nil {
		return err
	}

	// The relay: in your binary, as here, or `outbox relay` beside it.
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	// Streams are usually the operator's job; this one captures events.>.
	if err := outboxnats.EnsureStream(ctx, nc, "EVENTS", []string{"events.>"}, 2*time.Minute); err != nil {
		return err
	}
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: "events.{event_type}"})
	if err != nil {
		return err
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Logger: slog.Default(), Registerer: prometheus.DefaultRegisterer})
	if err != nil {
		return err
	}
	return relay.Run(ctx) // until ctx is cancelled; the batch in flight is finished, never half-marked
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv("DATABASE_URL")); err != nil {
		slog.Error("quickstart", "err", err)
		os.Exit(1)
	}
}
