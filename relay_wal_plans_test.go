package outbox_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// TestWALTableStatementsUseIndexes: on a table set up for the WAL source
// (no index of the rows as written) holding a large backlog the stream owns,
// the statements a WAL relay's table workers and housekeeping run read only
// the table path's rows, through its indexes, and still find them: the
// ordered claims take every handed-over event, runs included, although
// each aggregate's earlier events are the stream's and come first by seq.
// Only the pending gauges read the rows as written, which no index holds.
func TestWALTableStatementsUseIndexes(t *testing.T) {
	e, _ := setupWAL(t)
	// 100k rows the stream owns over 10k aggregates; 10 of those aggregates
	// with 3 events each handed over after them; 20 dead letters holding 2
	// events each; and one dead letter whose later event the stream has not
	// read yet (not blocked until it does).
	_, err := e.pool.Exec(ctx(t), `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', (g % 10000)::text, 'order.created', '{}' FROM generate_series(1, 100000) g;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, retry_after)
SELECT 'order', (g % 10)::text, 'order.created', '{}', now() - interval '1 second' FROM generate_series(1, 30) g;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, retry_after, dead_at)
SELECT 'order', 'd' || g, 'order.created', '{}', now(), now() FROM generate_series(1, 20) g;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, retry_after, dead_at, held_by)
SELECT d.aggregate_type, d.aggregate_id, 'order.created', '{}', now(), now(), d.id
FROM outbox_events d, generate_series(1, 2) WHERE d.dead_at IS NOT NULL;
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, retry_after, dead_at)
VALUES ('order', 'e1', 'order.created', '{}', now(), now());
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'e1', 'order.created', '{}');
ANALYZE outbox_events;`)
	if err != nil {
		t.Fatal(err)
	}
	in, err := ident.New(e.schema, "")
	if err != nil {
		t.Fatal(err)
	}
	q := store.New(in, true)
	qh := q.HandoffOnly()
	ids := func(sql string, args ...any) []uuid.UUID {
		t.Helper()
		rows, err := e.pool.Query(ctx(t), sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	handed := ids(`SELECT id FROM outbox_events WHERE retry_after IS NOT NULL AND dead_at IS NULL ORDER BY seq`)
	dead := ids(`SELECT id FROM outbox_events WHERE dead_at IS NOT NULL AND held_by IS NULL ORDER BY seq`)

	// run runs sql in a transaction rolled back afterwards and returns the
	// first column of its rows (the claims' id).
	run := func(sql string, args ...any) []uuid.UUID {
		t.Helper()
		tx, err := e.pool.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx(t))
		rows, err := tx.Query(ctx(t), sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var got []uuid.UUID
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, uuid.UUID(v[0].([16]byte)))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct {
		name string
		sql  string
		args []any
	}{
		{"Claim", qh.Claim, []any{100, 0}},
		{"ClaimOrdered", qh.ClaimOrdered, []any{100, 0}},
		{"ClaimOrderedSparse", qh.ClaimOrderedSparse, []any{100, 0, 1000}},
		{"LowWater", qh.LowWater, nil},
		{"ParkLate", qh.ParkLate, nil},
		{"MarkOrdered", qh.MarkOrdered, []any{handed[:1], handed[1:2], []string{"x"}, []int64{1000}, []bool{false}, []bool{false}, dead[:1]}},
		{"MarkOutcomes", qh.MarkOutcomes, []any{handed[:1], handed[1:2], []string{"x"}, []int64{1000}, []bool{false}, []bool{false}}},
		{"Relock", qh.Relock, []any{handed[:2]}},
		{"ReleaseDue", qh.ReleaseDue, []any{100}},
		{"ReleaseOrphans", q.ReleaseOrphans, nil},
		{"ReleaseAll", q.ReleaseAll, nil},
		{"BlockedAggregates", qh.BlockedAggregates, nil},
		{"CountDead", q.CountDead, nil},
		{"CountHeld", q.CountHeld, nil},
		{"Scheduled", q.Scheduled, nil},
		{"AnyDue", q.AnyDue, nil},
	} {
		tx, err := e.pool.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := tx.Query(ctx(t), "EXPLAIN (ANALYZE, FORMAT TEXT) "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		tx.Rollback(ctx(t))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if plan := strings.Join(lines, "\n"); strings.Contains(plan, "Seq Scan on outbox_events") {
			t.Errorf("%s reads the whole table:\n%s", c.name, plan)
		}
	}

	want := map[uuid.UUID]bool{}
	for _, id := range handed {
		want[id] = true
	}
	for name, got := range map[string][]uuid.UUID{
		"ClaimOrdered":       run(qh.ClaimOrdered, 100, 0),
		"ClaimOrderedSparse": run(qh.ClaimOrderedSparse, 100, 0, 1000),
	} {
		seen := map[uuid.UUID]bool{}
		for _, id := range got {
			if !want[id] || seen[id] {
				t.Errorf("%s claimed %s: not a handed-over event, or twice", name, id)
			}
			seen[id] = true
		}
		if len(seen) != len(want) {
			t.Errorf("%s claimed %d of the %d handed-over events", name, len(seen), len(want))
		}
	}
	var blocked int
	if err := e.pool.QueryRow(ctx(t), qh.BlockedAggregates).Scan(&blocked); err != nil || blocked != 20 {
		t.Errorf("BlockedAggregates = %d, %v; want 20 (the dead letters holding events)", blocked, err)
	}
}
