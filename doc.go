// Package outbox is pgoutbox: the transactional outbox for Go services on
// PostgreSQL.
//
// # The problem
//
// A service saves an order, then publishes order.created to a broker. The two
// writes share no transaction: sooner or later the first succeeds and the
// second fails (broker down, timeout, process killed) and downstream services
// never hear about the order. That is the dual-write problem.
//
// # The fix: write the event in your transaction
//
// With an outbox, business code never talks to the broker. It writes the event
// into the outbox table in the same PostgreSQL transaction as the business
// data, so both are committed or neither is:
//
//	tx, err := db.BeginTx(ctx, nil)
//	...
//	_, err = tx.ExecContext(ctx, `INSERT INTO orders ...`, ...)
//	...
//	payload, _ := outbox.JSONPayload(map[string]any{"order_id": o.ID, "total": o.Total})
//	ids, err := outbox.WriteSQL(ctx, tx, outbox.Event{
//		AggregateType: "order", AggregateID: o.ID, EventType: "order.created", Payload: payload,
//	})
//	...
//	err = tx.Commit()
//
// Write (pgx.Tx) and WriteSQL (*sql.Tx, any driver) join the caller's
// transaction and never begin, commit or roll back one. Many events cost one
// statement. Event ids are UUIDv7, generated in the process and returned, so
// they can be logged. Events are validated first (empty or overlong fields,
// invalid JSON, \u0000, control characters in headers) with a ValidationError
// naming the field; a rejected event does not abort the caller's transaction.
// With pgx, Writer.Queue (or Queue) puts the events' INSERT on a pgx.Batch
// that carries the caller's own statements, so they cost no round trip of
// their own; the batch commits with the caller's transaction.
//
// An application may also write events with a plain INSERT of
// aggregate_type, aggregate_id, event_type and payload: every other column
// has a default.
//
// # The relay
//
// A Relay claims pending rows with FOR UPDATE SKIP LOCKED, publishes them,
// waits for the broker's confirmation and marks the batch in one statement:
//
//	pool, _ := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	_, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{})
//	pub, _ := outboxnats.New(nc, outboxnats.Config{Subject: "events.{event_type}"})
//	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Logger: slog.Default()})
//	go relay.Run(ctx) // returns after ctx is cancelled and the batch in flight is done
//
// Run it in your binary, as above, or as the separate `outbox relay` daemon
// (cmd/outbox). Any number of workers and processes may run at once.
//
// Batches hold up to RelayConfig.BatchSize rows (1000), fewer while a slow
// destination takes more than a quarter of PublishTimeout. Claims start past
// the rows already processed (their index entries stay until VACUUM); one
// claim per RescanInterval reads from the start, for transactions that
// committed late and retries that came due. With RelayConfig.Listen and a
// Notifier in the writing process, a relay is woken within milliseconds of a
// commit; under a heavy stream both space their wake-ups out (BatchDelay,
// NotifierConfig.MaxInterval) so that the relay's claims stay cheap for the
// application's transactions.
//
// # Ordering
//
// With RelayConfig.Ordered, events of one aggregate (aggregate_type +
// aggregate_id) reach the broker in insertion order, whatever the workers,
// processes, retries and crashes: a later event is never confirmed before an
// earlier one was first confirmed. A failing event holds back only its
// aggregate: its later events are held (parked out of the claim's way) until
// it is published, and behind a dead letter until an operator re-queues it.
//
// A failed publish never stops a batch: the row's attempts grow, last_error
// records why, and retry_after backs it off exponentially with jitter; at
// RelayConfig.MaxAttempts (default 10), or at once for an error wrapped with
// Permanent, it becomes a dead letter (dead_at set, visible in the
// outbox_dead_letters view) and is never claimed again until an operator
// re-queues it (package admin's Admin.Retry, `outbox retry`). A broker
// outage is not a message failure: errors wrapped with Unavailable,
// connection errors, and a batch where nothing was confirmed before
// PublishTimeout make the relay back off as a whole without counting
// attempts, so an outage of any length drains with zero dead letters once
// the broker is back.
//
// # Guarantees
//
//   - At-least-once: a row is marked processed only after the broker confirmed
//     it. A crash between confirmation and mark republishes the event.
//   - Every message carries the event id as its deduplication key (JetStream
//     Nats-Msg-Id, the outbox-event-id header, ...): consumers deduplicate on
//     it, for example with an inbox table, so effects happen once.
//   - Without faults, no event is published twice, however many relays run.
//   - A hung broker holds no lock past PublishTimeout; a stalled relay process
//     loses its locks to idle_in_transaction_session_timeout.
//
// # Publishers
//
// Publisher is one method; BatchPublisher pipelines a batch; HealthChecker
// feeds readiness. This module ships nats (JetStream), kafka, rabbitmq, redis
// (Streams), sqs, webhook (signed webhooks), memory (tests) and jsonl
// (debugging); publishertest is the conformance suite every publisher runs.
//
// # Operating
//
// Metrics (RelayConfig.Registerer) are outbox_events_published_total,
// outbox_events_failed_total{event_type}, outbox_events_pending,
// outbox_batch_duration_seconds, plus outbox_dead_letters,
// outbox_publish_lag_seconds and others. Logs are slog,
// with event_id, event_type, aggregate_id and attempt on every line about an
// event; payloads are never logged. Package admin reads status and dead
// letters, re-queues, replays and cleans up, for the outbox command and the
// console. Migrations are embedded, numbered, applied under an
// advisory lock (Migrate), and exported as plain SQL (MigrationSQL, and the
// migrations/ folder) for teams with their own migration tool.
package outbox
