package main

// The baseline relay: the common hand-written outbox (the reference design
// BENCHMARKS.md names), ported faithfully so that every figure has it beside
// pgoutbox's, measured by the same harness in the same run:
//
//   - its table and partial index (baselineSchemaSQL), ids from its DEFAULT
//     gen_random_uuid() (UUIDv4);
//   - its CreateOrder (order row + outbox row in one database/sql transaction);
//   - its processBatch: one transaction, SELECT ... ORDER BY created_at
//     LIMIT 100 FOR UPDATE SKIP LOCKED, read every row, then for each row
//     publish and run one UPDATE (processed_at, or attempts + 1);
//   - its two Run loops: a 1 s ticker, and a LISTEN loop woken by a per-row
//     NOTIFY trigger, with a 5 s fallback ticker.
//
// Deliberate differences, each neutral or in the baseline's favour:
//   - pgx instead of database/sql + lib/pq in the relay (pgx caches prepared
//     statements, which only speeds the baseline up); the LISTEN connection
//     is a pgx connection feeding a 32-slot channel, as pq.Listener's Notify
//     does.
//   - its Publisher receives the event id besides (event type, aggregate id,
//     payload): a consumer needs it as the deduplication key, and without it
//     JetStream could not dedup.
//   - the NOTIFY channel is suffixed with the schema, so that two harness runs
//     on one database cannot wake each other.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
)

// baselineSchemaSQL is the baseline's table and index, verbatim, plus the orders
// table its CreateOrder writes.
const baselineSchemaSQL = `
CREATE TABLE outbox_events (
    id             UUID         PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type VARCHAR(100) NOT NULL,
    aggregate_id   VARCHAR(100) NOT NULL,
    event_type     VARCHAR(100) NOT NULL,
    payload        JSONB        NOT NULL,
    attempts       INT          NOT NULL DEFAULT 0,
    created_at     TIMESTAMPTZ  NOT NULL DEFAULT NOW(),
    processed_at   TIMESTAMPTZ
);

CREATE INDEX idx_outbox_unprocessed
    ON outbox_events (created_at)
    WHERE processed_at IS NULL;
`

// ordersSQL is the business table of the baseline's CreateOrder.
const ordersSQL = `
CREATE TABLE orders (
    id          VARCHAR(100) PRIMARY KEY,
    customer_id VARCHAR(100) NOT NULL,
    total       BIGINT       NOT NULL,
    created_at  TIMESTAMPTZ  NOT NULL
);
`

// baselineTriggerSQL is the baseline's NOTIFY trigger; %s is the channel.
const baselineTriggerSQL = `
CREATE OR REPLACE FUNCTION notify_outbox_insert() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('%s', NEW.id::text);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER outbox_insert_notify
AFTER INSERT ON outbox_events
FOR EACH ROW EXECUTE FUNCTION notify_outbox_insert();
`

// baselineClaimSQL is processBatch's claim query, verbatim.
const baselineClaimSQL = `
        SELECT id, aggregate_type, aggregate_id, event_type, payload
        FROM outbox_events
        WHERE processed_at IS NULL
          AND attempts < $1
        ORDER BY created_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    `

func baselineChannel(schema string) string { return "outbox_event_" + schema }

// Order is the baseline's order.
type Order struct {
	ID         string
	CustomerID string
	Total      int64
}

// baselineCreateOrder is the baseline's OrderService.CreateOrder, verbatim.
func baselineCreateOrder(ctx context.Context, db *sql.DB, order Order) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin tx: %w", err)
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `
        INSERT INTO orders (id, customer_id, total, created_at)
        VALUES ($1, $2, $3, NOW())
    `, order.ID, order.CustomerID, order.Total); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}

	payload, err := json.Marshal(map[string]any{
		"order_id":    order.ID,
		"customer_id": order.CustomerID,
		"total":       order.Total,
	})
	if err != nil {
		return fmt.Errorf("marshal payload: %w", err)
	}

	if _, err := tx.ExecContext(ctx, `
        INSERT INTO outbox_events
            (aggregate_type, aggregate_id, event_type, payload)
        VALUES ($1, $2, $3, $4)
    `, "order", order.ID, "order.created", payload); err != nil {
		return fmt.Errorf("insert outbox event: %w", err)
	}

	return tx.Commit()
}

// pgoutboxCreateOrder is the same CreateOrder with the baseline's outbox
// INSERT replaced by pgoutbox's Writer: same driver, same transaction shape.
func pgoutboxCreateOrder(ctx context.Context, db *sql.DB, w *outbox.Writer, order Order) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin tx: %w", err)
	}
	defer tx.Rollback()

	if _, err := tx.ExecContext(ctx, `
        INSERT INTO orders (id, customer_id, total, created_at)
        VALUES ($1, $2, $3, NOW())
    `, order.ID, order.CustomerID, order.Total); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}

	payload, err := json.Marshal(map[string]any{
		"order_id":    order.ID,
		"customer_id": order.CustomerID,
		"total":       order.Total,
	})
	if err != nil {
		return fmt.Errorf("marshal payload: %w", err)
	}

	if _, err := w.WriteSQL(ctx, tx, outbox.Event{
		AggregateType: "order", AggregateID: order.ID, EventType: "order.created", Payload: payload,
	}); err != nil {
		return fmt.Errorf("insert outbox event: %w", err)
	}

	return tx.Commit()
}

