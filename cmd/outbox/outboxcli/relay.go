package outboxcli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgoutbox/outbox"
)

// DefaultDrainTimeout leaves the batch in flight its whole publish timeout,
// plus time to mark it, and fits Kubernetes' default 30s grace period.
const DefaultDrainTimeout = outbox.DefaultPublishTimeout + 5*time.Second

// relaySettings are the relay command's settings.
type relaySettings struct {
	db              dbOptions
	broker          string
	topic           string
	workers         int
	batchSize       int
	pollInterval    time.Duration
	maxAttempts     int
	retryBase       time.Duration
	retryMax        time.Duration
	outageBase      time.Duration
	outageMax       time.Duration
	publishTimeout  time.Duration
	retention       time.Duration
	cleanupInterval time.Duration
	cleanupBatch    int
	statsInterval   time.Duration
	rescanInterval  time.Duration
	batchDelay      time.Duration
	batchDelayAbove int
	deleteOnPublish bool
	ordered         bool
	listen          bool
	httpAddr        string
	drainTimeout    time.Duration
	logLevel        string
	logFormat       string
	dbWait          dbWaitSettings
}

func relayCommand() (*options, func(context.Context, *cli, *options) error) {
	var s relaySettings
	o := newOptions("relay", "--broker URL [flags]", `
Runs the relay: claims pending events from the outbox table, publishes them to
the broker, and marks them published once the broker has confirmed them. Run
as many relays as you like; each claims disjoint rows.

On SIGINT or SIGTERM the relay stops claiming, finishes the batches in flight
(publish, wait for the broker's confirmations, mark) and exits 0. If that takes
longer than --drain-timeout it exits 5; the unfinished batch's transaction is
rolled back by PostgreSQL when the connection closes, so no event is ever
marked published without a broker confirmation. A second signal ends the
process at once.

--broker selects the publisher by URL scheme:
  nats://host:4222   NATS JetStream; credentials go in the URL's userinfo as
                     usual, several servers are comma-separated
  tls://host:4222    NATS JetStream over TLS
  kafka://h1:9092,h2:9092?tls=true&sasl=scram-sha-512
                     Kafka (acks=all, idempotent; key = aggregate id);
                     --topic is the topic
  amqp://user:pw@host:5672/vhost?exchange=events   (or amqps://)
                     RabbitMQ with publisher confirms; --topic is the
                     routing key
  redis://host:6379/0?maxlen=100000   (or rediss://)
                     Redis Streams (XADD); --topic is the stream
  sqs://?queue_url=<escaped URL or template>&region=eu-west-1
                     Amazon SQS (credentials from the AWS default chain)
  https://hooks.example.com/{event_type}   (or http://)
                     signed webhooks (Standard Webhooks); secrets from
                     OUTBOX_WEBHOOK_SECRET (space-separated whsec_...)
  stdout:            one JSON line per event on stdout (debugging; no
                     durability)
Each broker package documents its URL options (go doc .../outbox/kafka ...).
The relay never creates streams or topics: that is the operator's job.

--topic is the subject/topic template: {event_type}, {aggregate_type} and
{aggregate_id} are replaced by the event's fields, e.g. "events.{aggregate_type}".

With --http-addr set (e.g. 127.0.0.1:9090) the relay serves
  /metrics   Prometheus metrics (outbox_*, Go and process collectors)
  /healthz   200 while the process is up
  /readyz    200 when the database answers and the broker is connected, else 503
Logs are JSON on stderr, or text when stderr is a terminal.`)
	s.db.register(o)
	s.dbWait.register(o)
	f := o.fs
	f.StringVar(&s.broker, "broker", "", "broker URL; its scheme selects the publisher ("+brokerSchemes()+")")
	f.StringVar(&s.topic, "topic", outbox.DefaultTopicTemplate, "subject/topic template")
	f.IntVar(&s.workers, "workers", outbox.DefaultWorkers, "concurrent claim loops in this process")
	f.IntVar(&s.batchSize, "batch-size", outbox.DefaultBatchSize, "most events one worker claims at a time (1-10000)")
	f.DurationVar(&s.pollInterval, "poll-interval", outbox.DefaultPollInterval, "how long an idle worker waits before claiming again")
	f.IntVar(&s.maxAttempts, "max-attempts", outbox.DefaultMaxAttempts, "failed publishes that make an event a dead letter")
	f.DurationVar(&s.retryBase, "retry-base", outbox.DefaultRetryBase, "first retry delay of a failing event; doubles per attempt")
	f.DurationVar(&s.retryMax, "retry-max", outbox.DefaultRetryMax, "longest retry delay of a failing event")
	f.DurationVar(&s.outageBase, "outage-base", outbox.DefaultOutageBase, "first wait while the broker or database is unreachable; doubles")
	f.DurationVar(&s.outageMax, "outage-max", outbox.DefaultOutageMax, "longest wait while the broker or database is unreachable")
	f.DurationVar(&s.publishTimeout, "publish-timeout", outbox.DefaultPublishTimeout, "bound on one batch's publish and confirmations")
	f.DurationVar(&s.retention, "retention", 0, "delete events published more than this long ago (0: keep them)")
	f.DurationVar(&s.cleanupInterval, "cleanup-interval", outbox.DefaultCleanupInterval, "how often cleanup runs when --retention is set")
	f.IntVar(&s.cleanupBatch, "cleanup-batch", outbox.DefaultCleanupBatch, "rows deleted per cleanup statement")
	f.DurationVar(&s.statsInterval, "stats-interval", outbox.DefaultStatsInterval, "how often the pending and dead-letter gauges are refreshed")
	f.DurationVar(&s.rescanInterval, "rescan-interval", outbox.DefaultRescanInterval, "how often one claim scans the pending events from the start (late commits, due retries)")
	f.DurationVar(&s.batchDelay, "batch-delay", outbox.DefaultBatchDelay, "under a heavy stream, the longest spacing of claims triggered by wake-ups (0: claim on every wake-up)")
	f.IntVar(&s.batchDelayAbove, "batch-delay-above", outbox.DefaultBatchDelayAbove, "events/s above which claims triggered by wake-ups are spaced out")
	f.BoolVar(&s.deleteOnPublish, "delete-on-publish", false, "delete each event once the broker confirmed it, instead of setting processed_at")
	f.BoolVar(&s.ordered, "ordered", false, "per-aggregate ordering: an aggregate's events are published in insertion order")
	f.BoolVar(&s.listen, "listen", false, "LISTEN for the application's commit notifications (outbox.Notifier) instead of waiting for the poll")
	f.StringVar(&s.httpAddr, "http-addr", "", "address serving /metrics, /healthz and /readyz, e.g. 127.0.0.1:9090 (empty: off)")
	f.DurationVar(&s.drainTimeout, "drain-timeout", DefaultDrainTimeout, "after SIGINT/SIGTERM, how long the batches in flight may take before exit code 5")
	f.StringVar(&s.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&s.logFormat, "log-format", "", "json or text (default: text when stderr is a terminal, else json)")
	return o, func(ctx context.Context, c *cli, o *options) error {
		err := c.relay(ctx, o, &s)
		// A signal while starting (connecting, checking the table) is a
		// request to stop, not a failure.
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}

// validate checks what the library cannot: zero values, which mean "default"
// in outbox.RelayConfig but are mistakes on a command line.
func (s *relaySettings) validate(o *options) error {
	type check struct {
		name string
		bad  bool
		v    any
		want string
	}
	for _, k := range []check{
		{"workers", s.workers < 1, s.workers, "must be at least 1"},
		{"batch-size", s.batchSize < 1, s.batchSize, "must be at least 1"},
		{"poll-interval", s.pollInterval <= 0, s.pollInterval, "must be positive"},
		{"max-attempts", s.maxAttempts < 1, s.maxAttempts, "must be at least 1"},
		{"retry-base", s.retryBase <= 0, s.retryBase, "must be positive"},
		{"retry-max", s.retryMax <= 0, s.retryMax, "must be positive"},
		{"outage-base", s.outageBase <= 0, s.outageBase, "must be positive"},
		{"outage-max", s.outageMax <= 0, s.outageMax, "must be positive"},
		{"publish-timeout", s.publishTimeout <= 0, s.publishTimeout, "must be positive"},
		{"retention", s.retention < 0, s.retention, "must not be negative (0 keeps published events)"},
		{"cleanup-interval", s.cleanupInterval <= 0, s.cleanupInterval, "must be positive"},
		{"cleanup-batch", s.cleanupBatch < 1, s.cleanupBatch, "must be at least 1"},
		{"stats-interval", s.statsInterval <= 0, s.statsInterval, "must be positive"},
		{"rescan-interval", s.rescanInterval <= 0, s.rescanInterval, "must be positive"},
		{"batch-delay", s.batchDelay < 0, s.batchDelay, "must not be negative (0 claims on every wake-up)"},
		{"batch-delay-above", s.batchDelayAbove < 1, s.batchDelayAbove, "must be at least 1"},
		{"drain-timeout", s.drainTimeout <= 0, s.drainTimeout, "must be positive"},
	} {
		if k.bad {
			return o.settingErr(k.name, "%v: %s", k.v, k.want)
		}
	}
	if _, err := outbox.ParseTopicTemplate(s.topic); err != nil {
		return o.settingErr("topic", "%s", strings.TrimPrefix(err.Error(), "outbox: "))
	}
	if s.httpAddr != "" {
		if _, _, err := net.SplitHostPort(s.httpAddr); err != nil {
			return o.settingErr("http-addr", "%q: %v (want host:port, e.g. 127.0.0.1:9090)", s.httpAddr, err)
		}
	}
	return nil
}

func (s *relaySettings) relayConfig(log *slog.Logger, reg prometheus.Registerer) outbox.RelayConfig {
	return outbox.RelayConfig{
		Schema: s.db.Schema, Table: s.db.Table,
		BatchSize: s.batchSize, Workers: s.workers, PollInterval: s.pollInterval, MaxAttempts: s.maxAttempts,
		RetryBackoff:    outbox.Backoff{Base: s.retryBase, Max: s.retryMax},
		OutageBackoff:   outbox.Backoff{Base: s.outageBase, Max: s.outageMax},
		PublishTimeout:  s.publishTimeout,
		Retention:       s.retention,
		CleanupInterval: s.cleanupInterval,
		CleanupBatch:    s.cleanupBatch,
		StatsInterval:   s.statsInterval,
		RescanInterval:  s.rescanInterval,
		BatchDelay:      cliBatchDelay(s.batchDelay),
		BatchDelayAbove: s.batchDelayAbove,
		DeleteOnPublish: s.deleteOnPublish,
		Ordered:         s.ordered,
		Listen:          s.listen,
		Logger:          log,
		Registerer:      reg,
	}
}

// newLogger builds the slog logger for --log-level and --log-format.
func (c *cli) newLogger(o *options, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, o.settingErr("log-level", "%q: want debug, info, warn or error", level)
	}
	hopts := &slog.HandlerOptions{Level: lv, ReplaceAttr: durationsAsText}
	switch format {
	case "":
		if c.stderrTTY {
			return slog.New(slog.NewTextHandler(c.stderr, hopts)), nil
		}
		return slog.New(slog.NewJSONHandler(c.stderr, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(c.stderr, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(c.stderr, hopts)), nil
	}
	return nil, o.settingErr("log-format", "%q: want json or text", format)
}

func (c *cli) relay(ctx context.Context, o *options, s *relaySettings) error {
	if len(o.args) > 0 {
		return usageErr("relay: unexpected argument %q", o.args[0])
	}
	c.red.addDSN(s.broker)
	if err := s.validate(o); err != nil {
		return err
	}
	brokerURL, openBroker, err := parseBroker(s.broker)
	if err != nil {
		return o.settingErr("broker", "%v", err)
	}
	log, err := c.newLogger(o, s.logLevel, s.logFormat)
	if err != nil {
		return err
	}
	tp, stopTracing, err := c.tracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	// One connection per worker, plus the gauges, cleanup, the listener and
	// /readyz.
	pcfg, err := c.poolConfig(o, &s.db, int32(s.workers)+4)
	if err != nil {
		return err
	}
	// The pool connects lazily: the rest of the configuration is checked
	// before the database is, so a bad flag is exit 2 whatever the database.
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return &exitError{code: ExitDatabase, err: fmt.Errorf("database: %w", err)}
	}
	probe, err := outbox.NewRelay(pool, outbox.PublisherFunc(func(context.Context, *outbox.Message) error { return nil }), s.relayConfig(nil, nil))
	if err != nil {
		pool.Close()
		return flagError(err)
	}
	if err := c.waitForDB(ctx, o, pool, log, s); err != nil {
		pool.Close()
		return logged(ctx, log, err)
	}
	// A missing or old table stops the command at once with its exit code; any
	// other failure of the check (a statement timeout, a session killed) is
	// left to Relay.Run, which retries it through the outage backoff.
	if err := probe.CheckSchema(ctx); errors.Is(err, outbox.ErrNotMigrated) {
		pool.Close()
		return notMigrated(tableName(s.db), &s.db, err)
	} else if err != nil {
		log.Warn("outbox relay cannot check its table yet; the relay will retry", "err", redactDSN(err.Error()))
	}

	pub, brokerCloser, err := openBroker(ctx, brokerURL, BrokerOptions{
		Topic: s.topic, Logger: log, Stdout: c.stdout, ClientName: "pgoutbox relay", Getenv: c.getenv,
	})
	if err != nil {
		pool.Close()
		return o.settingErr("broker", "%v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	relay, err := outbox.NewRelay(pool, pub, withTracer(s.relayConfig(log, reg), tp))
	if err != nil { // validated above; only a registry clash could fail here
		brokerCloser.Close()
		pool.Close()
		return err
	}
	shutdown := func() {
		brokerCloser.Close()
		pool.Close()
	}

	var srv *http.Server
	if s.httpAddr != "" {
		ln, err := net.Listen("tcp", s.httpAddr)
		if err != nil {
			shutdown()
			return fmt.Errorf("--http-addr: %w", err)
		}
		srv = c.httpServer(relay, reg)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server failed", "err", err)
			}
		}()
		log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
		prev := shutdown
		shutdown = func() {
			srv.Close()
			prev()
		}
	}

	log.Info("outbox relay started", "version", Version().Version, "table", tableName(s.db), "broker", brokerURL.Redacted(), "topic", s.topic,
		"workers", s.workers, "batch_size", s.batchSize, "poll_interval", s.pollInterval,
		"max_attempts", s.maxAttempts, "retention", s.retention, "ordered", s.ordered, "listen", s.listen,
		"delete_on_publish", s.deleteOnPublish, "batch_delay", s.batchDelay)
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(ctx) }()

	select {
	case err = <-runDone:
	case <-ctx.Done():
		log.Info("signal received: finishing the batches in flight", "drain_timeout", s.drainTimeout)
		t := time.NewTimer(s.drainTimeout)
		defer t.Stop()
		select {
		case err = <-runDone:
		case <-t.C:
			// Closing the pool would wait for the stuck batch; the process is
			// about to exit, which closes its connections, and PostgreSQL
			// rolls the batch's transaction back. In-process callers get the
			// resources released once the batch does end.
			go func() {
				<-runDone
				shutdown()
			}()
			log.Error("drain timeout exceeded: abandoning the batch in flight; it is rolled back, not marked", "drain_timeout", s.drainTimeout)
			return &exitError{code: ExitDrainTimeout, err: fmt.Errorf(
				"relay: --drain-timeout %s exceeded: the unfinished batch is rolled back by PostgreSQL and will be published again", s.drainTimeout)}
		}
	}
	shutdown()
	// Relay.Run checks the table first; a signal during that check fails it
	// with the cancellation, which is still a clean stop.
	if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		return notMigrated(tableName(s.db), &s.db, err)
	}
	log.Info("outbox relay stopped")
	return nil
}

// tableName is the quoted table name, as outbox.Admin.Table spells it.
func tableName(d dbOptions) string {
	t := d.Table
	if t == "" {
		t = outbox.DefaultTable
	}
	if d.Schema != "" {
		return pgx.Identifier{d.Schema, t}.Sanitize()
	}
	return pgx.Identifier{t}.Sanitize()
}

func (c *cli) httpServer(relay *outbox.Relay, reg *prometheus.Registry) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := relay.Ready(ctx); err != nil {
			http.Error(w, "not ready: "+c.red.String(oneLine(err.Error())), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// cliBatchDelay maps --batch-delay 0 ("claim on every wake-up") to the
// library's negative BatchDelay (its zero value means the default).
func cliBatchDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
