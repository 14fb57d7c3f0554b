package outboxcli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
	"strings"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/jsonl"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// BrokerOptions is what every broker constructor receives besides its URL.
type BrokerOptions struct {
	// Topic is the --topic template, already validated with
	// outbox.ParseTopicTemplate: the subject, topic, routing key or queue of
	// each message.
	Topic string
	// Logger is the relay's logger, for connection events.
	Logger *slog.Logger
	// Stdout is the command's standard output (the stdout broker writes
	// there).
	Stdout io.Writer
	// ClientName identifies the relay to brokers that show client names.
	ClientName string
	// Getenv reads the environment (secrets a broker takes from variables).
	Getenv func(string) string
	// CreateTopology asks the publisher to create its destination when it
	// is missing, opting in: a JetStream stream named StreamName capturing
	// the subject's first token (nats ensure_stream=), Kafka topics
	// (create_topics=true), the RabbitMQ exchange named in the URL, as a
	// durable topic exchange (declare_exchange=topic), SQS queues
	// (create_queues=true), Pub/Sub topics (create_topics=true). Redis
	// creates streams anyway unless the URL says require_stream=true;
	// webhook endpoints and MQTT sessions are not created. What the URL
	// says itself wins.
	CreateTopology bool
	// StreamName names the JetStream stream CreateTopology creates. Default
	// "OUTBOX".
	StreamName string
}

// BrokerFunc connects to the broker at u and returns its publisher and what
// to close once the relay has stopped. It must not block on an unreachable
// broker: the relay starts anyway, reports not ready, and backs off until the
// broker answers. Errors are about u or the options, never transient.
type BrokerFunc func(ctx context.Context, u *url.URL, opts BrokerOptions) (outbox.Publisher, io.Closer, error)

// brokers maps a --broker URL scheme to its constructor. Adding a broker is
// a constructor in brokers_<name>.go and one line here.
var brokers = map[string]BrokerFunc{
	"nats":   openNATS,
	"tls":    openNATS, // NATS over TLS, as nats.go spells it
	"stdout": openStdout,
}

// brokerSchemes lists the registered schemes, for error messages and help.
func brokerSchemes() string {
	s := make([]string, 0, len(brokers))
	for k := range brokers {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// parseBroker validates a --broker value and returns its URL and constructor.
func parseBroker(raw string) (*url.URL, BrokerFunc, error) {
	if raw == "" {
		return nil, nil, fmt.Errorf("required: a URL whose scheme selects the broker (%s), e.g. nats://127.0.0.1:4222", brokerSchemes())
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("not a URL: %v", redactDSN(err.Error()))
	}
	if u.Scheme == "" {
		return nil, nil, fmt.Errorf("%q has no scheme (known: %s), e.g. nats://127.0.0.1:4222", displayURL(u), brokerSchemes())
	}
	open, ok := brokers[strings.ToLower(u.Scheme)]
	if !ok {
		return nil, nil, fmt.Errorf("unknown scheme %q in %q (known: %s)", u.Scheme, displayURL(u), brokerSchemes())
	}
	return u, open, nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// openNATS publishes to NATS JetStream; see nats.ParseURL for the URL's
// options (credentials, TLS files, ensure_stream). --topic is the subject
// unless the URL sets subject=. The connection retries forever: a broker
// outage makes the relay back off, not exit.
func openNATS(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	dc, cfg, err := outboxnats.ParseURL(withOption(u, "subject", o.Topic))
	if err != nil {
		return nil, nil, err
	}
	if o.CreateTopology && cfg.EnsureStream == "" {
		cfg.EnsureStream = cmp.Or(o.StreamName, "OUTBOX")
	}
	dc.Name, dc.Logger = o.ClientName, o.Logger
	pub, err := outboxnats.Dial(dc, cfg)
	if err != nil {
		return nil, nil, err
	}
	return pub, pub, nil
}

// openStdout writes each event as one JSON line on standard output, for
// debugging: a write counts as a confirmation, so it offers no durability.
func openStdout(_ context.Context, _ *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := jsonl.New(o.Stdout, jsonl.Config{Topic: o.Topic})
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { return nil }), nil
}
