package wal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// setupPoll is how often WithSetupLock tries the lock while another
// process holds it.
const setupPoll = 100 * time.Millisecond

// WithSetupLock runs fn on one connection of pool while it holds the
// session-level advisory lock of the table's WAL setup, so that several
// processes setting the table up or tearing it down at once (outbox migrate
// --source wal, drop-wal, run by every replica) take turns: concurrent
// CREATE INDEX of one name collide, and a concurrent build would look like
// an invalid leftover to drop. The lock is tried, not waited for: a session
// waiting in pg_advisory_lock holds a snapshot, which the holder's
// CONCURRENTLY statements would wait for in turn.
func WithSetupLock(ctx context.Context, pool *pgxpool.Pool, n Names, fn func(DB) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("WAL source: %w", err)
	}
	defer conn.Release()
	const try, unlock = `SELECT pg_try_advisory_lock(hashtext('pgoutbox setup ' || $1))`,
		`SELECT pg_advisory_unlock(hashtext('pgoutbox setup ' || $1))`
	for {
		var got bool
		if err := conn.QueryRow(ctx, try, n.Slot).Scan(&got); err != nil {
			return fmt.Errorf("WAL source: setup lock: %w", err)
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("WAL source: setup lock: another process is setting %s up: %w", n.Table.QTable, ctx.Err())
		case <-time.After(setupPoll):
		}
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), unlock, n.Slot); err != nil {
			// A session lock must not go back to the pool with its conn.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return fn(conn)
}
