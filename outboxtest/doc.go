// Package outboxtest is the test kit for code that writes outbox events and
// for the consumers that receive them: assert what a transaction wrote, run
// the relay synchronously, and check that a consumer is idempotent. It runs
// against a real PostgreSQL, like the code under test.
//
// # A schema per test
//
// NewDB creates a schema of the test's own, with the outbox and inbox tables
// migrated, and drops it when the test ends, so tests can run in parallel:
//
//	func TestCreateOrder(t *testing.T) {
//		t.Parallel()
//		db := outboxtest.NewDB(t, os.Getenv("TEST_DATABASE_URL"))
//		...
//	}
//
// # What a transaction wrote
//
// RequireWritten finds the one event matching a Match (event type,
// aggregate, a JSON document the payload contains, a predicate), through the
// transaction your code wrote in while it is still open (pgx.Tx or *sql.Tx),
// or through a pool once it committed. It returns the event, and its
// failure lists the events the table holds:
//
//	tx, _ := db.Pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	if err := orders.Create(ctx, tx, order); err != nil {
//		t.Fatal(err)
//	}
//	outboxtest.RequireWritten(t, tx, outboxtest.Match{
//		EventType: "order.created", AggregateID: order.ID,
//		PayloadContains: `{"total": 99.5}`,
//	})
//
// RequireWrittenN counts, RequireNotWritten checks nothing was written (a
// rolled-back order, say), Written returns the matches without asserting.
// InTable names an outbox table other than outbox_events.
//
// # Relaying without a broker or a sleep
//
// A Relay publishes into a memory.Publisher. Drain runs relay passes until
// nothing is left to claim and returns what they published; RequirePublished
// asserts on it. For a relay running in the background (relay.Run),
// WaitPublished waits for a message, woken by each publish, with no polling
// and no sleep.
//
// # Idempotent consumers
//
// Delivered turns a published message into the inbox.Message a broker
// adapter hands the consumer; RequireIdempotent delivers it twice and checks
// that the handler's effects happened once.
//
// The package is modelled on River's rivertest.
package outboxtest
