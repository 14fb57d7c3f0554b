package outboxtest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/outboxtest"
)

// fakeTB records failures instead of failing the test, so the kit's own
// failures can be checked. Fatalf ends the goroutine, as testing's does.
type fakeTB struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}

// failures runs fn with a fakeTB and returns what it reported.
func failures(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.msgs, "\n")
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func write(t *testing.T, tx pgx.Tx, evs ...outbox.Event) {
	t.Helper()
	if _, err := outbox.Write(ctx(t), tx, evs...); err != nil {
		t.Fatal(err)
	}
}

func order(id, typ string, total float64) outbox.Event {
	return outbox.Event{AggregateType: "order", AggregateID: id, EventType: typ,
		Payload: []byte(fmt.Sprintf(`{"order_id": %q, "total": %v, "lines": [{"sku": "a"}, {"sku": "b"}]}`, id, total))}
}

// RequireWritten sees the events of a pgx transaction that is still open,
// matches on every field, and fails naming what the table holds.
func TestRequireWrittenPgxTx(t *testing.T) {
	t.Parallel()
	db := outboxtest.NewDB(t, testdb.URL())
	tx, err := db.Pool.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	write(t, tx, order("42", "order.created", 99.5), order("43", "order.created", 10), order("42", "order.paid", 99.5))

	got := outboxtest.RequireWritten(t, tx, outboxtest.Match{EventType: "order.created", AggregateID: "42"})
	if got.AggregateType != "order" || !strings.Contains(string(got.Payload), `"total": 99.5`) || got.Published || got.ID == uuid.Nil {
		t.Errorf("RequireWritten returned %+v", got)
	}
	outboxtest.RequireWrittenN(t, tx, outboxtest.Match{AggregateID: "42"}, 2)
	outboxtest.RequireWritten(t, tx, outboxtest.Match{PayloadContains: `{"total": 10.0}`})
	outboxtest.RequireWritten(t, tx, outboxtest.Match{PayloadContains: `{"lines": [{"sku": "b"}]}`, EventType: "order.paid"})
	outboxtest.RequireWritten(t, tx, outboxtest.Match{AggregateID: "43", Payload: func(p []byte) bool { return strings.Contains(string(p), "43") }})
	outboxtest.RequireNotWritten(t, tx, outboxtest.Match{EventType: "order.cancelled"})
	if n := len(outboxtest.Written(t, tx, outboxtest.Match{})); n != 3 {
		t.Errorf("Written(any) = %d events, want 3", n)
	}
	// Not visible outside the open transaction.
	outboxtest.RequireNotWritten(t, db.Pool, outboxtest.Match{})

	msg := failures(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, tx, outboxtest.Match{EventType: "order.created", AggregateID: "44"})
	})
	for _, want := range []string{"want 1 event(s) of type order.created, for aggregate */44", "found 0", "the table holds 3 event(s)", "order.paid order/42"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure %q lacks %q", msg, want)
		}
	}
	if msg := failures(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, tx, outboxtest.Match{AggregateID: "42"})
	}); !strings.Contains(msg, "found 2") {
		t.Errorf("two matches: failure %q, want found 2", msg)
	}
	if msg := failures(t, func(tb testing.TB) {
		outboxtest.RequireWritten(tb, tx, outboxtest.Match{PayloadContains: `{"total":`})
	}); !strings.Contains(msg, "not valid JSON") {
		t.Errorf("bad PayloadContains: failure %q", msg)
	}
}

