// Package engine is the relay behind outbox.Relay; nothing here is part of
// the API.
//
// A batch runs in four phases, with a typed value handed from one to the
// next. Both sources share them: the table source claims rows under a
// transaction (tableLease), the WAL source turns streamed transactions into
// a claim (walLease), and Engine.deliver runs the rest.
//
//	claim   rows held for this engine, and the lease that holds them
//	publish one Attempt per row, classified by the root package
//	settle  one outcome per row: published, retry, dead, untouched
//	record  the outcomes written for good, then observed
//
// The files, by concern:
//
// Shared by both sources:
//
//	engine.go       the Engine, its start checks (table, indexes, encoding)
//	config.go       Config, the Row and its fields
//	batch.go        Batch and deliver: publish, settle, record, observe
//	publish.go      publishing a batch under one deadline, ordered rounds
//	settle.go       verdicts and delays per row
//	record.go       the table lease's mark, observe
//	alone.go        a message failing alone, told from an outage
//	deadline.go     statement and DDL deadlines, phases of errors
//	explain.go      runtime errors that name a GRANT or a TLS setting
//	ids.go          event ids as bind parameters
//	stuck.go        the stuck detector
//	unrecorded.go   published but not recorded: counting, backing off
//	plans.go        why statements use custom plans
//	tuning.go       batch size, sparse ordered claim, claim pace
//
// The table source:
//
//	claim.go        the claim plan and the table lease
//	cursor.go       the claim floor and the rescan
//	scan.go         reading claimed rows
//	payload.go      the byte budget, payloads read after the claim
//	poison.go       rows that kill the relay, counted before they are read
//	worker.go       the claim loops, their waits and outage backoff
//	listen.go       LISTEN wake-ups
//	schedule.go     releasing scheduled events when due
//	housekeeping.go gauges, held events
//	cleanup.go      deleting old processed rows
//
// The WAL source (a logical replication stream whose failures, scheduled
// and held events go to the table workers):
//
//	wal.go          streaming, standing by, falling back, the slot's gauges
//	walbatch.go     gathering and planning a batch, the WAL lease
//	walrecord.go    background deletes, the record, acknowledgements
//	walorder.go     ordered mode across the stream and the table path
//	walcancel.go    cancelled events dropped before publishing
//	walvisible.go   waiting for streamed commits to be visible
//	walpartition.go rotating and dropping partitions
//
// SQL lives in internal/store (the table's statements) and internal/wal
// (replication); the engine writes only BEGIN, COMMIT and ROLLBACK.
package engine
