package outboxtype_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/outboxtype"
)

func message() *outboxtype.Message {
	return &outboxtype.Message{
		ID: uuid.MustParse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"), AggregateType: "order", AggregateID: "42",
		EventType: "order.created", Payload: []byte(` {"total": 12.5} `),
		CreatedAt: time.Date(2026, 3, 1, 12, 30, 45, 123456000, time.FixedZone("CET", 3600)),
		Headers: map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme",
			"X-Request-ID": "r-1", "Tenant": "shadowed", "a-very-long-header-name-indeed": "dropped",
			"id": "not the id", "empty": "", "ctl": "a\x01b", outboxtype.HeaderEventType: "not the type",
			"outbox-replay-id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c",
		},
		Envelope: outboxtype.EnvelopeCloudEventsStructured, CloudEventsSource: "/pgoutbox/public.outbox_events",
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && bytes.Equal(x.Bytes(), y.Bytes())
}

func TestCloudEventsAttributeName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"tenant": "tenant", "X-Request-ID": "xrequestid", "tenant_id": "tenantid", "traceparent": "traceparent",
		"outbox-aggregate-type": "outboxaggregatetype", "abcdefghijklmnopqrst": "abcdefghijklmnopqrst",
		"abcdefghijklmnopqrstu": "", "---": "", "": "", "ID": "", "type": "", "data": "", "data_base64": "",
		"Data-Content-Type": "", "é": "", "sp ace": "space",
	} {
		got, ok := outboxtype.CloudEventsAttributeName(in)
		if got != want || ok != (want != "") {
			t.Errorf("CloudEventsAttributeName(%q) = %q, %v; want %q, %v", in, got, ok, want, want != "")
		}
	}
}

func TestMessageCloudEvent(t *testing.T) {
	t.Parallel()
	e, err := message().CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	want := []outboxtype.Attribute{
		{"specversion", "1.0"}, {"id", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"}, {"source", "/pgoutbox/public.outbox_events"},
		{"type", "order.created"}, {"subject", "42"}, {"time", "2026-03-01T11:30:45.123456Z"},
		{"outboxaggregatetype", "order"}, {"outboxreplayid", "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c"},
		{"tenant", "acme"}, {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"xrequestid", "r-1"},
	}
	got := e.Attributes()
	if len(got) != len(want) {
		t.Fatalf("Attributes() =\n%v\nwant\n%v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("attribute %d = %v, want %v", i, got[i], want[i])
		}
	}
	if e.DataContentType != "application/json" {
		t.Errorf("datacontenttype = %q", e.DataContentType)
	}

	// The official SDK reads the structured form and finds it valid.
	body, err := e.Structured()
	if err != nil {
		t.Fatal(err)
	}
	ev := event.New()
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("sdk-go cannot read %s: %v", body, err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("sdk-go finds %s invalid: %v", body, err)
	}
	if ev.ID() != want[1].Value || ev.Source() != want[2].Value || ev.Type() != "order.created" || ev.Subject() != "42" ||
		!ev.Time().Equal(message().CreatedAt) || ev.DataContentType() != "application/json" {
		t.Errorf("sdk-go read %+v", ev)
	}
	if ev.Extensions()["tenant"] != "acme" || ev.Extensions()["outboxaggregatetype"] != "order" {
		t.Errorf("sdk-go extensions = %v", ev.Extensions())
	}
	if !jsonEqual(ev.Data(), message().Payload) {
		t.Errorf("sdk-go data = %q", ev.Data())
	}
	// The data member holds the payload's bytes as written.
	if !bytes.HasSuffix(body, append([]byte(`"data":`), append(message().Payload, '}')...)) {
		t.Errorf("structured body %s does not end with the payload verbatim", body)
	}
}

func TestMessageCloudEventRefuses(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(m *outboxtype.Message){
		"empty type":       func(m *outboxtype.Message) { m.EventType = "" },
		"control in type":  func(m *outboxtype.Message) { m.EventType = "a\nb" },
		"invalid subject":  func(m *outboxtype.Message) { m.AggregateID = "\xff" },
		"source with a sp": func(m *outboxtype.Message) { m.CloudEventsSource = "/a b" },
	} {
		m := message()
		mod(m)
		if _, err := m.CloudEvent(); err == nil {
			t.Errorf("%s: CloudEvent() = nil error", name)
		}
	}
	m := message()
	m.Payload = []byte(`not json`)
	e, err := m.CloudEvent()
	if err != nil {
		t.Fatal(err) // binary mode can carry it
	}
	if _, err := e.Structured(); err == nil || !strings.Contains(err.Error(), "not valid JSON") {
		t.Errorf("Structured() of a non-JSON payload: %v", err)
	}
	m = message()
	m.CloudEventsSource = ""
	if e, err := m.CloudEvent(); err != nil || e.Source != outboxtype.DefaultCloudEventsSource {
		t.Errorf("empty source: %v, %v", e, err)
	}
}

func TestCloudEventsSourceFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ schema, table, want string }{
		{"public", "outbox_events", "/pgoutbox/public.outbox_events"},
		{"", "outbox_events", "/pgoutbox/outbox_events"},
		{"my app", "évents/x", "/pgoutbox/my%20app.%C3%A9vents%2Fx"},
	} {
		got := outboxtype.CloudEventsSourceFor(c.schema, c.table)
		if got != c.want {
			t.Errorf("CloudEventsSourceFor(%q, %q) = %q, want %q", c.schema, c.table, got, c.want)
		}
		if err := outboxtype.ValidCloudEventsSource(got); err != nil {
			t.Errorf("%q: %v", got, err)
		}
	}
}

