package kafkainbox_test

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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/kafkainbox"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/kafka"
)

const topic = "order.created"

// env is one test's database schema (inbox + effects) and in-process Kafka
// (kfake, the real protocol over loopback TCP) with a 3-partition topic.
type env struct {
	t       *testing.T
	pool    *pgxpool.Pool
	in      *inbox.Inbox
	brokers []string
	pub     *kafka.Publisher

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
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := c.ListenAddrs()
	// The outbox's own publisher: key = aggregate id, standard headers.
	pub, err := kafka.New(kafka.Config{Brokers: brokers, Topic: "{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pub.Close)
	return &env{t: t, pool: pool, in: in, brokers: brokers, pub: pub, results: map[uuid.UUID][]string{}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// client is a consumer-group member of group "shipping", as Run requires.
func (e *env) client(extra ...kgo.Opt) *kgo.Client {
	e.t.Helper()
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(e.brokers...), kgo.ConsumerGroup("shipping"), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond),
	}, extra...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cl.CloseAllowingRebalance) // Close would wait for an AllowRebalance
	return cl
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

// run starts the adapter on a new group member; the returned func stops it,
// waits, and closes the client (leaving the group).
func (e *env) run(cfg kafkainbox.Config) (stop func()) {
	e.t.Helper()
	cl := e.client()
	c, err := kafkainbox.New(e.proc(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx, cl) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				e.t.Error("Run did not return within 15s of cancellation")
			}
			cl.CloseAllowingRebalance()
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
			EventType: topic, Payload: []byte(`{}`), CreatedAt: time.Now()}
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

func (e *env) waitOutcomes(ids []uuid.UUID, n int) {
	e.t.Helper()
	waitFor(e.t, 20*time.Second, fmt.Sprintf("%d outcomes per event", n), func() bool {
		for _, id := range ids {
			if len(e.outcomes(id)) < n {
				return false
			}
		}
		return true
	})
}

// committedAll checks the group's committed offsets cover everything: a new
// member of the group, starting from them, receives only a record produced
// afterwards.
func (e *env) committedAll() {
	e.t.Helper()
	sentinel := e.publish(1)[0]
	cl := e.client()
	c := ctx(e.t)
	for {
		fs := cl.PollFetches(c)
		if err := c.Err(); err != nil {
			e.t.Fatalf("no sentinel record: %v", err)
		}
		var first *kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			if first == nil {
				first = r
			}
		})
		if first == nil {
			continue
		}
		m, err := kafkainbox.ToMessage(first)
		if err != nil {
			e.t.Fatal(err)
		}
		if m.ID != sentinel {
			e.t.Fatalf("a new group member first received %s (offset %d), not the sentinel: offsets were not committed", m.ID, first.Offset)
		}
		return
	}
}

func TestProcessesAndCommits(t *testing.T) {
	e := setup(t)
	stop := e.run(kafkainbox.Config{})
	ids := e.publish(20)
	e.waitOutcomes(ids, 1)
	stop()
	for _, id := range ids {
		if got := e.outcomes(id); len(got) != 1 || got[0] != "processed" {
			t.Errorf("event %s: outcomes %v", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d", id, n)
		}
	}
	e.committedAll()
}

// A handler error retries the record in place (Kafka has no nack): the
// offset is not committed past it, and the retry commits the effect once.
func TestHandlerErrorRetries(t *testing.T) {
	e := setup(t)
	failed := map[uuid.UUID]int{}
	e.fail = func(m inbox.Message) error {
		if failed[m.ID] < 2 {
			failed[m.ID]++
			return errors.New("payment service timed out")
		}
		return nil
	}
	stop := e.run(kafkainbox.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	ids := e.publish(3)
	e.waitOutcomes(ids, 3)
	stop()
	for _, id := range ids {
		if got := e.outcomes(id); strings.Join(got, " ") != "error error processed" {
			t.Errorf("event %s: outcomes %v, want [error error processed]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
	e.committedAll()
}

// A consumer dies after its inbox transactions committed and before it
// committed offsets: the next group member gets the records again from the
// last committed offset, the inbox reports duplicates, and Run commits.
func TestCrashBetweenCommitAndOffsetCommit(t *testing.T) {
	e := setup(t)
	ids := e.publish(6)

	cl1 := e.client()
	proc := e.proc()
	seen := 0
	for seen < len(ids) {
		fs := cl1.PollFetches(ctx(t))
		if err := ctx(t).Err(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			m, err := kafkainbox.ToMessage(r)
			if err != nil {
				t.Fatal(err)
			}
			if res, err := proc(ctx(t), m); err != nil || res.Duplicate {
				t.Fatalf("instance 1: %+v %v", res, err)
			}
			seen++
		})
	}
	cl1.CloseAllowingRebalance() // the crash: effects committed, offsets never committed

	stop := e.run(kafkainbox.Config{})
	e.waitOutcomes(ids, 2)
	stop()
	for _, id := range ids {
		if got := e.outcomes(id); strings.Join(got, " ") != "processed duplicate" {
			t.Errorf("event %s: outcomes %v, want [processed duplicate]", id, got)
		}
		if n := e.effects(id); n != 1 {
			t.Errorf("event %s: effects = %d, want 1", id, n)
		}
	}
	if n := e.calls.Load(); n != int32(len(ids)) {
		t.Errorf("handler calls = %d, want %d", n, len(ids))
	}
	e.committedAll()
}

// A record without an event id is skipped and committed; the next is processed.
func TestInvalidRecordSkipped(t *testing.T) {
	e := setup(t)
	prod, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// Same key as the valid record below: same partition, in front of it.
	if err := prod.ProduceSync(ctx(t), &kgo.Record{Topic: topic, Key: []byte("0"), Value: []byte(`{}`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	stop := e.run(kafkainbox.Config{})
	good := e.publish(1)
	e.waitOutcomes(good, 1)
	stop()
	if n := e.calls.Load(); n != 1 {
		t.Errorf("handler calls = %d, want 1", n)
	}
	e.committedAll()
}

func TestRunRefusesAutoCommit(t *testing.T) {
	e := setup(t)
	c, err := kafkainbox.New(e.proc(), kafkainbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]kgo.Opt{
		"autocommit": {kgo.ConsumerGroup("g"), kgo.ConsumeTopics(topic)},
		"no group":   {kgo.ConsumeTopics(topic)},
	} {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Run(ctx(t), cl); !errors.Is(err, kafkainbox.ErrAutoCommit) {
			t.Errorf("%s: Run = %v, want ErrAutoCommit", name, err)
		}
		cl.Close()
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	proc := func(context.Context, inbox.Message) (inbox.Result, error) { return inbox.Result{}, nil }
	for _, tc := range []struct {
		cfg   kafkainbox.Config
		field string
	}{
		{kafkainbox.Config{RetryBase: time.Second, RetryMax: time.Millisecond}, "Config.RetryBase"},
		{kafkainbox.Config{MaxPoll: -1}, "Config.MaxPoll"},
		{kafkainbox.Config{CommitTimeout: -1}, "Config.CommitTimeout"},
	} {
		if _, err := kafkainbox.New(proc, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := kafkainbox.New(nil, kafkainbox.Config{}); err == nil {
		t.Error("New(nil) accepted")
	}
}
