package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/metrics"
)

// Defaults for RelayConfig's zero values.
const (
	DefaultBatchSize       = 1000
	DefaultWorkers         = 2
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultMaxAttempts     = 10
	DefaultRetryBase       = time.Second
	DefaultRetryMax        = 5 * time.Minute
	DefaultOutageBase      = 250 * time.Millisecond
	DefaultOutageMax       = 15 * time.Second
	DefaultPublishTimeout  = 15 * time.Second
	DefaultStatsInterval   = 10 * time.Second
	DefaultCleanupInterval = 10 * time.Minute
	DefaultCleanupBatch    = 1000
	DefaultRescanInterval  = time.Second
	DefaultBatchDelay      = 10 * time.Millisecond
	DefaultBatchDelayAbove = 1500
)

// Backoff is an exponential backoff: the n-th wait is Base·2^(n-1), capped at
// Max, with jitter between half and all of it.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// RelayConfig configures a Relay. Every zero value means the documented
// default; NewRelay rejects invalid values with an error naming the field.
type RelayConfig struct {
	// Schema and Table name the outbox table, as in WriterConfig.
	Schema string
	Table  string

	// BatchSize is the most rows one worker claims at a time. Default 1000.
	// While a batch's publish takes more than a quarter of PublishTimeout
	// (a slow webhook endpoint, a congested broker), the relay halves the
	// size of the batches it claims, down to 1, and doubles it back towards
	// BatchSize once full batches publish quickly, so a slow destination
	// sees whole batches confirmed rather than timeouts. Memory is about
	// Workers × BatchSize × the average payload.
	BatchSize int
	// Workers is the number of concurrent claim loops in this process. Each
	// claims disjoint rows (FOR UPDATE SKIP LOCKED), as do other processes.
	// Default 2.
	Workers int
	// PollInterval is how long an idle worker waits before claiming again. A
	// worker whose batch came back full claims again at once. Default 100ms.
	PollInterval time.Duration
	// MaxAttempts is how many failed publishes make a dead letter. Default 10.
	MaxAttempts int
	// RetryBackoff spaces a failing message's retries (retry_after).
	// Default 1s doubling up to 5m.
	RetryBackoff Backoff
	// OutageBackoff spaces the relay's retries while the broker or the database
	// is unreachable. No attempt is counted during a broker outage.
	// Default 250ms doubling up to 15s.
	OutageBackoff Backoff
	// PublishTimeout bounds one batch's publish; rows not confirmed by then are
	// released (and, if nothing in the batch was confirmed, the broker is
	// considered unavailable). It also sets the session's
	// idle_in_transaction_session_timeout (plus 5s), so a stalled relay's locks
	// are freed. Default 15s.
	PublishTimeout time.Duration

	// DeleteOnPublish deletes a row once the broker confirmed it, instead of
	// setting processed_at. It is the fastest way to drain (a DELETE writes
	// less than an UPDATE, and nothing is left to clean up) at the cost of
	// history: `outbox status` then shows no published counts, and processed
	// rows are not there to audit. Dead letters stay either way.
	DeleteOnPublish bool

	// Ordered enables per-aggregate ordering: events of one aggregate
	// (aggregate_type + aggregate_id) reach the broker in insertion order
	// (seq), whatever the number of workers and processes, retries and
	// crashes. The relay then claims an event only when every earlier event
	// of its aggregate was processed, so a failing event holds back its own
	// aggregate only; a dead letter holds its aggregate until an operator
	// re-queues it (see outbox_blocked_aggregates). Off by default: events
	// of different aggregates are unaffected either way, but without it a
	// retried event can be overtaken by its successors.
	Ordered bool

	// Listen makes the relay LISTEN, on a dedicated connection, for the
	// wake-ups a Notifier sends after the application commits, so events are
	// relayed within milliseconds instead of at the next poll. Polling stays
	// the fallback (a lost notification costs at most PollInterval); the
	// listener reconnects by itself. Off by default: it needs one extra
	// connection per relay.
	Listen bool

	// Retention enables the cleanup loop: processed rows older than this are
	// deleted every CleanupInterval (default 10m), CleanupBatch rows (default
	// 1000) per statement. Zero keeps processed rows forever.
	Retention       time.Duration
	CleanupInterval time.Duration
	CleanupBatch    int

	// Logger receives structured logs (event_id, event_type, aggregate_id,
	// attempt on every line about an event). Payloads are never logged.
	// Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the relay's Prometheus metrics
	// (outbox_events_published_total, outbox_events_failed_total,
	// outbox_events_pending, outbox_batch_duration_seconds, ...).
	Registerer prometheus.Registerer
	// MetricLabels are constant labels added to every metric.
	MetricLabels prometheus.Labels
	// TracerProvider creates the relay's producer spans (one per message,
	// child of the span that wrote the event). Default: the OpenTelemetry
	// global provider, a no-op unless the application installed one.
	TracerProvider trace.TracerProvider
	// StatsInterval is how often the pending and dead-letter gauges are
	// refreshed from the table. Default 10s.
	StatsInterval time.Duration
	// RescanInterval is how often one claim scans the pending rows from the
	// start of the table. Between rescans claims start just past the rows
	// the relay already processed, so they do not step over the index
	// entries those rows leave until VACUUM (which made a claim after a
	// million-event drain 30x slower). What the rescan picks up: an event
	// whose transaction committed long after its INSERT (more than a quarter
	// of RescanInterval), a retry that came due, rows another relay released
	// when its batch failed. Each waits at most RescanInterval longer than
	// without this. Default 1s.
	RescanInterval time.Duration

	// BatchDelay and BatchDelayAbove trade latency for the writers'
	// throughput under a heavy stream. While events arrive at up to
	// BatchDelayAbove per second, a worker woken by a notification or Wake
	// claims at once. Above that the relay stops following wake-ups and
	// paces its claims: one worker claims every BatchDelay (rising to it
	// between that rate and twice it), so each claim carries more events.
	// A claim costs about the same for 3 events or 300, and on a busy
	// database that cost is taken from the application's transactions.
	// Defaults 10ms and 1500 events/s; a negative BatchDelay never paces. A
	// backlog (full batches) is always claimed back to back.
	BatchDelay      time.Duration
	BatchDelayAbove int
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
	m, err := metrics.New(cfg.Registerer, cfg.MetricLabels)
	if err != nil {
		return nil, fmt.Errorf("outbox: RelayConfig.Registerer: %w", err)
	}
	ec.Metrics = m
	r := &Relay{pool: pool, pub: pub, names: ec.Names, metrics: m, tracer: newRelayTracer(cfg.TracerProvider), cfg: ec}
	ec.Publish = r.publishRows
	ec.Classify = func(err error) engine.Class { return engine.Class(Classify(err)) }
	ec.IsTimeout = isTimeout
	ec.RequestedDelay = RequestedDelay
	r.eng = engine.New(pool, ec)
	return r, nil
}

