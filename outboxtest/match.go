package outboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
)

// Match selects events: each field that is set must match. The zero Match
// matches every event.
type Match struct {
	EventType     string
	AggregateType string
	AggregateID   string
	// PayloadContains is a JSON document the payload must contain, as
	// PostgreSQL's jsonb @> means it: `{"order_id": "42"}` matches any object
	// with that key and value, whatever else it holds.
	PayloadContains string
	// Payload, when set, is called with the payload of each event the other
	// fields matched; the event matches if it returns true.
	Payload func(payload []byte) bool
}

// String describes m for failure messages.
func (m Match) String() string {
	var parts []string
	if m.EventType != "" {
		parts = append(parts, "of type "+m.EventType)
	}
	if m.AggregateType != "" || m.AggregateID != "" {
		parts = append(parts, "for aggregate "+orAny(m.AggregateType)+"/"+orAny(m.AggregateID))
	}
	if m.PayloadContains != "" {
		parts = append(parts, "with a payload containing "+m.PayloadContains)
	}
	if m.Payload != nil {
		parts = append(parts, "whose payload satisfies the predicate")
	}
	if len(parts) == 0 {
		return "(any)"
	}
	return strings.Join(parts, ", ")
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func (m Match) matches(eventType, aggregateType, aggregateID string, payload []byte) bool {
	if m.EventType != "" && eventType != m.EventType ||
		m.AggregateType != "" && aggregateType != m.AggregateType ||
		m.AggregateID != "" && aggregateID != m.AggregateID {
		return false
	}
	if m.PayloadContains != "" {
		ok, err := jsonContains(payload, []byte(m.PayloadContains))
		if err != nil || !ok {
			return false
		}
	}
	return m.Payload == nil || m.Payload(payload)
}

// validate reports a Match that can never match, instead of a puzzling
// "found 0".
func (m Match) validate() error {
	if m.PayloadContains != "" && !json.Valid([]byte(m.PayloadContains)) {
		return fmt.Errorf("Match.PayloadContains %.100q is not valid JSON", m.PayloadContains)
	}
	return nil
}

func describe(eventType, aggregateType, aggregateID string, payload []byte) string {
	p := string(payload)
	if len(p) > 200 {
		p = p[:200] + "..."
	}
	return fmt.Sprintf("%s %s/%s %s", eventType, aggregateType, aggregateID, p)
}

// jsonContains reports whether doc contains sub, with jsonb's @> rules:
// an object contains another when it has each of its keys with a
// containing value; an array contains another when each of the other's
// elements is contained in one of its own (a top-level array also contains
// a bare scalar it holds); scalars contain equal scalars.
func jsonContains(doc, sub []byte) (bool, error) {
	d, err := decode(doc)
	if err != nil {
		return false, err
	}
	s, err := decode(sub)
	if err != nil {
		return false, err
	}
	if arr, ok := d.([]any); ok {
		if _, scalar := s.([]any); !scalar {
			if _, obj := s.(map[string]any); !obj {
				return containsElement(arr, s), nil
			}
		}
	}
	return contains(d, s), nil
}

func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

func contains(d, s any) bool {
	switch sv := s.(type) {
	case map[string]any:
		dv, ok := d.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range sv {
			x, ok := dv[k]
			if !ok || !contains(x, v) {
				return false
			}
		}
		return true
	case []any:
		dv, ok := d.([]any)
		if !ok {
			return false
		}
		for _, v := range sv {
			if !containsElement(dv, v) {
				return false
			}
		}
		return true
	case json.Number:
		dn, ok := d.(json.Number)
		if !ok {
			return false
		}
		a, okA := new(big.Rat).SetString(dn.String())
		b, okB := new(big.Rat).SetString(sv.String())
		return okA && okB && a.Cmp(b) == 0
	default: // string, bool, nil
		return d == s
	}
}

func containsElement(arr []any, v any) bool {
	for _, x := range arr {
		if contains(x, v) {
			return true
		}
	}
	return false
}
