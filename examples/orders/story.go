package orders

import (
	"context"
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
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/natsinbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// DedupWindow is the stream's JetStream duplicate window. It is kept short
// (the server's minimum is 100ms, its default two minutes) so that the
// story's re-send of every event gets past the broker's dedup and reaches
// the shipping service, as a relay re-send after a long outage would.
const DedupWindow = 500 * time.Millisecond

// Broker is a NATS server the story can take away and bring back: Stop is
// the outage, Start the recovery (same address, same store).
type Broker interface {
	Stop()
	Start() error
}

// Config is one run of the story. Zero values mean the defaults stated on
// each field.
type Config struct {
	// DatabaseURL is the PostgreSQL the services use. Required.
	DatabaseURL string
	// Schema is created for the run (it must not exist) and dropped at the
	// end unless Keep. Required.
	Schema string
	// NATSURL is a NATS server with JetStream. Required.
	NATSURL string
	// Broker, when set, is stopped for Outage once a third of the orders are
	// written. Nil: no broker outage.
	Broker Broker
	// Outage is how long Broker stays stopped.
	Outage time.Duration
	// RelayDown stops the relay (as on SIGTERM) for this long once two
	// thirds of the orders are written. Zero: the relay runs throughout.
	RelayDown time.Duration
	// Redeliver publishes every event a second time at the end, as a relay
	// that died between the broker's acknowledgement and its mark does.
	Redeliver bool
	// Orders is how many orders the order service creates. Required.
	Orders int
	// Rate is orders per second. Zero: as fast as the database takes them.
	Rate float64
	// RollbackEvery rolls back one order transaction in this many, after
	// both inserts. Zero: none.
	RollbackEvery int
	// Workers and BatchSize tune the relay. Defaults to the relay's.
	Workers, BatchSize int
	// Timeout bounds the wait for the last deliveries after the last order.
	// Defaults to one minute.
	Timeout time.Duration
	// Keep keeps the schema and the stream for inspection.
	Keep bool
	// Logger receives the relay's and the consumer's logs. Defaults to
	// discarding them.
	Logger *slog.Logger
	// Say prints a line of the story; calls are serialised. Defaults to a
	// line on Run's out.
	Say func(format string, args ...any)
	// Progress, when set, is called four times a second with the counts.
	Progress func(Progress)

	// breakShipping points the shipping service's consumer at a subject
	// nothing is published to, so a test sees a run that loses events.
	breakShipping bool
}

// Progress is the state of a run at one instant.
type Progress struct {
	Elapsed               time.Duration
	OrdersTotal           int           // Config.Orders
	Attempted, Committed  int64         // orders: transactions tried, committed
	Published, Pending    int64         // events, from the outbox table
	DeadLetters           int64         // events, from the outbox table
	Lag                   time.Duration // age of the oldest pending event
	Processed, Duplicates int64         // deliveries the shipping service handled, skipped
	MaxPending            int64
	BrokerDown, RelayDown bool
}

// Report is what a run proves, counted in the database at the end.
type Report struct {
	Committed    int           // orders committed
	RolledBack   int           // order transactions rolled back on purpose
	Published    int64         // events marked published in the outbox
	Deliveries   int64         // order.created deliveries the shipping service saw
	Duplicates   int64         // deliveries the inbox recognised and skipped
	Shipments    int           // rows in shipments
	ShippedOnce  int           // committed orders with exactly one shipment
	Lost         int           // committed orders with no shipment
	ShippedTwice int           // committed orders with more than one shipment
	Unexpected   int           // shipments of orders that were never committed
	DeadLetters  int64         // events given up on
	MaxPending   int64         // the outbox's largest backlog during the run
	Elapsed      time.Duration // wall time
	Redelivered  bool          // every event was published a second time
}

// OK reports whether every committed order shipped exactly once, nothing
// else shipped, and no event became a dead letter (and, when every event
// was delivered twice, whether the inbox saw each second delivery).
func (r Report) OK() bool {
	ok := r.Committed > 0 && r.Lost == 0 && r.ShippedTwice == 0 && r.Unexpected == 0 &&
		r.DeadLetters == 0 && r.ShippedOnce == r.Committed
	if r.Redelivered {
		ok = ok && r.Duplicates >= int64(r.Committed)
	}
	return ok
}

// WriteSummary prints the report and its verdict.
func (r Report) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  orders committed     %6d  each with its order.created event, written in the same transaction\n", r.Committed)
	fmt.Fprintf(w, "  orders rolled back   %6d  shipped: %d (the event rolled back with the order)\n", r.RolledBack, r.Unexpected)
	fmt.Fprintf(w, "  events published     %6d  confirmed by JetStream, then marked in the outbox\n", r.Published)
	fmt.Fprintf(w, "  deliveries           %6d  to the shipping service; duplicates skipped by its inbox: %d\n", r.Deliveries, r.Duplicates)
	fmt.Fprintf(w, "  shipments            %6d  orders shipped exactly once: %d, twice or more: %d\n", r.Shipments, r.ShippedOnce, r.ShippedTwice)
	fmt.Fprintf(w, "  pending at the peak  %6d  the outbox grows while events cannot be published, then drains\n", r.MaxPending)
	fmt.Fprintf(w, "  dead letters         %6d\n", r.DeadLetters)
	fmt.Fprintf(w, "  lost                 %6d  committed orders that never shipped\n", r.Lost)
	fmt.Fprintf(w, "  elapsed              %6s\n", r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "\nresult: lost %d, shipped twice %d, duplicates skipped %d, dead letters %d, unexpected shipments %d: ",
		r.Lost, r.ShippedTwice, r.Duplicates, r.DeadLetters, r.Unexpected)
	if !r.OK() {
		fmt.Fprintln(w, "FAILED")
		return
	}
	fmt.Fprintln(w, "OK, every committed order shipped exactly once, and no rolled-back order ever did")
}

