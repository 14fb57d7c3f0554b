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

// The writing process calls Notify after each commit, so that relays in
// other processes, started with Listen, claim the event at once instead of
// at their next poll. The relay runs in the same process here only to show
// the delivery; a relay in the application's own process needs no Notifier
// (Relay.Wake).
func ExampleNotifier() {
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

	// In the relay's process (`outbox relay --listen` does the same).
	pub := memory.New()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Listen: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()

	// In the writing process: one Notifier for the whole process.
	notifier, err := outbox.NewNotifier(pool, outbox.NotifierConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer notifier.Close()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx, outbox.Event{
			AggregateType: "parcel", AggregateID: "P-3", EventType: "parcel.shipped", Payload: []byte(`{}`),
		})
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	notifier.Notify() // after the commit, never inside the transaction; it does not block

	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	shipped := func(m outbox.Message) bool { return m.AggregateID == "P-3" }
	if err := pub.WaitFor(waitCtx, func(ms []outbox.Message) bool { return slices.ContainsFunc(ms, shipped) }); err != nil {
		fmt.Println(err)
	}
	stop()
	if err := <-done; err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range pub.Messages() {
		if shipped(m) {
			fmt.Printf("published %s %s/%s\n", m.EventType, m.AggregateType, m.AggregateID)
		}
	}
	// Output: published parcel.shipped parcel/P-3
}
