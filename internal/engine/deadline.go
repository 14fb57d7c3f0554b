package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every statement the engine runs has a deadline (StatementTimeout): a
// connection whose peer stopped answering (a frozen network path, a
// half-dead server) would otherwise hold its worker until the kernel gives
// up on the socket, many minutes later. A lease's transaction spans the
// publish, so the deadline is per statement (claim, mark and commit,
// rollback), not per lease.
//
// pgx closes a connection whose query was interrupted by its context, and
// the pool destroys a closed connection when it is released; discard makes
// sure of it for the paths where pgx might not, so a connection that missed
// a deadline never serves another statement.

// stmtCtx is ctx bounded by the statement deadline.
func (e *Engine) stmtCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.cfg.StatementTimeout)
}

// ddlFloor is the least time a slow statement gets: DDL and replication
// setup (creating a slot waits for every open write transaction, a
// partition is read whole), which take longer than a claim and must not be
// cut by a StatementTimeout tuned for claims.
const ddlFloor = 30 * time.Second

// ddlCtx is ctx bounded by the deadline of a slow statement: the statement
// deadline, and at least ddlFloor.
func (e *Engine) ddlCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(e.cfg.StatementTimeout, ddlFloor))
}

// stmtError is a statement's failure with the phase that ran it, for the
// worker's log line.
type stmtError struct {
	phase string // "claim", "mark", "commit", ...
	err   error
}

func (s *stmtError) Error() string { return s.phase + ": " + s.err.Error() }
func (s *stmtError) Unwrap() error { return s.err }

// inPhase wraps err, if any, with the phase that ran the statement.
func inPhase(phase string, err error) error {
	if err == nil {
		return nil
	}
	return &stmtError{phase: phase, err: err}
}

// phaseOf is the phase err was returned by, "" if unknown.
func phaseOf(err error) string {
	var s *stmtError
	if errors.As(err, &s) {
		return s.phase
	}
	return ""
}

// timedOut reports whether err is a statement that ran past its deadline
// (or a network timeout) rather than an answer from the server.
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}

// discardTimeout bounds closing a connection that stopped answering: the
// goodbye message goes into the socket's buffer and nobody waits for a reply.
const discardTimeout = time.Second

// discard closes conn so that releasing it destroys it instead of returning
// it to the pool.
func discard(conn *pgxpool.Conn) {
	if conn.Conn().IsClosed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	_ = conn.Conn().Close(ctx)
}
