package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// statsLoop refreshes the gauges and looks after held events every
// StatsInterval.
func (e *Engine) statsLoop(ctx context.Context) {
	if e.cfg.StatsInterval <= 0 {
		return
	}
	t := time.NewTicker(e.cfg.StatsInterval)
	defer t.Stop()
	// Counting a large table may take longer than a claim: the
	// housekeeping statements get at least StatsInterval.
	timeout := max(e.cfg.StatementTimeout, e.cfg.StatsInterval)
	run := func(phase string, f func(context.Context) error) {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := f(sctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("outbox housekeeping failed", "phase", phase, "timed_out", timedOut(err),
				"statement_timeout", timeout, "err", err)
		}
	}
	for {
		run("held events", e.tendHeld)
		run("stuck detector", e.checkStuck)
		if e.cfg.Metrics != nil {
			run("gauges", e.refreshGauges)
			if e.ws != nil {
				run("slot gauges", e.ws.refreshGauges)
			}
		}
		e.Signals.Housekeeping.Send(struct{}{})
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tendHeld parks, in ordered mode, the events that arrived behind a failing
// event after it failed, so claims never step over them; releases events
// whose holder is gone (deleted by hand); and, when the relay is not
// ordered, releases every held event (the table was relayed in ordered mode
// before).
func (e *Engine) tendHeld(ctx context.Context) error {
	b := &pgx.Batch{}
	b.Queue(e.q.ReleaseOrphans)
	if e.cfg.Ordered {
		b.Queue(e.claimQueries().ParkLate)
	} else {
		b.Queue(e.q.ReleaseAll)
	}
	br := e.pool.SendBatch(ctx, b)
	defer br.Close()
	var released int64
	for i := range 2 {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if i == 0 || !e.cfg.Ordered {
			released += tag.RowsAffected()
		}
	}
	if released > 0 {
		e.cur.reset()
		e.cfg.Logger.Info("outbox released held events", "events", released)
	}
	return nil
}

// refreshGauges reads the table's counts in one round trip and sets the
// gauges from them.
func (e *Engine) refreshGauges(ctx context.Context) error {
	var pending, dead, held, blocked int64
	b := &pgx.Batch{}
	b.Queue(e.q.CountPending).QueryRow(func(r pgx.Row) error { return r.Scan(&pending) })
	b.Queue(e.q.CountDead).QueryRow(func(r pgx.Row) error { return r.Scan(&dead) })
	b.Queue(e.q.CountHeld).QueryRow(func(r pgx.Row) error { return r.Scan(&held) })
	var scheduled int64
	var nextDue *time.Time
	b.Queue(e.q.Scheduled).QueryRow(func(r pgx.Row) error { return r.Scan(&scheduled, &nextDue) })
	var now time.Time
	var oldest *time.Time // NULL: the first pending row's created_at is infinite
	b.Queue(store.Now).QueryRow(func(r pgx.Row) error { return r.Scan(&now) })
	b.Queue(e.q.OldestPending).QueryRow(func(r pgx.Row) error {
		if err := r.Scan(&oldest); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		return nil
	})
	if e.cfg.Ordered {
		// A WAL relay's: on a table set up for it, the table path's rows
		// are the only ones with an index by aggregate.
		b.Queue(e.claimQueries().BlockedAggregates).QueryRow(func(r pgx.Row) error { return r.Scan(&blocked) })
	}
	if err := e.pool.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	e.cfg.Metrics.Pending.Set(float64(pending))
	e.cfg.Metrics.DeadLetters.Set(float64(dead))
	e.cfg.Metrics.HeldEvents.Set(float64(held))
	e.cfg.Metrics.BlockedAggregates.Set(float64(blocked))
	e.cfg.Metrics.Scheduled.Set(float64(scheduled))
	due := 0.0
	if nextDue != nil {
		due = float64(nextDue.UnixNano()) / 1e9
	}
	e.cfg.Metrics.NextDue.Set(due)
	age := 0.0
	if oldest != nil {
		age = max(now.Sub(*oldest).Seconds(), 0)
	}
	e.cfg.Metrics.OldestPendingAge.Set(age)
	return nil
}
