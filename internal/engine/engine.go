package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// Engine runs the relay.
type Engine struct {
	cfg  Config
	q    *store.Queries
	pool *pgxpool.Pool
	wake chan struct{}
	cur  *cursor
	rate *rateMeter
	// limit is the batch size claims use: BatchSize, halved while publishes
	// are slow (see adaptLimit).
	limit atomic.Int64
	// window is how many pending rows past the floor a sparse ordered claim
	// looks for aggregate heads in, as a multiple of limit (see adaptWindow).
	window atomic.Int64
	// sparse: the last ordered batches were mostly runs of few aggregates
	// (see adaptSparse).
	sparse atomic.Bool

	alone       aloneTracker // tells a message failing alone from an outage
	outage      outageState  // the workers' shared backoff while the destination is down
	marks       outageState  // the workers' shared backoff while outcomes cannot be recorded (unrecorded.go)
	markErr     atomic.Pointer[error]
	stuck       stuckState // why nothing moves (stuck.go)
	brokerDown  atomic.Bool
	brokerErr   atomic.Pointer[error] // why, when brokerDown
	lastClaim   atomic.Int64          // when the last claim started, Unix ns
	lastRelease atomic.Int64          // when a claim last released due scheduled events, Unix ns
	pacing      atomic.Bool           // a worker paces the claims of a heavy stream
	pollDue     atomic.Int64          // when the relay's next poll is due, Unix ns (worker.go)

	// WAL source (wal.go): nil for a table source. qh are the claims of
	// the rows handed to the table path; fallback: the slot is lost and
	// the table workers claim every pending row meanwhile.
	ws       *walSource
	qh       *store.Queries
	fallback atomic.Bool

	// Signals are for tests (signals.go).
	Signals TestSignals
}

// New returns an engine; cfg must be validated by the caller.
func New(pool *pgxpool.Pool, cfg Config) *Engine {
	e := &Engine{cfg: cfg, q: store.New(cfg.Names, cfg.DeleteOnPublish), pool: pool,
		wake: make(chan struct{}, 1), cur: newCursor(cfg.RescanInterval, cfg.Ordered),
		rate: newRateMeter(cfg.BatchDelay, cfg.BatchDelayAbove)}
	e.limit.Store(int64(cfg.BatchSize))
	e.window.Store(minWindow)
	if cfg.WAL {
		e.ws = newWALSource(e)
		e.qh = e.q.HandoffOnly()
	}
	return e
}

// Run starts the workers and the housekeeping loops and blocks until ctx is
// cancelled and every batch in flight has been finished or rolled back.
func (e *Engine) Run(ctx context.Context) error {
	e.stuck.moved(time.Now()) // a relay just started has not been stuck yet
	var wg sync.WaitGroup
	for i := range e.cfg.Workers {
		wg.Go(func() { e.worker(ctx, i) })
	}
	wg.Go(func() { e.statsLoop(ctx) })
	if m := e.cfg.Metrics; m != nil {
		src := map[bool]string{false: "table", true: "wal"}[e.ws != nil]
		m.Source.WithLabelValues(src).Set(1)
	}
	if e.ws != nil {
		wg.Go(func() { e.ws.run(ctx) })
	}
	if e.cfg.Listen {
		wg.Go(func() { e.listenLoop(ctx) })
	}
	if e.cfg.Retention > 0 {
		wg.Go(func() { e.cleanupLoop(ctx) })
	}
	wg.Wait()
	return nil
}

// Wake makes an idle worker claim at once instead of waiting for the poll.
func (e *Engine) Wake() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// BrokerDown reports whether the last batch found the broker unreachable.
func (e *Engine) BrokerDown() bool { return e.brokerDown.Load() }

// BrokerErr is the error that made the last batch find the broker down,
// nil when it did not.
func (e *Engine) BrokerErr() error {
	if p := e.brokerErr.Load(); p != nil && e.brokerDown.Load() {
		return *p
	}
	return nil
}

