package nats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
	"github.com/pgoutbox/outbox/publishertest"
)

// From a plain INSERT to a JetStream consumer reading CloudEvents with the
// official SDK (the NATS binding's rules: ce- headers, percent-encoded; or
// Content-Type application/cloudevents+json), in both content modes.
func TestCloudEventsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, env := range []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured} {
		t.Run(string(env), func(t *testing.T) {
			t.Parallel()
			nc := testnats.Conn(t)
			stream, prefix := testnats.Stream(t, nc)
			pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
			if err != nil {
				t.Fatal(err)
			}
			source, want := publishertest.RelayPlainInserts(t, pub, env)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(len(want), jetstream.FetchMaxWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			ce := publishertest.CloudEvents{Prefix: outboxnats.HeaderCloudEventsPrefix, PercentEncoded: true, ContentType: "Content-Type"}
			got := map[string]publishertest.Received{}
			for msg := range batch.Messages() {
				h := map[string]string{}
				for k := range msg.Headers() {
					h[k] = msg.Headers().Get(k)
				}
				r := publishertest.Received{Topic: msg.Subject(), Headers: h, Payload: msg.Data()}
				ev, err := publishertest.ReadCloudEvent(ce, r)
				if err != nil {
					t.Fatalf("message on %s: %v (headers %v, data %s)", msg.Subject(), err, h, msg.Data())
				}
				got[ev.ID()] = r
				if err := msg.Ack(); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("consumed %d events, want %d", len(got), len(want))
			}
			for _, m := range want {
				r, ok := got[m.ID.String()]
				if !ok {
					t.Errorf("event %s not consumed", m.ID)
					continue
				}
				ev, _ := publishertest.ReadCloudEvent(ce, r)
				if err := publishertest.CheckCloudEvent(ev, m, source, env == outbox.EnvelopeCloudEvents); err != nil {
					t.Error(err)
				}
				if r.Topic != prefix+"."+m.EventType {
					t.Errorf("subject %q, want %q", r.Topic, prefix+"."+m.EventType)
				}
			}
		})
	}
}
