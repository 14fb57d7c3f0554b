package redis_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox/internal/testcerts"
	"github.com/pgoutbox/outbox/redis"
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
// never the password, or parses into go-redis options and a Config that New
// accepts or refuses naming the field.
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
		opts, cfg, err := redis.ParseURL(u)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "redis: ") || strings.Contains(err.Error(), canary) {
				t.Fatalf("ParseURL(%q): error %q: want it to start with redis: and never show the password", raw, err)
			}
			return
		}
		if opts == nil || cfg.Stream != u.Query().Get("stream") {
			t.Fatalf("ParseURL(%q) = %v, %+v: want options and the URL's stream", raw, opts, cfg)
		}
		client := goredis.NewClient(opts) // connects on the first command only
		defer client.Close()
		if _, err := redis.New(client, cfg); err != nil &&
			(!strings.HasPrefix(err.Error(), "redis: Config.") || strings.Contains(err.Error(), canary)) {
			t.Fatalf("ParseURL(%q) accepted a Config that New refuses without naming the field: %v", raw, err)
		}
	})
}
