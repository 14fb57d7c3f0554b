package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Column limits of the article's schema (VARCHAR(100)), checked before the
// database is touched so a bad event fails with the field's name instead of a
// PostgreSQL error that aborts the caller's transaction.
const (
	MaxAggregateTypeLen = 100
	MaxAggregateIDLen   = 100
	MaxEventTypeLen     = 100
	// MaxHeaderKeyLen and MaxHeaderValueLen bound headers, which every broker
	// carries in a size-limited message envelope.
	MaxHeaderKeyLen   = 256
	MaxHeaderValueLen = 4096
)

// Event is one event to write to the outbox in the caller's transaction.
type Event struct {
	// ID is the event's identity and its deduplication key downstream. Leave it
	// zero to have a time-ordered UUIDv7 generated; set it to make a retried
	// write idempotent (the primary key rejects the second insert).
	ID uuid.UUID
	// AggregateType and AggregateID name the entity the event belongs to
	// ("order", "42"). Required; they drive routing and per-aggregate order.
	AggregateType string
	AggregateID   string
	// EventType is the name consumers expect ("order.created"). Required.
	EventType string
	// Payload is the event body: valid JSON, stored as jsonb (the article's
	// column type, so it can be queried). jsonb keeps the value, not the text:
	// the relay publishes PostgreSQL's normalized form, where object keys are
	// reordered, insignificant whitespace is dropped and only the last of
	// duplicate keys is kept. Use JSONPayload to marshal a value.
	Payload []byte
	// Headers travel with the message as broker headers (trace context, user
	// metadata). Optional.
	Headers map[string]string
}

// JSONPayload marshals v for Event.Payload.
func JSONPayload(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("outbox: marshal payload: %w", err)
	}
	return b, nil
}

// ValidationError reports an event that cannot be written. Field names the
// offending field in the article's column naming (aggregate_type, payload, ...).
type ValidationError struct {
	Index  int // position in the events passed to Write
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Validate checks e as Write will, without touching the database.
func (e *Event) Validate() error { return e.validate(0) }

func (e *Event) validate(i int) error {
	bad := func(field, reason string, args ...any) error {
		return &ValidationError{Index: i, Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{
		{"aggregate_type", e.AggregateType, MaxAggregateTypeLen},
		{"aggregate_id", e.AggregateID, MaxAggregateIDLen},
		{"event_type", e.EventType, MaxEventTypeLen},
	} {
		switch {
		case f.v == "":
			return bad(f.name, "must not be empty")
		case !utf8.ValidString(f.v):
			return bad(f.name, "not valid UTF-8")
		case utf8.RuneCountInString(f.v) > f.max:
			return bad(f.name, "%d characters, the column holds at most %d", utf8.RuneCountInString(f.v), f.max)
		case hasControl(f.v):
			return bad(f.name, "contains a control character")
		}
	}
	if len(e.Payload) == 0 {
		return bad("payload", "must not be empty (use {} or null for no body)")
	}
	if !json.Valid(e.Payload) {
		return bad("payload", "not valid JSON")
	}
	// jsonb rejects the \u0000 escape: "unsupported Unicode escape sequence".
	if bytes.Contains(e.Payload, []byte(`\u0000`)) && hasNULEscape(e.Payload) {
		return bad("payload", `contains \u0000, which PostgreSQL jsonb cannot store`)
	}
	for k, v := range e.Headers {
		switch {
		case k == "":
			return bad("headers", "empty header key")
		case len(k) > MaxHeaderKeyLen:
			return bad("headers", "key %.32q... is %d bytes, at most %d", k, len(k), MaxHeaderKeyLen)
		case len(v) > MaxHeaderValueLen:
			return bad("headers", "value of %q is %d bytes, at most %d", k, len(v), MaxHeaderValueLen)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return bad("headers", "%q: not valid UTF-8", k)
		case hasControl(k):
			return bad("headers", "key %q contains a control character", k)
		case hasControl(v):
			return bad("headers", "value of %q contains a control character", k)
		}
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) {
			return true
		}
	}
	return false
}

// hasNULEscape reports whether a JSON text holds the escape \u0000 in a string
// (as opposed to an escaped backslash followed by "u0000").
func hasNULEscape(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 < len(b) && b[i+1] == 'u' && i+5 < len(b) && string(b[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}

// newID returns a time-ordered UUIDv7: consecutive inserts land next to each
// other in the primary-key index instead of at random pages.
func newID() (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: generate event id: %w", err)
	}
	return id, nil
}

// Record is an outbox row as stored, returned by the admin functions.
type Record struct {
	ID            uuid.UUID
	Seq           int64
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte
	Headers       map[string]string
	Attempts      int
	CreatedAt     time.Time
	ProcessedAt   *time.Time
	RetryAfter    *time.Time
	DeadAt        *time.Time
	LastError     string
}
