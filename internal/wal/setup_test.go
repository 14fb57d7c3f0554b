package wal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/migrate"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// bundle is what a test of the stream works with: an outbox table in its
// own schema, the table's publication and slot, and a pool whose
// search_path is the schema (so plain INSERTs land in the table).
type bundle struct {
	url    string // the server's (testdb.Logical)
	schema string
	pool   *pgxpool.Pool
	names  Names
}

// setup migrates an outbox table into a fresh schema and creates its
// publication and slot, dropped when the test ends (the slot guard fails
// the test if one is left).
func setup(t *testing.T) *bundle {
	t.Helper()
	pool, schema, _ := migrated(t, false)
	return withSlot(t, pool, schema, "outbox_events")
}

// migrated migrates an outbox table, partitioned or not, into a fresh
// schema.
func migrated(t *testing.T, partitioned bool) (*pgxpool.Pool, string, Names) {
	t.Helper()
	srv := testdb.Logical(t)
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	in, err := ident.New(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(context.Background(), pool, in, partitioned); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return pool, schema, NamesFor(in, srv.DatabaseName())
}

// withSlot creates the publication and slot of schema.table.
func withSlot(t *testing.T, pool *pgxpool.Pool, schema, table string) *bundle {
	t.Helper()
	in, err := ident.New(schema, table)
	if err != nil {
		t.Fatal(err)
	}
	srv := testdb.Logical(t)
	n := NamesFor(in, srv.DatabaseName())
	srv.ReplicationObjects(t, n.Slot, n.Publication)
	created, err := Create(context.Background(), pool, n)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if !created {
		t.Fatalf("create: slot %s existed already", n.Slot)
	}
	t.Cleanup(func() {
		if err := Drop(context.Background(), pool, n); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	return &bundle{url: srv.URL(), schema: schema, pool: pool, names: n}
}

// config is a stream configuration with a short status interval, for
// tests. The timeout stays generous: on a shared server the walsender
// decodes every session's WAL, and another test's bulk insert can keep it
// busy for seconds.
func (b *bundle) config() StreamConfig {
	return StreamConfig{ConnString: b.url, Names: b.names, StatusInterval: 50 * time.Millisecond, Timeout: 10 * time.Second}
}

// open starts a stream closed when the test ends.
func (b *bundle) open(t *testing.T, cfg StreamConfig) *Stream {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open stream: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// insert commits one transaction inserting one event per event type, with
// the article's columns only.
func (b *bundle) insert(t *testing.T, aggregate string, eventTypes ...string) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, et := range eventTypes {
		if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, $2, '{"n": 1}')`, aggregate, et); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// next reads the next transaction, failing the test after a minute (see
// config: a loaded shared server decodes slowly).
func next(t *testing.T, s *Stream) *Tx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return tx
}

// eventTypes lists a transaction's event types, in order.
func eventTypes(tx *Tx) []string {
	var out []string
	for _, e := range tx.Events {
		out = append(out, e.EventType)
	}
	return out
}

// urlAs is the test database's URL with another user.
func urlAs(t *testing.T, user string) string {
	t.Helper()
	u, err := url.Parse(testdb.Logical(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// waitInactive waits until no process streams the slot.
func waitInactive(t *testing.T, b *bundle) {
	t.Helper()
	var pid int32
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("streamed by PID %d", pid) }), 10*time.Second,
		"slot "+b.names.Slot+" inactive", func() bool {
			st, err := Inspect(context.Background(), b.pool, b.names)
			if err != nil {
				t.Fatal(err)
			}
			pid = st.ActivePID
			return !st.Active
		})
}

func isBusy(err error) bool { return errors.Is(err, ErrSlotBusy) }
