package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/internal/configcheck"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
)

func TestFirstDeliveryRunsHandlerAndRecords(t *testing.T) {
	e := setup(t)
	m := msg()
	calls := 0
	res, err := e.inbox.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
		calls++
		return effect(m)(ctx, tx)
	})
	if err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if res.Duplicate {
		t.Error("first delivery reported as a duplicate")
	}
	if calls != 1 {
		t.Errorf("handler called %d times, want 1", calls)
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
	var consumer string
	var at time.Time
	if err := e.pool.QueryRow(ctx(t), `SELECT consumer, processed_at FROM processed_events WHERE event_id = $1`, m.ID).Scan(&consumer, &at); err != nil {
		t.Fatalf("inbox row: %v", err)
	}
	if consumer != "shipping" || time.Since(at) > time.Minute {
		t.Errorf("inbox row = (%q, %s), want (shipping, now)", consumer, at)
	}
}

func TestDuplicateSkipsHandler(t *testing.T) {
	e := setup(t)
	m := msg()
	if _, err := e.inbox.Handle(ctx(t), m, effect(m)); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		res, err := e.inbox.Handle(ctx(t), m, func(context.Context, pgx.Tx) error {
			t.Errorf("redelivery %d: handler called for a processed event", i)
			return nil
		})
		if err != nil {
			t.Fatalf("redelivery %d: %v", i, err)
		}
		if !res.Duplicate {
			t.Errorf("redelivery %d: Duplicate = false", i)
		}
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
	if n := e.recorded(m.ID); n != 1 {
		t.Errorf("inbox rows = %d, want 1", n)
	}
}

func TestHandlerErrorRecordsNothingAndRedeliveryRuns(t *testing.T) {
	e := setup(t)
	m := msg()
	boom := errors.New("downstream validation failed")
	_, err := e.inbox.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
		if err := effect(m)(ctx, tx); err != nil {
			return err
		}
		return boom // after writing: the write must be rolled back too
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Handle error = %v, want it to wrap the handler's", err)
	}
	if !strings.Contains(err.Error(), m.ID.String()) {
		t.Errorf("error %q does not name the event id", err)
	}
	if n := e.recorded(m.ID); n != 0 {
		t.Errorf("inbox rows after a handler error = %d, want 0", n)
	}
	if n := e.effects(m.ID); n != 0 {
		t.Errorf("effects after a handler error = %d, want 0 (rolled back)", n)
	}

	res, err := e.inbox.Handle(ctx(t), m, effect(m))
	if err != nil || res.Duplicate {
		t.Fatalf("redelivery: %+v, %v; want processed", res, err)
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects after redelivery = %d, want 1", n)
	}
}

func TestHandlerPanicRollsBack(t *testing.T) {
	e := setup(t)
	m := msg()
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic was swallowed")
			}
		}()
		_, _ = e.inbox.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
			_ = effect(m)(ctx, tx)
			panic("handler bug")
		})
	}()
	if n := e.recorded(m.ID) + e.effects(m.ID); n != 0 {
		t.Errorf("rows after a panic = %d, want 0", n)
	}
	// The pool is not left with an open transaction.
	if res, err := e.inbox.Handle(ctx(t), m, effect(m)); err != nil || res.Duplicate {
		t.Fatalf("redelivery after panic: %+v, %v", res, err)
	}
}

