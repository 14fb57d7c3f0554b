package rabbitmqinbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/rabbitmqinbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/rabbitmq"
)

func brokerURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// broker is one test's RabbitMQ queue, with the outbox's own publisher.
type broker struct {
	queue string
	pub   *rabbitmq.Publisher
	admin *amqp.Channel
}

func newBroker(t *testing.T, _ *inboxtest.Env) *broker {
	t.Helper()
	ch, err := dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testdb.NewSchemaName("pgoutbox.test.inbox")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	// The outbox's own publisher, to the default exchange: routing key = queue.
	pub, err := rabbitmq.New(rabbitmq.Config{URL: brokerURL(), RoutingKey: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return &broker{queue: queue, pub: pub, admin: ch}
}

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerURL(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

func (b *broker) PublishInvalid(t *testing.T) {
	if err := b.admin.PublishWithContext(inboxtest.Ctx(t), "", b.queue, false, false, amqp.Publishing{Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

// Start runs the adapter on its own connection; stop ends it and closes that
// connection, so unacknowledged deliveries would go back to the queue.
func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	c, err := rabbitmqinbox.New(proc, rabbitmqinbox.Config{Workers: 4, RequeueDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return inboxtest.Background(t, func(ctx context.Context) error { return c.Run(ctx, ch, b.queue) }, func() { conn.Close() })
}

func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		d, ok, err := ch.Get(b.queue, false) // manual ack
		if err != nil || !ok {
			t.Fatalf("crashing consumer: get: %v %v", ok, err)
		}
		m, err := rabbitmqinbox.ToMessage(d)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(inboxtest.Ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("crashing consumer: %+v %v", res, err)
		}
	}
	conn.Close() // committed, never acked: RabbitMQ requeues
}

// CheckSettled: after the consumer's connection closed, anything it had not
// acknowledged is back in the queue.
func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	q, err := b.admin.QueueDeclarePassive(b.queue, false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 0 {
		t.Errorf("%d messages back in the queue after the consumer left, want 0", q.Messages)
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

func TestToMessageFallsBackToProperties(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	m, err := rabbitmqinbox.ToMessage(amqp.Delivery{MessageId: id.String(), Type: "order.created", Body: []byte(`{}`),
		Headers: amqp.Table{outbox.HeaderAggregateID: "42", "n": int32(7)}})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != id || m.EventType != "order.created" || m.AggregateID != "42" || m.Header("n") != "7" {
		t.Errorf("got %+v", m)
	}
	if _, err := rabbitmqinbox.ToMessage(amqp.Delivery{MessageId: "not-a-uuid"}); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Errorf("invalid message_id: %v", err)
	}
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming rabbitmqinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   rabbitmqinbox.Config
		field string
	}{
		{rabbitmqinbox.Config{Workers: -1}, "Workers"},
		{rabbitmqinbox.Config{Prefetch: -1}, "Prefetch"},
		{rabbitmqinbox.Config{RequeueDelay: -1}, "RequeueDelay"},
	} {
		_, err := rabbitmqinbox.New(proc, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "rabbitmqinbox.Config", tc.field)
	}
	if _, err := rabbitmqinbox.New(nil, rabbitmqinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultWorkers": rabbitmqinbox.DefaultWorkers,
	})
}

// Run reports a closed channel, so the caller can reconnect.
func TestRunReturnsWhenChannelCloses(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	c, err := rabbitmqinbox.New(e.Processor(), rabbitmqinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(inboxtest.Ctx(t), ch, b.queue) }()
	msgs := inboxtest.Events(1)
	b.Publish(t, msgs...)
	e.WaitOutcomes(inboxtest.IDs(msgs), 1)
	conn.Close()
	select {
	case err := <-done:
		if !errors.Is(err, rabbitmqinbox.ErrChannelClosed) {
			t.Fatalf("Run = %v, want ErrChannelClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the connection closed")
	}
}
