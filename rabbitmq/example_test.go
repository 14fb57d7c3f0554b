package rabbitmq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/rabbitmq"
)

// Publishing one message to a queue through the default exchange, and
// reading it back. With a relay, hand pub to outbox.NewRelay instead.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Only for the example: a throwaway queue, and a channel to read it.
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		log.Fatal(err)
	}

	pub, err := rabbitmq.New(rabbitmq.Config{
		URL:        "amqp://guest:guest@127.0.0.1:5672/",
		RoutingKey: q.Name, // the default exchange routes to the queue so named
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	msg := &outbox.Message{
		ID:            uuid.MustParse("0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"),
		AggregateType: "order", AggregateID: "42", EventType: "order.created",
		Payload:   []byte(`{"order_id":"42"}`),
		Headers:   map[string]string{"tenant": "acme"},
		CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	if err := pub.Publish(ctx, msg); err != nil { // returns once the broker confirmed
		log.Fatal(err)
	}

	d, ok, err := ch.Get(q.Name, true)
	if err != nil || !ok {
		log.Fatal("no message", err)
	}
	fmt.Println("message_id:", d.MessageId)
	fmt.Println("type:", d.Type, "persistent:", d.DeliveryMode == amqp.Persistent)
	fmt.Println("tenant header:", d.Headers["tenant"])
	fmt.Println("body:", string(d.Body))
	// Output:
	// message_id: 0192d3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d
	// type: order.created persistent: true
	// tenant header: acme
	// body: {"order_id":"42"}
}
