package sqs_test

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/sqs"
)

// FuzzParseURL: a broker URL either fails with an error naming the package,
// or parses into a Config (a client for the URL's region and endpoint) that
// New accepts or refuses naming the field. The AWS configuration comes from
// empty files and no region in the environment, so the URL decides.
func FuzzParseURL(f *testing.F) {
	dir := f.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE": filepath.Join(dir, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "credentials"),
		"AWS_REGION": "", "AWS_DEFAULT_REGION": "", "AWS_PROFILE": "", "AWS_ENDPOINT_URL": "", "AWS_ENDPOINT_URL_SQS": "",
	} {
		f.Setenv(k, v)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		cfg, err := sqs.ParseURL(u)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "sqs: ") {
				t.Fatalf("ParseURL(%q): error %q does not name the package", raw, err)
			}
			return
		}
		if cfg.Client == nil || cfg.QueueURL != u.Query().Get("queue_url") {
			t.Fatalf("ParseURL(%q) = %+v: want a client and the URL's queue_url", raw, cfg)
		}
		if _, err := sqs.New(cfg); err != nil && !strings.HasPrefix(err.Error(), "sqs: Config.") {
			t.Fatalf("ParseURL(%q) accepted a Config that New refuses without naming the field: %v", raw, err)
		}
	})
}
