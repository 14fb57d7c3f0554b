package rabbitmq_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/rabbitmq"
)

// canary replaces a fuzzed URL's password: errors must never show it.
const canary = "Pw-CANARY-3f9c"

// sandboxFiles points the URL's file options into dir (which holds
// testcerts' ca.pem, client.pem, client-key.pem...): by their base name, so
// a fuzzed path reaches a real file or a missing one, never a device or a
// FIFO that would block the open.
func sandboxFiles(u *url.URL, dir string, names ...string) {
	q := u.Query()
	for _, n := range names {
		for i, v := range q[n] {
			if v != "" {
				q[n][i] = filepath.Join(dir, filepath.Base(filepath.Clean("/"+v)))
			}
		}
	}
	u.RawQuery = q.Encode()
}

// FuzzParseURL: a broker URL either fails with an error naming the package,
// never the password, or parses into a Config whose URL keeps only
// amqp091's own options and that New accepts or refuses naming the field.
func FuzzParseURL(f *testing.F) {
	dir := f.TempDir()
	testcerts.Write(f, dir)
	ours := []string{"exchange", "routing_key", "declare_exchange", "max_message_size", "dial_timeout", "connection_name"}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || strings.Contains(raw, "CANARY") {
			return
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), canary)
		}
		sandboxFiles(u, dir, "certfile", "keyfile", "cacertfile")
		cfg, err := rabbitmq.ParseURL(u)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "rabbitmq: ") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q): error %q: want it to start with rabbitmq: and never show the password", raw, err)
			}
			return
		}
		cu, err := url.Parse(cfg.URL)
		if err != nil {
			t.Fatalf("ParseURL(%q): Config.URL %q does not parse: %v", raw, cfg.URL, err)
		}
		for _, o := range ours {
			if cu.Query().Has(o) {
				t.Fatalf("ParseURL(%q): Config.URL %q still holds option %s", raw, cfg.URL, o)
			}
		}
		if cfg.Exchange != u.Query().Get("exchange") || cfg.RoutingKey != u.Query().Get("routing_key") {
			t.Fatalf("ParseURL(%q) = %+v: want the URL's exchange and routing key", raw, cfg)
		}
		p, err := rabbitmq.New(cfg) // connects on the first publish only
		if err != nil {
			if !strings.HasPrefix(err.Error(), "rabbitmq: Config.") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q) accepted a Config that New refuses without naming the field: %v", raw, err)
			}
			return
		}
		_ = p.Close()
	})
}
