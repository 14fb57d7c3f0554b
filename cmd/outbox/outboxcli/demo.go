package outboxcli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// DefaultDemoDatabaseURL is the demo's database when neither --database-url
// nor DATABASE_URL is set: a local PostgreSQL with trust authentication.
const DefaultDemoDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres"

type demoSettings struct {
	databaseURL   string
	schema        string
	broker        string
	orders        int
	rate          float64
	outage        time.Duration
	relayDown     time.Duration
	rollbackEvery int
	workers       int
	batchSize     int
	timeout       time.Duration
	keep          bool
	verbose       bool
}

func demoCommand() (*options, func(context.Context, *cli, *options) error) {
	var s demoSettings
	o := newOptions("demo", "[flags]", `
Shows the transactional outbox end to end on a machine with PostgreSQL:

  1. migrates a schema of its own: an orders table and the outbox table;
  2. starts an embedded NATS JetStream server (random port, temporary store),
     unless --broker points at a NATS server, and creates a stream;
  3. runs the reference article's order service: each order is inserted into
     orders together with its order.created event (outbox.Writer), in one
     transaction; one order in --rollback-every is rolled back on purpose;
  4. runs the relay (outbox.Relay with the NATS publisher) and a JetStream
     consumer that deduplicates by event id;
  5. injects failures: the NATS server is stopped for --outage, and the relay
     is stopped mid-run (as on SIGTERM) for --relay-down; each time the outbox
     grows, then drains once the relay can publish again;
  6. prints a summary proving that every committed order's event was consumed,
     that no rolled-back order's event ever was, and that nothing became a dead
     letter. It exits 1 if anything was lost.

The schema (and, with --broker, the stream) is dropped at the end unless
--keep. Only --database-url reads the environment (DATABASE_URL); the demo
reads no config file.`)
	o.fs.StringVar(&s.databaseURL, "database-url", DefaultDemoDatabaseURL, "PostgreSQL connection string")
	o.fs.StringVar(&s.schema, "schema", "", "schema to create for the demo; must not exist (default: outbox_demo_<random>)")
	o.fs.StringVar(&s.broker, "broker", "", "NATS server to use instead of the embedded one, e.g. nats://127.0.0.1:4222")
	o.fs.IntVar(&s.orders, "orders", 2000, "orders to create")
	o.fs.Float64Var(&s.rate, "rate", 100, "orders per second")
	o.fs.DurationVar(&s.outage, "outage", 5*time.Second, "how long the embedded NATS server is stopped (0: no outage)")
	o.fs.DurationVar(&s.relayDown, "relay-down", 2*time.Second, "stop the relay mid-run for this long, then restart it (0: never)")
	o.fs.IntVar(&s.rollbackEvery, "rollback-every", 20, "roll back one order transaction in this many (0: none)")
	o.fs.IntVar(&s.workers, "workers", outbox.DefaultWorkers, "relay workers")
	o.fs.IntVar(&s.batchSize, "batch-size", outbox.DefaultBatchSize, "relay batch size")
	o.fs.DurationVar(&s.timeout, "timeout", 2*time.Minute, "give up if the outbox has not drained this long after the last order")
	o.fs.BoolVar(&s.keep, "keep", false, "keep the schema (and stream) for inspection")
	o.fs.BoolVar(&s.verbose, "verbose", false, "show the relay's logs on stderr")
	o.flagOnly("schema", "broker", "orders", "rate", "outage", "relay-down", "rollback-every",
		"workers", "batch-size", "timeout", "keep", "verbose")
	return o, func(ctx context.Context, c *cli, o *options) error { return c.demo(ctx, o, &s) }
}

// demoSQL holds the demo's own statements for one schema. The outbox table
// itself is only ever written through outbox.Writer.
type demoSQL struct {
	createOrders, insertOrder, stats, proof string
}

