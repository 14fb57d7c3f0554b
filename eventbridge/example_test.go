package eventbridge_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	awseventbridge "github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/eventbridge"
)

func ExampleNew() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your application's pool
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pub, err := eventbridge.New(eventbridge.Config{
		Client:   awseventbridge.NewFromConfig(awsCfg),
		EventBus: "orders",
		Source:   "com.example.orders",
	})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay // relay.Run(ctx)
}
