package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/internal/tcpproxy"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
)

// Two transactions of one aggregate, inserted in one order and committed in
// the other, arrive in commit order: the WAL's order, not seq's.
func TestStreamCommitOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, b.config())
	ctx := context.Background()
	first, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	second, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Rollback(ctx)
	ins := `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'o1', $1, '{}')`
	if _, err := first.Exec(ctx, ins, "inserted-first"); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Exec(ctx, ins, "inserted-second"); err != nil {
		t.Fatal(err)
	}
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	a, c := next(t, s), next(t, s)
	if got := append(eventTypes(a), eventTypes(c)...); !slices.Equal(got, []string{"inserted-second", "inserted-first"}) {
		t.Fatalf("events arrived as %v, want commit order [inserted-second inserted-first]", got)
	}
	if a.Events[0].Seq <= c.Events[0].Seq {
		t.Fatalf("seq %d then %d: the test did not commit out of insertion order", a.Events[0].Seq, c.Events[0].Seq)
	}
	if a.LSN >= c.LSN {
		t.Fatalf("commit LSNs %s then %s, want ascending", a.LSN, c.LSN)
	}
}

// A rolled-back insert never reaches the stream.
func TestStreamRolledBackNeverAppears(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, b.config())
	ctx := context.Background()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'o1', 'rolled-back', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	b.insert(t, "o1", "committed")
	if got := eventTypes(next(t, s)); !slices.Equal(got, []string{"committed"}) {
		t.Fatalf("first transaction has %v, want [committed]", got)
	}
}

// Inserts into other tables (even in the publication), and updates and
// deletes of the outbox table, produce nothing; a transaction mixing them
// with an outbox insert yields the insert alone.
func TestStreamIgnoresOtherTablesAndChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY, total int)`); err != nil {
		t.Fatal(err)
	}
	// Put the other table in the publication too: the stream, not only the
	// publication, must filter it.
	if _, err := b.pool.Exec(ctx, "ALTER PUBLICATION "+b.names.QPublication+" ADD TABLE orders"); err != nil {
		t.Fatal(err)
	}
	s := b.open(t, b.config())
	b.insert(t, "o1", "first")
	must := func(sql string) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	must(`INSERT INTO orders VALUES (1, 10)`)
	must(`UPDATE outbox_events SET processed_at = now()`)
	must(`DELETE FROM outbox_events`)
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES (2, 20)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '2', 'mixed', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var last *Tx
	for _, want := range []string{"first", "mixed"} {
		got := next(t, s)
		last = got
		if !slices.Equal(eventTypes(got), []string{want}) || len(got.Errors) != 0 {
			t.Fatalf("got events %v errors %v, want [%s]", eventTypes(got), got.Errors, want)
		}
		if err := s.Ack(got.LSN); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing is unsettled, so the stream confirms past everything it
	// received, including the transactions that carried no event.
	if s.Unsettled() != 0 || s.Confirmed() < last.LSN {
		t.Fatalf("%d unsettled, confirmed %s, want 0 and at least %s", s.Unsettled(), s.Confirmed(), last.LSN)
	}
}

// The article's plain INSERT (its columns only) and a Writer-style insert
// with headers decode into complete messages.
func TestStreamDecodesRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, b.config())
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	b.insert(t, "o-42", "order.placed")
	id := uuid.New()
	if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, 'cart', 'c-1', 'cart.paid', '{"total": 12.5, "items": ["a"]}', '{"traceparent": "00-abc", "tenant": "t1"}')`, id); err != nil {
		t.Fatal(err)
	}
	plain := next(t, s).Events[0]
	if plain.ID == uuid.Nil || plain.AggregateType != "order" || plain.AggregateID != "o-42" || plain.EventType != "order.placed" ||
		string(plain.Payload) != `{"n": 1}` || plain.Seq <= 0 || plain.Headers != nil || plain.Attempt != 1 || plain.CreatedAt.Before(before) {
		t.Fatalf("plain insert decoded as %+v", plain)
	}
	full := next(t, s).Events[0]
	var payload map[string]any
	if err := json.Unmarshal(full.Payload, &payload); err != nil || payload["total"] != 12.5 {
		t.Fatalf("payload %s: %v", full.Payload, err)
	}
	if full.ID != id || full.Headers["traceparent"] != "00-abc" || full.Headers["tenant"] != "t1" || full.Seq != plain.Seq+1 {
		t.Fatalf("insert with headers decoded as %+v", full)
	}
}

