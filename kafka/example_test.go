package kafka_test

import (
	"crypto/tls"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kafka"
)

func ExampleNew() {
	var pool *pgxpool.Pool // your application's pool
	pub, err := kafka.New(kafka.Config{
		Brokers: []string{"kafka-1:9092", "kafka-2:9092"},
		Topic:   "outbox.{aggregate_type}",
		ClientOpts: []kgo.Opt{
			kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}),
			kgo.SASL(scram.Auth{User: "relay", Pass: "from-your-secret-store"}.AsSha512Mechanism()),
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay // relay.Run(ctx)
}
