package kafka_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/kafka"
)

// canary replaces a fuzzed URL's password: errors must never show it.
const canary = "Pw-CANARY-3f9c"

// sandboxFiles points the URL's file options into dir (which holds
// testcerts' ca.pem, client.pem, client-key.pem...): by their base name, so
// a fuzzed path reaches a real PEM file or a missing one, never /dev/zero.
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
// never the password, or parses into a Config that New accepts or refuses
// naming the field.
func FuzzParseURL(f *testing.F) {
	dir := f.TempDir()
	testcerts.Write(f, dir)
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || strings.Contains(raw, "CANARY") {
			return
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), canary)
		}
		sandboxFiles(u, dir, "tls_ca", "tls_cert", "tls_key")
		cfg, err := kafka.ParseURL(u)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kafka: ") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q): error %q: want it to start with kafka: and never show the password", raw, err)
			}
			return
		}
		if len(cfg.Brokers) == 0 || cfg.Topic != u.Query().Get("topic") {
			t.Fatalf("ParseURL(%q) = %+v: want the brokers and the topic of the URL", raw, cfg)
		}
		p, err := kafka.New(cfg) // no connection until the first produce
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kafka: Config.") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q) accepted a Config that New refuses without naming the field: %v", raw, err)
			}
			return
		}
		p.Close()
	})
}
