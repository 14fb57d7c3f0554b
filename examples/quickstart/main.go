// Command quickstart writes an order and its event in one transaction,
// relays the event to NATS JetStream, and prints it as a subscriber gets it.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go"

	"github.com/pgoutbox/outbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// createOrder is business code: the event joins the order's transaction.
func createOrder(ctx context.Context, db *sql.DB, id string, total float64) (eventID string, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer tx.Rollback() // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
		return "", fmt.Errorf("insert order: %w", err) // stop here: the transaction is aborted
	}
	payload, err := outbox.JSONPayload(map[string]any{"order_id": id, "total": total})
	if err != nil {
		return "", err
	}
	ids, err := outbox.WriteSQL(ctx, tx, outbox.Event{
		AggregateType: "order", AggregateID: id, EventType: "order.created", Payload: payload,
	})
	if err != nil {
		return "", err // names the invalid field; nothing was written
	}
	return ids[0].String(), tx.Commit()
}

// run migrates, creates one order, relays its event and waits until a
// subscriber receives it.
func run(ctx context.Context, out io.Writer, dsn, natsURL string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil { // or `outbox migrate`
		return err
	}
	db := stdlib.OpenDBFromPool(pool) // database/sql on the same pool
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, total numeric)`); err != nil {
		return err
	}
	orderID := fmt.Sprintf("order-%d", time.Now().UnixNano())
	eventID, err := createOrder(ctx, db, orderID, 99.5)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "committed %s and its event %s in one transaction\n", orderID, eventID)

	nc, err := nats.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	// A stream of this program's own (streams are usually the operator's job).
	if err := outboxnats.EnsureStream(ctx, nc, "QUICKSTART", []string{"quickstart.>"}, 2*time.Minute); err != nil {
		return err
	}
	sub, err := nc.SubscribeSync("quickstart.order.created") // a real consumer goes through the inbox
	if err != nil {
		return err
	}
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: "quickstart.{event_type}"})
	if err != nil {
		return err
	}
	// The relay: in your binary, as here, or `outbox relay` beside it.
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		return err
	}
	relayCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(relayCtx) }()
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return err
		}
		if msg.Header.Get(outbox.HeaderEventID) == eventID { // earlier runs' events arrive too
			fmt.Fprintf(out, "received %s on %s: %s\n", eventID, msg.Subject, msg.Data)
			stop()
			return <-done // the batch in flight is finished, never half-marked
		}
	}
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := cmp.Or(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres")
	if err := run(ctx, os.Stdout, dsn, cmp.Or(os.Getenv("NATS_URL"), nats.DefaultURL)); err != nil {
		log.Fatal(err)
	}
}
