// Package admin is the operator's side of the outbox: what the relay and the
// application's writes left in the table, and what an operator does about it.
// The `outbox` command (status, dead-letters, retry, discard, cancel,
// cleanup, archive, replay) and the operator console (package console) are
// built on it; an application can expose the same operations on its own admin
// endpoints.
//
// Applications do not need it: they write events and run the relay with the
// root package, outbox, and consumers read what they receive with the inbox
// (or outboxtype). This package imports outbox, never the other way round, so
// an application that only writes and relays does not link it.
//
// # An Admin
//
// New takes the pool and a Config naming the outbox table, as the Writer and
// the relay do; Config's zero value is the default table on the pool's
// search_path:
//
//	a, err := admin.New(pool, admin.Config{Schema: "app"})
//	if err != nil {
//		return err // a *outbox.ConfigError naming admin.Config and the field
//	}
//	st, err := a.Status(ctx)
//
// Every call is bounded by Config.StatementTimeout (DefaultStatementTimeout,
// or the pool's statement_timeout plus 5s), besides ctx: past it the call
// returns a *StatementTimeoutError naming the database and drops the
// connection, rather than waiting minutes for a host that stopped answering.
// Cleanup and Archive bound each batch.
//
// # What it reads
//
// Status counts pending, scheduled, held and dead events in total and per
// event type, with how old the oldest pending event is, and, once events have
// been due for Config.StuckAfter, what the database shows that can hold the
// relays (Status.Waiting). PublishedPerMinute, BlockedAggregateList, Events
// and AggregateTimeline are the console's pages; ReplayTotals and
// ReplayCollector count replayed copies for status pages and Prometheus.
//
// # Dead letters
//
// A dead letter is an event the relay stopped trying
// (outbox.RelayConfig.MaxAttempts reached, or an outbox.Permanent error).
// DeadLetters lists them; DeadLetterGroups counts them per event type and
// normalised error, and a group's Selector selects exactly its members for
// DeadLetterGroupMembers, Retry and Discard. Retry re-queues them (the relay
// publishes them again at once); Discard deletes them for good, releasing
// the events an ordered relay held behind them. Both take DryRun. Cancel
// deletes events not yet published, whatever their state.
//
// # History
//
// Cleanup deletes published rows past a retention, Archive moves them to the
// archive table instead, and Replay re-queues delivered events, from either
// table, under their own ids or fresh ones (ReplayMode), keeping each
// aggregate's order with an ordered relay. Consumers tell a replayed copy by
// its headers, outbox.HeaderReplayID and outbox.HeaderReplayOf.
//
// # Errors
//
// A table that is missing or too old gives an error matching
// outbox.ErrNotMigrated, another table of its name outbox.ErrNotOutboxTable,
// and a role that lacks a GRANT a *outbox.PrivilegeError (outbox.ErrPrivilege)
// whose text is the GRANT the table's owner runs. docs/OPERATING.md's
// "Database roles" lists what each operation needs.
package admin
