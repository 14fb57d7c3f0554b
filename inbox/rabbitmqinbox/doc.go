// Package rabbitmqinbox consumes RabbitMQ (AMQP 0-9-1) deliveries through an
// inbox: each delivery is processed in one database transaction with its
// deduplication record, and acknowledged to the broker only after that
// transaction committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	c, _ := rabbitmqinbox.New(proc, rabbitmqinbox.Config{Prefetch: 10})
//	conn, _ := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
//	ch, _ := conn.Channel()
//	err := c.Run(ctx, ch, "shipping.order-created") // until ctx is cancelled or the channel closes
//
// Per delivery: committed or already processed (a duplicate) ⇒ basic.ack;
// the handler or the commit failed ⇒ basic.nack with requeue, so the broker
// delivers it again; no usable event id ⇒ basic.reject without requeue (to
// the queue's dead-letter exchange if it has one), since no redelivery can
// fix that. A consumer that dies between the commit and the ack leaves the
// delivery unacknowledged: RabbitMQ requeues it when the channel closes, the
// inbox reports a duplicate, and it is acknowledged without running the
// handler again.
//
// The event id is the outbox-event-id header, or else the AMQP message_id
// (the rabbitmq publisher sets both); the event type falls back to the AMQP
// type property. Queues, bindings, dead-lettering and reconnecting are the
// application's: Run returns when the channel closes, and the caller opens
// a new one and calls Run again.
package rabbitmqinbox