// The same through database/sql, before and after the commit, and the
// hints for a transaction that failed or ended, an unknown handle and a
// table that is not there.
func TestRequireWrittenSQL(t *testing.T) {
	t.Parallel()
	db := outboxtest.NewDB(t, testdb.URL())
	sqlDB, err := sql.Open("pgx", db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	tx, err := sqlDB.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.WriteSQL(ctx(t), tx, order("7", "order.created", 1)); err != nil {
		t.Fatal(err)
	}
	outboxtest.RequireWritten(t, tx, outboxtest.Match{EventType: "order.created", AggregateID: "7"})
	outboxtest.RequireNotWritten(t, sqlDB, outboxtest.Match{AggregateID: "7"})
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	outboxtest.RequireWritten(t, sqlDB, outboxtest.Match{AggregateID: "7"})
	outboxtest.RequireWritten(t, db.Pool, outboxtest.Match{AggregateID: "7"})

	for name, tc := range map[string]struct {
		run  func(tb testing.TB)
		want string
	}{
		"ended": {func(tb testing.TB) { outboxtest.RequireWritten(tb, tx, outboxtest.Match{}) }, "the transaction is over"},
		"aborted": {func(tb testing.TB) {
			tx, err := db.Pool.Begin(ctx(t))
			if err != nil {
				t.Error(err)
				return
			}
			defer tx.Rollback(context.Background())
			_, _ = tx.Exec(ctx(t), `SELECT 1/0`)
			outboxtest.RequireWritten(tb, tx, outboxtest.Match{})
		}, "the transaction is aborted"},
		"unknown handle": {func(tb testing.TB) { outboxtest.RequireWritten(tb, "postgres://", outboxtest.Match{}) }, "db is a string"},
		"no table": {func(tb testing.TB) {
			outboxtest.RequireWritten(tb, db.Pool, outboxtest.Match{}, outboxtest.InTable("", "billing_outbox"))
		}, "is the outbox migrated"},
	} {
		if msg := failures(t, tc.run); !strings.Contains(msg, tc.want) {
			t.Errorf("%s: failure %q, want %q", name, msg, tc.want)
		}
	}
}

// Drain publishes what was committed, nothing of a rolled-back transaction,
// and returns only what this drain published.
func TestRelayDrain(t *testing.T) {
	t.Parallel()
	db := outboxtest.NewDB(t, testdb.URL())
	commit := func(evs ...outbox.Event) {
		t.Helper()
		if err := pgx.BeginFunc(ctx(t), db.Pool, func(tx pgx.Tx) error { _, err := outbox.Write(ctx(t), tx, evs...); return err }); err != nil {
			t.Fatal(err)
		}
	}
	commit(order("1", "order.created", 1), order("2", "order.created", 2))
	rolled := errors.New("rolled back")
	if err := pgx.BeginFunc(ctx(t), db.Pool, func(tx pgx.Tx) error {
		_, _ = outbox.Write(ctx(t), tx, order("3", "order.created", 3))
		return rolled
	}); !errors.Is(err, rolled) {
		t.Fatal(err)
	}
	r := outboxtest.NewRelay(t, db.Pool, outbox.RelayConfig{BatchSize: 1})
	if got := r.Drain(); len(got) != 2 {
		t.Fatalf("first drain published %d messages, want 2", len(got))
	}
	outboxtest.RequireWrittenN(t, db.Pool, outboxtest.Match{}, 2)
	if ev := outboxtest.RequireWritten(t, db.Pool, outboxtest.Match{AggregateID: "1"}); !ev.Published {
		t.Errorf("event 1 not marked published after Drain: %+v", ev)
	}
	commit(order("4", "order.created", 4))
	if got := r.Drain(); len(got) != 1 || got[0].AggregateID != "4" {
		t.Fatalf("second drain published %v, want only order 4", got)
	}
	r.RequirePublished(outboxtest.Match{AggregateID: "2", PayloadContains: `{"total": 2}`})
	if msg := failures(t, func(tb testing.TB) {
		rr := outboxtest.NewRelay(tb, db.Pool, outbox.RelayConfig{})
		rr.RequirePublished(outboxtest.Match{AggregateID: "3"})
	}); !strings.Contains(msg, "found 0") || !strings.Contains(msg, "nothing was published") {
		t.Errorf("RequirePublished failure %q", msg)
	}
}

// WaitPublished returns once a background relay publishes, and fails after
// the timeout listing what was published.
func TestWaitPublished(t *testing.T) {
	t.Parallel()
	db := outboxtest.NewDB(t, testdb.URL())
	r := outboxtest.NewRelay(t, db.Pool, outbox.RelayConfig{})
	relay, err := outbox.NewRelay(db.Pool, r.Publisher(), outbox.RelayConfig{PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := pgx.BeginFunc(ctx(t), db.Pool, func(tx pgx.Tx) error {
		_, err := outbox.Write(ctx(t), tx, order("9", "order.created", 9))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if m := outboxtest.WaitPublished(t, r.Publisher(), outboxtest.Match{AggregateID: "9"}, 30*time.Second); m.EventType != "order.created" {
		t.Errorf("WaitPublished returned %+v", m)
	}
	msg := failures(t, func(tb testing.TB) {
		outboxtest.WaitPublished(tb, r.Publisher(), outboxtest.Match{AggregateID: "10"}, 50*time.Millisecond)
	})
	if !strings.Contains(msg, "within 50ms") || !strings.Contains(msg, "order.created order/9") {
		t.Errorf("WaitPublished failure %q", msg)
	}
}

// RequireIdempotent passes a consumer behind the inbox and fails one whose
// effect happens again on a redelivery.
func TestRequireIdempotent(t *testing.T) {
	t.Parallel()
	db := outboxtest.NewDB(t, testdb.URL())
	if _, err := db.Pool.Exec(ctx(t), `CREATE TABLE shipments (order_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	shipments := func() int {
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM shipments`).Scan(&n); err != nil {
			t.Error(err)
		}
		return n
	}
	in, err := inbox.New(db.Pool, inbox.Config{Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	ship := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, m.AggregateID)
		return err
	}
	pub := &outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "order.created", AggregateType: "order", AggregateID: "42",
		Payload: []byte(`{}`), CreatedAt: time.Now()}
	msg := outboxtest.Delivered(t, *pub)
	if msg.ID != pub.ID || msg.AggregateID != "42" {
		t.Fatalf("Delivered = %+v", msg)
	}
	outboxtest.RequireIdempotent(t, in.Processor(ship), msg, shipments)

	// Around the inbox instead of through it: the second delivery ships again.
	direct := func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
		return inbox.Result{}, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return ship(ctx, tx, m) })
	}
	other := outboxtest.Delivered(t, outbox.Message{ID: uuid.Must(uuid.NewV7()), EventType: "order.created", AggregateType: "order", AggregateID: "43", CreatedAt: time.Now()})
	failure := failures(t, func(tb testing.TB) { outboxtest.RequireIdempotent(tb, direct, other, shipments) })
	for _, want := range []string{"not recognised as a duplicate", "changed the effects from 2 to 3"} {
		if !strings.Contains(failure, want) {
			t.Errorf("failure %q lacks %q", failure, want)
		}
	}
}

// NewDB's schema is gone once the test ends.
func TestNewDBDropsItsSchema(t *testing.T) {
	t.Parallel()
	var schema string
	t.Run("uses", func(t *testing.T) {
		db := outboxtest.NewDB(t, testdb.URL())
		schema = db.Schema
		outboxtest.RequireNotWritten(t, db.Pool, outboxtest.Match{})
	})
	var n int
	if err := testdb.Pool(t, "").QueryRow(ctx(t), `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema %s: %d left (%v)", schema, n, err)
	}
}