func TestHeaderValueEncoding(t *testing.T) {
	t.Parallel()
	// The HTTP and NATS bindings' own example.
	if got := outboxtype.EncodeHeaderValue("Euro € 😀"); got != "Euro%20%E2%82%AC%20%F0%9F%98%80" {
		t.Errorf("EncodeHeaderValue = %q", got)
	}
	for _, v := range []string{"", "plain.value-1_2", `a "quoted" 100% value`, "é\tü", "00-4bf92f35-01"} {
		enc := outboxtype.EncodeHeaderValue(v)
		for i := 0; i < len(enc); i++ {
			if enc[i] <= ' ' || enc[i] >= 0x7f || enc[i] == '"' {
				t.Errorf("EncodeHeaderValue(%q) = %q has byte %q", v, enc, enc[i])
			}
		}
		dec, err := outboxtype.DecodeHeaderValue(enc)
		if err != nil || dec != v {
			t.Errorf("DecodeHeaderValue(%q) = %q, %v; want %q", enc, dec, err, v)
		}
	}
	if got, err := outboxtype.DecodeHeaderValue(`"a\"b%20c"`); err != nil || got != `a"b c` {
		t.Errorf("quoted value: %q, %v", got, err)
	}
	for _, bad := range []string{"%C0%A0x%ZZ", "%FF", "%"} {
		if _, err := outboxtype.DecodeHeaderValue(bad); err == nil {
			t.Errorf("DecodeHeaderValue(%q): no error", bad)
		}
	}
}

func TestReadCloudEventBinary(t *testing.T) {
	t.Parallel()
	m := message()
	m.AggregateID = "order 42 é"
	e, err := m.CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"ce-", "Ce-", "ce_", "cloudEvents_", "cloudEvents:"} {
		h := map[string]string{"content-type": "application/json", "Nats-Msg-Id": m.ID.String()}
		for _, a := range e.Attributes() {
			v := a.Value
			if strings.EqualFold(prefix, "ce-") {
				v = outboxtype.EncodeHeaderValue(v)
			}
			h[prefix+a.Name] = v
		}
		got, err := outboxtype.ReadCloudEvent(h, m.Payload)
		if err != nil || got == nil {
			t.Fatalf("%s: ReadCloudEvent = %v, %v", prefix, got, err)
		}
		if got.ID != e.ID || got.Source != e.Source || got.Type != e.Type || got.Subject != "order 42 é" ||
			!got.Time.Equal(e.Time) || got.DataContentType != "application/json" || !bytes.Equal(got.Data, m.Payload) ||
			!maps.Equal(got.Extensions, e.Extensions) {
			t.Errorf("%s: read %+v\nwant %+v", prefix, got, e)
		}
	}
}

func TestReadCloudEventStructured(t *testing.T) {
	t.Parallel()
	e, err := message().CloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := e.Structured()
	for name, h := range map[string]map[string]string{
		"content type": {"Content-Type": "application/cloudevents+json; charset=utf-8"},
		"no headers":   nil,
	} {
		got, err := outboxtype.ReadCloudEvent(h, body)
		if err != nil || got == nil {
			t.Fatalf("%s: ReadCloudEvent = %v, %v", name, got, err)
		}
		if got.ID != e.ID || got.Subject != "42" || !got.Time.Equal(e.Time) || !maps.Equal(got.Extensions, e.Extensions) ||
			!bytes.Equal(got.Data, message().Payload) {
			t.Errorf("%s: read %+v", name, got)
		}
	}
	// An SDK's event, with an integer extension and base64 data.
	got, err := outboxtype.ReadCloudEvent(nil, []byte(`{"specversion":"1.0","id":"x","source":"/s","type":"t","n":7,"b":true,"data_base64":"aGk="}`))
	if err != nil || got.Extensions["n"] != "7" || got.Extensions["b"] != "true" || string(got.Data) != "hi" {
		t.Errorf("read %+v, %v", got, err)
	}
}

