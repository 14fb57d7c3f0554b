package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/memory"
)

// An Admin on the application's pool reads what `outbox status` prints:
// here two events written and not relayed yet.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx,
			outbox.Event{AggregateType: "invoice", AggregateID: "I-1", EventType: "invoice.issued", Payload: []byte(`{}`)},
			outbox.Event{AggregateType: "invoice", AggregateID: "I-2", EventType: "invoice.issued", Payload: []byte(`{}`)})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	a, err := admin.New(pool, admin.Config{}) // the default table, on the pool's search_path
	if err != nil {
		fmt.Println(err) // a *outbox.ConfigError names admin.Config and the field
		return
	}
	st, err := a.Status(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ts := range st.ByType {
		if ts.EventType == "invoice.issued" {
			fmt.Printf("%s: %d pending, %d dead letters\n", ts.EventType, ts.Pending, ts.DeadLetters)
		}
	}
	// Output:
	// invoice.issued: 2 pending, 0 dead letters
}

// The broker refused an event for good, so the relay made it a dead letter.
// Once the cause is fixed, Retry re-queues the dead letters of its type, as
// `outbox retry --type payment.captured` does, and the relay publishes them.
func ExampleAdmin_Retry() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{}); err != nil {
		fmt.Println(err)
		return
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx, outbox.Event{AggregateType: "payment", AggregateID: "P-1", EventType: "payment.captured", Payload: []byte(`{}`)})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.EventType == "payment.captured" {
			return outbox.Permanent(errors.New("schema unknown to the broker"))
		}
		return nil
	})
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := relay.ProcessBatch(ctx); err != nil {
		fmt.Println(err)
		return
	}

	a, err := admin.New(pool, admin.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	groups, err := a.DeadLetterGroups(ctx, false)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range groups {
		if g.EventType == "payment.captured" {
			fmt.Printf("%d dead letter: %s\n", g.Count, g.Error)
		}
	}
	pub.FailWith(nil) // the broker knows the schema now
	n, err := a.Retry(ctx, admin.RetrySelector{EventType: "payment.captured"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("re-queued", n)
	if _, err := relay.ProcessBatch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range pub.Messages() {
		if m.EventType == "payment.captured" {
			fmt.Println("published", m.AggregateID)
		}
	}
	// Output:
	// 1 dead letter: schema unknown to the broker
	// re-queued 1
	// published P-1
}
