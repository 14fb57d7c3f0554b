package jsonl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/pgoutbox/outbox"
)

// Line is the JSON shape of one message.
type Line struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic"`
	EventType     string            `json:"event_type"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	CreatedAt     time.Time         `json:"created_at"`
	Attempt       int               `json:"attempt"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload"`
}

// Config configures a Publisher. New rejects an invalid value with an
// *outbox.ConfigError naming the field.
type Config struct {
	// Topic is a topic template (see outbox.ParseTopicTemplate), rendered
	// into each line's "topic". Defaults to outbox.DefaultTopicTemplate
	// ("{event_type}").
	Topic string
}

// Publisher writes JSON lines. Safe for concurrent use: lines never interleave.
type Publisher struct {
	mu    sync.Mutex
	w     io.Writer
	topic *outbox.TopicTemplate
}

// New returns a Publisher writing to w (os.Stdout for the CLI).
func New(w io.Writer, cfg Config) (*Publisher, error) {
	if w == nil {
		return nil, errors.New("jsonl: writer is nil")
	}
	t, err := outbox.ParseTopicTemplate(cfg.Topic)
	if err != nil {
		return nil, &outbox.ConfigError{Config: "jsonl.Config", Field: "Topic", Err: err}
	}
	return &Publisher{w: w, topic: t}, nil
}

// Publish writes msg as one line: a Line, or with a CloudEvents envelope
// (either mode) the CloudEvents JSON event format.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var b []byte
	var err error
	if msg.Envelope.CloudEvents() {
		// A line per event either way: the JSON event format is one.
		b, err = msg.StructuredCloudEvent()
	} else {
		b, err = json.Marshal(Line{
			ID: msg.ID.String(), Topic: p.topic.Render(msg), EventType: msg.EventType,
			AggregateType: msg.AggregateType, AggregateID: msg.AggregateID, CreatedAt: msg.CreatedAt,
			Attempt: msg.Attempt, Headers: msg.Headers, Payload: msg.Payload,
		})
	}
	if err != nil {
		return outbox.Permanent(fmt.Errorf("jsonl: encode: %w", err))
	}
	b = append(b, '\n')
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.w.Write(b); err != nil {
		return outbox.Unavailable(fmt.Errorf("jsonl: write: %w", err))
	}
	return nil
}

var _ outbox.Describer = (*Publisher)(nil)

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "jsonl" }

// Destination implements outbox.Describer: the rendered Topic template.
func (p *Publisher) Destination(msg *outbox.Message) string { return p.topic.Render(msg) }
