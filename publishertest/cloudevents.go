package publishertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/pgoutbox/outbox"
)

// CloudEvents says how a broker carries a CloudEvent, so the CloudEvents
// sub-test can read its messages with the official SDK
// (github.com/cloudevents/sdk-go/v2), as that broker's protocol binding
// does.
type CloudEvents struct {
	// Prefix is the header prefix of binary content mode's attributes
	// ("ce_" for Kafka, "ce-" for HTTP, NATS and Pub/Sub, "cloudEvents_"
	// for AMQP). Empty: the broker has no headers, and its publisher sends
	// structured mode for both CloudEvents envelopes (the body is then
	// always the JSON event format).
	Prefix string
	// PercentEncoded says binary header values are percent-encoded, as
	// the HTTP and NATS bindings want.
	PercentEncoded bool
	// ContentType is the header carrying datacontenttype in binary mode,
	// and the event format's media type in structured mode
	// ("content-type", "Content-Type"); empty when datacontenttype is one
	// more prefixed attribute (NATS) and the body tells the modes apart.
	ContentType string
}

// CloudEventSource is the source attribute the CloudEvents sub-test's
// messages carry.
const CloudEventSource = "/pgoutbox/publishertest.outbox_events"

// ReadCloudEvent reads r with the official SDK, as a consumer following
// ce's binding would, and returns the event once the SDK validated it.
func ReadCloudEvent(ce CloudEvents, r Received) (*event.Event, error) {
	m := &ceMessage{ce: ce, headers: r.Headers, body: r.Payload}
	if r.Body != nil {
		m.body = r.Body
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, fmt.Errorf("sdk-go: %w", err)
	}
	if err := ev.Validate(); err != nil {
		return nil, fmt.Errorf("sdk-go: invalid CloudEvent: %w", err)
	}
	return ev, nil
}

// ceMessage is a binding.Message over a received message: what every
// protocol binding of the SDK does with its own message type, with the
// binding's prefix, encoding and content-type header as parameters.
type ceMessage struct {
	ce      CloudEvents
	headers map[string]string
	body    []byte
}

var (
	_ binding.Message               = (*ceMessage)(nil)
	_ binding.MessageMetadataReader = (*ceMessage)(nil)
)

func (m *ceMessage) header(name string) (string, bool) {
	for k, v := range m.headers {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

func (m *ceMessage) version() spec.Version {
	if m.ce.Prefix == "" {
		return nil
	}
	vs := spec.WithPrefix(strings.ToLower(m.ce.Prefix))
	v, ok := m.header(vs.PrefixedSpecVersionName())
	if !ok {
		return nil
	}
	return vs.Version(v)
}

func (m *ceMessage) format() format.Format {
	if m.ce.Prefix == "" {
		return format.JSON // a broker without headers: structured only
	}
	if m.ce.ContentType != "" {
		if ct, _ := m.header(m.ce.ContentType); format.IsFormat(ct) {
			return format.Lookup(ct)
		}
		return nil
	}
	if m.version() == nil {
		return format.JSON
	}
	return nil
}

func (m *ceMessage) ReadEncoding() binding.Encoding {
	switch {
	case m.version() != nil && m.format() == nil:
		return binding.EncodingBinary
	case m.format() != nil:
		return binding.EncodingStructured
	}
	return binding.EncodingUnknown
}

func (m *ceMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	f := m.format()
	if f == nil {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, f, bytes.NewReader(m.body))
}

func (m *ceMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	v := m.version()
	if v == nil || m.format() != nil {
		return binding.ErrNotBinary
	}
	prefix := strings.ToLower(m.ce.Prefix)
	for k, val := range m.headers {
		lk := strings.ToLower(k)
		switch {
		case strings.HasPrefix(lk, prefix):
			if m.ce.PercentEncoded {
				d, err := url.PathUnescape(val)
				if err != nil {
					return fmt.Errorf("header %s: %w", k, err)
				}
				val = d
			}
			var err error
			if a := v.Attribute(lk); a != nil {
				err = w.SetAttribute(a, val)
			} else {
				err = w.SetExtension(strings.TrimPrefix(lk, prefix), val)
			}
			if err != nil {
				return err
			}
		case m.ce.ContentType != "" && strings.EqualFold(k, m.ce.ContentType):
			if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), val); err != nil {
				return err
			}
		}
	}
	return w.SetData(bytes.NewReader(m.body))
}

func (m *ceMessage) Finish(error) error { return nil }

// GetAttribute and GetExtension make it a binding.MessageMetadataReader,
// which the SDK's binary mode reader asks for.
func (m *ceMessage) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	v := m.version()
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	if val, ok := m.header(a.PrefixedName()); ok {
		return a, val
	}
	return a, nil
}

func (m *ceMessage) GetExtension(name string) interface{} {
	if val, ok := m.header(m.ce.Prefix + name); ok {
		return val
	}
	return nil
}

