package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/engine"
	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// AdminConfig names the outbox table, as in WriterConfig.
type AdminConfig struct {
	Schema string
	Table  string
}

// Admin is the operator's side of the outbox: status, dead letters, the
// article's manual retry path, cleanup. The `outbox` command is built on it;
// an application can expose the same operations on its own admin endpoints.
type Admin struct {
	pool  *pgxpool.Pool
	names ident.Names
	q     *store.Queries
}

// NewAdmin validates cfg and returns an Admin.
func NewAdmin(pool *pgxpool.Pool, cfg AdminConfig) (*Admin, error) {
	if pool == nil {
		return nil, errors.New("outbox: NewAdmin: pool is nil")
	}
	n, err := ident.New(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, configErr("AdminConfig", err)
	}
	return &Admin{pool: pool, names: n, q: store.New(n, false)}, nil
}

// Table returns the quoted, qualified outbox table name.
func (a *Admin) Table() string { return a.names.QTable }

func (a *Admin) wrap(op string, err error) error {
	if engine.IsUndefined(err) {
		return fmt.Errorf("outbox: %s: table %s: %w (run `outbox migrate`): %v", op, a.names.QTable, ErrNotMigrated, err)
	}
	return fmt.Errorf("outbox: %s: %w", op, err)
}

// TypeStatus is the state of one event type.
type TypeStatus struct {
	EventType           string        `json:"event_type"`
	Pending             int64         `json:"pending"`
	DeadLetters         int64         `json:"dead_letters"`
	Held                int64         `json:"held"`
	PublishedLastMinute int64         `json:"published_last_minute"`
	PublishedLastHour   int64         `json:"published_last_hour"`
	OldestPendingAge    time.Duration `json:"-"`
	// OldestPendingAgeSeconds is OldestPendingAge in seconds, for JSON.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
}

// Status is the state of the outbox: totals and one line per event type.
type Status struct {
	Pending          int64         `json:"pending"`
	OldestPendingAge time.Duration `json:"-"`
	// OldestPendingAgeSeconds is OldestPendingAge in seconds, for JSON.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	DeadLetters             int64   `json:"dead_letters"`
	// Held counts events parked behind an earlier failing event of their
	// aggregate (ordered mode): they go out once it is published.
	Held                int64 `json:"held"`
	PublishedLastMinute int64 `json:"published_last_minute"`
	PublishedLastHour   int64 `json:"published_last_hour"`
	// BlockedAggregates counts aggregates with a dead letter and later
	// events behind it; in ordered mode those events are held until the
	// dead letter is re-queued and published.
	BlockedAggregates int64        `json:"blocked_aggregates"`
	ByType            []TypeStatus `json:"by_type"`
}

// Status reads the outbox's state.
func (a *Admin) Status(ctx context.Context) (*Status, error) {
	var now time.Time
	if err := a.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, a.wrap("status", err)
	}
	rows, err := a.pool.Query(ctx, a.q.Status)
	if err != nil {
		return nil, a.wrap("status", err)
	}
	st := &Status{ByType: []TypeStatus{}}
	if err := a.pool.QueryRow(ctx, a.q.BlockedAggregates).Scan(&st.BlockedAggregates); err != nil {
		return nil, a.wrap("status", err)
	}
	var ts TypeStatus
	var oldest *time.Time
	_, err = pgx.ForEachRow(rows, []any{&ts.EventType, &ts.Pending, &ts.DeadLetters, &ts.Held, &ts.PublishedLastMinute, &ts.PublishedLastHour, &oldest}, func() error {
		ts.OldestPendingAge = 0
		if oldest != nil {
			ts.OldestPendingAge = max(now.Sub(*oldest), 0)
		}
		ts.OldestPendingAgeSeconds = ts.OldestPendingAge.Seconds()
		st.ByType = append(st.ByType, ts)
		st.Pending += ts.Pending
		st.DeadLetters += ts.DeadLetters
		st.Held += ts.Held
		st.PublishedLastMinute += ts.PublishedLastMinute
		st.PublishedLastHour += ts.PublishedLastHour
		st.OldestPendingAge = max(st.OldestPendingAge, ts.OldestPendingAge)
		st.OldestPendingAgeSeconds = st.OldestPendingAge.Seconds()
		return nil
	})
	if err != nil {
		return nil, a.wrap("status", err)
	}
	return st, nil
}