// Columns are found by name: a hand-made table with the outbox columns in
// another order, without seq or headers, decodes; a row that cannot be
// decoded is reported with its LSN, its transaction's and its id, not
// dropped.
func TestStreamColumnsByNameAndDecodeErrors(t *testing.T) {
	t.Parallel()
	srv := testdb.Logical(t)
	schema := srv.Schema(t)
	pool := srv.Pool(t, schema)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE events (
		note text, payload jsonb, event_type text, aggregate_id text, created_at timestamptz DEFAULT now(),
		aggregate_type text, headers jsonb, id uuid PRIMARY KEY DEFAULT gen_random_uuid())`); err != nil {
		t.Fatal(err)
	}
	b := withSlot(t, pool, schema, "events")
	s := b.open(t, b.config())
	if _, err := pool.Exec(ctx, `INSERT INTO events (note, payload, event_type, aggregate_id, aggregate_type) VALUES ('x', '[1]', 'e1', 'a1', 'agg')`); err != nil {
		t.Fatal(err)
	}
	bad := uuid.New()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO events (payload, event_type, aggregate_id, aggregate_type) VALUES ('{}', 'e2', NULL, 'agg')`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, payload, event_type, aggregate_id, aggregate_type, headers) VALUES ($1, '{}', 'e3', 'a3', 'agg', '[1]')`, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (payload, event_type, aggregate_id, aggregate_type) VALUES ('{}', 'e4', 'a4', 'agg')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	good := next(t, s)
	if e := good.Events[0]; e.EventType != "e1" || e.AggregateID != "a1" || e.AggregateType != "agg" || string(e.Payload) != "[1]" || e.Seq != 0 || e.CreatedAt.IsZero() {
		t.Fatalf("decoded %+v", e)
	}
	mixed := next(t, s)
	if !slices.Equal(eventTypes(mixed), []string{"e4"}) || len(mixed.Errors) != 2 {
		t.Fatalf("got events %v and %d errors, want [e4] and 2", eventTypes(mixed), len(mixed.Errors))
	}
	nullAgg, badHeaders := mixed.Errors[0], mixed.Errors[1]
	if nullAgg.LSN == 0 || nullAgg.LSN > mixed.LSN || nullAgg.Error() == "" || !containsAll(nullAgg.Error(), "aggregate_id is NULL", nullAgg.LSN.String()) {
		t.Fatalf("NULL aggregate_id reported as %v (LSN %s)", nullAgg, nullAgg.LSN)
	}
	if badHeaders.ID != bad || !containsAll(badHeaders.Error(), "headers", bad.String()) {
		t.Fatalf("bad headers reported as %v", badHeaders)
	}
	// Settled by its transaction, as Ack takes it, not by its own place.
	for _, d := range mixed.Errors {
		if d.Commit != mixed.LSN || d.LSN >= d.Commit {
			t.Fatalf("decode error at %s has commit %s, want its transaction's %s", d.LSN, d.Commit, mixed.LSN)
		}
	}
}

// A restarted stream resumes at the confirmed position: it redelivers the
// transactions not acknowledged, and the acknowledged ones after the lowest
// unacknowledged (the confirmed position cannot skip a gap); once all are
// acknowledged, nothing.
func TestStreamRestartRedeliversUnacked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, b.config())
	b.insert(t, "a", "t1")
	b.insert(t, "a", "t2")
	b.insert(t, "a", "t3")
	t1, t2, t3 := next(t, s), next(t, s), next(t, s)
	for _, tx := range []*Tx{t3, t1} { // out of order; t2 stays unsettled
		if err := s.Ack(tx.LSN); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Confirmed(); got != t1.LSN {
		t.Fatalf("confirmed %s, want %s (the end of t1, before unsettled t2)", got, t1.LSN)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitInactive(t, b)
	st, err := Inspect(context.Background(), b.pool, b.names)
	if err != nil {
		t.Fatal(err)
	}
	if st.ConfirmedFlush != t1.LSN {
		t.Fatalf("slot confirmed_flush_lsn %s after close, want %s", st.ConfirmedFlush, t1.LSN)
	}

	s = b.open(t, b.config())
	r2, r3 := next(t, s), next(t, s)
	if got := append(eventTypes(r2), eventTypes(r3)...); !slices.Equal(got, []string{"t2", "t3"}) || r2.LSN != t2.LSN || r3.LSN != t3.LSN {
		t.Fatalf("after restart got %v, want [t2 t3] again", got)
	}
	for _, tx := range []*Tx{r2, r3} {
		if err := s.Ack(tx.LSN); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitInactive(t, b)

	s = b.open(t, b.config())
	b.insert(t, "a", "t4")
	if got := eventTypes(next(t, s)); !slices.Equal(got, []string{"t4"}) {
		t.Fatalf("after acknowledging everything got %v, want [t4]", got)
	}
}

// One reader per slot: a second Open gets ErrSlotBusy naming the holder's
// PID, and takes over once the first reader's connection dies.
func TestStreamSecondReaderBusyThenTakesOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.open(t, b.config())
	b.insert(t, "a", "before")
	before := next(t, first)
	if err := first.Ack(before.LSN); err != nil {
		t.Fatal(err)
	}
	// The ack reaches the server with the next status report: only then is
	// "before" not sent again.
	testkit.Eventually(t, 10*time.Second, "a status report carrying the ack", func() bool {
		var ok bool
		if err := b.pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
			before.LSN.String(), b.names.Slot).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	})
	_, err := Open(context.Background(), b.config())
	var be *SlotBusyError
	if !isBusy(err) || !errors.As(err, &be) || be.PID == 0 || be.Slot != b.names.Slot {
		t.Fatalf("second Open: %v, want a SlotBusyError with the holder's PID", err)
	}
	// The first reader dies without a goodbye (as a SIGKILLed process: its
	// socket closes, nothing else).
	b.insert(t, "a", "in-flight")
	testkit.Eventually(t, 10*time.Second, "the first reader receiving the transaction", func() bool { return len(first.out) > 0 })
	_ = first.conn.Conn().Close()
	var second *Stream
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("Open: %v", err) }), 5*time.Second,
		"the takeover once the first reader died", func() bool {
			second, err = Open(context.Background(), b.config())
			if err != nil && !isBusy(err) {
				t.Fatalf("takeover: %v", err)
			}
			return err == nil
		})
	t.Cleanup(func() { _ = second.Close(context.Background()) })
	// Nothing lost: the unacknowledged transaction comes again, the
	// acknowledged one does not.
	if got := eventTypes(next(t, second)); !slices.Equal(got, []string{"in-flight"}) {
		t.Fatalf("the new reader got %v first, want [in-flight]", got)
	}
	select {
	case <-first.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the dead reader's stream did not end")
	}
}

// A server that stops answering (a network partition) ends the stream
// with ErrTimeout instead of hanging, and the server frees the slot after
// SenderTimeout so a standby can take over.
func TestStreamTimeoutOnDeadServer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	cfg := b.config()
	cfg.ConnString = u.String()
	cfg.Timeout = time.Second
	cfg.SenderTimeout = time.Second
	s := b.open(t, cfg)
	b.insert(t, "a", "e1")
	next(t, s)
	proxy.Partition()
	defer proxy.Restore()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = s.Next(ctx)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Next during a partition: %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timed out after %s, want about %s", d, cfg.Timeout)
	}
	waitInactive(t, b) // the server gave up on the silent reader
	other := b.open(t, b.config())
	if got := eventTypes(next(t, other)); !slices.Equal(got, []string{"e1"}) {
		t.Fatalf("standby got %v, want the unacknowledged [e1]", got)
	}
}

// Cancelling the stream's context ends it promptly and frees the slot.
func TestStreamContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, b.config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	cancel()
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("stream still running 5 s after its context ended")
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after cancel: %v, want ErrClosed", err)
	}
	waitInactive(t, b)
	// Next honours its own context while the stream waits for events.
	s = b.open(t, b.config())
	nctx, ncancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ncancel()
	if _, err := s.Next(nctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with an expiring context: %v", err)
	}
}

// Drop refuses a slot a reader is streaming (ErrSlotBusy, naming the
// reader), leaving the slot and the reader as they were: a running relay
// would create the slot again at once. Once the reader stops, Drop drops.
func TestDropActiveSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.open(t, b.config())
	err := Drop(context.Background(), b.pool, b.names)
	if !errors.Is(err, ErrSlotBusy) || !contains(err.Error(), "stop every WAL relay of the table first") {
		t.Fatalf("drop while streamed: %v, want ErrSlotBusy naming the fix", err)
	}
	st, err := Inspect(context.Background(), b.pool, b.names)
	if err != nil || !st.Exists {
		t.Fatalf("after the refused drop: %+v, %v; want the slot kept", st, err)
	}
	select {
	case <-s.Done():
		t.Fatal("the refused drop ended the reader")
	default:
	}
	_ = s.Close(context.Background())
	<-s.Done()
	if err := Drop(context.Background(), b.pool, b.names); err != nil {
		t.Fatalf("drop once the reader stopped: %v", err)
	}
	if _, err := Open(context.Background(), b.config()); !errors.Is(err, ErrSlotLost) {
		t.Fatalf("open after drop: %v, want ErrSlotLost", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !contains(s, sub) {
			return false
		}
	}
	return true
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestStreamBufferBytes: the transactions decoded ahead of Next hold at
// most BufferBytes of payloads (a larger one passes alone), and every
// transaction still arrives, in order.
func TestStreamBufferBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	insert := func(n, size int) {
		t.Helper()
		pad := strings.Repeat("x", size)
		if _, err := b.pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', 'o1', $1, jsonb_build_object('pad', $2::text))`, fmt.Sprint("e", n), pad); err != nil {
			t.Fatal(err)
		}
	}
	const size = 100 << 10
	for i := range 6 {
		insert(i, size)
	}
	insert(6, 3*size) // larger than the budget
	cfg := b.config()
	cfg.BufferBytes = 2*size + size/2
	s := b.open(t, cfg)
	testkit.Eventually(t, 30*time.Second, "two transactions decoded ahead", func() bool { return len(s.out) >= 2 })
	time.Sleep(500 * time.Millisecond) // time to decode the rest, were it not bounded
	if n, got := len(s.out), s.buffered.Load(); n != 2 || got > int64(cfg.BufferBytes) {
		t.Fatalf("%d transactions and %d bytes decoded ahead, want 2 within %d bytes", n, got, cfg.BufferBytes)
	}
	for i := range 7 {
		tx := next(t, s)
		if got := eventTypes(tx); len(got) != 1 || got[0] != fmt.Sprint("e", i) {
			t.Fatalf("transaction %d: events %v, want [e%d]", i, got, i)
		}
		if err := s.Ack(tx.LSN); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.buffered.Load(); got != 0 {
		t.Errorf("%d bytes still counted as buffered after every transaction was taken", got)
	}
}
