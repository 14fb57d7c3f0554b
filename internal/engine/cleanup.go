package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/store"
)

// cleanupLoop deletes processed rows older than Retention every
// CleanupInterval.
func (e *Engine) cleanupLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.CleanupInterval)
	defer t.Stop()
	for {
		n, err := e.Cleanup(ctx, e.cfg.Retention, e.cfg.CleanupBatch, nil)
		switch {
		case err != nil && ctx.Err() == nil:
			e.cfg.Logger.Warn("outbox cleanup failed", "err", e.explained(ctx, err), "deleted", n)
		case n > 0:
			e.cfg.Logger.Info("outbox cleanup", "deleted", n, "retention", e.cfg.Retention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Cleanup deletes rows processed more than olderThan ago (by the database's
// clock), batchSize rows per statement (each its own short transaction, so
// no multi-minute DELETE holds locks or bloats WAL in one go). progress, if
// set, is called after every batch with the running total. It returns how
// many rows it deleted.
func (e *Engine) Cleanup(ctx context.Context, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	return Cleanup(ctx, e.pool, e.q, olderThan, batchSize, progress)
}

// Cleanup is Engine.Cleanup without an engine, for the admin functions.
func Cleanup(ctx context.Context, pool *pgxpool.Pool, q *store.Queries, olderThan time.Duration, batchSize int, progress func(deleted int64)) (int64, error) {
	n, err := batched(ctx, pool, q.Cleanup, olderThan, batchSize, progress)
	if err != nil {
		return n, fmt.Errorf("cleanup: %w", err)
	}
	return n, nil
}

// Archive moves rows processed more than olderThan ago to the archive table
// instead of deleting them, batchSize rows per statement, each batch one
// statement (the DELETE and the archive's INSERT commit together, so a row
// is always in exactly one of the two tables). It returns how many rows it
// moved. rq is the table's store.ReplayQueries.
func Archive(ctx context.Context, pool *pgxpool.Pool, rq *store.ReplayQueries, olderThan time.Duration, batchSize int, progress func(moved int64)) (int64, error) {
	n, err := batched(ctx, pool, rq.Archive, olderThan, batchSize, progress)
	if err != nil {
		return n, fmt.Errorf("archive: %w", err)
	}
	return n, nil
}

// batched runs query ($1 age, $2 batch size) until a run touches fewer rows
// than batchSize, each run its own short transaction, so no multi-minute
// statement holds locks or bloats WAL in one go.
func batched(ctx context.Context, pool *pgxpool.Pool, query string, olderThan time.Duration, batchSize int, progress func(int64)) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, query, olderThan, batchSize)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if progress != nil {
			progress(total)
		}
		if tag.RowsAffected() < int64(batchSize) {
			return total, nil
		}
	}
}
