package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox/internal/dberr"
	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Defaults of RelayConfig's fields, used for their zero values.
const (
	DefaultBatchSize        = 1000                   // RelayConfig.BatchSize
	DefaultWorkers          = 2                      // RelayConfig.Workers
	DefaultPollInterval     = 100 * time.Millisecond // RelayConfig.PollInterval
	DefaultMaxAttempts      = 10                     // RelayConfig.MaxAttempts
	DefaultRetryBase        = time.Second            // RelayConfig.RetryBackoff.Base
	DefaultRetryMax         = 5 * time.Minute        // RelayConfig.RetryBackoff.Max
	DefaultOutageBase       = 250 * time.Millisecond // RelayConfig.OutageBackoff.Base
	DefaultOutageMax        = 15 * time.Second       // RelayConfig.OutageBackoff.Max
	DefaultPublishTimeout   = 15 * time.Second       // RelayConfig.PublishTimeout
	DefaultStatsInterval    = 10 * time.Second       // RelayConfig.StatsInterval
	DefaultCleanupInterval  = 10 * time.Minute       // RelayConfig.CleanupInterval
	DefaultCleanupBatch     = 1000                   // RelayConfig.CleanupBatch
	DefaultRescanInterval   = time.Second            // RelayConfig.RescanInterval
	DefaultBatchDelay       = 10 * time.Millisecond  // RelayConfig.BatchDelay
	DefaultBatchDelayAbove  = 1500                   // RelayConfig.BatchDelayAbove
	DefaultStatementTimeout = 5 * time.Second        // RelayConfig.StatementTimeout
	DefaultMaxBatchBytes    = 16 << 20               // RelayConfig.MaxBatchBytes
	DefaultRotateEvents     = 1_000_000              // RelayConfig.RotateEvents
	DefaultRotateInterval   = 5 * time.Minute        // RelayConfig.RotateInterval
	DefaultWALSenderTimeout = 4 * time.Second        // RelayConfig.WALSenderTimeout
	DefaultStuckAfter       = time.Minute            // RelayConfig.StuckAfter
)

// Backoff is an exponential backoff: the n-th wait is Base·2^(n-1), capped at
// Max, with jitter between half and all of it. It is defined in package
// outboxtype, which the relay's engine shares.
type Backoff = outboxtype.Backoff

