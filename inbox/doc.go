// Package inbox is the consumer side of pgoutbox: an inbox table that makes a
// consumer's database effects happen once per event, however many times the
// broker delivers it.
//
// # Why
//
// The outbox relay publishes at least once: a crash between the broker's
// confirmation and marking the row sends the event again, and brokers
// redeliver whatever was not acknowledged. So a consumer must be idempotent:
// it records the ids of the events it processed (a processed_events table)
// and skips those it sees again. This package is that record, kept in the
// same transaction as the consumer's own writes, which is what makes it
// exact.
//
// # The guarantee
//
// Delivery is at-least-once; the inbox turns it into effectively-once effects.
// Handle records the event id in the processed_events table and runs your
// handler in the same PostgreSQL transaction, and the broker adapters
// acknowledge a delivery only after that transaction committed. A first
// delivery commits the record and the handler's writes together; a handler
// error, a failed commit or a crash before the commit leaves neither, and the
// unacknowledged delivery comes back (Kafka: is retried); a commit error that
// hides a commit which did happen (the connection died while COMMIT was being
// answered) only makes that redelivery a duplicate; a delivery of an event
// already recorded (a redelivery after a crash between commit and
// acknowledgement, a relay re-send, a second instance receiving it at the
// same moment) is recognised, skipped without calling the handler, and
// acknowledged. So each event's
// database writes happen exactly once per consumer. The limits: only what the
// handler writes through the transaction it is given is covered. An email
// sent, an HTTP API called, a message published or a file written from the
// handler is not rolled back with it and can happen again (make those
// idempotent on their own, for instance with the event id as an idempotency
// key, or write them to an outbox in the same transaction). The guarantee
// also holds only while the event's row exists: see Retention. And it is per
// Config.Consumer name: a consumer renamed starts from nothing.
//
// # Usage
//
// Create the table once, at deploy time (Migrate, MigrateDB, or MigrationSQL
// for goose/golang-migrate/atlas):
//
//	_, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{})
//
// Then process each delivery through Handle; the handler writes through the
// transaction it is given and must not commit it:
//
//	in, err := inbox.New(pool, inbox.Config{Consumer: "shipping"})
//	...
//	res, err := in.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, msg.AggregateID)
//		return err
//	})
//	// err != nil: nothing happened; let the broker redeliver (nak, requeue).
//	// err == nil: acknowledge; res.Duplicate says the handler was skipped.
//
// NewSQL gives the same for database/sql (the handler gets a *sql.Tx).
//
// # Broker adapters
//
// An adapter takes a broker subscription, builds the Message, runs it through
// a Processor (Inbox.Processor builds one from a handler that also receives
// the Message) and settles the delivery with the broker only after the
// transaction committed:
//
//	package        success or duplicate   handler/commit error              no valid event id
//	natsinbox      Ack                    Nak (NakWithDelay)                Term
//	rabbitmqinbox  basic.ack              basic.nack, requeue               basic.reject, no requeue
//	kafkainbox     CommitRecords          retry in place (no offset commit) skip, commit
//	redisinbox     XACK                   stay pending; XAUTOCLAIM later    XACK
//	httpinbox      204                    500 (the sender retries)          400; bad signature 401
//
//	proc := in.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error { ... })
//	c, err := natsinbox.New(proc, natsinbox.Config{})
//	...
//	err = c.Run(ctx, jsConsumer)
//
// Each adapter is tested on the real broker (kfake for Kafka) for
// redelivery after a handler error and after a crash between the commit and
// the acknowledgement. examples/orders runs an order service and a shipping
// service end to end, delivering every event twice.
//
// Message carries the event id, type, aggregate, creation time and every
// header; MessageFromHeaders builds it from the standard headers every
// pgoutbox publisher sets (outbox.HeaderEventID and the others). httpinbox
// is the exception: it fills only what the webhook signature covers (the id
// and the payload), since the other headers arrive unsigned. A message
// whose id is missing or invalid wraps ErrInvalidMessage: it can never be
// processed, and adapters terminate it instead of redelivering it forever.
//
// Every adapter reads CloudEvents too (a relay with
// outbox.RelayConfig.Envelope set, docs/CLOUDEVENTS.md), in binary or
// structured content mode: the CloudEvent's id is the event id, the
// subject the aggregate id, the time the creation time, its data the
// payload, and each extension attribute is a header of the same name
// (tenant, traceparent), so a handler is the same for both formats
// (MessageFromCloudEvent). httpinbox trusts a structured event's
// attributes, which the signature covers, and not binary mode's ce-
// headers, which it does not.
//
// # Replays
//
// `outbox replay` re-sends delivered events in one of two modes (see
// docs/REPLAY.md). A same-id replay keeps the event id: a consumer whose
// inbox recorded the event skips it (Result.Duplicate), a new consumer or an
// emptied inbox processes it. A new-id replay sends a copy under a fresh
// id, so every consumer processes it again, on purpose. Message.ReplayID
// (both modes) and Message.ReplayOf (new-id: the original id) say which is
// which; a handler that must not reprocess a copy returns early when
// ReplayOf is set, and one that must not see a same-id replay's effects
// twice needs nothing (the inbox skips it). Retention bounds the same-id
// semantics: an event whose inbox row was cleaned up is processed again.
//
// # The table
//
//	CREATE TABLE processed_events (
//	    consumer     TEXT        NOT NULL,
//	    event_id     UUID        NOT NULL,
//	    processed_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
//	    PRIMARY KEY (consumer, event_id)
//	);
//	CREATE INDEX processed_events_processed_at_idx ON processed_events (consumer, processed_at);
//
// The consumer's name is part of the key, so several consumers of one
// database share the table and keep separate records. Schema and
// table are configurable and always quoted. Migrations are recorded in the
// same pgoutbox_migrations table as the outbox's, under the target
// "inbox:<schema>.<table>", and take the same advisory lock.
//
// # Concurrency
//
// Handle's first statement is INSERT ... ON CONFLICT DO NOTHING. When two
// instances receive the same event at once, the second insert waits on the
// first's uncommitted row; if the first commits, the second sees the conflict
// and reports a duplicate; if it rolls back, the second processes the event.
// The handler never runs twice concurrently for one consumer and event, and
// a slow handler whose delivery is redelivered meanwhile (an ack deadline
// passed) does not run twice either. The transaction uses the database's
// default isolation (READ COMMITTED).
//
// # Retention
//
// Rows grow by one per event and consumer. Cleanup deletes a consumer's rows
// older than a given age, in bounded batches; run it periodically. Keep rows
// longer than the longest possible redelivery window: the broker's retention
// or maximum redelivery age (how long a stream, topic or queue can hand the
// same message back, including a consumer replaying from an old offset), plus
// how long the outbox relay may keep retrying a publish, plus a margin. A
// redelivery that arrives after its row was deleted runs the handler again.
// Days to weeks is typical; the table is small (about 60 bytes a row).
//
// # Tracing and dependencies
//
// Set Config.Tracer to inboxotel.New(tp) (package inbox/inboxotel) and each
// message's processing becomes a consumer span that continues the trace the
// relay sent in the message's traceparent header; without it Handle starts
// no span. This package and its adapters link only the wire format
// (outboxtype), pgx, uuid and their broker's client: none of the relay, its
// metrics or OpenTelemetry (ARCHITECTURE.md gives the figure; a test keeps
// it).
package inbox
