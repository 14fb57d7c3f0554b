// Package pubsubinbox consumes Google Cloud Pub/Sub messages through an
// inbox: each message is processed in one database transaction with its
// deduplication record, and acknowledged to Pub/Sub only after that
// transaction committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	client, _ := pubsub.NewClient(ctx, "my-project")
//	c, _ := pubsubinbox.New(proc, pubsubinbox.Config{})
//	err := c.Run(ctx, client.Subscriber("shipping")) // until ctx is cancelled
//
// Per message: committed or already processed (a duplicate) ⇒ Ack; the
// handler or the commit failed ⇒ Nack, so Pub/Sub delivers it again (after
// the subscription's retry policy's backoff, or to its dead-letter topic
// after its maximum delivery attempts); no usable outbox-event-id attribute
// ⇒ Ack without running the handler, logged at error level, since no
// redelivery can fix that. A consumer that dies between the commit and the
// Ack leaves the message unacknowledged: Pub/Sub delivers it again once its
// ack deadline passes, the inbox reports a duplicate, and it is acknowledged
// without running the handler again.
//
// The Ack is sent with AckWithResult and its answer awaited (at most
// Config.AckTimeout): on a subscription with exactly-once delivery, a
// failed Ack is logged and returned by Handle (the effects are committed, so
// the redelivery will be a duplicate); other subscriptions answer at once.
//
// The subscription (its topic, ack deadline, retry policy, dead-letter
// topic, message ordering) is the application's. With message ordering
// enabled (the pubsub publisher sets the aggregate id as ordering key), the
// client hands one aggregate's messages to Handle one at a time, in order,
// and a Nack makes Pub/Sub deliver that aggregate's later messages again
// after it, so they never overtake it. Receive's flow control
// (pubsub.Subscriber.ReceiveSettings) bounds the messages handled at once.
package pubsubinbox
