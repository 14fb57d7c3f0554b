package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
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
	conn, err := pgx.ConnectConfig(ctx, e.pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+ident.Quote(e.cfg.Names.Channel)); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	e.Wake()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		e.Wake()
	}
}
