package webhook_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/publishertest"
	"github.com/pgoutbox/outbox/webhook"
)

// From a plain INSERT to a receiver built on the CloudEvents SDK's own HTTP
// binding, in both content modes: every event arrives valid, with the row's
// id, type, aggregate id, time, headers and payload, and its Standard
// Webhooks signature checks out.
func TestCloudEventsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, env := range []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured} {
		t.Run(string(env), func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			got := map[string]*event.Event{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				if err := webhook.Verify([]string{testSecret}, r.Header, body, time.Minute); err != nil {
					t.Errorf("signature: %v", err)
					http.Error(w, err.Error(), http.StatusUnauthorized)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				ev, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
				if err != nil {
					t.Errorf("sdk-go cannot read the request: %v (headers %v, body %s)", err, r.Header, body)
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				mu.Lock()
				got[ev.ID()] = ev
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
			}))
			defer srv.Close()
			pub := newPublisher(t, webhook.Config{URL: srv.URL + "/hooks/{event_type}"})
			source, want := publishertest.RelayPlainInserts(t, pub, env)
			mu.Lock()
			defer mu.Unlock()
			if len(got) != len(want) {
				t.Fatalf("received %d events, want %d", len(got), len(want))
			}
			for _, m := range want {
				ev, ok := got[m.ID.String()]
				if !ok {
					t.Errorf("event %s not received", m.ID)
					continue
				}
				if err := publishertest.CheckCloudEvent(ev, m, source, env == outbox.EnvelopeCloudEvents); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
