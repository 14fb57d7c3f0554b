package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/dbtx"
	"github.com/pgoutbox/outbox/outboxtype"
)

// ErrNotMigrated is returned when the inbox table does not exist: run Migrate
// (or apply MigrationSQL with your migration tool).
var ErrNotMigrated = errors.New("inbox table not migrated")

// MaxConsumerLen bounds Config.Consumer.
const MaxConsumerLen = 200

// Config configures an Inbox. Zero values mean the documented defaults, except
// Consumer, which is required. New and NewSQL reject invalid values with an
// *outboxtype.ConfigError (outbox.ConfigError on the relay's side) naming
// the field.
type Config struct {
	// Schema holding the table. Empty: the connection's search_path decides.
	Schema string
	// Table is the inbox table's name. Defaults to DefaultTable
	// ("processed_events").
	Table string
	// Consumer names this consumer (say "shipping.order-created"). Rows are
	// keyed by (consumer, event_id), so consumers sharing a database and a
	// table each process every event once. Keep it stable across deploys:
	// renaming it forgets what was processed. Required.
	Consumer string
	// Logger receives debug lines about duplicates (consumer, event_id,
	// event_type, aggregate_id). Defaults to discarding them.
	Logger *slog.Logger
	// Tracer wraps each message's processing in a span:
	// inboxotel.New(tp) continues, with OpenTelemetry, the trace carried in
	// the message's traceparent header. Defaults to none: no span, and the
	// handler's ctx is the adapter's.
	Tracer Tracer
}

// Tracer wraps the processing of one message in a span. Handle calls Start
// before the inbox transaction begins, with the message as delivered (its
// Headers carry the trace context the relay sent); the transaction and the
// handler run in the context Start returns, and end is called once, with
// the outcome. Package inbox/inboxotel implements it with OpenTelemetry, so
// that this package imports no tracing library.
type Tracer interface {
	Start(ctx context.Context, consumer string, msg Message) (_ context.Context, end func(Result, error))
}

// Result is the outcome of one successful Handle.
type Result struct {
	// Duplicate is true when this consumer had already processed the event:
	// the handler was not called and nothing was written. The delivery should
	// be acknowledged like any other success.
	Duplicate bool
}

// Processor runs one delivered message through an inbox and the consumer's
// handler. Broker adapters call it and acknowledge the delivery only when it
// returns a nil error, which means the effects are committed (or were
// committed by an earlier delivery, Result.Duplicate).
type Processor func(ctx context.Context, msg Message) (Result, error)

type core struct {
	names    names
	q        queries
	consumer string
	log      *slog.Logger
	tracer   Tracer // nil: none
}

func newCore(cfg Config) (core, error) {
	n, err := newNames("Config", cfg.Schema, cfg.Table)
	if err != nil {
		return core{}, err
	}
	bad := func(format string, args ...any) error {
		return &outboxtype.ConfigError{Config: "inbox.Config", Field: "Consumer", Err: fmt.Errorf(format, args...)}
	}
	switch c := cfg.Consumer; {
	case c == "":
		return core{}, bad("must not be empty (name the consumer, e.g. \"shipping.order-created\")")
	case len(c) > MaxConsumerLen:
		return core{}, bad("%d bytes, at most %d", len(c), MaxConsumerLen)
	case !utf8.ValidString(c):
		return core{}, bad("not valid UTF-8")
	case strings.ContainsRune(c, 0):
		return core{}, bad("contains a NUL byte")
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return core{names: n, q: newQueries(n), consumer: cfg.Consumer, log: log, tracer: cfg.Tracer}, nil
}

// Inbox deduplicates deliveries for one consumer on a pgx pool. It is safe for
// concurrent use, by any number of goroutines and processes.
type Inbox struct {
	core
	pool *pgxpool.Pool
}

// New validates cfg and returns an Inbox on pool. It does not touch the
// database; run Migrate once (at deploy time) to create the table.
func New(pool *pgxpool.Pool, cfg Config) (*Inbox, error) {
	if pool == nil {
		return nil, errors.New("inbox: New: pool is nil")
	}
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	return &Inbox{core: c, pool: pool}, nil
}

// Handle runs fn for msg at most once per (consumer, event id), in one
// transaction with the record of that:
//
//  1. begin; INSERT the (consumer, event id) row, ON CONFLICT DO NOTHING;
//  2. no row inserted: the event was processed before. Roll back, do not call
//     fn, return Result{Duplicate: true} and a nil error;
//  3. otherwise call fn with the transaction, then commit.
//
// fn's error rolls everything back (the inbox row too) and is returned
// wrapped, so the delivery is redelivered and processed again; so does a
// panic, which is re-raised. A failed commit is returned likewise. A nil error
// means the effects fn wrote through tx are committed.
//
// A concurrent delivery of the same event (two instances, or a redelivery
// while the first is still running) blocks on step 1 until the first
// transaction ends, then finds the row (duplicate) or, if the first rolled
// back, processes the event itself.
//
// fn must write through tx, must not commit or roll it back, and should not
// have effects outside the database: those are not undone by a rollback and
// can repeat.
func (in *Inbox) Handle(ctx context.Context, msg Message, fn func(ctx context.Context, tx pgx.Tx) error) (Result, error) {
	if fn == nil {
		return Result{}, errors.New("inbox: Handle: fn is nil")
	}
	var tx pgx.Tx
	return in.handle(ctx, msg, func(ctx context.Context) (dbtx.Tx, error) {
		var err error
		if tx, err = in.pool.Begin(ctx); err != nil {
			return nil, err
		}
		return dbtx.PgxTx(tx), nil
	}, func(ctx context.Context) error { return fn(ctx, tx) })
}

// Processor returns a Processor that handles each message with fn, the
// message passed along, for broker adapters.
func (in *Inbox) Processor(fn func(ctx context.Context, tx pgx.Tx, msg Message) error) Processor {
	return func(ctx context.Context, msg Message) (Result, error) {
		return in.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, tx, msg) })
	}
}