func newDemoSQL(schema, table string) demoSQL {
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	ob := pgx.Identifier{schema, table}.Sanitize()
	return demoSQL{
		// The article's orders table.
		createOrders: `CREATE TABLE ` + orders + ` (
    id          UUID          PRIMARY KEY,
    customer_id TEXT          NOT NULL,
    total       NUMERIC(12,2) NOT NULL,
    created_at  TIMESTAMPTZ   NOT NULL
)`,
		insertOrder: `INSERT INTO ` + orders + ` (id, customer_id, total, created_at) VALUES ($1, $2, $3, NOW())`,
		// published, pending, dead letters, age of the oldest pending event.
		stats: `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL),
       count(*) FILTER (WHERE processed_at IS NULL AND dead_at IS NULL),
       count(*) FILTER (WHERE dead_at IS NOT NULL AND processed_at IS NULL),
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE processed_at IS NULL AND dead_at IS NULL)), 0)::float8
FROM ` + ob,
		// Every committed order with its event, if any.
		proof: `SELECT o.id::text, e.id FROM ` + orders + ` o
LEFT JOIN ` + ob + ` e ON e.aggregate_type = 'order' AND e.aggregate_id = o.id::text`,
	}
}

// demoCounters is the demo's live state.
type demoCounters struct {
	written, rolledBack atomic.Int64
	mu                  sync.Mutex
	consumed            map[uuid.UUID]bool // event id → seen
	duplicates          int
	rolledBackIDs       map[uuid.UUID]bool // events of rolled-back transactions
}

func (d *demoCounters) consumedCount() (int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.consumed), d.duplicates
}

type outboxStats struct {
	published, pending, dead int64
	lag                      time.Duration
}

