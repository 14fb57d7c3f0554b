// Package publishertest is the conformance suite every outbox.Publisher in
// this repository runs, and that third-party publishers can run too: the same
// message mapping, confirmation semantics, error classification, context
// handling and outage behaviour, whatever the broker.
//
//	func TestConformance(t *testing.T) {
//		publishertest.Run(t, func(t *testing.T) *publishertest.Broker {
//			... connect through a tcpproxy, create an isolated destination ...
//			return &publishertest.Broker{
//				Publisher:  pub,
//				Read:       read,
//				MaxPayload: limit + 1,
//				Unroutable: pubToNowhere,
//				Disconnect: func(*testing.T) func() { proxy.Cut(); return proxy.Restore },
//			}
//		})
//	}
//
// The Outage sub-test runs a real outbox.Relay, so it needs the test
// PostgreSQL server (TEST_DATABASE_URL, default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable); it creates and
// drops a schema of its own.
package publishertest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// Received is a message as a consumer reads it back from the broker.
type Received struct {
	// Topic is where the broker routed it: subject, topic, routing key,
	// stream, queue or URL path.
	Topic string
	// Key is the partition or ordering key ("" if the broker has none).
	Key string
	// DedupID is the broker-level message id or deduplication id (Nats-Msg-Id,
	// AMQP message_id, SQS MessageDeduplicationId, webhook-id); "" if none.
	DedupID string
	// Headers are the message's headers (or attributes, or fields).
	Headers map[string]string
	// Payload is the body, which must equal the outbox payload byte for byte.
	Payload []byte
	// Body is the message's body as the broker holds it, for a harness
	// that decodes an envelope of its own into Headers and Payload (MQTT,
	// Kinesis, EventBridge); nil means Payload is the body. The
	// CloudEvents sub-test reads it.
	Body []byte
}

// Broker is what a publisher's test gives the suite for one sub-test: a
// publisher bound to a fresh, isolated destination and a way to read back what
// the broker stored there. Optional fields left nil skip their checks (the
// sub-test says so with t.Skip).
type Broker struct {
	// Publisher publishes to the isolated destination with the default topic
	// template ("{event_type}") unless the harness says otherwise in
	// TopicOf.
	Publisher outbox.Publisher
	// Read returns what the broker holds at the destination, waiting until it
	// holds at least n messages or ctx ends (then it returns what it has and
	// ctx's error). Every call returns everything received so far, not only
	// what is new: a harness that consumes messages must keep them.
	Read func(ctx context.Context, n int) ([]Received, error)
	// TopicOf returns the Topic a message is expected to arrive with; nil
	// means the rendered default template, msg.EventType.
	TopicOf func(msg *outbox.Message) string
	// KeyOf returns the expected Received.Key; nil means Key is not checked.
	KeyOf func(msg *outbox.Message) string

	// MaxPayload is a payload size the broker rejects; a message that large
	// must fail with a permanent error. 0 skips the check.
	MaxPayload int
	// Unroutable is a publisher whose destination does not exist (no stream,
	// no exchange or bound queue, unknown topic, missing queue). Publishing
	// must fail, not drop silently, and fail as unavailable with an error
	// naming UnroutableName: every event for that destination would fail
	// alike, so the relay must back off as a whole rather than burn the
	// backlog into dead letters over a missing stream.
	Unroutable outbox.Publisher
	// UnroutableName is the destination name Unroutable's errors must
	// contain (the subject, exchange, topic, stream or queue).
	UnroutableName string
	// UnroutablePerMessage says the broker's "does not exist" is an answer
	// about one message, not about the destination (an HTTP 404 from a
	// templated webhook URL): Unroutable must then fail as permanent or
	// transient instead.
	UnroutablePerMessage bool
	// RefuseAll makes a destination that exists refuse every message for a
	// reason of its own (a stream full with discard-new, a queue at its
	// x-max-length with reject-publish, Redis out of memory, throttling, an
	// endpoint answering 503 to everything) and returns a publisher to it
	// and a function ending the refusal. While it refuses, publishes must
	// fail as unavailable and a relay must burn no attempt; once restored,
	// everything is delivered. The suite calls restore exactly once. nil
	// skips RefusesAll.
	RefuseAll func(t *testing.T) (pub outbox.Publisher, restore func())
	// Disconnect cuts the publisher off from the broker (stopping it, or
	// through a TCP proxy) and returns a function restoring it. While cut
	// off, Publish must fail with an error the relay classifies as
	// unavailable (or time out); once restored, the publisher must reconnect
	// by itself, its failures meanwhile still unavailable. Only this
	// sub-test's publisher may be affected (sub-tests run in parallel). The
	// suite calls restore exactly once. nil skips Disconnected and Outage.
	Disconnect func(t *testing.T) (restore func())
	// CloudEvents says how the broker carries a CloudEvent (binary mode's
	// header prefix...); nil skips CloudEvents.
	CloudEvents *CloudEvents
}