// ErrNotDelivered is returned when the run ended with orders not shipped
// exactly once (see the Report).
var ErrNotDelivered = errors.New("orders: not every committed order shipped exactly once (see the summary)")

func (cfg *Config) validate() error {
	switch {
	case cfg.DatabaseURL == "":
		return errors.New("orders: Config.DatabaseURL is required")
	case cfg.Schema == "":
		return errors.New("orders: Config.Schema is required")
	case cfg.NATSURL == "":
		return errors.New("orders: Config.NATSURL is required")
	case cfg.Orders < 1:
		return fmt.Errorf("orders: Config.Orders: %d must be at least 1", cfg.Orders)
	case cfg.Rate < 0 || math.IsInf(cfg.Rate, 0) || math.IsNaN(cfg.Rate):
		return fmt.Errorf("orders: Config.Rate: %v must be a non-negative number of orders per second", cfg.Rate)
	case cfg.Outage < 0:
		return fmt.Errorf("orders: Config.Outage: %s must not be negative", cfg.Outage)
	case cfg.RelayDown < 0:
		return fmt.Errorf("orders: Config.RelayDown: %s must not be negative", cfg.RelayDown)
	case cfg.RollbackEvery < 0:
		return fmt.Errorf("orders: Config.RollbackEvery: %d must not be negative", cfg.RollbackEvery)
	case cfg.Timeout < 0:
		return fmt.Errorf("orders: Config.Timeout: %s must not be negative", cfg.Timeout)
	}
	return nil
}