func (c *cli) demo(ctx context.Context, o *options, s *demoSettings) (err error) {
	switch {
	case len(o.args) > 0:
		return usageErr("demo: unexpected argument %q", o.args[0])
	case s.orders < 1:
		return o.settingErr("orders", "%d: must be at least 1", s.orders)
	case s.rate <= 0 || math.IsInf(s.rate, 0) || math.IsNaN(s.rate):
		return o.settingErr("rate", "%v: must be a positive number of orders per second", s.rate)
	case s.outage < 0:
		return o.settingErr("outage", "%s: must not be negative", s.outage)
	case s.relayDown < 0:
		return o.settingErr("relay-down", "%s: must not be negative", s.relayDown)
	case s.rollbackEvery < 0:
		return o.settingErr("rollback-every", "%d: must not be negative", s.rollbackEvery)
	case s.workers < 1:
		return o.settingErr("workers", "%d: must be at least 1", s.workers)
	case s.batchSize < 1:
		return o.settingErr("batch-size", "%d: must be at least 1", s.batchSize)
	case s.timeout <= 0:
		return o.settingErr("timeout", "%s: must be positive", s.timeout)
	}
	c.red.addDSN(s.broker)
	if s.broker != "" {
		u, _, err := parseBroker(s.broker)
		if err != nil {
			return o.settingErr("broker", "%v", err)
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return o.settingErr("broker", "the demo consumes with JetStream: want a nats:// or tls:// URL, got %q", u.Redacted())
		}
	}
	if s.schema == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		s.schema = "outbox_demo_" + hex.EncodeToString(b)
	}
	d := dbOptions{DatabaseURL: s.databaseURL, Schema: s.schema}
	pcfg, err := c.poolConfig(o, &d, int32(s.workers)+4)
	if err != nil {
		return err
	}
	pool, err := c.connect(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	out := c.progress()
	start := time.Now()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if exists {
		return o.settingErr("schema", "%q already exists; the demo creates its own schema and drops it at the end, so name a new one", s.schema)
	}
	// From here on the schema is ours: drop it however the demo ends, with a
	// context that an interrupt has not cancelled.
	defer func() {
		if s.keep {
			out.println("kept schema %s (drop it with: DROP SCHEMA %s CASCADE)", s.schema, pgx.Identifier{s.schema}.Sanitize())
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := pool.Exec(cctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{s.schema}.Sanitize()+` CASCADE`); derr != nil && err == nil {
			err = fmt.Errorf("demo: drop schema %s: %w", s.schema, derr)
		}
	}()

	fmt.Fprintf(c.stdout, "pgoutbox demo: the transactional outbox, end to end\n\n")
	fmt.Fprintf(c.stdout, "database  %s, schema %s\n", redactDSN(pcfg.ConnString()), s.schema)
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: s.schema}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	q := newDemoSQL(s.schema, outbox.DefaultTable)
	if _, err := pool.Exec(ctx, q.createOrders); err != nil {
		return fmt.Errorf("demo: create orders table: %w", err)
	}
	fmt.Fprintf(c.stdout, "          migrated: %s.orders and the outbox table %s.outbox_events\n", s.schema, s.schema)

	// The broker.
	brokerURL := s.broker
	var embedded *embeddedNATS
	if brokerURL == "" {
		if embedded, err = startEmbeddedNATS(); err != nil {
			return err
		}
		defer embedded.close()
		brokerURL = embedded.URL()
		fmt.Fprintf(c.stdout, "broker    embedded NATS JetStream at %s (store in %s)\n", brokerURL, embedded.dir)
	} else {
		fmt.Fprintf(c.stdout, "broker    NATS JetStream at %s\n", redactDSN(brokerURL))
	}
	connect := func(name string) (*natsgo.Conn, error) {
		nc, err := natsgo.Connect(brokerURL, natsgo.Name(name), natsgo.MaxReconnects(-1),
			natsgo.ReconnectWait(100*time.Millisecond), natsgo.RetryOnFailedConnect(true))
		if err != nil {
			return nil, fmt.Errorf("demo: nats: %w", err)
		}
		return nc, nil
	}
	relayConn, err := connect("pgoutbox demo relay")
	if err != nil {
		return err
	}
	defer relayConn.Close()
	consumerConn, err := connect("pgoutbox demo consumer")
	if err != nil {
		return err
	}
	defer consumerConn.Close()

	// The stream: the demo is the operator here, so it creates it explicitly.
	stream := strings.ToUpper(s.schema)
	topic := s.schema + ".{event_type}"
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = outboxnats.EnsureStream(sctx, relayConn, stream, []string{s.schema + ".>"}, 0)
	cancel()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if embedded == nil {
		defer func() {
			if s.keep {
				out.println("kept stream %s", stream)
				return
			}
			js, jerr := jetstream.New(relayConn)
			if jerr == nil {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer cancel()
				jerr = js.DeleteStream(cctx, stream)
			}
			if jerr != nil && err == nil {
				err = fmt.Errorf("demo: delete stream %s: %w", stream, jerr)
			}
		}()
	}
	fmt.Fprintf(c.stdout, "          stream %s captures %s.>; subject template %s\n", stream, s.schema, topic)

	// The consumer, on the other side: a durable JetStream consumer with
	// explicit acks, deduplicating by event id as the article recommends.
	counters := &demoCounters{consumed: map[uuid.UUID]bool{}, rolledBackIDs: map[uuid.UUID]bool{}}
	stopConsumer, err := startDemoConsumer(ctx, consumerConn, stream, counters)
	if err != nil {
		return err
	}
	defer stopConsumer()
	fmt.Fprintf(c.stdout, "consumer  durable JetStream consumer, acks each message, drops duplicates by event id\n")

	// The relay.
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if s.verbose {
		logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	pub, err := outboxnats.New(relayConn, outboxnats.Config{Subject: topic})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
		Schema: s.schema, Workers: s.workers, BatchSize: s.batchSize, Logger: logger,
		// Short waits so the demo recovers from its outage in about a second;
		// production keeps the defaults.
		PublishTimeout: 2 * time.Second,
		OutageBackoff:  outbox.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		RetryBackoff:   outbox.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second},
		StatsInterval:  time.Second,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	runner := &relayRunner{relay: relay, ctx: ctx}
	runner.start()
	defer runner.stop()
	fmt.Fprintf(c.stdout, "relay     outbox.Relay: %d workers, batches of %d, NATS publisher (Nats-Msg-Id = event id)\n", s.workers, s.batchSize)
	fmt.Fprintf(c.stdout, "service   %d orders at %g/s; each INSERT INTO orders + its order.created event in one transaction", s.orders, s.rate)
	if s.rollbackEvery > 0 {
		fmt.Fprintf(c.stdout, "; 1 in %d rolled back", s.rollbackEvery)
	}
	fmt.Fprintf(c.stdout, "\n\n")

	stats := func(ctx context.Context) (outboxStats, error) {
		var st outboxStats
		var lag float64
		err := pool.QueryRow(ctx, q.stats).Scan(&st.published, &st.pending, &st.dead, &lag)
		st.lag = time.Duration(lag * float64(time.Second))
		return st, err
	}

	// The order service.
	writer, err := outbox.NewWriter(outbox.WriterConfig{Schema: s.schema})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	wctx, stopWriting := context.WithCancel(ctx)
	// However the demo ends, its goroutines are done before the broker,
	// connections and schema they use are torn down.
	var background sync.WaitGroup
	defer background.Wait()
	defer stopWriting()
	writeDone := make(chan error, 1)
	background.Go(func() {
		writeDone <- runOrderService(wctx, pool, writer, q, s, counters, relay.Wake)
	})

	// Failure injection, while orders are being written.
	var brokerDown atomic.Bool
	scenarioDone := make(chan error, 1)
	background.Go(func() {
		scenarioDone <- runScenario(wctx, s, embedded, runner, counters, &brokerDown, out)
	})

	// Progress until every order is written and the outbox has drained.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var (
		maxPending  int64
		writing     = true
		injecting   = true
		drainedBy   time.Time
		last        outboxStats
		lastPrinted time.Time
	)
	for {
		select {
		case <-ctx.Done():
			out.done()
			return errors.New("demo: interrupted")
		case err := <-writeDone:
			writing = false
			if err != nil {
				return err
			}
			drainedBy = time.Now().Add(s.timeout)
			out.println("[%5.1fs] order service done: %d committed, %d rolled back", time.Since(start).Seconds(),
				counters.written.Load(), counters.rolledBack.Load())
			continue
		case err := <-scenarioDone:
			injecting = false
			if err != nil {
				return err
			}
			continue
		case <-tick.C:
		}
		st, err := stats(ctx)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("demo: %w", err)
		}
		last = st
		maxPending = max(maxPending, st.pending)
		consumed, _ := counters.consumedCount()
		written := counters.written.Load()
		line := fmt.Sprintf("[%5.1fs] orders %d/%d  written %d  published %d  consumed %d  pending %d  lag %s",
			time.Since(start).Seconds(), written+counters.rolledBack.Load(), s.orders, written,
			st.published, consumed, st.pending, age(st.lag))
		if brokerDown.Load() {
			line += "  (NATS down)"
		}
		if c.stdoutTTY || time.Since(lastPrinted) >= c.progressEvery {
			out.update(line)
			lastPrinted = time.Now()
		}
		if writing || injecting {
			continue
		}
		if st.pending == 0 && int64(consumed) >= counters.written.Load() {
			break
		}
		if time.Now().After(drainedBy) {
			out.println("timeout: the outbox did not drain within --timeout %s", s.timeout)
			break
		}
	}
	out.done()
	runner.stop()
	stopConsumer()
	return c.demoSummary(ctx, pool, q, counters, last, maxPending, time.Since(start))
}