// Run runs the suite. setup is called once per sub-test, from the sub-test's
// goroutine; sub-tests run in parallel (t.Parallel), so setup must be safe
// for concurrent use and give each call its own destination (and its own
// proxy, for Disconnect).
//
// Sub-tests:
//
//   - MessageMapping: payload bytes, topic, key, dedup id and headers as
//     documented on Received.
//   - ConcurrentPublish: Publish/PublishBatch from several goroutines at once.
//   - CancelledContext: a cancelled ctx fails fast, or the message is there.
//   - Oversized (MaxPayload): a too-large message fails with a permanent
//     error, alone and inside a batch, without failing its neighbours.
//   - Unroutable (Unroutable): publishing to a destination that does not
//     exist fails as unavailable, naming the destination (or, with
//     UnroutablePerMessage, as permanent or transient).
//   - Describer: the publisher names its messaging system and each
//     message's destination (outbox.Describer), for the relay's spans.
//   - RefusesAll (RefuseAll): a destination refusing everything fails every
//     publish as unavailable; a real Relay burns no attempt and makes no
//     dead letter, then drains everything once the refusal ends.
//   - Disconnected (Disconnect): while cut off, publishes fail as unavailable
//     (or time out); once restored, the publisher recovers by itself.
//   - Outage (Disconnect): a real Relay on a real outbox table drains every
//     event through an outage with no loss, no attempt counted and no dead
//     letter.
//   - CloudEvents (CloudEvents): messages sent with each CloudEvents
//     envelope are read back with the official SDK, valid, and carry the
//     event's id, source, type, subject, time, extensions and data.
func Run(t *testing.T, setup func(t *testing.T) *Broker) {
	sub := func(name string, f func(*testing.T, *Broker)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t))
		})
	}
	sub("MessageMapping", testMessageMapping)
	sub("ConcurrentPublish", testConcurrent)
	sub("CancelledContext", testCancelled)
	sub("Oversized", testOversized)
	sub("Unroutable", testUnroutable)
	sub("Describer", testDescriber)
	sub("RefusesAll", testRefusesAll)
	sub("Disconnected", testDisconnected)
	sub("Outage", testOutage)
	sub("CloudEvents", testCloudEvents)
}

// NewMessage returns a message with a fresh id, the given payload and a
// couple of user headers.
func NewMessage(aggregateID string, payload string) *outbox.Message {
	id, _ := uuid.NewV7()
	return &outbox.Message{
		ID: id, Seq: 1, AggregateType: "order", AggregateID: aggregateID, EventType: "order.created",
		Payload: []byte(payload), Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"},
		CreatedAt: time.Now().UTC().Truncate(time.Microsecond), Attempt: 1,
	}
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func publishAll(ctx context.Context, pub outbox.Publisher, msgs []*outbox.Message) []error {
	if bp, ok := pub.(outbox.BatchPublisher); ok {
		errs := bp.PublishBatch(ctx, msgs)
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		return errs
	}
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		errs[i] = pub.Publish(ctx, m)
	}
	return errs
}

