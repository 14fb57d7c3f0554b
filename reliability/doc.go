// Package reliability is pgoutbox's Jepsen-style reliability and security
// suite: real relay processes (the outbox binary), real PostgreSQL, real NATS
// JetStream servers, and faults injected while writers run — SIGKILL and
// SIGSTOP of relays, pg_terminate_backend, broker restarts, network faults
// through a proxy the test controls, PostgreSQL timeouts — followed by a
// check of the whole history.
//
// The library part of the package is the history and its checker:
//
//   - History records every event a writer tried to write, with its outcome:
//     committed (COMMIT returned OK), rolled back, or ambiguous (COMMIT's
//     result is unknown, e.g. the connection died while it was in flight).
//     Ambiguous events are later resolved against the table.
//   - Delivery is one message the broker holds, in the broker's order.
//   - Check compares the two: lost (committed, never delivered), unexpected
//     (rolled back, yet delivered), duplicated (stored more than once),
//     per-aggregate inversions (an event first stored before an earlier event
//     of its aggregate), corrupted (a message whose body is not what was
//     written).
//   - Report renders the results as RELIABILITY.md.
//
// The scenarios are the package's tests. One command runs them and writes
// RELIABILITY.md from the checker's results:
//
//	go test ./reliability -count=1 -v -reliability.report RELIABILITY.md
//
// and, for the long version (minutes of outage, millions of rows, real
// PostgreSQL restarts: do not run it beside other tests):
//
//	go test ./reliability -count=1 -v -timeout 3h -reliability.long -reliability.report RELIABILITY.md
//
// A relative report path is taken from the repository root. The CI size also
// runs, without a report, under the repository's `go test -race ./...`.
package reliability
