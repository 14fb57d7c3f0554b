package httpinbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/httpinbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/webhook"
	"github.com/pgoutbox/outbox/webhook/signature"
)

const secret = "whsec_c2VjcmV0LWtleS1mb3ItdGVzdHM=" // base64("secret-key-for-tests")

// env is one test's consumer (inboxtest.Env), a receiving server running the
// Handler, and the outbox's own webhook publisher sending to it.
type env struct {
	*inboxtest.Env
	t   *testing.T
	srv *httptest.Server
	h   *httpinbox.Handler
	pub *webhook.Publisher

	mu sync.Mutex
	// wrap, when set, stands between the server and the Handler.
	wrap func(w http.ResponseWriter, r *http.Request, next http.Handler)
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{Env: inboxtest.Setup(t), t: t}
	var err error
	e.h, err = httpinbox.New(e.Processor(), httpinbox.Config{Secrets: []string{"old-raw-secret", secret}})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		wrap := e.wrap
		e.mu.Unlock()
		if wrap != nil {
			wrap(w, r, e.h)
			return
		}
		e.h.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	e.pub, err = webhook.New(webhook.Config{URL: e.srv.URL + "/hooks/{event_type}", Secrets: []string{secret}, AllowPrivateNetworks: true})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var ctx = inboxtest.Ctx

func event() *outbox.Message {
	return &outbox.Message{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: "42",
		EventType: "order.created", Payload: []byte(`{"order_id":"42"}`), CreatedAt: time.Now(),
		Headers: map[string]string{"tenant": "acme"}}
}

// signed builds a request as a Standard Webhooks sender would.
func signed(t *testing.T, url, id string, ts time.Time, body []byte, secrets ...string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	sig, err := webhook.Signature(secrets, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(webhook.HeaderID, id)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, sig)
	return req
}

func (e *env) serve(req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	return rec
}

// The webhook publisher's deliveries, retries included, are processed once.
func TestDeliveredAndRetriedOnce(t *testing.T) {
	e := setup(t)
	var got inbox.Message
	var unsigned http.Header
	e.SetFail(func(ctx context.Context, m inbox.Message) error {
		got, unsigned = m, httpinbox.UnsignedHeader(ctx)
		return nil
	})
	m := event()
	for i := range 3 { // the relay's retries send the same event again
		if err := e.pub.Publish(ctx(t), m); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if o := e.Outcomes(m.ID); strings.Join(o, " ") != "processed duplicate duplicate" {
		t.Errorf("outcomes %v, want [processed duplicate duplicate]", o)
	}
	if n := e.Effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
	// The message holds what the signature covers; the rest is apart.
	if got.ID != m.ID || string(got.Payload) != string(m.Payload) || got.Header(webhook.HeaderID) != m.ID.String() {
		t.Errorf("handler got %+v, want the signed id and body", got)
	}
	if got.EventType != "" || got.AggregateType != "" || got.AggregateID != "" || !got.CreatedAt.IsZero() || len(got.Headers) != 2 {
		t.Errorf("handler got unsigned metadata in the message: %+v", got)
	}
	if unsigned.Get(outbox.HeaderAggregateID) != "42" || unsigned.Get(webhook.HeaderRowPrefix+"tenant") != "acme" ||
		unsigned.Get(webhook.HeaderSignature) != "" {
		t.Errorf("UnsignedHeader = %v, want the outbox-* and row headers without the signature ones", unsigned)
	}
}

// A handler error answers 500: nothing is recorded, the sender's retry (a
// transient error for the relay) processes it.
func TestHandlerErrorAnswers500AndRetrySucceeds(t *testing.T) {
	e := setup(t)
	e.SetFail(func(context.Context, inbox.Message) error { return errors.New("ledger locked") })
	m := event()
	err := e.pub.Publish(ctx(t), m)
	if err == nil || outbox.Classify(err) != outbox.ClassTransient || !strings.Contains(err.Error(), "500") {
		t.Fatalf("publish = %v (%s), want a transient 500", err, outbox.Classify(err))
	}
	if n := e.Effects(m.ID); n != 0 {
		t.Fatalf("effects after a failed handler = %d", n)
	}
	e.SetFail(nil)
	if err := e.pub.Publish(ctx(t), m); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if o := e.Outcomes(m.ID); strings.Join(o, " ") != "error processed" {
		t.Errorf("outcomes %v", o)
	}
	if n := e.Effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

// The receiver commits, then the connection drops before the sender reads
// the 204 (a crash, a proxy timeout). The sender retries; the inbox answers
// 204 as a duplicate without running the handler again.
func TestCrashBetweenCommitAndResponse(t *testing.T) {
	e := setup(t)
	var dropped atomic.Bool
	e.wrap = func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if dropped.CompareAndSwap(false, true) {
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r) // processed and committed
			if rec.Code != http.StatusNoContent {
				t.Errorf("first delivery: %d", rec.Code)
			}
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close() // no response ever reaches the sender
			return
		}
		next.ServeHTTP(w, r)
	}
	m := event()
	if err := e.pub.Publish(ctx(t), m); err == nil {
		t.Fatal("publish succeeded although the response was dropped")
	}
	if err := e.pub.Publish(ctx(t), m); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if o := e.Outcomes(m.ID); strings.Join(o, " ") != "processed duplicate" {
		t.Errorf("outcomes %v, want [processed duplicate]", o)
	}
	if n := e.Effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

func TestRefusals(t *testing.T) {
	e := setup(t)
	id := uuid.Must(uuid.NewV7()).String()
	body := []byte(`{"order_id":"42"}`)
	now := time.Now()
	url := e.srv.URL + "/hooks"
	for _, tc := range []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{"valid, second secret of a rotation", func() *http.Request { return signed(t, url, id, now, body, "old-raw-secret") }, http.StatusNoContent},
		{"duplicate", func() *http.Request { return signed(t, url, id, now, body, secret) }, http.StatusNoContent},
		{"wrong secret", func() *http.Request { return signed(t, url, uuid.NewString(), now, body, "whsec_d3Jvbmc=") }, http.StatusUnauthorized},
		{"no signature headers", func() *http.Request {
			return httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		}, http.StatusUnauthorized},
		{"tampered body", func() *http.Request {
			r := signed(t, url, uuid.NewString(), now, body, secret)
			r.Body = io.NopCloser(strings.NewReader(`{"order_id":"43"}`))
			return r
		}, http.StatusUnauthorized},
		{"tampered webhook-id (replay to dodge dedup)", func() *http.Request {
			r := signed(t, url, id, now, body, secret)
			r.Header.Set(webhook.HeaderID, uuid.NewString())
			return r
		}, http.StatusUnauthorized},
		{"timestamp too old (replay)", func() *http.Request {
			return signed(t, url, uuid.NewString(), now.Add(-10*time.Minute), body, secret)
		}, http.StatusUnauthorized},
		{"signed, id not a UUID", func() *http.Request { return signed(t, url, "msg_42", now, body, secret) }, http.StatusBadRequest},
		{"signed, outbox-event-id disagrees (unsigned header)", func() *http.Request {
			r := signed(t, url, uuid.NewString(), now, body, secret)
			r.Header.Set(outbox.HeaderEventID, uuid.NewString())
			return r
		}, http.StatusBadRequest},
		{"GET", func() *http.Request { return httptest.NewRequest(http.MethodGet, url, nil) }, http.StatusMethodNotAllowed},
		{"too large", func() *http.Request {
			big := []byte(`"` + strings.Repeat("x", httpinbox.DefaultMaxBodyBytes) + `"`)
			return signed(t, url, uuid.NewString(), now, big, secret)
		}, http.StatusRequestEntityTooLarge},
	} {
		if rec := e.serve(tc.req()); rec.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, rec.Code, strings.TrimSpace(rec.Body.String()), tc.want)
		}
	}
	if n := e.Calls(); n != 1 {
		t.Errorf("handler calls = %d, want 1 (only the first valid request)", n)
	}
}

