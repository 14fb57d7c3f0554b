package admin_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/memory"
)

// ExampleAdmin_Replay delivers an aggregate's two events, then replays them
// with fresh ids: the relay publishes copies that name their originals.
func ExampleAdmin_Replay() {
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
	var ids []string
	for _, typ := range []string{"order.created", "order.paid"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			got, err := outbox.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "R-42", EventType: typ, Payload: []byte(`{}`)})
			ids = append(ids, got[0].String())
			return err
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}
	pub := memory.New()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Ordered: true})
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
	res, err := a.Replay(ctx, admin.ReplaySelector{AggregateType: "order", AggregateID: "R-42", Mode: admin.ReplayNewID})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("selected %d, queued %d\n", res.Selected, res.Queued)
	if _, err := relay.ProcessBatch(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range pub.Messages() {
		if m.AggregateID != "R-42" || m.Headers[outbox.HeaderReplayOf] == "" {
			continue // other events, and the originals
		}
		n := 0
		if m.Headers[outbox.HeaderReplayOf] != ids[0] {
			n = 1
		}
		fmt.Printf("%s: a copy of event %d, fresh id %t\n", m.EventType, n, m.ID.String() != ids[n])
	}
	// Output:
	// selected 2, queued 2
	// order.created: a copy of event 0, fresh id true
	// order.paid: a copy of event 1, fresh id true
}
