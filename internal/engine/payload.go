package engine

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/store"
)

// A batch's payloads and headers are held in memory from the claim until
// the batch is recorded, so the claim keeps a batch within MaxBatchBytes of
// them: rows in seq order until their bodies pass the budget, at least one.
// The claim statement returns small bodies with their rows and, for larger
// ones, only the size PostgreSQL stores (store.InlinePayloadMax); those are
// read here, in groups whose stored sizes fit what is left of the budget,
// and the batch ends at the first row that does not fit. The rows left out
// stay locked, untouched, until the batch ends, and their payloads are never
// detoasted nor sent. Cutting a suffix in seq order keeps an ordered batch's
// runs whole up to the cut.
//
// The stored size is after compression: a payload is counted at its real
// size once read, and the budget can be passed by the last row read (at
// most one group's compression ratio).

// fitBudget reads the payloads the claim left out, within the budget, and
// returns the rows that make the batch; cut reports rows left out.
func (l *tableLease) fitBudget(ctx context.Context, rows []*Row) (kept []*Row, cut bool, err error) {
	budget := l.e.cfg.MaxBatchBytes
	l.e.deadOnArrival(rows)
	used := 0
	for i := 0; i < len(rows); {
		r := rows[i]
		if r.Payload != nil {
			if used += r.bodyBytes(); used > budget && i > 0 {
				return rows[:i], true, nil
			}
			i++
			continue
		}
		// A group of left-out payloads whose stored sizes fit the rest of
		// the budget (at least one row).
		j, stored := i, 0
		for j < len(rows) && rows[j].Payload == nil && (j == i || used+stored+rows[j].stored <= budget) {
			stored += rows[j].stored
			j++
		}
		if i > 0 && used+rows[i].stored > budget {
			return rows[:i], true, nil
		}
		if big := bigRows(rows[i:j]); len(big) > 0 {
			held, err := l.countAtFetch(ctx, rows, big)
			if err != nil {
				return nil, false, err
			}
			if len(held) < len(rows) { // another relay took a row meanwhile
				rows, j = held, min(j, len(held))
				if i >= j {
					return rows, true, nil
				}
			}
		}
		if err := l.readPayloads(ctx, rows[i:j]); err != nil {
			return nil, false, err
		}
		for ; i < j; i++ {
			if used += rows[i].bodyBytes(); used > budget && i > 0 {
				for _, r := range rows[i:j] {
					r.Payload, r.Headers = nil, nil // not in the batch: let them go
				}
				return rows[:i], true, nil
			}
		}
	}
	return rows, false, nil
}

// readPayloads reads the payloads and headers of rows in one statement.
func (l *tableLease) readPayloads(ctx context.Context, rows []*Row) error {
	ids := make([][16]byte, len(rows))
	at := make(map[[16]byte]*Row, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
		at[r.ID] = r
	}
	b := &pgx.Batch{}
	b.Queue(store.CustomPlans)
	b.Queue(l.e.q.Payloads, uuids(ids))
	br := l.conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("payloads: %w", err)
	}
	q, err := br.Query()
	if err != nil {
		return fmt.Errorf("payloads: %w", err)
	}
	var (
		id      [16]byte
		payload []byte
		headers []byte
	)
	_, err = pgx.ForEachRow(q, []any{&id, &payload, &headers}, func() error {
		if r := at[id]; r != nil {
			r.Payload = payload
			r.readHeaders(headers)
		}
		payload, headers = nil, nil // fresh buffers per row: pgx reuses a scanned slice
		return nil
	})
	if err != nil {
		return fmt.Errorf("payloads: %w", err)
	}
	for _, r := range rows {
		if r.Payload == nil {
			return fmt.Errorf("payloads: row %x not found", r.ID)
		}
	}
	return nil
}
