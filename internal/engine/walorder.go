package engine

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// checkOrder (ordered mode) finds the aggregates of the batch that have an
// event on the table path (failing, held, dead, scheduled, re-queued:
// retry_after or dead_at set) and parks the batch's events of those
// aggregates behind it, in commit order, instead of publishing them. An
// aggregate is thus on one path at a time, and never inverted across them.
//
// A batch event already handed to the table path (a stream reopened after
// a crash offers again what the last one settled) is the table path's:
// it is left as it is. Parking it again would give it a new seq, behind
// later events of its aggregate handed over since, and the table path
// would then publish those first, or wait forever on events parked behind
// it with a lower seq.
func (s *walSource) checkOrder(ctx context.Context, p *walPlan) error {
	e := s.e
	seen := map[aggKey]bool{}
	var typs, aggs []string
	ids := make([][16]byte, 0, len(p.send))
	for _, r := range p.send {
		ids = append(ids, r.ID)
		k := aggKey{r.AggregateType, r.AggregateID}
		if !seen[k] {
			seen[k] = true
			typs, aggs = append(typs, k.typ), append(aggs, k.id)
		}
	}
	sctx, cancel := e.stmtCtx(ctx)
	defer cancel()
	// The first table-path event of each aggregate and the batch's events
	// already handed over (store.StreamQueries.Heads). One the housekeeping
	// parked behind a table-path event is parked again, behind its
	// aggregate's first.
	blocked := map[aggKey][16]byte{}
	handed := map[[16]byte]bool{}
	// Planned for these values: a plan cached while the table was small
	// may read every row (see plans.go).
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(store.CustomPlans)
	b.Queue(s.qs.Heads, typs, aggs, uuids(ids)).Query(func(rs pgx.Rows) error {
		var k aggKey
		var id [16]byte
		var head bool
		_, err := pgx.ForEachRow(rs, []any{&k.typ, &k.id, &id, &head}, func() error {
			if head {
				blocked[k] = id
			} else {
				handed[id] = true
			}
			return nil
		})
		return err
	})
	b.Queue("COMMIT")
	if err := e.pool.SendBatch(sctx, b).Close(); err != nil {
		return inPhase("order check", err)
	}
	if len(blocked) == 0 {
		s.markFollowers(p.send)
		return nil
	}
	send := p.send[:0:0]
	for _, r := range p.send {
		k := aggKey{r.AggregateType, r.AggregateID}
		head, ok := blocked[k]
		switch {
		case !ok:
			send = append(send, r)
		case handed[r.ID]:
			p.skip = append(p.skip, r) // the table path publishes it
		default:
			p.holds = append(p.holds, hold{row: r, holder: head})
		}
	}
	p.send = send
	s.markFollowers(p.send)
	return nil
}

// markFollowers flags every event after the first of its aggregate in the
// batch, so the publish goes out one event per aggregate per round and
// stops an aggregate's run at its first unconfirmed event.
func (s *walSource) markFollowers(rows []*Row) {
	seen := map[aggKey]bool{}
	for _, r := range rows {
		k := aggKey{r.AggregateType, r.AggregateID}
		r.Follower = seen[k]
		seen[k] = true
	}
}