func (cfg RelayConfig) engineConfig() (engine.Config, error) {
	bad := func(field, format string, args ...any) (engine.Config, error) {
		return engine.Config{}, fmt.Errorf("outbox: RelayConfig.%s: %s", field, fmt.Sprintf(format, args...))
	}
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return engine.Config{}, fmt.Errorf("outbox: RelayConfig.%w", err)
	}
	def := func(v, d time.Duration) time.Duration {
		if v == 0 {
			return d
		}
		return v
	}
	defInt := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	ec := engine.Config{
		Names:           n,
		BatchSize:       defInt(cfg.BatchSize, DefaultBatchSize),
		Workers:         defInt(cfg.Workers, DefaultWorkers),
		PollInterval:    def(cfg.PollInterval, DefaultPollInterval),
		MaxAttempts:     defInt(cfg.MaxAttempts, DefaultMaxAttempts),
		RetryBackoff:    engine.Backoff{Base: def(cfg.RetryBackoff.Base, DefaultRetryBase), Max: def(cfg.RetryBackoff.Max, DefaultRetryMax)},
		OutageBackoff:   engine.Backoff{Base: def(cfg.OutageBackoff.Base, DefaultOutageBase), Max: def(cfg.OutageBackoff.Max, DefaultOutageMax)},
		PublishTimeout:  def(cfg.PublishTimeout, DefaultPublishTimeout),
		StatsInterval:   def(cfg.StatsInterval, DefaultStatsInterval),
		RescanInterval:  def(cfg.RescanInterval, DefaultRescanInterval),
		BatchDelay:      max(def(cfg.BatchDelay, DefaultBatchDelay), 0),
		BatchDelayAbove: defInt(cfg.BatchDelayAbove, DefaultBatchDelayAbove),
		Retention:       cfg.Retention,
		CleanupInterval: def(cfg.CleanupInterval, DefaultCleanupInterval),
		CleanupBatch:    defInt(cfg.CleanupBatch, DefaultCleanupBatch),
		Listen:          cfg.Listen,
		Ordered:         cfg.Ordered,
		DeleteOnPublish: cfg.DeleteOnPublish,
		Logger:          cfg.Logger,
	}
	if ec.Logger == nil {
		ec.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case ec.BatchSize < 1 || ec.BatchSize > 10000:
		return bad("BatchSize", "%d: must be between 1 and 10000", cfg.BatchSize)
	case ec.Workers < 1 || ec.Workers > 256:
		return bad("Workers", "%d: must be between 1 and 256", cfg.Workers)
	case ec.PollInterval < time.Millisecond:
		return bad("PollInterval", "%s: must be at least 1ms", cfg.PollInterval)
	case ec.MaxAttempts < 1:
		return bad("MaxAttempts", "%d: must be at least 1", cfg.MaxAttempts)
	case ec.RetryBackoff.Base <= 0 || ec.RetryBackoff.Max < ec.RetryBackoff.Base:
		return bad("RetryBackoff", "base %s, max %s: need 0 < base <= max", ec.RetryBackoff.Base, ec.RetryBackoff.Max)
	case ec.OutageBackoff.Base <= 0 || ec.OutageBackoff.Max < ec.OutageBackoff.Base:
		return bad("OutageBackoff", "base %s, max %s: need 0 < base <= max", ec.OutageBackoff.Base, ec.OutageBackoff.Max)
	case ec.PublishTimeout < 10*time.Millisecond:
		return bad("PublishTimeout", "%s: must be at least 10ms", cfg.PublishTimeout)
	case ec.RescanInterval < time.Millisecond:
		return bad("RescanInterval", "%s: must be at least 1ms", cfg.RescanInterval)
	case ec.BatchDelay > ec.PublishTimeout:
		return bad("BatchDelay", "%s: must not exceed PublishTimeout (%s)", cfg.BatchDelay, ec.PublishTimeout)
	case ec.BatchDelayAbove < 1:
		return bad("BatchDelayAbove", "%d: must be at least 1 event/s", cfg.BatchDelayAbove)
	case ec.StatsInterval < 0:
		return bad("StatsInterval", "%s: must not be negative", cfg.StatsInterval)
	case cfg.Retention < 0:
		return bad("Retention", "%s: must not be negative", cfg.Retention)
	case ec.CleanupInterval <= 0:
		return bad("CleanupInterval", "%s: must be positive", cfg.CleanupInterval)
	case ec.CleanupBatch < 1:
		return bad("CleanupBatch", "%d: must be at least 1", cfg.CleanupBatch)
	}
	return ec, nil
}

