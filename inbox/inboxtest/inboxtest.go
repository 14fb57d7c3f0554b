// Package inboxtest is the conformance suite every inbox broker adapter runs
// (natsinbox, rabbitmqinbox, kafkainbox, redisinbox, pubsubinbox, mqttinbox),
// on the real PostgreSQL and the real broker (or its official fake): the same
// delivery stories, the same assertions on rows and outcomes, whatever the
// broker. An adapter's own tests keep only
// what is particular to its broker.
//
// Env is the consumer's side shared by all of them, httpinbox included: a
// schema holding the inbox table and an effects table, an Inbox for the
// consumer "shipping" (tracing with inboxotel on the global provider, so the
// handler's ctx carries the sender's span context), and a Processor that
// writes one effect row per event and records every outcome.
package inboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/inboxotel"
	"github.com/pgoutbox/outbox/internal/testdb"
)

// Consumer is the inbox consumer name every Env uses; adapters name their
// consumer group after it.
const Consumer = "shipping"

// Outcomes recorded per delivery.
const (
	Processed = "processed"
	Duplicate = "duplicate"
	Failed    = "error"
)

// Env is one test's consumer: its own schema, inbox and effects table.
type Env struct {
	T      *testing.T
	Pool   *pgxpool.Pool
	Schema string
	Inbox  *inbox.Inbox

	calls   atomic.Int32
	mu      sync.Mutex
	results map[uuid.UUID][]string
	fail    func(context.Context, inbox.Message) error
}

// Setup marks t parallel and builds its Env.
func Setup(t *testing.T) *Env {
	t.Helper()
	t.Parallel()
	schema := testdb.Schema(t)
	pool := testdb.Pool(t, schema)
	if _, err := inbox.Migrate(Ctx(t), pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(Ctx(t), `CREATE TABLE effects (event_id UUID NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: Consumer, Tracer: inboxotel.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return &Env{T: t, Pool: pool, Schema: schema, Inbox: in, results: map[uuid.UUID][]string{}}
}

// Ctx is a context that ends with t, after a minute at most.
func Ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// SetFail makes the handler call f first; f's error fails the delivery.
func (e *Env) SetFail(f func(ctx context.Context, m inbox.Message) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail = f
}

// FailFirst makes each event's first n deliveries fail in the handler.
func (e *Env) FailFirst(n int) {
	var mu sync.Mutex
	failed := map[uuid.UUID]int{}
	e.SetFail(func(_ context.Context, m inbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if failed[m.ID] < n {
			failed[m.ID]++
			return fmt.Errorf("payment service timed out (delivery %d of event %s)", failed[m.ID], m.ID)
		}
		return nil
	})
}

// Processor is the consumer's processing: the inbox around a handler that
// writes one effect row, every outcome recorded.
func (e *Env) Processor() inbox.Processor {
	handle := e.Inbox.Processor(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		e.calls.Add(1)
		e.mu.Lock()
		fail := e.fail
		e.mu.Unlock()
		if fail != nil {
			if err := fail(ctx, m); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id) VALUES ($1)`, m.ID)
		return err
	})
	return func(ctx context.Context, m inbox.Message) (inbox.Result, error) {
		res, err := handle(ctx, m)
		outcome := Processed
		switch {
		case err != nil:
			outcome = Failed
		case res.Duplicate:
			outcome = Duplicate
		}
		e.mu.Lock()
		e.results[m.ID] = append(e.results[m.ID], outcome)
		e.mu.Unlock()
		return res, err
	}
}

// Calls is how many times the handler ran.
func (e *Env) Calls() int { return int(e.calls.Load()) }

// Outcomes lists event id's outcomes in delivery order.
func (e *Env) Outcomes(id uuid.UUID) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.results[id]...)
}

// Effects counts event id's effect rows.
func (e *Env) Effects(id uuid.UUID) int {
	e.T.Helper()
	var n int
	if err := e.Pool.QueryRow(Ctx(e.T), `SELECT count(*) FROM effects WHERE event_id = $1`, id).Scan(&n); err != nil {
		e.T.Fatal(err)
	}
	return n
}

