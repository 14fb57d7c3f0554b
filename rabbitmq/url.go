package rabbitmq

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/brokerurl"
)

// Query options of a broker URL that configure the publisher; they are
// removed before the URL is handed to amqp091.
const (
	optExchange        = "exchange"
	optRoutingKey      = "routing_key"
	optDeclareExchange = "declare_exchange"
	optMaxMessageSize  = "max_message_size"
	optDialTimeout     = "dial_timeout"
	optConnectionName  = "connection_name"
)

// amqp091Options are the query options amqp091.ParseURI itself reads; they
// stay in the URL.
var amqp091Options = []string{
	"heartbeat", "connection_timeout", "channel_max", "auth_mechanism",
	"certfile", "keyfile", "cacertfile", "server_name_indication",
}

// ParseURL turns a broker URL, as given to the CLI's --broker, into a Config:
//
//	amqp://user:pass@host:5672/vhost?exchange=events&routing_key=orders.{event_type}
//
// See the package documentation for the options. An unknown option is an
// error (a typo would otherwise be silently ignored). Errors never contain
// the URL's password.
func ParseURL(u *url.URL) (Config, error) {
	var cfg Config
	if u == nil {
		return cfg, fmt.Errorf("rabbitmq: URL is nil")
	}
	if u.Scheme != "amqp" && u.Scheme != "amqps" {
		return cfg, fmt.Errorf("rabbitmq: URL %s: scheme %q, want amqp or amqps", u.Redacted(), u.Scheme)
	}
	rest := url.Values{}
	err := brokerurl.Each("rabbitmq", u, func(name, v string) string {
		switch name {
		case optExchange:
			cfg.Exchange = v
		case optRoutingKey:
			cfg.RoutingKey = v
		case optDeclareExchange:
			cfg.DeclareExchange = v
		case optConnectionName:
			cfg.ConnectionName = v
		case optMaxMessageSize:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return "want a positive number of bytes"
			}
			cfg.MaxMessageSize = n
		case optDialTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "want a positive Go duration such as 5s"
			}
			cfg.DialTimeout = d
		default:
			if !slices.Contains(amqp091Options, name) {
				return "unknown option (want " + strings.Join(append([]string{
					optExchange, optRoutingKey, optDeclareExchange, optMaxMessageSize, optDialTimeout, optConnectionName,
				}, amqp091Options...), ", ") + ")"
			}
			if name == "certfile" || name == "keyfile" || name == "cacertfile" {
				if u.Scheme != "amqps" {
					return "TLS files need an amqps:// URL"
				}
				if err := brokerurl.Readable(v); err != nil {
					return err.Error()
				}
			}
			rest.Set(name, v)
		}
		return ""
	})
	if err != nil {
		return Config{}, err
	}
	if (rest.Has("certfile")) != (rest.Has("keyfile")) {
		return Config{}, fmt.Errorf("rabbitmq: URL %s: options certfile and keyfile go together", u.Redacted())
	}
	clean := *u
	clean.RawQuery = rest.Encode()
	clean.ForceQuery = false
	cfg.URL = clean.String()
	return cfg, nil
}

// NewFromURL is New(ParseURL(u)).
func NewFromURL(u *url.URL) (*Publisher, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}
