package outboxcli

import (
	"bytes"
	"testing"

	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/pgoutbox/outbox"
)

// `outbox relay --broker pubsub://PROJECT?emulator=...`: --topic is the topic
// template, --create-topology creates the missing topic, every event arrives
// with its ordering key.
func TestRelayPubSub(t *testing.T) {
	f := setup(t)
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	ids := f.write("order.created", 20)
	r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema, "--create-topology",
		"--broker", "pubsub://pgoutbox-test?emulator="+srv.Addr, "--topic", "orders-{aggregate_type}", "--poll-interval", "10ms")
	eventually(t, "every event in the Pub/Sub topic", func() bool { return len(srv.Messages()) == len(ids) })
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, r.stderr)
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id.String()] = true
	}
	for _, m := range srv.Messages() {
		if m.Topic != "projects/pgoutbox-test/topics/orders-order" || !want[m.Attributes[outbox.HeaderEventID]] ||
			m.OrderingKey != m.Attributes[outbox.HeaderAggregateID] {
			t.Errorf("message on %s, event %s, ordering key %q", m.Topic, m.Attributes[outbox.HeaderEventID], m.OrderingKey)
		}
	}
}
