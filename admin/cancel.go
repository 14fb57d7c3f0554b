package admin

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CancelResult says what Cancel did with each id it was given.
type CancelResult struct {
	// Cancelled are the events deleted before they were published
	// (pending, waiting for a retry, held, or dead letters).
	Cancelled []uuid.UUID `json:"cancelled"`
	// Published are the ids already published (still in the outbox table or
	// archived): a message cannot be taken back from the broker.
	Published []uuid.UUID `json:"published"`
	// Unknown are the ids of no event (never written, or cleaned up).
	Unknown []uuid.UUID `json:"unknown"`
	// Released counts the events a cancelled event held back in ordered
	// mode; they are pending again.
	Released int64 `json:"released"`
}

// Cancel deletes the events among ids that have not been published, in one
// statement, and releases the events each one held back (ordered mode), as
// Discard does for dead letters, so the aggregate moves on. An event a relay
// is publishing at that moment is waited for: if the broker confirms it, it
// is reported as published, otherwise it is cancelled.
func (a *Admin) Cancel(ctx context.Context, ids ...uuid.UUID) (CancelResult, error) {
	res := CancelResult{Cancelled: []uuid.UUID{}, Published: []uuid.UUID{}, Unknown: []uuid.UUID{}}
	if len(ids) == 0 {
		return res, errors.New("admin: Cancel: no event id given")
	}
	ctx, cancel := a.bound(ctx)
	defer cancel()
	_, rq, err := a.deleting(ctx)
	if err != nil {
		return res, a.fail(ctx, "cancel", err)
	}
	var gone []uuid.UUID
	if err := a.pool.QueryRow(ctx, rq.CancelEvents, uuidArgs(ids)).Scan(&gone, &res.Released); err != nil {
		return res, a.fail(ctx, "cancel", err)
	}
	rows, err := a.pool.Query(ctx, rq.Published, uuidArgs(ids))
	if err != nil {
		return res, a.fail(ctx, "cancel", err)
	}
	published, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return res, a.fail(ctx, "cancel", err)
	}
	in := func(set []uuid.UUID) map[uuid.UUID]bool {
		m := make(map[uuid.UUID]bool, len(set))
		for _, id := range set {
			m[id] = true
		}
		return m
	}
	isGone, isPublished, seen := in(gone), in(published), map[uuid.UUID]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case isGone[id]:
			res.Cancelled = append(res.Cancelled, id)
		case isPublished[id]:
			res.Published = append(res.Published, id)
		default:
			res.Unknown = append(res.Unknown, id)
		}
	}
	return res, nil
}