// runOrderService is the reference article's order service: the order and
// its event in one transaction, no broker call. It paces orders at s.rate
// and rolls back one transaction in s.rollbackEvery, after both inserts.
func runOrderService(ctx context.Context, pool *pgxpool.Pool, w *outbox.Writer, q demoSQL, s *demoSettings,
	n *demoCounters, wake func()) error {
	errRollback := errors.New("rolled back on purpose")
	interval := time.Duration(float64(time.Second) / s.rate)
	start := time.Now()
	for i := range s.orders {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		orderID, err := uuid.NewV7()
		if err != nil {
			return err
		}
		var ids []uuid.UUID
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			customer := fmt.Sprintf("customer-%d", i%97)
			total := fmt.Sprintf("%d.%02d", 10+i%490, i%100)
			if _, err := tx.Exec(ctx, q.insertOrder, orderID, customer, total); err != nil {
				return fmt.Errorf("insert order: %w", err)
			}
			payload, err := outbox.JSONPayload(map[string]any{"order_id": orderID, "customer_id": customer, "total": total})
			if err != nil {
				return err
			}
			ids, err = w.Write(ctx, tx, outbox.Event{
				AggregateType: "order", AggregateID: orderID.String(), EventType: "order.created", Payload: payload,
			})
			if err != nil {
				return err
			}
			if s.rollbackEvery > 0 && i%s.rollbackEvery == s.rollbackEvery-1 {
				return errRollback
			}
			return nil
		})
		switch {
		case errors.Is(err, errRollback):
			n.rolledBack.Add(1)
			n.mu.Lock()
			for _, id := range ids {
				n.rolledBackIDs[id] = true
			}
			n.mu.Unlock()
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("demo: order service: %w", err)
		default:
			n.written.Add(1)
			wake() // the relay is in-process: no need to wait for its poll
		}
	}
	return nil
}

