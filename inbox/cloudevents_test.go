package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/outboxtype"
)

func ceMessage() *outbox.Message {
	return &outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "order.created", AggregateType: "order",
		AggregateID: "order 42", CreatedAt: time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC),
		Payload: []byte(`{"a":1}`), CloudEventsSource: "/pgoutbox/public.outbox_events",
		Headers: map[string]string{"traceparent": "00-abc", "tenant": "acme", outbox.HeaderReplayID: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"}}
}

// Whatever binding carried it, a CloudEvent the relay sent becomes the
// Message the outbox's own format gives: the CloudEvents id is the event id.
func TestMessageFromHeadersCloudEvents(t *testing.T) {
	t.Parallel()
	src := ceMessage()
	ce, err := src.CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	structured, err := ce.Structured()
	if err != nil {
		t.Fatal(err)
	}
	binary := func(prefix string, encode bool) map[string]string {
		h := map[string]string{}
		for _, a := range ce.Attributes() {
			v := a.Value
			if encode {
				v = outboxtype.EncodeHeaderValue(v)
			}
			h[prefix+a.Name] = v
		}
		return h
	}
	for name, c := range map[string]struct {
		h    map[string]string
		body []byte
	}{
		"HTTP, NATS (ce-)":           {binary("Ce-", true), src.Payload},
		"Kafka (ce_)":                {binary("ce_", false), src.Payload},
		"AMQP (cloudEvents_)":        {binary("cloudEvents_", false), src.Payload},
		"AMQP, older (cloudEvents:)": {binary("cloudEvents:", false), src.Payload},
		"structured, content-type":   {map[string]string{"Content-Type": "application/cloudevents+json"}, structured},
		"structured, no headers":     {nil, structured},
	} {
		m, err := inbox.MessageFromHeaders(c.h, c.body)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if m.ID != src.ID || m.EventType != src.EventType || m.AggregateType != "order" || m.AggregateID != "order 42" ||
			!m.CreatedAt.Equal(src.CreatedAt) || string(m.Payload) != `{"a":1}` || m.Header("tenant") != "acme" ||
			m.Headers["traceparent"] != "00-abc" || m.ReplayID.String() != src.Headers[outbox.HeaderReplayID] {
			t.Errorf("%s: got %+v", name, m)
		}
	}

	// An outbox message whose payload happens to look like a CloudEvent
	// stays an outbox message.
	h := src.StandardHeaders()
	m, err := inbox.MessageFromHeaders(h, structured)
	if err != nil || m.ID != src.ID || string(m.Payload) != string(structured) {
		t.Errorf("outbox message with a CloudEvent payload: %+v, %v", m, err)
	}

	for name, c := range map[string]struct {
		h    map[string]string
		body string
	}{
		"id not a UUID": {map[string]string{"ce_specversion": "1.0", "ce_id": "A234-1234", "ce_source": "/s", "ce_type": "t"}, `{}`},
		"no type":       {map[string]string{"ce_specversion": "1.0", "ce_id": src.ID.String(), "ce_source": "/s"}, `{}`},
		"version 0.3":   {nil, `{"specversion":"0.3","id":"x","source":"/s","type":"t"}`},
	} {
		if _, err := inbox.MessageFromHeaders(c.h, []byte(c.body)); !errors.Is(err, inbox.ErrInvalidMessage) {
			t.Errorf("%s: err = %v, want ErrInvalidMessage", name, err)
		}
	}
}