// Run tells the story end to end: the order service writes each order and
// its order.created event in one transaction, the relay publishes the
// events to JetStream, the shipping service consumes them through the inbox
// and ships each order once; on the way the broker goes away, the relay is
// stopped and restarted, and (with Redeliver) every event is delivered a
// second time. The Report counts, from the database, what shipped. Run
// returns ErrNotDelivered with the report when anything was lost, shipped
// twice or dead-lettered.
func Run(ctx context.Context, cfg Config, out io.Writer) (rep Report, err error) {
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The story's goroutines narrate; one line at a time.
	var sayMu sync.Mutex
	say := func(format string, args ...any) {
		sayMu.Lock()
		defer sayMu.Unlock()
		if cfg.Say != nil {
			cfg.Say(format, args...)
			return
		}
		fmt.Fprintf(out, format+"\n", args...)
	}
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// PostgreSQL: one schema for both services. In production the shipping
	// service has its own database; its inbox table lives there, next to the
	// shipments it protects.
	workers := cfg.Workers
	if workers == 0 {
		workers = outbox.DefaultWorkers
	}
	// The relay's workers, the order service, the shipping service and the
	// progress query each hold a connection at times.
	pool, err := openPool(ctx, cfg.DatabaseURL, cfg.Schema, int32(workers)+4)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{cfg.Schema}.Sanitize()); err != nil {
		return rep, fmt.Errorf("create schema %s: %w", cfg.Schema, err)
	}
	if !cfg.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, derr := pool.Exec(cctx, "DROP SCHEMA "+pgx.Identifier{cfg.Schema}.Sanitize()+" CASCADE"); derr != nil {
				err = errors.Join(err, fmt.Errorf("drop schema %s: %w", cfg.Schema, derr))
			}
		}()
	}
	if err := migrate(ctx, pool, cfg.Schema); err != nil {
		return rep, err
	}
	say("          migrated: %s.orders, %[1]s.shipments, the outbox table %[1]s.outbox_events and the inbox table %[1]s.processed_events", cfg.Schema)

	// NATS: one connection for the relay, one for the consumer, both
	// reconnecting for ever (the broker may be taken away).
	connect := func(name string) (*natsgo.Conn, error) {
		nc, err := natsgo.Connect(cfg.NATSURL, natsgo.Name(name), natsgo.MaxReconnects(-1),
			natsgo.ReconnectWait(100*time.Millisecond), natsgo.RetryOnFailedConnect(true))
		if err != nil {
			return nil, fmt.Errorf("connect to NATS: %w", err)
		}
		return nc, nil
	}
	relayConn, err := connect("orders relay")
	if err != nil {
		return rep, err
	}
	defer relayConn.Close()
	shipConn, err := connect("shipping consumer")
	if err != nil {
		return rep, err
	}
	defer shipConn.Close()
	stream, prefix := strings.ToUpper(cfg.Schema), cfg.Schema
	js, err := jetstream.New(relayConn)
	if err != nil {
		return rep, err
	}
	sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = js.CreateStream(sctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Duplicates: DedupWindow,
	})
	scancel()
	if err != nil {
		return rep, fmt.Errorf("create stream %s: %w", stream, err)
	}
	if !cfg.Keep {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if derr := js.DeleteStream(cctx, stream); derr != nil {
				err = errors.Join(err, fmt.Errorf("delete stream %s: %w", stream, derr))
			}
		}()
	}
	say("          stream %s captures %s.>, duplicate window %s", stream, prefix, DedupWindow)

	// The shipping service, on the other side of the broker.
	shipJS, err := jetstream.New(shipConn)
	if err != nil {
		return rep, err
	}
	cctx, ccancel := context.WithTimeout(ctx, 15*time.Second)
	consCfg := jetstream.ConsumerConfig{
		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		FilterSubject: prefix + ".order.created",
	}
	if cfg.breakShipping {
		consCfg.FilterSubject = prefix + ".nothing"
	}
	cons, err := shipJS.CreateOrUpdateConsumer(cctx, stream, consCfg)
	ccancel()
	if err != nil {
		return rep, fmt.Errorf("create consumer: %w", err)
	}
	in, err := inbox.New(pool, inbox.Config{Schema: cfg.Schema, Consumer: "shipping.order-created", Logger: log})
	if err != nil {
		return rep, err
	}
	shipping := &ShippingService{inbox: in}
	consumer, err := natsinbox.New(shipping.Processor(), natsinbox.Config{NakDelay: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return rep, err
	}
	say("shipping  durable JetStream consumer through the inbox: one shipment per order, duplicates skipped")

	// The order service and its relay, in one process.
	pub, err := outboxnats.New(relayConn, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		return rep, err
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{
		Schema: cfg.Schema, Workers: cfg.Workers, BatchSize: cfg.BatchSize, Logger: log,
		// Short waits so the story recovers from its outage in about a
		// second; production keeps the defaults.
		PublishTimeout: 2 * time.Second,
		OutageBackoff:  outbox.Backoff{Base: 100 * time.Millisecond, Max: time.Second},
		RetryBackoff:   outbox.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second},
	})
	if err != nil {
		return rep, err
	}
	writer, err := outbox.NewWriter(outbox.WriterConfig{Schema: cfg.Schema})
	if err != nil {
		return rep, err
	}
	orders := &OrderService{pool: pool, outbox: writer, relay: relay}
	say("relay     outbox.Relay with the NATS publisher (Nats-Msg-Id = event id), in the order service's process")
	line := fmt.Sprintf("orders    %d", cfg.Orders)
	if cfg.Rate > 0 {
		line += fmt.Sprintf(" at %g/s", cfg.Rate)
	}
	line += "; each INSERT INTO orders + its order.created event in one transaction"
	if cfg.RollbackEvery > 0 {
		line += fmt.Sprintf("; 1 in %d rolled back", cfg.RollbackEvery)
	}
	say("%s\n", line)

	// Everything below runs until the end of the story; the deferred wait
	// makes sure it has stopped before the connections and schema go.
	var bg sync.WaitGroup
	var bgErr error
	var bgMu sync.Mutex
	fail := func(err error) {
		bgMu.Lock()
		bgErr = errors.Join(bgErr, err)
		bgMu.Unlock()
		cancel()
	}
	defer func() {
		cancel()
		bg.Wait()
		bgMu.Lock()
		err = errors.Join(err, bgErr)
		bgMu.Unlock()
	}()
	bg.Go(func() {
		if err := consumer.Run(ctx, cons); err != nil {
			fail(fmt.Errorf("shipping consumer: %w", err))
		}
	})
	runner := &relayRunner{relay: relay, ctx: ctx}
	runner.start()
	defer func() { _ = runner.stop() }()

	var s storyState
	writeDone := make(chan error, 1)
	bg.Go(func() { writeDone <- orders.placeOrders(ctx, cfg, &s) })
	faultsDone := make(chan error, 1)
	bg.Go(func() { faultsDone <- injectFaults(ctx, cfg, runner, &s, say) })

	q := newStoryQueries(cfg.Schema)
	snapshot := func() (Progress, error) {
		p := Progress{
			Elapsed: time.Since(start), OrdersTotal: cfg.Orders,
			Attempted: s.committed.Load() + s.rolledBack.Load(), Committed: s.committed.Load(),
			Processed: shipping.processed.Load(), Duplicates: shipping.duplicates.Load(),
			BrokerDown: s.brokerDown.Load(), RelayDown: s.relayDown.Load(),
		}
		var lag float64
		err := pool.QueryRow(ctx, q.stats).Scan(&p.Published, &p.Pending, &p.DeadLetters, &lag)
		p.Lag = time.Duration(lag * float64(time.Second))
		return p, err
	}

	// Watch until every order is written, every fault injected and every
	// committed order processed; then, with Redeliver, once more.
	var maxPending int64
	redelivering := false // the re-sent events are not a backlog
	watch := func(writing, injecting bool, done func(Progress) bool) error {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(cfg.Timeout)
		for {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case err := <-writeDone:
				writing = false
				if err != nil {
					return err
				}
				deadline = time.Now().Add(cfg.Timeout)
				say("[%5.1fs] order service done: %d committed, %d rolled back", time.Since(start).Seconds(),
					s.committed.Load(), s.rolledBack.Load())
				continue
			case err := <-faultsDone:
				injecting = false
				if err != nil {
					return err
				}
				continue
			case <-tick.C:
			}
			p, err := snapshot()
			if err != nil {
				if ctx.Err() != nil {
					continue
				}
				return err
			}
			if !redelivering {
				maxPending = max(maxPending, p.Pending)
			}
			p.MaxPending = maxPending
			if cfg.Progress != nil {
				cfg.Progress(p)
			}
			if writing || injecting {
				continue
			}
			if done(p) {
				return nil
			}
			if time.Now().After(deadline) {
				say("timeout: not every order shipped within %s of the last one", cfg.Timeout)
				return nil
			}
		}
	}
	if err := watch(true, true, func(p Progress) bool { return p.Pending == 0 && p.Processed >= p.Committed }); err != nil {
		return rep, err
	}
	if cfg.Redeliver {
		// Put the rows back in the state a relay crash leaves them in: the
		// broker confirmed the publish, the relay died before marking them,
		// so they are claimed and published again, with the same event id
		// and Nats-Msg-Id. The re-send comes after the stream's duplicate
		// window, as after any relay outage longer than it, so JetStream
		// passes it on and only the inbox stands between it and a second
		// shipment.
		time.Sleep(DedupWindow + 100*time.Millisecond)
		tag, err := pool.Exec(ctx, q.unmark)
		if err != nil {
			return rep, fmt.Errorf("simulate a relay crash: %w", err)
		}
		relay.Wake()
		say(">>> failure: %d events marked unpublished, as after a relay crash between PubAck and mark: every event is delivered again.", tag.RowsAffected())
		committed := s.committed.Load()
		redelivering = true
		if err := watch(false, false, func(p Progress) bool { return p.Pending == 0 && p.Duplicates >= committed }); err != nil {
			return rep, err
		}
		rep.Redelivered = true
	}
	_ = runner.stop() // its error is that of a cancelled run

	rep.RolledBack = int(s.rolledBack.Load())
	rep.Deliveries = shipping.deliveries.Load()
	rep.Duplicates = shipping.duplicates.Load()
	rep.MaxPending = maxPending
	if err := pool.QueryRow(ctx, q.proof).Scan(&rep.Committed, &rep.Shipments, &rep.ShippedOnce, &rep.Lost,
		&rep.ShippedTwice, &rep.Unexpected, &rep.Published, &rep.DeadLetters); err != nil {
		return rep, fmt.Errorf("count shipments: %w", err)
	}
	rep.Elapsed = time.Since(start)
	if !rep.OK() {
		return rep, ErrNotDelivered
	}
	return rep, nil
}