// RelayConfig configures a Relay. Every zero value means the documented
// default; NewRelay (and Validate) rejects invalid values with a
// *ConfigError naming the field.
type RelayConfig struct {
	// Schema and Table name the outbox table, as in WriterConfig. Schema
	// defaults to the connection's search_path; Table defaults to
	// DefaultTable ("outbox_events").
	Schema string
	Table  string

	// BatchSize is the most rows one worker claims at a time, between 1 and
	// 10000. While a batch's publish takes more than a quarter of
	// PublishTimeout (a slow webhook endpoint, a congested broker), the
	// relay halves the size of the batches it claims, down to 1, and
	// doubles it back towards BatchSize once full batches publish quickly,
	// so a slow destination sees whole batches confirmed rather than
	// timeouts. Memory is about Workers × BatchSize × the average payload,
	// bounded by MaxBatchBytes. Defaults to DefaultBatchSize (1000).
	BatchSize int
	// MaxBatchBytes is the budget of one batch's payloads, in bytes: a
	// claim keeps rows, in insertion order, until their payloads pass it,
	// and always at least one row, so a relay's memory is bounded by about
	// Workers × MaxBatchBytes plus the largest payload, whatever BatchSize.
	// With SourceWAL it also bounds what the stream decodes ahead of the
	// batches (a larger transaction passes alone).
	// A claim learns a large payload's size (as PostgreSQL stores it,
	// compressed) before reading it, and never reads the payloads of the
	// rows it leaves out; the worker claims again at once. At least 1.
	// Defaults to DefaultMaxBatchBytes (16 MiB).
	MaxBatchBytes int
	// Workers is the number of concurrent claim loops in this process,
	// between 1 and 256. Each claims disjoint rows (FOR UPDATE SKIP LOCKED),
	// as do other processes. Defaults to DefaultWorkers (2).
	Workers int
	// PollInterval is how often an idle relay claims: the workers share one
	// poll, due PollInterval after the last claim that came back short,
	// whichever worker made it, so an idle relay claims about once per
	// PollInterval whatever Workers, and a relay kept busy by wake-ups
	// makes no extra claim for the poll. A worker whose batch came back
	// full claims again at once, and the other workers join it at their
	// next poll. Defaults to DefaultPollInterval (100ms).
	PollInterval time.Duration
	// MaxAttempts is how many failed publishes make a dead letter. The
	// attempt of an event whose payload is over 1 MiB as stored is counted
	// when the event is fetched, before its payload is read, so a relay
	// that dies holding it (out of memory, say) has counted it; such an
	// event claimed again with MaxAttempts counted is dead-lettered without
	// being read. Defaults to DefaultMaxAttempts (10).
	MaxAttempts int
	// RetryBackoff spaces a failing message's retries (retry_after).
	// Defaults to DefaultRetryBase (1s) doubling up to DefaultRetryMax (5m).
	RetryBackoff Backoff
	// OutageBackoff spaces the relay's retries while the broker or the database
	// is unreachable, waiting at least the Retry-After the destination asked
	// for (RetryAfter, capped at 24h). No attempt is counted during a broker
	// outage. A message that fails with an unavailable-class error a second
	// time while the destination takes others (a message published after it
	// in its batch was confirmed) is failing alone: its attempts are
	// counted, and it ends as a dead letter.
	// Defaults to DefaultOutageBase (250ms) doubling up to DefaultOutageMax
	// (15s).
	OutageBackoff Backoff
	// PublishTimeout bounds one batch's publish; rows not confirmed by then are
	// released (and, if nothing in the batch was confirmed, the broker is
	// considered unavailable). It also sets the session's
	// idle_in_transaction_session_timeout (plus 5s), so a stalled relay's locks
	// are freed. Defaults to DefaultPublishTimeout (15s).
	PublishTimeout time.Duration
	// StatementTimeout bounds every statement the relay runs on the
	// database: the claim, the mark and its commit, a rollback, the check
	// of the table at start, the LISTEN and the listener's liveness ping
	// (after twice StatementTimeout without a notification); the housekeeping statements
	// (gauges, held events) get at least StatsInterval. A batch's
	// transaction spans its publish, so the bound is per statement, not per
	// batch. When a statement misses it (a connection whose peer stopped
	// answering), the relay logs the phase it was in, discards the
	// connection, and the worker carries on with a fresh one after
	// OutageBackoff. Shutdown waits at most this long for a statement in
	// flight. Defaults to DefaultStatementTimeout (5s).
	StatementTimeout time.Duration

	// Source is where the relay finds events: SourceTable (claims from the
	// outbox table) or SourceWAL (streams them from a logical replication
	// slot, writing nothing per event on the happy path; see SourceWAL and
	// docs/WAL.md). With SourceWAL, Run checks the replication
	// prerequisites first and returns an error wrapping
	// ErrReplicationPrerequisite naming the missing one. Defaults to
	// SourceTable.
	Source Source

	// RotateEvents and RotateInterval pace the partitions of a partitioned
	// outbox table (MigrateConfig.Partitioned) relayed with SourceWAL. The
	// relay streaming the slot moves new events to a new partition once the
	// current one has taken RotateEvents events, or has taken any and has
	// been current for RotateInterval; it drops an old partition once every
	// event in it was delivered, with no vacuum (docs/WAL.md, "A partitioned
	// table"). Smaller partitions leave less behind between drops and
	// rotate more often (each rotation is two quick DDL statements, neither
	// blocking writers). While 8 partitions are attached (a stream behind,
	// events held on the table path) nothing rotates and the current
	// partition takes the new events. The relay's role must own the table.
	// Both are ignored for an unpartitioned table and for SourceTable.
	// Defaults to DefaultRotateEvents (1,000,000) and DefaultRotateInterval
	// (5m).
	RotateEvents   int
	RotateInterval time.Duration

	// WALSenderTimeout (SourceWAL) is the wal_sender_timeout the relay sets
	// on its replication connection: a relay that stops answering (stopped
	// by SIGSTOP, a frozen VM, a network that vanished) loses the slot after
	// it, and a standby takes the slot over about half a second later. The
	// stream reports every second, so values below a few seconds risk
	// cutting a healthy relay under load. At least 2s. Defaults to
	// DefaultWALSenderTimeout (4s).
	WALSenderTimeout time.Duration

	// StuckAfter is how long events may be due with none reaching the
	// destination before the relay reports itself stuck: Ready (and
	// /readyz) fails naming the cause when it can tell (the destination
	// refusing everything, batches failing, the slot not streamed, a
	// transaction holding the xmin horizon), the log says it once, and
	// outbox_stuck is 1. Checked every StatsInterval. Defaults to
	// DefaultStuckAfter (1m).
	StuckAfter time.Duration

	// DeleteOnPublish deletes a row once the broker confirmed it, instead of
	// setting processed_at. (With SourceWAL, streamed events are always
	// deleted once confirmed; this applies to the events the table workers
	// publish.) It is the fastest way to drain (a DELETE writes
	// less than an UPDATE, and nothing is left to clean up) at the cost of
	// history: `outbox status` then shows no published counts, and processed
	// rows are not there to audit. Dead letters stay either way. Defaults to
	// false.
	DeleteOnPublish bool

	// Ordered enables per-aggregate ordering: events of one aggregate
	// (aggregate_type + aggregate_id) reach the broker in insertion order
	// (seq), whatever the number of workers and processes, retries and
	// crashes. The relay then claims an event only when every earlier event
	// of its aggregate was processed, so a failing event holds back its own
	// aggregate only; a dead letter holds its aggregate until an operator
	// re-queues it (see outbox_blocked_aggregates). Events of different
	// aggregates are unaffected either way, but without it a retried event
	// can be overtaken by its successors. Defaults to false.
	Ordered bool

	// Listen makes the relay LISTEN, on a dedicated connection, for the
	// wake-ups a Notifier sends after the application commits, so events are
	// relayed within milliseconds instead of at the next poll. SourceWAL
	// needs no wake-ups: streamed events reach the relay within the
	// stream's latency. Polling stays
	// the fallback (a lost notification costs at most PollInterval); the
	// listener reconnects by itself. It needs one extra connection per
	// relay. Defaults to false.
	Listen bool

	// DirectConnConfig is a connection to PostgreSQL itself for what a
	// connection pooler in transaction mode (PgBouncer) cannot carry: the
	// Listen connection, and SourceWAL's replication stream and the
	// connection that deletes the streamed rows. Claims, marks and gauges
	// still go through the pool. Build it with pgx.ParseConfig from
	// PostgreSQL's own host and port, with the pool's user and database.
	// Its search_path is its own: name the table's schema with Schema.
	// Defaults to nil: those connections use the pool's settings, so a
	// relay whose pool goes through a pooler refuses SourceWAL at start and
	// polls instead of listening.
	DirectConnConfig *pgx.ConnConfig

	// Retention enables the cleanup loop: processed rows older than this are
	// deleted every CleanupInterval, CleanupBatch rows per statement.
	// Defaults to 0: processed rows are kept forever.
	Retention time.Duration
	// CleanupInterval is how often the cleanup loop runs when Retention is
	// set. Defaults to DefaultCleanupInterval (10m).
	CleanupInterval time.Duration
	// CleanupBatch is how many rows one cleanup statement deletes (each in
	// its own short transaction). Defaults to DefaultCleanupBatch (1000).
	CleanupBatch int

	// Envelope is the wire format of every message: EnvelopeOutbox (the
	// payload as the body, the standard headers), EnvelopeCloudEvents (a
	// CloudEvent 1.0 in binary content mode: the payload as the body, the
	// attributes in the broker's headers) or EnvelopeCloudEventsStructured
	// (the JSON event format as the body). Each broker package's doc and
	// docs/CLOUDEVENTS.md say what its messages carry. Defaults to
	// EnvelopeOutbox.
	Envelope Envelope
	// CloudEventsSource is the source attribute of every CloudEvent, a URI
	// reference; set it only with a CloudEvents Envelope. Defaults to
	// /pgoutbox/<schema>.<table> (/pgoutbox/<table> when Schema is empty).
	CloudEventsSource string

	// Logger receives structured logs (event_id, event_type, aggregate_id,
	// attempt on every line about an event). Payloads are never logged.
	// Defaults to discarding logs.
	Logger *slog.Logger
	// Registerer, when set, receives the relay's Prometheus metrics
	// (outbox_events_published_total, outbox_events_failed_total,
	// outbox_events_pending, outbox_batch_duration_seconds, ...). Defaults
	// to none: no metrics are registered.
	Registerer prometheus.Registerer
	// MetricLabels are constant labels added to every metric.
	MetricLabels prometheus.Labels
	// TracerProvider creates the relay's producer spans (one per message,
	// child of the span that wrote the event). Defaults to the OpenTelemetry
	// global provider, a no-op unless the application installed one.
	TracerProvider trace.TracerProvider
	// StatsInterval is how often the pending and dead-letter gauges are
	// refreshed from the table, and held events looked after. Defaults to
	// DefaultStatsInterval (10s).
	StatsInterval time.Duration
	// RescanInterval is how often one claim scans the pending rows from the
	// start of the table. Between rescans claims start just past the rows
	// the relay already processed, so they do not step over the index
	// entries those rows leave until VACUUM, which a claim would otherwise
	// walk through one by one after a long drain. What the rescan picks up:
	// an event whose transaction committed long after its INSERT (more than
	// a quarter of RescanInterval), a retry that came due, rows another
	// relay released when its batch failed. Each waits at most
	// RescanInterval longer than without this: while the rescan finds full
	// batches of them, claims continue from where it stopped, back to back,
	// so a large transaction that committed late drains at full speed. Defaults to
	// DefaultRescanInterval (1s).
	RescanInterval time.Duration

	// BatchDelay and BatchDelayAbove trade latency for the writers'
	// throughput under a heavy stream. While events arrive at up to
	// BatchDelayAbove per second, a worker woken by a notification or Wake
	// claims at once. Above that the relay coalesces wake-ups: one claim per
	// BatchDelay, however many wake-ups arrive, so each claim carries more
	// events, until the stream falls below three quarters of
	// BatchDelayAbove. Only wake-ups are paced: without one, the relay
	// claims at its PollInterval. A claim costs about the same for 3 events
	// or 300, and on a busy database that cost is taken from the
	// application's transactions; the margin keeps writers that the claims
	// slow down from getting a claim per wake-up back, which would slow
	// them down further. A
	// backlog (full batches) is always claimed back to back. A negative
	// BatchDelay never paces; BatchDelay must not exceed PublishTimeout.
	// Defaults to DefaultBatchDelay (10ms).
	//
	// The WAL source paces its reads of the stream, counting transactions
	// rather than events: above BatchDelayAbove transactions a
	// second it reads at most once per BatchDelay (rising to it between that
	// rate and twice it), so each read, and each batch it publishes, carries
	// many transactions. Unpaced, it wakes up for every message the server
	// sends (three per one-event transaction), and that costs it more CPU
	// than the events themselves. Its cost is per transaction, whatever the
	// transaction's size, hence the unit. It also paces its reads while it
	// catches up with a backlog (transactions read over a second after
	// their commit), whatever their rate: a reader that keeps up with the
	// server's decoding takes the CPU the server decodes with.
	BatchDelay time.Duration
	// BatchDelayAbove is the rate, in events per second (WAL source:
	// transactions per second), above which claims (reads) are paced (see
	// BatchDelay). Defaults to DefaultBatchDelayAbove (1500).
	BatchDelayAbove int
}

