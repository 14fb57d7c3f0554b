package main

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
)

// capture is a publisher that keeps what it is given.
type capture struct{ msgs []*message.Message }

func (c *capture) Publish(_ string, msgs ...*message.Message) error {
	c.msgs = append(c.msgs, msgs...)
	return nil
}
func (c *capture) Close() error { return nil }

// TestEnvelope: what forwarder.NewPublisher stores has the fields the
// bench's writers build by hand (bench/peer.go, watermillEnvelope), and
// the counting publisher checks the index off its metadata.
func TestEnvelope(t *testing.T) {
	c := &capture{}
	m := message.NewMessage("id-1", []byte(`{"order_id":"7"}`))
	m.Metadata.Set("aggregate_id", "7")
	if err := forwarder.NewPublisher(c, forwarder.PublisherConfig{ForwarderTopic: Topic}).Publish("events", m); err != nil {
		t.Fatal(err)
	}
	if len(c.msgs) != 1 || len(c.msgs[0].Metadata) != 0 {
		t.Fatalf("want one envelope with empty metadata: %+v", c.msgs)
	}
	var got map[string]any
	if err := json.Unmarshal(c.msgs[0].Payload, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"destination_topic": "events", "uuid": "id-1", "payload": "eyJvcmRlcl9pZCI6IjcifQ==", "metadata": map[string]any{"aggregate_id": "7"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("envelope %v, want %v", got, want)
	}
}

// TestCounter: distinct indexes, duplicates and foreign messages, and the
// target's time.
func TestCounter(t *testing.T) {
	c := newCounter(3, true)
	msg := func(id string) *message.Message {
		m := message.NewMessage("u", nil)
		if id != "" {
			m.Metadata.Set("aggregate_id", id)
		}
		return m
	}
	_ = c.Publish("events", msg("0"), msg("2"), msg("2"), msg(""))
	if d := c.delivery(3); d.Distinct != 2 || d.Total != 4 || d.Bad != 1 || !c.doneAt.IsZero() {
		t.Fatalf("%+v", d)
	}
	_ = c.Publish("events", msg("1"), msg("100"))
	if d := c.delivery(3); d.Distinct != 4 || c.doneAt.IsZero() || c.times[1] == 0 || len(c.times) <= 100 {
		t.Fatalf("%+v, done %v", d, c.doneAt)
	}
}

func TestParseStop(t *testing.T) {
	if n, err := parseStop("stop 42\n"); err != nil || n != 42 {
		t.Errorf("stop 42: %d %v", n, err)
	}
	for _, bad := range []string{"stop\n", "go\n", "stop -1\n"} {
		if _, err := parseStop(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}
