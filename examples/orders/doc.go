// Package orders is the transactional outbox end to end, as one story: an
// order service and a shipping service on PostgreSQL and NATS JetStream.
//
//   - The order service (OrderService) saves each order and its
//     order.created event in one transaction with outbox.Writer; its relay
//     (outbox.Relay with the nats publisher) runs in the same process.
//   - The shipping service (ShippingService) consumes order.created with
//     inbox/natsinbox and, through the inbox, writes one row to shipments per
//     order. shipments has no unique constraint on order_id: only the inbox
//     stands between a redelivery and a second shipment.
//
// Run tells the story with failures on the way: some order transactions
// roll back after writing their event, the broker goes away and comes back,
// the relay is stopped and restarted, and every event is delivered a second
// time, as after a relay crash between the broker's acknowledgement and the
// mark. At the end it counts, in the database, that every committed order
// shipped exactly once and no rolled-back order ever did.
//
// `outbox demo` runs it with an embedded NATS server:
//
//	go run ./cmd/outbox demo
//	go run ./cmd/outbox demo --orders 100 --broker nats://127.0.0.1:4222
package orders
