// Package natsinbox consumes NATS JetStream messages through an inbox: each
// message is processed in one database transaction with its deduplication
// record, and acknowledged to JetStream only after that transaction
// committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	js, _ := jetstream.New(nc)
//	cons, _ := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
//		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
//	})
//	c, _ := natsinbox.New(proc, natsinbox.Config{NakDelay: time.Second})
//	err := c.Run(ctx, cons) // until ctx is cancelled
//
// Per message: committed or already processed (a duplicate) ⇒ Ack; the
// handler or the commit failed ⇒ Nak (NakWithDelay when Config.NakDelay is
// set), so JetStream redelivers it; no valid outbox-event-id header ⇒
// Term, since no redelivery can fix that (logged at error level). A process that dies
// between the commit and the Ack leaves the message unacknowledged:
// JetStream redelivers it after the consumer's AckWait, the inbox reports a
// duplicate, and it is acknowledged without running the handler again.
//
// The consumer (durable, AckExplicitPolicy, AckWait, MaxDeliver, BackOff) is
// the application's to configure. Make AckWait longer than a handler usually
// takes; if a handler outlives it, the redelivery waits on the inbox row lock
// and is then skipped as a duplicate, so effects still happen once.
package natsinbox