// withDefaults returns cfg with every zero value replaced by its default.
func (cfg RelayConfig) withDefaults() RelayConfig {
	cfg.Source = cmp.Or(cfg.Source, SourceTable)
	cfg.Envelope = cmp.Or(cfg.Envelope, EnvelopeOutbox)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.MaxBatchBytes = cmp.Or(cfg.MaxBatchBytes, DefaultMaxBatchBytes)
	cfg.Workers = cmp.Or(cfg.Workers, DefaultWorkers)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.RetryBackoff.Base = cmp.Or(cfg.RetryBackoff.Base, DefaultRetryBase)
	cfg.RetryBackoff.Max = cmp.Or(cfg.RetryBackoff.Max, DefaultRetryMax)
	cfg.OutageBackoff.Base = cmp.Or(cfg.OutageBackoff.Base, DefaultOutageBase)
	cfg.OutageBackoff.Max = cmp.Or(cfg.OutageBackoff.Max, DefaultOutageMax)
	cfg.PublishTimeout = cmp.Or(cfg.PublishTimeout, DefaultPublishTimeout)
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, DefaultStatementTimeout)
	cfg.StatsInterval = cmp.Or(cfg.StatsInterval, DefaultStatsInterval)
	cfg.RescanInterval = cmp.Or(cfg.RescanInterval, DefaultRescanInterval)
	cfg.BatchDelay = cmp.Or(cfg.BatchDelay, DefaultBatchDelay)
	cfg.BatchDelayAbove = cmp.Or(cfg.BatchDelayAbove, DefaultBatchDelayAbove)
	cfg.CleanupInterval = cmp.Or(cfg.CleanupInterval, DefaultCleanupInterval)
	cfg.CleanupBatch = cmp.Or(cfg.CleanupBatch, DefaultCleanupBatch)
	cfg.RotateEvents = cmp.Or(cfg.RotateEvents, DefaultRotateEvents)
	cfg.RotateInterval = cmp.Or(cfg.RotateInterval, DefaultRotateInterval)
	cfg.WALSenderTimeout = cmp.Or(cfg.WALSenderTimeout, DefaultWALSenderTimeout)
	cfg.StuckAfter = cmp.Or(cfg.StuckAfter, DefaultStuckAfter)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return cfg
}

