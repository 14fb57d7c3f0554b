package outbox_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/memory"
)

func TestRelayConfigEnvelope(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	for field, cfg := range map[string]outbox.RelayConfig{
		"Envelope":          {Envelope: "json"},
		"CloudEventsSource": {CloudEventsSource: "/orders"},
	} {
		_, err := outbox.NewRelay(pool, memory.New(), cfg)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%+v: err = %v, want a ConfigError on %s", cfg, err, field)
		}
	}
	_, err := outbox.NewRelay(pool, memory.New(), outbox.RelayConfig{Envelope: outbox.EnvelopeCloudEvents, CloudEventsSource: "/a b"})
	var ce *outbox.ConfigError
	if !errors.As(err, &ce) || ce.Field != "CloudEventsSource" {
		t.Errorf("a source with a space: err = %v, want a ConfigError on CloudEventsSource", err)
	}
}

// The relay puts its envelope and source on every message it publishes;
// without one, messages keep the outbox's format.
func TestRelayEnvelopeOnMessages(t *testing.T) {
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx(t), pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg    outbox.RelayConfig
		env    outbox.Envelope
		source string
	}{
		{outbox.RelayConfig{}, outbox.EnvelopeOutbox, ""},
		{outbox.RelayConfig{Envelope: outbox.EnvelopeCloudEvents}, outbox.EnvelopeCloudEvents, "/pgoutbox/" + schema + ".outbox_events"},
		{outbox.RelayConfig{Envelope: outbox.EnvelopeCloudEventsStructured, CloudEventsSource: "https://shop.example/orders"},
			outbox.EnvelopeCloudEventsStructured, "https://shop.example/orders"},
	} {
		if err := pgx.BeginFunc(ctx(t), pool, func(tx pgx.Tx) error {
			_, err := w.Write(ctx(t), tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created", Payload: []byte(`{}`)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		pub := memory.New()
		c.cfg.Schema = schema
		r, err := outbox.NewRelay(pool, pub, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Published != 1 {
			t.Fatalf("%s: ProcessBatch = %+v, %v", c.env, res, err)
		}
		got := pub.Messages()
		if len(got) != 1 || got[0].Envelope != c.env || got[0].CloudEventsSource != c.source {
			t.Errorf("%s: published %+v, want envelope %q, source %q", c.env, got, c.env, c.source)
		}
	}
}
