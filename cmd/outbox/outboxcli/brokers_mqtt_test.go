package outboxcli

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/mqtt"
)

// `outbox relay --broker mqtt://127.0.0.1:1883`: --topic is the topic
// template, every event arrives in its envelope at QoS 1.
func TestRelayMQTT(t *testing.T) {
	f := setup(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "pgoutbox-test/" + hex.EncodeToString(b)
	var (
		mu  sync.Mutex
		got = map[string]string{} // event id -> topic
	)
	c := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://127.0.0.1:1883").SetClientID("cli-" + hex.EncodeToString(b)))
	if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("connect to Mosquitto: %v", tok.Error())
	}
	t.Cleanup(func() { c.Disconnect(100) })
	if tok := c.Subscribe(prefix+"/#", 1, func(_ paho.Client, m paho.Message) {
		h, _, err := mqtt.OpenEnvelope(m.Payload())
		if err != nil {
			t.Errorf("not an envelope: %v", err)
			return
		}
		mu.Lock()
		got[h[outbox.HeaderEventID]] = m.Topic()
		mu.Unlock()
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	ids := f.write("order.created", 20)
	r := startRelay(t, &bytes.Buffer{}, dbEnv(), "--schema", f.schema,
		"--broker", "mqtt://127.0.0.1:1883", "--topic", prefix+"/{aggregate_type}/{event_type}", "--poll-interval", "10ms")
	eventually(t, "every event on the MQTT topic", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(ids)
	})
	if code := r.stop(t); code != ExitOK {
		t.Fatalf("exit %d: %s", code, r.stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if got[id.String()] != prefix+"/order/order.created" {
			t.Errorf("event %s on topic %q", id, got[id.String()])
		}
	}
}
