package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/admin"
	"github.com/pgoutbox/outbox/internal/testdb"
	"github.com/pgoutbox/outbox/internal/testkit"
	"github.com/pgoutbox/outbox/memory"
)

// TestOrderedRetryHoldsOnlyItsAggregate: while X's first event waits for its
// retry, X's second event waits too, and Y flows.
func TestOrderedRetryHoldsOnlyItsAggregate(t *testing.T) {
	e := setup(t)
	evs := []outbox.Event{event("X", 1), event("X", 2), event("Y", 1), event("Y", 2)}
	var ids []string
	err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		got, err := e.writer.Write(ctx(t), tx, evs...)
		for _, id := range got {
			ids = append(ids, id.String())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var failX1 atomic.Bool
	failX1.Store(true)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID.String() == ids[0] && failX1.Load() {
			return errors.New("nack")
		}
		return nil
	})
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, RetryBackoff: outbox.Backoff{Base: time.Millisecond, Max: time.Millisecond}})
	for range 5 {
		if _, err := r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	got := map[string]bool{}
	for _, m := range pub.Messages() {
		got[m.ID.String()] = true
	}
	if got[ids[1]] {
		t.Fatal("X's second event was published while its first was failing")
	}
	if !got[ids[2]] || !got[ids[3]] {
		t.Fatal("aggregate Y was held back by X's failure")
	}
	failX1.Store(false)
	for range 5 {
		if _, err := r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	ms := pub.Messages()
	if len(ms) != 4 || ms[2].ID.String() != ids[0] || ms[3].ID.String() != ids[1] {
		t.Errorf("publish order = %v, want Y1 Y2 X1 X2", aggIDs(ms))
	}
}

// TestOrderedDeadLetterHoldsSuccessors: the documented policy: a dead letter
// holds its aggregate's later events until an operator re-queues it.
func TestOrderedDeadLetterHoldsSuccessors(t *testing.T) {
	e := setup(t)
	var ids []string
	err := pgx.BeginFunc(ctx(t), e.pool, func(tx pgx.Tx) error {
		got, err := e.writer.Write(ctx(t), tx, event("X", 1), event("X", 2), event("Y", 1))
		for _, id := range got {
			ids = append(ids, id.String())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var reject atomic.Bool
	reject.Store(true)
	pub := memory.New()
	pub.FailWith(func(m *outbox.Message) error {
		if m.ID.String() == ids[0] && reject.Load() {
			return outbox.Permanent(errors.New("too large"))
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	r := e.relay(pub, outbox.RelayConfig{Ordered: true, Registerer: reg, StatsInterval: 5 * time.Millisecond})
	for range 3 {
		if _, err := r.ProcessBatch(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := pub.Len(); n != 1 || pub.Messages()[0].AggregateID != "Y" {
		t.Fatalf("published %v, want only Y while X's head is a dead letter", aggIDs(pub.Messages()))
	}
	stop := e.run(r)
	testkit.Eventually(testkit.WithDetail(t, func() string {
		return fmt.Sprintf("outbox_blocked_aggregates = %v", gauge(t, reg, "outbox_blocked_aggregates"))
	}), 10*time.Second, "outbox_blocked_aggregates 1", func() bool { return gauge(t, reg, "outbox_blocked_aggregates") == 1 })
	if st, err := e.admin().Status(ctx(t)); err != nil || st.BlockedAggregates != 1 {
		t.Errorf("status blocked aggregates = %+v, %v; want 1", st, err)
	}
	reject.Store(false)
	if _, err := e.admin().Retry(ctx(t), admin.RetrySelector{All: true}); err != nil {
		t.Fatal(err)
	}
	if err := pub.WaitDistinct(ctx(t), 3); err != nil {
		t.Fatal(err)
	}
	stop()
	ms := pub.Messages()
	if ms[1].ID.String() != ids[0] || ms[2].ID.String() != ids[1] {
		t.Errorf("after retry, order = %v, want X1 before X2", aggIDs(ms))
	}
}

// TestLateCommitIsNotSkipped: a transaction holding a lower seq commits after
// one with a higher seq. The relay has no high-water mark: nothing is skipped.
func TestLateCommitIsNotSkipped(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			e := setup(t)
			early, err := e.pool.Begin(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			defer early.Rollback(ctx(t))
			lowIDs, err := e.writer.Write(ctx(t), early, event("A", 1)) // lower seq, commits last
			if err != nil {
				t.Fatal(err)
			}
			highIDs := e.write(1) // higher seq, committed now
			pub := memory.New()
			r := e.relay(pub, outbox.RelayConfig{Ordered: ordered})
			if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Published != 1 || pub.Messages()[0].ID != highIDs[0] {
				t.Fatalf("first batch = %+v, %v", res, err)
			}
			if err := early.Commit(ctx(t)); err != nil {
				t.Fatal(err)
			}
			if res, err := r.ProcessBatch(ctx(t)); err != nil || res.Published != 1 || pub.Messages()[1].ID != lowIDs[0] {
				t.Fatalf("the late commit was skipped: batch = %+v, %v", res, err)
			}
		})
	}
}

// tortureEvents sizes TestOrderedRandomized: the CI size by default, any
// size on request (go test -run TestOrderedRandomized -torture.events 100000 .).
var tortureEvents = flag.Int("torture.events", envInt("OUTBOX_TORTURE_EVENTS", 3000),
	"events written by TestOrderedRandomized (also OUTBOX_TORTURE_EVENTS); aggregates = max(200, events/20)")

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestOrderedRandomized is the ordering torture test: writers and 4 relays
// run together; the publisher fails a random 10% of publishes and sometimes
// hangs past the publish timeout; relays are killed (their sessions
// terminated mid-batch) and restarted. A checker over everything the
// "broker" acknowledged reports lost and per-aggregate inversions, which must
// both be 0. -torture.events makes it longer.
func TestOrderedRandomized(t *testing.T) {
	e := setup(t)
	events := *tortureEvents
	aggregates := max(200, events/20)
	br := &broker{firstAck: map[string]int{}, next: map[string]int{}}
	pub := outbox.PublisherFunc(br.publish)

	// Writers: each owns a slice of aggregates and writes their events in order.
	const writers = 4
	var wg sync.WaitGroup
	perWriter := events / writers
	for w := range writers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 1))
			seqs := map[int]int{}
			for i := 0; i < perWriter; {
				n := 1 + rnd.IntN(5)
				evs := make([]outbox.Event, 0, n)
				for ; n > 0 && i < perWriter; n-- {
					agg := w + writers*rnd.IntN(aggregates/writers)
					key := fmt.Sprintf("agg-%d", agg)
					evs = append(evs, outbox.Event{AggregateType: "acct", AggregateID: key, EventType: "acct.changed",
						Payload: fmt.Appendf(nil, `{"n":%d}`, seqs[agg])})
					seqs[agg]++
					i++
				}
				err := pgx.BeginFunc(context.Background(), e.pool, func(tx pgx.Tx) error {
					_, err := e.writer.Write(context.Background(), tx, evs...)
					return err
				})
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}

	// Relays: each on its own pool so it can be killed on its own.
	type running struct {
		pool   *pgxpool.Pool
		cancel context.CancelFunc
		done   chan struct{}
	}
	start := func(i int) *running {
		cfg, _ := pgxpool.ParseConfig(testdb.URL())
		cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("%s-relay-%d", e.schema, i)
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		r, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
			Schema: e.schema, Ordered: true, Workers: 2, BatchSize: 20, MaxAttempts: 1000,
			PollInterval: 2 * time.Millisecond, PublishTimeout: 150 * time.Millisecond,
			RetryBackoff:  outbox.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
			OutageBackoff: outbox.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithCancel(context.Background())
		run := &running{pool: pool, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(run.done); _ = r.Run(c) }()
		return run
	}
	kill := func(i int, r *running) {
		// Terminate the relay's sessions first (a crash mid-batch), then stop it.
		_, _ = e.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`,
			fmt.Sprintf("%s-relay-%d", e.schema, i))
		r.cancel()
		<-r.done
		r.pool.Close()
	}
	relays := make([]*running, 4)
	for i := range relays {
		relays[i] = start(i)
	}
	stopKiller := make(chan struct{})
	killerDone := make(chan int)
	go func() {
		kills := 0
		rnd := rand.New(rand.NewPCG(42, 42))
		for {
			select {
			case <-stopKiller:
				killerDone <- kills
				return
			case <-time.After(time.Duration(50+rnd.IntN(100)) * time.Millisecond):
			}
			i := rnd.IntN(len(relays))
			kill(i, relays[i])
			relays[i] = start(i)
			kills++
		}
	}()
	wg.Wait()
	// Let the killer work a little longer on the backlog, then drain in peace.
	time.Sleep(500 * time.Millisecond)
	close(stopKiller)
	kills := <-killerDone
	br.setFaults(false)
	defer func() { // a failed wait leaves them running
		for i, r := range relays {
			if r != nil {
				kill(i, r)
			}
		}
	}()
	pending := 0
	testkit.Eventually(testkit.WithDetail(t, func() string { return fmt.Sprintf("%d events pending", pending) }),
		90*time.Second+time.Duration(events)*time.Millisecond, "every event relayed once the faults stop",
		func() bool { pending = e.count("processed_at IS NULL"); return pending == 0 })
	for i, r := range relays {
		kill(i, r)
		relays[i] = nil
	}
	lost, dups, inversions, acks := br.check(t, e)
	t.Logf("events=%d aggregates=%d relays=4 kills=%d acks=%d duplicates=%d lost=%d inversions=%d",
		events, aggregates, kills, acks, dups, lost, inversions)
	if lost != 0 || inversions != 0 {
		t.Fatalf("lost=%d inversions=%d, want 0 and 0", lost, inversions)
	}
	if kills < 3 {
		t.Errorf("only %d relay kills happened; the test did not exercise crashes", kills)
	}
}

// broker records acknowledgements the way a consumer of a partitioned broker
// would see them.
type broker struct {
	mu         sync.Mutex
	noFaults   bool
	firstAck   map[string]int // event key -> ack count
	next       map[string]int // aggregate -> next n expected for a first ack
	inversions int
	acks       int
	rnd        *rand.Rand
}

func (b *broker) setFaults(on bool) { b.mu.Lock(); b.noFaults = !on; b.mu.Unlock() }

func (b *broker) publish(ctx context.Context, m *outbox.Message) error {
	b.mu.Lock()
	if b.rnd == nil {
		b.rnd = rand.New(rand.NewPCG(7, 7))
	}
	roll := b.rnd.IntN(100)
	faults := !b.noFaults
	b.mu.Unlock()
	if faults && roll < 10 {
		return errors.New("random broker nack")
	}
	if faults && roll == 10 {
		<-ctx.Done() // hang until the relay gives up
		return ctx.Err()
	}
	var p struct{ N int }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return outbox.Permanent(err)
	}
	key := m.AggregateID + "/" + strconv.Itoa(p.N)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.acks++
	if b.firstAck[key] == 0 {
		if p.N != b.next[m.AggregateID] {
			b.inversions++
		}
		b.next[m.AggregateID] = max(b.next[m.AggregateID], p.N+1)
	}
	b.firstAck[key]++
	return nil
}

func (b *broker) check(t *testing.T, e *env) (lost, dups, inversions, acks int) {
	rows, err := e.pool.Query(ctx(t), `SELECT aggregate_id, (payload->>'n')::int FROM outbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	var agg string
	var n int
	b.mu.Lock()
	defer b.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&agg, &n}, func() error {
		c := b.firstAck[agg+"/"+strconv.Itoa(n)]
		if c == 0 {
			lost++
		}
		if c > 1 {
			dups += c - 1
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return lost, dups, b.inversions, b.acks
}
