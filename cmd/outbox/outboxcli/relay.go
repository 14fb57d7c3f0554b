package outboxcli

import (
	"cmp"
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
	"github.com/pgoutbox/outbox/admin"
)

// DefaultDrainTimeout leaves the batch in flight its whole publish timeout,
// plus time to mark it, and fits Kubernetes' default 30s grace period.
const DefaultDrainTimeout = outbox.DefaultPublishTimeout + 5*time.Second

// relaySettings are the relay command's settings: the library's
// RelayConfig, which the relay's numeric and boolean flags set directly
// (relayFlags), and the command's own.
type relaySettings struct {
	db           dbOptions
	cfg          outbox.RelayConfig
	source       string // RelayConfig.Source, checked by validate
	envelope     string // RelayConfig.Envelope, checked by validate
	ceSource     string // RelayConfig.CloudEventsSource
	broker       string
	topic        string
	httpAddr     string
	drainTimeout time.Duration
	logLevel     string
	logFormat    string
	dbWait       dbWaitSettings
	console      consoleFlags
	// createTopology and ensureStream opt in to creating a missing
	// destination (BrokerOptions).
	createTopology bool
	ensureStream   string
	// directURL is --direct-url; direct its parsed config (nil: none).
	directURL string
	direct    *pgx.ConnConfig
}

// relayFlags lists the relay's numeric and boolean settings. A RelayConfig
// option reaches the command with one line here: its flag, environment
// variable, config file key, zero check and error messages follow.
func (s *relaySettings) relayFlags() []setting {
	c := &s.cfg
	return []setting{
		bind("Workers", "workers", &c.Workers, outbox.DefaultWorkers, "concurrent claim loops in this process"),
		bind("BatchSize", "batch-size", &c.BatchSize, outbox.DefaultBatchSize, "most events one worker claims at a time (1-10000)"),
		bind("MaxBatchBytes", "max-batch-bytes", &c.MaxBatchBytes, outbox.DefaultMaxBatchBytes, "byte budget of one batch's payloads (at least one event per batch)"),
		bind("PollInterval", "poll-interval", &c.PollInterval, outbox.DefaultPollInterval, "how often an idle relay claims (its workers share the poll)"),
		bind("MaxAttempts", "max-attempts", &c.MaxAttempts, outbox.DefaultMaxAttempts, "failed publishes that make an event a dead letter"),
		bind("RetryBackoff.Base", "retry-base", &c.RetryBackoff.Base, outbox.DefaultRetryBase, "first retry delay of a failing event; doubles per attempt"),
		bind("RetryBackoff.Max", "retry-max", &c.RetryBackoff.Max, outbox.DefaultRetryMax, "longest retry delay of a failing event"),
		bind("OutageBackoff.Base", "outage-base", &c.OutageBackoff.Base, outbox.DefaultOutageBase, "first wait while the broker or database is unreachable; doubles"),
		bind("OutageBackoff.Max", "outage-max", &c.OutageBackoff.Max, outbox.DefaultOutageMax, "longest wait while the broker or database is unreachable"),
		bind("PublishTimeout", "publish-timeout", &c.PublishTimeout, outbox.DefaultPublishTimeout, "bound on one batch's publish and confirmations"),
		bind("StatementTimeout", "statement-timeout", &c.StatementTimeout, outbox.DefaultStatementTimeout, "bound on each database statement; a connection that misses it is discarded"),
		bind("Retention", "retention", &c.Retention, 0, "delete events published more than this long ago (0: keep them)").
			zeroMeans("0 keeps published events"),
		bind("CleanupInterval", "cleanup-interval", &c.CleanupInterval, outbox.DefaultCleanupInterval, "how often cleanup runs when --retention is set"),
		bind("CleanupBatch", "cleanup-batch", &c.CleanupBatch, outbox.DefaultCleanupBatch, "rows deleted per cleanup statement"),
		bind("StatsInterval", "stats-interval", &c.StatsInterval, outbox.DefaultStatsInterval, "how often the pending and dead-letter gauges are refreshed"),
		bind("RescanInterval", "rescan-interval", &c.RescanInterval, outbox.DefaultRescanInterval, "how often one claim scans the pending events from the start (late commits, due retries)"),
		bind("BatchDelay", "batch-delay", &c.BatchDelay, outbox.DefaultBatchDelay, "under a heavy stream, the spacing of claims triggered by wake-ups (0: claim on every wake-up)").
			zeroMeans("0 claims on every wake-up"),
		bind("BatchDelayAbove", "batch-delay-above", &c.BatchDelayAbove, outbox.DefaultBatchDelayAbove, "events/s above which claims triggered by wake-ups are spaced out (until the stream falls below three quarters of it)"),
		bind("RotateEvents", "rotate-events", &c.RotateEvents, outbox.DefaultRotateEvents, "partitioned table, --source wal: move new events to a new partition after this many, and drop old partitions once delivered"),
		bind("RotateInterval", "rotate-interval", &c.RotateInterval, outbox.DefaultRotateInterval, "partitioned table, --source wal: move new events to a new partition after this long, if the current one took any"),
		bind("StuckAfter", "stuck-after", &c.StuckAfter, outbox.DefaultStuckAfter, "events due and none delivered for this long: /readyz fails naming the cause, outbox_stuck is 1"),
		bind("WALSenderTimeout", "wal-sender-timeout", &c.WALSenderTimeout, outbox.DefaultWALSenderTimeout, "--source wal: a relay that stops answering loses the slot after this long, and a standby takes it over"),
		bind("DeleteOnPublish", "delete-on-publish", &c.DeleteOnPublish, false, "delete each event once the broker confirmed it, instead of setting processed_at"),
		bind("Ordered", "ordered", &c.Ordered, false, "per-aggregate ordering: an aggregate's events are published in insertion order (commit order with --source wal)"),
		bind("Listen", "listen", &c.Listen, false, "LISTEN for the application's commit notifications (outbox.Notifier) instead of waiting for the poll"),
		bind("", "drain-timeout", &s.drainTimeout, DefaultDrainTimeout, "after SIGINT/SIGTERM, how long the batches in flight may take before exit code 5"),
	}
}

