package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// deletion is a stream batch whose every outcome is "published": its rows
// are deleted, then its transactions acknowledged. Nothing reads what it
// writes, so it runs in the background (deleter), merged with the batches
// that follow it.
type deletion struct {
	ids  [][16]byte
	xids []uint32
	lsns []pglogrepl.LSN // one per settled event
}

// deleter runs deletions in the background, one statement at a time, each
// carrying every deletion queued while the previous one ran, or for
// deleteLinger. Under a light stream each batch holds a transaction or two:
// a DELETE per batch would cost a round trip per transaction and give the
// server one more transaction to log and decode for each; merged, they
// cost one per burst or per deleteLinger.
type deleter struct {
	s  *walSource
	mu sync.Mutex
	// changed is signalled when running turns false or the queue drains.
	changed *sync.Cond
	queue   []*deletion
	queued  int // ids in queue
	running bool
	flush   bool          // a barrier waits: no lingering
	kick    chan struct{} // ends a linger
	err     error         // the first failure; the stream then ends and reopens
	// conn is the deletes' own connection; used by the run goroutine,
	// closed between streams.
	conn *pgx.Conn
}

func newDeleter(s *walSource) *deleter {
	d := &deleter{s: s, kick: make(chan struct{}, 1)}
	d.changed = sync.NewCond(&d.mu)
	return d
}

// deleterMax is how many rows (in BatchSize units) may wait to be deleted:
// past it the stream waits, so a slow database slows the relay instead of
// letting unsettled work pile up.
const deleterMax = 8

// deleteLinger is how long a deletion of fewer than BatchSize rows waits for
// more before it runs. It delays only the rows' removal and the slot's
// acknowledgement, never a publish.
const deleteLinger = 10 * time.Millisecond

// add queues j, starting the background run if none is going, and waits
// while too many rows are queued. It returns the error of a deletion that
// failed since the last barrier.
func (d *deleter) add(ctx context.Context, st *wal.Stream, j *deletion) error {
	limit := deleterMax * max(d.s.e.cfg.BatchSize, 1)
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.err == nil && d.running && d.queued >= limit {
		d.changed.Wait()
	}
	if d.err != nil {
		return d.err
	}
	d.queue = append(d.queue, j)
	d.queued += len(j.ids)
	if d.queued >= max(d.s.e.cfg.BatchSize, 1) {
		d.wake()
	}
	if !d.running {
		d.running = true
		go d.run(ctx, st)
	}
	return nil
}

// wake ends a linger; with d.mu held.
func (d *deleter) wake() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// run deletes what is queued, merged, until the queue is empty.
func (d *deleter) run(ctx context.Context, st *wal.Stream) {
	linger := time.NewTimer(deleteLinger)
	defer linger.Stop()
	for {
		d.mu.Lock()
		if !d.flush && d.err == nil && d.queued < max(d.s.e.cfg.BatchSize, 1) {
			d.mu.Unlock()
			linger.Reset(deleteLinger)
			select {
			case <-linger.C:
			case <-d.kick:
			}
			d.mu.Lock()
		}
		select {
		case <-d.kick: // consumed: this run takes everything queued
		default:
		}
		jobs := d.queue
		d.queue, d.queued = nil, 0
		if len(jobs) == 0 || d.err != nil {
			d.running, d.flush = false, false
			d.changed.Broadcast()
			d.mu.Unlock()
			return
		}
		d.changed.Broadcast()
		d.mu.Unlock()
		merged := &deletion{}
		for _, j := range jobs {
			merged.ids = append(merged.ids, j.ids...)
			merged.xids = append(merged.xids, j.xids...)
			merged.lsns = append(merged.lsns, j.lsns...)
		}
		if err := d.s.delete(ctx, st, merged); err != nil {
			d.mu.Lock()
			d.err = err
			d.mu.Unlock()
		}
	}
}

// barrier waits until every queued deletion ran and returns the first
// error since the last barrier.
func (d *deleter) barrier() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.running {
		d.flush = true
		d.wake()
	}
	for d.running {
		d.changed.Wait()
	}
	err := d.err
	d.err = nil
	return err
}

// delete deletes j's rows, then acknowledges j's transactions.
func (s *walSource) delete(ctx context.Context, st *wal.Stream, j *deletion) error {
	if len(j.ids) > 0 {
		if err := s.del.deleteRows(ctx, j); err != nil {
			return err
		}
	}
	for _, l := range j.lsns {
		if err := s.settled(st, l); err != nil {
			return err
		}
	}
	return nil
}

// deleteRows deletes j's rows in one statement. The stream can hand out a
// transaction a moment before it is visible to new snapshots (see
// waitVisible), and a DELETE in that moment misses its rows: when fewer
// rows than asked are deleted, the DELETE runs again once every
// transaction of j is visible. Rows still missing then are gone already
// (cancelled, or deleted before the stream reopened).
func (d *deleter) deleteRows(ctx context.Context, j *deletion) error {
	n, err := d.exec(ctx, d.s.qd.MarkPublished, j.ids)
	if err != nil || n == int64(len(j.ids)) {
		return err
	}
	xids := make(map[uint32]bool, len(j.xids))
	for _, x := range j.xids {
		xids[x] = true
	}
	if err := d.s.waitVisible(ctx, xids); err != nil {
		return err
	}
	_, err = d.exec(ctx, d.s.qd.MarkPublished, j.ids)
	return err
}

