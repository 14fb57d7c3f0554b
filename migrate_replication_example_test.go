package outbox_test

import (
	"fmt"
	"strings"

	"github.com/pgoutbox/outbox"
)

// ReplicationSQL prints what a DBA runs to prepare the WAL source by hand:
// the publication, then the slot, both named after the table.
func ExampleReplicationSQL() {
	script, err := outbox.ReplicationSQL(outbox.MigrateConfig{})
	if err != nil {
		panic(err)
	}
	for _, line := range strings.Split(script, "\n") {
		if line != "" && !strings.HasPrefix(line, "--") {
			fmt.Println(line)
		}
	}
	// Output:
	// CREATE PUBLICATION "pgoutbox_outbox_events" FOR TABLE "outbox_events" WITH (publish = 'insert', publish_via_partition_root = true);
	// SELECT pg_create_logical_replication_slot(left('pgoutbox_' || regexp_replace(translate(current_database() || '_' || 'outbox_events', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'), '[^a-z0-9_]', '_', 'g'), 54) || '_' || left(encode(sha256(convert_to(current_database(), 'UTF8') || '\x00'::bytea || convert_to('', 'UTF8') || '\x00'::bytea || convert_to('outbox_events', 'UTF8')), 'hex'), 8), 'pgoutput');
	// UPDATE "outbox_events" SET retry_after = now() WHERE processed_at IS NULL AND retry_after IS NULL;
	// CREATE INDEX IF NOT EXISTS "outbox_events_handoff_idx" ON "outbox_events" (seq) WHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL AND retry_after IS NOT NULL;
	// CREATE INDEX IF NOT EXISTS "outbox_events_handoff_agg_idx" ON "outbox_events" (aggregate_type, aggregate_id, seq) WHERE processed_at IS NULL AND (retry_after IS NOT NULL OR dead_at IS NOT NULL);
	// DROP INDEX CONCURRENTLY IF EXISTS "outbox_events_ready_idx";
	// DROP INDEX CONCURRENTLY IF EXISTS "outbox_events_aggregate_idx";
}
