package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgoutbox/outbox/internal/store"
	"github.com/pgoutbox/outbox/internal/wal"
)

// gather returns the next batch: the rows to offer again if the last batch
// met a destination that was down, else up to the batch size (and byte
// budget) of events, waiting for the first transaction and taking whatever
// else is decoded already. A transaction may span batches.
func (s *walSource) gather(ctx context.Context, st *wal.Stream) ([]*Row, error) {
	if len(s.again) > 0 {
		rows := s.again
		s.again = nil
		return rows, nil
	}
	if len(s.carry) == 0 && len(s.bad) == 0 {
		select {
		case <-st.Done():
			return nil, st.Err()
		default:
		}
		tx, err := st.Next(ctx)
		if err != nil {
			return nil, err
		}
		s.add(tx)
	}
	limit, budget := int(s.e.limit.Load()), s.e.cfg.MaxBatchBytes
	var rows []*Row
	bytes := 0
	for {
		for len(s.carry) > 0 && len(rows) < limit && (len(rows) == 0 || bytes+s.carry[0].bodyBytes() <= budget) {
			r := s.carry[0]
			s.carry = s.carry[1:]
			rows = append(rows, r)
			bytes += r.bodyBytes()
		}
		if len(rows) >= limit || len(s.carry) > 0 {
			break
		}
		tx, ok := st.TryNext()
		if !ok {
			break
		}
		s.add(tx)
	}
	if len(s.carry) == 0 {
		s.carry = nil // let the backing array go
	}
	return rows, nil
}

// add queues a transaction's events as rows.
func (s *walSource) add(tx *wal.Tx) {
	s.lmu.Lock()
	s.left[tx.LSN] = len(tx.Events) + len(tx.Errors)
	s.xids[tx.LSN] = tx.Xid
	s.lmu.Unlock()
	backing := make([]Row, len(tx.Events))
	for i, ev := range tx.Events {
		r := &backing[i]
		r.Message, r.stored, r.lsn, r.xid = ev, len(ev.Payload), tx.LSN, tx.Xid
		r.headerBytes = wal.Size(&r.Message) - len(ev.Payload)
		if tx.DeliverAt != nil {
			r.deliverAt = tx.DeliverAt[i]
		}
		s.carry = append(s.carry, r)
	}
	s.bad = append(s.bad, tx.Errors...)
}

// dueTime is the time scheduled rows are due against: the database's, as
// the table source's claims use (a relay's clock ahead of the database's
// would send them early). Read only when a row of the batch is scheduled.
func (s *walSource) dueTime(ctx context.Context, rows []*Row) (time.Time, error) {
	for _, r := range rows {
		if r.deliverAt.IsZero() {
			continue
		}
		var now time.Time
		sctx, cancel := s.e.stmtCtx(ctx)
		defer cancel()
		if err := s.e.pool.QueryRow(sctx, store.Now).Scan(&now); err != nil {
			return time.Time{}, inPhase("read the database's time", err)
		}
		return now, nil
	}
	return time.Time{}, nil
}

// walPlan is what one stream batch does besides publishing.
type walPlan struct {
	send    []*Row             // to publish
	skip    []*Row             // already the table path's: settled without a publish
	handoff []*Row             // scheduled for later: handed to the table path unpublished
	holds   []hold             // ordered: parked behind an earlier event of their aggregate
	bad     []*wal.DecodeError // dead-lettered by id
}

type aggKey struct{ typ, id string }

type hold struct {
	row    *Row
	holder [16]byte
}

// batch publishes one batch from the stream and settles it: published rows
// deleted, failures marked and handed to the table path, rows of a
// destination that is down kept to be offered again; then the transactions
// whose every event is settled are acknowledged. It plans the batch
// (scheduled rows, cancels, order) and hands what it sends to the path the
// table's batches take (Engine.deliver), with a walLease.
func (s *walSource) batch(ctx context.Context, st *wal.Stream, rows []*Row) (Result, error) {
	e := s.e
	start := time.Now()
	bg := context.WithoutCancel(ctx)
	p := &walPlan{}
	p.bad, s.bad = s.bad, nil
	now, err := s.dueTime(bg, rows)
	if err != nil {
		return Result{}, err
	}
	for _, r := range rows {
		if !r.deliverAt.IsZero() && r.deliverAt.After(now) {
			p.handoff = append(p.handoff, r)
			continue
		}
		p.send = append(p.send, r)
	}
	if len(p.send) > 0 {
		if err := s.dropCancelled(bg, p); err != nil {
			return Result{}, err
		}
	}
	if e.cfg.Ordered && len(p.send) > 0 {
		if err := s.checkOrder(bg, p); err != nil {
			return Result{}, err
		}
	}
	c := &claim{rows: p.send, limit: int(e.limit.Load()), start: start, at: start,
		lease: &walLease{s: s, st: st, plan: p, batch: rows}}
	defer c.lease.release(bg)
	res := Result{Claimed: len(rows)}
	if len(p.send) == 0 {
		return res, c.lease.commit(bg)
	}
	return e.deliver(ctx, bg, c, res)
}

