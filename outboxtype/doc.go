// Package outboxtype holds the types that the outbox package's API and the
// relay's engine share: the Message a Publisher receives, the Backoff that
// spaces retries, the ErrorClass that decides what a publish error does, and
// the ConfigError every constructor of the module returns for a field it
// refuses.
// It also holds the wire format both sides of a broker agree on: the header
// names every publisher sets and the Redis and webhook field names, which
// the consumer's packages (inbox and its adapters) read from here so that a
// consumer links none of the relay; and the CloudEvents mapping every
// publisher and the inbox share (Envelope, Message.CloudEvent,
// ReadCloudEvent).
//
// It is a leaf (it imports nothing of pgoutbox), so the engine under
// internal/ can use the very types users see instead of mirrors of them.
// Package outbox re-exports each one under its usual name (outbox.Message,
// outbox.Backoff, outbox.ErrorClass, outbox.Envelope, outbox.ConfigError...):
// applications use those and never need to import this package, except a
// consumer, which reads the inbox's ConfigError from here. Publishers and
// consumers call its CloudEvents helpers (Message.CloudEvent, CloudEvent.Attributes,
// CloudEvent.Structured, EncodeHeaderValue, ReadCloudEvent) from here: the
// inbox links this package, not the relay's.
package outboxtype