func TestReadCloudEventNotOne(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		h    map[string]string
		body string
	}{
		"outbox headers":   {map[string]string{outboxtype.HeaderEventID: "x"}, `{"a":1}`},
		"json, no CE":      {nil, `{"headers":{},"payload":{"specversion":1}}`},
		"other media type": {map[string]string{"content-type": "text/plain"}, `{"specversion":"1.0"}`},
		"empty":            {nil, ``},
	} {
		if got, err := outboxtype.ReadCloudEvent(c.h, []byte(c.body)); got != nil || err != nil {
			t.Errorf("%s: ReadCloudEvent = %+v, %v; want nil, nil", name, got, err)
		}
	}
	for name, c := range map[string]struct {
		h    map[string]string
		body string
	}{
		"version 0.3":  {map[string]string{"ce-specversion": "0.3", "ce-id": "x", "ce-source": "/s", "ce-type": "t"}, ``},
		"no id":        {map[string]string{"ce_specversion": "1.0", "ce_source": "/s", "ce_type": "t"}, ``},
		"bad time":     {map[string]string{"ce_specversion": "1.0", "ce_id": "x", "ce_source": "/s", "ce_type": "t", "ce_time": "yesterday"}, ``},
		"bad escape":   {map[string]string{"ce-specversion": "1.0", "ce-id": "%ZZ", "ce-source": "/s", "ce-type": "t"}, ``},
		"bad body":     {map[string]string{"content-type": "application/cloudevents+json"}, `[1]`},
		"object attr":  {nil, `{"specversion":"1.0","id":"x","source":"/s","type":"t","o":{}}`},
		"no type json": {nil, `{"specversion":"1.0","id":"x","source":"/s"}`},
	} {
		if got, err := outboxtype.ReadCloudEvent(c.h, []byte(c.body)); err == nil {
			t.Errorf("%s: ReadCloudEvent = %+v, nil; want an error", name, got)
		}
	}
}

func TestEnvelopeValid(t *testing.T) {
	t.Parallel()
	for _, e := range []outboxtype.Envelope{"", outboxtype.EnvelopeOutbox, outboxtype.EnvelopeCloudEvents, outboxtype.EnvelopeCloudEventsStructured} {
		if err := e.Valid(); err != nil {
			t.Errorf("%q: %v", e, err)
		}
	}
	if err := outboxtype.Envelope("CloudEvents").Valid(); err == nil || !strings.Contains(err.Error(), `"cloudevents-structured"`) {
		t.Errorf("Valid() of a bad envelope = %v", err)
	}
	if outboxtype.EnvelopeOutbox.CloudEvents() || !outboxtype.EnvelopeCloudEvents.CloudEvents() {
		t.Error("CloudEvents() is wrong")
	}
}

// FuzzReadCloudEvent: whatever a broker delivers, ReadCloudEvent returns an
// event, nothing or an error, never panics, and an event it returns has the
// required attributes.
func FuzzReadCloudEvent(f *testing.F) {
	f.Add("ce-specversion", "1.0", `{"a":1}`)
	f.Add("content-type", "application/cloudevents+json", `{"specversion":"1.0","id":"x","source":"/s","type":"t","data":1}`)
	f.Add("", "", `{"specversion":"1.0","id":"x","source":"/s","type":"t","data_base64":"aGk="}`)
	f.Add("ce-id", `"%41"`, ``)
	f.Fuzz(func(t *testing.T, k, v, body string) {
		h := map[string]string{k: v, "ce-id": "x", "ce-source": "/s", "ce-type": "t"}
		e, err := outboxtype.ReadCloudEvent(h, []byte(body))
		if err == nil && e != nil && (e.ID == "" || e.Source == "" || e.Type == "") {
			t.Errorf("ReadCloudEvent(%v, %q) = %+v without a required attribute", h, body, e)
		}
		if e, err := outboxtype.ReadCloudEvent(nil, []byte(body)); err == nil && e != nil && (e.ID == "" || e.Type == "") {
			t.Errorf("ReadCloudEvent(nil, %q) = %+v without a required attribute", body, e)
		}
	})
}
