package publishertest

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/outboxtype"
)

// RelayPlainInserts is the producer half of a CloudEvents end-to-end test:
// in a schema of its own it writes three events with plain SQL INSERTs (the
// reference design's columns; one row with headers, as an application
// adding trace context would), relays them through pub with envelope env
// (one ProcessBatch, every event confirmed), and returns the source
// attribute the relay used and the events as a consumer must see them,
// read back from the table.
func RelayPlainInserts(t *testing.T, pub outbox.Publisher, env outbox.Envelope) (source string, want []*outbox.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '42', 'order.created', '{"order_id": "42", "total": 12.5}'),
		       ('order', '43', 'order.paid', '{"order_id": "43", "note": "é ✓"}')`); err != nil {
		t.Fatalf("plain INSERT: %v", err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('customer', 'c-7', 'customer.created', '{"name": "Ada"}',
		        '{"tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}')`); err != nil {
		t.Fatalf("plain INSERT with headers: %v", err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, Envelope: env})
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	res, err := relay.ProcessBatch(ctx)
	if err != nil || res.Published != 3 {
		t.Fatalf("ProcessBatch = %+v, %v; want 3 events published", res, err)
	}
	rows, err := pool.Query(ctx, `SELECT id, aggregate_type, aggregate_id, event_type, payload::text,
		COALESCE(headers, '{}'), created_at FROM outbox_events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		m := &outbox.Message{Envelope: env}
		var payload string
		var headers map[string]string
		if err := rows.Scan(&m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &payload, &headers, &m.CreatedAt); err != nil {
			t.Fatal(err)
		}
		m.Payload, m.Headers = []byte(payload), headers
		want = append(want, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return outboxtype.CloudEventsSourceFor(schema, outbox.DefaultTable), want
}

// CheckCloudEvent returns an error unless ev, as a consumer decoded it, is
// want sent with source: id, source, type, subject, time, datacontenttype,
// the aggregate type and headers as extensions, and data (byte for byte
// when binary, the same JSON otherwise).
func CheckCloudEvent(ev *event.Event, want *outbox.Message, source string, binary bool) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("invalid CloudEvent: %w", err)
	}
	id, err := uuid.Parse(ev.ID())
	switch {
	case err != nil || id != want.ID:
		return fmt.Errorf("id = %q, want %s", ev.ID(), want.ID)
	case ev.SpecVersion() != "1.0", ev.Source() != source, ev.Type() != want.EventType, ev.Subject() != want.AggregateID,
		!ev.Time().Equal(want.CreatedAt), ev.DataContentType() != "application/json":
		return fmt.Errorf("event %s: specversion %q source %q type %q subject %q time %s datacontenttype %q; want 1.0, %q, %q, %q, %s, application/json",
			want.ID, ev.SpecVersion(), ev.Source(), ev.Type(), ev.Subject(), ev.Time(), ev.DataContentType(),
			source, want.EventType, want.AggregateID, want.CreatedAt)
	}
	ext := map[string]string{"outboxaggregatetype": want.AggregateType}
	for k, v := range want.Headers {
		ext[k] = v
	}
	for k, v := range ext {
		if got, _ := ev.Extensions()[k].(string); got != v {
			return fmt.Errorf("event %s: extension %s = %q, want %q", want.ID, k, got, v)
		}
	}
	if binary && !bytes.Equal(ev.Data(), want.Payload) {
		return fmt.Errorf("event %s: data = %q, want the payload %q byte for byte", want.ID, ev.Data(), want.Payload)
	}
	if !jsonEqual(ev.Data(), want.Payload) {
		return fmt.Errorf("event %s: data = %s, want %s", want.ID, ev.Data(), want.Payload)
	}
	return nil
}
