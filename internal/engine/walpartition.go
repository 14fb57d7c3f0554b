package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/wal"
)

// A partitioned table's partitions are rotated by the relay streaming its
// slot, and only while it streams: it is the one that knows how far the
// slot is (see internal/wal/partition.go for the steps and why each is
// safe).

const (
	// rotateTick is how often the streaming relay looks at the partitions.
	rotateTick = time.Second
	// retireGrace: a partition is retired no sooner than this after the
	// relay saw it stop being current, so that a statement that took its
	// seq just before the rotation has routed its row there (and holds the
	// partition's lock, which the retirement waits for) by then.
	retireGrace = 2 * time.Second
	// compactLockWait bounds the wait for a partition's lock to compact it;
	// the relay's statements on the table queue behind the request.
	compactLockWait = time.Second
	// detachTimeout bounds a DETACH ... CONCURRENTLY, which waits for every
	// transaction using the table; cut short, it is finished next time.
	detachTimeout = time.Minute
	// warnEvery spaces out the warnings of a rotation that keeps waiting.
	warnEvery = time.Minute
	// compactRecheck: how often a partition kept for failed events is
	// looked at again (at most; RotateInterval when shorter).
	compactRecheck = 30 * time.Second
	// maxPartitions: no rotation while this many partitions are attached.
	// Every statement on the table that cannot prune by seq (the
	// deletions by id, the claims, ordered mode's look-ups) plans and
	// probes each partition: a stream that falls behind (a broker outage,
	// failing publishes) must not multiply them while it cannot drop any.
	// New events stay in the current partition meanwhile.
	maxPartitions = 8
)

// rotation is what the streaming relay remembers of the partitions.
type rotation struct {
	cur   int64     // the current partition's number
	since time.Time // when this relay saw it become current
	old   map[uint32]*retiring
	off   bool // not partitioned, or the role may not rotate
	// next is a partition attached and not yet current: new events go
	// there once the statements that were running when it was attached,
	// whose routing does not know it, have ended (wal.Advance).
	next      *wal.Partition
	nextWait  []string
	nextSince time.Time
	capped    time.Time // last warning that maxPartitions holds a rotation back
}

// retiring is one old partition on its way out.
type retiring struct {
	seen    time.Time     // when it stopped being current
	lockers []string      // the transactions that held its lock then
	fenced  bool          // they have all ended
	lsn     pglogrepl.LSN // the WAL position once they had
	next    time.Time     // events still on the table path: look again then
	waiting time.Time     // when those events were first seen
	compact bool          // compacted to them already
}

