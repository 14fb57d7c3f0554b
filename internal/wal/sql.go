package wal

import (
	"fmt"
	"strings"
)

// Plugin is the logical decoding output plugin the stream reads: pgoutput,
// built into PostgreSQL 10 and later and available on managed services.
const Plugin = "pgoutput"

// CreatePublicationSQL is the statement creating the table's publication.
// It publishes inserts only: the stream reads new events, and the relay's
// own updates and deletes of the table (marks, cleanup) never reach the WAL
// decoder's output. publish_via_partition_root makes a partitioned outbox
// table's rows arrive under the table's own name (PostgreSQL 13+).
func (n Names) CreatePublicationSQL() string {
	return fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)", n.QPublication, n.Table.QTable)
}

// FailoverVersion is the first PostgreSQL (server_version_num) whose
// logical slots can follow a failover: a slot created with the failover
// option is copied to standbys that set sync_replication_slots, so a
// promoted standby has it at a confirmed position.
const FailoverVersion = 170000

// createSlotQuery is the statement creating a slot ($1) with the pgoutput
// plugin ($2); on FailoverVersion and later, with the failover option, so
// that a standby can keep it (what it costs a primary without such a
// standby is nothing).
func createSlotQuery(version int) string {
	if version >= FailoverVersion {
		return `SELECT pg_create_logical_replication_slot($1, $2, false, false, true)`
	}
	return `SELECT pg_create_logical_replication_slot($1, $2)`
}

// DropSlotSQL is the statement dropping the table's slot. It fails while a
// relay streams from it (Drop terminates that relay's connection first).
func (n Names) DropSlotSQL() string {
	return fmt.Sprintf("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", literal(n.Slot))
}

// DropPublicationSQL is the statement dropping the table's publication.
func (n Names) DropPublicationSQL() string {
	return "DROP PUBLICATION IF EXISTS " + n.QPublication
}

// HandoffPredicate is what makes a pending row the table path's in WAL
// mode: a relay, the backlog marking or an operator touched it
// (retry_after is NULL only on a row as its writer inserted it).
const HandoffPredicate = "retry_after IS NOT NULL"

// HandoffIndexSQL creates the partial indexes of the rows handed over to
// the table path: the ready ones by seq, which a WAL relay's table workers
// claim through, so a backlog the stream has not reached costs those
// claims nothing; and every unprocessed one by aggregate and seq, where the
// stream's order check (ordered mode) finds the first of an aggregate in one
// probe however many events of it wait. A row as its writer inserted it is
// in neither: the writers pay nothing for them.
func (n Names) HandoffIndexSQL() ([]string, error) {
	idx, agg, err := n.handoffIndexes()
	if err != nil {
		return nil, err
	}
	return []string{
		"CREATE INDEX IF NOT EXISTS " + idx + " ON " + n.Table.QTable +
			" (seq) WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL AND " + HandoffPredicate,
		"CREATE INDEX IF NOT EXISTS " + agg + " ON " + n.Table.QTable +
			" (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL AND (" + HandoffPredicate + " OR dead_at IS NOT NULL)",
	}, nil
}

// handoffIndexes are the unqualified names of HandoffIndexSQL's indexes.
func (n Names) handoffIndexes() (idx, agg string, err error) {
	if idx, err = n.Table.HandoffIndex(); err != nil {
		return "", "", err
	}
	agg, err = n.Table.HandoffOrderIndex()
	return idx, agg, err
}

// MarkBacklogSQL hands the pending rows the slot will not stream (committed
// before it was created) to the table path. It runs after the slot is
// created: a row committed in between is both streamed and handed over,
// a duplicate at worst, never a loss.
func (n Names) MarkBacklogSQL() string {
	return "UPDATE " + n.Table.QTable + " SET retry_after = now() WHERE processed_at IS NULL AND retry_after IS NULL"
}

// Script returns the SQL a DBA runs to prepare the WAL source by hand, with
// the grants and settings it needs as comments, for `outbox migrate sql`.
func (n Names) Script() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- pgoutbox WAL source for %s: publication and logical replication slot.\n", n.Table.QTable)
	b.WriteString("-- Needs wal_level = logical (restart), a free slot (max_replication_slots)\n")
	b.WriteString("-- and WAL sender (max_wal_senders), and a relay role with REPLICATION:\n")
	b.WriteString("--   ALTER ROLE <relay role> WITH REPLICATION;\n")
	b.WriteString("-- Amazon RDS / Aurora: rds.logical_replication = 1 in the parameter group,\n")
	b.WriteString("--   GRANT rds_replication TO <relay role>;\n")
	b.WriteString("-- Google Cloud SQL: cloudsql.logical_decoding = on (database flag),\n")
	b.WriteString("--   ALTER USER <relay role> WITH REPLICATION;\n")
	b.WriteString("-- Cap the WAL a stalled relay can retain (PostgreSQL 13+):\n")
	b.WriteString("--   ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf();\n")
	b.WriteString("-- The publication comes first: the slot decodes with the catalog as of its creation.\n")
	b.WriteString(n.CreatePublicationSQL())
	b.WriteString(";\n")
	// The slot's name includes the database's, which the server knows.
	b.WriteString("-- PostgreSQL 17+: add the arguments false, false, true (failover) so that standbys\n")
	b.WriteString("--   with sync_replication_slots = on keep the slot across a failover.\n")
	fmt.Fprintf(&b, "SELECT pg_create_logical_replication_slot(%s, %s);\n", slotNameSQL(n.Table.Schema, n.Table.Table), literal(Plugin))
	b.WriteString("-- Rows pending from before the slot go to the relay's table workers:\n")
	b.WriteString(n.MarkBacklogSQL())
	b.WriteString(";\n")
	if idx, err := n.HandoffIndexSQL(); err == nil {
		b.WriteString("-- The rows a WAL relay's table workers claim (failed, held, scheduled, re-queued),\n")
		b.WriteString("-- and the same by aggregate, for the order check of ordered mode:\n")
		for _, s := range idx {
			b.WriteString(s)
			b.WriteString(";\n")
		}
	}
	if drop, err := n.DropTableSourceIndexesSQL(); err == nil {
		b.WriteString("-- The indexes only a table source reads (its claims): a WAL relay does without\n")
		b.WriteString("-- them, and each event then costs its writer two index entries fewer.\n")
		b.WriteString("-- Run outside a transaction block (CONCURRENTLY):\n")
		for _, s := range drop {
			b.WriteString(s)
			b.WriteString(";\n")
		}
	}
	b.WriteString("-- To remove them (stop the relays first; an active slot cannot be dropped):\n")
	b.WriteString("-- SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = current_database() AND slot_name IN (" +
		slotNameSQL(n.Table.Schema, n.Table.Table) + ", " + literal(n.LegacySlot) + ");\n")
	b.WriteString("-- " + n.DropPublicationSQL() + ";\n")
	if create, err := n.CreateTableSourceIndexesSQL(); err == nil {
		b.WriteString("-- and set the table up for the table source again:\n")
		for _, s := range create {
			b.WriteString("-- " + s + ";\n")
		}
	}
	return b.String()
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
