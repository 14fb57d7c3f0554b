package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// lastErrorMax bounds the last_error a failure records.
const lastErrorMax = 2000

// markArgs are the arrays of the mark statement, rows in batch order.
type markArgs struct {
	okIDs      [][16]byte // [16]byte: pgx's native uuid encoding
	releaseIDs [][16]byte // published events that may hold later ones (ordered mode)
	failIDs    [][16]byte
	failErrs   []string
	failDelays []int64 // ms
	failDead   []bool
	failCount  []bool     // the attempt was counted at fetch (poison.go)
	refundIDs  [][16]byte // counted at fetch, and did not fail
}

// markArgsOf lays out a settlement as the mark statement takes it.
func (e *Engine) markArgsOf(rows []*Row, s *settlement) markArgs {
	a := markArgs{okIDs: make([][16]byte, 0, len(rows))}
	for i, r := range rows {
		switch o := s.outcomes[i]; o.verdict {
		case published:
			a.okIDs = append(a.okIDs, r.ID)
			if r.counted {
				a.refundIDs = append(a.refundIDs, r.ID) // attempts counts failures
			}
			// With a WAL source every row the table workers publish was
			// handed over, and may hold later events of its aggregate.
			if e.cfg.Ordered && (r.Failed || r.Attempt > 1 || e.cfg.WAL) {
				a.releaseIDs = append(a.releaseIDs, r.ID)
			}
		case retry, dead:
			a.failIDs = append(a.failIDs, r.ID)
			a.failErrs = append(a.failErrs, truncate(o.err.Error(), lastErrorMax))
			a.failDelays = append(a.failDelays, o.delay.Milliseconds())
			a.failDead = append(a.failDead, o.verdict == dead)
			a.failCount = append(a.failCount, r.counted || o.free) // counted already, or not to count
			if o.free && r.counted {
				a.refundIDs = append(a.refundIDs, r.ID)
			}
		default:
			if r.counted {
				a.refundIDs = append(a.refundIDs, r.ID)
			}
		}
	}
	return a
}

// idle: a batch that published nothing, failed nothing and counted no
// attempt at fetch has nothing to write; its rows go back untouched.
func (l *tableLease) idle(rows []*Row, s *settlement) bool {
	return s.published+s.retried+s.dead == 0 && !anyCounted(rows)
}

// record writes a batch's outcomes (mark), and when the table refuses them
// after the destination confirmed events, counts those and backs the
// workers off (unrecorded).
func (l *tableLease) record(ctx context.Context, rows []*Row, s *settlement) error {
	if err := l.mark(ctx, rows, s); err != nil {
		return l.e.unrecorded(s, err)
	}
	return nil
}

// mark writes a batch's outcomes in one statement and commits, in one
// round trip. Rows left untouched (not tried, destination down) are not in
// the statement: they come back as they were when the lease ends.
func (l *tableLease) mark(ctx context.Context, rows []*Row, s *settlement) error {
	e := l.e
	a := e.markArgsOf(rows, s)
	mark := &pgx.Batch{}
	ordered := e.cfg.Ordered && (len(a.failIDs) > 0 || len(a.releaseIDs) > 0)
	if !ordered {
		// Not MarkOrdered: its sub-statements update the same table, and
		// what it does may depend on its plan, so it keeps the cached plan
		// it is tested with.
		mark.Queue(store.CustomPlans)
	}
	switch {
	case ordered:
		mark.Queue(e.claimQueries().MarkOrdered, uuids(a.okIDs), uuids(a.failIDs), a.failErrs, a.failDelays, a.failDead, a.failCount, uuids(a.releaseIDs))
	case len(a.failIDs) == 0:
		mark.Queue(e.q.MarkPublished, uuids(a.okIDs))
	default:
		mark.Queue(e.q.MarkOutcomes, uuids(a.okIDs), uuids(a.failIDs), a.failErrs, a.failDelays, a.failDead, a.failCount)
	}
	if len(a.refundIDs) > 0 {
		mark.Queue(e.q.Refund, uuids(a.refundIDs))
	}
	mark.Queue("COMMIT")
	ctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	mr := l.conn.SendBatch(ctx, mark)
	var (
		released int64
		err      error
	)
	if ordered {
		err = mr.QueryRow().Scan(&released)
	} else if _, err = mr.Exec(); err == nil { // store.CustomPlans, then the mark
		_, err = mr.Exec()
	}
	if err != nil {
		mr.Close()
		l.broken = timedOut(err)
		return inPhase("mark", fmt.Errorf("%d event(s): %w", len(rows)-s.unavailable, err))
	}
	if err == nil && len(a.refundIDs) > 0 {
		_, err = mr.Exec()
	}
	if err == nil {
		_, err = mr.Exec()
	}
	if cerr := mr.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		l.broken = timedOut(err)
		return inPhase("commit marks", err)
	}
	l.open = false
	if released > 0 {
		// Released events are below the floor: find them now, not at the
		// next rescan.
		e.cur.reset()
	}
	return nil
}

// observe updates the metrics of a recorded batch and logs its published
// events at debug level.
func (e *Engine) observe(ctx context.Context, c *claim, s *settlement, ackedAt time.Time) {
	if m := e.cfg.Metrics; m != nil {
		for i, r := range c.rows {
			if s.outcomes[i].verdict == published {
				m.ObservePublished(r.EventType, r.CreatedAt, ackedAt)
			}
		}
		if s.published > 0 {
			m.LastPublish.Set(float64(ackedAt.UnixNano()) / 1e9)
		}
		m.BatchDuration.Observe(time.Since(c.start).Seconds())
	}
	if e.cfg.Logger.Enabled(ctx, slog.LevelDebug) {
		for i, r := range c.rows {
			if s.outcomes[i].verdict == published {
				e.cfg.Logger.Debug("event published", "event_id", r.ID, "event_type", r.EventType,
					"aggregate_id", r.AggregateID, "attempt", r.Attempt)
			}
		}
	}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
