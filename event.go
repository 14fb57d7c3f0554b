package outbox

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Column limits of the outbox table (VARCHAR(100)), checked before the
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

// maxDeliverYear bounds Event.DeliverAt: a later time is a bug (a
// computation gone wrong), not a plan.
const maxDeliverYear = 9999

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
	// Payload is the event body: valid JSON, stored as jsonb (so it can be
	// queried in the table). jsonb keeps the value, not the text:
	// the relay publishes PostgreSQL's normalized form, where object keys are
	// reordered, insignificant whitespace is dropped and only the last of
	// duplicate keys is kept. Use JSONPayload to marshal a value.
	Payload []byte
	// Headers travel with the message as broker headers (trace context, user
	// metadata). Optional.
	Headers map[string]string
	// DeliverAt schedules the event: the relay publishes it no earlier than
	// this time, and within about one poll interval after it. Zero, or a
	// time already past by the database clock, means now. Scheduled events
	// need migration 6 (deliver_at); unscheduled ones write the same
	// columns as always. In ordered mode a scheduled event holds back its
	// aggregate's later events until it is published (or cancelled).
	DeliverAt time.Time
	// Delay schedules the event Delay after the write (the start of the
	// writing transaction, by the database clock, so the application's
	// clock skew does not matter). Set at most one of DeliverAt and Delay.
	// Zero means now.
	Delay time.Duration
}

// scheduled reports whether the event asks for a later delivery.
func (e *Event) scheduled() bool { return !e.DeliverAt.IsZero() || e.Delay > 0 }

// JSONPayload marshals v for Event.Payload.
func JSONPayload(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("outbox: marshal payload: %w", err)
	}
	return b, nil
}

// ValidationError reports an event that cannot be written. Field names the
// offending field by its column name (aggregate_type, payload, ...).
type ValidationError struct {
	Index  int // position in the events passed to Write
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Validate checks e as Write will, without touching the database, with the
// default size limit (DefaultMaxPayloadBytes).
func (e *Event) Validate() error {
	if err := e.validate(0); err != nil {
		return err
	}
	return e.checkSize(0, DefaultMaxPayloadBytes)
}

// Size is what WriterConfig.MaxPayloadBytes limits: the payload plus the
// headers' keys and values, in bytes.
func (e *Event) Size() int {
	n := len(e.Payload)
	for k, v := range e.Headers {
		n += len(k) + len(v)
	}
	return n
}

// checkSize refuses an event larger than limit (< 0: no limit).
func (e *Event) checkSize(i, limit int) error {
	if limit < 0 {
		return nil
	}
	if n := e.Size(); n > limit {
		return &ValidationError{Index: i, Field: "payload", Reason: fmt.Sprintf(
			"%d bytes with its headers, more than the limit of %d (WriterConfig.MaxPayloadBytes)", n, limit)}
	}
	return nil
}

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
	// json.Valid accepts text that jsonb refuses, and a refused INSERT
	// aborts the caller's transaction.
	if reason := unstorableJSON(e.Payload); reason != "" {
		return bad("payload", "%s", reason)
	}
	switch {
	case e.Delay < 0:
		return bad("delay", "%v is negative (use 0 for now)", e.Delay)
	case e.Delay > 0 && !e.DeliverAt.IsZero():
		return bad("deliver_at", "set at most one of DeliverAt and Delay")
	case e.DeliverAt.Year() > maxDeliverYear:
		return bad("deliver_at", "%s is after year %d", e.DeliverAt.Format(time.RFC3339), maxDeliverYear)
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

// unstorableJSON says why PostgreSQL's jsonb would refuse a JSON text that
// json.Valid accepted, or returns "". jsonb stores UTF-8 text: it refuses
// invalid UTF-8, the \u0000 escape, and a UTF-16 surrogate escape that is not
// half of a pair. b must be valid JSON, so a backslash only appears inside a
// string, starting an escape.
func unstorableJSON(b []byte) string {
	if !utf8.Valid(b) {
		for i := 0; i < len(b); {
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return fmt.Sprintf("not valid UTF-8 (byte %d: %#x)", i, b[i])
			}
			i += size
		}
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++ // a one-character escape: skip the escaped character
			continue
		}
		r := hex4(b[i+2 : i+6])
		switch {
		case r == 0:
			return `contains \u0000, which PostgreSQL jsonb cannot store`
		case utf16.IsSurrogate(r) && r < 0xDC00:
			if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' || !isLowSurrogate(hex4(b[i+8:i+12])) {
				return fmt.Sprintf(`%s at byte %d is a high surrogate not followed by a low one, which PostgreSQL jsonb cannot store`, b[i:i+6], i)
			}
			i += 11
		case utf16.IsSurrogate(r):
			return fmt.Sprintf(`%s at byte %d is a low surrogate without a high one before it, which PostgreSQL jsonb cannot store`, b[i:i+6], i)
		default:
			i += 5
		}
	}
	return ""
}

func isLowSurrogate(r rune) bool { return r >= 0xDC00 && r <= 0xDFFF }

// hex4 decodes the four hex digits of a \uXXXX escape that json.Valid
// already checked.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
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

// Record is an outbox row as stored, returned by package admin's listings
// (Admin.DeadLetters, Admin.Events).
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
