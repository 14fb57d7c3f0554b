package mqtt_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/mqtt"
	"github.com/pgoutbox/outbox/publishertest"
)

// brokerAddr is the test MQTT broker (Mosquitto), MQTT_ADDR or the local one.
func brokerAddr() string {
	if a := os.Getenv("MQTT_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:1883"
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// prefix is a topic prefix no other test uses.
func prefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "pgoutbox-test/" + hex.EncodeToString(b)
}

// subscriber is a consumer on the real broker, subscribed at QoS 1 to
// everything under a prefix before anything is published (MQTT keeps no
// message for a topic nobody subscribes to). It keeps what it received.
type subscriber struct {
	mu   sync.Mutex
	got  []publishertest.Received
	bad  []string
	more chan struct{}
}

func subscribe(t *testing.T, filter string) *subscriber {
	t.Helper()
	s := &subscriber{more: make(chan struct{}, 1)}
	opts := paho.NewClientOptions().AddBroker("tcp://" + brokerAddr()).SetClientID("sub-" + strings.ReplaceAll(filter, "/", "-"))
	c := paho.NewClient(opts)
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect the subscriber to %s: %v (is Mosquitto running? mosquitto -d -c /etc/mosquitto/mosquitto.conf)", brokerAddr(), tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	tok := c.Subscribe(filter, 1, func(_ paho.Client, m paho.Message) {
		h, payload, err := mqtt.OpenEnvelope(m.Payload())
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil && !bytes.Contains(m.Payload(), []byte(`"specversion"`)) { // a CloudEvent is no envelope
			s.bad = append(s.bad, err.Error())
			return
		}
		s.got = append(s.got, publishertest.Received{Topic: m.Topic(), Headers: h, Payload: payload, Body: m.Payload()})
		select {
		case s.more <- struct{}{}:
		default:
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe %s: %v", filter, tok.Error())
	}
	return s
}

func (s *subscriber) Read(ctx context.Context, n int) ([]publishertest.Received, error) {
	for {
		s.mu.Lock()
		got, bad := slices.Clone(s.got), s.bad
		s.mu.Unlock()
		if len(bad) > 0 {
			return got, fmt.Errorf("messages that are not envelopes: %v", bad)
		}
		if len(got) >= n {
			return got, nil
		}
		select {
		case <-s.more:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}

// newPublisher connects a publisher to addr with the test's options.
func newPublisher(t *testing.T, addr string, cfg mqtt.Config) *mqtt.Publisher {
	t.Helper()
	p, err := mqtt.New(paho.NewClientOptions().AddBroker("tcp://"+addr), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	waitConnected(t, p)
	return p
}

func waitConnected(t *testing.T, p *mqtt.Publisher) {
	t.Helper()
	var err error
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Health: %v", err) }), 10*time.Second,
		"the publisher connected", func() bool { err = p.Health(context.Background()); return err == nil })
}

const maxMessageBytes = 64 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
		pre := prefix()
		sub := subscribe(t, pre+"/#")
		proxy := tcpproxy.Start(t, brokerAddr())
		pub := newPublisher(t, proxy.Addr(), mqtt.Config{Topic: pre + "/{event_type}", MaxMessageBytes: maxMessageBytes})
		return &publishertest.Broker{
			Publisher:  pub,
			Read:       sub.Read,
			TopicOf:    func(m *outbox.Message) string { return pre + "/" + m.EventType },
			MaxPayload: maxMessageBytes + 1,
			// MQTT 3.1.1 has no refusal: a broker accepts a message for a
			// topic nobody subscribes to (and drops it), and answers an ACL
			// denial with a PUBACK too. Neither Unroutable nor RefuseAll
			// can be observed (see the package doc).
			Disconnect: func(*testing.T) func() {
				proxy.Cut()
				return proxy.Restore
			},
			CloudEvents: &publishertest.CloudEvents{}, // structured mode only
		}
	})
}

func message(agg string, i int) *outbox.Message {
	return publishertest.NewMessage(agg, fmt.Sprintf(`{"agg":%q,"i":%d}`, agg, i))
}