// relayRunner runs, cancels and restarts the demo's relay.
type relayRunner struct {
	relay  *outbox.Relay
	ctx    context.Context // the demo's: an interrupt stops the relay too
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func (r *relayRunner) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	rctx, cancel := context.WithCancel(r.ctx)
	r.cancel, r.done = cancel, make(chan error, 1)
	go func(done chan<- error) { done <- r.relay.Run(rctx) }(r.done)
}

// stop cancels the relay and waits until it has finished its batches in
// flight. It is a no-op when the relay is not running.
func (r *relayRunner) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	err := <-r.done
	r.cancel = nil
	return err
}

// runScenario injects the demo's failures once a third, then two thirds, of
// the orders are written.
func runScenario(ctx context.Context, s *demoSettings, embedded *embeddedNATS, runner *relayRunner,
	n *demoCounters, brokerDown *atomic.Bool, out *progress) error {
	waitWritten := func(k int64) bool {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for n.written.Load()+n.rolledBack.Load() < k {
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
		}
		return true
	}
	if embedded != nil && s.outage > 0 {
		if !waitWritten(int64(s.orders) / 3) {
			return nil
		}
		out.println(">>> failure: stopping the NATS server for %s. Orders keep committing; their events wait in the outbox.", s.outage)
		embedded.stop()
		brokerDown.Store(true)
		t := time.NewTimer(s.outage)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil // interrupted: the demo shuts the server down anyway
		case <-t.C:
		}
		if err := embedded.restart(); err != nil {
			return fmt.Errorf("demo: restart NATS: %w", err)
		}
		brokerDown.Store(false)
		out.println(">>> NATS is back after %s: the relay drains the backlog (no attempt was counted during the outage).", s.outage)
	}
	if s.relayDown > 0 {
		if !waitWritten(2 * int64(s.orders) / 3) {
			return nil
		}
		stopAt := time.Now()
		if err := runner.stop(); err != nil {
			return fmt.Errorf("demo: relay: %w", err)
		}
		out.println(">>> failure: relay stopped mid-run, as on SIGTERM (its batches in flight finished in %s); restarting it in %s.",
			time.Since(stopAt).Round(time.Millisecond), s.relayDown)
		t := time.NewTimer(s.relayDown)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		runner.start()
		out.println(">>> relay restarted: it resumes from the table, where every unpublished event still waits.")
	}
	return nil
}