// walLease is a stream batch's lease. The stream holds the batch's
// transactions unacknowledged until record settles them; rows of a
// destination that was down go back to the stream at release, which offers
// them again before anything newer.
type walLease struct {
	s     *walSource
	st    *wal.Stream
	plan  *walPlan
	batch []*Row // every row of the batch: sent, skipped and handed off
	again []*Row // to offer again
}

// idle is never true: even a batch the destination refused whole settles
// the rows it skipped or handed off, and acknowledges what it can.
func (l *walLease) idle([]*Row, *settlement) bool { return false }

// commit records a batch that sent nothing.
func (l *walLease) commit(ctx context.Context) error { return l.record(ctx, nil, nil) }

// release gives the rows to offer again back to the stream.
func (l *walLease) release(context.Context) {
	l.s.again = append(l.s.again, l.again...)
}

// record writes the batch's outcomes and acknowledges the transactions it
// settles whole. A batch that only published is deleted in the background,
// merged with the next ones; one that hands rows to the table path (failed,
// held, scheduled, undecodable) is written at once.
func (l *walLease) record(ctx context.Context, _ []*Row, sets *settlement) error {
	s, p := l.s, l.plan
	if sets != nil {
		l.again = s.afterPublish(p, sets)
	}
	// Every row of the batch but those offered again is settled once the
	// record commits.
	again := make(map[*Row]bool, len(l.again))
	for _, r := range l.again {
		again[r] = true
	}
	lsns := make([]pglogrepl.LSN, 0, len(l.batch)+len(p.bad))
	for _, r := range l.batch {
		if !again[r] {
			lsns = append(lsns, r.lsn)
		}
	}
	for _, d := range p.bad {
		lsns = append(lsns, d.Commit)
	}
	if len(p.holds) == 0 && len(p.handoff) == 0 && len(p.bad) == 0 && (sets == nil || sets.retried+sets.dead == 0) {
		j := &deletion{lsns: lsns}
		if sets != nil {
			for i, r := range p.send {
				if sets.outcomes[i].verdict == published {
					j.ids = append(j.ids, r.ID)
					j.xids = append(j.xids, r.xid)
				}
			}
		}
		return s.del.add(ctx, l.st, j)
	}
	// Records that hand rows to the table run after every deletion queued
	// before them, and before the next batch's order check, which reads
	// what they write.
	if err := s.del.barrier(); err != nil {
		return err
	}
	if err := s.record(ctx, p, sets); err != nil {
		return err
	}
	for _, lsn := range lsns {
		if err := s.settled(l.st, lsn); err != nil {
			return err
		}
	}
	return nil
}

// settled counts one event of the transaction at lsn as settled and
// acknowledges the transaction once all are.
func (s *walSource) settled(st *wal.Stream, lsn pglogrepl.LSN) error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	n, ok := s.left[lsn]
	if !ok {
		return fmt.Errorf("WAL source: settle an event of an unknown transaction ending at %s", lsn)
	}
	if n > 1 {
		s.left[lsn] = n - 1
		return nil
	}
	delete(s.left, lsn)
	delete(s.xids, lsn)
	return st.Ack(lsn)
}

// afterPublish sorts the rows left behind by the publish: an ordered run
// stopped at a failure is parked behind the failed event (which the table
// path now owns); rows of a destination that is down are returned, to be
// offered again.
func (s *walSource) afterPublish(p *walPlan, sets *settlement) (again []*Row) {
	failed := map[aggKey][16]byte{}
	down := map[aggKey]bool{}
	for i, r := range p.send {
		k := aggKey{r.AggregateType, r.AggregateID}
		switch sets.outcomes[i].verdict {
		case retry, dead:
			failed[k] = r.ID
		case unavailable:
			down[k] = true
			again = append(again, r)
		case untouched:
			if id, ok := failed[k]; ok && !down[k] {
				p.holds = append(p.holds, hold{row: r, holder: id})
			} else {
				down[k] = true
				again = append(again, r)
			}
		}
	}
	return again
}