func relayCommand() (*options, func(context.Context, *cli, *options) error) {
	var s relaySettings
	o := newOptions("relay", "--broker URL [flags]", `
Runs the relay: claims pending events from the outbox table, publishes them to
the broker, and marks them published once the broker has confirmed them. Run
as many relays as you like; each claims disjoint rows.

--source wal streams committed events from the table's logical replication
slot instead (commit order, nothing written per event but a bulk DELETE of
the published rows; see docs/WAL.md). It needs wal_level=logical, a role with
REPLICATION, and outbox migrate --source wal. One relay streams the slot; the
others stand by and take over when it stops; all of them retry failed events
from the table. A missing prerequisite exits 2 with one line naming the
setting and its fix.

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
  pubsub://PROJECT/{event_type}   (the path, or --topic, is the topic)
                     Google Cloud Pub/Sub (ordering key = aggregate id;
                     Application Default Credentials; ?emulator=host:port)
  mqtt://user:pw@host:1883   (or mqtts://)
                     MQTT 3.1.1, QoS 1 (PUBACK); headers in a JSON
                     envelope; --topic is the topic
  sns://?topic_arn=<escaped ARN or template>
                     Amazon SNS (FIFO topics: group = aggregate id)
  eventbridge://?bus=orders&source=com.example.orders
                     Amazon EventBridge (detail-type = event type)
  kinesis://?stream=orders
                     Amazon Kinesis Data Streams (key = aggregate id)
  https://hooks.example.com/{event_type}   (or http://)
                     signed webhooks (Standard Webhooks); secrets from
                     OUTBOX_WEBHOOK_SECRET (space-separated whsec_...)
  stdout:            one JSON line per event on stdout (debugging; no
                     durability)
Each broker package documents its URL options (go doc .../outbox/kafka ...).
The relay creates no stream, topic, exchange or queue unless asked with
--create-topology (or --ensure-stream NAME for NATS): a missing destination is
an outage (no attempt counted, not ready, the log names the command creating it).

--envelope cloudevents sends every event as a CloudEvent 1.0 in binary
content mode (the payload as the body, the attributes in the broker's
headers: Kafka ce_, HTTP, NATS and Pub/Sub ce-, AMQP cloudEvents_);
cloudevents-structured sends the JSON event format as the body. MQTT,
Kinesis and EventBridge, which have no headers, get structured mode either
way. --cloudevents-source sets the source attribute. See docs/CLOUDEVENTS.md.

--topic is the subject/topic template: {event_type}, {aggregate_type} and
{aggregate_id} are replaced by the event's fields, e.g. "events.{aggregate_type}".

With --http-addr set (e.g. 127.0.0.1:9090) the relay serves
  /metrics   Prometheus metrics (outbox_*, Go and process collectors)
  /healthz   200 while the process is up
  /readyz    200 when the database answers and the broker is connected (and,
             with --source wal, the relay streams the slot, stands by or
             falls back to the table), else 503; a second line describes
             the source: source=wal active=wal slot=... state=streaming
  /console/  the operator console, with --console (see outbox console --help)
Logs are JSON on stderr, or text when stderr is a terminal.`)
	s.register(o)
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

// register adds the relay's flags: the database's, the library's settings
// (relayFlags) and the command's own.
func (s *relaySettings) register(o *options) {
	s.db.register(o)
	s.dbWait.register(o)
	f := o.fs
	f.StringVar(&s.broker, "broker", "", "broker URL; its scheme selects the publisher ("+brokerSchemes()+")")
	f.StringVar(&s.topic, "topic", outbox.DefaultTopicTemplate, "subject/topic template")
	f.StringVar(&s.source, "source", string(outbox.SourceTable), "where events come from: table (claim them from the outbox table) or wal (stream them from the table's logical replication slot)")
	o.setsField("Source", "source")
	f.StringVar(&s.envelope, "envelope", string(outbox.EnvelopeOutbox), "wire format: outbox (the payload, outbox-* headers), cloudevents (CloudEvents 1.0, binary content mode) or cloudevents-structured (the JSON event format as the body); see docs/CLOUDEVENTS.md")
	o.setsField("Envelope", "envelope")
	f.StringVar(&s.ceSource, "cloudevents-source", "", "with --envelope cloudevents[-structured]: the events' source attribute, a URI reference (default /pgoutbox/<schema>.<table>)")
	o.setsField("CloudEventsSource", "cloudevents-source")
	for _, st := range s.relayFlags() {
		st.register(o)
	}
	f.StringVar(&s.directURL, "direct-url", "", "connection string to PostgreSQL itself, for LISTEN (--listen) and the WAL source's stream when --database-url goes through a pooler such as PgBouncer (default: --database-url)")
	f.StringVar(&s.httpAddr, "http-addr", "", "address serving /metrics, /healthz and /readyz, e.g. 127.0.0.1:9090 (empty: off)")
	s.console.registerRelay(o)
	f.BoolVar(&s.createTopology, "create-topology", false, "create a missing destination: JetStream stream, Kafka topics, the RabbitMQ exchange named in the URL, SQS queues, Pub/Sub topics (opt-in)")
	f.StringVar(&s.ensureStream, "ensure-stream", "", "NATS: JetStream stream to create or update so it captures --topic's subjects (default OUTBOX with --create-topology)")
	f.StringVar(&s.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&s.logFormat, "log-format", "", "json or text (default: text when stderr is a terminal, else json)")
}

// validate checks what the library cannot: zero values, which mean "default"
// in outbox.RelayConfig but are mistakes on a command line, the topic
// template and the HTTP address.
func (s *relaySettings) validate(o *options) error {
	for _, st := range s.relayFlags() {
		if err := st.check(o); err != nil {
			return err
		}
	}
	switch outbox.Source(s.source) {
	case outbox.SourceTable, outbox.SourceWAL:
	default:
		return o.settingErr("source", "%q is not a source (want %s or %s)", s.source, outbox.SourceTable, outbox.SourceWAL)
	}
	if err := outbox.Envelope(s.envelope).Valid(); err != nil || s.envelope == "" {
		return o.settingErr("envelope", "%q is not an envelope (want %s, %s or %s)", s.envelope, outbox.EnvelopeOutbox, outbox.EnvelopeCloudEvents, outbox.EnvelopeCloudEventsStructured)
	}
	if s.ceSource != "" && !outbox.Envelope(s.envelope).CloudEvents() {
		return o.settingErr("cloudevents-source", "%q: set without --envelope cloudevents or cloudevents-structured", s.ceSource)
	}
	if _, err := outbox.ParseTopicTemplate(s.topic); err != nil {
		return o.settingErr("topic", "%s", strings.TrimPrefix(err.Error(), "outbox: "))
	}
	if s.httpAddr != "" {
		if _, _, err := net.SplitHostPort(s.httpAddr); err != nil {
			return o.settingErr("http-addr", "%q: %v (want host:port, e.g. 127.0.0.1:9090)", s.httpAddr, err)
		}
	}
	return s.console.validateRelay(s.httpAddr)
}

// relayConfig is the library configuration the settings describe.
func (s *relaySettings) relayConfig(log *slog.Logger, reg prometheus.Registerer) outbox.RelayConfig {
	cfg := s.cfg
	cfg.Schema, cfg.Table = s.db.Schema, s.db.Table
	cfg.Source = outbox.Source(s.source)
	cfg.Envelope, cfg.CloudEventsSource = outbox.Envelope(s.envelope), s.ceSource
	cfg.BatchDelay = cliBatchDelay(cfg.BatchDelay)
	cfg.Logger, cfg.Registerer = log, reg
	cfg.DirectConnConfig = s.direct
	return cfg
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

// relay runs the relay command: start (exit 2 on a bad setting, 3 without a
// database, 4 without a migrated table), serve /metrics and the probes if
// asked, and run until a signal, then drain.
func (c *cli) relay(ctx context.Context, o *options, s *relaySettings) error {
	r, err := c.startRelay(ctx, o, s)
	if err != nil {
		return err
	}
	defer r.stopTracing()
	if s.httpAddr != "" {
		if err := c.serveHTTP(r, o, s); err != nil {
			r.shutdown()
			return err
		}
	}
	r.log.Info("outbox relay started", "version", Version().Version, "table", tableName(s.db), "source", s.source, "broker", r.brokerURL, "topic", s.topic,
		"workers", s.cfg.Workers, "batch_size", s.cfg.BatchSize, "poll_interval", s.cfg.PollInterval,
		"max_attempts", s.cfg.MaxAttempts, "retention", s.cfg.Retention, "ordered", s.cfg.Ordered, "listen", s.cfg.Listen,
		"delete_on_publish", s.cfg.DeleteOnPublish, "batch_delay", s.cfg.BatchDelay, "envelope", s.envelope, "direct_connection", s.direct != nil)
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchBroker(wctx, r.log, r.pub, cmp.Or(s.cfg.OutageBackoff.Max, outbox.DefaultOutageMax))
	}()
	defer func() { stopWatch(); <-watched }()
	return c.runRelay(ctx, s, r)
}

// runningRelay is a relay ready to run, and what it holds.
type runningRelay struct {
	relay     *outbox.Relay
	pub       outbox.Publisher
	pool      *pgxpool.Pool
	reg       *prometheus.Registry
	log       *slog.Logger
	brokerURL string // redacted
	shutdown  func() // closes the broker, the pool and the HTTP server
	// stopTracing flushes the spans not yet exported; called at exit.
	stopTracing func()
}

// startRelay checks the settings, connects and opens the broker. Every
// setting is checked before the database is, so a bad flag is exit 2
// whatever the database.
func (c *cli) startRelay(ctx context.Context, o *options, s *relaySettings) (_ *runningRelay, err error) {
	if len(o.args) > 0 {
		return nil, usageErr("relay: unexpected argument %q", o.args[0])
	}
	c.red.addDSN(s.broker)
	if err := s.validate(o); err != nil {
		return nil, err
	}
	brokerURL, openBroker, err := parseBroker(s.broker)
	if err != nil {
		return nil, o.settingErr("broker", "%v", err)
	}
	log, err := c.newLogger(o, s.logLevel, s.logFormat)
	if err != nil {
		return nil, err
	}
	// From here on a failure is logged too (as JSON with --log-format json),
	// with its exit code, before the command prints its one line.
	defer func() {
		if err != nil {
			err = logged(ctx, log, err)
		}
	}()
	tp, stopTracing, err := c.tracing(ctx, log)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			stopTracing()
		}
	}()
	pool, err := c.relayPool(ctx, o, s, log)
	if err != nil {
		return nil, err
	}
	pub, brokerCloser, err := openBroker(ctx, brokerURL, BrokerOptions{
		Topic: s.topic, Logger: log, Stdout: c.stdout, ClientName: "pgoutbox relay", Getenv: c.getenv,
		CreateTopology: s.createTopology || s.ensureStream != "", StreamName: s.ensureStream,
	})
	if err != nil {
		pool.Close()
		return nil, o.settingErr("broker", "%v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfoGauge())
	relay, err := outbox.NewRelay(pool, pub, withTracer(s.relayConfig(log, reg), tp))
	if err != nil { // validated above; only a registry clash could fail here
		brokerCloser.Close()
		pool.Close()
		return nil, err
	}
	// Replays are counted apart, read from the table at each scrape.
	adm, err := admin.New(pool, admin.Config{Schema: s.db.Schema, Table: s.db.Table})
	if err == nil {
		err = reg.Register(adm.ReplayCollector(s.cfg.MetricLabels))
	}
	if err != nil {
		brokerCloser.Close()
		pool.Close()
		return nil, err
	}
	started = true
	return &runningRelay{relay: relay, pub: pub, pool: pool, reg: reg, log: log, brokerURL: displayURL(brokerURL), stopTracing: stopTracing, shutdown: func() {
		brokerCloser.Close()
		closePool(pool) // bounded: frozen connections could hold the exit 15 s each
	}}, nil
}

// relayPool connects the relay's pool once the database answers, through a
// pooler if there is one, and checks the outbox table: a missing or old
// table, or a missing privilege, stops the command with its exit code.
func (c *cli) relayPool(ctx context.Context, o *options, s *relaySettings, log *slog.Logger) (*pgxpool.Pool, error) {
	// One connection per worker, plus the gauges, cleanup, the listener and
	// /readyz.
	pcfg, err := c.poolConfig(o, &s.db, int32(s.cfg.Workers)+4)
	if err != nil {
		return nil, err
	}
	if s.directURL != "" {
		if s.direct, err = c.directConfig(o, s.directURL); err != nil {
			return nil, err
		}
	}
	// The library checks the settings it reads before anything connects.
	if err := s.relayConfig(nil, nil).Validate(); err != nil {
		return nil, flagError(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg) // connects lazily
	if err != nil {
		return nil, &exitError{code: ExitDatabase, err: fmt.Errorf("database: %w", err)}
	}
	if err := c.waitForDB(ctx, o, pool, log, s); err != nil {
		pool.Close()
		return nil, err
	}
	if p, switched, err := poolerSafe(ctx, pool, pcfg); err != nil {
		return nil, err
	} else if switched {
		log.Info("the database connections go through a connection pooler that does not keep prepared statements (PgBouncer before 1.21 in transaction mode, say): using default_query_exec_mode=cache_describe; set default_query_exec_mode in --database-url to choose another")
		pool = p
	}
	// A missing or old table stops the command at once with its exit code,
	// before the broker is opened: a relay with a publisher that sends
	// nothing checks it. Any other failure of the check (a statement
	// timeout, a session killed) is left to Relay.Run, which retries it
	// through the outage backoff.
	probe, err := outbox.NewRelay(pool, outbox.PublisherFunc(func(context.Context, *outbox.Message) error { return nil }), s.relayConfig(nil, nil))
	if err != nil { // validated above
		pool.Close()
		return nil, err
	}
	if err := probe.CheckSchema(ctx); errors.Is(err, outbox.ErrNotMigrated) {
		pool.Close()
		return nil, s.notMigrated(err)
	} else if errors.Is(err, outbox.ErrNotOutboxTable) {
		pool.Close()
		return nil, &exitError{code: ExitNotMigrated, err: err}
	} else if errors.Is(err, outbox.ErrPrivilege) {
		pool.Close()
		return nil, &exitError{code: ExitUsage, err: err}
	} else if err != nil {
		log.Warn("outbox relay cannot check its table yet; the relay will retry", "err", redactDSN(err.Error()))
	}
	return pool, nil
}

// serveHTTP serves /metrics, /healthz, /readyz and the console on --http-addr until the relay
// shuts down.
func (c *cli) serveHTTP(r *runningRelay, o *options, s *relaySettings) error {
	ln, err := net.Listen("tcp", s.httpAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	srv := c.httpServer(r.relay, r.reg)
	if err := c.mountConsole(srv, o, &s.console, s, r.pool, r.relay, r.brokerURL, r.log); err != nil {
		ln.Close()
		return err
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Error("http server failed", "err", err)
		}
	}()
	r.log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	prev := r.shutdown
	r.shutdown = func() {
		srv.Close()
		prev()
	}
	return nil
}

// runRelay runs the relay until ctx is cancelled, then gives the batches in
// flight --drain-timeout to finish.
func (c *cli) runRelay(ctx context.Context, s *relaySettings, r *runningRelay) error {
	log := r.log
	runDone := make(chan error, 1)
	go func() { runDone <- r.relay.Run(ctx) }()

	var err error
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
				r.shutdown()
			}()
			log.Error("drain timeout exceeded: abandoning the batch in flight; it is rolled back, not marked", "drain_timeout", s.drainTimeout)
			return &exitError{code: ExitDrainTimeout, err: fmt.Errorf(
				"relay: --drain-timeout %s exceeded: the unfinished batch is rolled back by PostgreSQL and will be published again", s.drainTimeout)}
		}
	}
	r.shutdown()
	// Relay.Run checks the table first; a signal during that check fails it
	// with the cancellation, which is still a clean stop.
	if err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
		// A missing replication prerequisite is configuration (exit 2); the
		// error is the one line naming the setting and its fix.
		err = replicationErr(s.notMigrated(err))
		log.Error("outbox relay failed", "err", redactDSN(oneLine(err.Error())), "exit_code", exitCode(err))
		return err
	}
	log.Info("outbox relay stopped")
	return nil
}

