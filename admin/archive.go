package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/pgoutbox/outbox/internal/engine"
)

// DefaultArchiveBatch is how many rows one archiving statement moves.
const DefaultArchiveBatch = 1000

// Archive moves rows published more than olderThan ago from the outbox table
// to its archive table (<table>_archive, migration 5), batchSize rows per
// statement (default DefaultArchiveBatch), each batch one statement, so a
// row is always in exactly one of the two tables. progress, if set, is
// called after each batch with the running total. It returns how many rows
// it moved. Archived events stay available to Replay; the archive is never
// cleaned by pgoutbox (drop or truncate it, or delete from it, as your
// retention policy says).
func (a *Admin) Archive(ctx context.Context, olderThan time.Duration, batchSize int, progress func(moved int64)) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("admin: Archive: age %s must not be negative", olderThan)
	}
	if batchSize <= 0 {
		batchSize = DefaultArchiveBatch
	}
	rq, err := a.replayQueries()
	if err != nil {
		return 0, err
	}
	ctx, each, stop := a.boundPerBatch(ctx, progress)
	defer stop()
	n, err := engine.Archive(ctx, a.pool, rq, olderThan, batchSize, each)
	if err != nil {
		return n, a.fail(ctx, "archive", err)
	}
	return n, nil
}

// ArchivedCount counts the rows in the archive table.
func (a *Admin) ArchivedCount(ctx context.Context) (int64, error) {
	rq, err := a.replayQueries()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := a.pool.QueryRow(ctx, rq.ArchiveCount).Scan(&n); err != nil {
		return 0, a.wrap("archive count", err)
	}
	return n, nil
}
