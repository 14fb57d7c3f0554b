// Package rowval reads the outbox columns that a plain INSERT may fill with
// values no Writer writes, the same way for both sources: the table
// workers' claims and the WAL stream's decoder.
package rowval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Headers decodes the headers column (JSONB) into message headers.
//
// A JSON object is expected. Its string values are taken as they are; a
// number, boolean, object or array is taken as its compact JSON text (a
// broker header is a string, and {"retries": 3} was meant as "3"); a null
// value is left out. A JSON null column is no headers. Anything else (an
// array, a scalar) is an error naming what was found.
func Headers(b []byte) (map[string]string, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	if b[0] != '{' {
		return nil, fmt.Errorf("headers %.200s: want a JSON object, got %s", b, kind(b[0]))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("headers %.200s: want a JSON object: %v", b, err)
	}
	h := make(map[string]string, len(raw))
	for k, v := range raw {
		switch {
		case len(v) == 0 || bytes.Equal(v, []byte("null")):
			continue
		case v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("headers: %q: %v", k, err)
			}
			h[k] = s
		default:
			var c bytes.Buffer
			if err := json.Compact(&c, v); err != nil {
				return nil, fmt.Errorf("headers: %q: %v", k, err)
			}
			h[k] = c.String()
		}
	}
	return h, nil
}

func kind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

// ErrInfinite is a timestamp column holding infinity or -infinity, which
// PostgreSQL accepts and no message can carry as a time.
var ErrInfinite = errors.New("is infinite")

// InfiniteCreatedAt is why a row whose created_at is ±infinity is
// dead-lettered: the message's time would be a lie, and the operator can
// set a real one and retry.
func InfiniteCreatedAt(value string) error {
	return fmt.Errorf("created_at %w (%s): not a time a message can carry; set a real one (UPDATE ... SET created_at = now()) and retry the event", ErrInfinite, value)
}