// BaselinePublisher is the baseline's Publisher, plus the event id (see above).
type BaselinePublisher interface {
	Publish(ctx context.Context, id, eventType, aggregateID string, payload json.RawMessage) error
}

// baselinePublisherFor adapts an outbox.Publisher (the same in-memory and NATS
// publishers pgoutbox's relay uses) to the baseline's interface.
type baselinePublisherFor struct{ p outbox.Publisher }

func (a baselinePublisherFor) Publish(ctx context.Context, id, eventType, aggregateID string, payload json.RawMessage) error {
	uid, err := uuid.Parse(id)
	if err != nil {
		return err
	}
	return a.p.Publish(ctx, &outbox.Message{
		ID: uid, AggregateType: "order", AggregateID: aggregateID, EventType: eventType, Payload: payload,
	})
}

// OutboxRelay is the baseline's relay.
type OutboxRelay struct {
	db           *pgxpool.Pool
	publisher    BaselinePublisher
	logger       *slog.Logger
	batchSize    int
	pollInterval time.Duration
	maxAttempts  int
	channel      string // LISTEN loop only
}

func newBaselineRelay(pool *pgxpool.Pool, pub BaselinePublisher, schema string, logger *slog.Logger) *OutboxRelay {
	// The baseline's figures: batch 100 ("50-200 is typical"), 1 s poll, a
	// dead-letter view at 5 attempts.
	return &OutboxRelay{db: pool, publisher: pub, logger: logger, batchSize: 100,
		pollInterval: time.Second, maxAttempts: 5, channel: baselineChannel(schema)}
}

// Run is the baseline's first Run: processBatch on every tick.
func (r *OutboxRelay) Run(ctx context.Context) error {
	ticker := time.NewTicker(r.pollInterval)
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			if err := r.processBatch(ctx); err != nil {
				r.logger.Error("outbox relay batch failed", "err", err)
			}
		}
	}
}

// RunListen is the baseline's LISTEN/NOTIFY Run: one processBatch per
// notification, and a 5 s fallback ticker.
func (r *OutboxRelay) RunListen(ctx context.Context) error {
	listener, err := newListener(ctx, r.db.Config().ConnConfig, r.channel)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer listener.Close()

	ticker := time.NewTicker(5 * time.Second) // sondage de secours
	defer ticker.Stop()

	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-listener.Notify:
			if err := r.processBatch(ctx); err != nil {
				r.logger.Error("outbox batch failed (notify)", "err", err)
			}
		case <-ticker.C:
			if err := r.processBatch(ctx); err != nil {
				r.logger.Error("outbox batch failed (poll)", "err", err)
			}
		}
	}
}

// processBatch is the baseline's, verbatim but for pgx's API.
func (r *OutboxRelay) processBatch(ctx context.Context) error {
	tx, err := r.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin tx: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	rows, err := tx.Query(ctx, baselineClaimSQL, r.maxAttempts, r.batchSize)
	if err != nil {
		return fmt.Errorf("query outbox: %w", err)
	}
	defer rows.Close()

	type row struct {
		id            string
		aggregateType string
		aggregateID   string
		eventType     string
		payload       json.RawMessage
	}

	var batch []row
	for rows.Next() {
		var e row
		var id uuid.UUID
		if err := rows.Scan(
			&id, &e.aggregateType, &e.aggregateID, &e.eventType, &e.payload,
		); err != nil {
			return fmt.Errorf("scan row: %w", err)
		}
		e.id = id.String()
		batch = append(batch, e)
	}
	if err := rows.Err(); err != nil {
		return err
	}

	for _, e := range batch {
		if err := r.publisher.Publish(ctx, e.id, e.eventType, e.aggregateID, e.payload); err != nil {
			r.logger.Error("publish failed", "event_id", e.id, "err", err)
			if _, err := tx.Exec(ctx,
				`UPDATE outbox_events SET attempts = attempts + 1 WHERE id = $1`, e.id,
			); err != nil {
				r.logger.Error("increment attempts failed", "event_id", e.id, "err", err)
			}
			continue
		}

		if _, err := tx.Exec(ctx,
			`UPDATE outbox_events SET processed_at = NOW() WHERE id = $1`, e.id,
		); err != nil {
			return fmt.Errorf("mark processed: %w", err)
		}
	}

	return tx.Commit(ctx)
}

// listener stands in for lib/pq's pq.Listener: a dedicated connection whose
// notifications arrive on a 32-slot channel.
type listener struct {
	Notify chan *notification
	cancel context.CancelFunc
	done   chan struct{}
}

type notification struct{ Channel, Payload string }

func newListener(ctx context.Context, cc *pgx.ConnConfig, channel string) (*listener, error) {
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &listener{Notify: make(chan *notification, 32), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		defer conn.Close(context.Background())
		for {
			n, err := conn.WaitForNotification(lctx)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					slog.Default().Debug("baseline listener stopped", "err", err)
				}
				return
			}
			select {
			case l.Notify <- &notification{Channel: n.Channel, Payload: n.Payload}:
			case <-lctx.Done():
				return
			}
		}
	}()
	return l, nil
}

func (l *listener) Close() {
	l.cancel()
	<-l.done
}
