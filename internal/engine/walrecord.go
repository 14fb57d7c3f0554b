package engine

import (
	"context"
	"sync"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

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
// carrying every deletion queued while the previous one ran. Under a light
// stream each batch holds a transaction or two, and a round trip per batch
// would bound the loop; merged, the round trips are per burst instead.
type deleter struct {
	s  *walSource
	mu sync.Mutex
	// changed is signalled when running turns false or the queue drains.
	changed *sync.Cond
	queue   []*deletion
	queued  int // ids in queue
	running bool
	err     error // the first failure; the stream then ends and reopens
}

func newDeleter(s *walSource) *deleter {
	d := &deleter{s: s}
	d.changed = sync.NewCond(&d.mu)
	return d
}

// deleterMax is how many rows (in BatchSize units) may wait to be deleted:
// past it the stream waits, so a slow database slows the relay instead of
// letting unsettled work pile up.
const deleterMax = 8

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
	if !d.running {
		d.running = true
		go d.run(ctx, st)
	}
	return nil
}

// run deletes what is queued, merged, until the queue is empty.
func (d *deleter) run(ctx context.Context, st *wal.Stream) {
	for {
		d.mu.Lock()
		jobs := d.queue
		d.queue, d.queued = nil, 0
		if len(jobs) == 0 || d.err != nil {
			d.running = false
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
	for d.running {
		d.changed.Wait()
	}
	err := d.err
	d.err = nil
	return err
}

// delete deletes j's rows once their transactions are visible, without a
// synchronous commit, then acknowledges j's transactions. If PostgreSQL
// loses such a commit in a crash, the rows come back as pending rows of
// events already delivered: relayed again at worst, which at-least-once
// allows.
func (s *walSource) delete(ctx context.Context, st *wal.Stream, j *deletion) error {
	if len(j.ids) > 0 {
		xids := make(map[uint32]bool, len(j.xids))
		for _, x := range j.xids {
			xids[x] = true
		}
		if err := s.waitVisible(ctx, xids); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
		b.Queue(s.qd.MarkPublished, j.ids)
		b.Queue("COMMIT")
		if err := s.send(ctx, b); err != nil {
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
