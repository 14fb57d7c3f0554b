// Package mqttinbox consumes MQTT 3.1.1 messages through an inbox: each
// message is processed in one database transaction with its deduplication
// record, and acknowledged to the broker (its PUBACK sent) only after that
// transaction committed.
//
//	in, _ := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	opts := paho.NewClientOptions().AddBroker("tcp://127.0.0.1:1883").SetClientID("shipping")
//	c, _ := mqttinbox.New(proc, mqttinbox.Config{})
//	err := c.Run(ctx, opts, "orders/#") // until ctx is cancelled
//
// Run makes a persistent session: clean session off, the client id as its
// name, every topic filter subscribed at QoS 1, and paho's automatic PUBACK
// off. The broker keeps the session's subscriptions and the messages not
// yet acknowledged while the consumer is away (Mosquitto: up to
// max_queued_messages, 1000 by default), and sends those again when it
// comes back. Each client id is one consumer: two processes with one id take
// the session from each other.
//
// Per message, one at a time in the order the broker delivered them:
// committed or already processed (a duplicate) ⇒ PUBACK; no usable envelope
// or outbox-event-id (see package mqtt) ⇒ PUBACK without running the
// handler, logged at error level, since no redelivery can fix that; the
// handler or the commit failed ⇒ retried in place with exponential backoff
// (Config.RetryBase to RetryMax) until it succeeds or ctx ends, since MQTT
// 3.1.1 has no negative acknowledgement: the messages behind it wait, which
// keeps each topic's order. A consumer that dies between the commit and the
// PUBACK leaves the message unacknowledged: the broker sends it again when
// the session reconnects, the inbox reports a duplicate, and it is
// acknowledged without running the handler again.
//
// PUBACKs go in the order the messages arrived, as MQTT 3.1.1 requires, so
// Run handles one message at a time (MQTT 3.1.1 allows at most 65535
// unacknowledged messages per session, and brokers send fewer: Mosquitto's
// max_inflight_messages is 20).
package mqttinbox