// validate checks a config with its defaults filled in; raw is the config
// as given, whose values the errors quote.
func (cfg RelayConfig) validate(raw RelayConfig) error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{Config: "RelayConfig", Field: field, Err: fmt.Errorf(format, args...)}
	}
	if err := cfg.Source.valid(); err != nil {
		return bad("Source", "%w", err)
	}
	if err := cfg.Envelope.Valid(); err != nil {
		return bad("Envelope", "%w", err)
	}
	if cfg.CloudEventsSource != "" {
		if !cfg.Envelope.CloudEvents() {
			return bad("CloudEventsSource", "%q: set without a CloudEvents Envelope", raw.CloudEventsSource)
		}
		if err := outboxtype.ValidCloudEventsSource(cfg.CloudEventsSource); err != nil {
			return bad("CloudEventsSource", "%w", err)
		}
	}
	switch {
	case cfg.BatchSize < 1 || cfg.BatchSize > 10000:
		return bad("BatchSize", "%d: must be between 1 and 10000", raw.BatchSize)
	case cfg.MaxBatchBytes < 1:
		return bad("MaxBatchBytes", "%d: must be at least 1 byte", raw.MaxBatchBytes)
	case cfg.Workers < 1 || cfg.Workers > 256:
		return bad("Workers", "%d: must be between 1 and 256", raw.Workers)
	case cfg.PollInterval < time.Millisecond:
		return bad("PollInterval", "%s: must be at least 1ms", raw.PollInterval)
	case cfg.MaxAttempts < 1:
		return bad("MaxAttempts", "%d: must be at least 1", raw.MaxAttempts)
	case cfg.RetryBackoff.Base <= 0 || cfg.RetryBackoff.Max < cfg.RetryBackoff.Base:
		return bad("RetryBackoff", "base %s, max %s: need 0 < base <= max", cfg.RetryBackoff.Base, cfg.RetryBackoff.Max)
	case cfg.OutageBackoff.Base <= 0 || cfg.OutageBackoff.Max < cfg.OutageBackoff.Base:
		return bad("OutageBackoff", "base %s, max %s: need 0 < base <= max", cfg.OutageBackoff.Base, cfg.OutageBackoff.Max)
	case cfg.PublishTimeout < 10*time.Millisecond:
		return bad("PublishTimeout", "%s: must be at least 10ms", raw.PublishTimeout)
	case cfg.StatementTimeout < 10*time.Millisecond:
		return bad("StatementTimeout", "%s: must be at least 10ms", raw.StatementTimeout)
	case cfg.RescanInterval < time.Millisecond:
		return bad("RescanInterval", "%s: must be at least 1ms", raw.RescanInterval)
	case cfg.BatchDelay > cfg.PublishTimeout:
		return bad("BatchDelay", "%s: must not exceed PublishTimeout (%s)", raw.BatchDelay, cfg.PublishTimeout)
	case cfg.BatchDelayAbove < 1:
		return bad("BatchDelayAbove", "%d: must be at least 1 event/s", raw.BatchDelayAbove)
	case cfg.StatsInterval < 0:
		return bad("StatsInterval", "%s: must not be negative", raw.StatsInterval)
	case cfg.Retention < 0:
		return bad("Retention", "%s: must not be negative", raw.Retention)
	case cfg.CleanupInterval <= 0:
		return bad("CleanupInterval", "%s: must be positive", raw.CleanupInterval)
	case cfg.CleanupBatch < 1:
		return bad("CleanupBatch", "%d: must be at least 1", raw.CleanupBatch)
	case cfg.RotateEvents < 1:
		return bad("RotateEvents", "%d: must be at least 1", raw.RotateEvents)
	case cfg.RotateInterval < time.Second:
		return bad("RotateInterval", "%s: must be at least 1s", raw.RotateInterval)
	case cfg.StuckAfter < 0:
		return bad("StuckAfter", "%s: must not be negative", raw.StuckAfter)
	case cfg.WALSenderTimeout < 2*time.Second:
		return bad("WALSenderTimeout", "%s: must be at least 2s (the stream reports every second)", raw.WALSenderTimeout)
	}
	return nil
}