// TestConfigValidation: New refuses a bad field with a
// *outboxtype.ConfigError naming httpinbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   httpinbox.Config
		field string
	}{
		{httpinbox.Config{}, "Secrets"},
		{httpinbox.Config{Secrets: []string{""}}, "Secrets"},
		{httpinbox.Config{Secrets: []string{"whsec_!!!"}}, "Secrets"},
		{httpinbox.Config{Secrets: []string{"s"}, Tolerance: -1}, "Tolerance"},
		{httpinbox.Config{Secrets: []string{"s"}, MaxBodyBytes: -1}, "MaxBodyBytes"},
	} {
		_, err := httpinbox.New(proc, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "httpinbox.Config", tc.field)
		if err != nil && strings.Contains(err.Error(), "!!!") {
			t.Errorf("error %q shows the secret", err)
		}
	}
	if _, err := httpinbox.New(nil, httpinbox.Config{Secrets: []string{"s"}}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxBodyBytes":        httpinbox.DefaultMaxBodyBytes,
		"signature.DefaultTolerance": signature.DefaultTolerance,
	})
}

// A party on the path rewrites every unsigned header of a genuine signed
// request (the signature still verifies): nothing it wrote reaches the
// Message the handler sees.
func TestTamperedHeadersNeverReachTheMessage(t *testing.T) {
	e := setup(t)
	e.wrap = func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		r.Header.Set(outbox.HeaderEventType, "order.refunded")
		r.Header.Set(outbox.HeaderAggregateType, "account")
		r.Header.Set(outbox.HeaderAggregateID, "tampered")
		r.Header.Set(outbox.HeaderCreatedAt, "2001-01-01T00:00:00Z")
		r.Header.Set(webhook.HeaderRowPrefix+"tenant", "evil")
		r.Header.Set("tenant", "evil")
		next.ServeHTTP(w, r)
	}
	var got inbox.Message
	var unsigned http.Header
	e.SetFail(func(ctx context.Context, m inbox.Message) error {
		got, unsigned = m, httpinbox.UnsignedHeader(ctx)
		return nil
	})
	m := event()
	if err := e.pub.Publish(ctx(t), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if e.Calls() != 1 {
		t.Fatalf("handler calls = %d, want 1", e.Calls())
	}
	for field, v := range map[string]string{
		"EventType": got.EventType, "AggregateType": got.AggregateType, "AggregateID": got.AggregateID,
		"CreatedAt": got.CreatedAt.Format(time.RFC3339), "header tenant": got.Header("tenant"),
		"header outbox-header-tenant": got.Header(webhook.HeaderRowPrefix + "tenant"),
	} {
		if strings.Contains(v, "evil") || strings.Contains(v, "tampered") || strings.Contains(v, "refunded") ||
			strings.Contains(v, "account") || strings.HasPrefix(v, "2001") {
			t.Errorf("the handler's message carries a tampered %s: %q", field, v)
		}
	}
	if got.ID != m.ID || string(got.Payload) != string(m.Payload) {
		t.Errorf("handler got id %s body %s, want the signed %s %s", got.ID, got.Payload, m.ID, m.Payload)
	}
	// Still visible, apart, as what they are.
	if unsigned.Get(outbox.HeaderAggregateID) != "tampered" {
		t.Errorf("UnsignedHeader lost the request's headers: %v", unsigned)
	}
}

// The trace context the publisher sends among the row's headers is the
// parent of the handler's span, although it is not part of the message.
func TestTraceContextContinues(t *testing.T) {
	e := setup(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	var got trace.TraceID
	e.SetFail(func(ctx context.Context, m inbox.Message) error {
		got = trace.SpanContextFromContext(ctx).TraceID()
		return nil
	})
	m := event()
	m.Headers["traceparent"] = "00-" + traceID + "-00f067aa0ba902b7-01"
	if err := e.pub.Publish(ctx(t), m); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if got.String() != traceID {
		t.Errorf("handler's trace id = %s, want %s from Outbox-Header-Traceparent", got, traceID)
	}
}
