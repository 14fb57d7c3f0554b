package webhook

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// NewFromURL returns a Publisher for the endpoint u, for command-line use:
//
//	https://hooks.example.com/outbox/{event_type}?outbox_timeout=5s
//
// Options are query parameters prefixed "outbox_", removed from the target
// URL: outbox_timeout, outbox_max_body_bytes, outbox_concurrency,
// outbox_allow_private_networks (true/false) and outbox_secret_env, the
// name of the environment variable holding the secrets, space-separated
// (default OUTBOX_WEBHOOK_SECRET). Secrets never come from the URL.
func NewFromURL(u *url.URL) (*Publisher, error) { return NewFromURLEnv(u, os.Getenv) }

// NewFromURLEnv is NewFromURL reading the secrets' variable through getenv.
func NewFromURLEnv(u *url.URL, getenv func(string) string) (*Publisher, error) {
	if u == nil {
		return nil, errors.New("webhook: URL is nil")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("webhook: URL scheme %q: want http or https", u.Scheme)
	}
	target := *u
	q := target.Query()
	cfg := Config{}
	secretEnv := "OUTBOX_WEBHOOK_SECRET"
	var err error
	for key := range q {
		name, ok := strings.CutPrefix(key, "outbox_")
		if !ok {
			continue
		}
		v := q.Get(key)
		switch name {
		case "timeout":
			cfg.Timeout, err = time.ParseDuration(v)
		case "max_body_bytes":
			cfg.MaxBodyBytes, err = strconv.Atoi(v)
		case "concurrency":
			cfg.Concurrency, err = strconv.Atoi(v)
		case "allow_private_networks":
			cfg.AllowPrivateNetworks, err = strconv.ParseBool(v)
		case "secret_env":
			secretEnv = v
		default:
			return nil, fmt.Errorf("webhook: URL option %q is unknown", key)
		}
		if err != nil {
			return nil, fmt.Errorf("webhook: URL option %s: %w", key, err)
		}
		q.Del(key)
	}
	target.RawQuery = q.Encode()
	if len(q) == 0 {
		target.RawQuery = ""
	}
	// Put back the template's braces, which String percent-encodes.
	cfg.URL = strings.NewReplacer("%7B", "{", "%7D", "}", "%7b", "{", "%7d", "}").Replace(target.String())
	cfg.Secrets = strings.Fields(getenv(secretEnv))
	if len(cfg.Secrets) == 0 {
		return nil, fmt.Errorf("webhook: environment variable %s holds no secret", secretEnv)
	}
	return New(cfg)
}