// Validate returns the *ConfigError NewRelay would return for cfg, naming
// the field it refuses, or nil. It touches neither the database nor the
// broker, so a program can check its settings before it connects. One
// refusal shows only in NewRelay: metrics that clash with some already in
// Registerer.
func (cfg RelayConfig) Validate() error {
	_, err := cfg.engineConfig()
	return err
}

// engineConfig validates cfg and returns the engine's configuration, every
// default filled in.
func (cfg RelayConfig) engineConfig() (engine.Config, error) {
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return engine.Config{}, ident.ConfigErr("RelayConfig", err)
	}
	c := cfg.withDefaults()
	if err := c.validate(cfg); err != nil {
		return engine.Config{}, err
	}
	return engine.Config{
		Names:            n,
		BatchSize:        c.BatchSize,
		MaxBatchBytes:    c.MaxBatchBytes,
		Workers:          c.Workers,
		PollInterval:     c.PollInterval,
		MaxAttempts:      c.MaxAttempts,
		RetryBackoff:     c.RetryBackoff,
		OutageBackoff:    c.OutageBackoff,
		PublishTimeout:   c.PublishTimeout,
		StatementTimeout: c.StatementTimeout,
		StatsInterval:    c.StatsInterval,
		RescanInterval:   c.RescanInterval,
		BatchDelay:       max(c.BatchDelay, 0),
		BatchDelayAbove:  c.BatchDelayAbove,
		Retention:        c.Retention,
		CleanupInterval:  c.CleanupInterval,
		CleanupBatch:     c.CleanupBatch,
		DeleteOnPublish:  c.DeleteOnPublish,
		Ordered:          c.Ordered,
		Listen:           c.Listen,
		WAL:              c.Source == SourceWAL,
		RotateEvents:     int64(c.RotateEvents),
		RotateInterval:   c.RotateInterval,
		SenderTimeout:    c.WALSenderTimeout,
		Direct:           c.DirectConnConfig,
		StuckAfter:       c.StuckAfter,
		Logger:           c.Logger,
	}, nil
}

