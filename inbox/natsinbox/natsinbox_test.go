package natsinbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/natsinbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testnats"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// env is one test's database schema (inbox + effects table) and JetStream
// stream with a durable consumer.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	in     *inbox.Inbox
	nc     *natsgo.Conn
	js     jetstream.JetStream
	stream string
	prefix string
	pub    *outboxnats.Publisher

	mu      sync.Mutex
	results map[uuid.UUID][]string // per event: "processed", "duplicate" or "error"
	calls   atomic.Int32           // handler calls
	fail    func(inbox.Message) error
}

func setup(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := inbox.Migrate(ctx(t), pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx(t), `CREATE TABLE effects (event_id UUID NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	nc := testnats.Conn(t)
	s, prefix := testnats.Stream(t, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, pool: pool, in: in, nc: nc, js: js, stream: s.CachedInfo().Config.Name, prefix: prefix,
		pub: pub, results: map[uuid.UUID][]string{}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// consumer creates the durable pull consumer "shipping" with ackWait.
func (e *env) consumer(js jetstream.JetStream, ackWait time.Duration) jetstream.Consumer {
	e.t.Helper()
	c, err := js.CreateOrUpdateConsumer(ctx(e.t), e.stream, jetstream.ConsumerConfig{
		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// proc is the consumer's processing: the inbox around a handler writing one
// effect row, recording every outcome.
func (e *env) proc() inbox.Processor {
	handle := e.in.Processor(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		e.calls.Add(1)
		e.mu.Lock()
		fail := e.fail
		e.mu.Unlock()
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, m.ID)
		return err
	})
	return func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
		res, err := handle(ctx, m)
		outcome := "processed"
		switch {
		case err != nil:
			outcome = "error"
		case res.Duplicate:
			outcome = "duplicate"
		}
		e.mu.Lock()
		e.results[m.ID] = append(e.results[m.ID], outcome)
		e.mu.Unlock()
		return res, err
	}
}

func (e *env) outcomes(id uuid.UUID) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.results[id]...)
}

// run starts a natsinbox.Consumer on cons; stopped when the test ends.
func (e *env) run(cons jetstream.Consumer, cfg natsinbox.Config) {
	e.t.Helper()
	c, err := natsinbox.New(e.proc(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, cons) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			e.t.Error("Run did not return within 10s of cancellation")
		}
	})
}

// publish sends n events through the outbox's own JetStream publisher.
func (e *env) publish(n int) []uuid.UUID {
	e.t.Helper()
	var ids []uuid.UUID
	for i := range n {
		m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: fmt.Sprint(i),
			EventType: "order.created", Payload: []byte(`{}`), CreatedAt: time.Now()}
		if err := e.pub.Publish(ctx(e.t), m); err != nil {
			e.t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

func (e *env) effects(id uuid.UUID) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx(e.t), `SELECT count(*) FROM effects WHERE event_id = $1`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// settled waits until the consumer has nothing pending or unacknowledged.
func (e *env) settled(cons jetstream.Consumer, within time.Duration) {
	e.t.Helper()
	waitFor(e.t, within, "every message acknowledged", func() bool {
		info, err := cons.Info(ctx(e.t))
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

func TestProcessesAndAcks(t *testing.T) {
	e := setup(t)
	cons := e.consumer(e.js, 30*time.Second)
	e.run(cons, natsinbox.Config{Workers: 4})
	ids := e.publish(20)
	e.settled(cons, 10*time.Second) // with AckWait 30s, only an Ack settles a message this fast
	for _, id := range ids {
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
		if got := e.outcomes(id); len(got) != 1 || got[0] != "processed" {
			t.Errorf("event %s: outcomes %v", id, got)
		}
	}
}

// A handler error Naks: the message comes back well before AckWait and the
// second delivery commits. Nothing was recorded by the failed one.
func TestHandlerErrorNaksAndRedelivers(t *testing.T) {
	for _, delay := range []time.Duration{0, 200 * time.Millisecond} {
		t.Run(fmt.Sprint("NakDelay=", delay), func(t *testing.T) {
			e := setup(t)
			failed := map[uuid.UUID]bool{}
			e.fail = func(m inbox.Message) error {
				if !failed[m.ID] {
					failed[m.ID] = true
					return errors.New("payment service timed out")
				}
				return nil
			}
			cons := e.consumer(e.js, 30*time.Second)
			e.run(cons, natsinbox.Config{NakDelay: delay})
			ids := e.publish(3)
			e.settled(cons, 10*time.Second)
			for _, id := range ids {
				if got := e.outcomes(id); len(got) != 2 || got[0] != "error" || got[1] != "processed" {
					t.Errorf("event %s: outcomes %v, want [error processed]", id, got)
				}
				if n := e.effects(id); n != 1 {
					t.Errorf("event %s: effects = %d, want 1", id, n)
				}
			}
			info, err := cons.Info(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if info.NumRedelivered != 0 || info.Delivered.Consumer != 6 {
				t.Errorf("consumer delivered %d (redelivered pending %d), want 6 deliveries for 3 events", info.Delivered.Consumer, info.NumRedelivered)
			}
		})
	}
}

// A consumer process dies after its inbox transaction committed and before it
// acknowledged. JetStream redelivers after AckWait to the next instance,
// which reports a duplicate and acknowledges; the effect happened once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	e := setup(t)
	const ackWait = time.Second
	ids := e.publish(3)

	// Instance 1: its own connection; fetch, process through the inbox, then
	// "crash" (close the connection) without acknowledging.
	nc1 := testnats.Conn(t)
	js1, err := jetstream.New(nc1)
	if err != nil {
		t.Fatal(err)
	}
	cons1 := e.consumer(js1, ackWait)
	batch, err := cons1.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	proc := e.proc()
	got := 0
	for msg := range batch.Messages() {
		m, err := natsinbox.ToMessage(msg)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("instance 1: %+v, %v", res, err)
		}
		got++
	}
	if got != 3 {
		t.Fatalf("instance 1 fetched %d messages, want 3", got)
	}
	nc1.Close() // the crash: committed, never acked

	// Instance 2 runs the adapter.
	cons2 := e.consumer(e.js, ackWait)
	e.run(cons2, natsinbox.Config{})
	e.settled(cons2, 15*time.Second)
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 2 || got[0] != "processed" || got[1] != "duplicate" {
			t.Errorf("event %s: outcomes %v, want [processed duplicate]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
	if n := e.calls.Load(); n != 3 {
		t.Errorf("handler calls = %d, want 3 (none for the redeliveries)", n)
	}
}

// The relay re-sends an event past JetStream's duplicate window (a new
// Nats-Msg-Id reaches the consumer as a new message): the inbox skips it.
func TestRepublishedEventIsADuplicate(t *testing.T) {
	e := setup(t)
	cons := e.consumer(e.js, 30*time.Second)
	e.run(cons, natsinbox.Config{})
	id := e.publish(1)[0]
	for i := range 2 {
		msg := natsgo.NewMsg(e.prefix + ".order.created")
		msg.Header.Set(outbox.HeaderEventID, id.String())
		msg.Header.Set(outbox.HeaderEventType, "order.created")
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-resend-%d", id, i))
		if _, err := e.js.PublishMsg(ctx(t), msg); err != nil {
			t.Fatal(err)
		}
	}
	e.settled(cons, 10*time.Second)
	if got := e.outcomes(id); len(got) != 3 || got[0] != "processed" || got[1] != "duplicate" || got[2] != "duplicate" {
		t.Errorf("outcomes %v, want [processed duplicate duplicate]", got)
	}
	if n := e.effects(id); n != 1 {
		t.Errorf("effects = %d, want 1", n)
	}
}

// A message without an event id can never be processed: it is terminated,
// not redelivered, and never reaches the handler.
func TestInvalidMessageTerminated(t *testing.T) {
	e := setup(t)
	cons := e.consumer(e.js, 500*time.Millisecond)
	e.run(cons, natsinbox.Config{})
	if _, err := e.js.Publish(ctx(t), e.prefix+".order.created", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	good := e.publish(1)[0] // the next message is unaffected
	e.settled(cons, 10*time.Second)
	time.Sleep(time.Second) // two AckWaits: a message not terminated would be redelivered
	info, err := cons.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Delivered.Consumer != 2 || info.NumAckPending != 0 {
		t.Errorf("deliveries = %d, ack pending %d; want 2, 0 (no redelivery of the invalid message)", info.Delivered.Consumer, info.NumAckPending)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler calls = %d, want 1", n)
	}
	if n := e.effects(good); n != 1 {
		t.Errorf("effects of the valid message = %d", n)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   natsinbox.Config
		field string
	}{
		{natsinbox.Config{NakDelay: -1}, "Config.NakDelay"},
		{natsinbox.Config{Workers: -1}, "Config.Workers"},
		{natsinbox.Config{Workers: 5000}, "Config.Workers"},
	} {
		if _, err := natsinbox.New(proc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := natsinbox.New(nil, natsinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}
