package outbox_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/memory"
)

// A relay inside the application's own binary: NewRelay takes the pool, the
// broker's publisher and a RelayConfig whose zero values are the documented
// defaults, and Run relays until its context ends. The in-memory publisher
// stands in for a broker here; in production it is nats.New, kafka.New and
// so on, or `outbox relay` runs the same relay as a daemon.
func ExampleNewRelay() {
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

	pub := memory.New()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
		Workers: 2, // RelayConfig documents each field and its default
	})
	if err != nil {
		fmt.Println(err) // a *outbox.ConfigError names the field
		return
	}
	runCtx, stop := context.WithCancel(ctx) // usually signal.NotifyContext
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx, outbox.Event{
			AggregateType: "invoice", AggregateID: "I-7", EventType: "invoice.issued",
			Payload: []byte(`{"invoice_id": "I-7"}`),
		})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	relay.Wake() // committed: claim now rather than at the next poll

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	issued := func(m outbox.Message) bool { return m.AggregateID == "I-7" }
	if err := pub.WaitFor(waitCtx, func(ms []outbox.Message) bool { return slices.ContainsFunc(ms, issued) }); err != nil {
		fmt.Println(err)
	}
	stop() // Run finishes the batch in flight, then returns
	if err := <-done; err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range pub.Messages() {
		if issued(m) {
			fmt.Printf("published %s %s/%s\n", m.EventType, m.AggregateType, m.AggregateID)
		}
	}
	// Output: published invoice.issued invoice/I-7
}

// ProcessBatch drains the outbox without a long-running relay, as a cron job
// or a serverless function would: one batch per call, until a call claims
// nothing. The outbox here is a table of its own, billing_events, which the
// writer and the relay both name.
func ExampleRelay_ProcessBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Table: "billing_events"}); err != nil {
		fmt.Println(err)
		return
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Table: "billing_events"})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var events []outbox.Event
		for _, id := range []string{"B-1", "B-2", "B-3"} {
			events = append(events, outbox.Event{AggregateType: "bill", AggregateID: id, EventType: "bill.sent", Payload: []byte(`{}`)})
		}
		_, err := w.Write(ctx, tx, events...)
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	relay, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Table: "billing_events", BatchSize: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		res, err := relay.ProcessBatch(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if res.Claimed == 0 {
			break // drained
		}
		fmt.Printf("claimed %d, published %d\n", res.Claimed, res.Published)
	}
	// Output:
	// claimed 2, published 2
	// claimed 1, published 1
}
