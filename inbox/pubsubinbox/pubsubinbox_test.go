package pubsubinbox_test

import (
	"context"
	"os"
	"testing"
	"time"

	gpubsub "cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/pubsubinbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/pubsub"
)

const (
	project = "pgoutbox-test"
	topic   = "projects/" + project + "/topics/order.created"
	subName = "projects/" + project + "/subscriptions/" + inboxtest.Consumer
	// ackDeadline is the subscription's: a message neither acknowledged nor
	// refused comes back after it.
	ackDeadline = time.Second
)

func TestMain(m *testing.M) {
	pstest.SetMinAckDeadline(ackDeadline) // the fake's minimum is 10s otherwise
	os.Exit(m.Run())
}

// broker is one test's Pub/Sub: the official fake (pstest) with a topic and
// the subscription "shipping", and the outbox's own publisher.
type broker struct {
	srv    *pstest.Server
	client *gpubsub.Client
	pub    *pubsub.Publisher
}

func newClient(t *testing.T, addr string) *gpubsub.Client {
	t.Helper()
	c, err := gpubsub.NewClient(context.Background(), project, pubsub.DialConfig{Emulator: addr}.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newBroker(t *testing.T, _ *inboxtest.Env) *broker {
	t.Helper()
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	c := newClient(t, srv.Addr)
	ctx := inboxtest.Ctx(t)
	if _, err := c.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: topic}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{Name: subName, Topic: topic,
		AckDeadlineSeconds: int32(ackDeadline / time.Second), EnableMessageOrdering: true}); err != nil {
		t.Fatal(err)
	}
	pub, err := pubsub.New(pubsub.Config{Client: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return &broker{srv: srv, client: c, pub: pub}
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

func (b *broker) PublishInvalid(t *testing.T) {
	b.srv.Publish(topic, []byte(`{}`), map[string]string{"tenant": "acme"})
}

// settled reports whether every message published was acknowledged.
func (b *broker) settled() bool {
	for _, m := range b.srv.Messages() {
		if m.Acks == 0 {
			return false
		}
	}
	return true
}

func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	c, err := pubsubinbox.New(proc, pubsubinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sub := b.client.Subscriber(subName)
	stop := inboxtest.Background(t, func(ctx context.Context) error { return c.Run(ctx, sub) }, nil)
	return func() {
		// Settled before stopping, so a late Ack is not cut off.
		inboxtest.WaitFor(t, 10*time.Second, "every message acknowledged", b.settled)
		stop()
	}
}

// ProcessThenCrash pulls n messages with a client of its own (no lease
// extension), processes them, and closes its connection without acknowledging
// any: they come back after the ack deadline.
func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	c, err := gpubsub.NewClient(context.Background(), project, pubsub.DialConfig{Emulator: b.srv.Addr}.ClientOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() // committed, never acked
	got := 0
	for got < n {
		resp, err := c.SubscriptionAdminClient.Pull(inboxtest.Ctx(t), &pb.PullRequest{Subscription: subName, MaxMessages: int32(n - got)})
		if err != nil {
			t.Fatal(err)
		}
		for _, rm := range resp.ReceivedMessages {
			m, err := pubsubinbox.ToMessage(&gpubsub.Message{ID: rm.Message.MessageId, Data: rm.Message.Data, Attributes: rm.Message.Attributes})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := proc(inboxtest.Ctx(t), m); err != nil || res.Duplicate {
				t.Fatalf("crashing consumer: %+v, %v", res, err)
			}
			got++
		}
	}
}

func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	// Two ack deadlines: a message neither acked nor refused would be back.
	time.Sleep(2 * ackDeadline)
	resp, err := b.client.SubscriptionAdminClient.Pull(inboxtest.Ctx(t), &pb.PullRequest{Subscription: subName})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.ReceivedMessages); n != 0 {
		t.Errorf("%d messages delivered again after the consumer stopped; want none", n)
	}
	for _, m := range b.srv.Messages() {
		if m.Acks == 0 {
			t.Errorf("message %s (event %s) never acknowledged", m.ID, m.Attributes[outbox.HeaderEventID])
		}
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

// The relay re-sends an event (Pub/Sub has no publish-side deduplication):
// the inbox skips the copy and it is acknowledged.
func TestRepublishedEventIsADuplicate(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	stop := b.Start(t, e.Processor())
	msgs := inboxtest.Events(1)
	b.Publish(t, msgs...)
	b.Publish(t, msgs...)
	e.WaitOutcomes(inboxtest.IDs(msgs), 2)
	stop()
	b.CheckSettled(t)
	e.CheckOnce(inboxtest.IDs(msgs), inboxtest.Processed, inboxtest.Duplicate)
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming pubsubinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	_, err := pubsubinbox.New(proc, pubsubinbox.Config{AckTimeout: -1})
	configcheck.Refused(t, "New with a negative AckTimeout", err, "pubsubinbox.Config", "AckTimeout")
	if _, err := pubsubinbox.New(nil, pubsubinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
	c, _ := pubsubinbox.New(proc, pubsubinbox.Config{})
	if err := c.Run(context.Background(), nil); err == nil {
		t.Error("Run(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultAckTimeout": pubsubinbox.DefaultAckTimeout,
	})
}

// The Pub/Sub binding sends ce- attributes as they are: a value with a %
// or quotes reaches the handler unchanged (HTTP and NATS percent-encode).
func TestToMessageCloudEventsAttributesAsSent(t *testing.T) {
	t.Parallel()
	m := inboxtest.Events(1)[0]
	m.Envelope, m.AggregateID = outbox.EnvelopeCloudEvents, `100%41 "q"`
	ce, err := m.CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	msg := &gpubsub.Message{Data: m.Payload, Attributes: map[string]string{pubsub.AttrContentType: "application/json"}}
	for _, a := range ce.Attributes() { // as the pubsub publisher sends them
		msg.Attributes[pubsub.AttrCloudEventsPrefix+a.Name] = a.Value
	}
	got, err := pubsubinbox.ToMessage(msg)
	if err != nil || got.ID != m.ID || got.AggregateID != m.AggregateID {
		t.Errorf("ToMessage = %+v, %v; want id %s, aggregate %q", got, err, m.ID, m.AggregateID)
	}
}