// rotatePartitions rotates and retires the table's partitions every
// rotateTick until ctx ends, or at once if the table is not partitioned.
func (s *walSource) rotatePartitions(ctx context.Context) {
	r := &rotation{cur: -1, old: map[uint32]*retiring{}}
	t := time.NewTicker(rotateTick)
	defer t.Stop()
	for {
		err := s.rotateOnce(ctx, r)
		if err != nil && ctx.Err() == nil {
			s.e.cfg.Logger.Warn("outbox partitions: rotation failed; trying again", "err", err)
		}
		s.e.Signals.Rotation.Send(err)
		if r.off {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *walSource) rotateOnce(ctx context.Context, r *rotation) error {
	e := s.e
	sctx, cancel := e.stmtCtx(ctx)
	p, err := wal.ReadPartitions(sctx, e.pool, s.slot())
	cancel()
	if err != nil {
		return err
	}
	if !p.Partitioned {
		r.off = true
		return nil
	}
	if m := e.cfg.Metrics; m != nil {
		m.Partitions.Set(float64(len(p.Range)))
	}
	for _, d := range p.Detached {
		if err := s.dropDetached(ctx, d); err != nil {
			return err
		}
	}
	now := time.Now()
	cur := p.Current()
	switch {
	case cur == nil:
		// No partition takes the next event: the sequence passed the last
		// one (or was set by hand). Inserts fail until one does.
		k := max(p.Next, 0) / ident.PartitionWidth
		e.cfg.Logger.Error("outbox partitions: no partition holds the next seq; attaching one", "seq", p.Next, "partition", k)
		return s.rotateTo(ctx, r, k, now)
	case cur.K != r.cur:
		r.cur, r.since = cur.K, now
	}
	switch used := p.Next - max(cur.Lo, 1); {
	case r.next != nil:
		err = s.advance(ctx, r, now)
	case used >= e.cfg.RotateEvents || (used > 0 && now.Sub(r.since) >= e.cfg.RotateInterval):
		if len(p.Range) < maxPartitions {
			err = s.rotateTo(ctx, r, cur.K+1, now)
		} else if now.Sub(r.capped) >= warnEvery {
			r.capped = now
			e.cfg.Logger.Warn("outbox partitions: old partitions wait to be dropped; new events stay in the current partition meanwhile",
				"partitions", len(p.Range), "max", maxPartitions)
		}
	}
	if err != nil || r.off {
		return err
	}
	for _, x := range p.Range {
		if x.Hi > cur.Lo {
			continue
		}
		if err := s.retire(ctx, r, x, now); err != nil {
			return err
		}
	}
	return nil
}

// rotateTo attaches partition k; advance moves new events there.
func (s *walSource) rotateTo(ctx context.Context, r *rotation, k int64, now time.Time) error {
	e := s.e
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	x, err := wal.Attach(sctx, e.pool, s.slot(), k)
	if err != nil {
		if isPrivilege(err) {
			r.off = true
			e.cfg.Logger.Error("outbox partitions: the relay's role may not rotate the table's partitions; they grow until it can: run the WAL relay as the table's owner",
				"table", e.cfg.Names.QTable, "err", err)
			return nil
		}
		return err
	}
	if r.nextWait, err = wal.TableLockers(sctx, e.pool, s.slot()); err != nil {
		return err
	}
	r.next, r.nextSince = &x, now
	return s.advance(ctx, r, now)
}

// advance moves new events to the partition attached last, once every
// statement that was running then has ended.
func (s *walSource) advance(ctx context.Context, r *rotation, now time.Time) error {
	e := s.e
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	running, err := wal.Running(sctx, e.pool, r.nextWait)
	if err != nil {
		return err
	}
	if running {
		if now.Sub(r.nextSince) > warnEvery {
			e.cfg.Logger.Warn("outbox partitions: a transaction open since the new partition was attached delays moving new events there",
				"partition", r.next.QName, "waiting", now.Sub(r.nextSince).Round(time.Second))
			r.nextSince = now
		}
		return nil
	}
	if err := wal.Advance(sctx, e.pool, s.slot(), *r.next); err != nil {
		return err
	}
	r.cur, r.since = r.next.K, now
	e.cfg.Logger.Info("outbox partitions: new events go to a new partition", "partition", r.next.QName)
	r.next, r.nextWait = nil, nil
	return nil
}

// retire takes one old partition a step further: wait until the
// transactions that wrote to it have ended and the slot is past them, then
// drop it if every event in it was delivered, or else compact it to the
// events waiting on the table path and look again later.
func (s *walSource) retire(ctx context.Context, r *rotation, x wal.Partition, now time.Time) error {
	e := s.e
	st := r.old[x.OID]
	if st == nil {
		st = &retiring{seen: now}
		r.old[x.OID] = st
	}
	if now.Sub(st.seen) < retireGrace || now.Before(st.next) {
		return nil
	}
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	if x.DetachPending {
		if err := wal.FinishDetach(sctx, e.pool, s.slot(), x); err != nil {
			return err
		}
		delete(r.old, x.OID)
		return s.dropDetached(ctx, x)
	}
	if !st.fenced {
		var err error
		if st.lockers == nil {
			if st.lockers, err = wal.Lockers(sctx, e.pool, x.OID); err != nil {
				return err
			}
		}
		running, err := wal.Running(sctx, e.pool, st.lockers)
		if err != nil || running {
			return err
		}
		if st.lsn, err = wal.CurrentLSN(sctx, e.pool); err != nil {
			return err
		}
		st.fenced = true
	}
	slot, err := wal.Inspect(sctx, e.pool, s.slot())
	if err != nil || slot.ConfirmedFlush < st.lsn {
		return err
	}
	// Reading the partition whole may take longer than a claim.
	lctx, lcancel := e.ddlCtx(ctx)
	left, err := wal.Unsettled(lctx, e.pool, x)
	lcancel()
	if err != nil {
		return err
	}
	if left == 0 {
		dctx, dcancel := context.WithTimeout(ctx, detachTimeout)
		err := wal.Detach(dctx, e.pool, s.slot(), x)
		dcancel()
		if err != nil {
			return err
		}
		delete(r.old, x.OID)
		return s.dropDetached(ctx, x)
	}
	// Failed events are usually retried and gone within seconds: compact
	// only a partition whose events stay on the table path.
	recheck := min(e.cfg.RotateInterval, compactRecheck)
	st.next = now.Add(recheck)
	if st.waiting.IsZero() {
		st.waiting = now
	}
	if st.compact || now.Sub(st.waiting) < e.cfg.RotateInterval {
		return nil
	}
	cctx, ccancel := e.ddlCtx(ctx)
	kept, err := wal.Compact(cctx, e.pool, s.slot(), x, compactLockWait)
	ccancel()
	if errors.Is(err, wal.ErrLockBusy) {
		e.cfg.Logger.Debug("outbox partitions: partition busy; compacting it later", "partition", x.QName)
		return nil
	}
	if err != nil {
		return err
	}
	st.compact = true
	e.cfg.Logger.Info("outbox partitions: partition compacted to the events waiting on the table path; dropped once they are delivered or deleted",
		"partition", x.QName, "events", kept)
	return nil
}

// dropDetached drops a partition detached by a retirement, or attaches it
// again if events were committed into it after the relay looked.
func (s *walSource) dropDetached(ctx context.Context, x wal.Partition) error {
	e := s.e
	sctx, cancel := e.ddlCtx(ctx)
	defer cancel()
	dropped, err := wal.DropDetached(sctx, e.pool, s.slot(), x)
	if err != nil {
		return err
	}
	if !dropped {
		e.cfg.Logger.Warn("outbox partitions: events were committed into a partition after it was retired; it is kept, and retired again later",
			"partition", x.QName)
		return nil
	}
	if m := e.cfg.Metrics; m != nil {
		m.PartitionsDropped.Inc()
	}
	e.cfg.Logger.Info("outbox partitions: partition of delivered events dropped", "partition", x.QName)
	return nil
}
