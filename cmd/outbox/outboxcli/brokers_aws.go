package outboxcli

import (
	"context"
	"io"
	"net/url"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/eventbridge"
	"github.com/pgoutbox/outbox/kinesis"
	"github.com/pgoutbox/outbox/sns"
)

// The AWS destinations besides SQS (brokers_more.go). Their URL names the
// destination itself (a topic ARN, an event bus, a stream), so --topic does
// not apply; they create no topology, so neither does --create-topology.
func init() {
	brokers["sns"] = openSNS
	brokers["eventbridge"] = openEventBridge
	brokers["kinesis"] = openKinesis
}

// openSNS: sns://?topic_arn=...&region=...; see package sns.
func openSNS(_ context.Context, u *url.URL, _ BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := sns.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { return nil }), nil
}

// openEventBridge: eventbridge://?bus=...&source=...&region=...; see
// package eventbridge.
func openEventBridge(_ context.Context, u *url.URL, _ BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := eventbridge.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { return nil }), nil
}

// openKinesis: kinesis://?stream=...&region=...; see package kinesis.
func openKinesis(_ context.Context, u *url.URL, _ BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := kinesis.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { return nil }), nil
}
