package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/metrics"
	"github.com/pgoutbox/outbox/outboxtype"
)

// Config is the engine's configuration. outbox.RelayConfig documents each
// setting, fills in its default and validates it: the engine takes every
// field as given and has no defaults of its own.
type Config struct {
	Names     ident.Names
	BatchSize int
	// MaxBatchBytes is the byte budget of a batch's payloads: a claim
	// keeps rows, in seq order, until their payloads pass it (at least one;
	// see payload.go).
	MaxBatchBytes  int
	Workers        int
	PollInterval   time.Duration
	MaxAttempts    int
	RetryBackoff   outboxtype.Backoff
	OutageBackoff  outboxtype.Backoff
	PublishTimeout time.Duration
	// StatementTimeout bounds every statement the engine runs (see
	// deadline.go); housekeeping statements get at least StatsInterval.
	StatementTimeout time.Duration
	StatsInterval    time.Duration // 0: no gauges and no held-event housekeeping
	RescanInterval   time.Duration // how often a claim scans the ready index from its start
	BatchDelay       time.Duration // claim (WAL source: read) pace under a heavy stream (0: always follow wake-ups)
	BatchDelayAbove  int           // events/s (WAL source: transactions/s) above which claims (reads) are paced

	Retention       time.Duration // 0: no cleanup loop
	CleanupInterval time.Duration
	CleanupBatch    int

	// DeleteOnPublish deletes published rows instead of marking them.
	DeleteOnPublish bool

	// Ordered claims only the earliest unprocessed event of each aggregate.
	Ordered bool

	// Listen makes the engine LISTEN on Names.Channel on a dedicated
	// connection and wake a worker on every notification.
	Listen bool

	// WAL streams events from the table's logical replication slot
	// (wal.go); the table workers then claim only the rows the stream
	// handed over (retry_after set), unless the stream fell back.
	WAL bool
	// RotateEvents and RotateInterval: when the relay streaming a
	// partitioned table moves new events to a new partition
	// (walpartition.go).
	RotateEvents   int64
	RotateInterval time.Duration
	// StuckAfter: events due and none delivered for this long make the
	// relay stuck (stuck.go).
	StuckAfter time.Duration
	// SenderTimeout is the stream's wal_sender_timeout.
	SenderTimeout time.Duration
	// Direct, when set, is the connection for what needs a session of its
	// own (the listener, the stream, the stream's deleter) instead of the
	// pool's: PostgreSQL itself when the pool goes through a pooler.
	Direct *pgx.ConnConfig

	Logger  *slog.Logger
	Metrics *metrics.Metrics // nil: no metrics

	// Publish sends rows to the destination and returns one classified
	// Attempt per row, at the row's index (a nil slice: all confirmed). It is
	// the one call from the engine back into the root package, which owns
	// the publishers, tracing and the classification of errors.
	Publish func(ctx context.Context, rows []*Row) []Attempt
}

// Row is one claimed outbox row: the Message a publisher receives, and what
// the engine needs besides to settle it.
type Row struct {
	outboxtype.Message

	Failed   bool // a failure was recorded (last_error): it may hold later events
	Follower bool // ordered mode: claimed as part of the run after its aggregate's head

	// Bad says why the row cannot be published as stored (headers that are
	// not a JSON object of strings, written by hand): it is dead-lettered
	// without a publish, and the rest of the batch goes on.
	Bad error

	stored int // payload and headers' size as stored (pg_column_size); Payload is nil if over store.InlinePayloadMax
	// headerBytes is the headers column's size as read: with the payload,
	// what the batch's byte budget counts.
	headerBytes int
	counted     bool // the attempt was counted when the row was fetched (poison.go)

	// WAL source (wal.go): the transaction the row came in, and its
	// deliver_at if it was scheduled.
	lsn       pglogrepl.LSN
	xid       uint32
	deliverAt time.Time
}

// Attempt is how one publish of a row ended.
type Attempt struct {
	Err        error                 // nil: the destination confirmed the row
	Class      outboxtype.ErrorClass // what Err means for the row
	Timeout    bool                  // Err is the publish running out of time
	RetryAfter time.Duration         // the wait Err asks for (Retry-After); 0: none
}
