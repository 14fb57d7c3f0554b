package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsserver "github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/inbox"
	"github.com/pgoutbox/outbox/inbox/natsinbox"
	outboxnats "github.com/pgoutbox/outbox/nats"
)

// dedupWindow is the stream's JetStream duplicate window, kept short (the
// server's minimum is 100ms, its default two minutes) so the demo's
// re-send of every event gets past the broker's dedup and reaches the
// consumer, as a relay re-send after a long outage would.
const dedupWindow = 500 * time.Millisecond

// Options configure one end-to-end run.
type Options struct {
	DatabaseURL string
	NATSURL     string // empty: start an embedded NATS server
	Orders      int
	Keep        bool // keep the schema (and stream) for inspection
	Logger      *slog.Logger
}

// Report is what a run observed.
type Report struct {
	Orders     int   // created through POST /orders
	Deliveries int64 // order.created deliveries the shipping consumer saw
	Processed  int64 // handled (a shipment written)
	Duplicates int64 // recognised by the inbox and skipped
	Failures   int64 // handler or commit errors (redelivered)
	Shipments  int   // rows in shipments
	// ShippedOnce counts orders with exactly one shipment.
	ShippedOnce int
}

// OK reports whether every order produced exactly one shipment although
// every event was delivered at least twice.
func (r Report) OK() bool {
	return r.Orders > 0 && r.Shipments == r.Orders && r.ShippedOnce == r.Orders && r.Duplicates >= int64(r.Orders)
}