// exec runs sql on the deleter's own connection, opened on first use with
// synchronous_commit off: if PostgreSQL loses such a commit in a crash, the
// rows come back as pending rows of events already delivered, relayed
// again at worst, which at-least-once allows. A single statement then
// commits without a transaction block, in one round trip.
func (d *deleter) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	e := d.s.e
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	if d.conn == nil {
		cfg := e.sessionConfig()
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		cfg.RuntimeParams["synchronous_commit"] = "off"
		cfg.RuntimeParams[planCacheMode] = forceCustom
		c, err := pgx.ConnectConfig(sctx, cfg)
		if err != nil {
			return 0, inPhase("connect", err)
		}
		d.conn = c
	}
	tag, err := d.conn.Exec(sctx, sql, args...)
	if err != nil {
		d.close() // a fresh connection next time
		return 0, inPhase("record", err)
	}
	return tag.RowsAffected(), nil
}

// close closes the deleter's connection; only while no run goes on.
func (d *deleter) close() {
	if d.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), discardTimeout)
	defer cancel()
	_ = d.conn.Close(ctx)
	d.conn = nil
}

// send runs b, a transaction, on a pool connection under the statement
// deadline, rolling back or discarding the connection when it fails.
func (s *walSource) send(ctx context.Context, b *pgx.Batch) error {
	e := s.e
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	conn, err := e.pool.Acquire(sctx)
	if err != nil {
		return inPhase("acquire connection", err)
	}
	defer conn.Release()
	err = conn.SendBatch(sctx, b).Close()
	if err == nil {
		return nil
	}
	if timedOut(err) {
		discard(conn)
	} else if !conn.Conn().IsClosed() {
		// A failed statement leaves the transaction aborted.
		rctx, rcancel := e.stmtCtx(ctx)
		if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			discard(conn)
		}
		rcancel()
	}
	return inPhase("record", err)
}

// record writes a stream batch's outcomes in one transaction: published
// rows deleted, failures marked (the table path retries them), parked and
// handed-over rows, dead-lettered undecodable rows.
func (s *walSource) record(ctx context.Context, p *walPlan, sets *settlement) error {
	e := s.e
	xids := map[uint32]bool{}
	for _, rs := range [][]*Row{p.send, p.handoff} {
		for _, r := range rs {
			xids[r.xid] = true
		}
	}
	for _, h := range p.holds {
		xids[h.row.xid] = true
	}
	s.lmu.Lock()
	for _, d := range p.bad {
		xids[s.xids[d.Commit]] = true
	}
	s.lmu.Unlock()
	if err := s.waitVisible(ctx, xids); err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(store.CustomPlans)
	opening := b.Len()
	if sets != nil {
		a := e.markArgsOf(p.send, sets)
		switch {
		case len(a.failIDs) > 0:
			b.Queue(s.qd.MarkOutcomes, uuids(a.okIDs), uuids(a.failIDs), a.failErrs, a.failDelays, a.failDead, a.failCount)
		case len(a.okIDs) > 0:
			b.Queue(s.qd.MarkPublished, uuids(a.okIDs))
		}
	}
	for _, h := range p.holds {
		// retry_after IS NULL: an event the table path owns already keeps
		// its place (see checkOrder).
		b.Queue(s.qs.Park, uuidArg(h.row.ID), uuidArg(h.holder))
	}
	if len(p.handoff) > 0 {
		ids := make([][16]byte, len(p.handoff))
		for i, r := range p.handoff {
			ids[i] = r.ID
		}
		b.Queue(s.qs.HandOff, uuids(ids))
	}
	for _, d := range p.bad {
		if [16]byte(d.ID) == [16]byte{} {
			e.cfg.Logger.Error("outbox WAL source: an outbox row cannot be decoded and has no readable id; it stays in the table, unrelayed: fix or delete it by hand",
				"lsn", d.LSN.String(), "err", d.Err)
			continue
		}
		b.Queue(s.qs.DeadUndecodable, uuidArg(d.ID), truncate("cannot decode the row from the WAL: "+d.Err.Error(), lastErrorMax))
		e.cfg.Logger.Error("outbox WAL source: an outbox row cannot be decoded; dead-lettered", "event_id", d.ID, "err", d.Err)
	}
	if b.Len() == opening {
		return nil // nothing to write
	}
	b.Queue("COMMIT")
	// The record updates rows one statement at a time, in commit order, while
	// the table workers and the housekeeping update rows of the same
	// aggregates: PostgreSQL may end one of them as a deadlock. The record
	// is rolled back whole, so sending it again is safe, and cheaper than
	// reopening the stream, which would offer the batch again.
	var err error
	for try := 1; try <= recordTries; try++ {
		if err = s.send(ctx, copyBatch(b)); err == nil || !isDeadlock(err) {
			break
		}
	}
	if err != nil {
		return err
	}
	if len(p.holds) > 0 || len(p.handoff) > 0 {
		e.cur.reset()
	}
	return nil
}

// recordTries is how many times a stream batch's record is sent when
// PostgreSQL ends it as a deadlock.
const recordTries = 3

// isDeadlock reports whether err is PostgreSQL's deadlock_detected.
func isDeadlock(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "40P01"
}

// copyBatch returns a fresh batch of b's statements: pgx keeps in a sent
// batch what it learnt of each statement on the connection it used, and a
// resend may get another connection.
func copyBatch(b *pgx.Batch) *pgx.Batch {
	c := &pgx.Batch{}
	for _, q := range b.QueuedQueries {
		c.Queue(q.SQL, q.Arguments...)
	}
	return c
}
