package sqs_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/sqs"
)

func ExampleNew() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your application's pool
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pub, err := sqs.New(sqs.Config{
		Client:   awssqs.NewFromConfig(awsCfg),
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
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
