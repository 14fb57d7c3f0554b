package inbox

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/outboxtype"
)

// ErrInvalidMessage marks a delivery that can never be processed: its event
// id is missing or not a UUID, or a standard header is malformed. Redelivering
// it cannot help; adapters terminate or dead-letter it instead of requeueing.
var ErrInvalidMessage = errors.New("invalid inbox message")

// Message is one delivered event, as every adapter presents it whatever the
// broker. ID is the outbox event id, the deduplication key.
type Message struct {
	ID            uuid.UUID
	EventType     string
	AggregateType string
	AggregateID   string
	CreatedAt     time.Time // when the event was written to the outbox; zero if unknown
	// Headers holds every header the message carried, standard ones included,
	// under the keys the broker delivered.
	Headers map[string]string
	Payload []byte
	// ReplayID is the replay that re-sent this event (outboxtype.HeaderReplayID,
	// set by `outbox replay` in both modes); zero for a live event.
	ReplayID uuid.UUID
	// ReplayOf is the original event a new-id replay copied
	// (outboxtype.HeaderReplayOf); zero for a live event and for a same-id
	// replay, whose ID is the original's. A new-id copy is a new event to
	// the inbox (its ID is fresh), so a consumer that processed the original
	// processes it again; one that must not can skip it when ReplayOf is
	// set.
	ReplayOf uuid.UUID
}

// IsReplay reports whether the message was re-sent by a replay (either
// mode), not published live.
func (m *Message) IsReplay() bool { return m.ReplayID != uuid.Nil }

// Header returns the value of header key, matched case-insensitively (HTTP
// canonicalizes header names, NATS and Kafka do not).
func (m *Message) Header(key string) string {
	return lookup(m.Headers, key)
}

func lookup(h map[string]string, key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

// MessageFromHeaders builds a Message from the standard headers every
// pgoutbox publisher sets (outboxtype.HeaderEventID, outboxtype.HeaderEventType,
// outboxtype.HeaderAggregateType, outboxtype.HeaderAggregateID,
// outboxtype.HeaderCreatedAt) and the replay headers (outboxtype.HeaderReplayID,
// outboxtype.HeaderReplayOf), matched case-insensitively. The event id is
// required; the others may be absent (a replay header that is not a UUID
// leaves the field zero). A missing or invalid id, or a malformed
// created-at, returns an error wrapping ErrInvalidMessage.
// headers is kept as Message.Headers, not copied.
//
// A CloudEvent (a relay with a CloudEvents envelope), in binary or
// structured content mode, is read with outboxtype.ReadCloudEvent and
// becomes a Message as MessageFromCloudEvent says: its id is the event id.
func MessageFromHeaders(headers map[string]string, payload []byte) (Message, error) {
	ce, err := outboxtype.ReadCloudEvent(headers, payload)
	if err != nil {
		return Message{}, fmt.Errorf("inbox: %w: %w", err, ErrInvalidMessage)
	}
	if ce != nil {
		return MessageFromCloudEvent(ce, headers)
	}
	m := Message{
		EventType:     lookup(headers, outboxtype.HeaderEventType),
		AggregateType: lookup(headers, outboxtype.HeaderAggregateType),
		AggregateID:   lookup(headers, outboxtype.HeaderAggregateID),
		Headers:       headers,
		Payload:       payload,
	}
	raw := lookup(headers, outboxtype.HeaderEventID)
	if raw == "" {
		return Message{}, fmt.Errorf("inbox: header %s is missing: %w", outboxtype.HeaderEventID, ErrInvalidMessage)
	}
	id, err := uuid.Parse(raw)
	if err != nil || id == uuid.Nil {
		return Message{}, fmt.Errorf("inbox: header %s: %.64q is not a UUID: %w", outboxtype.HeaderEventID, raw, ErrInvalidMessage)
	}
	m.ID = id
	if s := lookup(headers, outboxtype.HeaderCreatedAt); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Message{}, fmt.Errorf("inbox: header %s: %.64q is not an RFC 3339 time: %w", outboxtype.HeaderCreatedAt, s, ErrInvalidMessage)
		}
		m.CreatedAt = t
	}
	for _, r := range []struct {
		key string
		dst *uuid.UUID
	}{{outboxtype.HeaderReplayID, &m.ReplayID}, {outboxtype.HeaderReplayOf, &m.ReplayOf}} {
		// Not fatal when malformed: the event itself is intact, and an
		// application may have written such a header itself.
		if id, err := uuid.Parse(lookup(headers, r.key)); err == nil {
			*r.dst = id
		}
	}
	return m, nil
}

// MessageFromCloudEvent builds a Message from a CloudEvent a pgoutbox relay
// sent (outboxtype.ReadCloudEvent reads one): ID = id, which must be a UUID
// (the outbox event id), EventType = type, AggregateID = subject,
// CreatedAt = time, AggregateType, ReplayID and ReplayOf = the
// outboxaggregatetype, outboxreplayid and outboxreplayof extensions,
// Payload = data. Headers holds headers (as delivered) and every extension
// under its own name unless a header has it already, so a handler reads a
// row's header ("tenant", "traceparent") by the same name in every
// envelope. An id that is not a UUID returns an error wrapping
// ErrInvalidMessage.
func MessageFromCloudEvent(ce *outboxtype.CloudEvent, headers map[string]string) (Message, error) {
	id, err := uuid.Parse(ce.ID)
	if err != nil || id == uuid.Nil {
		return Message{}, fmt.Errorf("inbox: CloudEvents id %.64q is not a UUID (an outbox event id): %w", ce.ID, ErrInvalidMessage)
	}
	h := make(map[string]string, len(headers)+len(ce.Extensions))
	for k, v := range headers {
		h[k] = v
	}
	for k, v := range ce.Extensions {
		if _, ok := h[k]; !ok {
			h[k] = v
		}
	}
	m := Message{
		ID: id, EventType: ce.Type, AggregateID: ce.Subject, CreatedAt: ce.Time, Headers: h, Payload: ce.Data,
		AggregateType: ce.Extensions[outboxtype.CloudEventsAggregateType],
	}
	for _, r := range []struct {
		header string
		dst    *uuid.UUID
	}{{outboxtype.HeaderReplayID, &m.ReplayID}, {outboxtype.HeaderReplayOf, &m.ReplayOf}} {
		if name, ok := outboxtype.CloudEventsAttributeName(r.header); ok {
			if id, err := uuid.Parse(ce.Extensions[name]); err == nil {
				*r.dst = id
			}
		}
	}
	return m, nil
}
