package mqttinbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxtest"
)

// TestEndToEndFromPlainInsert: an application writes an event with the
// reference design's plain INSERT (migration 1's columns only); a relay
// publishes it to Mosquitto at QoS 1; the consumer's inbox processes it once
// and only then acknowledges it (PUBACK).
func TestEndToEndFromPlainInsert(t *testing.T) {
	e := inboxtest.Setup(t)
	b := newBroker(t, e)
	ctx := inboxtest.Ctx(t)
	if _, err := outbox.Migrate(ctx, e.Pool, outbox.MigrateConfig{Schema: e.Schema}); err != nil {
		t.Fatal(err)
	}
	var id uuid.UUID
	err := e.Pool.QueryRow(ctx, `
        INSERT INTO outbox_events
            (aggregate_type, aggregate_id, event_type, payload)
        VALUES ($1, $2, $3, $4)
        RETURNING id`, "order", "ord-1", "order.created", []byte(`{"order_id":"ord-1","total":42}`)).Scan(&id)
	if err != nil {
		t.Fatalf("the plain INSERT: %v", err)
	}
	relay, err := outbox.NewRelay(e.Pool, b.pub, outbox.RelayConfig{Schema: e.Schema, PollInterval: 20 * time.Millisecond,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.Background(t, relay.Run, nil)
	var (
		mu      sync.Mutex
		payload []byte
	)
	e.SetFail(func(_ context.Context, m inbox.Message) error {
		mu.Lock()
		payload = m.Payload
		mu.Unlock()
		return nil
	})
	stop := b.Start(t, e.Processor())
	e.WaitOutcomes([]uuid.UUID{id}, 1)
	stop()
	b.CheckSettled(t)
	e.CheckOnce([]uuid.UUID{id}, inboxtest.Processed)

	var processed bool
	if err := e.Pool.QueryRow(ctx, `SELECT processed_at IS NOT NULL FROM outbox_events WHERE id = $1`, id).Scan(&processed); err != nil || !processed {
		t.Errorf("outbox row processed = %t, %v", processed, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if string(payload) != `{"total": 42, "order_id": "ord-1"}` {
		t.Errorf("the consumer received the payload %s, want the row's", payload)
	}
}