// startDemoConsumer consumes the stream with a durable consumer and records
// every event id; a redelivered or republished event counts as a duplicate
// and is dropped.
func startDemoConsumer(ctx context.Context, nc *natsgo.Conn, stream string, n *demoCounters) (stop func(), err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("demo: consumer: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(cctx, stream, jetstream.ConsumerConfig{
		Durable: "demo-consumer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("demo: consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		id, perr := uuid.Parse(m.Headers().Get(outbox.HeaderEventID))
		if perr == nil {
			n.mu.Lock()
			if n.consumed[id] {
				n.duplicates++
			} else {
				n.consumed[id] = true
			}
			n.mu.Unlock()
		}
		_ = m.Ack() // a lost ack means a redelivery: counted as a duplicate above
	}, jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {
		// Disconnections during the outage; Consume resumes by itself.
	}))
	if err != nil {
		return nil, fmt.Errorf("demo: consumer: %w", err)
	}
	var once sync.Once
	return func() { once.Do(cc.Stop) }, nil
}

func (c *cli) demoSummary(ctx context.Context, pool *pgxpool.Pool, q demoSQL, n *demoCounters, st outboxStats,
	maxPending int64, elapsed time.Duration) error {
	rows, err := pool.Query(ctx, q.proof)
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	var (
		orderID       string
		eventID       *uuid.UUID
		committed     int
		withoutEvent  int
		lost          []uuid.UUID
		committedIDs  = map[uuid.UUID]bool{}
		phantom       int
		consumed, dup = n.consumedCount()
	)
	n.mu.Lock()
	defer n.mu.Unlock()
	_, err = pgx.ForEachRow(rows, []any{&orderID, &eventID}, func() error {
		committed++
		if eventID == nil {
			withoutEvent++
			return nil
		}
		committedIDs[*eventID] = true
		if !n.consumed[*eventID] {
			lost = append(lost, *eventID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("demo: summary: %w", err)
	}
	for id := range n.consumed {
		if !committedIDs[id] {
			phantom++
		}
	}
	rolledBackConsumed := 0
	for id := range n.rolledBackIDs {
		if n.consumed[id] {
			rolledBackConsumed++
		}
	}
	w := c.stdout
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  orders committed     %6d  each with its order.created event, written in the same transaction\n", committed)
	fmt.Fprintf(w, "  orders rolled back   %6d  events of theirs consumed: %d (the event rolled back with the order)\n", n.rolledBack.Load(), rolledBackConsumed)
	fmt.Fprintf(w, "  events published     %6d  confirmed by JetStream, then marked in the outbox\n", st.published)
	fmt.Fprintf(w, "  events consumed      %6d  distinct; duplicates dropped by the consumer: %d\n", consumed, dup)
	fmt.Fprintf(w, "  pending at the peak  %6d  the outbox grows while events cannot be published, then drains\n", maxPending)
	fmt.Fprintf(w, "  dead letters         %6d\n", st.dead)
	fmt.Fprintf(w, "  lost                 %6d  committed orders whose event never reached the consumer\n", len(lost))
	fmt.Fprintf(w, "  elapsed              %6s\n", elapsed.Round(100*time.Millisecond))
	ok := len(lost) == 0 && phantom == 0 && withoutEvent == 0 && st.dead == 0
	fmt.Fprintf(w, "\nresult: lost %d, duplicates %d, dead letters %d, unexpected events %d: ", len(lost), dup, st.dead, phantom+withoutEvent)
	if !ok {
		fmt.Fprintln(w, "FAILED")
		for i, id := range lost {
			if i == 10 {
				fmt.Fprintf(w, "  ... and %d more\n", len(lost)-10)
				break
			}
			fmt.Fprintf(w, "  lost event %s\n", id)
		}
		return errors.New("demo: events were lost or unexpected (see the summary)")
	}
	fmt.Fprintln(w, "OK, every committed order's event was delivered, and no rolled-back order's ever was")
	return nil
}
