package engine

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/store"
)

// claim is a batch of rows held for this engine until their outcomes are
// recorded: the first phase's result, which every later phase reads.
type claim struct {
	rows  []*Row
	limit int       // the batch size the claim asked for
	full  bool      // more rows are likely claimable at once: claim again without waiting
	start time.Time // when the claim began
	at    time.Time // when the rows were in hand
	lease lease
}

// lease keeps a claim's rows from every other relay until the engine
// records their outcomes or gives them back. The outbox table's lease is an
// open transaction holding the rows' locks (tableLease); the WAL source's
// is its stream's unacknowledged transactions (walLease). Engine.deliver,
// the publish, settle and record path both share, takes either as it is.
type lease interface {
	// idle reports whether a settled batch leaves nothing to record: its
	// rows go back untouched when the lease ends.
	idle(rows []*Row, s *settlement) bool
	// record writes the settled outcomes for good (mark and commit).
	record(ctx context.Context, rows []*Row, s *settlement) error
	// commit ends a lease that holds no rows.
	commit(ctx context.Context) error
	// release ends the lease: rows whose outcome was not recorded go back
	// untouched, as if never claimed. Always called, last.
	release(ctx context.Context)
}

// claimPlan is the statement one claim of the table runs, and its arguments.
type claimPlan struct {
	query    string
	limit    int
	pass     pass // where the claim starts (see cursor)
	sparse   bool // the sparse ordered claim, with window
	window   int  // sparse: how many pending rows past the floor it probes
	lowWater bool // ordered rescan: read the low-water mark first

	lowWaterQuery string
}

// planClaim picks the claim statement and its arguments for a claim
// starting now.
func (e *Engine) planClaim(now time.Time) claimPlan {
	q := e.claimQueries()
	p := claimPlan{query: q.Claim, lowWaterQuery: q.LowWater, sparse: e.cfg.Ordered && e.sparse.Load()}
	switch {
	case p.sparse:
		p.query = q.ClaimOrderedSparse
	case e.cfg.Ordered:
		p.query = q.ClaimOrdered
	}
	p.pass = e.cur.next(now)
	p.lowWater = e.cfg.Ordered && p.pass.rescan
	p.limit = int(e.limit.Load())
	if p.sparse {
		p.window = int(e.window.Load()) * p.limit
	}
	return p
}

// claim takes the next batch from the outbox table, locking its rows
// (FOR UPDATE SKIP LOCKED, so relays claim disjoint batches) in a
// transaction that the returned claim's lease holds open.
func (e *Engine) claim(ctx context.Context, start time.Time) (*claim, error) {
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	conn, err := e.pool.Acquire(sctx)
	if err != nil {
		return nil, inPhase("acquire connection", err)
	}
	l := &tableLease{e: e, conn: conn}
	if e.releaseTurn(start) {
		n, err := e.releaseDue(sctx, conn)
		if err != nil {
			l.broken = timedOut(err)
			l.release(context.WithoutCancel(ctx))
			return nil, inPhase("release scheduled", err)
		}
		if n > 0 {
			e.cur.reset() // released rows are likely below the floor
		}
	}
	p := e.planClaim(start)
	rows, more, err := l.claim(sctx, p)
	if err == nil {
		pctx, cancel := e.stmtCtx(ctx)
		var cut bool
		rows, cut, err = l.fitBudget(pctx, rows)
		cancel()
		more = more || cut
	}
	if err != nil {
		l.broken = timedOut(err)
		l.release(context.WithoutCancel(ctx))
		return nil, inPhase("claim", err)
	}
	l.claimed = len(rows)
	e.rate.observe(time.Now(), len(rows))
	full := e.tuneClaim(p, rows, more)
	if n := len(rows); n > 0 {
		last := rows[n-1].Seq // the claim returns rows in seq order
		e.cur.claimed(start, last)
		e.cur.swept(p.pass, full, last)
	} else {
		e.cur.swept(p.pass, false, 0)
	}
	return &claim{rows: rows, limit: p.limit, full: full, start: start, at: time.Now(), lease: l}, nil
}

