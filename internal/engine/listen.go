package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// listenLoop holds a dedicated connection (outside the pool, so it never
// starves the workers) LISTENing for wake-ups, reconnecting with backoff. After
// every (re)connect it wakes a worker, since notifications sent while it was
// away are lost; polling covers the rest.
func (e *Engine) listenLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := e.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := e.cfg.OutageBackoff.Delay(failures)
		e.cfg.Logger.Warn("outbox listener lost; polling until it reconnects", "err", err, "retry_in", wait)
		if !e.sleep(ctx, wait, false) {
			return
		}
	}
}

// listen connects, LISTENs and wakes a worker per notification until the
// connection fails or ctx is done.
func (e *Engine) listen(ctx context.Context) error {
	cctx, cancel := e.stmtCtx(ctx)
	conn, err := pgx.ConnectConfig(cctx, e.sessionConfig())
	cancel()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), discardTimeout)
		defer cancel()
		conn.Close(cctx)
	}()
	sctx, cancel := e.stmtCtx(ctx)
	_, err = conn.Exec(sctx, store.ListenSQL(e.cfg.Names))
	cancel()
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	e.Wake()
	for {
		// A quiet channel and a dead connection look alike: after twice
		// the statement deadline without a notification, a ping under the
		// statement deadline tells them apart.
		wctx, cancel := context.WithTimeout(ctx, 2*e.cfg.StatementTimeout)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			e.Wake()
			continue
		case ctx.Err() != nil || !timedOut(err):
			return err
		}
		sctx, cancel := e.stmtCtx(ctx)
		err = conn.Ping(sctx)
		cancel()
		if err != nil {
			return fmt.Errorf("ping after %s without a notification: %w", 2*e.cfg.StatementTimeout, err)
		}
	}
}
