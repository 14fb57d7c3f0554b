package eventbridge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/eventbridge"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// TestPlainInsertToBus: an event written with the reference design's
// plain INSERT (migration 1's columns, nothing else) goes through a running
// relay to an EventBridge bus, and a target reads the payload and
// the event's id.
func TestPlainInsertToBus(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	e := newEnv(t)
	bus := e.createBus("orders")
	relay, err := outbox.NewRelay(pool, e.publisher(eventbridge.Config{EventBus: bus}), outbox.RelayConfig{
		Schema: schema, PollInterval: 20 * time.Millisecond, Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var id string
	if err := pool.QueryRow(ctx, `
        INSERT INTO outbox_events
            (aggregate_type, aggregate_id, event_type, payload)
        VALUES ($1, $2, $3, $4)
        RETURNING id::text
    `, "order", "ord-1", "order.created", []byte(`{"order_id":"ord-1","total":42}`)).Scan(&id); err != nil {
		t.Fatalf("the plain INSERT: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	got, err := e.read(ctx, bus, 1)
	stop()
	if rerr := <-done; rerr != nil {
		t.Errorf("relay.Run: %v", rerr)
	}
	if err != nil || len(got) != 1 {
		t.Fatalf("bus holds %d messages: %v", len(got), err)
	}
	m := got[0]
	var payload map[string]any
	if err := json.Unmarshal(m.Payload, &payload); err != nil || payload["order_id"] != "ord-1" || payload["total"] != 42.0 {
		t.Errorf("detail payload %s, want the inserted payload", m.Payload)
	}
	if m.Headers[outbox.HeaderEventID] != id || m.Headers[outbox.HeaderAggregateID] != "ord-1" || m.Event.DetailType != "order.created" || m.Event.Source != "outbox.order" {
		t.Errorf("message %+v, want event %s of aggregate ord-1", m, id)
	}
	var processed bool
	if err := pool.QueryRow(ctx, `SELECT processed_at IS NOT NULL FROM outbox_events WHERE id = $1`, id).Scan(&processed); err != nil || !processed {
		t.Errorf("row processed = %v, %v", processed, err)
	}
}
