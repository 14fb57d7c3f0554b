package outboxtype

import (
	"time"

	"github.com/google/uuid"
)

// Message is what the relay hands a Publisher: one outbox row, ready to send.
// Publishers map it onto the broker's own message shape and must carry ID as
// the broker's deduplication key where the broker has one (JetStream's
// Nats-Msg-Id, AMQP message_id, a Kafka header, SQS MessageDeduplicationId).
type Message struct {
	ID            uuid.UUID
	Seq           int64 // the row's insertion order in its table
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte            // the stored JSON, as jsonb returns it (see outbox.Event.Payload)
	Headers       map[string]string // the row's headers; may be nil
	CreatedAt     time.Time         // when the event was written
	Attempt       int               // 1 on the first publish, 2 on the first retry, ...

	// Envelope is the wire format the relay asks for (RelayConfig.Envelope):
	// the zero value and EnvelopeOutbox mean the outbox's own format,
	// EnvelopeCloudEvents and EnvelopeCloudEventsStructured a CloudEvent
	// (see Message.CloudEvent). A publisher maps it onto its broker.
	Envelope Envelope
	// CloudEventsSource is the CloudEvents source attribute
	// (RelayConfig.CloudEventsSource), used with a CloudEvents Envelope;
	// empty means DefaultCloudEventsSource.
	CloudEventsSource string
}

// Standard header names every publisher sets, besides the row's own headers,
// so consumers see the same metadata whatever the broker.
const (
	HeaderEventID       = "outbox-event-id"
	HeaderEventType     = "outbox-event-type"
	HeaderAggregateType = "outbox-aggregate-type"
	HeaderAggregateID   = "outbox-aggregate-id"
	HeaderCreatedAt     = "outbox-created-at" // RFC 3339 with nanoseconds
)

// StandardHeaders returns the metadata headers for m merged with m.Headers
// (the row's own headers never override the standard ones).
func (m *Message) StandardHeaders() map[string]string {
	h := make(map[string]string, len(m.Headers)+5)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[HeaderEventID] = m.ID.String()
	h[HeaderEventType] = m.EventType
	h[HeaderAggregateType] = m.AggregateType
	h[HeaderAggregateID] = m.AggregateID
	h[HeaderCreatedAt] = m.CreatedAt.UTC().Format(time.RFC3339Nano)
	return h
}
