package outboxtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/dbtx"
	"github.com/pgoutbox/outbox/internal/ident"
)

// Event is one row of the outbox table, as an assertion found it.
type Event struct {
	ID            uuid.UUID
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte            // the stored JSON, as jsonb returns it
	Headers       map[string]string // the row's own headers (trace context included); nil if none
	CreatedAt     time.Time
	DeliverAt     time.Time // zero unless the event is scheduled and not yet due
	Published     bool      // the relay marked it processed
	DeadLetter    bool
}

func (e Event) String() string {
	return describe(e.EventType, e.AggregateType, e.AggregateID, e.Payload)
}

// Option chooses the outbox table the assertions read.
type Option func(*options)

type options struct{ schema, table string }

// InTable reads the outbox table schema.table instead of outbox_events in
// the connection's search_path (either may be empty for its default), as
// configured in outbox.WriterConfig.
func InTable(schema, table string) Option {
	return func(o *options) { o.schema, o.table = schema, table }
}

// RequireWritten fails the test unless exactly one event in the outbox table
// matches m, as seen through db, and returns it. db is where your code wrote:
// the pgx.Tx or *sql.Tx it wrote in, still open (the assertion sees its
// uncommitted rows), or a *pgxpool.Pool, *pgx.Conn, *sql.DB or *sql.Conn once
// it committed. The failure lists the events that are there.
func RequireWritten(t testing.TB, db any, m Match, opts ...Option) Event {
	t.Helper()
	got := RequireWrittenN(t, db, m, 1, opts...)
	return got[0]
}

// RequireWrittenN is RequireWritten for exactly n matching events, which it
// returns in insertion order.
func RequireWrittenN(t testing.TB, db any, m Match, n int, opts ...Option) []Event {
	t.Helper()
	if err := m.validate(); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	all, table := read(t, db, opts)
	var got []Event
	for _, e := range all {
		if m.matches(e.EventType, e.AggregateType, e.AggregateID, e.Payload) {
			got = append(got, e)
		}
	}
	if len(got) != n {
		t.Fatalf("outboxtest: want %d event(s) %s in %s, found %d%s", n, m, table, len(got), listing(all))
	}
	return got
}

// RequireNotWritten fails the test if any event in the outbox table matches
// m, as seen through db (see RequireWritten).
func RequireNotWritten(t testing.TB, db any, m Match, opts ...Option) {
	t.Helper()
	RequireWrittenN(t, db, m, 0, opts...)
}

// Written returns every event in the outbox table that matches m, in
// insertion order, as seen through db; it fails the test only if the table
// cannot be read.
func Written(t testing.TB, db any, m Match, opts ...Option) []Event {
	t.Helper()
	if err := m.validate(); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	all, _ := read(t, db, opts)
	var got []Event
	for _, e := range all {
		if m.matches(e.EventType, e.AggregateType, e.AggregateID, e.Payload) {
			got = append(got, e)
		}
	}
	return got
}

// querier adapts the handles RequireWritten accepts.
func querier(t testing.TB, db any) dbtx.Querier {
	t.Helper()
	switch q := db.(type) {
	case pgx.Tx:
		return dbtx.Pgx(q)
	case *pgxpool.Pool:
		return dbtx.Pgx(q)
	case *pgx.Conn:
		return dbtx.Pgx(q)
	case *sql.Tx:
		return dbtx.SQL(q)
	case *sql.DB:
		return dbtx.SQL(q)
	case *sql.Conn:
		return dbtx.SQL(q)
	case nil:
		t.Fatalf("outboxtest: db is nil; pass the transaction your code wrote in (pgx.Tx or *sql.Tx) or a pool")
	}
	t.Fatalf("outboxtest: db is a %T; pass a pgx.Tx, *pgxpool.Pool, *pgx.Conn, *sql.Tx, *sql.DB or *sql.Conn", db)
	return nil
}

// read returns every row of the outbox table in insertion order, and the
// table's name.
func read(t testing.TB, db any, opts []Option) ([]Event, string) {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	n, err := ident.New(o.schema, o.table)
	if err != nil {
		t.Fatalf("outboxtest: InTable: %v", err)
	}
	q := querier(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := q.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text,
       COALESCE(headers::text, ''), created_at, COALESCE(deliver_at, 'epoch'::timestamptz),
       processed_at IS NOT NULL, dead_at IS NOT NULL
FROM `+n.QTable+` ORDER BY seq`)
	if err != nil {
		t.Fatalf("outboxtest: read %s: %v%s", n.QTable, err, readHint(err))
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var id, payload, headers string
		var deliverAt time.Time
		if err := rows.Scan(&id, &e.AggregateType, &e.AggregateID, &e.EventType, &payload, &headers,
			&e.CreatedAt, &deliverAt, &e.Published, &e.DeadLetter); err != nil {
			t.Fatalf("outboxtest: read %s: %v", n.QTable, err)
		}
		e.ID, err = uuid.Parse(id)
		if err != nil {
			t.Fatalf("outboxtest: read %s: id %q: %v", n.QTable, id, err)
		}
		e.Payload = []byte(payload)
		if headers != "" {
			if e.Headers, err = decodeHeaders(headers); err != nil {
				t.Fatalf("outboxtest: read %s: headers of event %s: %v", n.QTable, e.ID, err)
			}
		}
		if deliverAt.Unix() != 0 {
			e.DeliverAt = deliverAt
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("outboxtest: read %s: %v%s", n.QTable, err, readHint(err))
	}
	return out, n.QTable
}

func decodeHeaders(s string) (map[string]string, error) {
	var h map[string]string
	err := json.Unmarshal([]byte(s), &h)
	return h, err
}

// readHint names the usual causes of a failed read.
func readHint(err error) string {
	s := err.Error()
	switch {
	case strings.Contains(s, "42P01") || strings.Contains(s, "does not exist"):
		return " (is the outbox migrated in this schema? NewDB migrates it; InTable names another table)"
	case strings.Contains(s, "25P02") || strings.Contains(s, "aborted"):
		return " (the transaction is aborted: a statement before the assertion failed)"
	case strings.Contains(s, "tx is closed") || strings.Contains(s, "already been committed or rolled back"):
		return " (the transaction is over: assert before Commit, or pass the pool afterwards)"
	}
	return ""
}

// listing shows the table's events in a failure message, at most 20.
func listing(all []Event) string {
	if len(all) == 0 {
		return "; the table is empty"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "; the table holds %d event(s):", len(all))
	for i, e := range all {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(all)-20)
			break
		}
		fmt.Fprintf(&b, "\n  %s", e)
	}
	return b.String()
}
