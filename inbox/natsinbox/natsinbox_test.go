package natsinbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/natsinbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// broker is one test's JetStream stream, with the outbox's own publisher.
type broker struct {
	e      *inboxtest.Env
	nc     *natsgo.Conn
	js     jetstream.JetStream
	stream string
	prefix string
	pub    *outboxnats.Publisher
	// ackWait of the durable consumer the adapter and a crashing consumer
	// share.
	ackWait time.Duration
	cons    jetstream.Consumer
	cfg     natsinbox.Config
}

func newBroker(t *testing.T, e *inboxtest.Env) *broker {
	t.Helper()
	nc := testnats.Conn(t)
	s, prefix := testnats.Stream(t, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	return &broker{e: e, nc: nc, js: js, stream: s.CachedInfo().Config.Name, prefix: prefix, pub: pub, ackWait: time.Second}
}

// consumer creates (or finds) the durable pull consumer "shipping".
func (b *broker) consumer(t *testing.T, js jetstream.JetStream) jetstream.Consumer {
	t.Helper()
	c, err := js.CreateOrUpdateConsumer(inboxtest.Ctx(t), b.stream, jetstream.ConsumerConfig{
		Durable: inboxtest.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

func (b *broker) PublishInvalid(t *testing.T) {
	if _, err := b.js.Publish(inboxtest.Ctx(t), b.prefix+".order.created", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	b.cons = b.consumer(t, b.js)
	c, err := natsinbox.New(proc, b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cons := b.cons
	stop := inboxtest.Background(t, func(ctx context.Context) error { return c.Run(ctx, cons) }, nil)
	return func() {
		// Settled before stopping, so a late Ack is not cut off.
		inboxtest.WaitFor(t, 10*time.Second, "every message acknowledged", func() bool {
			info, err := cons.Info(inboxtest.Ctx(t))
			return err == nil && info.NumPending == 0 && info.NumAckPending == 0
		})
		stop()
	}
}

func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	nc1 := testnats.Conn(t)
	js1, err := jetstream.New(nc1)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := b.consumer(t, js1).Fetch(n, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for msg := range batch.Messages() {
		m, err := natsinbox.ToMessage(msg)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(inboxtest.Ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("crashing consumer: %+v, %v", res, err)
		}
		got++
	}
	if got != n {
		t.Fatalf("crashing consumer fetched %d messages, want %d", got, n)
	}
	nc1.Close() // committed, never acked
}

func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	// Two AckWaits: a message neither acked nor terminated would be back.
	time.Sleep(2 * b.ackWait)
	info, err := b.cons.Info(inboxtest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("consumer: %d pending, %d unacknowledged, %d redelivered; want none",
			info.NumPending, info.NumAckPending, info.NumRedelivered)
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

// A handler error Naks, with or without a delay: the message comes back well
// before AckWait (30s here), so it is the Nak that brought it back.
func TestHandlerErrorNaksBeforeAckWait(t *testing.T) {
	for _, delay := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprint("NakDelay=", delay), func(t *testing.T) {
			e := inboxtest.Setup(t)
			b := newBroker(t, e)
			b.ackWait, b.cfg = 30*time.Second, natsinbox.Config{NakDelay: delay}
			e.FailFirst(1)
			stop := b.Start(t, e.Processor())
			msgs := inboxtest.Events(3)
			b.Publish(t, msgs...)
			e.WaitOutcomes(inboxtest.IDs(msgs), 2)
			stop()
			e.CheckOnce(inboxtest.IDs(msgs), inboxtest.Failed, inboxtest.Processed)
			info, err := b.cons.Info(inboxtest.Ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if info.Delivered.Consumer != 6 {
				t.Errorf("consumer delivered %d, want 6 deliveries for 3 events", info.Delivered.Consumer)
			}
		})
	}
}

// The relay re-sends an event past JetStream's duplicate window (a new
// Nats-Msg-Id reaches the consumer as a new message): the inbox skips it.
func TestRepublishedEventIsADuplicate(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	stop := b.Start(t, e.Processor())
	msgs := inboxtest.Events(1)
	b.Publish(t, msgs...)
	id := msgs[0].ID
	for i := range 2 {
		msg := natsgo.NewMsg(b.prefix + ".order.created")
		msg.Header.Set(outbox.HeaderEventID, id.String())
		msg.Header.Set(outbox.HeaderEventType, "order.created")
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-resend-%d", id, i))
		if _, err := b.js.PublishMsg(inboxtest.Ctx(t), msg); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitOutcomes(inboxtest.IDs(msgs), 3)
	stop()
	e.CheckOnce(inboxtest.IDs(msgs), inboxtest.Processed, inboxtest.Duplicate, inboxtest.Duplicate)
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming natsinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   natsinbox.Config
		field string
	}{
		{natsinbox.Config{NakDelay: -1}, "NakDelay"},
		{natsinbox.Config{Workers: -1}, "Workers"},
		{natsinbox.Config{Workers: 5000}, "Workers"},
	} {
		_, err := natsinbox.New(proc, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "natsinbox.Config", tc.field)
	}
	if _, err := natsinbox.New(nil, natsinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultWorkers": natsinbox.DefaultWorkers,
	})
}
