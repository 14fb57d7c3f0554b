package kinesis_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kinesis"
)

func ExampleNew() {
	ctx := context.Background()
	var pool *pgxpool.Pool // your application's pool
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pub, err := kinesis.New(kinesis.Config{
		Client: awskinesis.NewFromConfig(awsCfg),
		Stream: "orders",
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
