// Package httpinbox receives signed webhooks through an inbox: an
// http.Handler that verifies the Standard Webhooks signature (as sent by the
// webhook publisher) before anything else, processes the event in one
// database transaction with its deduplication record, and answers 2xx only
// after that transaction committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "billing.webhooks"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		var order struct{ OrderID string `json:"order_id"` }
//		if err := json.Unmarshal(msg.Payload, &order); err != nil { // the signed body
//			return err
//		}
//		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, order.OrderID)
//		return err
//	})
//	h, _ := httpinbox.New(proc, httpinbox.Config{Secrets: []string{os.Getenv("WEBHOOK_SECRET")}})
//	http.Handle("POST /hooks/orders", h)
//
// Responses, chosen so a Standard Webhooks sender (the webhook publisher
// included) does the right thing:
//
//	204 No Content           processed and committed, or already processed (a duplicate)
//	401 Unauthorized         signature headers missing, signature wrong, timestamp outside Tolerance
//	400 Bad Request          signed, but webhook-id is not a UUID or disagrees with outbox-event-id
//	405, 413                 not a POST; body over MaxBodyBytes
//	500 Internal Server Error the handler or the commit failed: nothing was recorded, the sender retries
//
// A sender that never got the 204 for a committed event (a dropped
// connection, a timeout) sends it again; the inbox recognises it and answers
// 204 without running the handler.
//
// # What the handler can trust
//
// The Standard Webhooks signature covers webhook-id, webhook-timestamp and the
// body, and nothing else. So the Message a handler gets holds only those: ID
// is webhook-id (the webhook publisher sets it to the outbox event id),
// Payload is the body byte for byte, Headers holds webhook-id and
// webhook-timestamp. EventType, AggregateType, AggregateID and CreatedAt are
// left zero: the webhook publisher sends them as outbox-* headers, unsigned,
// and anyone on the path could rewrite them with the signature still valid.
// Put what the handler decides on in the payload (the outbox row's payload
// is what arrives as the body).
//
// The unsigned headers are kept apart, in UnsignedHeader(ctx), for logs and
// metrics. The W3C trace context among them (Outbox-Header-Traceparent) is
// copied into the message's Headers as traceparent and tracestate, so that
// an inbox.Tracer (inboxotel) makes it the parent of the consumer span: it
// links spans and decides nothing.
//
// The package imports the inbox, the wire format (outboxtype) and the
// signature check (webhook/signature), and none of the publisher.
package httpinbox
