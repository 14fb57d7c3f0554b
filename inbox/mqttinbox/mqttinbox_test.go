package mqttinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/inbox/mqttinbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/mqtt"
)

func brokerAddr() string {
	if a := os.Getenv("MQTT_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}

// broker is one test's MQTT side on the real Mosquitto: a topic prefix and a
// persistent session ("shipping-..."), both its own, and the outbox's own
// publisher.
type broker struct {
	prefix   string
	clientID string
	pub      *mqtt.Publisher
}

func random() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// connect connects a client with clientID; clean ends the session.
func connect(t *testing.T, clientID string, clean bool, handler paho.MessageHandler) paho.Client {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker("tcp://" + brokerAddr()).SetClientID(clientID).
		SetCleanSession(clean).SetAutoAckDisabled(true).SetDefaultPublishHandler(handler)
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to %s: %v (is Mosquitto running? mosquitto -d -c /etc/mosquitto/mosquitto.conf)", brokerAddr(), tok.Error())
	}
	return c
}

func newBroker(t *testing.T, _ *inboxtest.Env) *broker {
	t.Helper()
	b := &broker{prefix: "pgoutbox-test/" + random(), clientID: inboxtest.Consumer + "-" + random()}
	// The consumer's session exists before anything is published (MQTT
	// keeps nothing for a topic no session subscribes to), as an operator
	// would create it.
	c := connect(t, b.clientID, false, nil)
	if tok := c.Subscribe(b.filter(), 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	c.Disconnect(100)
	t.Cleanup(func() {
		// A clean connection ends the session and drops what it holds.
		connect(t, b.clientID, true, nil).Disconnect(100)
	})
	pub, err := mqtt.New(paho.NewClientOptions().AddBroker("tcp://"+brokerAddr()), mqtt.Config{Topic: b.prefix + "/{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	inboxtest.WaitFor(t, 10*time.Second, "the publisher to connect", func() bool { return pub.Health(context.Background()) == nil })
	b.pub = pub
	return b
}

func (b *broker) filter() string { return b.prefix + "/#" }

func (b *broker) Publish(t *testing.T, msgs ...*outbox.Message) {
	inboxtest.PublishAll(t, b.pub, msgs...)
}

func (b *broker) PublishInvalid(t *testing.T) {
	c := connect(t, "raw-"+random(), true, nil)
	defer c.Disconnect(100)
	if tok := c.Publish(b.prefix+"/order.created", 1, false, []byte(`{}`)); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publish: %v", tok.Error())
	}
}

func (b *broker) opts() *paho.ClientOptions {
	return paho.NewClientOptions().AddBroker("tcp://" + brokerAddr()).SetClientID(b.clientID)
}

func (b *broker) Start(t *testing.T, proc inbox.Processor) func() {
	t.Helper()
	c, err := mqttinbox.New(proc, mqttinbox.Config{RetryBase: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return inboxtest.Background(t, func(ctx context.Context) error { return c.Run(ctx, b.opts(), b.filter()) }, nil)
}

// ProcessThenCrash takes the session with a client of its own, processes n
// messages and disconnects without acknowledging any.
func (b *broker) ProcessThenCrash(t *testing.T, proc inbox.Processor, n int) {
	t.Helper()
	got := make(chan paho.Message, n)
	c := connect(t, b.clientID, false, func(_ paho.Client, m paho.Message) { got <- m })
	defer c.Disconnect(0) // committed, never acknowledged
	for range n {
		select {
		case m := <-got:
			msg, err := mqttinbox.ToMessage(m)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := proc(inboxtest.Ctx(t), msg); err != nil || res.Duplicate {
				t.Fatalf("crashing consumer: %+v, %v", res, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("crashing consumer: fewer than %d messages", n)
		}
	}
}

// CheckSettled takes the session again: a message not acknowledged (or never
// delivered) comes at once.
func (b *broker) CheckSettled(t *testing.T) {
	t.Helper()
	var n atomic.Int32
	c := connect(t, b.clientID, false, func(paho.Client, paho.Message) { n.Add(1) })
	time.Sleep(time.Second)
	c.Disconnect(0)
	if n.Load() != 0 {
		t.Errorf("the session still held %d messages; want none", n.Load())
	}
}

func TestConformance(t *testing.T) {
	inboxtest.Run(t, func(t *testing.T, e *inboxtest.Env) inboxtest.Adapter { return newBroker(t, e) })
}

// The relay re-sends an event (MQTT has no deduplication): the inbox skips the
// copy and it is acknowledged.
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

// Messages published while the consumer is away wait in its session.
func TestOfflineSessionKeepsMessages(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	stop := b.Start(t, e.Processor())
	first := inboxtest.Events(2)
	b.Publish(t, first...)
	e.WaitOutcomes(inboxtest.IDs(first), 1)
	stop()
	later := inboxtest.Events(3)
	b.Publish(t, later...)
	stop = b.Start(t, e.Processor())
	e.WaitOutcomes(inboxtest.IDs(later), 1)
	stop()
	b.CheckSettled(t)
	e.CheckOnce(inboxtest.IDs(append(first, later...)), inboxtest.Processed)
}

// TestRunValidation: Run refuses client options it cannot use.
func TestRunValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	c, _ := mqttinbox.New(proc, mqttinbox.Config{})
	for _, tc := range []struct {
		opts    *paho.ClientOptions
		filters []string
		want    string
	}{
		{nil, []string{"a/#"}, "options are nil"},
		{paho.NewClientOptions().AddBroker("tcp://h:1"), []string{"a/#"}, "client id"},
		{paho.NewClientOptions().AddBroker("tcp://h:1").SetClientID("x"), nil, "no topic filter"},
	} {
		if err := c.Run(context.Background(), tc.opts, tc.filters...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run: %v, want an error saying %q", err, tc.want)
		}
	}
}

// A consumer stopped while its handler runs has not acknowledged the message:
// the session's next connection gets it again.
func TestStoppedMidHandlerLeavesTheMessageToTheSession(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	e.SetFail(func(ctx context.Context, _ inbox.Message) error {
		<-ctx.Done() // a handler still busy when the consumer stops
		return ctx.Err()
	})
	stop := b.Start(t, e.Processor())
	msgs := inboxtest.Events(1)
	b.Publish(t, msgs...)
	inboxtest.WaitFor(t, 10*time.Second, "the handler to start", func() bool { return e.Calls() == 1 })
	stop()
	e.SetFail(nil)
	stop = b.Start(t, e.Processor())
	e.WaitOutcomes(inboxtest.IDs(msgs), 2)
	stop()
	b.CheckSettled(t)
	e.CheckOnce(inboxtest.IDs(msgs), inboxtest.Failed, inboxtest.Processed)
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming mqttinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   mqttinbox.Config
		field string
	}{
		{mqttinbox.Config{RetryBase: -time.Second}, "RetryBase"},
		{mqttinbox.Config{RetryBase: time.Second, RetryMax: time.Millisecond}, "RetryBase"},
	} {
		_, err := mqttinbox.New(proc, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "mqttinbox.Config", tc.field)
	}
	if _, err := mqttinbox.New(nil, mqttinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultRetryBase": mqttinbox.DefaultRetryBase,
		"DefaultRetryMax":  mqttinbox.DefaultRetryMax,
	})
}
