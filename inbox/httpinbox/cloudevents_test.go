package httpinbox_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/webhook"
)

// A structured CloudEvent is signed whole: the handler gets its type,
// aggregate, time and headers, and its data as the payload. A binary one
// keeps the rule of the outbox-* headers: only the signed id and body.
func TestCloudEvents(t *testing.T) {
	e := setup(t)
	var got inbox.Message
	e.SetFail(func(_ context.Context, m inbox.Message) error { got = m; return nil })

	m := event()
	m.Envelope = outbox.EnvelopeCloudEventsStructured
	for i := range 2 {
		if err := e.pub.Publish(ctx(t), m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if o := e.Outcomes(m.ID); strings.Join(o, " ") != "processed duplicate" {
		t.Errorf("outcomes %v, want [processed duplicate]", o)
	}
	if got.ID != m.ID || got.EventType != m.EventType || got.AggregateType != "order" || got.AggregateID != "42" ||
		!got.CreatedAt.Equal(m.CreatedAt) || string(got.Payload) != string(m.Payload) || got.Header("tenant") != "acme" {
		t.Errorf("structured: handler got %+v", got)
	}

	m = event()
	m.Envelope = outbox.EnvelopeCloudEvents
	if err := e.pub.Publish(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || string(got.Payload) != string(m.Payload) || got.EventType != "" || got.Header("tenant") != "" {
		t.Errorf("binary: handler got %+v, want the signed id and body only", got)
	}

	// A ce-id or a structured id that is not webhook-id is a broken sender.
	other := event()
	other.Envelope = outbox.EnvelopeCloudEventsStructured
	body, err := other.StructuredCloudEvent()
	if err != nil {
		t.Fatal(err)
	}
	req := signed(t, e.srv.URL+"/hooks/x", m.ID.String(), time.Now(), body, secret)
	req.Header.Set("Content-Type", "application/cloudevents+json")
	if rec := e.serve(req); rec.Code != http.StatusBadRequest {
		t.Errorf("structured id other than webhook-id: status %d, want 400", rec.Code)
	}
	req = signed(t, e.srv.URL+"/hooks/x", m.ID.String(), time.Now(), []byte(`{}`), secret)
	req.Header.Set(webhook.HeaderCloudEventsPrefix+"id", other.ID.String())
	if rec := e.serve(req); rec.Code != http.StatusBadRequest {
		t.Errorf("ce-id other than webhook-id: status %d, want 400", rec.Code)
	}
}
