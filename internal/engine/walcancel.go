package engine

import (
	"context"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The WAL keeps a committed row's insert after the row is deleted: outbox
// cancel, replay cancel and discarded dead letters would still be
// published from it. Those operations raise the cancellations table's
// position in their transaction (store.Queries.CancelledLSN), and before a
// batch is published, its rows committed below that position are looked up
// in the table: those gone, or no longer the stream's (handed to the table
// path, processed), are settled without a publish. A batch whose rows all
// committed after the last cancel, the usual case, costs one small read.
//
// A cancel that commits while a batch is being published cannot stop it:
// as with the table source, an event already on its way is delivered.

// dropCancelled moves the batch's rows that were cancelled to p.skip.
func (s *walSource) dropCancelled(ctx context.Context, p *walPlan) error {
	e := s.e
	var at int64
	sctx, cancel := e.stmtCtx(ctx)
	err := e.pool.QueryRow(sctx, e.q.CancelledLSN).Scan(&at)
	cancel()
	if err != nil {
		return inPhase("read cancellations", err)
	}
	last := pglogrepl.LSN(at)
	var suspects [][16]byte
	xids := map[uint32]bool{}
	for _, r := range p.send {
		if r.lsn < last {
			suspects = append(suspects, r.ID)
			xids[r.xid] = true
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	// Looked up once their commits are visible: a row not yet visible is
	// not a row cancelled.
	if err := s.waitVisible(ctx, xids); err != nil {
		return err
	}
	sctx, cancel = e.stmtCtx(ctx)
	defer cancel()
	rows, err := e.pool.Query(sctx, e.q.StreamOwned, uuids(suspects))
	if err != nil {
		return inPhase("look up cancelled rows", err)
	}
	owned, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil {
		return inPhase("look up cancelled rows", err)
	}
	keep := make(map[[16]byte]bool, len(owned))
	for _, id := range owned {
		keep[id] = true
	}
	send := p.send[:0:0]
	for _, r := range p.send {
		if r.lsn < last && !keep[r.ID] {
			e.cfg.Logger.Debug("outbox WAL source: event cancelled, handed over or published already; not published from the WAL",
				"event_id", r.ID, "event_type", r.EventType)
			p.skip = append(p.skip, r)
			continue
		}
		send = append(send, r)
	}
	p.send = send
	return nil
}