// storyState is what the order service and the fault injector share with
// the watcher.
type storyState struct {
	committed, rolledBack atomic.Int64
	brokerDown, relayDown atomic.Bool
}

type storyQueries struct{ stats, unmark, proof string }

func newStoryQueries(schema string) storyQueries {
	ob := pgx.Identifier{schema, outbox.DefaultTable}.Sanitize()
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	shipments := pgx.Identifier{schema, "shipments"}.Sanitize()
	return storyQueries{
		// published, pending, dead letters, age of the oldest pending event.
		stats: `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL),
       count(*) FILTER (WHERE processed_at IS NULL AND dead_at IS NULL),
       count(*) FILTER (WHERE dead_at IS NOT NULL AND processed_at IS NULL),
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE processed_at IS NULL AND dead_at IS NULL)), 0)::float8
FROM ` + ob,
		unmark: `UPDATE ` + ob + ` SET processed_at = NULL WHERE processed_at IS NOT NULL`,
		// Committed orders, shipments, orders shipped once / never / more
		// than once, shipments of orders that do not exist, and the outbox's
		// published and dead-lettered events.
		proof: `WITH per_order AS (
    SELECT o.id, (SELECT count(*) FROM ` + shipments + ` s WHERE s.order_id = o.id) AS n FROM ` + orders + ` o
)
SELECT (SELECT count(*) FROM per_order)::int,
       (SELECT count(*) FROM ` + shipments + `)::int,
       (SELECT count(*) FROM per_order WHERE n = 1)::int,
       (SELECT count(*) FROM per_order WHERE n = 0)::int,
       (SELECT count(*) FROM per_order WHERE n > 1)::int,
       (SELECT count(*) FROM ` + shipments + ` s WHERE NOT EXISTS (SELECT 1 FROM ` + orders + ` o WHERE o.id = s.order_id))::int,
       (SELECT count(*) FROM ` + ob + ` WHERE processed_at IS NOT NULL),
       (SELECT count(*) FROM ` + ob + ` WHERE dead_at IS NOT NULL AND processed_at IS NULL)`,
	}
}

