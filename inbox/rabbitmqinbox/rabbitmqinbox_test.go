package rabbitmqinbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/rabbitmqinbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/rabbitmq"
)

func brokerURL() string {
	if u := os.Getenv("RABBITMQ_URL"); u != "" {
		return u
	}
	return rabbitmq.DefaultURL
}

// env is one test's database schema (inbox + effects) and RabbitMQ queue.
type env struct {
	t     *testing.T
	pool  *pgxpool.Pool
	in    *inbox.Inbox
	queue string
	pub   *rabbitmq.Publisher
	admin *amqp.Channel

	mu      sync.Mutex
	results map[uuid.UUID][]string
	calls   atomic.Int32
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
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testdb.NewSchemaName("pgoutbox.test.inbox")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	// The outbox's own publisher, to the default exchange: routing key = queue.
	pub, err := rabbitmq.New(rabbitmq.Config{URL: brokerURL(), RoutingKey: queue})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return &env{t: t, pool: pool, in: in, queue: queue, pub: pub, admin: ch, results: map[uuid.UUID][]string{}}
}

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v", brokerURL(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

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

// run starts the adapter on its own connection; the returned func stops it
// and closes that connection, so unacknowledged deliveries go back to the
// queue.
func (e *env) run(cfg rabbitmqinbox.Config) (stop func()) {
	e.t.Helper()
	c, err := rabbitmqinbox.New(e.proc(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	conn := dial(e.t)
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, ch, e.queue) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				e.t.Error("Run did not return within 10s of cancellation")
			}
			conn.Close()
		})
	}
	e.t.Cleanup(stop)
	return stop
}

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

// ready is the number of messages waiting in the queue (not counting
// deliveries held unacknowledged by a consumer).
func (e *env) ready() int {
	e.t.Helper()
	q, err := e.admin.QueueDeclarePassive(e.queue, false, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return q.Messages
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

func (e *env) waitOutcomes(ids []uuid.UUID, n int) {
	e.t.Helper()
	waitFor(e.t, 15*time.Second, fmt.Sprintf("%d outcomes per event", n), func() bool {
		for _, id := range ids {
			if len(e.outcomes(id)) < n {
				return false
			}
		}
		return true
	})
}

func TestProcessesAndAcks(t *testing.T) {
	e := setup(t)
	stop := e.run(rabbitmqinbox.Config{Workers: 4})
	ids := e.publish(20)
	e.waitOutcomes(ids, 1)
	stop() // closing the connection would requeue anything not acknowledged
	if n := e.ready(); n != 0 {
		t.Errorf("%d messages back in the queue after the consumer left, want 0 (all acked)", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 1 || got[0] != "processed" {
			t.Errorf("event %s: outcomes %v", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d", id, n)
		}
	}
}

// A handler error nacks with requeue: the broker delivers the message again
// and the second delivery commits; nothing was recorded by the failed one.
func TestHandlerErrorRequeues(t *testing.T) {
	e := setup(t)
	failed := map[uuid.UUID]bool{}
	e.fail = func(m inbox.Message) error {
		if !failed[m.ID] {
			failed[m.ID] = true
			return errors.New("payment service timed out")
		}
		return nil
	}
	stop := e.run(rabbitmqinbox.Config{RequeueDelay: 20 * time.Millisecond})
	ids := e.publish(3)
	e.waitOutcomes(ids, 2)
	stop()
	if n := e.ready(); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 2 || got[0] != "error" || got[1] != "processed" {
			t.Errorf("event %s: outcomes %v, want [error processed]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
}

// A consumer dies after its inbox transaction committed and before it acked:
// RabbitMQ requeues the delivery when the connection drops, the next
// consumer gets it, the inbox reports a duplicate and the adapter acks.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	e := setup(t)
	ids := e.publish(3)

	conn1 := dial(t)
	ch1, err := conn1.Channel()
	if err != nil {
		t.Fatal(err)
	}
	proc := e.proc()
	for range ids {
		d, ok, err := ch1.Get(e.queue, false) // manual ack
		if err != nil || !ok {
			t.Fatalf("instance 1: get: %v %v", ok, err)
		}
		m, err := rabbitmqinbox.ToMessage(d)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := proc(ctx(t), m); err != nil || res.Duplicate {
			t.Fatalf("instance 1: %+v %v", res, err)
		}
	}
	conn1.Close() // the crash: committed, never acked

	stop := e.run(rabbitmqinbox.Config{})
	e.waitOutcomes(ids, 2)
	stop()
	if n := e.ready(); n != 0 {
		t.Errorf("%d messages left in the queue, want 0", n)
	}
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 2 || got[0] != "processed" || got[1] != "duplicate" {
			t.Errorf("event %s: outcomes %v, want [processed duplicate]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
	if n := e.calls.Load(); n != 3 {
		t.Errorf("handler calls = %d, want 3", n)
	}
}

// A delivery without an event id is rejected, not requeued; the one after it
// is processed.
func TestInvalidDeliveryRejected(t *testing.T) {
	e := setup(t)
	stop := e.run(rabbitmqinbox.Config{})
	if err := e.admin.PublishWithContext(ctx(t), "", e.queue, false, false, amqp.Publishing{Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	good := e.publish(1)
	e.waitOutcomes(good, 1)
	stop()
	if n := e.ready(); n != 0 {
		t.Errorf("%d messages left in the queue, want 0 (the invalid one rejected)", n)
	}
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler calls = %d, want 1", n)
	}
}

func TestToMessageFallsBackToProperties(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	m, err := rabbitmqinbox.ToMessage(amqp.Delivery{MessageId: id.String(), Type: "order.created", Body: []byte(`{}`),
		Headers: amqp.Table{outbox.HeaderAggregateID: "42", "n": int32(7)}})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != id || m.EventType != "order.created" || m.AggregateID != "42" || m.Header("n") != "7" {
		t.Errorf("got %+v", m)
	}
	if _, err := rabbitmqinbox.ToMessage(amqp.Delivery{MessageId: "not-a-uuid"}); !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Errorf("invalid message_id: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   rabbitmqinbox.Config
		field string
	}{
		{rabbitmqinbox.Config{Workers: -1}, "Config.Workers"},
		{rabbitmqinbox.Config{Prefetch: -1}, "Config.Prefetch"},
		{rabbitmqinbox.Config{RequeueDelay: -1}, "Config.RequeueDelay"},
	} {
		if _, err := rabbitmqinbox.New(proc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := rabbitmqinbox.New(nil, rabbitmqinbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}

// Run reports a closed channel, so the caller can reconnect.
func TestRunReturnsWhenChannelCloses(t *testing.T) {
	e := setup(t)
	c, err := rabbitmqinbox.New(e.proc(), rabbitmqinbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	conn := dial(t)
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx(t), ch, e.queue) }()
	ids := e.publish(1)
	e.waitOutcomes(ids, 1)
	conn.Close()
	select {
	case err := <-done:
		if !errors.Is(err, rabbitmqinbox.ErrChannelClosed) {
			t.Fatalf("Run = %v, want ErrChannelClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the connection closed")
	}
}