// Relay moves events from the outbox table to a broker: claim a batch, publish
// it, wait for the broker's confirmations, mark the batch in one statement.
// Delivery is at-least-once; run as many relays (workers or processes) as you
// like.
type Relay struct {
	pool    *pgxpool.Pool
	pub     Publisher
	names   ident.Names
	eng     *engine.Engine
	metrics *metrics.Metrics
	tracer  *relayTracer
	cfg     engine.Config
	running atomic.Bool
	// envelope and ceSource go on every message (RelayConfig.Envelope,
	// RelayConfig.CloudEventsSource with its default).
	envelope Envelope
	ceSource string
}

// NewRelay validates cfg and returns a relay that reads from pool and
// publishes with pub. It does not touch the database or the broker.
func NewRelay(pool *pgxpool.Pool, pub Publisher, cfg RelayConfig) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("outbox: NewRelay: pool is nil")
	}
	if pub == nil {
		return nil, errors.New("outbox: NewRelay: publisher is nil")
	}
	ec, err := cfg.engineConfig()
	if err != nil {
		return nil, err
	}
	m, err := metrics.New(cfg.Registerer, cfg.MetricLabels, ec.WAL)
	if err != nil {
		return nil, &ConfigError{Config: "RelayConfig", Field: "Registerer", Err: err}
	}
	ec.Metrics = m
	r := &Relay{pool: pool, pub: pub, names: ec.Names, metrics: m, tracer: newRelayTracer(cfg.TracerProvider), cfg: ec}
	r.envelope = cmp.Or(cfg.Envelope, EnvelopeOutbox)
	if r.envelope.CloudEvents() {
		r.ceSource = cmp.Or(cfg.CloudEventsSource, outboxtype.CloudEventsSourceFor(ec.Names.Schema, ec.Names.Table))
	}
	ec.Publish = r.publish
	r.eng = engine.New(pool, ec)
	return r, nil
}

