package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/publishertest"
)

// From a plain INSERT to a Kafka consumer (kfake) reading CloudEvents with
// the official SDK (the Kafka binding's rules: ce_ headers, content-type),
// in both content modes; the key stays the aggregate id.
func TestCloudEventsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, env := range []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured} {
		t.Run(string(env), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t, kfake.SeedTopics(2, "ce.events"))
			pub := newPublisher(t, kafka.Config{Brokers: []string{c.addr}, Topic: "ce.events", DeliveryTimeout: 5 * time.Second})
			source, want := publishertest.RelayPlainInserts(t, pub, env)

			recs, err := c.read(timeout(t, 30*time.Second), "ce.events", len(want))
			if err != nil {
				t.Fatalf("read %d records: %v", len(recs), err)
			}
			ce := publishertest.CloudEvents{Prefix: kafka.HeaderCloudEventsPrefix, ContentType: kafka.HeaderContentType}
			got := map[string]publishertest.Received{}
			for _, r := range recs {
				ev, err := publishertest.ReadCloudEvent(ce, r.Received)
				if err != nil {
					t.Fatalf("record at offset %d: %v (headers %v, value %s)", r.Offset, err, r.Headers, r.Payload)
				}
				got[ev.ID()] = r.Received
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
				if r.Key != m.AggregateID {
					t.Errorf("event %s: key %q, want the aggregate id %q", m.ID, r.Key, m.AggregateID)
				}
			}
		})
	}
}
