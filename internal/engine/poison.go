package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// A row whose payload kills the relay (it runs out of memory reading or
// publishing it) would otherwise be claimed again by every restart, never
// reaching an outcome, with its attempts at 0, while everything behind it
// waits. So the attempt of a large row is counted when it is fetched, in a
// statement committed before its payload is read: a relay that dies
// holding it has counted the attempt, and a row claimed again with
// MaxAttempts already counted is dead-lettered without its payload being
// read. Only rows whose stored payload passes poisonAbove are counted this
// way (a small row cannot exhaust the relay's memory): a committed write per
// claim would cost a WAL flush on the hot path, and the commit and relock
// it takes cost two round trips, paid only by batches that hold a large
// row. The count is given back (Refund) when the row did not fail
// (published, left untouched, destination down), so attempts still counts
// failures only and an outage burns none.

// poisonAbove is the stored payload size above which a row's attempt is
// counted at fetch.
const poisonAbove = 1 << 20

// deadOnArrival dead-letters, without reading their payloads, the large
// rows claimed with every attempt already counted: each earlier claim of
// theirs ended without an outcome.
func (e *Engine) deadOnArrival(rows []*Row) {
	for _, r := range rows {
		if r.Payload == nil && r.stored > poisonAbove && r.Attempt > e.cfg.MaxAttempts {
			r.Bad = fmt.Errorf("claimed %d times without an outcome (the relay stopped while holding it, perhaps for lack of memory: its payload is %d bytes as stored); not read again",
				r.Attempt-1, r.stored)
			r.Payload = []byte{}
			r.counted = true // the attempts are counted already
		}
	}
}

// countAtFetch commits an attempt for each row of big, then locks again
// the rows of the batch, and returns the batch up to its first row another
// relay took in between (an ordered batch stays whole up to the cut).
func (l *tableLease) countAtFetch(ctx context.Context, rows, big []*Row) ([]*Row, error) {
	e := l.e
	bigIDs := make([][16]byte, len(big))
	for i, r := range big {
		bigIDs[i] = r.ID
	}
	ids := make([][16]byte, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	b := &pgx.Batch{}
	b.Queue(store.CustomPlans)
	b.Queue(e.q.CountAttempt, uuids(bigIDs))
	b.Queue("COMMIT")
	l.begin(b)
	b.Queue(store.CustomPlans)
	b.Queue(e.q.Relock, uuids(ids))
	br := l.conn.SendBatch(ctx, b)
	defer br.Close()
	for range 6 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("count attempts at fetch: %w", err)
		}
	}
	for _, r := range big {
		r.counted = true
	}
	q, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("relock: %w", err)
	}
	held := make(map[[16]byte]bool, len(rows))
	var id [16]byte
	if _, err := pgx.ForEachRow(q, []any{&id}, func() error { held[id] = true; return nil }); err != nil {
		return nil, fmt.Errorf("relock: %w", err)
	}
	for i, r := range rows {
		if !held[r.ID] {
			return rows[:i], nil
		}
	}
	return rows, nil
}

// bigRows are the rows whose payload is still to be read and whose attempt
// is counted at fetch.
func bigRows(rows []*Row) []*Row {
	var out []*Row
	for _, r := range rows {
		if r.Payload == nil && r.stored > poisonAbove {
			out = append(out, r)
		}
	}
	return out
}

// anyCounted reports whether a row's attempt was counted at fetch, so the
// batch must be recorded even if nothing was published or failed.
func anyCounted(rows []*Row) bool {
	for _, r := range rows {
		if r.counted {
			return true
		}
	}
	return false
}
