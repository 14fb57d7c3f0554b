package outbox

import (
	"cmp"
	"fmt"
	"strings"
)

// Topic templates: one syntax for every broker's subject, topic, routing key
// or stream name. Placeholders: {event_type}, {aggregate_type},
// {aggregate_id}. Everything else is literal.
const (
	// DefaultTopicTemplate routes by event type: "order.created".
	DefaultTopicTemplate = "{event_type}"
	// DebeziumTopicTemplate mirrors Debezium's outbox event router:
	// "outbox.event.order".
	DebeziumTopicTemplate = "outbox.event.{aggregate_type}"
)

// TopicTemplate renders a destination name from a message.
type TopicTemplate struct {
	src   string
	parts []templatePart
}

type templatePart struct {
	literal string
	field   func(*Message) string
}

var templateFields = map[string]func(*Message) string{
	"event_type":     func(m *Message) string { return m.EventType },
	"aggregate_type": func(m *Message) string { return m.AggregateType },
	"aggregate_id":   func(m *Message) string { return m.AggregateID },
}

// ParseTopicTemplate parses s; an empty s means DefaultTopicTemplate.
func ParseTopicTemplate(s string) (*TopicTemplate, error) {
	s = cmp.Or(s, DefaultTopicTemplate)
	t := &TopicTemplate{src: s}
	rest := s
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			t.parts = append(t.parts, templatePart{literal: rest})
			break
		}
		if open > 0 {
			t.parts = append(t.parts, templatePart{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("outbox: topic template %q: unclosed '{'", s)
		}
		name := rest[open+1 : open+end]
		f, ok := templateFields[name]
		if !ok {
			return nil, fmt.Errorf("outbox: topic template %q: unknown placeholder {%s} (want {event_type}, {aggregate_type} or {aggregate_id})", s, name)
		}
		t.parts = append(t.parts, templatePart{field: f})
		rest = rest[open+end+1:]
	}
	if strings.ContainsRune(s, '}') && strings.Count(s, "{") != strings.Count(s, "}") {
		return nil, fmt.Errorf("outbox: topic template %q: unbalanced '}'", s)
	}
	return t, nil
}

// MustParseTopicTemplate is ParseTopicTemplate for constant templates; it
// panics on a malformed one.
func MustParseTopicTemplate(s string) *TopicTemplate {
	t, err := ParseTopicTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

// Render returns the destination for m.
func (t *TopicTemplate) Render(m *Message) string {
	if len(t.parts) == 1 && t.parts[0].field != nil {
		return t.parts[0].field(m)
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.field != nil {
			b.WriteString(p.field(m))
		} else {
			b.WriteString(p.literal)
		}
	}
	return b.String()
}

// String returns the template's source.
func (t *TopicTemplate) String() string { return t.src }
