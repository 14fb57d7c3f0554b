package outboxcli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/examples/orders"
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
	redeliver     bool
	keep          bool
	verbose       bool
}

func demoCommand() (*options, func(context.Context, *cli, *options) error) {
	var s demoSettings
	o := newOptions("demo", "[flags]", `
Shows the transactional outbox end to end on a machine with PostgreSQL, with
the order story of examples/orders:

  1. migrates a schema of its own: orders, shipments, the outbox table and
     the inbox table;
  2. starts an embedded NATS JetStream server (random port, temporary store),
     unless --broker points at a NATS server, and creates a stream;
  3. runs the order service: each order is inserted into orders together with
     its order.created event (outbox.Writer), in one transaction; one order
     in --rollback-every is rolled back on purpose;
  4. runs the relay (outbox.Relay with the NATS publisher) and the shipping
     service, which consumes order.created through the inbox and writes one
     shipment per order;
  5. injects failures: the NATS server is stopped for --outage, the relay is
     stopped mid-run (as on SIGTERM) for --relay-down, and with --redeliver
     every event is published a second time, as after a relay crash between
     the broker's acknowledgement and the mark;
  6. prints a summary, counted in the database, proving that every committed
     order shipped exactly once, that no rolled-back order ever did, and that
     nothing became a dead letter. It exits 1 if anything was lost.

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
	o.fs.BoolVar(&s.redeliver, "redeliver", true, "at the end, publish every event again, as after a relay crash between PubAck and mark")
	o.fs.DurationVar(&s.timeout, "timeout", 2*time.Minute, "give up if the orders have not all shipped this long after the last one")
	o.fs.BoolVar(&s.keep, "keep", false, "keep the schema (and stream) for inspection")
	o.fs.BoolVar(&s.verbose, "verbose", false, "show the relay's logs on stderr")
	o.flagOnly("schema", "broker", "orders", "rate", "outage", "relay-down", "rollback-every",
		"workers", "batch-size", "redeliver", "timeout", "keep", "verbose")
	return o, func(ctx context.Context, c *cli, o *options) error { return c.demo(ctx, o, &s) }
}

// embeddedBroker is the demo's own NATS server, which the story stops and
// starts again as its broker outage.
type embeddedBroker interface {
	orders.Broker
	URL() string
	String() string // for the header: address and store
	close()         // stop and delete the store
}

// errNoEmbeddedNATS is startEmbeddedNATS's answer in a binary built with
// -tags noembeddednats.
var errNoEmbeddedNATS = errors.New("required: this binary was built without the embedded NATS server (-tags noembeddednats); " +
	"pass a NATS server with JetStream, e.g. --broker nats://127.0.0.1:4222, or run the demo from source: go run ./cmd/outbox demo")

func (c *cli) demo(ctx context.Context, o *options, s *demoSettings) error {
	c.red.addDSN(s.broker)
	if err := s.validate(o); err != nil {
		return err
	}
	pcfg, err := c.demoSchema(ctx, o, s)
	if err != nil {
		return err
	}
	cfg := orders.Config{
		DatabaseURL: pcfg.ConnString(), Schema: s.schema, NATSURL: s.broker,
		Outage: s.outage, RelayDown: s.relayDown, Redeliver: s.redeliver,
		Orders: s.orders, Rate: s.rate, RollbackEvery: s.rollbackEvery,
		Workers: s.workers, BatchSize: s.batchSize, Timeout: s.timeout, Keep: s.keep,
		Logger: slog.New(slog.DiscardHandler),
	}
	if s.verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if s.broker == "" {
		embedded, err := startEmbeddedNATS()
		if errors.Is(err, errNoEmbeddedNATS) {
			return o.settingErr("broker", "%v", err)
		}
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer embedded.close()
		cfg.NATSURL, cfg.Broker = embedded.URL(), embedded
	}
	fmt.Fprintf(c.stdout, "pgoutbox demo: the transactional outbox, end to end\n\n")
	fmt.Fprintf(c.stdout, "database  %s, schema %s\n", redactDSN(pcfg.ConnString()), s.schema)
	if cfg.Broker != nil {
		fmt.Fprintf(c.stdout, "broker    %s\n", cfg.Broker)
	} else {
		fmt.Fprintf(c.stdout, "broker    NATS JetStream at %s\n", redactDSN(s.broker))
	}
	out := c.demoProgress(&cfg)
	rep, err := orders.Run(ctx, cfg, c.stdout)
	out.done()
	if rep.Committed > 0 || errors.Is(err, orders.ErrNotDelivered) {
		rep.WriteSummary(c.stdout)
	}
	if s.keep {
		fmt.Fprintf(c.stdout, "kept schema %s (drop it with: DROP SCHEMA %s CASCADE)\n", s.schema, pgx.Identifier{s.schema}.Sanitize())
	}
	switch {
	case ctx.Err() != nil:
		return errors.New("demo: interrupted")
	case err != nil:
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// validate checks the demo's flags before anything is started.
func (s *demoSettings) validate(o *options) error {
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
	if s.broker != "" {
		u, _, err := parseBroker(s.broker)
		if err != nil {
			return o.settingErr("broker", "%v", err)
		}
		if u.Scheme != "nats" && u.Scheme != "tls" {
			return o.settingErr("broker", "the demo consumes with JetStream: want a nats:// or tls:// URL, got %q", displayURL(u))
		}
	}
	return nil
}

// demoSchema names the demo's schema (a random one unless --schema) and
// checks that it does not exist yet, since the demo drops it at the end. It
// returns the pool configuration the story connects with.
func (c *cli) demoSchema(ctx context.Context, o *options, s *demoSettings) (*pgxpool.Config, error) {
	if s.schema == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		s.schema = "outbox_demo_" + hex.EncodeToString(b)
	}
	d := dbOptions{DatabaseURL: s.databaseURL, Schema: s.schema}
	pcfg, err := c.poolConfig(o, &d, 2)
	if err != nil {
		return nil, err
	}
	pool, err := c.connect(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	var exists bool
	err = pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists)
	pool.Close()
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if exists {
		return nil, o.settingErr("schema", "%q already exists; the demo creates its own schema and drops it at the end, so name a new one", s.schema)
	}
	return pcfg, nil
}

// demoProgress prints the legend of the progress line and has the story's
// progress drawn on one line (a new line every progressEvery when stdout is
// not a terminal).
func (c *cli) demoProgress(cfg *orders.Config) *progress {
	fmt.Fprintf(c.stdout, "progress  written: orders committed with their event; published: events the broker confirmed;\n"+
		"          shipped: orders processed through the inbox; pending: events waiting in the outbox;\n"+
		"          lag: how long the oldest of them has waited\n")
	out := c.progress()
	cfg.Say = out.println
	var lastPrinted time.Time
	cfg.Progress = func(p orders.Progress) {
		line := fmt.Sprintf("[%5.1fs] orders %d/%d  written %d  published %d  shipped %d  pending %d  lag %s",
			p.Elapsed.Seconds(), p.Attempted, p.OrdersTotal, p.Committed, p.Published, p.Processed, p.Pending, age(p.Lag))
		switch {
		case p.BrokerDown:
			line += "  (NATS down)"
		case p.RelayDown:
			line += "  (relay down)"
		}
		if c.stdoutTTY || time.Since(lastPrinted) >= c.progressEvery {
			out.update(line)
			lastPrinted = time.Now()
		}
	}
	return out
}
