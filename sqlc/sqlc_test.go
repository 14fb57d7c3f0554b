package sqlc_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/sqlc/outboxdb"
)

// defaultURL is the test database when TEST_DATABASE_URL is not set (the
// same default as the main module's tests).
const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// setup returns a pool whose connections use a schema of their own, holding
// the outbox table as the migrations in ../migrations create it.
func setup(t *testing.T) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = defaultURL
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "sqlc_" + hex.EncodeToString(b)

	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("PostgreSQL at %s (set TEST_DATABASE_URL): %v", url, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	files, err := filepath.Glob("../migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no migration in ../migrations (%v)", err)
	}
	slices.Sort(files)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, f := range files {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// The simple protocol: a migration holds several statements.
		if _, err := conn.Conn().PgConn().Exec(ctx, string(sql)).ReadAll(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	return pool
}

func newUUID(t *testing.T) pgtype.UUID {
	t.Helper()
	var u pgtype.UUID
	if _, err := rand.Read(u.Bytes[:]); err != nil {
		t.Fatal(err)
	}
	u.Bytes[6] = u.Bytes[6]&0x0f | 0x40
	u.Bytes[8] = u.Bytes[8]&0x3f | 0x80
	u.Valid = true
	return u
}

func count(t *testing.T, what string, f func(context.Context) (int64, error), want int64) {
	t.Helper()
	got, err := f(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got != want {
		t.Errorf("%s = %d, want %d", what, got, want)
	}
}

// TestQueries writes events with the generated code inside the caller's
// transaction, then runs the admin queries on rows in the states the relay
// leaves them in.
func TestQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := setup(t)
	q := outboxdb.New(pool)

	// A rolled-back transaction leaves no event: the write is part of the
	// business change.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outboxdb.New(tx).InsertEvent(ctx, outboxdb.InsertEventParams{AggregateType: "order", AggregateID: "0", EventType: "order.created", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	count(t, "CountPending after a rollback", q.CountPending, 0)
	if _, err := q.OldestPendingCreatedAt(ctx); !errors.Is(err, pgx.ErrNoRows) {
		t.Errorf("OldestPendingCreatedAt with nothing pending: err %v, want pgx.ErrNoRows", err)
	}

	// One event with its own id and headers, one with the default id, and
	// three with COPY, in one committed transaction.
	id := newUUID(t)
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	qtx := outboxdb.New(tx)
	first, err := qtx.InsertEvent(ctx, outboxdb.InsertEventParams{
		ID: id, AggregateType: "order", AggregateID: "1", EventType: "order.created",
		Payload: []byte(`{"total": 42}`), Headers: []byte(`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if first.ID != id || !first.Seq.Valid || !first.CreatedAt.Valid {
		t.Errorf("InsertEvent returned %+v, want id %v, a seq and a created_at", first, id)
	}
	second, err := qtx.InsertEvent(ctx, outboxdb.InsertEventParams{AggregateType: "order", AggregateID: "1", EventType: "order.paid", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !second.ID.Valid || second.ID == id || second.Seq.Int64 <= first.Seq.Int64 {
		t.Errorf("second InsertEvent: %+v, want a new id and a seq after %d", second, first.Seq.Int64)
	}
	n, err := qtx.InsertEvents(ctx, []outboxdb.InsertEventsParams{
		{AggregateType: "customer", AggregateID: "a", EventType: "customer.created", Payload: []byte(`{"n": 1}`)},
		{AggregateType: "customer", AggregateID: "b", EventType: "customer.created", Payload: []byte(`{"n": 2}`)},
		{AggregateType: "customer", AggregateID: "c", EventType: "customer.created", Payload: []byte(`{"n": 3}`), Headers: []byte(`{"k": "v"}`)},
	})
	if err != nil || n != 3 {
		t.Fatalf("InsertEvents: %d rows, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// The rows are what the relay expects: pending, in seq order of
	// writing, payload and headers as given.
	rows, err := pool.Query(ctx, "SELECT aggregate_id, payload::text, attempts, processed_at IS NULL AND dead_at IS NULL FROM outbox_events ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for rows.Next() {
		var agg, payload string
		var attempts int
		var pending bool
		if err := rows.Scan(&agg, &payload, &attempts, &pending); err != nil {
			t.Fatal(err)
		}
		order = append(order, agg+" "+payload)
		if attempts != 0 || !pending {
			t.Errorf("event of %s: attempts %d, pending %v; want a fresh pending event", agg, attempts, pending)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []string{`1 {"total": 42}`, `1 {}`, `a {"n": 1}`, `b {"n": 2}`, `c {"n": 3}`}; !slices.Equal(order, want) {
		t.Errorf("events in seq order: %q, want %q", order, want)
	}
	ev, err := q.GetEvent(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ev.Headers, []byte("traceparent")) || ev.EventType != "order.created" {
		t.Errorf("GetEvent: %+v", ev)
	}

	// A scheduled event waits for its time: not pending yet, as the
	// relay's outbox_events_pending gauge counts.
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, deliver_at)
VALUES ('order', 'later', 'order.reminder', '{}', now() + interval '1 day')`)
	count(t, "CountPending", q.CountPending, 5)
	oldest, err := q.OldestPendingCreatedAt(ctx)
	if err != nil || !oldest.Time.Equal(first.CreatedAt.Time) {
		t.Errorf("OldestPendingCreatedAt = %v, %v; want the first event's %v", oldest.Time, err, first.CreatedAt.Time)
	}
	byType, err := q.PendingByEventType(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, r := range byType {
		got[r.EventType] = r.Pending
	}
	if len(got) != 3 || got["customer.created"] != 3 || got["order.created"] != 1 || got["order.paid"] != 1 {
		t.Errorf("PendingByEventType = %+v", byType)
	}

	// The relay dead-letters the first event and two customer events, and
	// parks the order's second event behind the first (ordered mode): a
	// held event is not a dead letter.
	mustExec(t, pool, `UPDATE outbox_events SET dead_at = now(), attempts = 10, last_error = 'stream not found' WHERE id = $1`, id)
	mustExec(t, pool, `UPDATE outbox_events SET dead_at = now(), held_by = $1 WHERE id = $2`, id, second.ID)
	mustExec(t, pool, `UPDATE outbox_events SET dead_at = now(), attempts = 3, last_error = 'too large' WHERE aggregate_id IN ('a', 'b')`)
	count(t, "CountPending with dead and held events", q.CountPending, 1)
	count(t, "CountDeadLetters", q.CountDeadLetters, 3)
	dead, err := q.ListDeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 3 || dead[0].ID != id || dead[0].LastError != "stream not found" || dead[0].Attempts != 10 || !dead[0].DeadAt.Valid {
		t.Errorf("ListDeadLetters = %+v, want 3, the first event first with its error", dead)
	}
	if dead, err := q.ListDeadLetters(ctx, 1); err != nil || len(dead) != 1 {
		t.Errorf("ListDeadLetters(1): %d rows, %v", len(dead), err)
	}

	// Re-queue one, then the others by type.
	if n, err := q.RetryEvent(ctx, id); err != nil || n != 1 {
		t.Errorf("RetryEvent: %d rows, %v; want 1", n, err)
	}
	if n, err := q.RetryEvent(ctx, newUUID(t)); err != nil || n != 0 {
		t.Errorf("RetryEvent of an unknown id: %d rows, %v; want 0", n, err)
	}
	ev, err = q.GetEvent(ctx, id)
	// retry_after = now(): claimable at once, and the table path's for a
	// relay whose source is the WAL.
	if err != nil || ev.Attempts != 0 || ev.DeadAt.Valid || !ev.RetryAfter.Valid || ev.RetryAfter.Time.After(time.Now().Add(time.Minute)) {
		t.Errorf("after RetryEvent: %+v, %v; want attempts 0, no dead_at, retry_after now", ev, err)
	}
	count(t, "CountDeadLetters after RetryEvent", q.CountDeadLetters, 2)
	if n, err := q.RetryDeadLetters(ctx, "order.created"); err != nil || n != 0 {
		t.Errorf("RetryDeadLetters(order.created): %d rows, %v; want 0", n, err)
	}
	if n, err := q.RetryDeadLetters(ctx, "customer.created"); err != nil || n != 2 {
		t.Errorf("RetryDeadLetters(customer.created): %d rows, %v; want 2", n, err)
	}
	count(t, "CountDeadLetters after RetryDeadLetters", q.CountDeadLetters, 0)
	count(t, "CountPending after the retries (the held event stays held)", q.CountPending, 4)

	// Published rows are deleted by age, max_rows at a time.
	mustExec(t, pool, `UPDATE outbox_events SET processed_at = now() - interval '2 hours' WHERE aggregate_type = 'customer'`)
	before := pgtype.Timestamptz{Time: time.Now().Add(-time.Hour), Valid: true}
	var deleted []int64
	for {
		n, err := q.DeletePublishedBefore(ctx, outboxdb.DeletePublishedBeforeParams{Before: before, MaxRows: 2})
		if err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, n)
		if n == 0 || len(deleted) > 5 {
			break
		}
	}
	if !slices.Equal(deleted, []int64{2, 1, 0}) {
		t.Errorf("DeletePublishedBefore rows per call: %v, want [2 1 0]", deleted)
	}
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox_events").Scan(&left); err != nil || left != 3 {
		t.Errorf("%d events left, %v; want the 2 unpublished order events and the scheduled one", left, err)
	}
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// sqlc runs `go tool sqlc args...` in this module (sqlc.yaml's folder
// unless -f says otherwise) and returns its combined output.
func sqlc(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "sqlc"}, args...)...)
	// This module stays out of any workspace a go.work may define.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGeneratedCodeIsCurrent runs sqlc's generator against the migrations
// and queries.sql and compares its output with outboxdb/: a migration or a
// query changed without regenerating fails here.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	t.Parallel()
	if out, err := sqlc(t, "diff"); err != nil {
		t.Errorf("sqlc diff: %v: outboxdb/ is not what sqlc generates; run `go tool sqlc generate` in sqlc/\n%s", err, out)
	}
	if out, err := sqlc(t, "vet"); err != nil {
		t.Errorf("sqlc vet: %v\n%s", err, out)
	}
}

