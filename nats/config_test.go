package nats_test

import (
	"testing"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// TestConfigRefused: New and Dial refuse a bad field with a
// *outbox.ConfigError naming nats.Config or nats.DialConfig and the field.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	nc := testnats.Conn(t)
	for field, cfg := range map[string]outboxnats.Config{
		"Subject":        {Subject: "orders.{nope}"},
		"MaxPending":     {MaxPending: -1},
		"EnsureStream":   {EnsureStream: "A.B", StreamSubjects: []string{"a.>"}},
		"StreamSubjects": {StreamSubjects: []string{"a.>"}},
	} {
		_, err := outboxnats.New(nc, cfg)
		configcheck.Refused(t, "New", err, "nats.Config", field)
	}
	_, err := outboxnats.New(nc, outboxnats.Config{EnsureStream: "S"}) // "{event_type}": no stream subjects
	configcheck.Refused(t, "New with EnsureStream", err, "nats.Config", "StreamSubjects")
	for field, dc := range map[string]outboxnats.DialConfig{
		"URL":      {},
		"NKeyFile": {URL: testnats.URL(), CredsFile: "/c.creds", NKeyFile: "/n.nk"},
		"KeyFile":  {URL: testnats.URL(), CertFile: "/c.pem"},
		"CAFile":   {URL: testnats.URL(), CAFile: "/nonexistent/ca.pem"},
	} {
		_, err := outboxnats.Dial(dc, outboxnats.Config{})
		configcheck.Refused(t, "Dial", err, "nats.DialConfig", field)
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{
		"DefaultMaxPending":           outboxnats.DefaultMaxPending,
		"DefaultName":                 outboxnats.DefaultName,
		"outbox.DefaultTopicTemplate": outbox.DefaultTopicTemplate,
	})
}
