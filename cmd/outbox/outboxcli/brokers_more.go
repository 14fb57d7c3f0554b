package outboxcli

import (
	"context"
	"io"
	"net/url"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/rabbitmq"
	"github.com/pgoutbox/outbox/redis"
	"github.com/pgoutbox/outbox/sqs"
	"github.com/pgoutbox/outbox/webhook"
)

func init() {
	brokers["kafka"] = openKafka
	brokers["amqp"] = openRabbitMQ
	brokers["amqps"] = openRabbitMQ
	brokers["redis"] = openRedis
	brokers["rediss"] = openRedis
	brokers["sqs"] = openSQS
	brokers["http"] = openWebhook
	brokers["https"] = openWebhook
}

// withOption returns u with the query option param set to value (--topic,
// a topology option), unless the URL sets that option itself (the URL wins:
// it is the more specific) or value is empty.
func withOption(u *url.URL, param, value string) *url.URL {
	q := u.Query()
	if q.Has(param) || value == "" {
		return u
	}
	c := *u
	q.Set(param, value)
	c.RawQuery = q.Encode()
	return &c
}

// openKafka: kafka://host:9092,host2:9092?topic=...; see package kafka
// (sasl_password_env= reads the SASL password, an Azure Event Hubs
// connection string say, from the environment).
func openKafka(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	u = withOption(u, "topic", o.Topic)
	if o.CreateTopology {
		u = withOption(u, "create_topics", "true")
	}
	pub, err := kafka.NewFromURLEnv(u, o.Getenv)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { pub.Close(); return nil }), nil
}

// openRabbitMQ: amqp://user:pw@host:5672/vhost?exchange=...&routing_key=...;
// --topic is the routing key. See package rabbitmq.
func openRabbitMQ(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	u = withOption(u, "routing_key", o.Topic)
	if o.CreateTopology && u.Query().Get("exchange") != "" {
		u = withOption(u, "declare_exchange", "topic")
	}
	pub, err := rabbitmq.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, pub, nil
}

// openRedis: redis://host:6379/0?stream=...&maxlen=...; --topic is the
// stream name. See package redis.
func openRedis(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := redis.NewFromURL(withOption(u, "stream", o.Topic))
	if err != nil {
		return nil, nil, err
	}
	return pub, pub, nil
}

// openSQS: sqs://?queue_url=...&region=...; the queue URL (a template) is the
// destination, so --topic does not apply. See package sqs.
func openSQS(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	if o.CreateTopology {
		u = withOption(u, "create_queues", "true")
	}
	pub, err := sqs.NewFromURL(u)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { return nil }), nil
}

// openWebhook: https://hooks.example.com/path/{event_type}?outbox_timeout=5s;
// the URL (a template) is the destination and the signing secrets come from
// OUTBOX_WEBHOOK_SECRET. See package webhook.
func openWebhook(_ context.Context, u *url.URL, o BrokerOptions) (outbox.Publisher, io.Closer, error) {
	pub, err := webhook.NewFromURLEnv(u, o.Getenv)
	if err != nil {
		return nil, nil, err
	}
	return pub, closerFunc(func() error { pub.Close(); return nil }), nil
}
