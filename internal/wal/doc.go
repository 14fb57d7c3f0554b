// Package wal reads committed outbox events from a PostgreSQL logical
// replication slot (the pgoutput plugin), the relay's second event source.
//
// It is standalone: it knows the outbox table's columns but not the engine.
// Names derives the publication and slot of a table; Check verifies the
// server and role can stream (wal_level, REPLICATION, free slots and WAL
// senders) and returns a *PrereqError naming the setting and its fix;
// Create and Drop manage the publication and slot (or print their SQL for a
// DBA); Stream reads committed transactions of outbox events in commit order
// and advances the slot's confirmed position only past transactions the
// caller acknowledged.
//
// One process streams a slot at a time: PostgreSQL refuses a second
// START_REPLICATION on an active slot, which Stream reports as ErrSlotBusy so
// a standby relay waits and retries.
package wal
