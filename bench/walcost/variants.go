package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// variant is one way of writing (and removing) events.
type variant struct {
	name     string
	migrate  bool   // pgoutbox's migrated outbox table
	ddl      string // or this outbox table
	event    func(ctx context.Context, tx pgx.Tx, orderID string) error
	consume  func(ctx context.Context, e *env) error // the WAL relay's reading side
	maintain func(ctx context.Context, e *env) error // how delivered rows leave the table
}

var variants = []variant{
	{name: "business-only"},
	{name: "row-no-slot", migrate: true, event: insertRow},
	{name: "row+wal-kept", migrate: true, event: insertRow, consume: consumeRows},
	{name: "row+wal+delete", migrate: true, event: insertRow, consume: consumeRows, maintain: deleteAcked},
	{name: "partition+wal+truncate", ddl: partitionedSQL(partitions, partitionSize), event: insertRow, consume: consumeRows, maintain: truncateAcked},
	{name: "emit+wal", migrate: true, event: emitMessage, consume: consumeMessages},
}

// insertRow is the Writer's INSERT.
func insertRow(ctx context.Context, tx pgx.Tx, orderID string) error {
	_, err := tx.Exec(ctx, `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, 'order', $2, 'order.created', $3, NULL)`,
		uuid.New(), orderID, payload(orderID))
	return err
}

// emitMessage writes the event into the WAL only, as a transactional
// logical decoding message: no row.
func emitMessage(ctx context.Context, tx pgx.Tx, orderID string) error {
	ev, _ := json.Marshal(map[string]any{"id": uuid.New(), "aggregate_type": "order", "aggregate_id": orderID,
		"event_type": "order.created", "payload": json.RawMessage(payload(orderID))})
	_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'pgoutbox', $1::text)`, string(ev))
	return err
}

const (
	partitionSize = 5000
	partitions    = 100 // 500k events: more than a run writes
)

// partitionedSQL is pgoutbox's outbox table partitioned by seq. A
// partitioned table cannot have an identity column or a primary key without
// the partition key (PostgreSQL 15), hence the sequence and (seq, id).
func partitionedSQL(n, size int) string {
	var b strings.Builder
	b.WriteString(`
CREATE SEQUENCE outbox_events_seq;
CREATE TABLE outbox_events (
    id             UUID         NOT NULL DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ,
    seq            BIGINT       NOT NULL DEFAULT nextval('outbox_events_seq'),
    retry_after    TIMESTAMPTZ,
    last_error     TEXT,
    headers        JSONB,
    dead_at        TIMESTAMPTZ,
    held_by        UUID,
    PRIMARY KEY (seq, id)
) PARTITION BY RANGE (seq);
CREATE INDEX ON outbox_events (seq) WHERE processed_at IS NULL AND dead_at IS NULL;
CREATE INDEX ON outbox_events (processed_at) WHERE processed_at IS NOT NULL;
CREATE INDEX ON outbox_events (dead_at) WHERE dead_at IS NOT NULL AND processed_at IS NULL;
CREATE INDEX ON outbox_events (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL;
`)
	for i := range n {
		fmt.Fprintf(&b, "CREATE TABLE outbox_events_p%d PARTITION OF outbox_events FOR VALUES FROM (%d) TO (%d);\n", i, i*size+1, (i+1)*size+1)
	}
	return b.String()
}