// DeadLetterFilter selects dead letters. Zero values select everything.
type DeadLetterFilter struct {
	EventType string        // only this event type
	OlderThan time.Duration // only events created at least this long ago
	Limit     int           // at most this many (default 100)
}

// DeadLetters lists dead letters in insertion order.
func (a *Admin) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]Record, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.OlderThan < 0 {
		return nil, fmt.Errorf("outbox: DeadLetterFilter.OlderThan: %s must not be negative", f.OlderThan)
	}
	rows, err := a.pool.Query(ctx, a.q.DeadLetters, f.EventType, f.OlderThan, f.Limit)
	if err != nil {
		return nil, a.wrap("dead letters", err)
	}
	out := []Record{}
	var r Record
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Seq, &r.AggregateType, &r.AggregateID, &r.EventType, &r.Payload,
		&r.Headers, &r.Attempts, &r.CreatedAt, &r.ProcessedAt, &r.RetryAfter, &r.DeadAt, &r.LastError}, func() error {
		out = append(out, r)
		r = Record{}
		return nil
	})
	if err != nil {
		return nil, a.wrap("dead letters", err)
	}
	return out, nil
}

// RetrySelector says which rows Retry re-queues. Exactly one of IDs, EventType
// and All must be set.
type RetrySelector struct {
	// IDs re-queues these unprocessed rows, dead letters or rows waiting for
	// their backoff.
	IDs []uuid.UUID
	// EventType re-queues every dead letter of this type.
	EventType string
	// All re-queues every dead letter.
	All bool
	// DryRun counts the rows without changing them.
	DryRun bool
}

// Retry is the article's manual retry path: it resets attempts, retry_after
// and the dead-letter mark of the selected rows, so the relay publishes them
// again at once. It returns how many rows it re-queued (or would, with DryRun).
func (a *Admin) Retry(ctx context.Context, sel RetrySelector) (int64, error) {
	set := 0
	if len(sel.IDs) > 0 {
		set++
	}
	if sel.EventType != "" {
		set++
	}
	if sel.All {
		set++
	}
	if set != 1 {
		return 0, errors.New("outbox: RetrySelector: set exactly one of IDs, EventType, All")
	}
	var (
		query string
		arg   any
	)
	if len(sel.IDs) > 0 {
		query, arg = a.q.RetryIDs, sel.IDs
		if sel.DryRun {
			query = a.q.CountRetryIDs
		}
	} else {
		query, arg = a.q.RetryDead, sel.EventType
		if sel.DryRun {
			query = a.q.CountRetryDead
		}
	}
	if sel.DryRun {
		var n int64
		if err := a.pool.QueryRow(ctx, query, arg).Scan(&n); err != nil {
			return 0, a.wrap("retry", err)
		}
		return n, nil
	}
	tag, err := a.pool.Exec(ctx, query, arg)
	if err != nil {
		return 0, a.wrap("retry", err)
	}
	return tag.RowsAffected(), nil
}

// Cleanup deletes rows processed more than olderThan ago, batchSize rows per
// statement (default 1000), calling progress with the running total after
// each batch. It returns how many rows it deleted.
func (a *Admin) Cleanup(ctx context.Context, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("outbox: Cleanup: retention %s must not be negative", olderThan)
	}
	if batchSize <= 0 {
		batchSize = DefaultCleanupBatch
	}
	n, err := engine.Cleanup(ctx, a.pool, a.q, olderThan, batchSize, progress)
	if err != nil {
		return n, a.wrap("cleanup", err)
	}
	return n, nil
}