func testMessageMapping(t *testing.T, b *Broker) {
	msgs := []*outbox.Message{
		NewMessage("42", `{"order_id":"42","total":12.5}`),
		NewMessage("43", `{"unicode":"é ✓ 😀","nested":{"a":[1,2,3]}}`),
		NewMessage("44", `  {"spaces" :  true }  `), // bytes unchanged, not re-encoded
	}
	msgs[1].Headers = nil
	for i, err := range publishAll(ctxFor(t, 30*time.Second), b.Publisher, msgs) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	got, err := b.Read(ctxFor(t, 30*time.Second), len(msgs))
	if err != nil && len(got) < len(msgs) {
		t.Fatalf("read back %d of %d messages: %v", len(got), len(msgs), err)
	}
	byID := map[string]Received{}
	for _, r := range got {
		id := r.Headers[outbox.HeaderEventID]
		if id == "" {
			t.Fatalf("received message without %s header: %+v", outbox.HeaderEventID, r)
		}
		byID[id] = r
	}
	for _, m := range msgs {
		r, ok := byID[m.ID.String()]
		if !ok {
			t.Errorf("event %s not found at the destination", m.ID)
			continue
		}
		if !bytes.Equal(r.Payload, m.Payload) {
			t.Errorf("payload = %q, want %q byte for byte", r.Payload, m.Payload)
		}
		wantTopic := m.EventType
		if b.TopicOf != nil {
			wantTopic = b.TopicOf(m)
		}
		if r.Topic != wantTopic {
			t.Errorf("topic = %q, want %q", r.Topic, wantTopic)
		}
		if b.KeyOf != nil && r.Key != b.KeyOf(m) {
			t.Errorf("key = %q, want %q", r.Key, b.KeyOf(m))
		}
		if r.DedupID != "" && r.DedupID != m.ID.String() {
			t.Errorf("broker dedup id = %q, want the event id %s", r.DedupID, m.ID)
		}
		for k, v := range m.StandardHeaders() {
			if r.Headers[k] != v {
				t.Errorf("header %q = %q, want %q", k, r.Headers[k], v)
			}
		}
	}
}

func testConcurrent(t *testing.T, b *Broker) {
	const goroutines, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := range goroutines {
		wg.Go(func() {
			msgs := make([]*outbox.Message, each)
			for i := range msgs {
				msgs[i] = NewMessage(fmt.Sprintf("agg-%d", g), fmt.Sprintf(`{"g":%d,"i":%d}`, g, i))
			}
			for _, err := range publishAll(ctxFor(t, 60*time.Second), b.Publisher, msgs) {
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent publish: %v", err)
	}
	got, err := b.Read(ctxFor(t, 60*time.Second), goroutines*each)
	if len(got) < goroutines*each {
		t.Fatalf("broker holds %d of %d messages: %v", len(got), goroutines*each, err)
	}
}

func testCancelled(t *testing.T, b *Broker) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	m := NewMessage("1", `{}`)
	start := time.Now()
	err := b.Publisher.Publish(c, m)
	if err == nil {
		// Some brokers confirm before looking at ctx; that is allowed only if
		// the message really is there.
		got, _ := b.Read(ctxFor(t, 10*time.Second), 1)
		for _, r := range got {
			if r.Headers[outbox.HeaderEventID] == m.ID.String() {
				return
			}
		}
		t.Fatal("Publish with a cancelled context returned nil but the message is not at the broker")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Publish with a cancelled context took %s", d)
	}
}

func testDescriber(t *testing.T, b *Broker) {
	d, ok := b.Publisher.(outbox.Describer)
	if !ok {
		t.Fatalf("%T does not implement outbox.Describer: the relay's spans would carry no messaging.system or destination", b.Publisher)
	}
	m := NewMessage("42", `{}`)
	if d.MessagingSystem() == "" || d.Destination(m) == "" {
		t.Errorf("MessagingSystem() = %q, Destination() = %q; want both set", d.MessagingSystem(), d.Destination(m))
	}
}