// placeOrders is the order service under load: cfg.Orders orders paced at
// cfg.Rate, one transaction in cfg.RollbackEvery rolled back after both
// inserts.
func (s *OrderService) placeOrders(ctx context.Context, cfg Config, st *storyState) error {
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	start := time.Now()
	for i := range cfg.Orders {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		o := Order{ID: uuid.Must(uuid.NewV7()), CustomerID: fmt.Sprintf("customer-%d", i%97), Total: float64(10 + i%490)}
		rollback := cfg.RollbackEvery > 0 && i%cfg.RollbackEvery == cfg.RollbackEvery-1
		err := s.createOrder(ctx, o, rollback)
		switch {
		case errors.Is(err, errRolledBack):
			st.rolledBack.Add(1)
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			return fmt.Errorf("order service: %w", err)
		default:
			st.committed.Add(1)
		}
	}
	return nil
}

// injectFaults takes the broker away once a third of the orders are
// written, and stops the relay once two thirds are.
func injectFaults(ctx context.Context, cfg Config, runner *relayRunner, st *storyState, say func(string, ...any)) error {
	waitWritten := func(k int64) bool {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for st.committed.Load()+st.rolledBack.Load() < k {
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
			}
		}
		return true
	}
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	if cfg.Broker != nil && cfg.Outage > 0 {
		if !waitWritten(int64(cfg.Orders) / 3) {
			return nil
		}
		say(">>> failure: stopping the NATS server for %s. Orders keep committing; their events wait in the outbox.", cfg.Outage)
		cfg.Broker.Stop()
		st.brokerDown.Store(true)
		if !sleep(cfg.Outage) {
			return nil // interrupted: the caller shuts the server down anyway
		}
		if err := cfg.Broker.Start(); err != nil {
			return fmt.Errorf("restart NATS: %w", err)
		}
		st.brokerDown.Store(false)
		say(">>> NATS is back after %s: the relay drains the backlog (no attempt was counted during the outage).", cfg.Outage)
	}
	if cfg.RelayDown > 0 {
		if !waitWritten(2 * int64(cfg.Orders) / 3) {
			return nil
		}
		stopAt := time.Now()
		if err := runner.stop(); err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		st.relayDown.Store(true)
		say(">>> failure: relay stopped mid-run, as on SIGTERM (its batches in flight finished in %s); restarting it in %s.",
			time.Since(stopAt).Round(time.Millisecond), cfg.RelayDown)
		sleep(cfg.RelayDown)
		runner.start()
		st.relayDown.Store(false)
		say(">>> relay restarted: it resumes from the table, where every unpublished event still waits.")
	}
	return nil
}

// relayRunner runs, cancels and restarts the relay.
type relayRunner struct {
	relay  *outbox.Relay
	ctx    context.Context // the story's: its end stops the relay too
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func (r *relayRunner) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil {
		return
	}
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

func openPool(ctx context.Context, url, schema string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = maxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second // a black-holed host fails, not hangs
	}
	// The services' own SQL is unqualified, as a service's usually is.
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "pgoutbox orders example"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", cfg.ConnConfig.Host, err)
	}
	return pool, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if _, err := outbox.Migrate(ctx, pool, outbox.MigrateConfig{Schema: schema}); err != nil {
		return err
	}
	if _, err := inbox.Migrate(ctx, pool, inbox.MigrateConfig{Schema: schema}); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `
CREATE TABLE orders (
    id          UUID          PRIMARY KEY,
    customer_id TEXT          NOT NULL,
    total       NUMERIC(12,2) NOT NULL,
    created_at  TIMESTAMPTZ   NOT NULL
);
-- No UNIQUE (order_id) on purpose: only the inbox prevents double shipping.
CREATE TABLE shipments (
    id         BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   UUID        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL
);`)
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	return nil
}
