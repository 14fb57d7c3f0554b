package nats_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// canary replaces a fuzzed URL's password: errors must never show it.
const canary = "Pw-CANARY-3f9c"

// FuzzParseURL: a broker URL either fails with an error naming the package,
// never the password, or parses into a DialConfig without the options and a
// Config that New accepts or refuses naming the field.
func FuzzParseURL(f *testing.F) {
	nc := testnats.Conn(f) // New needs a connection; it sends nothing on it
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || strings.Contains(raw, "CANARY") {
			return
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), canary)
		}
		dc, cfg, err := outboxnats.ParseURL(u)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "nats: ") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q): error %q: want it to start with nats: and never show the password", raw, err)
			}
			return
		}
		if d, err := url.Parse(dc.URL); err != nil || d.RawQuery != "" || d.Host != u.Host {
			t.Fatalf("ParseURL(%q): DialConfig.URL %q: want the URL without its options (%v)", raw, dc.URL, err)
		}
		if q := u.Query(); cfg.Subject != q.Get("subject") || cfg.EnsureStream != q.Get("ensure_stream") {
			t.Fatalf("ParseURL(%q): Config %+v does not hold the URL's options", raw, cfg)
		}
		p, err := outboxnats.New(nc, cfg)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "nats: Config.") {
				t.Fatalf("ParseURL(%q) accepted a Config that New refuses without naming the field: %v", raw, err)
			}
			return
		}
		_ = p.Close()
	})
}
