package wal

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// A row inserted already on the table path (retry_after or dead_at set) or
// already delivered (processed_at set) is not the stream's: the table
// workers own it. On a partitioned table, a parked event whose new seq
// takes it to another partition is such an insert, and so are the events a
// compaction copies back: none of them is streamed again.
func TestStreamLeavesHandedOverRows(t *testing.T) {
	t.Parallel()
	pool, schema, _ := migrated(t, true)
	ctx := context.Background()
	b := withSlot(t, pool, schema, "outbox_events")
	s := b.open(t, b.config())
	must := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ins := `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload%s) VALUES ('order', 'o1', '%s', '{}'%s)`
	must(fmt.Sprintf(ins, ", retry_after", "handed", ", now()"))
	must(fmt.Sprintf(ins, ", dead_at", "dead", ", now()"))
	must(fmt.Sprintf(ins, ", processed_at", "processed", ", now()"))
	must(fmt.Sprintf(ins, "", "parked-later", ""))
	if got := eventTypes(next(t, s)); !slices.Equal(got, []string{"parked-later"}) {
		t.Fatalf("first streamed transaction has %v, want [parked-later] alone", got)
	}
	// Rotate, then park the event: its new seq moves it to partition 1,
	// which PostgreSQL logs as an insert there.
	p1, err := Attach(ctx, pool, b.names, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Advance(ctx, pool, b.names, p1); err != nil {
		t.Fatal(err)
	}
	must(`UPDATE outbox_events SET held_by = gen_random_uuid(), dead_at = now(), retry_after = now(), seq = DEFAULT WHERE event_type = 'parked-later'`)
	var moved bool
	if err := pool.QueryRow(ctx, `SELECT tableoid = to_regclass($1) FROM outbox_events WHERE event_type = 'parked-later'`, p1.QName).Scan(&moved); err != nil || !moved {
		t.Fatalf("the parked event is not in partition 1 (%v): the test does not move it", err)
	}
	// Compacting partition 0 copies its undelivered rows back.
	parts, err := ReadPartitions(ctx, pool, b.names)
	if err != nil || len(parts.Range) != 2 {
		t.Fatalf("partitions %+v, %v; want two", parts, err)
	}
	if kept, err := Compact(ctx, pool, b.names, parts.Range[0], 0); err != nil || kept != 2 {
		t.Fatalf("Compact: kept %d, %v; want the 2 undelivered events", kept, err)
	}
	must(fmt.Sprintf(ins, "", "after", ""))
	if got := eventTypes(next(t, s)); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("next streamed transaction has %v, want [after]: a moved row was streamed again", got)
	}
}

// A detached partition that still holds an undelivered row is attached
// again, the row handed to the table path, instead of being dropped; an
// empty one is dropped; ReadPartitions finds a partition detached and not
// dropped by its comment.
func TestDropDetachedKeepsUndelivered(t *testing.T) {
	t.Parallel()
	pool, _, n := migrated(t, true)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'o1', 'x', '{}')`); err != nil {
		t.Fatal(err)
	}
	p1, err := Attach(ctx, pool, n, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Advance(ctx, pool, n, p1); err != nil {
		t.Fatal(err)
	}
	parts, err := ReadPartitions(ctx, pool, n)
	if err != nil || len(parts.Range) != 2 || parts.Current().K != 1 {
		t.Fatalf("partitions %+v, %v; want 0 and 1, 1 current", parts, err)
	}
	p0 := parts.Range[0]
	if err := Detach(ctx, pool, n, p0); err != nil {
		t.Fatal(err)
	}
	if parts, err = ReadPartitions(ctx, pool, n); err != nil || len(parts.Detached) != 1 || parts.Detached[0].K != 0 {
		t.Fatalf("after the detach: %+v, %v; want partition 0 detached", parts, err)
	}
	dropped, err := DropDetached(ctx, pool, n, parts.Detached[0])
	if err != nil || dropped {
		t.Fatalf("DropDetached with an undelivered row: dropped=%v, %v; want it attached again", dropped, err)
	}
	var handed bool
	if err := pool.QueryRow(ctx, `SELECT retry_after IS NOT NULL FROM outbox_events WHERE event_type = 'x'`).Scan(&handed); err != nil || !handed {
		t.Fatalf("the row after re-attaching: handed=%v, %v; want it in the table, handed to the table path", handed, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM outbox_events`); err != nil {
		t.Fatal(err)
	}
	if err := Detach(ctx, pool, n, p0); err != nil {
		t.Fatal(err)
	}
	if dropped, err := DropDetached(ctx, pool, n, p0); err != nil || !dropped {
		t.Fatalf("DropDetached of an empty partition: dropped=%v, %v", dropped, err)
	}
	if parts, err = ReadPartitions(ctx, pool, n); err != nil || len(parts.Range) != 1 || len(parts.Detached) != 0 {
		t.Fatalf("after the drop: %+v, %v; want partition 1 alone", parts, err)
	}
}
