package jsonl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/jsonl"
	"github.com/pgoutbox/outbox/publishertest"
)

func TestLines(t *testing.T) {
	var buf bytes.Buffer
	pub, err := jsonl.New(&buf, jsonl.Config{Topic: "events.{aggregate_type}"})
	if err != nil {
		t.Fatal(err)
	}
	m := publishertest.NewMessage("42", `{"total":12.5}`)
	var wg sync.WaitGroup
	for range 20 { // concurrent writes never interleave within a line
		wg.Go(func() {
			if err := pub.Publish(context.Background(), m); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d lines, want 20", len(lines))
	}
	var l jsonl.Line
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	if l.ID != m.ID.String() || l.Topic != "events.order" || string(l.Payload) != `{"total":12.5}` || l.Headers["tenant"] != "acme" {
		t.Errorf("line = %+v", l)
	}
	if _, err := jsonl.New(&buf, jsonl.Config{Topic: "{nope}"}); err == nil {
		t.Error("bad topic template accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := pub.Publish(ctx, m); err == nil {
		t.Error("Publish with a cancelled context succeeded")
	}
}

type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// A writer that fails, fails every message alike: unavailable, no attempt.
func TestWriteFailureIsUnavailable(t *testing.T) {
	p, err := jsonl.New(brokenWriter{}, jsonl.Config{Topic: "orders.{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{EventType: "created", Payload: []byte(`{}`)}
	if err := p.Publish(context.Background(), m); outbox.Classify(err) != outbox.ClassUnavailable {
		t.Errorf("write failure: %v (%s), want unavailable", err, outbox.Classify(err))
	}
	if p.MessagingSystem() != "jsonl" || p.Destination(m) != "orders.created" {
		t.Errorf("Describer: %q %q", p.MessagingSystem(), p.Destination(m))
	}
}

// With a CloudEvents envelope each line is the JSON event format, which the
// official SDK reads and validates.
func TestCloudEventsLines(t *testing.T) {
	var buf bytes.Buffer
	pub, err := jsonl.New(&buf, jsonl.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured} {
		buf.Reset()
		m := publishertest.NewMessage("42", `{"total":12.5}`)
		m.Envelope, m.CloudEventsSource = env, publishertest.CloudEventSource
		if err := pub.Publish(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		line := strings.TrimSuffix(buf.String(), "\n")
		if strings.Contains(line, "\n") {
			t.Fatalf("%s: more than one line: %q", env, buf.String())
		}
		ev, err := publishertest.ReadCloudEvent(publishertest.CloudEvents{}, publishertest.Received{Payload: []byte(line)})
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		if err := publishertest.CheckCloudEvent(ev, m, publishertest.CloudEventSource, false); err != nil {
			t.Errorf("%s: %v", env, err)
		}
	}
}

// TestNewValidates: New refuses a bad field with a *outbox.ConfigError
// naming jsonl.Config and the field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := jsonl.New(&bytes.Buffer{}, jsonl.Config{Topic: "{nope}"})
	configcheck.Refused(t, "New", err, "jsonl.Config", "Topic")
	if _, err := jsonl.New(nil, jsonl.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate})
}
