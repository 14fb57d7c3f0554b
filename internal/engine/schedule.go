package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// releaseBatch bounds one ReleaseDue statement; the release runs it again at
// once while it comes back full.
const releaseBatch = 10000

// Scheduled events are released as they come due by the claims themselves:
// at most once per PollInterval, a claim first runs the release statement
// on the connection it acquired (releaseDue).
//
// Why a release instead of claiming scheduled rows directly: scheduled rows
// stay out of the ready index the claims scan (deliver_at IS NULL in its
// predicate), so any number of rows waiting for a later time costs the
// claims nothing. One indexed statement reads the due end of the scheduled
// index (nothing when nothing is due) and clears deliver_at on the due rows,
// which puts them in the ready index with their original seq: in ordered
// mode they stay ahead of their aggregate's later events. Their seq is
// likely below the claim floor, so a release makes this claim a rescan from
// the start (as releasing held events does): a scheduled event is claimed
// within one PollInterval (plus the claim pace under a heavy stream) after
// it is due, never before. Why on the claim's connection: a loop of its own
// would be one more user of the pool, and while the database does not
// answer it would take the connections the workers need to recover.

// releaseTurn reports whether the claim starting at now runs the release:
// the first claim of any worker once PollInterval has passed since the last.
func (e *Engine) releaseTurn(now time.Time) bool {
	last := e.lastRelease.Load()
	if now.UnixNano()-last < int64(e.cfg.PollInterval) {
		return false
	}
	return e.lastRelease.CompareAndSwap(last, now.UnixNano())
}

// releaseDue makes every due scheduled event claimable, on conn; it returns
// how many it released.
func (e *Engine) releaseDue(ctx context.Context, conn *pgxpool.Conn) (int64, error) {
	var due bool
	if err := conn.QueryRow(ctx, e.q.AnyDue).Scan(&due); err != nil || !due {
		return 0, err
	}
	var total int64
	for ctx.Err() == nil {
		var n int64
		if err := conn.QueryRow(ctx, e.q.ReleaseDue, releaseBatch).Scan(&n); err != nil {
			return total, err
		}
		total += n
		if n < releaseBatch {
			break
		}
	}
	return total, ctx.Err()
}
