package redis_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/redis"
)

// Publishing one message to a stream and reading the entry back. With a
// relay, hand pub to outbox.NewRelay instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379", MaxRetries: -1})
	defer client.Close()
	const stream = "pgoutbox:example:order.created"
	client.Del(ctx, stream) // only for the example: start empty
	defer client.Del(ctx, stream)

	pub, err := redis.New(client, redis.Config{Stream: "pgoutbox:example:{event_type}", MaxLen: 10_000})
	if err != nil {
		log.Fatal(err)
	}
	msg := &outbox.Message{
		ID:            uuid.MustParse("0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"),
		AggregateType: "order", AggregateID: "42", EventType: "order.created",
		Payload:   []byte(`{"order_id":"42"}`),
		Headers:   map[string]string{"tenant": "acme"},
		CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if err := pub.Publish(ctx, msg); err != nil {
		log.Fatal(err)
	}

	entries, err := client.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		log.Fatal(err)
	}
	v := entries[0].Values
	fmt.Println("id:", v[redis.FieldID])
	fmt.Println("aggregate:", v[redis.FieldAggregateType], v[redis.FieldAggregateID])
	fmt.Println("created_at:", v[redis.FieldCreatedAt])
	fmt.Println("tenant header:", v[redis.HeaderPrefix+"tenant"])
	fmt.Println("payload:", v[redis.FieldPayload])
	// Output:
	// id: 0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d
	// aggregate: order 42
	// created_at: 2025-01-02T03:04:05Z
	// tenant header: acme
	// payload: {"order_id":"42"}
}