// WaitOutcomes waits until every id has at least n outcomes.
func (e *Env) WaitOutcomes(ids []uuid.UUID, n int) {
	e.T.Helper()
	WaitFor(e.T, 20*time.Second, fmt.Sprintf("%d outcomes per event", n), func() bool {
		for _, id := range ids {
			if len(e.Outcomes(id)) < n {
				return false
			}
		}
		return true
	})
}

// CheckOnce fails the test unless each id's outcomes are want (say
// "error processed") and its effect was written exactly once.
func (e *Env) CheckOnce(ids []uuid.UUID, want ...string) {
	e.T.Helper()
	for _, id := range ids {
		if got := e.Outcomes(id); strings.Join(got, " ") != strings.Join(want, " ") {
			e.T.Errorf("event %s: outcomes %v, want %v", id, got, want)
		}
		if n := e.Effects(id); n != 1 {
			e.T.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
}

// WaitFor polls cond until it holds, failing t after within.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Events returns n new order.created events, aggregate ids "0".."n-1".
func Events(n int) []*outbox.Message {
	out := make([]*outbox.Message, n)
	for i := range out {
		out[i] = &outbox.Message{ID: uuid.Must(uuid.NewV7()), AggregateType: "order", AggregateID: fmt.Sprint(i),
			EventType: "order.created", Payload: []byte(`{}`), CreatedAt: time.Now()}
	}
	return out
}

// IDs returns the events' ids.
func IDs(msgs []*outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}

// Adapter is one broker's side of the suite, built fresh for each story on
// its own destination (stream, queue, topic) by the function given to Run.
type Adapter interface {
	// Publish sends msgs with the outbox's own publisher for this broker.
	Publish(t *testing.T, msgs ...*outbox.Message)
	// PublishInvalid sends a message without an event id, delivered before
	// the next Publish (Kafka: to the partition of aggregate "0").
	PublishInvalid(t *testing.T)
	// Start runs the adapter with proc, with short redelivery delays; stop
	// ends it and waits for Run to return.
	Start(t *testing.T, proc inbox.Processor) (stop func())
	// ProcessThenCrash receives n published messages as a consumer of its
	// own, runs each through proc, and dies (closes its connection or
	// leaves the group) without acknowledging any.
	ProcessThenCrash(t *testing.T, proc inbox.Processor, n int)
	// CheckSettled fails t if the broker still holds a message for the
	// consumer: ready, or delivered and not acknowledged (or, for Kafka,
	// not covered by the committed offsets). Called after stop.
	CheckSettled(t *testing.T)
}

// Run runs every story against the adapter newAdapter builds for an Env.
func Run(t *testing.T, newAdapter func(t *testing.T, e *Env) Adapter) {
	t.Run("ProcessedOnceAndAcknowledged", func(t *testing.T) {
		e := Setup(t)
		a := newAdapter(t, e)
		stop := a.Start(t, e.Processor())
		msgs := Events(20)
		a.Publish(t, msgs...)
		e.WaitOutcomes(IDs(msgs), 1)
		stop()
		a.CheckSettled(t)
		e.CheckOnce(IDs(msgs), Processed)
	})

	// A handler error leaves nothing recorded and the delivery comes back;
	// the next delivery commits the effect once.
	t.Run("HandlerErrorRedelivers", func(t *testing.T) {
		e := Setup(t)
		a := newAdapter(t, e)
		e.FailFirst(1)
		stop := a.Start(t, e.Processor())
		msgs := Events(3)
		a.Publish(t, msgs...)
		e.WaitOutcomes(IDs(msgs), 2)
		stop()
		a.CheckSettled(t)
		e.CheckOnce(IDs(msgs), Failed, Processed)
	})

	// A consumer dies after its inbox transactions committed and before it
	// acknowledged: the broker hands the messages to the next consumer, the
	// inbox reports duplicates without calling the handler, and the adapter
	// acknowledges them.
	t.Run("CrashBetweenCommitAndAck", func(t *testing.T) {
		e := Setup(t)
		a := newAdapter(t, e)
		msgs := Events(3)
		a.Publish(t, msgs...)
		a.ProcessThenCrash(t, e.Processor(), len(msgs))
		stop := a.Start(t, e.Processor())
		e.WaitOutcomes(IDs(msgs), 2)
		stop()
		a.CheckSettled(t)
		e.CheckOnce(IDs(msgs), Processed, Duplicate)
		if n := e.Calls(); n != len(msgs) {
			t.Errorf("handler calls = %d, want %d (none for the redeliveries)", n, len(msgs))
		}
	})

	// A relay with a CloudEvents envelope, either mode: the adapter reads
	// the CloudEvent's id as the event id, and the handler sees the event's
	// type, aggregate, time, headers and payload as without one.
	t.Run("CloudEvents", func(t *testing.T) {
		e := Setup(t)
		a := newAdapter(t, e)
		var mu sync.Mutex
		seen := map[uuid.UUID]inbox.Message{}
		e.SetFail(func(_ context.Context, m inbox.Message) error {
			mu.Lock()
			seen[m.ID] = m
			mu.Unlock()
			return nil
		})
		stop := a.Start(t, e.Processor())
		msgs := CloudEventsEvents(2)
		a.Publish(t, msgs...)
		e.WaitOutcomes(IDs(msgs), 1)
		stop()
		a.CheckSettled(t)
		e.CheckOnce(IDs(msgs), Processed)
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			checkCloudEvent(t, m, seen[m.ID])
		}
	})

	// A message without an event id can never be processed: it is settled
	// without reaching the handler, and the next message is unaffected.
	t.Run("InvalidMessageSettledWithoutHandler", func(t *testing.T) {
		e := Setup(t)
		a := newAdapter(t, e)
		a.PublishInvalid(t)
		stop := a.Start(t, e.Processor())
		msgs := Events(1)
		a.Publish(t, msgs...)
		e.WaitOutcomes(IDs(msgs), 1)
		stop()
		a.CheckSettled(t)
		e.CheckOnce(IDs(msgs), Processed)
		if n := e.Calls(); n != 1 {
			t.Errorf("handler calls = %d, want 1", n)
		}
	})
}

// CloudEventsEvents returns 2n new events, n for each CloudEvents envelope,
// with a tenant header and a source of the suite's.
func CloudEventsEvents(n int) []*outbox.Message {
	var out []*outbox.Message
	for _, env := range []outbox.Envelope{outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured} {
		for _, m := range Events(n) {
			m.Envelope, m.CloudEventsSource = env, "/pgoutbox/inboxtest.outbox_events"
			m.Headers = map[string]string{"tenant": "acme"}
			m.Payload = []byte(fmt.Sprintf(`{"order_id":%q}`, m.AggregateID))
			m.CreatedAt = m.CreatedAt.Truncate(time.Microsecond)
			out = append(out, m)
		}
	}
	return out
}

// checkCloudEvent fails t unless the handler saw m as the relay wrote it.
func checkCloudEvent(t *testing.T, m *outbox.Message, got inbox.Message) {
	t.Helper()
	if got.ID != m.ID || got.EventType != m.EventType || got.AggregateType != m.AggregateType ||
		got.AggregateID != m.AggregateID || !got.CreatedAt.Equal(m.CreatedAt) {
		t.Errorf("%s: handler saw id %s type %q aggregate %q/%q created %s; want %s %q %q/%q %s", m.Envelope,
			got.ID, got.EventType, got.AggregateType, got.AggregateID, got.CreatedAt,
			m.ID, m.EventType, m.AggregateType, m.AggregateID, m.CreatedAt)
	}
	if got.Header("tenant") != "acme" {
		t.Errorf("%s: handler saw header tenant = %q, want acme (headers %v)", m.Envelope, got.Header("tenant"), got.Headers)
	}
	if strings.ReplaceAll(string(got.Payload), " ", "") != string(m.Payload) {
		t.Errorf("%s: handler saw payload %s, want %s", m.Envelope, got.Payload, m.Payload)
	}
}

// PublishAll sends msgs with pub, failing t on the first error.
func PublishAll(t *testing.T, pub outbox.Publisher, msgs ...*outbox.Message) {
	t.Helper()
	for _, m := range msgs {
		if err := pub.Publish(Ctx(t), m); err != nil {
			t.Fatal(err)
		}
	}
}

// Background runs an adapter's Run in a goroutine. stop cancels its context,
// waits for it to return (failing t on an error or after 15s), then calls
// after (say, to close the adapter's connection); stop runs once, and at the
// end of the test if not called before.
func Background(t *testing.T, run func(ctx context.Context) error, after func()) (stop func()) {
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Error("Run did not return within 15s of cancellation")
			}
			if after != nil {
				after()
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