// testCloudEvents publishes messages with each CloudEvents envelope, reads
// every one back with the official SDK, validates it, and checks the
// mapping: id, source, type, subject, time, datacontenttype, the
// extensions, the data, and the topic, key and dedup id as without an
// envelope.
func testCloudEvents(t *testing.T, b *Broker) {
	if b.CloudEvents == nil {
		t.Skip("Broker.CloudEvents not set")
	}
	envs := []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured}
	var msgs []*outbox.Message
	for _, env := range envs {
		batch := []*outbox.Message{
			NewMessage("42", `{"order_id":"42","total":12.5}`),
			NewMessage("43%25&+", `{"unicode":"é ✓ 😀","nested":{"a":[1,2,3]}}`),
			NewMessage("44", `  {"spaces" :  true }  `),
		}
		batch[1].Headers = nil
		for _, m := range batch {
			m.Envelope, m.CloudEventsSource = env, CloudEventSource
		}
		msgs = append(msgs, batch...)
	}
	for i, err := range publishAll(ctxFor(t, 30*time.Second), b.Publisher, msgs) {
		if err != nil {
			t.Fatalf("publish %d (%s): %v", i, msgs[i].Envelope, err)
		}
	}
	got, err := b.Read(ctxFor(t, 30*time.Second), len(msgs))
	if err != nil && len(got) < len(msgs) {
		t.Fatalf("read back %d of %d messages: %v", len(got), len(msgs), err)
	}
	byID := map[string]Received{}
	events := map[string]*event.Event{}
	for _, r := range got {
		ev, err := ReadCloudEvent(*b.CloudEvents, r)
		if err != nil {
			t.Fatalf("received a message that is no valid CloudEvent: %v\nheaders %v\nbody %s", err, r.Headers, bodyOf(r))
		}
		byID[ev.ID()], events[ev.ID()] = r, ev
	}
	for _, m := range msgs {
		ev, ok := events[m.ID.String()]
		if !ok {
			t.Errorf("event %s (%s) not found at the destination", m.ID, m.Envelope)
			continue
		}
		r := byID[m.ID.String()]
		checkCloudEvent(t, b, m, r, ev)
	}
}

func bodyOf(r Received) []byte {
	if r.Body != nil {
		return r.Body
	}
	return r.Payload
}

func checkCloudEvent(t *testing.T, b *Broker, m *outbox.Message, r Received, ev *event.Event) {
	t.Helper()
	where := fmt.Sprintf("%s %s", m.Envelope, m.ID)
	if ev.SpecVersion() != "1.0" || ev.Source() != CloudEventSource || ev.Type() != m.EventType ||
		ev.Subject() != m.AggregateID || !ev.Time().Equal(m.CreatedAt) || ev.DataContentType() != "application/json" {
		t.Errorf("%s: read specversion %q source %q type %q subject %q time %s datacontenttype %q; want 1.0, %q, %q, %q, %s, application/json",
			where, ev.SpecVersion(), ev.Source(), ev.Type(), ev.Subject(), ev.Time(), ev.DataContentType(),
			CloudEventSource, m.EventType, m.AggregateID, m.CreatedAt)
	}
	wantExt := map[string]string{"outboxaggregatetype": m.AggregateType}
	for k, v := range m.Headers {
		wantExt[k] = v // NewMessage's headers are legal attribute names
	}
	for k, v := range wantExt {
		if got, _ := ev.Extensions()[k].(string); got != v {
			t.Errorf("%s: extension %s = %q, want %q (extensions %v)", where, k, got, v, ev.Extensions())
		}
	}
	if m.Envelope == outbox.EnvelopeCloudEvents && b.CloudEvents.Prefix != "" {
		if !bytes.Equal(ev.Data(), m.Payload) {
			t.Errorf("%s: binary mode data = %q, want the payload %q byte for byte", where, ev.Data(), m.Payload)
		}
	} else if !jsonEqual(ev.Data(), m.Payload) {
		t.Errorf("%s: structured mode data = %s, want the payload %s", where, ev.Data(), m.Payload)
	}
	if m.Envelope == outbox.EnvelopeCloudEventsStructured && b.CloudEvents.ContentType != "" {
		if ct, _ := (&ceMessage{headers: r.Headers}).header(b.CloudEvents.ContentType); !strings.HasPrefix(ct, "application/cloudevents+json") {
			t.Errorf("%s: %s = %q, want application/cloudevents+json", where, b.CloudEvents.ContentType, ct)
		}
	}
	wantTopic := m.EventType
	if b.TopicOf != nil {
		wantTopic = b.TopicOf(m)
	}
	if r.Topic != wantTopic {
		t.Errorf("%s: topic = %q, want %q", where, r.Topic, wantTopic)
	}
	if b.KeyOf != nil && r.Key != b.KeyOf(m) {
		t.Errorf("%s: key = %q, want %q", where, r.Key, b.KeyOf(m))
	}
	if r.DedupID != "" && r.DedupID != m.ID.String() {
		t.Errorf("%s: broker dedup id = %q, want the event id", where, r.DedupID)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}
