package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ident"
	"github.com/pgoutbox/outbox/internal/store"
)

// claimSQL is the claim query each design's relay runs, with its batch-size
// parameter(s): pgoutbox's exactly as internal/store builds it (with the
// given floor), the baseline's verbatim.
func claimSQL(design, schema string, floor int64) (string, []any, error) {
	switch design {
	case designOurs:
		n, err := ident.New(schema, "")
		if err != nil {
			return "", nil, err
		}
		return store.New(n, false).Claim, []any{100, floor}, nil
	case designBaseline:
		return baselineClaimSQL, []any{5, 100}, nil
	}
	return "", nil, fmt.Errorf("design %q", design)
}

// claimStats times the claim query alone, samples times, each in its own
// transaction that is rolled back, so every sample sees the same table.
type claimStats struct {
	P50, P99 float64 // ms
	Rows     int
}

// claimLatency times the claim with floor 0, as a relay's rescan runs it
// (ordinary claims start at the relay's floor: claimLatencyAt).
func (h *harness) claimLatency(ctx context.Context, design, schema string, samples int) (claimStats, error) {
	return h.claimLatencyAt(ctx, design, schema, samples, 0)
}

func (h *harness) claimLatencyAt(ctx context.Context, design, schema string, samples int, floor int64) (claimStats, error) {
	var st claimStats
	sql, args, err := claimSQL(design, schema, floor)
	if err != nil {
		return st, err
	}
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return st, err
	}
	defer conn.Release()
	ms := make([]float64, 0, samples)
	for i := range samples + 5 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return st, err
		}
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", schema); err != nil {
			tx.Rollback(ctx)
			return st, err
		}
		start := time.Now()
		rows, err := tx.Query(ctx, sql, args...)
		n := 0
		if err == nil {
			for rows.Next() {
				n++
			}
			rows.Close()
			err = rows.Err()
		}
		d := time.Since(start)
		tx.Rollback(ctx)
		if err != nil {
			return st, fmt.Errorf("claim: %w", err)
		}
		if i >= 5 { // the first few warm the plan cache
			ms = append(ms, float64(d.Microseconds())/1000)
		}
		st.Rows = n
	}
	sort.Float64s(ms)
	st.P50, st.P99 = percentile(ms, 50), percentile(ms, 99)
	return st, nil
}

// explainClaim returns EXPLAIN (ANALYZE, BUFFERS) of the claim query.
func (h *harness) explainClaim(ctx context.Context, design, schema string) (string, error) {
	sql, args, err := claimSQL(design, schema, 0)
	if err != nil {
		return "", err
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", schema); err != nil {
		return "", err
	}
	// Run it once first, as a relay does all day long, so the plan shows the
	// steady state rather than a cold cache.
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return "", err
	}
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}
