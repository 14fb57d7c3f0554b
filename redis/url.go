package redis

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// Query options of a broker URL that configure the publisher; the rest go to
// go-redis's ParseURL.
const (
	optStream        = "stream"
	optMaxLen        = "maxlen"
	optMaxValueSize  = "max_value_size"
	optRequireStream = "require_stream"
	optWaitReplicas  = "wait_replicas"
	optWaitTimeout   = "wait_timeout"
	optTLSCA         = "tls_ca"
	optTLSCert       = "tls_cert"
	optTLSKey        = "tls_key"
)

// ParseURL turns a broker URL, as given to the CLI's --broker, into client
// options and a Config:
//
//	redis://user:pass@host:6379/0?stream=events.{aggregate_type}&maxlen=100000
//
// For TLS use rediss://; tls_ca (a PEM file of private CAs), tls_cert and
// tls_key (a client certificate) complete it. An ACL user goes in the user
// info: rediss://outbox:password@host:6380/0.
//
// See the package documentation for the options; go-redis's own options
// (dial_timeout, pool_size, client_name, ...) are honoured, and anything else
// is an error. The client's retries default to none (max_retries=-1): the
// relay retries instead, without re-sending a half-acknowledged pipeline.
// Errors never contain the URL's password.
func ParseURL(u *url.URL) (*goredis.Options, Config, error) {
	var cfg Config
	if u == nil {
		return nil, cfg, errors.New("redis: URL is nil")
	}
	var tlsCA, tlsCert, tlsKey string
	rest := url.Values{}
	err := brokerurl.Each("redis", u, func(name, v string) string {
		switch name {
		case optStream:
			cfg.Stream = v
		case optMaxLen:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return "want a number of entries, 0 for no trimming"
			}
			cfg.MaxLen = n
		case optMaxValueSize:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "want a positive number of bytes"
			}
			cfg.MaxValueSize = n
		case optRequireStream:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "want true or false"
			}
			cfg.RequireStream = b
		case optWaitReplicas:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return "want a number of replicas"
			}
			cfg.WaitReplicas = n
		case optWaitTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "want a positive Go duration such as 500ms"
			}
			cfg.WaitTimeout = d
		case optTLSCA, optTLSCert, optTLSKey:
			if u.Scheme != "rediss" {
				return "TLS files need a rediss:// URL"
			}
			switch name {
			case optTLSCA:
				tlsCA = v
			case optTLSCert:
				tlsCert = v
			default:
				tlsKey = v
			}
		default:
			rest.Set(name, v)
		}
		return ""
	})
	if err != nil {
		return nil, Config{}, err
	}
	clean := *u
	clean.RawQuery = rest.Encode()
	clean.ForceQuery = false
	opts, err := goredis.ParseURL(clean.String())
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return nil, Config{}, fmt.Errorf("redis: URL %s: %w", u.Redacted(), err)
	}
	if !rest.Has("max_retries") {
		opts.MaxRetries = -1
	}
	if opts.TLSConfig != nil {
		if err := brokerurl.AddTLSFiles(opts.TLSConfig, tlsCA, tlsCert, tlsKey); err != nil {
			return nil, Config{}, fmt.Errorf("redis: URL %s: %w", u.Redacted(), err)
		}
	}
	return opts, cfg, nil
}

// NewFromURL parses u (see ParseURL), creates a client and returns a
// Publisher that owns it: Close closes the client. It does not connect; the
// first Publish or Health does.
func NewFromURL(u *url.URL) (*Publisher, error) {
	opts, cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	client := goredis.NewClient(opts)
	p, err := New(client, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}
