package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The stuck detector says why nothing moves: events are due, none reached
// the destination for StuckAfter, and the oldest due one has waited that
// long. Each stats round looks for the cause, most specific first: the
// destination refusing everything, batches failing, the slot not streamed,
// a transaction holding the xmin horizon. Ready reports it, the log says it
// once, and outbox_stuck is 1 until events move again.

// Stuck is the detector's verdict; the zero value is "not stuck".
type Stuck struct {
	Since     time.Time     // when the last event reached the destination (or the relay started)
	Due       int64         // events due (pending, not scheduled, retry due)
	OldestDue time.Duration // how long the oldest due event has waited
	Cause     string        // why, when known
}

func (s Stuck) Error() string {
	return fmt.Sprintf("stuck: no event delivered for %s while %d are due (the oldest for %s): %s",
		time.Since(s.Since).Round(time.Second), s.Due, s.OldestDue.Round(time.Second), s.Cause)
}

// stuckState is what the detector keeps between rounds.
type stuckState struct {
	mu       sync.Mutex
	progress time.Time // last batch that reached the destination
	failedAt time.Time // last batch that failed
	failed   error
	verdict  Stuck
}

// moved records a batch that reached the destination.
func (s *stuckState) moved(now time.Time) {
	s.mu.Lock()
	s.progress = now
	s.mu.Unlock()
}

// batchFailed records a batch (or stream) that failed.
func (s *stuckState) batchFailed(err error) {
	s.mu.Lock()
	s.failedAt, s.failed = time.Now(), err
	s.mu.Unlock()
}

// Stuck returns the detector's last verdict (the zero value when events
// move, or when none is due).
func (e *Engine) Stuck() Stuck {
	e.stuck.mu.Lock()
	defer e.stuck.mu.Unlock()
	return e.stuck.verdict
}

// checkStuck updates the verdict, once per stats round.
func (e *Engine) checkStuck(ctx context.Context) error {
	var due int64
	var oldest *time.Time
	var now time.Time
	if err := e.pool.QueryRow(ctx, e.q.Due).Scan(&due, &oldest, &now); err != nil {
		return err
	}
	st := &e.stuck
	st.mu.Lock()
	since, failedAt, failed := st.progress, st.failedAt, st.failed
	was := st.verdict
	st.mu.Unlock()
	var v Stuck
	if due > 0 && oldest != nil && now.Sub(*oldest) >= e.cfg.StuckAfter && time.Since(since) >= e.cfg.StuckAfter {
		v = Stuck{Since: since, Due: due, OldestDue: now.Sub(*oldest)}
		v.Cause = e.stuckCause(ctx, failedAt, failed)
	}
	st.mu.Lock()
	st.verdict = v
	st.mu.Unlock()
	switch {
	case v.Due > 0 && (was.Due == 0 || was.Cause != v.Cause):
		e.cfg.Logger.Error("outbox relay is stuck", "due", v.Due, "oldest_due", v.OldestDue.Round(time.Second),
			"no_delivery_for", time.Since(v.Since).Round(time.Second), "cause", v.Cause)
	case v.Due == 0 && was.Due > 0:
		e.cfg.Logger.Info("outbox relay moves again")
	}
	if m := e.cfg.Metrics; m != nil {
		val := 0.0
		if v.Due > 0 {
			val = 1
		}
		m.Stuck.Set(val)
	}
	return nil
}

// stuckCause names what holds the relay, when it can tell.
func (e *Engine) stuckCause(ctx context.Context, failedAt time.Time, failed error) string {
	if err := e.BrokerErr(); err != nil {
		return "the destination refuses every event: " + err.Error()
	}
	if failed != nil && time.Since(failedAt) < e.cfg.StuckAfter {
		return "batches fail: " + failed.Error()
	}
	if e.ws != nil {
		st := e.SourceState()
		switch {
		case st.Standby:
			return "another relay holds the slot " + st.Slot + " and does not deliver (stopped, or stuck itself)"
		case !st.Streaming && !st.Fallback:
			cause := "the slot " + st.Slot + " is not streamed"
			if st.Err != nil {
				cause += ": " + st.Err.Error()
			}
			return cause
		}
	}
	var pid int
	var app, state string
	var age time.Duration
	err := e.pool.QueryRow(ctx, e.q.OldestXmin).Scan(&pid, &app, &state, &age)
	switch {
	case err == nil && age >= e.cfg.StuckAfter:
		return fmt.Sprintf("a transaction open for %s (pid %d, application %q, %s) holds the xmin horizon", age.Round(time.Second), pid, app, state)
	case err != nil && !errors.Is(err, context.Canceled) && !isNoRows(err):
		return "unknown (looking for a long transaction failed: " + err.Error() + ")"
	}
	return "unknown: no batch failed and the destination answers; see the relay's log"
}

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }
