package rabbitmq

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
)

// Errors a publish can fail with, besides connection errors. Test with
// errors.Is.
var (
	// ErrUnroutable: the broker returned the message (basic.return, 312
	// NO_ROUTE) because no queue is bound for its routing key. It is
	// wrapped as unavailable: the destination is missing, not the message
	// wrong, so the relay backs off and keeps the event until an operator
	// binds a queue.
	ErrUnroutable = errors.New("rabbitmq: message returned unroutable")
	// ErrNacked: the broker refused the message (basic.nack), for example a
	// queue at its x-max-length with x-overflow=reject-publish. It is
	// wrapped as unavailable: a full queue refuses every message alike.
	ErrNacked = errors.New("rabbitmq: message nacked by the broker")
	// ErrClosed: the Publisher was closed. It is wrapped as unavailable so a
	// relay still running during shutdown burns no attempt.
	ErrClosed = errors.New("rabbitmq: publisher closed")
)

// unroutable is the error of a message the broker returned: no queue is
// bound for its routing key.
func unroutable(ret *amqp.Return) error {
	fix := fmt.Sprintf("`rabbitmqadmin declare queue name=QUEUE durable=true` and "+
		"`rabbitmqadmin declare binding source=%s destination=QUEUE routing_key=%s`", ret.Exchange, ret.RoutingKey)
	if ret.Exchange == "" {
		fix = fmt.Sprintf("`rabbitmqadmin declare queue name=%s durable=true` (the default exchange routes to the queue named by the routing key)", ret.RoutingKey)
	}
	return outbox.Unavailable(fmt.Errorf("%w: %d %s (exchange %q, routing key %q: no queue bound); create the queue, e.g. %s",
		ErrUnroutable, ret.ReplyCode, ret.ReplyText, ret.Exchange, ret.RoutingKey, fix))
}

// nacked is the error of a message the broker refused.
func nacked(exchange, key string) error {
	return outbox.Unavailable(fmt.Errorf("%w (exchange %q, routing key %q): a queue it routes to refuses messages, "+
		"e.g. full at its x-max-length with x-overflow=reject-publish", ErrNacked, exchange, key))
}

// missingExchange is the outage of a publisher whose exchange does not
// exist, naming both fixes.
func missingExchange(err error, exchange string) error {
	return outbox.Unavailable(fmt.Errorf("%w; exchange %q does not exist: declare it, e.g. "+
		"`rabbitmqadmin declare exchange name=%s type=topic durable=true`, or let the publisher do it "+
		"(declare_exchange=topic in the broker URL, Config.DeclareExchange)", err, exchange, exchange))
}

// classifyChannelError maps the error that closed a channel to the relay's
// classes, for the message that caused it.
func classifyChannelError(reason *amqp.Error, exchange string) error {
	err := fmt.Errorf("rabbitmq: channel closed by the broker: %w", reason)
	switch reason.Code {
	case amqp.NotFound:
		// The exchange does not exist: every message for it would fail.
		return missingExchange(err, exchange)
	case amqp.AccessRefused:
		// The user may not write to the exchange: every message alike.
		return outbox.Unavailable(fmt.Errorf("%w; the user has no write permission on exchange %q", err, exchange))
	}
	return err // 406 and the rest: transient
}

var sizeLimitRe = regexp.MustCompile(`message size (\d+) is larger than (?:configured )?max size (\d+)`)

// sizeLimit recognises RabbitMQ's max_message_size refusal (406
// PRECONDITION_FAILED) and returns the limit it names.
func sizeLimit(reason *amqp.Error) (int, bool) {
	if reason == nil || reason.Code != amqp.PreconditionFailed {
		return 0, false
	}
	m := sizeLimitRe.FindStringSubmatch(reason.Reason)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[2])
	return n, err == nil
}