// Cleanup deletes this consumer's rows processed more than olderThan ago,
// batch rows per statement (each its own short transaction), until none is
// left, and returns how many it deleted. Run it periodically.
//
// Keep rows longer than the longest time a delivery can come back: once an
// event's row is gone, a redelivery of it is processed again. That window is
// the broker's (stream or topic retention, max redelivery age, how long a
// consumer may be down and then replay, how long the outbox relay may retry a
// publish) plus a safety margin: days, not minutes.
func (in *Inbox) Cleanup(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	return in.cleanup(ctx, olderThan, batch, dbtx.Pgx(in.pool))
}

// SQLInbox is Inbox for database/sql with any PostgreSQL driver (pgx's
// stdlib, lib/pq). Its handlers get a *sql.Tx.
type SQLInbox struct {
	core
	db *sql.DB
}

// NewSQL validates cfg and returns an SQLInbox on db. It does not touch the
// database; run MigrateDB (or Migrate) once to create the table.
func NewSQL(db *sql.DB, cfg Config) (*SQLInbox, error) {
	if db == nil {
		return nil, errors.New("inbox: NewSQL: db is nil")
	}
	c, err := newCore(cfg)
	if err != nil {
		return nil, err
	}
	return &SQLInbox{core: c, db: db}, nil
}

// Handle is Inbox.Handle with a database/sql transaction; the contract is the
// same.
func (in *SQLInbox) Handle(ctx context.Context, msg Message, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	if fn == nil {
		return Result{}, errors.New("inbox: Handle: fn is nil")
	}
	var tx *sql.Tx
	return in.handle(ctx, msg, func(ctx context.Context) (dbtx.Tx, error) {
		var err error
		if tx, err = in.db.BeginTx(ctx, nil); err != nil {
			return nil, err
		}
		return dbtx.SQLTx(tx), nil
	}, func(ctx context.Context) error { return fn(ctx, tx) })
}

// Processor returns a Processor that handles each message with fn, for broker
// adapters.
func (in *SQLInbox) Processor(fn func(ctx context.Context, tx *sql.Tx, msg Message) error) Processor {
	return func(ctx context.Context, msg Message) (Result, error) {
		return in.Handle(ctx, msg, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, msg) })
	}
}

// Cleanup is Inbox.Cleanup; the same retention rule applies.
func (in *SQLInbox) Cleanup(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	return in.cleanup(ctx, olderThan, batch, dbtx.SQL(in.db))
}

// handle is Handle written once for both drivers: begin opens the
// driver's transaction, fn runs the user's handler on it.
func (c *core) handle(ctx context.Context, msg Message, begin func(context.Context) (dbtx.Tx, error), fn func(context.Context) error) (res Result, err error) {
	if msg.ID == uuid.Nil {
		return Result{}, fmt.Errorf("inbox: message has no event id: %w", ErrInvalidMessage)
	}
	if c.tracer != nil {
		var end func(Result, error)
		ctx, end = c.tracer.Start(ctx, c.consumer, msg)
		defer func() { end(res, err) }()
	}
	tx, err := begin(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("inbox: event %s: begin: %w", msg.ID, err)
	}
	// Runs on every path but a successful commit, panics included; a no-op
	// after commit. WithoutCancel: a cancelled ctx must not leave the
	// transaction open on a pooled connection.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck

	n, err := tx.Exec(ctx, c.q.record, c.consumer, msg.ID.String())
	if err != nil {
		if isUndefinedTable(err) {
			return Result{}, fmt.Errorf("inbox: table %s: %w (run inbox.Migrate): %v", c.names.QTable, ErrNotMigrated, err)
		}
		return Result{}, fmt.Errorf("inbox: event %s: record in %s: %w", msg.ID, c.names.QTable, err)
	}
	if n == 0 {
		c.log.LogAttrs(ctx, slog.LevelDebug, "inbox: duplicate skipped",
			slog.String("consumer", c.consumer), slog.String("event_id", msg.ID.String()),
			slog.String("event_type", msg.EventType), slog.String("aggregate_id", msg.AggregateID))
		return Result{Duplicate: true}, nil
	}
	if err := fn(ctx); err != nil {
		return Result{}, fmt.Errorf("inbox: event %s: handler: %w", msg.ID, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return Result{}, fmt.Errorf("inbox: event %s: commit: %w", msg.ID, err)
	}
	return Result{}, nil
}

func (c *core) cleanup(ctx context.Context, olderThan time.Duration, batch int, db dbtx.Querier) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("inbox: Cleanup: olderThan %s must be positive", olderThan)
	}
	if batch < 1 {
		return 0, fmt.Errorf("inbox: Cleanup: batch %d must be at least 1", batch)
	}
	var total int64
	for {
		n, err := db.Exec(ctx, c.q.cleanup, c.consumer, olderThan.Seconds(), batch)
		total += n
		if err != nil {
			if isUndefinedTable(err) {
				return total, fmt.Errorf("inbox: table %s: %w (run inbox.Migrate): %v", c.names.QTable, ErrNotMigrated, err)
			}
			return total, fmt.Errorf("inbox: cleanup %s: %w", c.names.QTable, err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