// tableLease holds a claim of the outbox table: a pooled connection with the
// claim's transaction open on it.
type tableLease struct {
	e       *Engine
	conn    *pgxpool.Conn
	open    bool // the transaction is open: release rolls it back
	broken  bool // a statement failed: the connection is not reused
	claimed int
}

// claim opens the lease's transaction, configures it and claims, in one
// round trip.
//
// idle_in_transaction_session_timeout: if this process stalls (SIGSTOP, a
// hung broker beyond the publish timeout) PostgreSQL ends the session and
// frees the rows for another relay. synchronous_commit: the marks need no
// synchronous commit; if PostgreSQL crashes before flushing them, the rows
// come back as pending and are published again, which at-least-once
// delivery allows. Never losing an event rests on the writers' commits,
// which stay synchronous. This saves a WAL flush per batch.
func (l *tableLease) claim(ctx context.Context, p claimPlan) (rows []*Row, more bool, err error) {
	e := l.e
	b := &pgx.Batch{}
	l.begin(b)
	if p.lowWater {
		b.Queue(p.lowWaterQuery)
	}
	if p.sparse {
		b.Queue(p.query, p.limit, p.pass.floor, p.window)
	} else {
		b.Queue(p.query, p.limit, p.pass.floor)
	}
	br := l.conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			rows, more, err = nil, false, cerr
		}
	}()
	if _, err := br.Exec(); err != nil {
		return nil, false, fmt.Errorf("begin: %w", err)
	}
	l.open = true
	if _, err := br.Exec(); err != nil {
		return nil, false, err
	}
	if p.lowWater {
		var low *int64
		if err := br.QueryRow().Scan(&low); err != nil {
			return nil, false, fmt.Errorf("low water: %w", err)
		}
		// Read in the claim's transaction, before the claim: every row
		// pending then is above the new floor.
		if low != nil {
			e.cur.setLowWater(*low)
		} else {
			e.cur.setLowWater(0)
		}
	}
	q, err := br.Query()
	if err != nil {
		return nil, false, err
	}
	rows, more, err = scanRows(q, p.limit)
	if err != nil {
		return nil, false, err
	}
	return rows, more, nil
}

// idleSlack is how much longer than PublishTimeout a lease's transaction
// may sit idle before PostgreSQL ends it: the publish plus the time to
// settle and send the mark, so only a relay that vanished loses its lease.
const idleSlack = 5 * time.Second

// begin queues the start of the lease's transaction and its settings.
func (l *tableLease) begin(b *pgx.Batch) {
	idle := strconv.FormatInt((l.e.cfg.PublishTimeout + idleSlack).Milliseconds(), 10)
	b.Queue("BEGIN")
	b.Queue(store.LeaseSettings, idle)
}

func (l *tableLease) commit(ctx context.Context) error {
	ctx, cancel := l.e.stmtCtx(ctx)
	defer cancel()
	_, err := l.conn.Exec(ctx, "COMMIT")
	l.open = err != nil
	return inPhase("commit", err)
}

func (l *tableLease) release(ctx context.Context) {
	if l.open {
		rctx, cancel := l.e.stmtCtx(ctx)
		if l.conn.Conn().IsClosed() {
			// Nothing to roll back: the server ends the transaction
			// with the session.
		} else if _, err := l.conn.Exec(rctx, "ROLLBACK"); err != nil {
			if l.e.cfg.Logger != nil && timedOut(err) {
				l.e.cfg.Logger.Warn("outbox relay rollback timed out; connection discarded",
					"phase", "rollback", "statement_timeout", l.e.cfg.StatementTimeout)
			}
			// A connection we cannot roll back must not go back to the pool.
			discard(l.conn)
		}
		cancel()
		l.open = false
		if l.claimed > 0 {
			l.e.cur.reset() // the released rows may be below the floor by now
		}
	}
	if l.broken {
		discard(l.conn)
	}
	l.conn.Release()
}