// Run relays events until ctx is cancelled, then finishes the batches in
// flight (bounded by PublishTimeout) and returns nil. It first checks that the
// table is migrated and returns an error wrapping ErrNotMigrated if not.
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
			return r.eng.Run(ctx)
		case errors.Is(err, ErrNotMigrated):
			return err
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
// is missing or lacks a column this version of pgoutbox needs.
func (r *Relay) CheckSchema(ctx context.Context) error {
	err := r.eng.CheckSchema(ctx)
	switch {
	case err == nil:
		return nil
	case engine.IsUndefined(err), errors.Is(err, engine.ErrMissingIndex):
		return fmt.Errorf("outbox: table %s: %w (run `outbox migrate` or outbox.Migrate): %v", r.names.QTable, ErrNotMigrated, err)
	default:
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
	if r.eng.BrokerDown() {
		return errors.New("broker: unavailable on the last batch")
	}
	if hc, ok := r.pub.(HealthChecker); ok {
		if err := hc.Health(ctx); err != nil {
			return fmt.Errorf("broker: %w", err)
		}
	}
	return nil
}

func (r *Relay) publishRows(ctx context.Context, rows []*engine.Row) []error {
	msgs := make([]*Message, len(rows))
	for i, row := range rows {
		msgs[i] = &Message{
			ID: row.ID, Seq: row.Seq, AggregateType: row.AggregateType, AggregateID: row.AggregateID,
			EventType: row.EventType, Payload: row.Payload, Headers: row.Headers,
			CreatedAt: row.CreatedAt, Attempt: row.Attempts + 1,
		}
	}
	spans := r.tracer.start(ctx, r.pub, msgs)
	errs := r.publishMessages(ctx, msgs)
	if len(errs) == len(msgs) {
		endSpans(spans, errs)
	} else {
		endSpans(spans, make([]error, len(msgs)))
	}
	return errs
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
	var stop error // once the broker is unreachable, the rest of the batch waits
	for i, m := range msgs {
		if stop == nil {
			stop = ctx.Err()
		}
		if stop != nil {
			errs[i] = stop
			continue
		}
		errs[i] = r.pub.Publish(ctx, m)
		if errs[i] != nil && Classify(errs[i]) == ClassUnavailable {
			stop = errs[i]
		}
	}
	return errs
}