// One connection, QoS 1: the broker delivers an aggregate's events in the
// batch's order.
func TestBatchOrder(t *testing.T) {
	t.Parallel()
	pre := prefix()
	sub := subscribe(t, pre+"/#")
	p := newPublisher(t, brokerAddr(), mqtt.Config{Topic: pre + "/{aggregate_id}"})
	var msgs []*outbox.Message
	for i := range 50 {
		for _, a := range []string{"a", "b"} {
			msgs = append(msgs, message(a, i))
		}
	}
	for i, err := range p.PublishBatch(timeout(t, 30*time.Second), msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	got, err := sub.Read(timeout(t, 30*time.Second), len(msgs))
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, m := range msgs {
		idx[m.ID.String()] = i
	}
	last := map[string]int{}
	for _, r := range got {
		i := idx[r.Headers[outbox.HeaderEventID]]
		if prev, ok := last[r.Topic]; ok && i < prev {
			t.Errorf("topic %s: event %d delivered after event %d", r.Topic, i, prev)
		}
		last[r.Topic] = i
	}
}

func TestPermanentBeforeSending(t *testing.T) {
	t.Parallel()
	pre := prefix()
	sub := subscribe(t, pre+"/#")
	p := newPublisher(t, brokerAddr(), mqtt.Config{Topic: pre + "/{event_type}"})
	for name, edit := range map[string]func(m *outbox.Message){
		"wildcard +":        func(m *outbox.Message) { m.EventType = "order/+" },
		"wildcard #":        func(m *outbox.Message) { m.EventType = "#" },
		"NUL":               func(m *outbox.Message) { m.EventType = "a\x00b" },
		"payload not JSON":  func(m *outbox.Message) { m.Payload = []byte("not json") },
		"invalid UTF-8 key": func(m *outbox.Message) { m.EventType = "\xff" },
	} {
		m := message("1", 1)
		edit(m)
		if err := p.Publish(timeout(t, 10*time.Second), m); outbox.Classify(err) != outbox.ClassPermanent {
			t.Errorf("%s: %v, want a permanent error", name, err)
		}
	}
	ok := message("ok", 1)
	if err := p.Publish(timeout(t, 10*time.Second), ok); err != nil {
		t.Fatal(err)
	}
	got, err := sub.Read(timeout(t, 10*time.Second), 1)
	if err != nil || len(got) != 1 || got[0].Headers[outbox.HeaderEventID] != ok.ID.String() {
		t.Fatalf("the broker holds %d messages (%v), want only the valid one", len(got), err)
	}
}

// paho's own reconnection would complete the tokens of the messages it sends
// again as if acknowledged; the publisher refuses it and reconnects itself,
// so a message whose connection died before its PUBACK fails (unavailable).
func TestConnectionLostBeforePUBACKFails(t *testing.T) {
	t.Parallel()
	pre := prefix()
	proxy := tcpproxy.Start(t, brokerAddr())
	opts := paho.NewClientOptions().AddBroker("tcp://" + proxy.Addr()).SetAutoReconnect(true).SetConnectRetry(true)
	p, err := mqtt.New(opts, mqtt.Config{Topic: pre + "/{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	waitConnected(t, p)
	thaw := proxy.Freeze() // the PUBLISH is held: no PUBACK comes
	before := proxy.BytesFromClients()
	errc := make(chan error, 1)
	go func() { errc <- p.Publish(timeout(t, 30*time.Second), message("1", 1)) }()
	testkit.Eventually(t, 10*time.Second, "the PUBLISH reaching the proxy", func() bool { return proxy.BytesFromClients() > before })
	proxy.Cut() // the connection dies before the PUBACK
	thaw()
	proxy.Restore() // and a new one can be made at once
	err = <-errc
	if err == nil || outbox.Classify(err) != outbox.ClassUnavailable {
		t.Fatalf("publish whose connection died before the PUBACK: %v (%s), want unavailable", err, outbox.Classify(err))
	}
	waitConnected(t, p) // and the publisher reconnects by itself
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming mqtt.Config and the field; client options without a broker are
// refused too.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts *paho.ClientOptions
		want string
	}{
		{nil, "options are nil"},
		{paho.NewClientOptions(), "no broker"},
	} {
		if _, err := mqtt.New(tc.opts, mqtt.Config{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v) = %v, want an error saying %q", tc.opts, err, tc.want)
		}
	}
	for _, tc := range []struct {
		cfg   mqtt.Config
		field string
	}{
		{mqtt.Config{Topic: "{nope}"}, "Topic"},
		{mqtt.Config{MaxMessageBytes: 10}, "MaxMessageBytes"},
		{mqtt.Config{MaxMessageBytes: mqtt.MaxPacketBytes + 1}, "MaxMessageBytes"},
	} {
		_, err := mqtt.New(paho.NewClientOptions().AddBroker("tcp://h:1"), tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "mqtt.Config", tc.field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxMessageBytes":      mqtt.DefaultMaxMessageBytes,
		"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate,
	})
}

func TestNewFromURL(t *testing.T) {
	t.Parallel()
	pre := prefix()
	sub := subscribe(t, pre+"/#")
	u, _ := url.Parse("mqtt://" + brokerAddr() + "?topic=" + url.QueryEscape(pre+"/{event_type}") + "&client_id=" + strings.ReplaceAll(pre, "/", "-") + "&keepalive=10s")
	p, err := mqtt.NewFromURL(u)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitConnected(t, p)
	if err := p.Publish(timeout(t, 10*time.Second), message("1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Read(timeout(t, 10*time.Second), 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"mqtt://",
		"mqtt://h:1883/orders",
		"mqtt://h:1883?nope=1",
		"mqtt://h:1883?keepalive=soon",
		"mqtt://h:1883?tls_ca=/ca.pem",
		"mqtts://u:s3cret@h:8883?tls_ca=/nonexistent.pem",
		"mqtt://u:s3cret@h:1883?max_message_bytes=-1",
		"amqp://h:1883",
	} {
		u, _ := url.Parse(s)
		if _, err := mqtt.NewFromURL(u); err == nil {
			t.Errorf("NewFromURL(%s) = nil error", u.Redacted())
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
}

func TestEnvelope(t *testing.T) {
	t.Parallel()
	m := message("42", 1)
	m.Payload = []byte(`  {"spaces" :  true }  `)
	b, err := mqtt.Envelope(m)
	if err != nil {
		t.Fatal(err)
	}
	h, p, err := mqtt.OpenEnvelope(b)
	if err != nil || string(p) != string(m.Payload) || h[outbox.HeaderEventID] != m.ID.String() || h["tenant"] != "acme" {
		t.Fatalf("OpenEnvelope(%s) = %v, %q, %v", b, h, p, err)
	}
	// Another writer's spacing and key order.
	h, p, err = mqtt.OpenEnvelope([]byte(`{ "payload": {"a":1}, "headers": {"outbox-event-id":"x"} }`))
	if err != nil || string(p) != `{"a":1}` || h[outbox.HeaderEventID] != "x" {
		t.Fatalf("other writer: %v, %q, %v", h, p, err)
	}
	for _, bad := range []string{`{}`, `not json`, `{"headers":{"a":1},"payload":{}}`, `{"headers":{}}`} {
		if _, _, err := mqtt.OpenEnvelope([]byte(bad)); err == nil {
			t.Errorf("OpenEnvelope(%s) = nil error", bad)
		}
	}
}
