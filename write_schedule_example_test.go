package outbox_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox"
)

// An event written now and delivered a day later: the relay publishes it no
// earlier than that, and within about one poll interval after it. In
// ordered mode it holds back the later events of order 42 until then.
func ExampleEvent_delay() {
	remind := func(ctx context.Context, tx pgx.Tx) error {
		_, err := outbox.Write(ctx, tx, outbox.Event{
			AggregateType: "order", AggregateID: "42", EventType: "order.payment_reminder",
			Payload: []byte(`{"order_id":"42"}`),
			Delay:   24 * time.Hour, // or DeliverAt: a time.Time
		})
		return err
	}
	_ = remind
}
