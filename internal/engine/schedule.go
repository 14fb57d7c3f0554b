package engine

import (
	"context"
	"time"
)

// releaseBatch bounds one ReleaseDue statement; the loop runs it again at
// once while it comes back full.
const releaseBatch = 10000

// scheduleLoop releases scheduled events as they come due, every
// PollInterval.
//
// Why a release instead of claiming scheduled rows directly: scheduled rows
// stay out of the ready index the claims scan (deliver_at IS NULL in its
// predicate), so any number of rows waiting for a later time costs the
// claims nothing. Every PollInterval one indexed statement reads the due end
// of the scheduled index (nothing when nothing is due) and clears deliver_at
// on the due rows, which puts them in the ready index with their original
// seq: in ordered mode they stay ahead of their aggregate's later events.
// Their seq is likely below the claim floor, so a release makes the next
// claim a rescan from the start (as releasing held events does) and wakes a
// worker: a scheduled event is claimed within one PollInterval (plus the
// claim pace under a heavy stream) after it is due, never before.
func (e *Engine) scheduleLoop(ctx context.Context) {
	if e.cfg.PollInterval <= 0 {
		return
	}
	t := time.NewTicker(e.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := e.releaseDue(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("outbox release of scheduled events failed", "phase", "release scheduled",
				"timed_out", timedOut(err), "statement_timeout", e.cfg.StatementTimeout, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// releaseDue makes every due scheduled event claimable.
func (e *Engine) releaseDue(ctx context.Context) error {
	var total int64
	for ctx.Err() == nil {
		sctx, cancel := e.stmtCtx(ctx)
		var n int64
		err := e.pool.QueryRow(sctx, e.q.ReleaseDue, releaseBatch).Scan(&n)
		cancel()
		if err != nil {
			return err
		}
		total += n
		if n < releaseBatch {
			break
		}
	}
	if total > 0 {
		e.cur.reset()
		e.Wake()
	}
	return nil
}