// A commit can fail after the handler succeeded: a deferred constraint is
// only checked at COMMIT. Nothing may be recorded then.
func TestCommitFailureDeferredConstraint(t *testing.T) {
	e := setup(t)
	if _, err := e.pool.Exec(ctx(t), `CREATE TABLE stock (sku TEXT, CONSTRAINT stock_sku_key UNIQUE (sku) DEFERRABLE INITIALLY DEFERRED);
		INSERT INTO stock VALUES ('taken')`); err != nil {
		t.Fatal(err)
	}
	m := msg()
	write := func(sku string) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			if err := effect(m)(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO stock VALUES ($1)`, sku)
			return err // nil: the violation surfaces at commit
		}
	}
	_, err := e.inbox.Handle(ctx(t), m, write("taken"))
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("Handle error = %v, want the commit's unique violation", err)
	}
	if !strings.Contains(err.Error(), "commit") {
		t.Errorf("error %q does not say the commit failed", err)
	}
	if n := e.recorded(m.ID) + e.effects(m.ID); n != 0 {
		t.Fatalf("rows after a failed commit = %d, want 0", n)
	}
	if res, err := e.inbox.Handle(ctx(t), m, write("free")); err != nil || res.Duplicate {
		t.Fatalf("redelivery: %+v, %v; want processed", res, err)
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

// The connection dies between the handler and COMMIT (a failover, a killed
// backend): the commit fails and nothing is recorded.
func TestCommitFailureBackendTerminated(t *testing.T) {
	e := setup(t)
	m := msg()
	_, err := e.inbox.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
		if err := effect(m)(ctx, tx); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var ok bool
		if err := e.pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("terminate %d: %v %v", pid, ok, err)
		}
		return nil
	})
	if err == nil {
		t.Fatal("Handle returned nil although the connection died before COMMIT")
	}
	if !strings.Contains(err.Error(), "commit") {
		t.Errorf("error %q does not say the commit failed", err)
	}
	if n := e.recorded(m.ID) + e.effects(m.ID); n != 0 {
		t.Fatalf("rows after a failed commit = %d, want 0", n)
	}
	if res, err := e.inbox.Handle(ctx(t), m, effect(m)); err != nil || res.Duplicate {
		t.Fatalf("redelivery: %+v, %v; want processed", res, err)
	}
}

// The same event delivered at the same moment to two consumer instances (two
// Inboxes on two pools) runs the handler exactly once.
func TestConcurrentDuplicateRunsOnce(t *testing.T) {
	e := setup(t)
	a := e.inbox
	b := e.newInbox(testdb.Pool(t, e.schema), "shipping")
	const rounds = 50
	overlapped := 0 // rounds where the duplicate started before the winner committed
	for round := range rounds {
		m := msg()
		var calls atomic.Int32
		handler := func(ctx context.Context, tx pgx.Tx) error {
			calls.Add(1)
			time.Sleep(2 * time.Millisecond) // hold the row lock while the other waits
			return effect(m)(ctx, tx)
		}
		results := make([]inbox.Result, 2)
		errs := make([]error, 2)
		began, ended := make([]time.Time, 2), make([]time.Time, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, in := range []*inbox.Inbox{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				began[i] = time.Now()
				results[i], errs[i] = in.Handle(ctx(t), m, handler)
				ended[i] = time.Now()
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d instance %d: %v", round, i, err)
			}
		}
		if calls.Load() != 1 {
			t.Fatalf("round %d: handler ran %d times, want 1", round, calls.Load())
		}
		if results[0].Duplicate == results[1].Duplicate {
			t.Fatalf("round %d: results %+v, want exactly one duplicate", round, results)
		}
		if n := e.effects(m.ID); n != 1 {
			t.Fatalf("round %d: effects = %d, want 1", round, n)
		}
		winner, dup := 0, 1
		if results[0].Duplicate {
			winner, dup = 1, 0
		}
		if began[dup].Before(ended[winner]) {
			overlapped++
		}
	}
	// Otherwise this would test sequential redelivery, not a race.
	if overlapped < rounds/2 {
		t.Errorf("only %d of %d rounds had both deliveries in flight at once", overlapped, rounds)
	}
	t.Logf("%d of %d rounds overlapped", overlapped, rounds)
}

// When the first of two concurrent deliveries fails, the one waiting on its
// row lock processes the event: a failure is never mistaken for a duplicate.
func TestConcurrentDuplicateFirstFails(t *testing.T) {
	e := setup(t)
	b := e.newInbox(testdb.Pool(t, e.schema), "shipping")
	m := msg()
	inFirst := make(chan struct{})
	release := make(chan struct{})
	firstErr := make(chan error, 1)
	go func() {
		_, err := e.inbox.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
			close(inFirst)
			<-release
			return errors.New("first instance fails")
		})
		firstErr <- err
	}()
	<-inFirst // the first holds the row lock now
	secondDone := make(chan inbox.Result, 1)
	go func() {
		res, err := b.Handle(ctx(t), m, effect(m))
		if err != nil {
			t.Errorf("second instance: %v", err)
		}
		secondDone <- res
	}()
	// The second must be blocked on the first's row lock.
	testkit.Eventually(t, 10*time.Second, "second delivery to wait on the row lock", func() bool {
		return e.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%processed_events%'`) > 0
	})
	select {
	case <-secondDone:
		t.Fatal("second delivery finished while the first still held the event")
	default:
	}
	close(release)
	if err := <-firstErr; err == nil {
		t.Fatal("first instance: want its handler's error")
	}
	if res := <-secondDone; res.Duplicate {
		t.Fatal("second delivery reported a duplicate although the first rolled back")
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

func TestTwoConsumersEachProcessOnce(t *testing.T) {
	e := setup(t)
	billing := e.newInbox(e.pool, "billing")
	m := msg()
	for round := range 2 { // every delivery twice
		for _, in := range []*inbox.Inbox{e.inbox, billing} {
			res, err := in.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, consumer) VALUES ($1, $2)`, m.ID, fmt.Sprint(in == billing))
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Duplicate != (round == 1) {
				t.Errorf("round %d: Duplicate = %v", round, res.Duplicate)
			}
		}
	}
	if n := e.count(`SELECT count(DISTINCT consumer) FROM effects WHERE event_id = $1`, m.ID); n != 2 {
		t.Errorf("consumers with an effect = %d, want 2", n)
	}
	if n := e.effects(m.ID); n != 2 {
		t.Errorf("effects = %d, want 2 (one per consumer)", n)
	}
	if n := e.recorded(m.ID); n != 2 {
		t.Errorf("inbox rows = %d, want 2", n)
	}
}

func TestSQLInbox(t *testing.T) {
	e := setup(t)
	db := e.sqlDB()
	in, err := inbox.NewSQL(db, inbox.Config{Consumer: "shipping"}) // the search_path finds the table
	if err != nil {
		t.Fatal(err)
	}
	m := msg()
	write := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, m.ID)
		return err
	}
	boom := errors.New("boom")
	if _, err := in.Handle(ctx(t), m, func(ctx context.Context, tx *sql.Tx) error {
		_ = write(ctx, tx)
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("handler error = %v, want boom", err)
	}
	if n := e.recorded(m.ID) + e.effects(m.ID); n != 0 {
		t.Fatalf("rows after handler error = %d", n)
	}
	if res, err := in.Handle(ctx(t), m, write); err != nil || res.Duplicate {
		t.Fatalf("first: %+v %v", res, err)
	}
	// The pgx Inbox and the database/sql one share the records.
	res, err := e.inbox.Handle(ctx(t), m, effect(m))
	if err != nil || !res.Duplicate {
		t.Fatalf("pgx redelivery: %+v %v; want duplicate", res, err)
	}
	proc := in.Processor(func(ctx context.Context, tx *sql.Tx, got inbox.Message) error {
		t.Error("Processor ran the handler for a processed event")
		return nil
	})
	if res, err := proc(ctx(t), m); err != nil || !res.Duplicate {
		t.Fatalf("Processor: %+v %v", res, err)
	}
	if n := e.effects(m.ID); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

func TestProcessorPassesMessage(t *testing.T) {
	e := setup(t)
	m := msg()
	var got inbox.Message
	proc := e.inbox.Processor(func(ctx context.Context, tx pgx.Tx, msg inbox.Message) error {
		got = msg
		return effect(msg)(ctx, tx)
	})
	if _, err := proc(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || got.EventType != m.EventType || string(got.Payload) != string(m.Payload) {
		t.Errorf("handler got %+v, want %+v", got, m)
	}
}

func TestHandleRejectsNilID(t *testing.T) {
	e := setup(t)
	_, err := e.inbox.Handle(ctx(t), inbox.Message{}, func(context.Context, pgx.Tx) error {
		t.Error("handler called without an event id")
		return nil
	})
	if !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("err = %v, want ErrInvalidMessage", err)
	}
}

func TestNotMigrated(t *testing.T) {
	e := setup(t)
	in, err := inbox.New(e.pool, inbox.Config{Schema: e.schema, Table: "missing", Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	m := msg()
	_, err = in.Handle(ctx(t), m, effect(m))
	if !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("err = %v, want ErrNotMigrated", err)
	}
	if _, err := in.Cleanup(ctx(t), time.Hour, 10); !errors.Is(err, inbox.ErrNotMigrated) {
		t.Fatalf("Cleanup err = %v, want ErrNotMigrated", err)
	}
}

func TestCleanup(t *testing.T) {
	e := setup(t)
	billing := e.newInbox(e.pool, "billing")
	var old, recent []uuid.UUID
	for i := range 7 {
		m := msg()
		for _, in := range []*inbox.Inbox{e.inbox, billing} {
			if _, err := in.Handle(ctx(t), m, func(context.Context, pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if i < 5 {
			old = append(old, m.ID)
		} else {
			recent = append(recent, m.ID)
		}
	}
	if _, err := e.pool.Exec(ctx(t), `UPDATE processed_events SET processed_at = now() - interval '8 days' WHERE event_id = ANY($1)`, old); err != nil {
		t.Fatal(err)
	}
	n, err := e.inbox.Cleanup(ctx(t), 7*24*time.Hour, 2) // 3 statements: 2, 2, 1
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("deleted %d, want 5", n)
	}
	if left := e.count(`SELECT count(*) FROM processed_events WHERE consumer = 'shipping'`); left != 2 {
		t.Errorf("shipping rows left = %d, want the 2 recent ones", left)
	}
	if left := e.count(`SELECT count(*) FROM processed_events WHERE consumer = 'billing'`); left != 7 {
		t.Errorf("billing rows = %d, want 7: cleanup is per consumer", left)
	}
	// What retention means: a redelivery of a cleaned-up event runs again,
	// one of a recent event does not.
	res, err := e.inbox.Handle(ctx(t), inbox.Message{ID: old[0]}, func(context.Context, pgx.Tx) error { return nil })
	if err != nil || res.Duplicate {
		t.Errorf("redelivery after retention: %+v %v; want processed again", res, err)
	}
	res, err = e.inbox.Handle(ctx(t), inbox.Message{ID: recent[0]}, func(context.Context, pgx.Tx) error { return nil })
	if err != nil || !res.Duplicate {
		t.Errorf("redelivery within retention: %+v %v; want duplicate", res, err)
	}
	if n, err := e.inbox.Cleanup(ctx(t), 7*24*time.Hour, 2); err != nil || n != 0 {
		t.Errorf("second cleanup = %d, %v; want 0", n, err)
	}
	for _, bad := range []struct {
		d time.Duration
		b int
	}{{0, 1}, {time.Hour, 0}} {
		if _, err := e.inbox.Cleanup(ctx(t), bad.d, bad.b); err == nil {
			t.Errorf("Cleanup(%s, %d) accepted", bad.d, bad.b)
		}
	}
}

// TestConfigValidation: New and NewSQL refuse a bad field with a
// *outboxtype.ConfigError naming inbox.Config and the field.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	pool := testdb.Pool(t, "")
	for _, tc := range []struct {
		cfg   inbox.Config
		field string
	}{
		{inbox.Config{}, "Consumer"},
		{inbox.Config{Consumer: strings.Repeat("c", inbox.MaxConsumerLen+1)}, "Consumer"},
		{inbox.Config{Consumer: "a\x00b"}, "Consumer"},
		{inbox.Config{Consumer: "\xff"}, "Consumer"},
		{inbox.Config{Consumer: "c", Table: strings.Repeat("t", 64)}, "Table"},
		{inbox.Config{Consumer: "c", Table: strings.Repeat("t", 50)}, "Table"}, // derived index name too long
		{inbox.Config{Consumer: "c", Table: "a\x00b"}, "Table"},
		{inbox.Config{Consumer: "c", Schema: strings.Repeat("s", 64)}, "Schema"},
		{inbox.Config{Consumer: "c", Schema: "\xff"}, "Schema"},
	} {
		_, err := inbox.New(pool, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("New(%+v)", tc.cfg), err, "inbox.Config", tc.field)
		_, err = inbox.NewSQL(&sql.DB{}, tc.cfg)
		configcheck.Refused(t, fmt.Sprintf("NewSQL(%+v)", tc.cfg), err, "inbox.Config", tc.field)
	}
	if _, err := inbox.New(nil, inbox.Config{Consumer: "c"}); err == nil {
		t.Error("New(nil pool) accepted")
	}
	if _, err := inbox.NewSQL(nil, inbox.Config{Consumer: "c"}); err == nil {
		t.Error("NewSQL(nil db) accepted")
	}
}

// TestDocumentedDefaults: the docs show the defaults' values.
func TestDocumentedDefaults(t *testing.T) {
	t.Parallel()
	configcheck.Defaults(t, ".", map[string]any{"DefaultTable": inbox.DefaultTable})
}

// recordingTracer is an inbox.Tracer that records what Handle tells it.
type recordingTracer struct {
	mu     sync.Mutex
	events []string
}

type tracerKey struct{}

func (r *recordingTracer) Start(ctx context.Context, consumer string, m inbox.Message) (context.Context, func(inbox.Result, error)) {
	r.mu.Lock()
	r.events = append(r.events, "start "+consumer+" "+m.Header("traceparent"))
	r.mu.Unlock()
	return context.WithValue(ctx, tracerKey{}, "span"), func(res inbox.Result, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, fmt.Sprintf("end duplicate=%t err=%t", res.Duplicate, err != nil))
	}
}

// Handle runs the handler in the context the Tracer started, and ends the
// span once per delivery with its outcome; with no Tracer it starts none.
func TestTracer(t *testing.T) {
	e := setup(t)
	tr := &recordingTracer{}
	in, err := inbox.New(e.pool, inbox.Config{Schema: e.schema, Consumer: "traced", Tracer: tr})
	if err != nil {
		t.Fatal(err)
	}
	m := msg()
	m.Headers = map[string]string{"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	var inSpan any
	if _, err := in.Handle(ctx(t), m, func(ctx context.Context, tx pgx.Tx) error {
		inSpan = ctx.Value(tracerKey{})
		return effect(m)(ctx, tx)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Handle(ctx(t), m, effect(m)); err != nil {
		t.Fatal(err)
	}
	failing := msg()
	if _, err := in.Handle(ctx(t), failing, func(context.Context, pgx.Tx) error { return errors.New("boom") }); err == nil {
		t.Fatal("a failing handler: want its error")
	}
	want := []string{
		"start traced 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "end duplicate=false err=false",
		"start traced 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "end duplicate=true err=false",
		"start traced ", "end duplicate=false err=true",
	}
	if !slices.Equal(tr.events, want) {
		t.Errorf("tracer saw %q, want %q", tr.events, want)
	}
	if inSpan != "span" {
		t.Error("the handler did not run in the context the Tracer returned")
	}
}
