package kinesis_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/kinesis"
)

// TestPlainInsertToConsumer: an event written with the reference design's
// plain INSERT (migration 1's columns, nothing else) goes through a running
// relay to a Kinesis stream; a consumer decodes the record and runs it
// through the inbox, and a second delivery of the same record is a
// duplicate.
func TestPlainInsertToConsumer(t *testing.T) {
	t.Parallel()
	ctx := timeout(t, 60*time.Second)
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatalf("inbox migrate: %v", err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE shipments (order_id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)
	stream := e.createStream("orders", 2)
	relay, err := outbox.NewRelay(pool, e.publisher(kinesis.Config{Stream: stream}), outbox.RelayConfig{
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
	err = e.fake.Wait(ctx, func() bool { return len(e.fake.Records(stream)) >= 1 })
	stop()
	if rerr := <-done; rerr != nil {
		t.Errorf("relay.Run: %v", rerr)
	}
	recs := e.fake.Records(stream)
	if err != nil || len(recs) != 1 {
		t.Fatalf("stream holds %d records: %v", len(recs), err)
	}
	if recs[0].PartitionKey != "ord-1" {
		t.Errorf("partition key %q, want the aggregate id", recs[0].PartitionKey)
	}

	// The consumer's side, as a KCL record processor or a Lambda would do it.
	ib, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	consume := func(data []byte) inbox.Result {
		t.Helper()
		env, err := kinesis.Decode(data)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		msg, err := inbox.MessageFromHeaders(env.Headers, env.Payload)
		if err != nil {
			t.Fatalf("MessageFromHeaders: %v", err)
		}
		if msg.ID.String() != id || msg.EventType != "order.created" || msg.AggregateID != "ord-1" {
			t.Fatalf("message %+v, want event %s", msg, id)
		}
		res, err := ib.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO shipments SELECT $1::jsonb->>'order_id'`, string(msg.Payload))
			return err
		})
		if err != nil {
			t.Fatalf("Handle: %v", err)
		}
		return res
	}
	if res := consume(recs[0].Data); res.Duplicate {
		t.Error("first delivery reported as a duplicate")
	}
	if res := consume(recs[0].Data); !res.Duplicate { // Kinesis delivers at least once
		t.Error("second delivery of the same record not reported as a duplicate")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM shipments WHERE order_id = 'ord-1'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d shipments, %v; want 1", n, err)
	}
}