// notMigrated is notMigrated for the relay's table, whose hint names
// --source wal for a WAL relay: its table also needs the WAL source's index,
// publication and slot.
func (s *relaySettings) notMigrated(err error) error {
	extra := ""
	if outbox.Source(s.source) == outbox.SourceWAL {
		extra = " --source wal"
	}
	return notMigratedHint(tableName(s.db), &s.db, extra, err)
}

// tableName is the quoted table name, as admin.Admin.Table spells it.
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
	// ContinueOnError: a collector that fails (the replay query while the
	// database is down) must not hide the relay's own metrics.
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		st := relay.SourceStatus()
		err := relay.Ready(ctx)
		if err == nil {
			err = sourceReady(st)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+c.red.String(oneLine(err.Error())))
		} else {
			fmt.Fprintln(w, "ready")
		}
		fmt.Fprintln(w, c.red.String(sourceLine(st)))
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// sourceReady is the source's part of readiness. A WAL relay delivers
// while it streams the slot, while it stands by (another relay streams it;
// this one retries the table's handed-over events and takes over when the
// slot is freed) and while it falls back to the table after losing the
// slot; otherwise (starting, or reopening a broken stream) it does not.
func sourceReady(st outbox.SourceStatus) error {
	if st.Source != outbox.SourceWAL || st.Active == outbox.SourceTable || st.Streaming || st.Standby {
		return nil
	}
	if st.Err != nil {
		return fmt.Errorf("source wal: not streaming slot %s: %w", st.Slot, st.Err)
	}
	return fmt.Errorf("source wal: not streaming slot %s yet", st.Slot)
}

// sourceLine describes the source on one line of key=value pairs, for
// /readyz: source, active (table while a WAL relay falls back), and for the
// WAL source the slot, its state (streaming, standby, fallback, starting),
// the position confirmed and the last error.
func sourceLine(st outbox.SourceStatus) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "source=%s active=%s", st.Source, st.Active)
	if st.Source != outbox.SourceWAL {
		return b.String()
	}
	state := "starting"
	switch {
	case st.Active == outbox.SourceTable:
		state = "fallback"
	case st.Streaming:
		state = "streaming"
	case st.Standby:
		state = "standby"
	}
	fmt.Fprintf(b, " slot=%s state=%s", st.Slot, state)
	if st.Confirmed != "" {
		fmt.Fprintf(b, " confirmed=%s", st.Confirmed)
	}
	if st.Err != nil {
		fmt.Fprintf(b, " err=%q", oneLine(st.Err.Error()))
	}
	return b.String()
}

// cliBatchDelay maps --batch-delay 0 ("claim on every wake-up") to the
// library's negative BatchDelay (its zero value means the default).
func cliBatchDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
