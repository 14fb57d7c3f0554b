package webhook_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/webhook"
)

// FuzzNewFromURL: an endpoint URL either fails with an error naming the
// package, never the secret, or makes a publisher whose requests go to an
// http(s) URL without the outbox_ options, with the event's values kept
// within their path segment or query value.
func FuzzNewFromURL(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		p, err := webhook.NewFromURLEnv(u, func(string) string { return secret })
		if err != nil {
			if !strings.HasPrefix(err.Error(), "webhook: ") || strings.Contains(err.Error(), "MfKQ9r8G") {
				t.Fatalf("NewFromURL(%q): error %q: want it to start with webhook: and never show the secret", raw, err)
			}
			return
		}
		defer p.Close()
		msg := &outbox.Message{ID: uuid.New(), EventType: "a/b?c&d#e", AggregateType: "x y", AggregateID: "1%2"}
		target, err := url.Parse(p.URL(msg))
		if err != nil {
			t.Fatalf("NewFromURL(%q): the request URL %q does not parse: %v", raw, p.URL(msg), err)
		}
		if target.Scheme != "http" && target.Scheme != "https" || target.Host == "" {
			t.Fatalf("NewFromURL(%q): request URL %q", raw, target)
		}
		for k := range target.Query() {
			if strings.HasPrefix(k, "outbox_") {
				t.Fatalf("NewFromURL(%q): request URL %q keeps option %s", raw, target, k)
			}
		}
		if d := p.Destination(msg); d != target.Scheme+"://"+target.Host {
			t.Fatalf("NewFromURL(%q): Destination %q, want scheme and host only", raw, d)
		}
	})
}