// claimQueries are the statements the table workers claim with: only the
// rows handed to the table path when a WAL source streams the rest, or
// hands them all over (walSource.fallBack).
func (e *Engine) claimQueries() *store.Queries {
	if e.qh != nil && (!e.fallback.Load() || e.ws.handing.Load()) {
		return e.qh
	}
	return e.q
}

// ErrMissingIndex reports a table from before the latest migration.
var ErrMissingIndex = errors.New("index missing")

// ErrClientEncoding reports connections whose client_encoding is not UTF8:
// the relay would read event types and payloads in the database's encoding
// (LATIN1, say) and send them to brokers as if they were UTF-8.
var ErrClientEncoding = errors.New("client_encoding is not UTF8")

// ErrWALTable reports a table set up for the WAL source (without the
// indexes only a table source reads) under a table source.
var ErrWALTable = errors.New("set up for the WAL source")

// CheckSchema verifies that the table exists with every column and index this
// version needs.
func (e *Engine) CheckSchema(ctx context.Context) error {
	ctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	if err := e.checkEncoding(ctx); err != nil {
		return err
	}
	rows, err := e.pool.Query(ctx, e.q.CheckColumns)
	if err == nil {
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		return err
	}
	// The indexes of migrations that add no column: without them the relay
	// works, but its statements read every row they should have skipped.
	// A WAL source reads neither the ready nor the aggregate index (see
	// wal.DropTableSourceIndexes); a table source needs both.
	n := e.cfg.Names
	var want []string
	for _, name := range []func() (string, error){n.HeldIndex, n.RetryIndex, n.DeadLetterIndex} {
		idx, err := name()
		if err != nil {
			return err
		}
		want = append(want, idx)
	}
	for i := range want {
		if n.QSchema != "" {
			want[i] = n.QSchema + "." + want[i]
		}
	}
	if e.ws != nil {
		want = append(want, e.q.Cancels) // migration 9, qualified already; read by the stream only
	}
	var tableOnly []string
	if e.ws == nil {
		if tableOnly, err = wal.NamesFor(n, "").TableSourceIndexes(); err != nil {
			return err
		}
	}
	rows, err = e.pool.Query(ctx, store.MissingRelations, append(want, tableOnly...))
	if err != nil {
		return err
	}
	missing, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	if e.ws == nil && !slices.ContainsFunc(missing, func(m string) bool { return !slices.Contains(tableOnly, m) }) {
		// Only the table source's own indexes are gone: outbox migrate
		// --source wal dropped them, which the handoff index shows.
		handoff, err := n.HandoffIndex()
		if err != nil {
			return err
		}
		if n.QSchema != "" {
			handoff = n.QSchema + "." + handoff
		}
		var wal bool
		if err := e.pool.QueryRow(ctx, store.RelationExists, handoff).Scan(&wal); err != nil {
			return err
		}
		if wal {
			return fmt.Errorf("%w: %s missing", ErrWALTable, strings.Join(missing, ", "))
		}
	}
	return fmt.Errorf("%w: %s", ErrMissingIndex, strings.Join(missing, ", "))
}

// checkEncoding fails with ErrClientEncoding when the pool's connections
// do not use UTF-8.
func (e *Engine) checkEncoding(ctx context.Context) error {
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if enc := conn.Conn().PgConn().ParameterStatus("client_encoding"); enc != "UTF8" {
		return fmt.Errorf("%w: the connections use %s; add client_encoding=UTF8 to the connection string (or set ConnConfig.RuntimeParams[\"client_encoding\"])", ErrClientEncoding, enc)
	}
	return nil
}

// IsUndefined reports whether err says a table or column is missing.
func IsUndefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703")
}

// sessionConfig is a copy of the settings for a connection of the engine's
// own, outside the pool: Config.Direct's, else the pool's.
func (e *Engine) sessionConfig() *pgx.ConnConfig {
	if e.cfg.Direct != nil {
		return e.cfg.Direct.Copy()
	}
	return e.pool.Config().ConnConfig.Copy()
}