// TestGeneratedCodeCheckCanFail changes a query in a copy of this folder and
// checks that sqlc diff notices.
func TestGeneratedCodeCheckCanFail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	abs, err := filepath.Abs("../migrations")
	if err != nil {
		t.Fatal(err)
	}
	// sqlc reads schema: relative to the configuration's folder.
	migrations, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sqlc.yaml", "queries.sql", "outboxdb/db.go", "outboxdb/models.go", "outboxdb/queries.sql.go", "outboxdb/copyfrom.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		switch f {
		case "sqlc.yaml":
			b = bytes.Replace(b, []byte("schema: ../migrations"), []byte("schema: "+migrations), 1)
		case "queries.sql":
			const query = "SELECT count(*) FROM outbox_events\nWHERE processed_at IS NULL AND dead_at IS NULL AND deliver_at IS NULL;"
			if !bytes.Contains(b, []byte(query)) {
				t.Fatalf("queries.sql has no CountPending query %q to change", query)
			}
			b = bytes.Replace(b, []byte(query), []byte(strings.Replace(query, "count(*)", "count(*)::int", 1)), 1)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := sqlc(t, "-f", filepath.Join(dir, "sqlc.yaml"), "diff")
	if err == nil || !strings.Contains(out, "CountPending") {
		t.Errorf("sqlc diff after changing CountPending's query: err %v, want a difference naming CountPending:\n%s", err, out)
	}
}
