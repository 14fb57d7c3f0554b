package inbox_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
)

func TestMessageFromHeaders(t *testing.T) {
	t.Parallel()
	id := uuid.Must(uuid.NewV7())
	created := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	src := outbox.Message{ID: id, EventType: "order.created", AggregateType: "order", AggregateID: "42",
		CreatedAt: created, Headers: map[string]string{"traceparent": "00-abc"}}
	h := src.StandardHeaders() // what every publisher sends
	m, err := inbox.MessageFromHeaders(h, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != id || m.EventType != "order.created" || m.AggregateType != "order" || m.AggregateID != "42" ||
		!m.CreatedAt.Equal(created) || string(m.Payload) != `{}` || m.Header("traceparent") != "00-abc" {
		t.Errorf("got %+v", m)
	}

	// HTTP canonicalizes header names.
	hh := http.Header{}
	for k, v := range h {
		hh.Set(k, v)
	}
	flat := map[string]string{}
	for k := range hh {
		flat[k] = hh.Get(k)
	}
	m, err = inbox.MessageFromHeaders(flat, nil)
	if err != nil || m.ID != id || m.AggregateID != "42" || m.Header("TraceParent") != "00-abc" {
		t.Errorf("canonicalized headers: %+v, %v", m, err)
	}
}

func TestMessageFromHeadersErrors(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]map[string]string{
		"no headers":  nil,
		"missing id":  {outbox.HeaderEventType: "order.created"},
		"empty id":    {outbox.HeaderEventID: ""},
		"invalid id":  {outbox.HeaderEventID: "42"},
		"nil uuid":    {outbox.HeaderEventID: uuid.Nil.String()},
		"bad created": {outbox.HeaderEventID: uuid.NewString(), outbox.HeaderCreatedAt: "yesterday"},
	} {
		_, err := inbox.MessageFromHeaders(h, nil)
		if !errors.Is(err, inbox.ErrInvalidMessage) {
			t.Errorf("%s: err = %v, want ErrInvalidMessage", name, err)
		}
	}
}

func FuzzMessageFromHeaders(f *testing.F) {
	f.Add(uuid.NewString(), "2026-03-01T12:00:00Z")
	f.Add("", "")
	f.Add("{urn:uuid:bad}", "2026-13-01")
	f.Fuzz(func(t *testing.T, id, created string) {
		m, err := inbox.MessageFromHeaders(map[string]string{outbox.HeaderEventID: id, outbox.HeaderCreatedAt: created}, nil)
		if err != nil {
			if !errors.Is(err, inbox.ErrInvalidMessage) {
				t.Fatalf("error %v does not wrap ErrInvalidMessage", err)
			}
			return
		}
		if m.ID == uuid.Nil {
			t.Fatal("accepted a message without an id")
		}
	})
}

// TestMessageReplayHeaders: the replay headers a replay's copies carry
// become ReplayID and ReplayOf, matched case-insensitively; a malformed one
// is left zero (the event is intact); a live event has neither.
func TestMessageReplayHeaders(t *testing.T) {
	t.Parallel()
	id, of, rid := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	src := outbox.Message{ID: id, EventType: "order.created", AggregateType: "order", AggregateID: "42",
		Headers: map[string]string{outbox.HeaderReplayOf: of.String(), outbox.HeaderReplayID: rid.String()}}
	m, err := inbox.MessageFromHeaders(src.StandardHeaders(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.ReplayOf != of || m.ReplayID != rid || !m.IsReplay() {
		t.Errorf("got ReplayOf %s ReplayID %s, want %s %s", m.ReplayOf, m.ReplayID, of, rid)
	}
	h := http.Header{}
	for k, v := range src.StandardHeaders() {
		h.Set(k, v)
	}
	flat := map[string]string{}
	for k := range h {
		flat[k] = h.Get(k)
	}
	if m, err := inbox.MessageFromHeaders(flat, nil); err != nil || m.ReplayOf != of {
		t.Errorf("canonicalized headers: %+v, %v", m, err)
	}
	live := outbox.Message{ID: id, EventType: "x", AggregateType: "x", AggregateID: "x"}
	if m, err := inbox.MessageFromHeaders(live.StandardHeaders(), nil); err != nil || m.IsReplay() || m.ReplayOf != uuid.Nil {
		t.Errorf("live message: %+v, %v", m, err)
	}
	bad := src.StandardHeaders()
	bad[outbox.HeaderReplayOf] = "nope"
	if m, err := inbox.MessageFromHeaders(bad, nil); err != nil || m.ReplayOf != uuid.Nil || m.ReplayID != rid {
		t.Errorf("malformed replay-of: %+v, %v; want the message, ReplayOf zero", m, err)
	}
}
