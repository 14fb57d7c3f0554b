package pubsub_test

import (
	"context"
	"fmt"
	"log"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/pubsub"
)

// A publisher for the topic of each event type, here against pstest, the
// client's in-process fake; in production NewClient finds the project's
// credentials (Application Default Credentials) and Config is the same.
func ExampleNew() {
	ctx := context.Background()
	srv := pstest.NewServer()
	defer srv.Close()
	client, err := gpubsub.NewClient(ctx, "my-project", pubsub.DialConfig{Emulator: srv.Addr}.ClientOptions()...)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: "projects/my-project/topics/order.created"}); err != nil {
		log.Fatal(err)
	}

	pub, err := pubsub.New(pubsub.Config{Client: client, Topic: "{event_type}"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	// outbox.NewRelay(pool, pub, outbox.RelayConfig{}) publishes the
	// outbox's events this way.
	err = pub.Publish(ctx, &outbox.Message{ID: uuid.New(), AggregateType: "order", AggregateID: "ord-1",
		EventType: "order.created", Payload: []byte(`{"total":42}`), CreatedAt: time.Now()})
	if err != nil {
		log.Fatal(err)
	}
	m := srv.Messages()[0]
	fmt.Println(m.Topic, m.OrderingKey, m.Attributes[outbox.HeaderEventType], string(m.Data))
	// Output: projects/my-project/topics/order.created ord-1 order.created {"total":42}
}
