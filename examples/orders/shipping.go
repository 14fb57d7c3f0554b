package orders

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/inbox"
)

// The shipping service: consumes order.created through the inbox and creates
// one shipment per order.
//
// Its shipments table deliberately has no unique constraint on order_id: the
// inbox alone keeps a redelivered order.created from shipping an order twice,
// and the story counts rows to show it.

// ShippingService turns order.created into shipments.
type ShippingService struct {
	inbox *inbox.Inbox

	// What the story reports; a real service would export metrics.
	deliveries, processed, duplicates, failures atomic.Int64
}

// HandleOrderCreated ships the order. It only writes through tx, which the
// inbox commits together with the event's processed_events row: the
// shipment and the record that the event was handled stand or fall
// together.
func (s *ShippingService) HandleOrderCreated(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
	if msg.EventType != "order.created" {
		return nil // not ours; recorded as processed so it is not seen again
	}
	var ev OrderCreated
	if err := json.Unmarshal(msg.Payload, &ev); err != nil {
		return fmt.Errorf("decode order.created: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id, created_at) VALUES ($1, now())`, ev.OrderID)
	return err
}

// Processor is what the broker adapter runs for each delivery.
func (s *ShippingService) Processor() inbox.Processor {
	proc := s.inbox.Processor(s.HandleOrderCreated)
	return func(ctx context.Context, msg inbox.Message) (inbox.Result, error) {
		s.deliveries.Add(1)
		res, err := proc(ctx, msg)
		switch {
		case err != nil:
			s.failures.Add(1)
		case res.Duplicate:
			s.duplicates.Add(1)
		default:
			s.processed.Add(1)
		}
		return res, err
	}
}
