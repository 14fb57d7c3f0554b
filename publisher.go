package outbox

import (
	"context"

	"github.com/pgoutbox/outbox/outboxtype"
)

// Message is what the relay hands a Publisher: one outbox row, ready to send.
// Publishers map it onto the broker's own message shape and must carry ID as
// the broker's deduplication key where the broker has one (JetStream's
// Nats-Msg-Id, AMQP message_id, a Kafka header, SQS MessageDeduplicationId).
// It is defined in package outboxtype, which the relay's engine shares.
type Message = outboxtype.Message

// Standard header names every publisher sets, besides the row's own headers,
// so consumers see the same metadata whatever the broker (see
// Message.StandardHeaders).
const (
	HeaderEventID       = outboxtype.HeaderEventID
	HeaderEventType     = outboxtype.HeaderEventType
	HeaderAggregateType = outboxtype.HeaderAggregateType
	HeaderAggregateID   = outboxtype.HeaderAggregateID
	HeaderCreatedAt     = outboxtype.HeaderCreatedAt // RFC 3339 with nanoseconds
)

// Headers set on the copies a replay queues (package admin's Admin.Replay,
// `outbox replay`), besides the event's own headers. They reach consumers
// as message headers, as every row header does (inbox.Message exposes them
// as ReplayOf and ReplayID).
const (
	// HeaderReplayOf is the id of the event a new-id replay copied; absent
	// on a same-id replay (the message id is the original id).
	HeaderReplayOf = outboxtype.HeaderReplayOf
	// HeaderReplayID is the replay that queued the message, in both modes.
	HeaderReplayID = outboxtype.HeaderReplayID
	// HeaderOriginalCreatedAt is when the original event was written (RFC
	// 3339, microseconds): a copy's own created_at is when the replay queued
	// it.
	HeaderOriginalCreatedAt = outboxtype.HeaderOriginalCreatedAt
)

// Envelope is how the relay frames each event on the wire
// (RelayConfig.Envelope, Message.Envelope): the outbox's own format or a
// CloudEvent 1.0 in binary or structured content mode. docs/CLOUDEVENTS.md
// says what each broker's messages carry. It is defined in package
// outboxtype, with the helpers publishers map it with (Message.CloudEvent).
type Envelope = outboxtype.Envelope

// The envelopes (see outboxtype for each one's contract).
const (
	EnvelopeOutbox                = outboxtype.EnvelopeOutbox
	EnvelopeCloudEvents           = outboxtype.EnvelopeCloudEvents
	EnvelopeCloudEventsStructured = outboxtype.EnvelopeCloudEventsStructured
)

// Publisher sends messages to a broker. The relay's correctness rests on this
// contract:
//
//   - Publish returns nil only once the broker has confirmed durable receipt
//     of msg (a JetStream PubAck, a RabbitMQ publisher confirm, Kafka acks=all).
//     Returning nil earlier loses the event if the broker then fails, because
//     the relay marks the row processed and never sends it again.
//   - A non-nil error means the message may or may not have reached the
//     broker; the relay will send it again later (at-least-once). Classify it
//     with Permanent (never retry: dead-letter now) or Unavailable (the broker
//     itself is down: back off, burn no attempt); anything else is transient
//     and retried with backoff until MaxAttempts.
//   - Publish must honour ctx: the relay cancels it at its publish timeout.
//   - Publish is called from several relay workers at once and must be safe for
//     concurrent use. Within one call order is the caller's business; the relay
//     never calls Publish twice for the same row concurrently.
type Publisher interface {
	Publish(ctx context.Context, msg *Message) error
}

// BatchPublisher is implemented by publishers that can pipeline a batch: send
// every message, then wait for all confirmations. The relay uses it, when
// present, instead of one Publish per message.
//
// PublishBatch returns one error per message, at the same index (nil means
// confirmed, as for Publish). It may return a nil slice to mean "all
// confirmed". A failure of one message must not fail the others.
type BatchPublisher interface {
	Publisher
	PublishBatch(ctx context.Context, msgs []*Message) []error
}

// HealthChecker is implemented by publishers that can tell whether the broker
// is reachable; the relay's readiness reports it.
type HealthChecker interface {
	Health(ctx context.Context) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, msg *Message) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, msg *Message) error { return f(ctx, msg) }
