package outboxtype

// The wire format: what a message carries besides its payload, whatever the
// broker. Publishers write these names and consumers (package inbox and its
// adapters) read them, so both sides share this one definition and a
// consumer links no publisher.

// Headers set on the copies a replay queues, besides the event's own
// headers; they reach consumers as message headers.
const (
	// HeaderReplayOf is the id of the event a new-id replay copied; absent
	// on a same-id replay (the message id is the original id).
	HeaderReplayOf = "outbox-replay-of"
	// HeaderReplayID is the replay that queued the message, in both modes.
	HeaderReplayID = "outbox-replay-id"
	// HeaderOriginalCreatedAt is when the original event was written (RFC
	// 3339, microseconds): a copy's own created_at is when the replay queued
	// it.
	HeaderOriginalCreatedAt = "outbox-original-created-at"
)

// Redis Streams entry field names (package redis writes them). Headers (the
// standard outbox-* headers and the event's own) follow as one field each,
// named RedisHeaderPrefix + header name.
const (
	RedisFieldID            = "id"
	RedisFieldEventType     = "event_type"
	RedisFieldAggregateType = "aggregate_type"
	RedisFieldAggregateID   = "aggregate_id"
	RedisFieldCreatedAt     = "created_at" // RFC 3339 with nanoseconds, UTC
	RedisFieldPayload       = "payload"
	RedisHeaderPrefix       = "h:"
)

// Redis Streams entry field names with a CloudEvents envelope, which has no
// Redis binding: the NATS binding's rules, with fields for headers. Binary
// content mode: one RedisFieldCloudEventsPrefix field per attribute
// (ce-specversion, ce-id, ce-source, ce-type, ce-subject, ce-time,
// ce-datacontenttype, ce-<extension>), values percent-encoded as that
// binding asks, and the payload in RedisFieldPayload. Structured mode:
// RedisFieldContentType = application/cloudevents+json and the JSON event
// format in RedisFieldPayload.
const (
	RedisFieldCloudEventsPrefix = "ce-"
	RedisFieldContentType       = "content-type"
)

// WebhookHeaderPrefix prefixes the row's own headers in a webhook request
// (package webhook), so they cannot collide with HTTP's or the signature's
// headers. The standard outbox-* headers are sent under their own names.
const WebhookHeaderPrefix = "outbox-header-"
