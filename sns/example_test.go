package sns_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/sns"
)

func ExampleNew() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your application's pool
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pub, err := sns.New(sns.Config{
		Client:   awssns.NewFromConfig(awsCfg),
		TopicARN: "arn:aws:sns:eu-west-1:123456789012:orders.fifo",
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