// Run relays events until ctx is cancelled, then finishes the batches in
// flight (bounded by PublishTimeout) and returns nil. It first checks that the
// table is migrated and returns an error wrapping ErrNotMigrated if not,
// ErrPrivilege if the pool's role lacks a privilege the relay needs (the
// error names the GRANT), ErrDatabaseTLS if the TLS connection to the database cannot be set up
// (a configuration error, not an outage).
// Database and broker outages, at start or later, do not end Run: it logs,
// backs off and resumes.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox: Relay.Run called twice")
	}
	defer r.running.Store(false)
	// A missing or old table ends Run at once: waiting cannot fix it. Any
	// other failure of the check (the database restarting, a failover, a
	// killed session) is an outage like those Run rides out later, so the
	// check is retried with OutageBackoff.
	for failures := 1; ; failures++ {
		err := r.CheckSchema(ctx)
		switch {
		case ctx.Err() != nil:
			return nil // stopped while starting: a clean stop, nothing was claimed
		case err == nil:
			if err = r.checkPooler(ctx); err == nil {
				if err = r.checkPrivileges(ctx); err == nil {
					err = r.eng.Prepare(ctx)
				}
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			return r.eng.Run(ctx)
		case errors.Is(err, ErrNotMigrated), errors.Is(err, ErrNotOutboxTable):
			return err
		case errors.Is(err, engine.ErrClientEncoding):
			return fmt.Errorf("outbox: relay of %s: %w", r.names.QTable, err)
		case errors.Is(err, ErrReplicationPrerequisite), errors.Is(err, ErrDatabaseTLS),
			errors.Is(err, ErrPrivilege), store.IsInsufficientPrivilege(err):
			return fmt.Errorf("outbox: relay of %s: %w", r.names.QTable, err)
		}
		if terr := dberr.TLS(r.pool.Config().ConnConfig, err); terr != nil {
			// A certificate the client refuses is a configuration
			// error: waiting would retry it forever.
			return fmt.Errorf("outbox: relay of %s: %w", r.names.QTable, terr)
		}
		wait := r.cfg.OutageBackoff.Delay(failures)
		r.cfg.Logger.Warn("outbox relay cannot check its table yet; retrying", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// CheckSchema returns an error wrapping ErrNotMigrated when the outbox table
// is missing or lacks a column or index this version of pgoutbox needs.
func (r *Relay) CheckSchema(ctx context.Context) error {
	err := r.eng.CheckSchema(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, engine.ErrClientEncoding):
		return err
	case errors.Is(err, engine.ErrWALTable):
		return fmt.Errorf("outbox: table %s: %w: it is %w; relay it with Source: SourceWAL (outbox relay --source wal), or set it up for the table source again with `outbox migrate drop-wal` or outbox.DropReplication", r.names.QTable, ErrNotMigrated, err)
	case engine.IsUndefined(err), errors.Is(err, engine.ErrMissingIndex):
		if ferr := store.ForeignTable(ctx, r.pool, r.names); ferr != nil {
			return ferr
		}
		return fmt.Errorf("outbox: table %s: %w (run `outbox migrate` or outbox.Migrate): %v", r.names.QTable, ErrNotMigrated, err)
	case store.IsInsufficientPrivilege(err):
		return fmt.Errorf("outbox: check table %s: %w", r.names.QTable, store.Explain(ctx, r.pool, r.names, r.privilegeJob(), err))
	default:
		if terr := dberr.TLS(r.pool.Config().ConnConfig, err); terr != nil {
			return fmt.Errorf("outbox: check table %s: %w", r.names.QTable, terr)
		}
		return fmt.Errorf("outbox: check table %s: %w", r.names.QTable, err)
	}
}

// BatchResult summarizes one ProcessBatch call.
type BatchResult struct {
	Claimed      int // rows claimed
	Published    int // confirmed by the broker and marked processed
	Retried      int // failed, attempt counted, retry_after set
	DeadLettered int // failed permanently or at MaxAttempts
	Unavailable  int // left untouched because the broker was unreachable
}

// ProcessBatch claims, publishes and marks one batch, for tests and for
// callers that drive the relay themselves (a cron job, a serverless function).
func (r *Relay) ProcessBatch(ctx context.Context) (BatchResult, error) {
	res, err := r.eng.Batch(ctx)
	return BatchResult{Claimed: res.Claimed, Published: res.Published, Retried: res.Retried,
		DeadLettered: res.DeadLettered, Unavailable: res.Unavailable}, err
}

// Wake makes an idle worker claim at once, instead of at its next poll. Call
// it after committing events when latency matters.
func (r *Relay) Wake() { r.eng.Wake() }

// Ready reports whether the relay can do its job: the database answers and
// the broker was reachable on the last batch (and answers the publisher's
// health check, if it has one).
func (r *Relay) Ready(ctx context.Context) error {
	if err := r.pool.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if err := r.eng.Unrecorded(); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	if st := r.eng.Stuck(); st.Due > 0 {
		return fmt.Errorf("%w: %s", ErrStuck, st.Error())
	}
	if r.eng.BrokerDown() {
		if err := r.eng.BrokerErr(); err != nil {
			return fmt.Errorf("broker: unavailable on the last batch: %w", err)
		}
		return errors.New("broker: unavailable on the last batch")
	}
	if hc, ok := r.pub.(HealthChecker); ok {
		if err := hc.Health(ctx); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	return nil
}

// publish is the engine's one call back into this package: it publishes
// the rows' messages with tracing, and classifies each error for the engine.
func (r *Relay) publish(ctx context.Context, rows []*engine.Row) []engine.Attempt {
	msgs := make([]*Message, len(rows))
	for i, row := range rows {
		msgs[i] = &row.Message
		msgs[i].Envelope, msgs[i].CloudEventsSource = r.envelope, r.ceSource
	}
	spans := r.tracer.start(ctx, r.pub, msgs)
	errs := r.publishMessages(ctx, msgs)
	if len(errs) == len(msgs) {
		endSpans(spans, errs)
	} else {
		endSpans(spans, make([]error, len(msgs)))
	}
	out := make([]engine.Attempt, len(errs)) // a wrong count is the engine's to report
	for i, err := range errs {
		if err != nil {
			out[i] = classifyAttempt(err)
		}
	}
	return out
}

// classifyAttempt is err as the engine needs it: its class, whether it is
// a timeout, and the wait it asks for.
func classifyAttempt(err error) engine.Attempt {
	a := engine.Attempt{Err: err, Class: Classify(err), Timeout: isTimeout(err)}
	if d, ok := RequestedDelay(err); ok {
		a.RetryAfter = d
	}
	return a
}

func (r *Relay) publishMessages(ctx context.Context, msgs []*Message) []error {
	if bp, ok := r.pub.(BatchPublisher); ok {
		errs := bp.PublishBatch(ctx, msgs)
		if errs == nil {
			errs = make([]error, len(msgs))
		}
		return errs
	}
	errs := make([]error, len(msgs))
	// Once the broker looks unreachable, the rest of the batch waits. But
	// one message whose publish always fails that way (say it resets the
	// connection) must not pass for an outage: the next message is tried
	// once, and if the broker takes it (or answers for itself) the batch
	// goes on, and the engine counts an attempt for the message that
	// failed alone.
	var stop error
	probe := false // the next message tells whether the broker is reachable
	for i, m := range msgs {
		if stop == nil && ctx.Err() != nil {
			stop = ctx.Err()
		}
		if stop != nil && !probe {
			errs[i] = stop
			continue
		}
		errs[i] = r.pub.Publish(ctx, m)
		unavailable := errs[i] != nil && Classify(errs[i]) == ClassUnavailable
		switch {
		case probe && !unavailable:
			stop, probe = nil, false // the broker answers: the failure was the message's own
		case probe:
			probe = false
		case unavailable:
			stop, probe = errs[i], true
		}
	}
	return errs
}