// run is the whole demo: both services, the relay and a broker, end to end.
func run(ctx context.Context, opts Options, out io.Writer) (rep Report, err error) {
	if opts.Orders < 1 {
		return rep, errors.New("orders: must be at least 1")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	suffix := randomSuffix()
	schema := "orders_example_" + suffix

	// PostgreSQL: one schema for the demo. In production the shipping
	// service has its own database; its inbox table lives there, next to
	// the shipments it protects.
	pool, err := openPool(ctx, opts.DatabaseURL, schema)
	if err != nil {
		return rep, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return rep, fmt.Errorf("create schema: %w", err)
	}
	if !opts.Keep {
		defer func() {
			if _, err := pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				log.Error("drop schema", "schema", schema, "err", err)
			}
		}()
	}
	if err := migrate(ctx, pool, schema); err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "database: schema %s (outbox_events, processed_events, orders, shipments)\n", schema)

	// NATS JetStream.
	natsURL := opts.NATSURL
	if natsURL == "" {
		srv, dir, err := startNATS()
		if err != nil {
			return rep, err
		}
		defer os.RemoveAll(dir)
		defer srv.WaitForShutdown()
		defer srv.Shutdown()
		natsURL = srv.ClientURL()
		fmt.Fprintf(out, "nats: embedded server at %s\n", natsURL)
	} else {
		fmt.Fprintf(out, "nats: %s\n", natsURL)
	}
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		return rep, fmt.Errorf("connect to NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return rep, err
	}
	stream, prefix := "ORDERS_"+strings.ToUpper(suffix), "orders_"+suffix
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage, Duplicates: dedupWindow,
	}); err != nil {
		return rep, fmt.Errorf("create stream: %w", err)
	}
	if !opts.Keep {
		defer js.DeleteStream(context.WithoutCancel(ctx), stream) //nolint:errcheck
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		FilterSubject: prefix + ".order.created",
	})
	if err != nil {
		return rep, fmt.Errorf("create consumer: %w", err)
	}

	// The order service: HTTP endpoint, outbox writer, relay in the same
	// binary.
	pub, err := outboxnats.New(nc, outboxnats.Config{Subject: prefix + ".{event_type}"})
	if err != nil {
		return rep, err
	}
	relay, err := outbox.NewRelay(pool, pub, outbox.RelayConfig{Schema: schema, Logger: log})
	if err != nil {
		return rep, err
	}
	writer, err := outbox.NewWriter(outbox.WriterConfig{Schema: schema})
	if err != nil {
		return rep, err
	}
	orders := &OrderService{pool: pool, outbox: writer, relay: relay}
	mux := http.NewServeMux()
	mux.Handle("/orders", orders)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}

	// The shipping service.
	in, err := inbox.New(pool, inbox.Config{Schema: schema, Consumer: "shipping.order-created", Logger: log})
	if err != nil {
		return rep, err
	}
	shipping := &ShippingService{inbox: in}
	consumer, err := natsinbox.New(shipping.Processor(), natsinbox.Config{NakDelay: 100 * time.Millisecond, Logger: log})
	if err != nil {
		return rep, err
	}

	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, f := range []func() error{
		func() error { return relay.Run(ctx) },
		func() error { return consumer.Run(ctx, cons) },
		func() error {
			if err := httpSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	defer func() {
		cancel()
		_ = httpSrv.Shutdown(context.Background())
		wg.Wait()
		close(errs)
		for e := range errs {
			err = errors.Join(err, e)
		}
	}()

	// 1. Create the orders through the HTTP endpoint.
	base := "http://" + ln.Addr().String()
	for i := range opts.Orders {
		if err := postOrder(ctx, base, fmt.Sprintf("customer-%d", i%7), float64(10+i)); err != nil {
			return rep, err
		}
	}
	rep.Orders = opts.Orders
	fmt.Fprintf(out, "order service: created %d orders via POST %s/orders\n", opts.Orders, base)

	// 2. First delivery: the relay publishes each event once.
	if err := waitUntil(ctx, func() bool { return shipping.processed.Load() >= int64(opts.Orders) }); err != nil {
		return rep, fmt.Errorf("waiting for the first deliveries: %w (processed %d of %d)", err, shipping.processed.Load(), opts.Orders)
	}
	fmt.Fprintf(out, "shipping: %d deliveries, %d processed\n", shipping.deliveries.Load(), shipping.processed.Load())

	// 3. Deliver every event again, on purpose, the way it happens in
	// production: the relay published, the broker confirmed, and the relay
	// died before marking the rows, so they are claimed and published again.
	// We put the rows back in that state. The re-send keeps each event's
	// Nats-Msg-Id; it gets past JetStream's dedup because it comes after the
	// stream's duplicate window, as after any relay outage longer than it.
	time.Sleep(dedupWindow + 100*time.Millisecond)
	tag, err := pool.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "outbox_events"}.Sanitize()+` SET processed_at = NULL`)
	if err != nil {
		return rep, fmt.Errorf("simulate a relay crash: %w", err)
	}
	relay.Wake()
	fmt.Fprintf(out, "relay: %d events marked unpublished (a crash between PubAck and mark), publishing them again\n", tag.RowsAffected())
	if err := waitUntil(ctx, func() bool { return shipping.duplicates.Load() >= int64(opts.Orders) }); err != nil {
		return rep, fmt.Errorf("waiting for the second deliveries: %w (duplicates %d of %d)", err, shipping.duplicates.Load(), opts.Orders)
	}

	// 4. What the shipping service did.
	rep.Deliveries = shipping.deliveries.Load()
	rep.Processed = shipping.processed.Load()
	rep.Duplicates = shipping.duplicates.Load()
	rep.Failures = shipping.failures.Load()
	err = pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM shipments),
		(SELECT count(*) FROM orders o WHERE (SELECT count(*) FROM shipments s WHERE s.order_id = o.id) = 1)`).Scan(&rep.Shipments, &rep.ShippedOnce)
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "shipping: %d deliveries, %d processed, %d duplicates skipped by the inbox\n", rep.Deliveries, rep.Processed, rep.Duplicates)
	fmt.Fprintf(out, "result: %d orders, %d shipments, %d orders shipped exactly once\n", rep.Orders, rep.Shipments, rep.ShippedOnce)
	if !rep.OK() {
		return rep, fmt.Errorf("FAIL: want every order shipped exactly once: %+v", rep)
	}
	fmt.Fprintln(out, "OK: every event was delivered twice; every order produced exactly one shipment")
	return rep, nil
}

func openPool(ctx context.Context, url, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	// The services' own SQL is unqualified, as in the article.
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
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
    id          UUID        PRIMARY KEY,
    customer_id TEXT        NOT NULL,
    total       NUMERIC     NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL
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

func startNATS() (*natsserver.Server, string, error) {
	dir, err := os.MkdirTemp("", "pgoutbox-orders-nats-")
	if err != nil {
		return nil, "", err
	}
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("embedded NATS: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		os.RemoveAll(dir)
		return nil, "", errors.New("embedded NATS: not ready after 10s")
	}
	return srv, dir, nil
}

func postOrder(ctx context.Context, base, customer string, total float64) error {
	body, _ := json.Marshal(map[string]any{"customer_id": customer, "total": total})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/orders", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("POST /orders: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST /orders: %s: %s", resp.Status, b)
	}
	return nil
}

// waitUntil polls cond; the demo's only clock-driven wait besides the dedup
// window.
func waitUntil(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
